"""The driver runtime end to end in local mode: real task processes, real shuffle files."""
from __future__ import annotations

import collections
import glob
import io
import operator
import os
import random
import threading
import time

import psutil
import pytest

from ember import AccumulatorParam, SparkConf, SparkContext, StorageLevel, TaskContext
from ember.errors import JobCancelledException, SparkException
from ember.scheduler.progress import ConsoleProgressBar, render
from ember.status import SparkStageInfo
from tests.helpers.probes import Probe

pytestmark = pytest.mark.timeout(120)


def test_closure_is_deserialized_once_per_stage_per_process(sc):
    probe = Probe("stage-closure")
    out = sc.parallelize(range(40), 20).map(lambda x: probe.loads()).collect()
    per_process = {}
    for pid, n in out:
        per_process[pid] = max(per_process.get(pid, 0), n)
    assert set(per_process.values()) == {1}


def test_finished_stages_are_forgotten_with_each_process_next_task(sc):
    """A job's end writes nothing to the task processes (that would wake them between the
    last task and the caller getting its result): a process is told to drop a finished
    stage's closure in the same write as its next task."""
    pool = sc.runtime.scheduler_backend.pool
    assert sc.parallelize(range(4), 2).count() == 4
    first = {tuple(s.forgotten) for s in pool.slots if s.forgotten}
    assert first and all(not s.seen for s in pool.slots)
    assert sc.parallelize(range(40), 20).map(lambda x: x * 2).sum() == 1560
    after = [tuple(s.forgotten) for s in pool.slots]
    second = {f for f in after if f not in first}
    assert len(second) == 1 and len(next(iter(second))) == 1   # only the second job's stage
    assert not set(next(iter(second))) & {sid for f in first for sid in f}


def test_broadcast_reaches_each_process_once(sc):
    bc = sc.broadcast(Probe("bc-once"))
    first = sc.parallelize(range(20), 20).map(lambda x: bc.value.loads()).collect()
    second = sc.parallelize(range(20), 20).map(lambda x: bc.value.loads()).collect()
    assert {n for _pid, n in first + second} == {1}
    bc.destroy()


def test_cpu_bound_tasks_use_separate_processes(sc):
    pids = set(sc.parallelize(range(8), 8).map(lambda x: (time.sleep(0.05), os.getpid())[1])
               .collect())
    assert len(pids) == 2 and os.getpid() not in pids


def test_user_exception_carries_remote_type_message_and_traceback(sc):
    def boom(x):
        if x == 7:
            raise KeyError("missing-key-7")
        return x
    with pytest.raises(KeyError) as info:
        sc.parallelize(range(10), 2).map(boom).count()
    err = info.value
    assert isinstance(err, SparkException)
    assert err.exc_type == "KeyError" and "missing-key-7" in err.exc_message
    assert "in boom" in err.traceback_text and "test_engine.py" in err.traceback_text
    assert "Job aborted due to stage failure" in str(err)
    assert sc.parallelize(range(10), 2).count() == 10


def test_remote_types_whose_own_constructor_differs_fail_only_the_job(sc):
    """UnicodeDecodeError's __init__ takes five arguments and ExceptionGroup's __new__ must
    run: rebuilding either on the driver raised inside the scheduler's handler, which shut
    the SparkContext down and reported the job as cancelled."""
    def decode(x):
        return b"\xff".decode("utf-8")

    def group(x):
        raise ExceptionGroup("two", [ValueError(1), KeyError(2)])
    with pytest.raises(UnicodeDecodeError) as info:
        sc.parallelize([1], 1).map(decode).collect()
    assert "invalid start byte" in info.value.exc_message
    with pytest.raises(SparkException) as info:
        sc.parallelize([1], 1).map(group).collect()
    assert info.value.exc_type == "ExceptionGroup" and "Job aborted" in str(info.value)
    assert sc.parallelize(range(10), 2).count() == 10


def test_dead_task_process_is_replaced_and_task_retried(sc, tmp_path):
    marker = tmp_path / "crashed"

    def crash_once(x):
        if x == 3 and not marker.exists():
            marker.write_text("x")
            os._exit(9)
        return x
    assert sc.parallelize(range(10), 5).map(crash_once).sum() == 45
    assert marker.exists()
    assert sc.parallelize(range(4), 2).count() == 4


def test_segfault_and_sigkill_are_retried(sc, tmp_path):
    import signal
    marker = tmp_path / "killed"

    def die_once(x):
        if x == 0 and not marker.exists():
            marker.write_text("x")
            os.kill(os.getpid(), signal.SIGKILL)
        if x == 1 and not (tmp_path / "segv").exists():
            (tmp_path / "segv").write_text("x")
            import ctypes
            ctypes.string_at(0)
        return x
    assert sorted(sc.parallelize(range(4), 4).map(die_once).collect()) == [0, 1, 2, 3]


def test_a_crash_carries_its_faulthandler_stack_when_enabled(fresh_sc):
    """spark.python.worker.faulthandler.enabled, as PySpark: a task process that segfaults
    has faulthandler write where it was, and the task's error carries it."""
    conf = SparkConf().set("spark.python.worker.faulthandler.enabled", "true")
    sc = fresh_sc("local[2]", conf=conf)

    def segfault(x):
        import ctypes
        return ctypes.string_at(0)
    with pytest.raises(SparkException, match=r"(?s)Python worker exited unexpectedly "
                       r"\(crashed\): exit code -11.*Segmentation fault.*in segfault"):
        sc.parallelize([1], 1).map(segfault).count()
    assert sc.parallelize(range(4), 2).sum() == 6


def test_task_that_always_kills_its_process_fails_the_job_without_hanging(sc):
    start = time.time()
    with pytest.raises(SparkException, match="Python worker exited unexpectedly"):
        sc.parallelize(range(2), 2).map(lambda x: os._exit(1) if x == 1 else x).count()
    assert time.time() - start < 30
    assert sc.parallelize(range(3)).count() == 3


def test_local_n_f_retries_failed_tasks(fresh_sc, tmp_path):
    sc = fresh_sc("local[2,3]")
    marker = tmp_path / "failed-once"
    acc = sc.accumulator(0)

    def flaky(x):
        acc.add(1)
        if x == 2 and not marker.exists():
            marker.write_text("x")
            raise RuntimeError("transient")
        return x
    assert sc.parallelize(range(5), 5).map(flaky).sum() == 10
    assert acc.value == 5, "updates of the failed attempt must not count"


def test_local_mode_does_not_retry_user_errors(fresh_sc, tmp_path):
    sc = fresh_sc("local[2]")
    calls = tmp_path / "calls"
    calls.mkdir()

    def fail(x):
        (calls / f"{x}-{time.time_ns()}").write_text("")
        raise RuntimeError("no retry")
    with pytest.raises(RuntimeError):
        sc.parallelize([1], 1).map(fail).count()
    assert len(list(calls.iterdir())) == 1


def test_lost_shuffle_output_is_recomputed_through_fetch_failed(sc):
    # big enough that map outputs go to files (small ones travel inside their MapStatus)
    pairs = sc.parallelize(range(20000), 4).map(lambda x: (x % 1000, x))
    summed = pairs.reduceByKey(lambda a, b: a + b)
    expected = sorted(summed.collect())
    files = glob.glob(os.path.join(sc.runtime.local_dir, "shuffle_*.data"))
    assert files
    for f in files:
        os.unlink(f)
    assert sorted(summed.collect()) == expected


def test_stages_are_skipped_when_shuffle_output_exists(sc):
    counts = sc.parallelize(range(1000), 4).map(lambda x: (x % 3, 1)).reduceByKey(lambda a, b: a + b)
    counts.collect()
    tracker = sc.statusTracker()
    before = len(sc.runtime.status_store.stages)
    counts.count()
    jobs = sorted(sc.runtime.status_store.jobs)
    last = tracker.getJobInfo(jobs[-1])
    assert len(last.stageIds) == 2
    submitted = [sid for sid in last.stageIds
                 if sc.runtime.status_store.stages[sid].status != "ACTIVE"]
    assert len(submitted) == 1, "the map stage is skipped"
    assert len(sc.runtime.status_store.stages) >= before


def test_cancel_job_group_kills_running_tasks_promptly(sc):
    errors = []

    def run():
        sc.setJobGroup("slow-group", "sleepers")
        try:
            sc.parallelize(range(4), 4).map(lambda x: time.sleep(60)).count()
        except Exception as e:
            errors.append(e)
    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 10
    while time.time() < deadline and not sc.statusTracker().getActiveStageIds():
        time.sleep(0.05)
    time.sleep(0.3)
    start = time.time()
    sc.cancelJobGroup("slow-group")
    t.join(15)
    assert not t.is_alive()
    assert time.time() - start < 5
    assert isinstance(errors[0], JobCancelledException)
    assert "part of cancelled job group slow-group" in str(errors[0])
    assert sc.parallelize(range(3), 2).count() == 3


def test_fair_scheduler_pools_share_slots(fresh_sc, tmp_path):
    xml = tmp_path / "fair.xml"
    xml.write_text("<allocations><pool name='a'><weight>1</weight></pool>"
                   "<pool name='b'><weight>1</weight></pool></allocations>")
    conf = SparkConf().set("spark.scheduler.mode", "FAIR") \
        .set("spark.scheduler.allocation.file", str(xml))
    sc = fresh_sc("local[2]", conf=conf)
    starts: dict[str, list[float]] = {}

    def run(pool, n):
        sc.setLocalProperty("spark.scheduler.pool", pool)
        got = sc.parallelize(range(n), n).map(
            lambda x: (TaskContext.get().getLocalProperty("spark.scheduler.pool"),
                       time.time(), time.sleep(0.15))[:2]).collect()
        starts[pool] = sorted(t for p, t in got if p == pool)
    # job a's 16 tasks take 8 waves of 0.15 s on the 2 slots: under FIFO job b (submitted
    # 0.05 s after it) would start after a's last wave, ~1 s later, a margin a slow host keeps
    threads = [threading.Thread(target=run, args=(p, n)) for p, n in (("a", 16), ("b", 8))]
    threads[0].start()
    time.sleep(0.05)
    threads[1].start()
    for t in threads:
        t.join(60)
    assert len(starts["a"]) == 16 and len(starts["b"]) == 8
    # under FAIR the second job starts before the first one has launched all its tasks
    assert starts["b"][0] < starts["a"][-1]


def test_cache_locality_and_lru_eviction(fresh_sc):
    conf = SparkConf().set("spark.ember.storage.memory", "4m")
    sc = fresh_sc("local[2]", conf=conf)
    big = sc.parallelize(range(8), 8).flatMap(lambda i: [float(i)] * 60000).cache()
    assert big.count() == 480000
    cached = sc.runtime.block_manager_master.rdd_blocks(big.id())
    assert 0 < len(cached) < 8, "a 4 MB budget cannot hold all eight ~1.9 MB blocks"
    assert big.sum() == sum(float(i) * 60000 for i in range(8))


def test_memory_and_disk_spills_evicted_blocks_to_disk(fresh_sc):
    conf = SparkConf().set("spark.ember.storage.memory", "4m")
    sc = fresh_sc("local[2]", conf=conf)
    rdd = sc.parallelize(range(6), 6).flatMap(lambda i: [i] * 60000) \
        .persist(StorageLevel.MEMORY_AND_DISK)
    assert rdd.count() == 360000
    on_disk = glob.glob(os.path.join(sc.runtime.local_dir, "blocks", f"rdd_{rdd.id()}_*"))
    assert on_disk
    assert rdd.sum() == sum(i * 60000 for i in range(6))
    rdd.unpersist()
    assert not glob.glob(os.path.join(sc.runtime.local_dir, "blocks", f"rdd_{rdd.id()}_*"))


def test_disk_only_and_replicated_levels(sc):
    for level in (StorageLevel.DISK_ONLY, StorageLevel.DISK_ONLY_2, StorageLevel.MEMORY_ONLY_2,
                  StorageLevel.MEMORY_AND_DISK_2, StorageLevel.DISK_ONLY_3):
        rdd = sc.parallelize(range(100), 4).map(lambda x: x * 2).persist(level)
        assert rdd.sum() == 9900 and rdd.sum() == 9900
        assert rdd.getStorageLevel() == level
        rdd.unpersist()


def test_checkpoint_truncates_lineage(sc, tmp_path):
    sc.setCheckpointDir(str(tmp_path / "ckpt"))
    src = tmp_path / "input.txt"
    src.write_text("\n".join(str(i) for i in range(50)))
    rdd = sc.textFile(str(src)).map(int).map(lambda x: x + 1)
    rdd.checkpoint()
    assert not rdd.isCheckpointed()
    assert rdd.sum() == sum(range(1, 51))
    assert rdd.isCheckpointed() and rdd.getCheckpointFile().startswith("file:")
    assert rdd.dependencies() == []
    src.unlink()            # the lineage is gone; the checkpoint is enough
    assert rdd.map(lambda x: x * 2).sum() == 2 * sum(range(1, 51))


def test_local_checkpoint_truncates_lineage(sc):
    rdd = sc.parallelize(range(20), 4).map(lambda x: x * 3)
    rdd.localCheckpoint()
    assert rdd.isLocallyCheckpointed()
    assert rdd.count() == 20
    assert rdd.dependencies() == []
    assert rdd.sum() == 3 * sum(range(20))


def test_independent_stages_run_concurrently(sc):
    def slow_pair(x):
        time.sleep(0.3)
        return (x, os.getpid())
    left = sc.parallelize([1], 1).map(slow_pair)
    right = sc.parallelize([1], 1).map(slow_pair)
    start = time.time()
    joined = left.join(right).collect()
    elapsed = time.time() - start
    assert len(joined) == 1
    assert elapsed < 0.55, f"both map stages should run at once ({elapsed:.2f}s)"


def test_shuffle_spills_keep_task_process_memory_bounded(fresh_sc):
    budget_mb = 24
    conf = SparkConf().set("spark.python.worker.memory", f"{budget_mb}m")
    sc = fresh_sc("local[2]", conf=conf)
    n = 600_000               # ~120 MB of python objects: 5x the budget

    def gen(i):
        rnd = random.Random(i)
        for _ in range(n // 4):
            yield ("k%09d" % rnd.randrange(10 ** 9), "v" * 80)

    base_rss = sc.parallelize(range(2), 2).map(lambda _: psutil.Process().memory_info().rss).max()

    def peak(it):
        import resource
        count = sum(1 for _ in it)
        return [(count, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)]
    out = sc.parallelize(range(4), 4).flatMap(gen).sortByKey(numPartitions=4) \
        .mapPartitions(peak).collect()
    assert sum(c for c, _ in out) == n
    worst = max(r for _, r in out)
    assert worst - base_rss < 4 * budget_mb * 2 ** 20, (worst, base_rss)


def test_stop_leaves_no_processes_behind(fresh_sc):
    sc = fresh_sc("local[3]")
    assert sc.parallelize(range(9), 3).count() == 9
    kids = psutil.Process().children(recursive=True)
    assert len(kids) >= 3
    sc.stop()
    gone, alive = psutil.wait_procs(kids, timeout=5)
    assert not alive
    assert not os.path.exists(sc.runtime.local_dir)


def test_stop_ends_a_task_process_still_sending_a_result(fresh_sc, monkeypatch):
    """A task that ignores its kill can end after its job failed and the context began to
    stop, and send a result larger than the socket holds. Nobody reads it any more: the
    process must end by itself (the pool's sockets are shut), not block until it is
    SIGKILLed."""
    from ember.executor import process_pool
    left: list[int] = []

    def wait_gone(pids: list[int], timeout: float) -> list[int]:
        out = real_wait_gone(pids, timeout)
        left.extend(out)
        return out
    real_wait_gone = process_pool.wait_gone
    monkeypatch.setattr(process_pool, "wait_gone", wait_gone)
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.driver.maxResultSize", "1m"))

    def part(i, it):
        if i == 1:
            import signal
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)
            time.sleep(1.0)
        return [b"x" * (8 << 20)]
    with pytest.raises(SparkException, match="maxResultSize"):
        sc.parallelize(range(2), 2).mapPartitionsWithIndex(part).collect()
    sc.stop()
    assert left == []


def test_bad_inputs_leave_the_context_usable(sc, tmp_path):
    with pytest.raises(Exception, match="Input path does not exist"):
        sc.textFile(str(tmp_path / "nope")).count()
    with pytest.raises(ValueError, match="Can not reduce\\(\\) empty RDD"):
        sc.emptyRDD().reduce(lambda a, b: a + b)
    with pytest.raises(ValueError, match="RDD is empty"):
        sc.parallelize([]).first()
    lock = threading.Lock()
    with pytest.raises(Exception, match="lock"):
        sc.parallelize([1]).map(lambda x: lock).count()
    assert sc.parallelize(range(5), 2).sum() == 10
    # the fork server, two task processes and the UI process: no leaked task processes
    assert len(psutil.Process().children(recursive=True)) <= 4


def test_results_past_max_result_size_abort_the_action_not_the_context(fresh_sc):
    """spark.driver.maxResultSize, as Spark: an action whose tasks' serialized results
    together pass it is aborted with Spark's message; smaller ones, and shuffles of any
    size, run."""
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.driver.maxResultSize", "1m"))
    with pytest.raises(SparkException, match=r"Total size of serialized results of \d+ tasks "
                       r"\(\d+\.\d KiB\) is bigger than spark.driver.maxResultSize "
                       r"\(1024.0 KiB\)"):
        sc.parallelize(range(4), 4).map(lambda x: b"x" * 600_000).collect()
    big = sc.parallelize(range(4), 4).map(lambda x: (x, b"x" * 600_000))
    assert big.groupByKey(2).mapValues(len).count() == 4
    assert len(sc.parallelize(range(4), 4).map(lambda x: b"x" * 200_000).collect()) == 4


def test_jobs_the_scheduler_cannot_start_fail_at_once_and_the_context_goes_on(sc):
    """Errors met while the scheduler builds a job's tasks end that job with Spark's message
    instead of leaving its caller waiting: a task whose partition cannot be pickled (its
    task set is aborted, its slot free again), a partition the RDD does not have, a failure
    while the stage's tasks are created."""
    from ember.rdd import ParallelCollectionRDD
    lock = threading.Lock()
    with pytest.raises(SparkException, match="Failed to serialize task .* not attempting to "
                       "retry it. Exception during serialization: TypeError: .*lock"):
        ParallelCollectionRDD(sc, [[1], [2], [lock], [4]]).count()
    with pytest.raises(ValueError, match="Attempting to access a non-existent partition: 5. "
                       "Total number of partitions: 2"):
        sc.runJob(sc.parallelize(range(4), 2), lambda it: [sum(it)], [0, 5])
    odd = sc.parallelize(range(4), 2).cache()
    odd.preferred_locations = lambda partition: 1 / 0
    with pytest.raises(SparkException, match="Task creation failed: ZeroDivisionError"):
        odd.count()
    assert sc.parallelize(range(100), 10).map(lambda x: x * 2).sum() == 9900


def test_a_fault_while_a_job_is_submitted_fails_that_job_not_the_context(sc, monkeypatch):
    """Whatever goes wrong below the DAG scheduler while it submits a job's stages (here the
    task scheduler refusing its task set) fails that job with the error instead of leaving
    its caller waiting; the next job runs."""
    scheduler = sc.runtime.dag_scheduler.task_scheduler
    submit = scheduler.submit_tasks

    def broken(task_set):
        monkeypatch.setattr(scheduler, "submit_tasks", submit)
        raise RuntimeError("task scheduler fault")
    monkeypatch.setattr(scheduler, "submit_tasks", broken)
    with pytest.raises(SparkException, match="could not be submitted: RuntimeError: task "
                                             "scheduler fault"):
        sc.parallelize(range(4), 2).count()
    assert sc.parallelize(range(100), 10).map(lambda x: x * 2).sum() == 9900


def test_a_dag_handler_that_fails_stops_the_context_instead_of_hanging(fresh_sc, monkeypatch):
    """Spark's DAGSchedulerEventProcessLoop.onError: a DAG scheduler event handler that
    raises (here a map task's end, on a broken map output tracker) cancels every job and
    stops the SparkContext; the caller gets an error at once, not a wait forever."""
    sc = fresh_sc("local[2]")
    tracker = sc.runtime.map_output_tracker

    def broken(*args):
        raise RuntimeError("tracker fault")
    monkeypatch.setattr(tracker, "register_map_output", broken)
    start = time.time()
    with pytest.raises(Exception, match="cancelled as part of cancellation of all jobs"):
        sc.parallelize(range(8), 2).map(lambda x: (x % 2, x)).reduceByKey(operator.add) \
            .collect()
    deadline = time.time() + 20      # stopped by a thread of its own
    while SparkContext._active_spark_context is sc and time.time() < deadline:
        time.sleep(0.05)
    assert sc.runtime.stopped and SparkContext._active_spark_context is None
    assert time.time() - start < 20


def test_an_accumulator_whose_driver_merge_fails_is_skipped_as_spark_does(sc, caplog):
    """DAGScheduler.updateAccumulators: the failure is logged ("Failed to update
    accumulator"), that accumulator misses the update, and the job goes on."""
    class DriverFails(AccumulatorParam):
        def zero(self, value):
            return 0

        def addInPlace(self, a, b):  # noqa: N802
            if TaskContext.get() is None:
                raise ValueError("driver-side merge fails")
            return a + b
    bad, good = sc.accumulator(0, DriverFails()), sc.accumulator(0)
    assert sc.parallelize(range(10), 2).map(lambda x: bad.add(1) or good.add(1) or x) \
        .sum() == 45
    assert (bad.value, good.value) == (0, 10)
    assert "Failed to update accumulator %d (" % bad.aid in caplog.text
    assert "DriverFails) for task" in caplog.text


def test_progress_bar_renders_spark_style():
    s = SparkStageInfo(3, 0, "x", 40, 2, 12, 0)
    line = render([s], 80)
    assert line.startswith("[Stage 3:") and line.endswith("(12 + 2) / 40]")
    assert len(line) == 80 and "=>" in line

    class Store:
        def active_stages(self):
            return [(s, time.time() - 1)]
    out = io.StringIO()
    bar = ConsoleProgressBar(Store(), out)
    bar.refresh()
    assert out.getvalue().startswith("\r[Stage 3:") and "(12 + 2) / 40]" in out.getvalue()
    bar.clear()
    assert out.getvalue().endswith("\r")


def test_long_stage_survives_many_interleaved_short_stages(fresh_sc):
    """Task processes keep a stage's closure while the stage is alive, however many other
    stages run on them meanwhile (they used to evict by LRU and lose it)."""
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.scheduler.mode", "FAIR"))
    result = []

    def long_job():
        sc.setLocalProperty("spark.scheduler.pool", "long")
        result.append(sc.parallelize(range(12), 12).map(lambda x: (time.sleep(0.15), x)[1])
                      .sum())
    t = threading.Thread(target=long_job)
    t.start()
    sc.setLocalProperty("spark.scheduler.pool", "short")
    for i in range(30):
        assert sc.parallelize([i], 1).map(lambda x, i=i: x + i).collect() == [2 * i]
    t.join(60)
    assert result == [sum(range(12))]


def test_a_local_checkpoint_spread_unevenly_is_copied_not_lost(fresh_sc):
    """As above for a local checkpoint: a task taken over from the holding process gets
    the block's copy (a truncated lineage cannot compute it again)."""
    sc = fresh_sc("local[2]")

    def slow_first(i, it):
        if i == 0:
            time.sleep(1.5)
        return [x * 3 for x in it]
    data = sc.parallelize(range(800), 8).mapPartitionsWithIndex(slow_first)
    data.localCheckpoint()
    assert data.count() == 800
    for _ in range(3):
        assert data.map(lambda x: x).sum() == 3 * sum(range(800))


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[1,1,1024]"])
@pytest.mark.parametrize("waits", ["writing", "reading"])
def test_an_unpersist_while_a_task_uses_the_block_leaves_the_task_alone(fresh_sc, master,
                                                                        waits, tmp_path):
    """rdd.unpersist() deletes the RDD's block files. A task that was writing one then (a
    DISK_ONLY partition streams into a temp file) lost its temp file and failed at the
    rename; one that had written it and was about to read it back failed to open it. As in
    Spark, the job goes on: only whole blocks are deleted (is_block_file_of), and a task
    reads back the file it wrote, not its name. One attempt per task, so that a cluster's
    retry does not hide a failure."""
    sc = fresh_sc(master, conf=SparkConf().set("spark.task.maxFailures", "1"))
    assert sc.parallelize(range(2), 2).count() == 2     # executors up
    reached, go = tmp_path / "reached", tmp_path / "go"

    def wait():
        reached.touch()
        deadline = time.monotonic() + 20
        while not go.exists() and time.monotonic() < deadline:
            time.sleep(0.01)

    def wait_at_5(it):          # while the block is written
        for x in it:
            if x == 5:
                wait()
            yield x

    def wait_first(it):         # the block written, before it is read
        wait()
        yield from it
    rdd = sc.parallelize(range(10), 1)
    if waits == "writing":
        rdd = rdd.mapPartitions(wait_at_5).persist(StorageLevel.DISK_ONLY)
        job = rdd
    else:
        rdd = rdd.persist(StorageLevel.DISK_ONLY)
        job = rdd.mapPartitions(wait_first)
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(sum=job.sum()))
    thread.start()
    deadline = time.monotonic() + 20
    while not reached.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    rdd.unpersist()
    time.sleep(0.5)                     # an executor deletes its files on its own time
    go.touch()
    thread.join(30)
    assert out == {"sum": 45}
    assert sc.parallelize(range(10), 2).sum() == 45


def test_an_uneven_cache_evens_out_by_copies_from_the_holding_process(fresh_sc):
    """The first job caches partition 0 in one task process (a slow partition keeps it
    busy) and 1-7 in the other. The next job lets the idle process take over part of the
    other's backlog instead of idling for spark.locality.wait, with copies of the blocks
    the holder writes for it between two tasks: nothing is computed again, and cached
    random values stay the values first computed."""
    sc = fresh_sc("local[2]")
    computed = sc.accumulator(0)

    def cache_slowly(i, it):
        computed.add(1)
        if i == 0:
            time.sleep(1.5)
        rnd = random.Random()                # unseeded: a recompute would differ
        return [(x, rnd.random()) for x in it]
    data = sc.parallelize(range(800), 8).mapPartitionsWithIndex(cache_slowly).cache()
    first = data.collect()
    assert len(first) == 800 and computed.value == 8

    def held_per_process():
        blocks = sc.runtime.block_manager_master.rdd_blocks(data.id())
        return sorted(collections.Counter(b.slot for bs in blocks.values() for b in bs).values())
    assert held_per_process()[0] <= 2, held_per_process()

    def slow(kv):
        time.sleep(0.001)
        return kv
    assert data.map(slow).collect() == first
    assert held_per_process()[0] >= 3, held_per_process()
    for _ in range(2):
        assert data.map(slow).collect() == first
    assert computed.value == 8
    # each copy was read once and deleted
    assert not glob.glob(os.path.join(sc.runtime.local_dir, "blocks", "*.for*"))
    data.unpersist()


def test_partitions_cached_in_a_killed_task_process_are_computed_again_the_rest_kept(fresh_sc):
    """MEMORY_ONLY partitions live in the task process that computed them (or took a copy).
    Killing that process between two actions loses exactly its blocks: the driver stops
    listing them at once, and the next action computes again only the partitions left
    with no copy, reading the others unchanged."""
    sc = fresh_sc("local[2]")
    computed = sc.accumulator(0)

    def cache(i, it):
        computed.add(1)
        rnd = random.Random()                # unseeded: a recompute would differ
        return [(x, rnd.random()) for x in it]
    data = sc.parallelize(range(800), 8).mapPartitionsWithIndex(cache).cache()
    first = data.glom().collect()
    assert computed.value == 8

    def held() -> set[tuple[int, int]]:
        return {(int(name.rsplit("_", 1)[1]), b.slot) for name, bs in
                sc.runtime.block_manager_master.rdd_blocks(data.id()).items() for b in bs}
    before = held()
    psutil.Process(data.mapPartitions(lambda it: [os.getpid()]).first()).kill()
    deadline = time.monotonic() + 10
    while held() == before and time.monotonic() < deadline:
        time.sleep(0.02)
    after = held()                          # told while no job runs
    dead = {slot for _, slot in before - after}
    assert len(dead) == 1 and not {b for b in after if b[1] in dead}
    gone = set(range(8)) - {i for i, _ in after}

    again = data.glom().collect()
    assert computed.value == 8 + len(gone)
    for i in range(8):
        assert (again[i] == first[i]) == (i not in gone), i
    assert {i for i, _ in held()} == set(range(8))
    data.unpersist()


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[1,2,1024]"])
def test_a_local_checkpoint_outlives_the_task_processes_that_made_it(fresh_sc, master):
    """A local checkpoint cuts the RDD's lineage, so its blocks cannot be computed again.
    Spark keeps them in the executor, which a Python worker's crash leaves alone; Ember
    kept them only in the task process that computed them, and once that process was
    killed (the OOM killer, say) every later job on the RDD failed with "Checkpoint block
    not found". A local checkpoint's blocks now have a disk copy as well."""
    sc = fresh_sc(master)
    data = sc.parallelize(range(100), 4).map(lambda x: (x, random.random()))
    data.localCheckpoint()
    first = data.collect()
    assert data.isCheckpointed()
    for pid in set(data.mapPartitions(lambda it: [os.getpid()]).collect()):
        psutil.Process(pid).kill()
    time.sleep(0.5)
    assert data.collect() == first          # the same values: read, not computed again


def test_an_ember_directory_in_the_working_directory_does_not_shadow_ember(tmp_path):
    """Processes the driver starts (task processes' fork server, the UI process) run in the
    user's working directory; one holding a directory named `ember` must not replace the
    driver's Ember in them (it used to leave local jobs waiting for a fork server gone)."""
    import subprocess
    import sys
    (tmp_path / "ember").mkdir()
    (tmp_path / "ember" / "__init__.py").write_text('raise ImportError("shadowed")\n')
    script = tmp_path / "job" / "job.py"
    script.parent.mkdir()
    script.write_text("from ember import SparkContext\n"
                      "sc = SparkContext('local[2]', 'shadow')\n"
                      "print(sc.parallelize(range(10), 2).sum())\n"
                      "sc.stop()\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root)
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=30,
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["45"] and "UI process failed" not in out.stderr


def test_a_stage_that_failed_to_load_in_a_process_loads_again_for_its_retry(fresh_sc,
                                                                            tmp_path,
                                                                            monkeypatch):
    """A task process gets a stage's bytes once. When they fail to load there (its module
    not importable yet), the process keeps them, so the retried task loads them again and
    can succeed, instead of failing for want of the bytes it was never sent again."""
    import importlib
    import sys
    marker = tmp_path / "imported-once"
    (tmp_path / "flaky_import_mod.py").write_text(
        "import os\n"
        f"MARKER = {str(marker)!r}\n"
        "if not os.path.exists(MARKER):\n"
        "    open(MARKER, 'w').close()\n"
        "    raise ImportError('not importable the first time')\n"
        "def plus_one(x):\n"
        "    return x + 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    marker.touch()
    mod = importlib.import_module("flaky_import_mod")    # the driver has it ...
    marker.unlink()                                       # ... a task process not at first
    sc = fresh_sc("local[1,2]")
    try:
        assert sc.parallelize([1, 2], 1).map(mod.plus_one).collect() == [2, 3]
    finally:
        sys.modules.pop("flaky_import_mod", None)
