"""The local-cluster[N,C,M] master (Spark's test master): a real master and N workers as
child processes of the driver, the application running on them as on spark://, all of them
gone after stop() or after a driver that exits without stopping."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import psutil
import pytest

from ember import BarrierTaskContext, SparkContext
from ember.errors import SparkException
from tests.cluster import ROOT, _env

pytestmark = pytest.mark.timeout(240)


def _children() -> list[psutil.Process]:
    return psutil.Process().children(recursive=True)


@pytest.mark.parametrize("master", ["local-cluster[2,1]", "local-cluster[2,1,1024,3]",
                                    "local-cluster[a,1,1024]", "local-cluster(2,1,1024)"])
def test_malformed_local_cluster_masters_are_refused(fresh_sc, master):
    before = {p.pid for p in _children()}
    with pytest.raises(SparkException) as e:
        fresh_sc(master)
    assert str(e.value) == f"Could not parse Master URL: '{master}'"
    assert {p.pid for p in _children()} <= before
    assert SparkContext._active_spark_context is None


def test_workers_smaller_than_an_executor_are_refused_before_starting_anything(fresh_sc):
    before = {p.pid for p in _children()}
    with pytest.raises(SparkException) as e:
        fresh_sc("local-cluster[2,1,512]")
    assert str(e.value) == "Asked to launch cluster with 512 MiB/worker but requested 1024 " \
                           "MiB/executor"
    assert {p.pid for p in _children()} <= before


def test_workers_with_fewer_cores_than_a_task_needs_are_refused(fresh_sc):
    with pytest.raises(SparkException) as e:
        fresh_sc("local-cluster[1,0,1024]")
    assert str(e.value) == "The number of cores per executor (=0) has to be >= the number of " \
                           "cpus per task = 1."
    assert SparkContext._active_spark_context is None


def test_local_cluster_runs_jobs_and_barrier_stages_on_real_daemons_and_stops_them(fresh_sc):
    sc = fresh_sc("local-cluster[ 2 , 1 , 1024 ]", "local-cluster-app")
    cluster = sc.runtime.local_cluster
    assert sc.master == "local-cluster[ 2 , 1 , 1024 ]"
    j = cluster.json()
    assert j["status"] == "ALIVE" and j["aliveworkers"] == 2
    assert sorted((w["cores"], w["memory"]) for w in j["workers"]) == [(1, 1024), (1, 1024)]
    assert any(a["id"] == sc.applicationId for a in j["activeapps"])
    daemons = _children()
    assert sc.parallelize(range(100), 4).map(lambda x: (x % 3, x)).reduceByKey(
        lambda a, b: a + b).collectAsMap() == {0: 1683, 1: 1617, 2: 1650}

    def where(it):
        ctx = BarrierTaskContext.get()
        return [ctx.allGather(str(os.getppid()))]
    import time
    deadline = time.time() + 60      # both executors (one core each) must have registered
    while sc.runtime.scheduler_backend.max_num_concurrent_tasks() < 2 and time.time() < deadline:
        time.sleep(0.1)
    gathered = sc.parallelize(range(2), 2).barrier().mapPartitions(where).collect()
    assert gathered[0] == gathered[1] and len(set(gathered[0])) == 2, \
        "one barrier task on each worker's executor"
    everything = _children()
    sc.stop()
    gone, alive = psutil.wait_procs(everything, timeout=30)
    assert not alive, f"left running after stop(): {alive}"
    assert {p.pid for p in daemons} <= {p.pid for p in gone}


def test_a_driver_exiting_without_stop_leaves_no_processes(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import json, psutil
        from ember import SparkContext
        sc = SparkContext("local-cluster[1,1,1024]", "no-stop")
        assert sc.parallelize(range(10), 2).sum() == 45
        print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]),
              flush=True)
        # no sc.stop(): the interpreter exits with the context still running
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180, cwd=ROOT, env=_env())
    assert out.returncode == 0, out.stderr[-3000:]
    pids = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(pids) >= 3, "a master, a worker and an executor at least"
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"leaked: {[p.cmdline() for p in alive]}"


def test_local_cluster_daemons_share_the_applications_authentication(fresh_sc):
    from ember import SparkConf
    conf = SparkConf().set("spark.authenticate", "true") \
        .set("spark.authenticate.secret", "local-cluster-test-secret-0123456789")
    sc = fresh_sc("local-cluster[1,1,1024]", "authenticated", conf=conf)
    assert sc.parallelize(range(10), 2).sum() == 45
    daemons = [p for p in _children() if "ember.cli" in " ".join(p.cmdline())]
    assert daemons and not any("local-cluster-test-secret" in " ".join(p.cmdline())
                               for p in daemons), "the secret never goes on a command line"


def test_a_killed_driver_takes_its_local_cluster_down(tmp_path):
    script = tmp_path / "driver.py"
    script.write_text(textwrap.dedent("""
        import json, os, psutil, signal
        from ember import SparkContext
        sc = SparkContext("local-cluster[1,1,1024]", "killed")
        assert sc.parallelize(range(10), 2).sum() == 45
        print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]),
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)      # no atexit, no stop()
    """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=180, cwd=ROOT, env=_env())
    assert out.returncode == -9, out.stderr[-3000:]
    procs = []
    for pid in json.loads(out.stdout.strip().splitlines()[-1]):
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=30)
    assert not alive, f"leaked: {[p.cmdline() for p in alive]}"


def test_each_worker_of_a_local_cluster_runs_its_own_shuffle_service(fresh_sc):
    """On one host Spark's fixed port 7337 fits one service: the second worker could not
    bind it and exited, and the context failed to start. Each takes a free port unless
    spark.shuffle.service.port says."""
    from ember import SparkConf
    sc = fresh_sc("local-cluster[2,1,1024]", "shuffle-services",
                  conf=SparkConf().set("spark.shuffle.service.enabled", "true"))
    assert sc.runtime.local_cluster.json()["aliveworkers"] == 2
    pairs = sc.parallelize(range(100), 4).map(lambda x: (x % 3, "v" * 400 + str(x)))
    assert pairs.groupByKey().mapValues(len).collectAsMap() == {0: 34, 1: 33, 2: 33}
    served = {(st.address, st.endpoint) for sid in sc.runtime.map_output_tracker.shuffle_ids()
              for st in sc.runtime.map_output_tracker.statuses(sid) if st is not None}
    assert len(served) == 2 and {e for _a, e in served} == {"ExternalShuffleService"}
