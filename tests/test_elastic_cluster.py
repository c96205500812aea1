"""Elastic scheduling on a real 2-worker cluster: dynamic allocation, the workers' external
shuffle services, graceful decommission (real master, worker, driver, executor processes)."""
from __future__ import annotations

import glob
import json
import logging
import operator
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from ember import SparkConf, TaskContext
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


def get_json(url: str):
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read().decode())


def wait_until(predicate, timeout: float = 60.0, what: str = "condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# Each record's value carries PAD so every map output is larger than INLINE_BYTES and goes
# to a shuffle file: smaller outputs travel inside their MapStatus, which no shuffle
# service, migration or recompute is needed for. count() undoes the padding.
PAD = "p" * 1200


def count(pad: str) -> int:
    return len(pad) // len(PAD)


def in_files(sc) -> bool:
    """Every registered map output of the application is in a shuffle file."""
    tracker = sc.runtime.map_output_tracker
    return all(st is not None and st.data is None for sid in tracker.shuffle_ids()
               for st in tracker.statuses(sid))


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
                                                                        fresh_sc, tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    sc = fresh_sc(elastic_cluster.url, "elastic-da", dynamic_conf(
        spark_eventLog_enabled="true", spark_eventLog_dir=str(events)))
    backend = sc.runtime.scheduler_backend
    map_runs = sc.accumulator(0)

    def mapper(it):
        map_runs.add(1)      # once per map task
        time.sleep(0.3)
        return ((x % 5, PAD) for x in it)

    counts = (sc.parallelize(range(200), 40).mapPartitions(mapper).reduceByKey(operator.add, 4)
              .mapValues(count))
    assert dict(counts.collect()) == {k: 40 for k in range(5)}
    assert in_files(sc)
    assert map_runs.value == 40
    peak = {e for e in backend.executors}
    assert len(peak) == 4, "a burst of 40 tasks grows the application to maxExecutors"
    statuses = [st for sid in sc.runtime.map_output_tracker.shuffle_ids() for st in sc.runtime.map_output_tracker.statuses(sid)]
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

    # removals and their reasons: the UI's executors API, /metrics/prometheus, the event log
    base = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}"

    def removed_in_ui():    # the UI applies events in a process of its own, at idle priority
        gone = [e for e in get_json(f"{base}/allexecutors") if not e["isActive"]]
        return gone if len(gone) == 3 else None
    removed = wait_until(removed_in_ui, 30, "3 removed executors in UI")
    assert all("idle for 3 seconds (dynamic allocation)" in e["removeReason"] for e in removed)
    metrics = urllib.request.urlopen(f"{sc.uiWebUrl}/metrics/prometheus").read().decode()
    assert 'cause="idle"} 3' in metrics and "ember_driver_executors_added_total" in metrics
    sc.stop()
    log = "".join(p.read_text() for p in events.iterdir())
    assert log.count('"Event":"SparkListenerExecutorAdded"') == 4
    assert log.count('"Event":"SparkListenerExecutorRemoved"') == 3
    assert "dynamic allocation" in log


def test_shuffle_of_a_crashed_executor_is_served_by_the_shuffle_service(elastic_cluster,
                                                                         fresh_sc):
    import psutil
    conf = (SparkConf().set("spark.executor.cores", "1").set("spark.executor.memory", "512m")
            .set("spark.cores.max", "2").set("spark.shuffle.service.enabled", "true"))
    sc = fresh_sc(elastic_cluster.url, "elastic-crash", conf)
    backend = sc.runtime.scheduler_backend
    wait_until(lambda: len(backend.executors) == 2, 60, "2 executors")
    map_runs = sc.accumulator(0)

    def mapper(it):
        map_runs.add(1)
        return ((x % 7, PAD) for x in it)

    counts = (sc.parallelize(range(700), 6).mapPartitions(mapper).reduceByKey(operator.add, 3)
              .mapValues(count))
    assert dict(counts.collect()) == {k: 100 for k in range(7)}
    assert in_files(sc)
    writers = {st.executor_id for sid in sc.runtime.map_output_tracker.shuffle_ids()
               for st in sc.runtime.map_output_tracker.statuses(sid)}
    victim_id = sorted(writers)[0]
    victims = [p for p in elastic_cluster.all_processes()
               if "ember.executor.backend" in " ".join(p.cmdline())
               and sc.applicationId in p.cmdline()
               and p.cmdline()[p.cmdline().index("--executor-id") + 1] == victim_id]
    assert len(victims) == 1
    victims[0].kill()                                  # kill -9: a crash
    psutil.wait_procs(victims, timeout=10)
    wait_until(lambda: victim_id not in backend.executors, 60, "the crash to be noticed")
    assert dict(counts.collect()) == {k: 100 for k in range(7)}
    assert map_runs.value == 6, "the crashed executor's map output was not recomputed"


def test_executor_decommissioned_by_its_own_signal_migrates_its_shuffle(elastic_cluster,
                                                                         fresh_sc):
    """SIGPWR to an executor: ExecutorDecommissioning to the driver, DecommissionExecutor
    back, its map output moves to the other executor, and nothing is recomputed."""
    conf = (SparkConf().set("spark.executor.cores", "1").set("spark.executor.memory", "512m")
            .set("spark.cores.max", "2").set("spark.decommission.enabled", "true")
            .set("spark.storage.decommission.enabled", "true"))
    sc = fresh_sc(elastic_cluster.url, "elastic-executor-signal", conf)
    backend = sc.runtime.scheduler_backend
    wait_until(lambda: len(backend.executors) == 2, 60, "2 executors")
    map_runs = sc.accumulator(0)

    def mapper(it):
        map_runs.add(1)
        return ((x % 7, PAD) for x in it)

    counts = (sc.parallelize(range(700), 6).mapPartitions(mapper).reduceByKey(operator.add, 3)
              .mapValues(count))
    assert dict(counts.collect()) == {k: 100 for k in range(7)}
    assert in_files(sc)
    victim_id = sorted(backend.executors)[0]
    victim = next(p for p in elastic_cluster.all_processes()
                  if "ember.executor.backend" in " ".join(p.cmdline())
                  and sc.applicationId in p.cmdline()
                  and p.cmdline()[p.cmdline().index("--executor-id") + 1] == victim_id)
    victim.send_signal(signal.SIGPWR)
    wait_until(lambda: victim_id not in backend.executors, 60, "the executor to drain")
    assert all(st.executor_id != victim_id for sid in sc.runtime.map_output_tracker.shuffle_ids()
               for st in sc.runtime.map_output_tracker.statuses(sid))
    assert dict(counts.collect()) == {k: 100 for k in range(7)}
    assert map_runs.value == 6


CLUSTER_MODE_APP = """
import threading, time
from ember import SparkConf, SparkContext
sc = SparkContext(conf=SparkConf())
execs = sc.runtime.scheduler_backend.executors
peak = [0]
def watch():
    while True:
        peak[0] = max(peak[0], len(execs))
        time.sleep(0.02)
threading.Thread(target=watch, daemon=True).start()
n = sc.parallelize(range(30), 30).map(lambda x: (time.sleep(0.3), x)[1]).count()
deadline = time.time() + 60
while len(execs) > 1 and time.time() < deadline:
    time.sleep(0.05)
print("COUNT", n, "PEAK", peak[0], "AFTER", len(execs), flush=True)
sc.stop()
"""


def test_dynamic_allocation_in_cluster_mode(elastic_cluster, tmp_path):
    """The driver runs on a worker (1 core); its application grows to maxExecutors 3 and
    shrinks back to minExecutors 1."""
    app = tmp_path / "elastic_app.py"
    app.write_text(CLUSTER_MODE_APP)
    conf = dynamic_conf(spark_dynamicAllocation_maxExecutors="3",
                        spark_dynamicAllocation_executorIdleTimeout="2s",
                        spark_driver_memory="256m")   # leaves its worker room for one
    args = [a for k, v in conf.getAll() for a in ("--conf", f"{k}={v}")]
    r = subprocess.run([sys.executable, "-m", "ember.cli", "submit", "--master",
                        elastic_cluster.url, "--deploy-mode", "cluster", "--follow", *args,
                        str(app)], capture_output=True, text=True, timeout=180, env=_env())
    assert r.returncode == 0, r.stdout + r.stderr
    assert "COUNT 30 PEAK 3 AFTER 1" in r.stdout, r.stdout + r.stderr


class StageAttempts:
    """A sync listener recording every stage attempt submitted."""

    def __init__(self) -> None:
        self.attempts: list[tuple[int, int]] = []

    def on_event(self, event) -> None:
        from ember.scheduler.listener import StageSubmitted
        if isinstance(event, StageSubmitted):
            self.attempts.append((event.stage_info.stage_id, event.stage_info.attempt_id))


def test_decommissioned_worker_migrates_shuffle_and_cache_mid_job(elastic_cluster, fresh_sc,
                                                                  tmp_path, caplog):
    conf = (SparkConf().set("spark.executor.cores", "1").set("spark.executor.memory", "512m")
            .set("spark.cores.max", "4").set("spark.decommission.enabled", "true")
            .set("spark.storage.decommission.enabled", "true")
            .set("spark.locality.wait", "30s"))
    sc = fresh_sc(elastic_cluster.url, "elastic-decommission", conf)
    stages = StageAttempts()
    sc.runtime.bus.sync_listeners.append(stages)
    backend = sc.runtime.scheduler_backend
    wait_until(lambda: len(backend.executors) == 4, 60, "4 executors")
    map_runs = sc.accumulator(0)
    cache_runs = sc.accumulator(0)

    def mapper(it):
        map_runs.add(1)
        return ((x % 400, x) for x in it)      # > INLINE_BYTES per map: shuffle files

    computed = tmp_path / "computed"

    def cached(it):
        cache_runs.add(1)
        with open(computed, "a") as f:      # where: the executor's directory
            f.write(f"partition {TaskContext.get().partitionId()} in {os.getcwd()}\n")
        return list(it)

    data = (sc.parallelize(range(4000), 8).mapPartitions(mapper)
            .reduceByKey(operator.add, 8).mapPartitions(cached).cache())
    expected = sum(range(4000))
    assert data.values().sum() == expected
    assert (map_runs.value, cache_runs.value) == (8, 8)
    assert in_files(sc)
    victim = elastic_cluster.workers[1]
    victim_id = next(w["id"] for w in elastic_cluster.json()["workers"]
                     if w["webuiaddress"].endswith(f":{elastic_cluster.worker_ui[1]}"))
    before = set(backend.executors)
    for i in range(6):
        if i == 2:
            os.kill(victim.pid, signal.SIGPWR)       # spark.worker.decommission.signal
        assert data.map(lambda kv: kv[1] * (i + 1)).sum() == expected * (i + 1)
    elastic_cluster.wait_for(lambda j: any(w["id"] == victim_id
                                           and w["state"] == "DECOMMISSIONED"
                                           for w in j["workers"]), 30)
    wait_until(lambda: len(backend.executors) == 2, 60, "the drained executors to exit")
    assert data.map(lambda kv: kv[1]).sum() == expected
    assert map_runs.value == 8, "no map output was recomputed"
    assert cache_runs.value == 8, ("migrated cached blocks were read, not recomputed\n"
                                   + computed.read_text() + migration_log(elastic_cluster, sc))
    assert all(attempt == 0 for _, attempt in stages.attempts), stages.attempts
    assert len(set(backend.executors) & before) == 2
    # a master's report of a drained executor's exit, after it went, is no error (this
    # master sends none once it decommissioned the worker; dynamic allocation's drains get one)
    gone = before - set(backend.executors)
    for eid in gone:
        backend.executor_removed(eid, "EXITED: Command exited with code 0", 0, None)
    handled = threading.Event()
    backend.loop.post(handled.set)                 # after the reports, on the same loop
    assert handled.wait(10)
    assert not [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def migration_log(cluster, sc) -> str:
    """What the application's executors logged of their decommissioning."""
    lines = []
    for path in sorted(glob.glob(os.path.join(cluster.workdir, "work-*", sc.applicationId,
                                              "*", "stderr"))):
        with open(path, errors="replace") as f:
            lines += [f"{path}: {line}" for line in f if "ecommission" in line
                      or "igrat" in line]
    return "".join(lines)


def test_decommission_worker_cli_drains_a_worker_daemon(elastic_cluster, tmp_path, monkeypatch,
                                                        capsys):
    """`ember decommission-worker` (sbin/decommission-worker.sh): SIGPWR to the worker
    daemon of the pid file; the master marks it DECOMMISSIONED."""
    from ember.deploy.worker import cli as worker_cli
    monkeypatch.setenv("EMBER_PID_DIR", str(tmp_path / "pids"))
    monkeypatch.setenv("EMBER_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("SPARK_IDENT_STRING", "decom")
    monkeypatch.delenv("SPARK_WORKER_INSTANCES", raising=False)
    monkeypatch.delenv("SPARK_WORKER_PORT", raising=False)
    assert worker_cli.decommission_main([]) == 0
    assert "no worker to decommission" in capsys.readouterr().out
    try:
        assert worker_cli.start_main([elastic_cluster.url, "-h", "127.0.0.1", "--webui-port",
                                      "0", "-d", str(tmp_path / "work"), "-c", "1", "-m", "1G",
                                      "--conf", "spark.decommission.enabled=true",
                                      "--conf", "spark.worker.timeout=3"]) == 0
        elastic_cluster.wait_for(lambda j: any(w["state"] == "ALIVE" and w["cores"] == 1
                                               for w in j["workers"]), 60)
        assert worker_cli.decommission_main([]) == 0
        assert "decommissioning worker" in capsys.readouterr().out
        elastic_cluster.wait_for(lambda j: any(
            w["state"] == "DECOMMISSIONED" and w["cores"] == 1 for w in j["workers"]), 60)
    finally:
        worker_cli.stop_main([])


def test_spark_context_refuses_invalid_dynamic_allocation_settings():
    """Spark's validateSettings fails the SparkContext itself (and leaves none running)."""
    from ember import SparkContext
    from ember.errors import SparkException
    bad = dynamic_conf(spark_shuffle_service_enabled="false",
                       spark_dynamicAllocation_shuffleTracking_enabled="false")
    with pytest.raises(SparkException, match="Dynamic allocation of executors requires one "
                                             "of the following conditions"):
        SparkContext("spark://127.0.0.1:1", "invalid-da", conf=bad)
    with pytest.raises(SparkException, match=r"minExecutors \(5\) must be less than or equal"):
        SparkContext("spark://127.0.0.1:1", "invalid-da",
                     conf=dynamic_conf(spark_dynamicAllocation_minExecutors="5"))
