"""spark.ember.python.worker.freshForCache: a job that first fills a memory cache, with no
other job running, starts on fresh task processes where the idle ones spent 0.5 s of CPU
and hold no memory block; the cache, and every block another process holds, are the same
either way."""
from __future__ import annotations

import os
import time

import pytest

from ember import SparkConf

pytestmark = pytest.mark.timeout(240)


def _burn(_):
    """Half a second of CPU in the task's process."""
    start = time.process_time()
    while time.process_time() - start < 0.5:
        pass
    return os.getpid()


def _pids(sc) -> set[int]:
    """The task processes that ran this job (4 tasks a slot, so every slot takes some)."""
    return set(sc.parallelize(range(8 * sc.defaultParallelism), 8 * sc.defaultParallelism)
               .map(lambda _: os.getpid()).collect())


def _cached_with_pids(sc, computed, partitions: int):
    def tag(x):
        computed.add(1)
        return (x, os.getpid())
    return sc.parallelize(range(40), partitions).map(tag).cache()


@pytest.mark.parametrize("master", ["local[2]", "local-cluster[1,2,1024]"])
def test_a_cache_is_filled_by_fresh_processes_after_a_busy_job(fresh_sc, master):
    sc = fresh_sc(master)
    busy = set(sc.parallelize(range(4), 4).map(_burn).collect())
    assert busy <= _pids(sc)
    computed = sc.accumulator(0)
    cached = _cached_with_pids(sc, computed, 4)
    filled = {pid for _, pid in cached.collect()}
    assert not filled & busy, "the cache was filled by the busy processes"
    assert [x for x, _ in cached.collect()] == list(range(40)) and computed.value == 40
    # the cache's processes hold its blocks: the next cache leaves them be
    again = _cached_with_pids(sc, sc.accumulator(0), 4)
    assert {pid for _, pid in again.collect()} <= filled | _pids(sc)
    assert filled <= _pids(sc)
    assert cached.count() == 40 and computed.value == 40, "a cached block was lost"


def test_a_process_holding_a_block_is_kept_and_the_other_replaced(fresh_sc):
    sc = fresh_sc("local[2]")
    computed = sc.accumulator(0)
    first = _cached_with_pids(sc, computed, 1)
    (holder,) = {pid for _, pid in first.collect()}
    busy = set(sc.parallelize(range(4), 4).map(_burn).collect())
    assert len(busy) == 2 and holder in busy
    second = _cached_with_pids(sc, sc.accumulator(0), 8)
    assert second.count() == 40
    after = _pids(sc)
    assert holder in after and len(after - busy) == 1
    assert first.count() == 40 and computed.value == 40, "the held block was recomputed"


def test_off_keeps_the_processes(fresh_sc):
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.ember.python.worker.freshForCache",
                                                   "false"))
    busy = set(sc.parallelize(range(4), 4).map(_burn).collect())
    cached = _cached_with_pids(sc, sc.accumulator(0), 4)
    assert {pid for _, pid in cached.collect()} <= busy
