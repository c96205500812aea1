"""Delay scheduling that ends: Spark's periodic ReviveOffers (spark.scheduler.revive.interval)
launches a task held back by delay scheduling once its locality wait is over, even when
nothing else happens to trigger an offer round (a task whose preferred task process stayed
busy waited for that process's task to end); and a lost executor is no task's preference
any more (a task whose cached partition died with its executor waited for an event that
might never come)."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil
import pytest

from ember import SparkConf, TaskContext

pytestmark = pytest.mark.timeout(120)


def _in_thread(fn, bound: float):
    """fn() on a thread, joined for at most `bound` seconds: (finished, result)."""
    out: list = []
    t = threading.Thread(target=lambda: out.append(fn()), daemon=True)
    t.start()
    t.join(bound)
    return bool(out), (out[0] if out else None)


def _kill_own_executor(x: int) -> int:
    """The first attempt of partition 0 kills the executor it runs under (the task process's
    fork server's parent) and waits to go with it."""
    ctx = TaskContext.get()
    if ctx.partitionId() == 0 and ctx.attemptNumber() == 0:
        executor = psutil.Process(os.getppid()).ppid()
        os.kill(executor, signal.SIGKILL)
        time.sleep(30)
    return x


def test_a_task_whose_cached_partition_died_with_its_executor_runs_elsewhere_at_once(fresh_sc):
    # the retried task preferred the dead executor (its cached block was there), the other
    # executor is idle and the replacement registers before the locality wait ends: it hung
    # waiting for an offer round (none came), then waited out the locality wait (here far
    # longer than the job's bound); the lost executor is no preference any more
    sc = fresh_sc("local-cluster[2,1,1024]", conf=SparkConf().set("spark.ui.enabled", "false")
                  .set("spark.locality.wait", "60s"))
    deadline = time.monotonic() + 30
    while len(sc.runtime.scheduler_backend.executors) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    cached = sc.parallelize(range(10), 2).map(lambda x: x * 2).cache()
    assert cached.count() == 10
    done, result = _in_thread(lambda: cached.map(_kill_own_executor).sum(), 40)
    assert done, "the retried task waited for its lost executor"
    assert result == 90


def test_a_task_waiting_for_its_busy_task_process_takes_a_free_one(fresh_sc):
    conf = (SparkConf().set("spark.ui.enabled", "false").set("spark.locality.wait", "0.5s")
            .set("spark.scheduler.revive.interval", "0.2s"))
    sc = fresh_sc("local[2]", conf=conf)
    cached = sc.parallelize(range(10), 2).map(lambda x: x + 1).cache()
    assert cached.count() == 10
    holders = sc.runtime.block_manager_master.slots_holding_memory()
    assert holders, "the cache is held in the task processes"

    def blocker() -> None:
        sc.setJobGroup("blocker", "holds one task process", interruptOnCancel=True)
        try:
            sc.parallelize([0], 1).foreach(lambda _: time.sleep(60))
        except Exception:
            pass
    t = threading.Thread(target=blocker, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        done, result = _in_thread(lambda: cached.sum(), 20)
        assert done, "a task waited for its busy task process after the locality wait"
        assert result == 55
    finally:
        sc.cancelJobGroup("blocker")
        t.join(30)
