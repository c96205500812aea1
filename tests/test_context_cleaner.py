"""The context cleaner (Spark's ContextCleaner): once the driver can no longer reach a
shuffle's ShuffleDependency, its MapStatuses, files and the task processes' descriptors of
them go, locally and on a cluster's executors; a persisted RDD's cached blocks go with the
RDD, a broadcast's file and loaded copies with the Broadcast; nothing still referenced is
touched, and spark.cleaner.referenceTracking=false keeps everything."""
from __future__ import annotations

import contextlib
import gc
import os
import tempfile
import time
from typing import Iterator

import psutil

import ember
from ember.context_cleaner import ContextCleaner
from ember.deploy.local_cluster import LocalCluster


def _shuffled(sc: ember.SparkContext):
    """A shuffle whose map outputs are too big to travel inline: they are files."""
    return sc.parallelize(range(2000), 4).map(lambda i: (i % 8, b"x" * 200)) \
        .partitionBy(4)


def _files(root: str, shuffle_id: int) -> list[str]:
    prefix = f"shuffle_{shuffle_id}_"
    return [n for _d, _s, names in os.walk(root) for n in names if n.startswith(prefix)]


def _deleted_shuffle_fds() -> list[str]:
    """Descriptors this process's children hold on deleted shuffle files."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            found += [f.path for f in p.open_files()
                      if "shuffle_" in f.path and not os.path.exists(f.path)]
        except psutil.Error:
            pass
    return found


def _until(predicate, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gc.collect()
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def _conf(tracking: bool = True) -> ember.SparkConf:
    return ember.SparkConf().set("spark.ui.enabled", "false") \
        .set("spark.cleaner.referenceTracking", str(tracking).lower())


def test_an_unreachable_shuffle_is_removed_and_a_reachable_one_kept(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf())
    rt = sc.runtime
    gone, kept = _shuffled(sc), _shuffled(sc)
    assert gone.count() == kept.count() == 2000
    gone_id, kept_id = gone.shuffle_id, kept.shuffle_id
    assert _files(rt.local_dir, gone_id) and _files(rt.local_dir, kept_id)
    del gone
    assert _until(lambda: not _files(rt.local_dir, gone_id)
                  and not rt.map_output_tracker.contains(gone_id))
    assert _until(lambda: not _deleted_shuffle_fds())
    assert rt.map_output_tracker.contains(kept_id) and _files(rt.local_dir, kept_id)
    assert kept.mapValues(len).values().sum() == 2000 * 200
    # later shuffles run as before in the same task processes
    assert sorted(_shuffled(sc).keys().distinct().collect()) == list(range(8))


def test_reference_tracking_off_keeps_every_shuffle(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf(tracking=False))
    rt = sc.runtime
    assert rt.cleaner is None
    r = _shuffled(sc)
    r.count()
    shuffle_id = r.shuffle_id
    del r
    gc.collect()
    time.sleep(0.3)
    assert rt.map_output_tracker.contains(shuffle_id) and _files(rt.local_dir, shuffle_id)


def test_an_unreachable_cached_rdd_loses_its_blocks(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf())
    master = sc.runtime.block_manager_master
    cached = sc.parallelize(range(100), 4).map(lambda x: x * 2).cache()
    kept = sc.parallelize(range(10), 2).map(lambda x: x).persist()
    assert cached.sum() == 9900 and kept.count() == 10
    cached_id, kept_id = cached.id(), kept.id()

    def blocks(rdd_id: int) -> list[str]:
        with master._lock:
            return [n for n in master._blocks if n.startswith(f"rdd_{rdd_id}_")]
    assert len(blocks(cached_id)) == 4 and len(blocks(kept_id)) == 2
    del cached
    assert _until(lambda: not blocks(cached_id))
    assert len(blocks(kept_id)) == 2


@contextlib.contextmanager
def _on_a_cluster() -> Iterator[tuple[ember.SparkContext, str]]:
    """A context on a one-worker local cluster whose files all live under the yielded
    directory."""
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(tmp, workers=1, cores=2, memory="1g",
                         conf={"spark.local.dir": tmp}) as cluster:
        sc = ember.SparkContext(cluster.url, "cleaner", conf=_conf())
        try:
            yield sc, tmp
        finally:
            sc.stop()


def test_a_cluster_executor_deletes_the_files_of_an_unreachable_shuffle():
    with _on_a_cluster() as (sc, tmp):
        r = _shuffled(sc)
        assert r.count() == 2000
        shuffle_id = r.shuffle_id
        assert _files(tmp, shuffle_id)
        del r
        assert _until(lambda: not _files(tmp, shuffle_id))
        assert _until(lambda: not _deleted_shuffle_fds())
        assert _shuffled(sc).count() == 2000


class _Runtime:
    stopped = False

    def __init__(self) -> None:
        self.removed: list[int] = []

    def remove_shuffle(self, shuffle_id: int) -> None:
        if shuffle_id == 1:
            raise OSError("disk gone")
        self.removed.append(shuffle_id)


class _Dep:
    def __init__(self, shuffle_id: int) -> None:
        self.shuffle_id = shuffle_id


def test_a_failed_clean_up_does_not_stop_the_cleaner_and_stop_ends_it():
    runtime = _Runtime()
    cleaner = ContextCleaner(runtime, periodic_gc_s=0.05)
    cleaner.start()
    for i in (1, 2):
        cleaner.register_shuffle_for_cleanup(_Dep(i))    # unreachable at once
    assert _until(lambda: runtime.removed == [2], timeout=5)
    thread = cleaner._thread
    cleaner.stop()
    assert not thread.is_alive()


def test_an_unreachable_broadcast_loses_its_file_and_loaded_copies(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf())
    gone, kept = sc.broadcast(list(range(1000))), sc.broadcast([1])
    assert _sizes(sc, gone, kept) == [1001] * 4
    gone_id, gone_path, kept_path = gone._bid, gone._path, kept._path
    assert os.path.exists(gone_path) and os.path.exists(kept_path)

    def loaded(_):
        from ember import broadcast
        yield gone_id in broadcast._broadcast_registry
    del gone
    assert _until(lambda: not os.path.exists(gone_path))
    assert _until(lambda: not any(sc.parallelize(range(8), 8).mapPartitions(loaded).collect()))
    assert os.path.exists(kept_path) and _sizes(sc, kept) == [1] * 4


def _sizes(sc: ember.SparkContext, *broadcasts) -> list[int]:
    return sc.parallelize(range(4), 2).map(lambda i: sum(len(b.value) for b in broadcasts)) \
        .collect()


def test_clean_checkpoints_deletes_an_unreachable_rdds_checkpoint_only_when_asked(
        fresh_sc, tmp_path):
    for clean in (True, False):
        sc = fresh_sc("local[2]", conf=_conf().set(
            "spark.cleaner.referenceTracking.cleanCheckpoints", str(clean).lower()))
        sc.setCheckpointDir(str(tmp_path / str(clean)))
        rdd = sc.parallelize(range(10), 2).map(lambda x: x + 1)
        rdd.checkpoint()
        assert rdd.sum() == 55 and rdd.isCheckpointed()
        path = rdd.getCheckpointFile()[len("file:"):]
        assert os.listdir(path)
        del rdd
        if clean:
            assert _until(lambda: not os.path.exists(path))
        else:
            gc.collect()
            time.sleep(0.3)
            assert os.listdir(path)
        sc.stop()


def _slice_files(root: str, bids: list[int]) -> list[str]:
    names = {f"broadcast_{bid}" for bid in bids}
    return [os.path.join(d, n) for d, _s, found in os.walk(root) for n in found if n in names]


def _big_parallelized(sc: ember.SparkContext):
    """Two slices of 10,000 pairs (over SLICE_FILE_BYTES pickled) and one of 10,000 zeros
    (under it)."""
    from ember.rdd_sources import SliceFile
    rdd = sc.parallelize([(i, str(i).rjust(20)) for i in range(20_000)] + [(0, "")] * 10_000, 3) \
        .cache()
    slices = [p.data for p in rdd.partitions()]
    assert [type(s) for s in slices] == [SliceFile, SliceFile, bytes]
    return rdd, [s.bid for s in slices[:2]]


def test_a_large_parallelized_slice_is_a_file_read_once_and_removed_with_its_rdd(fresh_sc):
    """A slice too large to travel in each task is a file the driver wrote (a broadcast's
    place); a task reads it when it computes the partition, not once it is cached, and the
    file goes with the RDD."""
    sc = fresh_sc("local[2]", conf=_conf())
    rdd, _bids = _big_parallelized(sc)
    kept, _kept_bids = _big_parallelized(sc)
    expected = sum(range(20_000))
    assert rdd.keys().sum() == expected and rdd.count() == 30_000
    paths = [p.data.path for p in rdd.partitions()[:2]]
    for p in paths:
        os.unlink(p)
    assert rdd.keys().sum() == expected
    kept_paths = [p.data.path for p in kept.partitions()[:2]]
    assert kept.values().map(len).sum() == 20 * 20_000
    del kept
    assert _until(lambda: not any(os.path.exists(p) for p in kept_paths))
    assert rdd.count() == 30_000


def test_a_cluster_executor_fetches_a_slice_file_once_and_deletes_it_with_its_rdd():
    with _on_a_cluster() as (sc, tmp):
        rdd, bids = _big_parallelized(sc)
        assert rdd.keys().sum() == sum(range(20_000))
        driver_paths = [p.data.path for p in rdd.partitions()[:2]]
        fetched = [p for p in _slice_files(tmp, bids) if p not in driver_paths]
        assert len(fetched) == 2
        assert rdd.values().map(len).sum() == 20 * 20_000
        del rdd
        assert _until(lambda: not _slice_files(tmp, bids))
