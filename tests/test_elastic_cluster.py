"""Elastic scheduling on a real 2-worker cluster: dynamic allocation, the workers' external
shuffle services, graceful decommission (real master, worker, driver, executor processes)."""
from __future__ import annotations

import operator
import subprocess
import sys
import time

import pytest

from ember import SparkConf
from ember.deploy.local_cluster import LocalCluster, _env


@pytest.fixture(scope="module")
def elastic_cluster(tmp_path_factory):
    """Two 2-core workers, each with its own external shuffle service on a free port (port
    0: the worker tells its executors the port it got) and decommissioning enabled."""
    c = LocalCluster(str(tmp_path_factory.mktemp("elastic")), workers=2, cores=2,
                     conf={"spark.worker.timeout": "3", "spark.shuffle.service.enabled": "true",
                           "spark.shuffle.service.port": "0",
                           "spark.decommission.enabled": "true"})
    c.start()
    yield c
    c.stop()


def wait_until(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def dynamic_conf(**extra: str) -> SparkConf:
    conf = (SparkConf().set("spark.executor.cores", "1").set("spark.executor.memory", "512m")
            .set("spark.dynamicAllocation.enabled", "true")
            .set("spark.dynamicAllocation.minExecutors", "1")
            .set("spark.dynamicAllocation.maxExecutors", "4")
            .set("spark.dynamicAllocation.schedulerBacklogTimeout", "0.5s")
            .set("spark.dynamicAllocation.executorIdleTimeout", "3s")
            .set("spark.shuffle.service.enabled", "true"))
    for k, v in extra.items():
        conf.set(k.replace("_", "."), v)
    return conf


SECOND_APP = """
import sys
from ember import SparkConf, SparkContext
conf = (SparkConf().set("spark.executor.cores", "1").set("spark.cores.max", "2")
        .set("spark.executor.memory", "512m"))
sc = SparkContext(sys.argv[1], "elastic-second", conf=conf)
print("RESULT", sc.parallelize(range(10), 2).map(lambda x: x * 2).sum(), flush=True)
sc.stop()
"""


def run_app(cluster: LocalCluster, source: str) -> subprocess.Popen:
    """Another application in its own driver process."""
    return subprocess.Popen([sys.executable, "-c", source, cluster.url], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def test_dynamic_allocation_grows_shrinks_frees_cores_and_keeps_shuffle(elastic_cluster,
                                                                        fresh_sc):
    sc = fresh_sc(elastic_cluster.url, "elastic-da", dynamic_conf())
    backend = sc._backend
    map_runs = sc.accumulator(0)

    def mapper(it):
        map_runs.add(1)      # once per map task
        time.sleep(0.3)
        return ((x % 5, 1) for x in it)

    counts = sc.parallelize(range(200), 40).mapPartitions(mapper).reduceByKey(operator.add, 4)
    assert dict(counts.collect()) == {k: 40 for k in range(5)}
    assert map_runs.value == 40
    peak = {e for e in backend.executors}
    assert len(peak) == 4, "a burst of 40 tasks grows the application to maxExecutors"
    statuses = [st for sid in sc._tracker.shuffle_ids() for st in sc._tracker.statuses(sid)]
    assert {st.endpoint for st in statuses} == {"ExternalShuffleService"}
    writers = {st.executor_id for st in statuses}

    # a second application submitted while the first holds every core

    idle_since = time.monotonic()
    second = run_app(elastic_cluster, SECOND_APP)
    wait_until(lambda: len(backend.executors) == 1, 30, "shrink to minExecutors")
    shrink = time.monotonic() - idle_since
    assert shrink <= 3.0 + 1.0 + 1.5, f"shrunk in {shrink:.1f}s"   # idle timeout + 1 s (+ load)
    out, _ = second.communicate(timeout=120)
    assert second.returncode == 0 and "RESULT 90" in out, out[-3000:]

    # the removed executors' map output is read through their workers' shuffle services
    assert dict(counts.collect()) == {k: 40 for k in range(5)}
    assert map_runs.value == 40, "no map task was recomputed"
    assert writers - set(backend.executors), "outputs of removed executors were read"
