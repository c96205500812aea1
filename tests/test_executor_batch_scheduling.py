"""An executor's threads run as SCHED_BATCH, its task processes at the policy it started
with (ember.executor.batch_scheduling), and spark.ember.executor.batchScheduling=false
leaves the executor as it was."""
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

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_BATCH"), reason="Linux scheduling")

_PROBE = r"""
import os, threading
from ember.executor.batch_scheduling import TASK_POLICY_ENV, batch_threads, restore_task_policy
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
restore_task_policy()
print(policy(0) == os.SCHED_OTHER, TASK_POLICY_ENV not in os.environ)
stop.set()
"""


def test_batch_threads_switches_every_thread_and_the_ones_started_later():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                         timeout=60, env={**os.environ, "PYTHONPATH": _ROOT})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"] * 7


def _policies(batch: bool) -> tuple[set[int], set[int]]:
    """Policies of a cluster executor's threads and of its task processes, after a job."""
    with tempfile.TemporaryDirectory() as tmp, \
            LocalCluster(tmp, workers=1, cores=2, memory="1g") as cluster:
        conf = ember.SparkConf().set("spark.ui.enabled", "false") \
            .set("spark.ember.executor.batchScheduling", str(batch).lower())
        sc = ember.SparkContext(cluster.url, "batch", conf=conf)
        try:
            assert sc.parallelize(range(10), 2).count() == 10
            executors: set[int] = set()
            tasks: dict[int, int] = {}         # fork server and task processes: policy
            deadline = time.monotonic() + 10
            while not (executors and len(tasks) >= 3) and time.monotonic() < deadline:
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


def test_a_cluster_executor_runs_as_batch_and_its_task_processes_do_not():
    executors, tasks = _policies(batch=True)
    assert executors == {os.SCHED_BATCH} and tasks == {os.SCHED_OTHER}


def test_batch_scheduling_off_leaves_the_executor_as_it_was():
    executors, tasks = _policies(batch=False)
    assert executors == {os.SCHED_OTHER} and tasks == {os.SCHED_OTHER}
