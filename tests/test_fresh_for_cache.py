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


def _sleep_reporting_pid(path):
    def sleep(_):
        with open(path + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.replace(path + ".tmp", path)
        time.sleep(100)
    return sleep


def _cancelled_task_pid(sc, tmp_path, name: str) -> int:
    """Run one task that sleeps, cancel its job once it runs; the task's process id."""
    import threading
    path = str(tmp_path / name)
    t = threading.Thread(target=lambda: _quietly(
        lambda: sc.parallelize(range(1), 1).foreach(_sleep_reporting_pid(path))), daemon=True)
    t.start()
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    sc.cancelAllJobs()
    t.join(15)
    assert not t.is_alive()
    with open(path) as f:
        return int(f.read())


def _quietly(job):
    try:
        job()
    except Exception:
        pass


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except OSError:
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("master", ["local[1]", "local-cluster[1,1,1024]"])
def test_the_process_of_a_cancelled_task_is_replaced(fresh_sc, tmp_path, master):
    """PySpark's test_cancel_task: the Python worker of a task interrupted by a cancel is
    gone within 5 s, and the next job runs."""
    sc = fresh_sc(master)
    pid = _cancelled_task_pid(sc, tmp_path, "pid")
    assert _gone_within(pid, 5)
    assert sc.parallelize(range(100), 1).map(str).count() == 100
    assert pid not in _pids(sc)


def test_a_cancelled_tasks_process_that_holds_a_block_stays(fresh_sc, tmp_path):
    sc = fresh_sc("local[1]")
    computed = sc.accumulator(0)
    cached = _cached_with_pids(sc, computed, 1)
    (holder,) = {pid for _, pid in cached.collect()}
    assert _cancelled_task_pid(sc, tmp_path, "pid") == holder
    assert not _gone_within(holder, 1)
    assert cached.count() == 40 and computed.value == 40
