"""The history server: applications replayed from event logs show the jobs and stages the
live UI showed, also for an application whose driver was killed mid-job."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request

import pytest

from ember import SparkConf, SparkContext
from ember.ui.history_server import HistoryServer
from tests.cluster import _env

pytestmark = pytest.mark.timeout(120)


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def api(base: str, path: str):
    status, body = get(base + "/api/v1" + path)
    assert status == 200, (path, status, body[:300])
    return json.loads(body)


@pytest.fixture
def server(tmp_path):
    logs = tmp_path / "events"
    logs.mkdir()
    hs = HistoryServer(str(logs))
    port = hs.start("127.0.0.1", 0)
    yield logs, f"http://127.0.0.1:{port}"
    hs.stop()


def test_finished_application_matches_the_live_ui(server):
    logs, history = server
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    conf = (SparkConf().setMaster("local[2]").setAppName("<b>history & co</b>")
            .set("spark.eventLog.enabled", "true").set("spark.eventLog.dir", str(logs))
            .set("spark.ui.port", "0"))
    sc = SparkContext(conf=conf)
    try:
        from operator import add
        words = sc.parallelize(["a b", "b c", "c d"] * 50, 4).flatMap(str.split)
        assert dict(words.map(lambda w: (w, 1)).reduceByKey(add).collect())["b"] == 100
        with pytest.raises(Exception):
            sc.parallelize(range(4), 2).map(lambda x: 1 // 0).collect()
        app_id = sc.applicationId
        live = sc.uiWebUrl
        deadline = time.time() + 20    # a failed job's other tasks end after the job does
        while True:
            sc.runtime.bus.wait_until_empty()
            live_jobs = api(live, f"/applications/{app_id}/jobs")
            live_stages = api(live, f"/applications/{app_id}/stages")
            if not any(j["numActiveTasks"] for j in live_jobs) and \
                    not any(s["numActiveTasks"] for s in live_stages):
                break
            assert time.time() < deadline, live_jobs
            time.sleep(0.1)
    finally:
        sc.stop()
    apps = api(history, "/applications")
    assert [a["id"] for a in apps] == [app_id]
    assert apps[0]["name"] == "<b>history & co</b>"
    assert api(history, f"/applications/{app_id}/jobs") == live_jobs
    assert api(history, f"/applications/{app_id}/stages") == live_stages
    status, index = get(history + "/")
    assert status == 200 and "&lt;b&gt;history &amp; co&lt;/b&gt;" in index
    for page in ("jobs/", "stages/", "executors/", "environment/", "storage/"):
        status, body = get(f"{history}/history/{app_id}/{page}")
        assert status == 200 and "<b>history" not in body, page
    status, _ = get(f"{history}/history/{app_id}/jobs/job/?id=999")
    assert status == 404
    status, _ = get(f"{history}/history/app-nope/jobs/")
    assert status == 404


def test_killed_driver_is_listed_incomplete_with_what_it_recorded(server, tmp_path):
    logs, history = server
    app = tmp_path / "app.py"
    app.write_text(textwrap.dedent(f"""
        import time
        from ember import SparkConf, SparkContext
        conf = (SparkConf().setMaster("local[2]").setAppName("doomed")
                .set("spark.eventLog.enabled", "true").set("spark.eventLog.dir", {str(logs)!r})
                .set("spark.ui.enabled", "false"))
        sc = SparkContext(conf=conf)
        print(sc.parallelize(range(10), 2).sum(), flush=True)
        sc.parallelize(range(100), 100).map(lambda x: time.sleep(0.2)).count()
    """))
    proc = subprocess.Popen([sys.executable, str(app)], stdout=subprocess.PIPE, env=_env(),
                            start_new_session=True)
    assert proc.stdout.readline().strip() == b"45"
    time.sleep(2)                                   # inside the second job
    os.killpg(proc.pid, signal.SIGKILL)             # the driver and its task processes
    proc.wait(10)
    apps = api(history, "/applications")
    (doomed,) = [a for a in apps if a["name"] == "doomed"]
    jobs = api(history, f"/applications/{doomed['id']}/jobs")
    assert sorted(j["status"] for j in jobs) == ["RUNNING", "SUCCEEDED"]
    status, index = get(history + "/")
    assert "Incomplete applications (1)" in index and doomed["id"] in index
    status, page = get(f"{history}/history/{doomed['id']}/stages/")
    assert status == 200


def test_ui_process_formats_task_lines_exactly_as_in_process():
    import marshal

    from ember.scheduler import listener as sl
    from ember.scheduler.task import SUCCESS, TaskInfo, TaskKilled
    from ember.ui.event_log import _dumps, _TaskLines
    from ember.ui.ui_process import pack, unpack
    start = sl.TaskStart(2, 1, TaskInfo(7, 3, 0, 3, 1000.5, "1", "h\"ost", "NODE_LOCAL", True))
    done = TaskInfo(7, 3, 0, 3, 1000.5, "1", "h\"ost", "NODE_LOCAL", True, 1001.25,
                    successful=True)
    end = sl.TaskEnd(2, 1, "ShuffleMapTask", SUCCESS, done,
                    {"executorRunTime": 5, "shuffleBytesWritten": 10})
    killed = sl.TaskEnd(2, 1, "ResultTask", TaskKilled("stop"), done, {})
    direct, shipped = _TaskLines(), _TaskLines()
    for e in (start, end, killed):
        item = marshal.loads(marshal.dumps(pack(e, _dumps)))
        line = item if isinstance(item, str) else shipped.encode(*unpack(item))
        assert line == direct.encode(e)


def test_an_unreadable_log_does_not_hide_the_others(tmp_path, caplog):
    from ember.ui.api import api_get
    from ember.ui.history_server import HistoryProvider
    (tmp_path / "app-good").write_text(
        '{"Event":"SparkListenerLogStart","Spark Version":"4.1.1"}\n'
        '{"Event":"SparkListenerApplicationStart","App Name":"good","App ID":"app-good",'
        '"Timestamp":1,"User":"u"}\n')
    (tmp_path / "app-bad").write_text('{"Event":"SparkListenerLogStart"}\n{oops\n{}\n')
    (tmp_path / "app-lz4.lz4").write_bytes(b"\x00")
    provider = HistoryProvider(str(tmp_path))
    assert [a["id"] for a in api_get(provider, "/applications", {})[1]] == ["app-good"]
    assert api_get(provider, "/applications/app-bad/jobs", {})[0] == 404
    assert "app-bad:2: malformed event log line" in caplog.text and "lz4" in caplog.text


def test_history_conf_from_spark_history_opts_and_properties_file(tmp_path, capsys):
    """As Spark's HistoryServerArguments: `--conf` > SPARK_HISTORY_OPTS' `-D` > the
    properties file (`--properties-file`, else $SPARK_CONF_DIR/spark-defaults.conf), and
    `--dir` / `--port` over all of them."""
    from ember.ui.history_server import DEFAULT_LOG_DIR, DEFAULT_PORT, main, \
        resolve_history_conf
    props = tmp_path / "history.conf"
    props.write_text("spark.history.fs.logDirectory file:/from/file\n"
                     "spark.history.ui.port 18181\nspark.history.retainedApplications 7\n")
    opts = {"SPARK_HISTORY_OPTS": "-Dspark.history.fs.logDirectory=/from/opts -Xmx1g"}

    assert resolve_history_conf([], {}) == (DEFAULT_LOG_DIR, DEFAULT_PORT, "127.0.0.1", {})
    log_dir, port, host, conf = resolve_history_conf([], {**opts, "SPARK_LOCAL_IP": "10.0.0.1"})
    assert (log_dir, port, host) == ("/from/opts", DEFAULT_PORT, "10.0.0.1")
    log_dir, port, _, conf = resolve_history_conf(["--properties-file", str(props)], {})
    assert (log_dir, port) == ("file:/from/file", 18181)
    assert conf["spark.history.retainedApplications"] == "7"
    assert resolve_history_conf(["--properties-file", str(props)], opts)[:2] == \
        ("/from/opts", 18181)
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(props.read_text())
    assert resolve_history_conf([], {"SPARK_CONF_DIR": str(conf_dir)})[:2] == \
        ("file:/from/file", 18181)
    assert resolve_history_conf(
        ["--properties-file", str(props), "--conf", "spark.history.fs.logDirectory=/cli",
         "--conf", "spark.history.ui.port=0"], opts)[:2] == ("/cli", 0)
    assert resolve_history_conf(["--dir", "/d", "--port", "1", "--host", "h",
                                 "--conf", "spark.history.fs.logDirectory=/cli"], opts)[:3] == \
        ("/d", 1, "h")

    for argv, env, needle in [
            (["--properties-file", str(tmp_path / "none")], {}, "does not exist"),
            ([], {"SPARK_HISTORY_OPTS": "-Dspark.x='"}, "Cannot parse SPARK_HISTORY_OPTS"),
            (["--conf", "novalue"], {}, "Invalid argument to --conf: novalue"),
            (["--conf", "spark.history.ui.port=x"], {}, "Invalid spark.history.ui.port")]:
        with pytest.raises(ValueError, match=needle):
            resolve_history_conf(argv, env)
    capsys.readouterr()
    assert main(["--properties-file", str(tmp_path / "none")]) == 1
    assert capsys.readouterr().err.strip().splitlines() == [
        f"Error: Properties file {tmp_path / 'none'} does not exist"]


def test_event_logs_download(tmp_path):
    """/applications/<id>/logs: the history server zips the log (a rolling log as its
    directory); the live UI has none to give (503), an unknown app is 404."""
    import io
    import zipfile

    from ember.ui.api import LiveStoreProvider, api_response
    from ember.ui.history_server import HistoryProvider
    from ember.ui.status_store import AppStatusStore
    start = ('{"Event":"SparkListenerApplicationStart","App Name":"a","App ID":"%s",'
             '"Timestamp":1,"User":"u"}\n')
    (tmp_path / "app-plain").write_text(start % "app-plain")
    rolled = tmp_path / "eventlog_v2_app-rolled"
    rolled.mkdir()
    (rolled / "events_1_app-rolled").write_text(start % "app-rolled")
    (rolled / "appstatus_app-rolled").write_text("")
    provider = HistoryProvider(str(tmp_path))
    for app, names in (("app-plain", ["app-plain"]),
                       ("app-rolled", ["eventlog_v2_app-rolled/",
                                       "eventlog_v2_app-rolled/appstatus_app-rolled",
                                       "eventlog_v2_app-rolled/events_1_app-rolled"])):
        status, headers, body = api_response(provider, f"/applications/{app}/logs", {})
        assert status == 200 and headers["Content-Type"] == "application/octet-stream"
        assert headers["Content-Disposition"] == f"attachment; filename=eventLogs-{app}.zip"
        archive = zipfile.ZipFile(io.BytesIO(body))
        assert archive.namelist() == names
    assert archive.read("eventlog_v2_app-rolled/events_1_app-rolled").decode() == \
        start % "app-rolled"
    assert api_response(provider, "/applications/nope/logs", {})[0] == 404
    live = LiveStoreProvider(AppStatusStore())
    status, _, body = api_response(live, "/applications/x/logs", {})
    assert status == 503 and b"only available through the history server" in body
