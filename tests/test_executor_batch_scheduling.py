"""An executor's threads run as SCHED_BATCH and so do task processes, local mode's too
(ember.executor.batch_scheduling); spark.ember.executor.batchScheduling=false leaves the
executor as it was, spark.ember.task.batchScheduling=false the task processes."""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

import ember
from ember.deploy.local_cluster import LocalCluster
from ember.executor.batch_scheduling import task_policy

OTHER, BATCH = getattr(os, "SCHED_OTHER", 0), getattr(os, "SCHED_BATCH", 3)
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling")

_PROBE = r"""
import os, threading
from ember.executor.batch_scheduling import TASK_POLICY_ENV, batch_threads, apply_task_policy
policy = lambda tid: os.sched_getscheduler(tid)
started = threading.Event(); stop = threading.Event()
old = threading.Thread(target=lambda: (started.set(), stop.wait())); old.start(); started.wait()
before = batch_threads()
again = batch_threads()
seen = {}
new = threading.Thread(target=lambda: seen.update(new=policy(0))); new.start(); new.join()
print(before == os.SCHED_OTHER, again is None, seen["new"] == os.SCHED_BATCH,
      policy(0) == os.SCHED_BATCH, policy(old.native_id) == os.SCHED_BATCH)
os.environ[TASK_POLICY_ENV] = str(before)
apply_task_policy()
print(policy(0) == os.SCHED_OTHER, TASK_POLICY_ENV not in os.environ)
stop.set()
"""


def test_batch_threads_switches_every_thread_and_the_ones_started_later():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": _ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 7


def test_task_policy():
    assert task_policy(True, OTHER) == BATCH and task_policy(False, OTHER) == OTHER
    assert task_policy(False) is None
    assert task_policy(True) == (BATCH if os.sched_getscheduler(0) == OTHER else None)


def _policies(master: str, **keys: bool) -> tuple[set[int], set[int]]:
    """Policies of the executors' threads and of the task processes, after a job."""
    conf = ember.SparkConf().set("spark.ui.enabled", "false")
    for key, on in keys.items():
        conf.set(f"spark.ember.{key}.batchScheduling", str(on).lower())
    sc = ember.SparkContext(master, "batch", conf=conf)
    try:
        assert sc.parallelize(range(10), 2).count() == 10
        executors: set[int] = set()
        tasks: dict[int, int] = {}         # fork server and task processes: policy
        deadline = time.monotonic() + 10
        cluster = master.startswith("spark://")
        while not ((executors or not cluster) and len(tasks) >= 3) \
                and time.monotonic() < deadline:
            for p in psutil.Process().children(recursive=True):
                try:
                    cmd = " ".join(p.cmdline())
                    if "ember.executor.backend" in cmd:
                        executors |= {os.sched_getscheduler(t.id) for t in p.threads()}
                    elif "ember.executor.forkserver" in cmd:   # and the forked ones
                        tasks[p.pid] = os.sched_getscheduler(p.pid)
                except (psutil.Error, OSError):
                    pass
            time.sleep(0.05)
        return executors, set(tasks.values())
    finally:
        sc.stop()


@pytest.mark.parametrize("keys, executors, tasks", [
    ({}, BATCH, BATCH),
    ({"task": False}, BATCH, OTHER),
    ({"executor": False}, OTHER, BATCH),
    ({"executor": False, "task": False}, OTHER, OTHER),
])
def test_a_cluster_executor_and_its_task_processes(keys, executors, tasks):
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(tmp, workers=1, cores=2, memory="1g") as cluster:
        assert _policies(cluster.url, **keys) == ({executors}, {tasks})


@pytest.mark.parametrize("on", [True, False])
def test_local_task_processes(on):
    assert _policies("local[2]", task=on) == (set(), {BATCH if on else OTHER})
