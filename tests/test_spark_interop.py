"""Spark's own programs against Ember, run from the jars of the pyspark package (the test
extra pins the Spark version Ember reports) on Java 17:

- Spark's HistoryServer loads Ember's event logs - a real local application (shuffle, cache,
  a failed job) and a synthetic one with every task-end reason - and its /api/v1 answers
  agree with Ember's history server;
- Spark's RestSubmissionClient (behind spark-submit's REST path, --status and --kill)
  submits a Python app to an Ember master, sees it RUNNING, kills it, sees it KILLED.

Why: "Spark can read it" is a claim about Spark's parsers that only Spark can check (a block
manager port of 0 once made Spark's history server fail every page of an Ember app).
"""
from __future__ import annotations

import glob
import io
import json
import os
import subprocess
import sys
import time
import urllib.request
import zipfile
from typing import Any

import pytest
import pyspark

from ember import SparkConf
from ember.deploy.local_cluster import LocalCluster, free_port
from ember.scheduler import listener as sl
from ember.scheduler.task import ExecutorLostFailure, FetchFailed
from ember.ui.api import api_get, api_response
from ember.ui.event_log import EventLog
from ember.ui.history_server import HistoryProvider
from ember.ui.ui_process import UiProcess

from test_app_ui import T0, _info, app_events

SPARK_JARS = os.path.join(os.path.dirname(pyspark.__file__), "jars", "*")
JAVA_ENV = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_HOME=os.path.dirname(
    pyspark.__file__))


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


@pytest.fixture
def spark_history_server(tmp_path):
    """Start Spark's HistoryServer on a log dir: a function (n apps) -> its /api/v1 URL."""
    log_dir = tmp_path / "spark-events"
    log_dir.mkdir()
    port = free_port()
    proc = None

    def start(expected_apps: int) -> str:
        nonlocal proc
        proc = subprocess.Popen(
            ["java", "-Xmx512m", "-cp", SPARK_JARS,
             f"-Dspark.history.fs.logDirectory=file:{log_dir}",
             f"-Dspark.history.ui.port={port}", "-Dspark.history.fs.update.interval=1s",
             "org.apache.spark.deploy.history.HistoryServer"],
            env=JAVA_ENV, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "shs.log", "wb"))
        api = f"http://127.0.0.1:{port}/api/v1"
        deadline = time.time() + 90
        while time.time() < deadline:
            assert proc.poll() is None, (tmp_path / "shs.log").read_text()[-3000:]
            try:
                if len(_get_json(api + "/applications")) == expected_apps:
                    return api
            except OSError:
                pass
            time.sleep(0.5)
        raise AssertionError("Spark's history server did not list the applications:\n"
                             + (tmp_path / "shs.log").read_text()[-3000:])

    start.log_dir = log_dir
    yield start
    if proc is not None:
        proc.kill()
        proc.wait()


def _synthetic_log(log_dir: str, crashed: bool = False) -> str:
    """app_events (every other reason) plus a stage whose tasks end in FetchFailed and
    ExecutorLostFailure, written the way a driver writes it (EventLog + UiProcess). A
    `crashed` app (id app-crashed) stops mid-stage: no ApplicationEnd, still .inprogress."""
    s9 = sl.StageInfo(9, 0, "collect at b.py:1", 2)
    events = app_events("synthetic")[:-1] + [
        sl.JobStart(9, T0 + 4, [sl.StageInfo(9, 0, "collect at b.py:1", 2)], {}),
        sl.StageSubmitted(s9, {})]
    for tid, reason in ((90, FetchFailed(0, 1, 0, "1", "shuffle block lost")),
                        (91, ExecutorLostFailure("1", False, "worker lost"))):
        events.append(sl.TaskStart(9, 0, _info(tid, tid - 90, T0 + 4.01)))
        events.append(sl.TaskEnd(9, 0, "ResultTask", reason,
                                _info(tid, tid - 90, T0 + 4.01, state="FAILED",
                                      finish=T0 + 4.02), {}))
    s9.completion_time, s9.failure_reason = T0 + 4.03, "fetch failed"
    events += [sl.StageCompleted(s9), sl.JobEnd(9, T0 + 4.04, False, "fetch failed"),
               sl.ApplicationEnd(T0 + 5)]
    app_id = "app-1"
    if crashed:
        app_id = "app-crashed"
        events = [sl.ApplicationStart("crashed", app_id, T0, "alice")
                  if isinstance(e, sl.ApplicationStart) else e for e in events[:-6]]
    conf = {"spark.eventLog.dir": log_dir}
    writer, event_log = UiProcess(conf, None, event_log=True), EventLog(conf)
    writer.open_log(event_log.start(app_id))
    writer.on_events(events)
    writer.close()
    if not crashed:
        event_log.finish()
    return app_id


def _real_app_log(fresh_sc, log_dir: str, **extra: str) -> str:
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", log_dir).set("spark.ui.enabled", "false")
            .setAll(list(extra.items())))
    sc = fresh_sc("local[2]", "interop <app>", conf)
    pairs = sc.parallelize(range(400), 4).map(lambda x: (x % 7, x)).cache()
    assert pairs.reduceByKey(lambda a, b: a + b).count() == 7
    assert pairs.count() == 400
    with pytest.raises(Exception):
        sc.parallelize(range(4), 2).map(lambda x: 1 / 0).collect()
    sc.stop()
    return sc.applicationId


JOB_FIELDS = ("jobId", "status", "stageIds", "numTasks", "numCompletedTasks",
              "numFailedTasks", "numKilledTasks", "numActiveTasks")
STAGE_FIELDS = ("stageId", "attemptId", "status", "numTasks", "numCompleteTasks",
                "numFailedTasks", "numKilledTasks", "shuffleReadBytes", "shuffleWriteBytes",
                "shuffleWriteRecords", "executorRunTime")
EXECUTOR_FIELDS = ("id", "completedTasks", "failedTasks", "totalTasks", "totalShuffleRead",
                   "totalShuffleWrite", "isActive")
RDD_FIELDS = ("id", "name", "numPartitions", "numCachedPartitions", "memoryUsed", "diskUsed")


def _pick(items: list[dict], fields: tuple[str, ...], key: str) -> list[dict]:
    return sorted(({f: item.get(f) for f in fields} for item in items),
                  key=lambda d: d[key])


def _assert_same_answers(spark: str, log_dir: str, apps: list[str]) -> None:
    """Spark's history server (at `spark`) and Ember's agree on every app of `log_dir`."""
    ember = HistoryProvider(log_dir)

    def ours(path: str) -> Any:
        status, value = api_get(ember, path, {})
        assert status == 200, (path, value)
        return json.loads(json.dumps(value))

    listed = {a["id"]: a for a in _get_json(spark + "/applications")}
    assert set(listed) == set(apps) == {a["id"] for a in ours("/applications")}
    for app in apps:
        base = f"/applications/{app}"
        theirs = listed[app]["attempts"][0]
        mine = ours(base)["attempts"][0]
        assert (theirs["completed"], theirs["sparkUser"], listed[app]["name"]) == \
            (mine["completed"], mine["sparkUser"], ours(base)["name"])
        for kind, fields, key in (("jobs", JOB_FIELDS, "jobId"),
                                  ("stages", STAGE_FIELDS, "stageId"),
                                  ("allexecutors", EXECUTOR_FIELDS, "id"),
                                  ("storage/rdd", RDD_FIELDS, "id")):
            spark_answer = _get_json(f"{spark}{base}/{kind}")
            assert _pick(spark_answer, fields, key) == _pick(ours(f"{base}/{kind}"), fields,
                                                             key), (app, kind)
        status, headers, body = api_response(ember, f"{base}/logs", {})
        with urllib.request.urlopen(f"{spark}{base}/logs", timeout=10) as r:
            spark_zip = zipfile.ZipFile(io.BytesIO(r.read()))
        assert status == 200 and headers["Content-Disposition"] == \
            f"attachment; filename=eventLogs-{app}.zip"
        assert sorted(n for n in spark_zip.namelist() if not n.endswith(".crc")) == \
            sorted(zipfile.ZipFile(io.BytesIO(body)).namelist()), app
        stage = ours(f"{base}/stages")[0]
        path = f"{base}/stages/{stage['stageId']}/{stage['attemptId']}/taskList?length=100"
        task_fields = ("taskId", "status", "executorId", "errorMessage")
        spark_tasks = _pick(_get_json(spark + path), task_fields, "taskId")
        my_tasks = _pick(ours(path.split("?")[0]), task_fields, "taskId")
        for theirs_task, my_task in zip(spark_tasks, my_tasks):
            if (my_task["errorMessage"] or "").startswith("FetchFailed("):
                # Spark names the block manager (host, port), which Ember does not have
                shared = "shuffleId=0, mapIndex=1, "
                assert shared in theirs_task.pop("errorMessage") and \
                    shared in my_task.pop("errorMessage")
        assert spark_tasks == my_tasks, app


def test_spark_history_server_reads_ember_event_logs(spark_history_server, fresh_sc) -> None:
    """A plain log, Spark 4's default layout (rolling, zstd), the synthetic log and a
    crashed app's log."""
    log_dir = str(spark_history_server.log_dir)
    apps = [_real_app_log(fresh_sc, log_dir),
            _real_app_log(fresh_sc, log_dir, **{"spark.eventLog.compress": "true",
                                                "spark.eventLog.rolling.enabled": "true"}),
            _synthetic_log(log_dir), _synthetic_log(log_dir, crashed=True)]
    assert f"eventlog_v2_{apps[1]}" in os.listdir(log_dir)
    assert "app-crashed.inprogress" in os.listdir(log_dir)
    _assert_same_answers(spark_history_server(expected_apps=4), log_dir, apps)


SPARK_APP = """
import sys
from pyspark import SparkConf, SparkContext
ids = []
for extra in ({}, {"spark.eventLog.rolling.enabled": "false",
                   "spark.eventLog.compress": "false"}):
    conf = (SparkConf().setMaster("local[2]").setAppName("real spark <app>")
            .set("spark.eventLog.enabled", "true").set("spark.eventLog.dir", sys.argv[1])
            .set("spark.ui.enabled", "false").setAll(list(extra.items())))
    sc = SparkContext(conf=conf)
    pairs = sc.parallelize(range(400), 4).map(lambda x: (x % 7, x)).cache()
    assert pairs.reduceByKey(lambda a, b: a + b).count() == 7 and pairs.count() == 400
    try:
        sc.parallelize(range(4), 2).map(lambda x: 1 / 0).collect()
    except Exception:
        pass
    ids.append(sc.applicationId)
    sc.stop()
print(" ".join(ids))
"""


def test_ember_history_server_reads_sparks_own_event_logs(spark_history_server,
                                                          tmp_path) -> None:
    """Spark 4's default log (a rolling directory of zstd files) and a single plain file."""
    log_dir = str(spark_history_server.log_dir)
    script = tmp_path / "spark_app.py"
    script.write_text(SPARK_APP)
    out = subprocess.run([sys.executable, str(script), f"file:{log_dir}"],
                         env=dict(JAVA_ENV, PYSPARK_PYTHON=sys.executable), cwd=tmp_path,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    apps = out.stdout.split()
    assert sorted(os.listdir(log_dir)) == sorted([f"eventlog_v2_{apps[0]}", apps[1]])
    _assert_same_answers(spark_history_server(expected_apps=2), log_dir, apps)


def test_spark_rest_client_submits_polls_and_kills(tmp_path) -> None:
    app = tmp_path / "sleeper.py"
    app.write_text("import time\nprint('up', flush=True)\ntime.sleep(60)\n")
    probe = os.path.join(os.path.dirname(__file__), "java", "RestProbe.java")
    # room for Spark's 1g driver and the 1g executor Ember's admission keeps for its app
    with LocalCluster(str(tmp_path / "cluster"), workers=1, memory="3g") as cluster:
        out = subprocess.run(["java", "-cp", SPARK_JARS, probe, cluster.rest_url, str(app)],
                             env=JAVA_ENV, capture_output=True, text=True, timeout=180)
        lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
        assert out.returncode == 0, out.stderr[-3000:]
        ok, driver_id = lines["created"].split()
        assert ok == "true" and driver_id.startswith("driver-")
        assert (lines["running"], lines["kill"], lines["killed"]) == ("RUNNING", "true",
                                                                      "KILLED")
        [driver] = [d for d in cluster.json()["completeddrivers"] if d["id"] == driver_id]
        assert driver["state"] == "KILLED"


# PySpark itself (the test extra's pyspark, on the JVM): reads what Ember wrote, writes its
# own; prints the repr of what it read
_PYSPARK_FILES = r"""
import sys
from pyspark import SparkContext
d = sys.argv[1]
sc = SparkContext("local[2]", "hadoop-files")
for name in ("seq", "maps", "gzip", "typed"):
    print(name, repr(sorted(sc.sequenceFile(f"{d}/ember/{name}", minSplits=3).collect())))
print("pickle", repr(sorted(sc.pickleFile(f"{d}/ember/pickle").collect(), key=repr)))
for name in ("deflate", "bz2"):
    print(name, repr(sorted(sc.textFile(f"{d}/ember/{name}").collect())))
    sc.parallelize([str(i) for i in range(3000)], 2).saveAsTextFile(
        f"{d}/spark/{name}", "org.apache.hadoop.io.compress." +
        ("DefaultCodec" if name == "deflate" else "BZip2Codec"))
big = [(i, "x" * (i % 50)) for i in range(100000)]
sc.parallelize(big, 1).saveAsSequenceFile(f"{d}/spark/big")
sc.parallelize(big, 2).saveAsSequenceFile(f"{d}/spark/block",
                                          "org.apache.hadoop.io.compress.DefaultCodec")
sc.parallelize([(1, {3.0: "bb", "k": None}), (2, {"m": {"x": True}})], 1).saveAsSequenceFile(
    f"{d}/spark/maps")
sc.parallelize(list(range(25)) + ["s", {"d": 1}], 2).saveAsPickleFile(f"{d}/spark/pickle", 3)
sc.stop()
"""


def test_spark_and_ember_read_each_others_sequence_and_pickle_files(fresh_sc,
                                                                      tmp_path) -> None:
    """Hadoop's SequenceFile (plain, block-compressed, MapWritable values) and PySpark's
    pickle files: what one writes the other reads, split or not."""
    sc = fresh_sc()
    d = str(tmp_path)
    pairs = [(1, ""), (1, "a"), (3, "x")]
    maps = [(1, {3.0: "bb", "n": None}), (2, {"m": {"x": True}, "b": b"by"})]
    many = [(i, f"v{i}") for i in range(5000)]
    sc.parallelize(pairs, 2).saveAsSequenceFile(d + "/ember/seq")
    sc.parallelize(maps, 1).saveAsSequenceFile(d + "/ember/maps")
    sc.parallelize(many, 2).saveAsSequenceFile(d + "/ember/gzip",
                                               "org.apache.hadoop.io.compress.GzipCodec")
    sc.parallelize([(2 ** 40, 0.5), (7, 1.5)], 1).saveAsNewAPIHadoopFile(
        d + "/ember/typed", "org.apache.hadoop.mapreduce.lib.output.SequenceFileOutputFormat",
        "org.apache.hadoop.io.LongWritable", "org.apache.hadoop.io.DoubleWritable")
    sc.parallelize(list(range(40)) + ["s", None], 3).saveAsPickleFile(d + "/ember/pickle", 4)
    lines = [f"line {i}" for i in range(3000)]
    for name, codec in (("deflate", "DefaultCodec"), ("bz2", "BZip2Codec")):
        sc.parallelize(lines, 2).saveAsTextFile(f"{d}/ember/{name}",
                                                "org.apache.hadoop.io.compress." + codec)
    out = subprocess.run([sys.executable, "-c", _PYSPARK_FILES, d], env=JAVA_ENV,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    read = {name: eval(text) for name, text in  # noqa: S307  (our own child's reprs)
            (line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)}
    assert read["seq"] == pairs
    assert read["maps"] == [(1, {3.0: "bb", "n": None}),
                            (2, {"m": {"x": True}, "b": bytearray(b"by")})]
    assert read["gzip"] == many and read["typed"] == [(7, 1.5), (2 ** 40, 0.5)]
    assert read["pickle"] == sorted(list(range(40)) + ["s", None], key=repr)
    assert read["deflate"] == read["bz2"] == sorted(lines)
    for name in ("deflate", "bz2"):
        assert sorted(glob.glob(f"{d}/spark/{name}/part-*")) == [
            f"{d}/spark/{name}/part-0000{i}.{name}" for i in (0, 1)]
        assert sorted(sc.textFile(f"{d}/spark/{name}").map(int).collect()) == list(range(3000))
    big = [(i, "x" * (i % 50)) for i in range(100000)]
    for name in ("big", "block"):
        for splits in (1, 7):
            assert sorted(sc.sequenceFile(f"{d}/spark/{name}", minSplits=splits).collect()) \
                == big
    assert sorted(sc.sequenceFile(d + "/spark/maps").collect()) == [
        (1, {3.0: "bb", "k": None}), (2, {"m": {"x": True}})]
    assert sorted(sc.pickleFile(d + "/spark/pickle").collect(), key=repr) == sorted(
        list(range(25)) + ["s", {"d": 1}], key=repr)
