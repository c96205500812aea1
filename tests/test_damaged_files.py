"""Files of an application damaged by another hand between two actions (removed, cut short,
overwritten inside): cached disk blocks and map outputs are computed again or fail their
task, never read as fewer or other records. Before, a DISK_ONLY block cut between two
batches read as fewer records, one cut inside a batch failed every retry of its task, a map
output appended after its file was cut short sat where the lost outputs' statuses pointed
(read as theirs), and a cluster job whose cached blocks and map outputs were removed
failed its stage four times: the driver still counted the blocks cached, so the map stage
the recomputation needed was never run again. And an application whose local directories a
temp-directory cleaner removed failed every later task that wrote a file (as Spark's
executors do): the directories are made again, a broadcast's file written again from the
driver's value."""
from __future__ import annotations

import os
import pickle
import shutil
from operator import add
from types import SimpleNamespace

import pytest

from ember import SparkConf, StorageLevel
from ember.storage.block_manager import (BlockManager, UnreadableBlockError, load_batches,
                                         read_batches, write_batches)
from ember.storage.block_manager_master import BlockManagerMaster


class CountedRDD:
    """What BlockManager.get_or_compute asks of an RDD, counting its computations."""

    def __init__(self, level: StorageLevel, n: int = 3000) -> None:
        self._storage_level = level
        self.values = [(i, "v" * (i % 7)) for i in range(n)]
        self.computed = 0

    def id(self) -> int:
        return 4

    def compute(self, split, ctx):
        self.computed += 1
        return iter(self.values)


SPLIT = SimpleNamespace(index=2)
BLOCK = "rdd_4_2"


def _manager(tmp_path) -> BlockManager:
    return BlockManager(str(tmp_path), 1 << 30)


def _first_batch_end() -> int:
    return len(pickle.dumps(CountedRDD(StorageLevel.DISK_ONLY).values[:1024], protocol=5))


@pytest.mark.parametrize("level", [StorageLevel.DISK_ONLY, StorageLevel.MEMORY_AND_DISK])
def test_a_disk_block_cut_short_is_computed_again_and_the_driver_told(tmp_path, level):
    writer, reader = _manager(tmp_path), _manager(tmp_path)    # two processes, one dir
    rdd = CountedRDD(StorageLevel.DISK_ONLY)
    assert list(writer.get_or_compute(rdd, SPLIT, None)) == rdd.values
    assert [u[:2] for u in writer.take_updates()] == [(BLOCK, "no_disk_copy"), (BLOCK, "disk")]
    os.truncate(tmp_path / BLOCK, _first_batch_end())           # a whole batch, the rest gone
    rdd._storage_level = level
    assert list(reader.get_or_compute(rdd, SPLIT, None)) == rdd.values
    assert rdd.computed == 2
    assert (BLOCK, "no_disk_copy", 0, 0) in reader.take_updates()
    if level.useMemory:
        assert not (tmp_path / BLOCK).exists()          # held in memory now
    else:
        assert list(read_batches(str(tmp_path / BLOCK))) == rdd.values   # written whole again


def test_a_disk_block_damaged_inside_fails_its_task_and_is_gone_for_the_retry(tmp_path):
    bm = _manager(tmp_path)
    rdd = CountedRDD(StorageLevel.DISK_ONLY)
    list(bm.get_or_compute(rdd, SPLIT, None))
    with open(tmp_path / BLOCK, "r+b") as f:        # the end record still names the length
        f.seek(_first_batch_end() + 2)
        f.write(b"\xff" * 64)
    with pytest.raises(Exception):
        list(bm.get_or_compute(rdd, SPLIT, None))
    assert not (tmp_path / BLOCK).exists()
    assert list(bm.get_or_compute(rdd, SPLIT, None)) == rdd.values
    assert rdd.computed == 2


def test_a_checkpoint_file_cut_short_fails_and_an_old_pickle_file_reads_whole(tmp_path):
    path = str(tmp_path / "part-00000")
    values = list(range(5000))
    write_batches(path, values)
    assert list(read_batches(path)) == values
    with open(path, "rb") as f:                     # what sc.pickleFile reads: the end record
        assert list(load_batches(f)) == values      # is not a record
    os.truncate(path, len(pickle.dumps(values[:1024], protocol=5)))
    with pytest.raises(UnreadableBlockError, match="cut short"):
        list(read_batches(path))
    with open(path, "wb") as f:                     # Ember's pickle files before end records
        f.write(pickle.dumps(values[:10], protocol=5))
    with open(path, "rb") as f:
        assert list(load_batches(f)) == values[:10]


def test_no_disk_copy_forgets_the_executors_disk_copies_from_every_process():
    master = BlockManagerMaster()
    master.update("1", 0, "h", [("rdd_1_0", "disk", 0, 10), ("rdd_1_1", "memory", 5, 10)])
    master.update("1", 1, "h", [("rdd_1_0", "memory", 5, 0)])
    master.update("2", 0, "h", [("rdd_1_0", "disk", 0, 10)])
    master.update("1", 1, "h", [("rdd_1_0", "no_disk_copy", 0, 0),
                                ("rdd_1_1", "no_disk_copy", 0, 0),
                                ("rdd_1_9", "no_disk_copy", 0, 0)])
    assert sorted((b.executor_id, b.slot, b.where, b.disk_size)
                  for b in master.locations(1, 0)) == [("1", 1, "memory", 0),
                                                       ("2", 0, "disk", 10)]
    assert [(b.slot, b.where, b.disk_size) for b in master.locations(1, 1)] == [(0, "memory", 0)]
    assert master.locations(1, 9) == []


def _map_outputs_and_blocks(root: str) -> list[str]:
    return [os.path.join(d, f) for d, _dirs, files in os.walk(root) for f in files
            if f.startswith("rdd_") or (f.startswith("shuffle_") and f.endswith(".data"))]


@pytest.mark.parametrize("damage", ["remove", "cut"])
def test_a_cluster_job_whose_cached_blocks_and_map_outputs_were_damaged_answers_right(
        fresh_sc, tmp_path, damage):
    sc = fresh_sc("local-cluster[2,1,1024]",
                  conf=SparkConf().set("spark.local.dir", str(tmp_path)))
    expected = {k: max(f"{'v' * 200}{x}" for x in range(20_000) if x % 1000 == k)
                for k in range(1000)}
    for _ in range(2):
        rdd = sc.parallelize(range(20_000), 8).map(lambda x: (x % 1000, "v" * 200 + str(x))) \
            .reduceByKey(max, 6).persist(StorageLevel.DISK_ONLY)
        assert dict(rdd.collect()) == expected
        files = _map_outputs_and_blocks(str(tmp_path))
        assert any("shuffle_" in f for f in files) and any("rdd_" in f for f in files)
        for f in files:
            if damage == "remove":
                os.unlink(f)
            else:
                os.truncate(f, os.path.getsize(f) // 2)
        assert dict(rdd.collect()) == expected
        assert rdd.map(lambda kv: len(kv[1])).reduce(add) == sum(map(len, expected.values()))


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[2,1,1024]"])
def test_an_application_whose_local_directories_were_removed_runs_on(fresh_sc, tmp_path,
                                                                     master):
    sc = fresh_sc(master, conf=SparkConf().set("spark.local.dir", str(tmp_path)))
    before = sc.broadcast(list(range(10_000)))
    for _ in range(2):
        rdd = sc.parallelize(range(2_000), 4).map(lambda x: (x % 10, x)) \
            .reduceByKey(add).persist(StorageLevel.DISK_ONLY)
        assert sorted(rdd.collect()) == [(k, sum(range(k, 2_000, 10))) for k in range(10)]
        assert sc.parallelize(range(4), 4).map(lambda x: len(before.value) + x).sum() == 40_006
        for d in os.listdir(tmp_path):      # the driver's, the executors' and the workers'
            shutil.rmtree(tmp_path / d)
        after = sc.broadcast("x" * 5_000)
        assert sorted(rdd.collect()) == [(k, sum(range(k, 2_000, 10))) for k in range(10)]
        assert sc.parallelize(range(4), 4).map(
            lambda x: len(before.value) + len(after.value)).sum() == 60_000
        assert sc.parallelize(range(100), 4).persist(StorageLevel.DISK_ONLY).sum() == 4_950
