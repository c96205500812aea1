"""spark.executor.pyspark.memory on real processes: a task allocating past it fails with
the memory reason, and its executor (and the executor's other work) carries on."""
from __future__ import annotations

import pytest

from ember import SparkConf, SparkContext


def _hog(it):
    data = bytearray(3 << 30)           # far past the limit
    yield len(data)


def test_task_past_pyspark_memory_fails_with_the_reason_and_executor_survives(cluster, fresh_sc):
    conf = (SparkConf().set("spark.executor.pyspark.memory", "500m")
            .set("spark.task.maxFailures", "2").set("spark.ui.enabled", "false"))
    sc = fresh_sc(cluster.url, "pyspark-memory", conf)
    assert sc.parallelize(range(8), 4).sum() == 28
    before = {e.executor_id: e.address for e in sc.runtime.scheduler_backend.executors.values()}
    with pytest.raises(MemoryError) as e:           # a PythonException that is one
        sc.parallelize([1], 1).mapPartitions(_hog).collect()
    assert "exceeded its memory limit (spark.executor.pyspark.memory: 500 MiB" in \
        str(e.value)
    # the same executors run the next job: nothing was lost
    assert sc.parallelize(range(100), 4).map(lambda x: x * 2).sum() == 9900
    after = {e.executor_id: e.address for e in sc.runtime.scheduler_backend.executors.values()}
    assert after == before


def test_local_mode_applies_the_limit_too(fresh_sc):
    sc = fresh_sc("local[2]", "pyspark-memory-local",
                  SparkConf().set("spark.executor.pyspark.memory", "500m"))

    def limit(_):
        import resource
        yield resource.getrlimit(resource.RLIMIT_AS)[0]
    assert sc.parallelize([1], 1).mapPartitions(limit).collect() == [500 << 20]
    with pytest.raises(MemoryError, match="exceeded its memory limit"):
        sc.parallelize([1], 1).mapPartitions(_hog).collect()
    assert sc.parallelize(range(10), 2).sum() == 45


def test_executor_past_its_memory_is_killed_and_the_reason_reaches_the_driver_log(
        cluster, caplog):
    """spark.executor.memory (+ memoryOverhead) bounds the executor process: an executor
    whose resident size passes it is killed by its worker, and the driver logs why."""
    import logging
    import time
    caplog.set_level(logging.ERROR, logger="ember.scheduler.standalone")
    conf = (SparkConf().setMaster(cluster.url).setAppName("executor-memory")
            .set("spark.executor.memory", "8m").set("spark.executor.memoryOverhead", "2m")
            .set("spark.ui.enabled", "false"))
    sc = SparkContext(conf=conf)
    try:
        deadline = time.monotonic() + 120
        while "exceeded memory limit" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
        # whether the executor had registered (connection lost first) or not yet
        assert ("was removed by the cluster: FAILED: Executor app-" in caplog.text or
                "was removed before it registered: FAILED: Executor app-" in caplog.text)
        assert "MiB resident > 10 MiB (spark.executor.memory plus overhead); killed by the " \
               "worker" in caplog.text
    finally:
        sc.stop()


def test_cluster_driver_past_driver_memory_fails_with_the_reason(cluster, tmp_path):
    from tests.test_cluster_mode import submit, wait_driver, write_app
    app = write_app(tmp_path, "big_driver.py", """
        import time
        time.sleep(30)
    """)
    r = submit(cluster, "--driver-memory", "8m", "--conf", "spark.driver.memoryOverhead=2m",
               app)
    driver_id = r.stdout.split()[0]
    d = wait_driver(cluster, driver_id)
    assert d["state"] == "FAILED", d
    from tests.test_cluster_mode import ember
    st = ember("submit", "--master", cluster.url, "--status", driver_id)
    assert "exceeded memory limit" in st.stdout + st.stderr
    assert "> 10 MiB (spark.driver.memory plus overhead)" in st.stdout + st.stderr


def test_client_mode_driver_past_driver_memory_exits_with_the_reason(tmp_path):
    import subprocess
    import sys

    from tests.cluster import _env
    app = tmp_path / "app.py"
    app.write_text("import time\nprint('up', flush=True)\ntime.sleep(30)\n")
    r = subprocess.run([sys.executable, "-m", "ember.cli", "submit", "--master", "local[1]",
                        "--driver-memory", "8m", "--conf", "spark.driver.memoryOverhead=2m",
                        str(app)], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 52, (r.returncode, r.stderr)
    assert "ERROR Driver exceeded memory limit:" in r.stderr
    assert "> 10 MiB (spark.driver.memory plus overhead); exiting" in r.stderr
    # a driver within its memory is left alone
    ok = tmp_path / "ok.py"
    ok.write_text("import time\ntime.sleep(2.5)\nprint('done', flush=True)\n")
    r = subprocess.run([sys.executable, "-m", "ember.cli", "submit", "--master", "local[1]",
                        "--driver-memory", "512m", str(ok)],
                       capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
