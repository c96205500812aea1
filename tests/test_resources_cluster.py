"""Custom resources on a real standalone cluster: two workers advertising fake GPUs (one
through a discovery script, one through spark.worker.resourcesFile), the master placing
executors by resource requests, tasks receiving addresses, stage-level profiles, and a worker
refusing to start when its discovery script fails."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from ember import SparkConf, TaskContext
from ember.deploy.local_cluster import LocalCluster, _env
from ember.resource import ExecutorResourceRequests, ResourceProfileBuilder, TaskResourceRequests

BASE_CONF = {"spark.worker.timeout": "10"}


def write_script(directory: str, name: str, body: str) -> str:
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory):
    """Worker 0 discovers GPUs 0 and 1 with a script; worker 1 reads GPUs 2 and 3 from a
    resources file. 2 cores and 2 GiB each."""
    d = str(tmp_path_factory.mktemp("gpu-cluster"))
    discover = write_script(d, "gpus.sh",
                            "echo '{\"name\": \"gpu\", \"addresses\": [\"0\", \"1\"]}'")
    alloc = os.path.join(d, "worker-resources.json")
    with open(alloc, "w") as f:
        json.dump([{"id": {"componentName": "spark.worker", "resourceName": "gpu"},
                    "addresses": ["2", "3"]}], f)
    c = LocalCluster(os.path.join(d, "cluster"), workers=0, cores=2, memory="2g",
                     conf=dict(BASE_CONF))
    c.start()
    try:
        c.conf = dict(BASE_CONF, **{"spark.worker.resource.gpu.amount": "2",
                                    "spark.worker.resource.gpu.discoveryScript": discover})
        c.add_worker()
        c.conf = dict(BASE_CONF, **{"spark.worker.resource.gpu.amount": "2",
                                    "spark.worker.resourcesFile": alloc})
        c.add_worker()
        c.n_workers = 2
        c.wait_for(lambda j: j.get("aliveworkers") == 2, 60)
        c.tmp = d
        yield c
    finally:
        c.stop()


def gpu_conf(cluster: LocalCluster, **extra: str) -> SparkConf:
    conf = (SparkConf().set("spark.executor.memory", "512m")
            .set("spark.executor.resource.gpu.amount", "2")
            .set("spark.task.resource.gpu.amount", "1"))
    for k, v in extra.items():
        conf.set(k.replace("_", "."), v)
    return conf


def timed_task(i: int) -> tuple:
    ctx = TaskContext.get()
    start = time.time()
    time.sleep(0.4)
    gpus = ctx.resources().get("gpu")
    return i, os.getppid(), gpus.addresses if gpus else [], start, time.time()


def assert_overlapping_tasks_hold_distinct_addresses(results: list) -> None:
    for n, (_, pid1, a1, s1, e1) in enumerate(results):
        for _, pid2, a2, s2, e2 in results[n + 1:]:
            if pid1 == pid2 and s1 < e2 and s2 < e1:
                assert not set(a1) & set(a2), (a1, a2)


def test_workers_advertise_their_resources(gpu_cluster):
    j = gpu_cluster.json()
    found = sorted(tuple(w["resources"]["gpu"]["addresses"]) for w in j["workers"])
    assert found == [("0", "1"), ("2", "3")]
    assert all(w["resourcesused"] == {"gpu": {"name": "gpu", "addresses": []}}
               for w in j["workers"])
    assert sorted(tuple(r["gpu"]["addresses"]) for r in gpu_cluster.json("/json/resources")[
        "resources"]) == [("0", "1"), ("2", "3")]


def test_tasks_receive_distinct_addresses(gpu_cluster, fresh_sc):
    sc = fresh_sc(gpu_cluster.url, "gpu-tasks", gpu_conf(gpu_cluster))
    results = sc.parallelize(range(8), 8).map(timed_task).collect()
    assert all(len(addrs) == 1 for _, _, addrs, _, _ in results)
    assert {a for _, _, addrs, _, _ in results for a in addrs} <= {"0", "1", "2", "3"}
    assert_overlapping_tasks_hold_distinct_addresses(results)
    j = gpu_cluster.json()
    app = j["activeapps"][0]
    assert app["resourcesperexecutor"] == [{"name": "gpu", "amount": 2}]
    used = sorted(a for w in j["workers"] for a in w["resourcesused"]["gpu"]["addresses"])
    assert used == ["0", "1", "2", "3"]       # each executor holds its worker's two GPUs
    sc.stop()
    gpu_cluster.wait_for(lambda j: all(not w["resourcesused"]["gpu"]["addresses"]
                                       for w in j["workers"]), 60)


def test_task_profile_runs_on_default_executors(gpu_cluster, fresh_sc):
    """Dynamic allocation off: a profile with task requests only (Spark's
    TaskResourceProfile) reuses the default executors, each task now taking both GPUs."""
    sc = fresh_sc(gpu_cluster.url, "gpu-task-profile", gpu_conf(gpu_cluster))
    plain = sc.parallelize(range(4), 4).map(timed_task).collect()
    rp = ResourceProfileBuilder().require(TaskResourceRequests().resource("gpu", 2)).build
    rdd = sc.parallelize(range(4), 4).withResources(rp)
    assert rdd.getResourceProfile() is rp and rp.id > 0
    results = rdd.map(timed_task).collect()
    assert {frozenset(a) for _, _, a, _, _ in results} <= {frozenset("01"), frozenset("23")}
    assert {pid for _, pid, _, _, _ in results} <= {pid for _, pid, _, _, _ in plain}
    assert_overlapping_tasks_hold_distinct_addresses(results)


def test_executor_profile_gets_its_own_executors(gpu_cluster, fresh_sc):
    """Dynamic allocation on: the default stage runs on GPU-less executors; the stage whose
    RDD carries a profile asking 1 core + 1 GPU per executor makes the backend request
    executors of that profile, and its tasks run only there. Once idle past
    executorIdleTimeout they are released (and their GPUs with them)."""
    conf = (SparkConf().set("spark.executor.memory", "512m").set("spark.executor.cores", "1")
            .set("spark.dynamicAllocation.enabled", "true")
            .set("spark.dynamicAllocation.executorIdleTimeout", "2s")
            .set("spark.dynamicAllocation.maxExecutors", "2"))
    sc = fresh_sc(gpu_cluster.url, "gpu-stage-level", conf)
    plain = sc.parallelize(range(4), 4).map(timed_task).collect()
    assert all(addrs == [] for _, _, addrs, _, _ in plain)
    rp = (ResourceProfileBuilder()
          .require(ExecutorResourceRequests().cores(1).memory("512m").resource("gpu", 1))
          .require(TaskResourceRequests().resource("gpu", 1)).build)
    results = sc.parallelize(range(4), 4).withResources(rp).map(timed_task).collect()
    assert all(len(addrs) == 1 for _, _, addrs, _, _ in results)
    assert not {pid for _, pid, _, _, _ in results} & {pid for _, pid, _, _, _ in plain}
    j = gpu_cluster.wait_for(lambda j: all(not w["resourcesused"]["gpu"]["addresses"]
                                           for w in j["workers"]), 60)
    assert j["activeapps"][0]["state"] == "RUNNING"
    # a later stage of the same profile gets executors again
    again = sc.parallelize(range(2), 2).withResources(rp).map(timed_task).collect()
    assert all(len(addrs) == 1 for _, _, addrs, _, _ in again)


def test_request_beyond_any_worker_waits_and_master_lives(gpu_cluster, fresh_sc, caplog):
    sc = fresh_sc(gpu_cluster.url, "gpu-too-big",
                  gpu_conf(gpu_cluster, spark_executor_resource_gpu_amount="3",
                           spark_starvation_timeout="1s"))
    app_id = sc.applicationId
    job = threading.Thread(target=lambda: pytest.raises(Exception, sc.parallelize([1]).count))
    job.start()
    gpu_cluster.wait_for(lambda j: any(a["id"] == app_id for a in j["activeapps"]), 30)
    deadline = time.time() + 30
    while ("App %s requires more resource than any of Workers could have." % app_id
           not in gpu_cluster.log("master.log")):
        assert time.time() < deadline, gpu_cluster.log("master.log")[-2000:]
        time.sleep(0.2)
    app = next(a for a in gpu_cluster.json()["activeapps"] if a["id"] == app_id)
    assert (app["state"], app["cores"]) == ("WAITING", 0)
    deadline = time.time() + 30      # the driver warns like Spark's starvation timer
    while "Initial job has not accepted any resources" not in caplog.text:
        assert time.time() < deadline
        time.sleep(0.2)
    sc.cancelAllJobs()
    job.join(60)
    assert not job.is_alive()
    sc.stop()
    j = gpu_cluster.wait_for(lambda j: not j["activeapps"], 30)
    assert j["status"] == "ALIVE" and j["aliveworkers"] == 2


@pytest.mark.parametrize("body,expected", [
    ("echo 'garbage'", "Error parsing JSON into ResourceInformation: garbage"),
    ("exit 3", "exited with code 3"),
])
def test_worker_with_bad_discovery_script_refuses_to_start(gpu_cluster, body, expected):
    script = write_script(gpu_cluster.tmp, f"bad-{expected[:5].strip()}.sh", body)
    proc = subprocess.run(
        [sys.executable, "-m", "ember.cli", "worker", "--host", "127.0.0.1", "-c", "1",
         "-m", "512m", "-d", os.path.join(gpu_cluster.tmp, "bad-work"),
         "--conf", "spark.worker.resource.gpu.amount=1",
         "--conf", f"spark.worker.resource.gpu.discoveryScript={script}", gpu_cluster.url],
        capture_output=True, text=True, timeout=120, env=_env())
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("Error: Failed to setup worker resources: ")
    assert script in errors[0] and expected in errors[0]
    assert "Traceback" not in proc.stderr
    assert gpu_cluster.json()["aliveworkers"] == 2


def test_a_local_cluster_whose_worker_cannot_start_says_why_at_once(tmp_path):
    """local-cluster[...] with a worker that exits (its discovery script fails): the start
    fails within seconds with the worker's own error, not a minute later with the
    master's log."""
    script = write_script(str(tmp_path), "fails.sh", "exit 3")
    cluster = LocalCluster(str(tmp_path / "c"), workers=1, cores=1,
                           conf={"spark.worker.resource.gpu.amount": "1",
                                 "spark.worker.resource.gpu.discoveryScript": script})
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"worker 0 exited with 1:(.|\n)*Failed to "
                                               r"setup worker resources(.|\n)*code 3"):
            cluster.start(timeout=60)
        assert time.monotonic() - started < 30
    finally:
        cluster.stop()


def test_cluster_mode_driver_gets_its_gpu(gpu_cluster, tmp_path):
    """spark.driver.resource.gpu.amount=1 in cluster mode: the master places the driver
    where a GPU is free, the worker hands its address to the driver (Spark's
    spark.driver.resourcesFile), and sc.resources shows it."""
    app = tmp_path / "driver_gpu.py"
    app.write_text("from ember import SparkContext\n"
                   "sc = SparkContext(appName='driver-gpu')\n"
                   "print('DRIVER GPUS', sc.resources['gpu'].addresses)\n"
                   "sc.stop()\n")
    r = subprocess.run(
        [sys.executable, "-m", "ember.cli", "submit", "--master", gpu_cluster.url,
         "--deploy-mode", "cluster", "--conf", "spark.driver.resource.gpu.amount=1",
         "--conf", "spark.executor.memory=512m", "--driver-memory", "512m", str(app)],
        capture_output=True, text=True, timeout=120, env=_env())
    assert r.returncode == 0, r.stderr
    driver_id = r.stdout.split()[0]
    j = gpu_cluster.wait_for(lambda j: any(
        d["id"] == driver_id and d["state"] in ("FINISHED", "FAILED", "ERROR")
        for d in j["completeddrivers"]), 120)
    d = next(d for d in j["completeddrivers"] if d["id"] == driver_id)
    assert d["state"] == "FINISHED"
    assert len(d["resources"]["gpu"]["addresses"]) == 1
    logs = subprocess.run([sys.executable, "-m", "ember.cli", "logs", driver_id, "--master",
                           gpu_cluster.url], capture_output=True, text=True, timeout=60,
                          env=_env())
    assert f"DRIVER GPUS {d['resources']['gpu']['addresses']}" in logs.stdout


def test_application_ui_shows_profiles_and_executor_resources(gpu_cluster, fresh_sc):
    """The driver's /api/v1 reports each stage's resource profile and each executor's
    addresses, as Spark's does."""
    import urllib.request
    sc = fresh_sc(gpu_cluster.url, "gpu-ui", gpu_conf(gpu_cluster))
    rp = ResourceProfileBuilder().require(TaskResourceRequests().resource("gpu", 2)).build
    sc.parallelize(range(2), 2).withResources(rp).map(timed_task).collect()
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"

    def get(path: str):
        with urllib.request.urlopen(base + path, timeout=10) as r:
            return json.loads(r.read())
    deadline = time.time() + 30
    while True:
        stages = get("/stages")
        executors = [e for e in get("/executors") if e["id"] != "driver"]
        if stages and len(executors) == 2 or time.time() > deadline:
            break
        time.sleep(0.2)
    assert [s["resourceProfileId"] for s in stages] == [rp.id]
    assert sorted(tuple(e["resources"]["gpu"]["addresses"]) for e in executors) == \
        [("0", "1"), ("2", "3")]
    assert all(e["resourceProfileId"] == 0 for e in executors)
    env = get("/environment")["resourceProfiles"]
    assert [p["id"] for p in env] == [0, rp.id]
    assert env[0]["executorResources"]["gpu"] == {"resourceName": "gpu", "amount": 2,
                                                  "discoveryScript": "", "vendor": ""}
    assert env[1]["taskResources"]["gpu"] == {"resourceName": "gpu", "amount": 2.0}
