"""Application UI: the status store fed from events, event logs (write, replay, crashes),
the REST API and the HTML pages over synthetic stores, and one real local-mode app with
its UI, API, Prometheus metrics and event log."""
from __future__ import annotations

import json
import os
from dataclasses import replace
import socket
import time
import urllib.error
import urllib.request

import pytest

from ember.scheduler import listener as sl
from ember.scheduler.task import (ExceptionFailure, Success, TaskInfo, TaskKilled,
                                  TaskProcessCrashed)
from ember.storagelevel import StorageLevel
from ember.ui.api import LiveStoreProvider, api_get, format_api_date
from ember.ui.app_ui import PAGES, bytes_to_string, prometheus_metrics, render_page
from ember.ui import event_log
from ember.ui.event_log import (EventLog, list_event_logs, log_name, replay,
                                resolve_log_dir)
from ember.ui.status_store import AppStatusStore
from ember.ui.ui_process import UiProcess

T0 = 1_735_689_600.0          # 2025-01-01T00:00:00Z
EVIL = "<script>alert(1)</script>"


def _info(tid: int, index: int, launch: float, executor: str = "1", host: str = "h1",
          state: str | None = None, finish: float = 0.0) -> TaskInfo:
    info = TaskInfo(tid, index, 0, index, launch, executor, host, "PROCESS_LOCAL")
    if state is not None:
        info.mark_finished(state, finish)
    return info


def app_events(app_name: str = "demo") -> list:
    """A small application: a two-stage job (shuffle) over a cached RDD, then a job whose
    task fails, one killed task, executors coming and going, an unpersisted RDD. JobStart
    gets copies of the stage infos, as the DAG scheduler posts them."""
    cached = sl.RDDInfo(1, f"cached {EVIL}", 2, StorageLevel.MEMORY_ONLY, "parallelize at a.py:1")
    plain = sl.RDDInfo(2, "ShuffledRDD", 2, StorageLevel.NONE, "reduceByKey at a.py:2", [1])
    s0 = sl.StageInfo(0, 0, "reduceByKey at a.py:2", 2, rdd_infos=[cached])
    s1 = sl.StageInfo(1, 0, "collect at a.py:3", 2, parent_ids=[0], rdd_infos=[plain])
    props = {"spark.job.description": f"desc {EVIL}", "spark.jobGroup.id": "g1"}
    ev: list = [sl.EnvironmentUpdate({"JVM Information": [("Python Version", "3.11")],
                                     "Spark Properties": [("spark.app.name", app_name),
                                                          ("spark.secret", EVIL)]}),
                sl.ApplicationStart(app_name, "app-1", T0, "alice"),
                sl.ExecutorAdded("1", "h1", 2, T0 + 0.1, {"stdout": "http://w1:8081/logPage/?x=1",
                                                         "stderr": "javascript:alert(1)"}),
                sl.ExecutorAdded("2", "h2", 2, T0 + 0.1),
                sl.JobStart(0, T0 + 1, [replace(s0), replace(s1)], props)]
    s0.submission_time = T0 + 1
    ev.append(sl.StageSubmitted(s0, props))
    metrics_map = {"executorRunTime": 5, "executorCpuTime": 4_000_000,
                   "shuffleBytesWritten": 100, "shuffleRecordsWritten": 10}
    for tid, ex in ((0, "1"), (1, "2")):
        ev.append(sl.TaskStart(0, 0, _info(tid, tid, T0 + 1.01, ex, "h" + ex)))
        ev.append(sl.BlockUpdated(ex, "h" + ex, f"rdd_1_{tid}", StorageLevel.MEMORY_ONLY, 64, 0))
        ev.append(sl.TaskEnd(0, 0, "ShuffleMapTask", Success(),
                            _info(tid, tid, T0 + 1.01, ex, "h" + ex, "FINISHED", T0 + 1.02),
                            dict(metrics_map)))
    s0.completion_time = T0 + 1.03
    ev.append(sl.StageCompleted(s0))
    s1.submission_time = T0 + 1.04
    ev.append(sl.StageSubmitted(s1, props))
    for tid, index in ((2, 0), (3, 1)):
        ev.append(sl.TaskStart(1, 0, _info(tid, index, T0 + 1.05)))
        ev.append(sl.TaskEnd(1, 0, "ResultTask", Success(),
                            _info(tid, index, T0 + 1.05, state="FINISHED", finish=T0 + 1.06),
                            {"executorRunTime": 3, "shuffleLocalBytesRead": 100}))
    s1.completion_time = T0 + 1.07
    ev += [sl.StageCompleted(s1), sl.JobEnd(0, T0 + 1.08, True)]
    # job 1: a failing task, a killed one, a crashed one
    s2 = sl.StageInfo(2, 0, "count at a.py:4", 3)
    ev.append(sl.JobStart(1, T0 + 2, [replace(s2)], {}))
    s2.submission_time = T0 + 2
    ev.append(sl.StageSubmitted(s2, {}))
    ends = [(4, "FAILED", ExceptionFailure("ValueError", f"bad {EVIL}", "Traceback: boom")),
            (5, "KILLED", TaskKilled("another attempt succeeded")),
            (6, "FAILED", TaskProcessCrashed("task process died"))]
    for tid, state, reason in ends:
        ev.append(sl.TaskStart(2, 0, _info(tid, tid - 4, T0 + 2.01)))
        ev.append(sl.TaskEnd(2, 0, "ResultTask", reason,
                            _info(tid, tid - 4, T0 + 2.01, state=state, finish=T0 + 2.02), {}))
    s2.completion_time, s2.failure_reason = T0 + 2.03, f"Job aborted {EVIL}"
    ev += [sl.StageCompleted(s2), sl.JobEnd(1, T0 + 2.04, False, f"Job aborted {EVIL}"),
           sl.ExecutorRemoved("2", "worker lost", T0 + 3), sl.UnpersistRDD(7)]
    return ev


def store_of(events: list, **conf: str) -> AppStatusStore:
    store = AppStatusStore(conf)
    for e in events:
        store.on_event(e)
    return store


# --- the store -----------------------------------------------------------------------------
def test_store_builds_jobs_stages_executors_and_storage_from_events() -> None:
    store = store_of(app_events())
    app = store.application_info()
    assert app["id"] == "app-1" and app["name"] == "demo"
    assert app["attempts"][0]["sparkUser"] == "alice" and not app["attempts"][0]["completed"]

    job1, job0 = store.jobs()
    assert job0["jobId"] == 0 and job0["status"] == "SUCCEEDED"
    assert job0["stageIds"] == [0, 1] and job0["jobGroup"] == "g1"
    assert (job0["numTasks"], job0["numCompletedTasks"], job0["numCompletedIndices"]) == (4, 4, 4)
    assert (job0["numCompletedStages"], job0["numActiveStages"]) == (2, 0)
    assert job0["name"] == "collect at a.py:3" and job0["description"] == f"desc {EVIL}"
    assert job1["status"] == "FAILED" and job1["numFailedStages"] == 1
    assert (job1["numFailedTasks"], job1["numKilledTasks"]) == (2, 1)
    assert job1["killedTasksSummary"] == {"another attempt succeeded": 1}

    s0 = store.stage(0, 0)
    assert s0["status"] == "COMPLETE" and s0["numCompleteTasks"] == 2
    assert s0["shuffleWriteBytes"] == 200 and s0["shuffleWriteRecords"] == 20
    assert s0["executorRunTime"] == 10 and s0["executorCpuTime"] == 8_000_000
    assert s0["submissionTime"] == round(T0 * 1000) + 1000
    assert set(s0["executorSummary"]) == {"1", "2"}
    assert store.stage(1, 0)["shuffleReadBytes"] == 200
    s2 = store.stage(2, 0)
    assert s2["status"] == "FAILED" and s2["failureReason"] == f"Job aborted {EVIL}"
    errors = {t["taskId"]: t.get("errorMessage") for t in s2["tasks"].values()}
    assert errors[4] == "org.apache.spark.api.python.PythonException: Traceback: boom\n"
    assert errors[5] == "another attempt succeeded"   # Spark: the kill reason itself
    assert errors[6] == "org.apache.spark.SparkException: task process died"
    task = store.tasks(0, 0, sort_by="ID")[0]
    assert task["taskMetrics"]["shuffleWriteMetrics"] == {"bytesWritten": 100, "writeTime": 0,
                                                          "recordsWritten": 10}
    assert task["duration"] == 10 and task["executorLogs"]["stdout"].startswith("http://w1")

    ex = {e["id"]: e for e in store.executors(active_only=False)}
    assert ex["1"]["completedTasks"] == 3 and ex["1"]["failedTasks"] == 2
    assert ex["1"]["totalShuffleWrite"] == 100 and ex["1"]["totalShuffleRead"] == 200
    assert not ex["2"]["isActive"] and ex["2"]["removeReason"] == "worker lost"
    assert [e["id"] for e in store.executors()] == ["1"]

    rdd = store.rdd(1)     # executor 2's block left with the executor
    assert (rdd["numCachedPartitions"], rdd["memoryUsed"]) == (1, 64)
    assert rdd["storageLevel"] == "Memory Serialized 1x Replicated"
    assert [r["id"] for r in store.rdds()] == [1] and store.rdd(2) is None
    store.on_event(sl.UnpersistRDD(1))
    assert store.rdds() == []
    assert store.summary()["tasks_completed"] == 4


def test_store_bounds_memory_like_spark() -> None:
    events: list = [sl.ApplicationStart("a", "app-2", T0, "u")]
    for j in range(6):
        st = sl.StageInfo(j, 0, f"s{j}", 25, submission_time=T0 + j)
        events += [sl.JobStart(j, T0 + j, [replace(st)], {}), sl.StageSubmitted(replace(st))]
        for i in range(25):
            tid = j * 100 + i
            events.append(sl.TaskStart(j, 0, _info(tid, i, T0 + j)))
            events.append(sl.TaskEnd(j, 0, "ResultTask", Success(),
                                    _info(tid, i, T0 + j, state="FINISHED", finish=T0 + j + 1),
                                    {}))
        st.completion_time = T0 + j + 1
        events += [sl.StageCompleted(st), sl.JobEnd(j, T0 + j + 1, True)]
    store = store_of(events, **{"spark.ui.retainedJobs": "4", "spark.ui.retainedStages": "3",
                                "spark.ui.retainedTasks": "10"})
    assert len(store.jobs()) <= 4 and store.jobs()[0]["jobId"] == 5
    assert len(store.stages()) <= 3
    newest = store.stage(5, 0)
    assert store.task_count(5, 0) <= 10
    assert newest["numCompleteTasks"] == 25           # counts survive task trimming
    assert store.executors()[0]["completedTasks"] == 150   # and stage trimming


def test_listener_bus_delivers_batches_in_order_and_drains_on_stop() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.seen: list = []

        def on_events(self, batch: list) -> None:
            self.seen += batch

    bus, rec = sl.ListenerBus(), Recorder()
    bus.add(rec)
    for i in range(300):
        bus.post(sl.UnpersistRDD(i))
    assert bus.wait_until_empty(5)
    assert [e.rdd_id for e in rec.seen] == list(range(300))
    bus.post(sl.UnpersistRDD(300))
    bus.stop()
    assert rec.seen[-1].rdd_id == 300


def test_listener_bus_drops_beyond_its_capacity_like_spark(caplog) -> None:
    """A listener that cannot keep up makes the bus drop events (Spark's error, once),
    instead of holding ever more in the driver; sync listeners still see every event."""
    import threading
    release = threading.Event()

    class Stuck:
        def __init__(self) -> None:
            self.seen: list = []

        def on_events(self, batch: list) -> None:
            release.wait(10)
            self.seen += batch

    class Sync:
        n = 0

        def on_event(self, e) -> None:
            Sync.n += 1

    bus, stuck = sl.ListenerBus(capacity=50), Stuck()
    bus.add_sync(Sync())
    bus.add(stuck)
    bus.post(sl.UnpersistRDD(-1))
    time.sleep(0.2)                 # the bus thread is now inside the stuck listener
    for i in range(200):
        bus.post(sl.UnpersistRDD(i))
    assert bus.dropped == 150 and Sync.n == 201
    assert caplog.text.count("Dropping event from queue appStatus") == 1
    release.set()
    assert bus.wait_until_empty(5)
    assert [e.rdd_id for e in stuck.seen] == list(range(-1, 50))
    bus.stop()
    with pytest.raises(ValueError, match="must be positive"):
        sl.ListenerBus(capacity=0)


# --- event logs ---------------------------------------------------------------------------
def write_log(tmp_path, events: list, app_id: str = "app-1") -> str:
    """As a SparkContext does: the UI process writes, the driver names and renames."""
    conf = {"spark.eventLog.dir": f"file:{tmp_path}"}
    event_log, writer = EventLog(conf), UiProcess(conf, None, event_log=True)
    writer.on_events(events[:3])        # before the log exists: held, then written in order
    writer.open_log(event_log.start(app_id))
    assert os.path.exists(os.path.join(tmp_path, app_id + ".inprogress"))
    writer.on_events(events[3:])
    writer.close()
    event_log.finish()
    return os.path.join(tmp_path, app_id)


def test_event_log_round_trip_rebuilds_the_same_store(tmp_path) -> None:
    events = app_events() + [sl.ApplicationEnd(T0 + 4)]
    path = write_log(tmp_path, events)
    assert not os.path.exists(path + ".inprogress")
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert lines[0] == {"Event": "SparkListenerLogStart", "Spark Version": "4.1.1"}
    kinds = [d["Event"] for d in lines]
    assert kinds[-1] == "SparkListenerApplicationEnd"
    start = next(d for d in lines if d["Event"] == "SparkListenerApplicationStart")
    assert (start["App Name"], start["App ID"], start["User"]) == ("demo", "app-1", "alice")
    assert start["Timestamp"] == round(T0 * 1000)
    job_end = next(d for d in lines if d["Event"] == "SparkListenerJobEnd")
    assert job_end["Job Result"] == {"Result": "JobSucceeded"}
    task_end = next(d for d in lines if d["Event"] == "SparkListenerTaskEnd")
    assert {"Task Info", "Task Metrics", "Task End Reason"} <= set(task_end)
    assert task_end["Task Metrics"]["Shuffle Write Metrics"]["Shuffle Bytes Written"] == 100

    live, replayed = store_of(events), store_of(list(replay(path)))
    assert replayed.jobs() == live.jobs()
    assert replayed.stages(details=True) == live.stages(details=True)
    assert replayed.executors(False) == live.executors(False)
    assert replayed.rdds(False) == live.rdds(False)
    assert replayed.environment_info() == live.environment_info()
    assert replayed.application_info() == live.application_info()
    assert replayed.completed


def test_crashed_app_log_replays(tmp_path) -> None:
    conf = {"spark.eventLog.dir": str(tmp_path)}
    writer = UiProcess(conf, None, event_log=True)
    spec = EventLog(conf).start("app-1")
    writer.open_log(spec)
    path = spec["path"]
    writer.on_events(app_events())
    deadline = time.time() + 10     # flushed after every batch; then the app dies
    while b"SparkListenerUnpersistRDD" not in (tmp_path / "app-1.inprogress").read_bytes():
        assert time.time() < deadline
        time.sleep(0.05)
    with open(path, "ab") as f:
        f.write(b'{"Event":"SparkListenerTaskEnd","Stage ID":2,"Stage Att')
    try:
        [info] = list_event_logs(str(tmp_path))
        assert info.in_progress and info.app_id == "app-1"
        store = store_of(list(replay(info.path)))
        assert not store.completed
        assert [j["jobId"] for j in store.jobs()] == [1, 0]
        assert store.stage(1, 0)["numCompleteTasks"] == 2
    finally:
        writer.close()      # the UI process outlives a crash only until its pipe closes


def test_ui_process_serves_what_an_in_process_store_would(tmp_path) -> None:
    """The driver's UI process: fed packed events over its pipe, it serves the same API
    answers as a store fed the events directly; closing the pipe ends it and its port."""
    from ember.ui.spark_ui import bind_ui
    sock, url, _ = bind_ui({"spark.ui.port": "0"})
    ui = UiProcess({}, sock, event_log=False)
    sock.close()
    events = app_events()
    try:
        for i in range(0, len(events), 4):
            ui.on_events(events[i:i + 4])
        assert ui.sync()
        provider = LiveStoreProvider(store_of(events))
        for path, query in (("/applications", {}), ("/applications/app-1/jobs", {}),
                            ("/applications/app-1/stages", {"details": "true"}),
                            ("/applications/app-1/allexecutors", {}),
                            ("/applications/app-1/stages/0/0/taskSummary", {}),
                            ("/applications/app-1/storage/rdd", {})):
            expected = json.loads(json.dumps(api_get(provider, path, query)[1]))
            target = f"{url}/api/v1{path}" + "".join(f"?{k}={v}" for k, v in query.items())
            with urllib.request.urlopen(target, timeout=5) as r:
                assert json.load(r) == expected, path
    finally:
        ui.close()
    with pytest.raises(OSError):
        urllib.request.urlopen(url + "/api/v1/applications", timeout=2)


def test_task_lines_are_json_protocol_lines() -> None:
    """The templated task lines are byte for byte what event_to_json gives."""
    lines = event_log._TaskLines()
    start = sl.TaskStart(3, 1, _info(7, 2, T0, "ex\"1"))
    done = _info(7, 2, T0, "ex\"1", state="FINISHED", finish=T0 + 0.5)
    shuffle = {"executorRunTime": 9, "shuffleLocalBytesRead": 5, "shuffleBytesWritten": 8,
               "shuffleRecordsWritten": 2, "diskBytesSpilled": 1}
    failed = _info(8, 3, T0, state="FAILED", finish=T0 + 1)
    for e in (start, sl.TaskEnd(3, 1, "ResultTask", Success(), done, {"executorRunTime": 4}),
              sl.TaskEnd(3, 1, "ShuffleMapTask", Success(), done, shuffle),
              sl.TaskEnd(3, 1, "ResultTask", ExceptionFailure("E", "m", "tb"), failed, {})):
        expected = json.dumps(event_log.event_to_json(e), separators=(",", ":")) + "\n"
        assert lines.encode(e) == expected


def test_malformed_line_in_the_middle_is_an_error(tmp_path) -> None:
    path = tmp_path / "app-9"
    path.write_text('{"Event":"SparkListenerLogStart","Spark Version":"4.1.1"}\n{oops\n'
                    '{"Event":"SparkListenerApplicationEnd","Timestamp":1}\n')
    with pytest.raises(ValueError, match="app-9:2"):
        list(replay(str(path)))


def test_event_log_dir_must_exist_and_names_follow_spark(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_log_dir(f"file:{tmp_path}/nope")
    assert resolve_log_dir(f"file://{tmp_path}") == str(tmp_path)
    assert log_name("app-20250101000000-0001") == "app-20250101000000-0001"
    assert log_name("My App:1", "2") == "my-app-1_2"
    (tmp_path / "app-3").write_text("")
    with pytest.raises(FileExistsError):
        EventLog({"spark.eventLog.dir": str(tmp_path)}).start("app-3")


# --- REST API and pages over a store ------------------------------------------------------
def test_api_routes_fields_and_404s() -> None:
    provider = LiveStoreProvider(store_of(app_events()))

    def get(path: str, **query: str):
        return api_get(provider, path, query)

    status, apps = get("/applications")
    assert status == 200 and apps[0]["id"] == "app-1"
    assert apps[0]["attempts"][0]["startTime"] == "2025-01-01T00:00:00.000GMT"
    assert apps[0]["attempts"][0]["endTime"] == "1969-12-31T23:59:59.999GMT"
    assert get("/applications/app-1/jobs", status="failed")[1][0]["jobId"] == 1
    job = get("/applications/app-1/jobs/0")[1]
    assert "completionTime" in job and job["submissionTime"].endswith("GMT")
    assert "description" in job and "jobGroup" in job
    assert [s["stageId"] for s in get("/applications/app-1/stages")[1]] == [2, 1, 0]
    assert "tasks" not in get("/applications/app-1/stages")[1][0]
    assert "tasks" in get("/applications/app-1/stages/0/0")[1]
    tasks = get("/applications/app-1/stages/2/0/taskList", length="2", sortBy="-ID")[1]
    assert [t["taskId"] for t in tasks] == [6, 5]
    assert get("/applications/app-1/executors")[1][0]["id"] == "1"
    assert len(get("/applications/app-1/allexecutors")[1]) == 2
    assert get("/applications/app-1/storage/rdd/1")[1]["partitions"][0]["blockName"] == "rdd_1_0"
    env = get("/applications/app-1/environment")[1]
    assert ["spark.app.name", "demo"] in env["sparkProperties"]
    assert get("/version")[1] == {"spark": "4.1.1"}
    assert get("/applications/nope/jobs") == (404, "no such app: nope")
    assert get("/applications/app-1/jobs/42") == (404, "unknown job: 42")
    assert get("/applications/app-1/jobs/x") == (404, "unknown job: x")
    assert get("/applications/app-1/stages/42") == (404, "unknown stage: 42")
    assert get("/applications/app-1/stages/0/3") == (
        404, "unknown attempt for stage 0.  Found attempts: [0]")
    assert get("/applications/app-1/storage/rdd/9") == (404, "no rdd found w/ id 9")
    assert format_api_date(1_735_689_600_123) == "2025-01-01T00:00:00.123GMT"


def test_api_task_summary_like_spark() -> None:
    """taskSummary: Spark's TaskMetricDistributions over successful tasks only, each quantile
    q of n sorted values taken at index min(int(q * n), n - 1), never interpolated."""
    ev = app_events()
    s3 = sl.StageInfo(3, 0, "map at a.py:5", 6)
    ev.append(sl.JobStart(2, T0 + 4, [replace(s3)], {}))
    s3.submission_time = T0 + 4
    ev.append(sl.StageSubmitted(s3, {}))
    for tid, run in enumerate((40, 10, 30, 20)):           # durations run + 1 ms
        ev += [sl.TaskStart(3, 0, _info(10 + tid, tid, T0 + 4)),
               sl.TaskEnd(3, 0, "ResultTask", Success(),
                         _info(10 + tid, tid, T0 + 4, state="FINISHED",
                               finish=T0 + 4 + (run + 1) / 1000),
                         {"executorRunTime": run, "shuffleRemoteBytesRead": 2 * run,
                          "shuffleLocalBytesRead": 1})]
    ev += [sl.TaskStart(3, 0, _info(14, 4, T0 + 4)),        # failed: not counted
           sl.TaskEnd(3, 0, "ResultTask", ExceptionFailure("ValueError", "x", ""),
                     _info(14, 4, T0 + 4, state="FAILED", finish=T0 + 5),
                     {"executorRunTime": 999}),
           sl.TaskStart(3, 0, _info(15, 5, T0 + 4))]         # running: not counted
    provider = LiveStoreProvider(store_of(ev))

    def get(path: str, **query: str):
        return api_get(provider, "/applications/app-1/stages/" + path, query)

    status, summary = get("3/0/taskSummary")
    assert status == 200
    assert list(summary) == [
        "quantiles", "duration", "executorDeserializeTime", "executorDeserializeCpuTime",
        "executorRunTime", "executorCpuTime", "resultSize", "jvmGcTime",
        "resultSerializationTime", "gettingResultTime", "schedulerDelay",
        "peakExecutionMemory", "peakOnHeapExecutionMemory", "peakOffHeapExecutionMemory",
        "memoryBytesSpilled", "diskBytesSpilled", "inputMetrics", "outputMetrics",
        "shuffleReadMetrics", "shuffleWriteMetrics"]
    assert summary["quantiles"] == [0.05, 0.25, 0.5, 0.75, 0.95]
    assert summary["executorRunTime"] == [10.0, 20.0, 30.0, 40.0, 40.0]
    assert summary["duration"] == [11.0, 21.0, 31.0, 41.0, 41.0]
    assert summary["jvmGcTime"] == [0.0] * 5
    read = summary["shuffleReadMetrics"]
    assert read["readBytes"] == [21.0, 41.0, 61.0, 81.0, 81.0]
    assert read["remoteBytesRead"] == [20.0, 40.0, 60.0, 80.0, 80.0]
    assert list(read) == ["readBytes", "readRecords", "remoteBlocksFetched",
                          "localBlocksFetched", "fetchWaitTime", "remoteBytesRead",
                          "remoteBytesReadToDisk", "totalBlocksFetched", "remoteReqsDuration",
                          "shufflePushReadMetricsDist"]
    assert len(read["shufflePushReadMetricsDist"]) == 9
    assert list(summary["inputMetrics"]) == ["bytesRead", "recordsRead"]
    assert list(summary["outputMetrics"]) == ["bytesWritten", "recordsWritten"]
    assert list(summary["shuffleWriteMetrics"]) == ["writeBytes", "writeRecords", "writeTime"]
    one = get("3/0/taskSummary", quantiles="0.5")[1]
    assert one["quantiles"] == [0.5] and one["executorRunTime"] == [30.0]
    assert get("3/0/taskSummary", quantiles="0.95,0.05")[1]["quantiles"] == [0.05, 0.95]
    assert get("0/0/taskSummary")[1]["shuffleWriteMetrics"]["writeRecords"] == [10.0] * 5
    assert get("3/0/taskSummary", quantiles="0.5,x") == (
        400, 'Bad value for parameter "quantiles".  Expected a double, got "x"')
    assert get("3/0/taskSummary", quantiles="nan")[0] == 400
    assert get("2/0/taskSummary") == (404, "No tasks reported metrics for 2 / 0 yet.")
    assert get("42/0/taskSummary") == (404, "unknown stage: 42")
    assert get("3/1/taskSummary") == (404, "unknown attempt for stage 3.  Found attempts: [0]")


def test_pages_escape_user_strings_and_404_unknown_ids() -> None:
    store = store_of(app_events(app_name=EVIL))
    for page, query in (("/jobs/", {}), ("/jobs/job/", {"id": "0"}), ("/jobs/job/", {"id": "1"}),
                        ("/stages/", {}), ("/stages/stage/", {"id": "2", "attempt": "0"}),
                        ("/storage/", {}), ("/storage/rdd/", {"id": "1"}), ("/executors/", {}),
                        ("/environment/", {})):
        status, html = render_page(store, page, query, "/history/app-1")
        assert status == 200, page
        assert EVIL not in html, page
        assert "&lt;script&gt;" in html, page
        assert 'href="/history/app-1/jobs/"' in html
    stage = render_page(store, "/stages/stage/", {"id": "2", "attempt": "0"})[1]
    assert "bad &lt;script&gt;" not in stage        # errors shown are the full traces
    assert "Traceback: boom" in stage
    execs = render_page(store, "/executors/", {})[1]
    assert 'href="http://w1:8081/logPage/?x=1"' in execs and "javascript:" not in execs
    assert 'data-live="1"' in render_page(store, "/jobs/", {})[1]
    for page, query in (("/jobs/job/", {"id": "7"}), ("/jobs/job/", {"id": "x"}),
                        ("/stages/stage/", {"id": "9"}), ("/storage/rdd/", {"id": "3"}),
                        ("/nope/", {})):
        status, html = render_page(store, page, query)
        assert status == 404 and EVIL not in html
    assert set(PAGES) >= {"/jobs/", "/stages/", "/storage/", "/executors/", "/environment/"}
    assert bytes_to_string(100) == "100.0 B" and bytes_to_string(3 << 20) == "3.0 MiB"


def test_prometheus_text_parses() -> None:
    from prometheus_client.parser import text_string_to_metric_families
    text = prometheus_metrics(store_of(app_events(app_name='a "quoted"\nname'))).text()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["ember_driver_tasks_completed"].type == "counter"
    [sample] = families["ember_driver_tasks_completed"].samples
    assert sample.value == 4 and sample.labels["application_name"] == 'a "quoted"\nname'
    assert families["ember_driver_executors_active"].samples[0].value == 1
    assert families["ember_driver_shuffle_write_bytes"].samples[0].value == 200


# --- a real application ---------------------------------------------------------------------
def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


# long enough not to turn up by chance in a random temp dir's name ("s3" once did)
SECRET = "app-ui-test-secret-value"


def test_live_application_ui_api_metrics_and_event_log(fresh_sc, tmp_path) -> None:
    from ember import SparkConf
    from prometheus_client.parser import text_string_to_metric_families
    conf = (SparkConf().set("spark.ui.port", "0").set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", f"file:{tmp_path}").set("spark.authenticate.secret", SECRET))
    sc = fresh_sc("local[2]", EVIL, conf)
    base = sc.uiWebUrl
    assert base.startswith("http://") and sc.uiWebUrl.rsplit(":", 1)[1].isdigit()
    inprogress = os.path.join(tmp_path, sc.applicationId + ".inprogress")
    assert os.path.exists(inprogress)
    pairs = sc.parallelize(range(40), 4).map(lambda x: (x % 4, x)).setName(EVIL).cache()
    assert sorted(pairs.reduceByKey(lambda a, b: a + b).collect())[0] == (0, 180)
    assert pairs.count() == 40
    assert sc.runtime.bus.wait_until_empty(10) and sc.runtime.ui_process.sync()
    api = f"{base}/api/v1/applications"

    status, ctype, body = _get(api)
    assert status == 200 and "json" in ctype
    [app] = json.loads(body)
    assert app["id"] == sc.applicationId and app["name"] == EVIL
    jobs = json.loads(_get(f"{api}/{sc.applicationId}/jobs")[2])
    assert [j["jobId"] for j in jobs] == [1, 0] and {j["status"] for j in jobs} == {"SUCCEEDED"}
    assert jobs[1]["numTasks"] == 8 and jobs[1]["numCompletedTasks"] == 8
    assert jobs[0]["numSkippedStages"] == 0 and jobs[0]["stageIds"] == [2]
    stages = json.loads(_get(f"{api}/{sc.applicationId}/stages")[2])
    shuffle_map = next(s for s in stages if s["stageId"] == 0)
    assert shuffle_map["shuffleWriteBytes"] > 0 and shuffle_map["numCompleteTasks"] == 4
    tasks = json.loads(_get(f"{api}/{sc.applicationId}/stages/1/0/taskList")[2])
    assert len(tasks) == 4 and tasks[0]["taskMetrics"]["shuffleReadMetrics"]["localBytesRead"] > 0
    [driver] = json.loads(_get(f"{api}/{sc.applicationId}/executors")[2])
    assert driver["id"] == "driver" and driver["totalCores"] == 2
    assert driver["completedTasks"] == 12
    [rdd] = json.loads(_get(f"{api}/{sc.applicationId}/storage/rdd")[2])
    assert rdd["name"] == EVIL and rdd["numCachedPartitions"] == 4 and rdd["memoryUsed"] > 0
    env = json.loads(_get(f"{api}/{sc.applicationId}/environment")[2])
    assert ["spark.authenticate.secret", "*********(redacted)"] in env["sparkProperties"]
    assert _get(f"{api}/{sc.applicationId}/jobs/99")[0] == 404
    assert _get(f"{api}/other-app/jobs")[0] == 404

    for page in ("/", "/jobs/", "/jobs/job/?id=0", "/stages/", "/stages/stage/?id=0&attempt=0",
                 "/storage/", f"/storage/rdd/?id={rdd['id']}", "/executors/", "/environment/",
                 "/jobs"):
        status, ctype, html = _get(base + page)
        assert status == 200 and "text/html" in ctype, page
        assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html, page
    assert SECRET not in _get(base + "/environment/")[2]
    status, _, html = _get(base + "/jobs/job/?id=99")
    assert status == 404 and EVIL not in html

    status, ctype, text = _get(base + "/metrics/prometheus")
    assert status == 200 and ctype.startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["ember_driver_jobs_succeeded"].samples[0].value == 2
    assert families["ember_driver_tasks_completed"].samples[0].value == 12
    assert families["ember_driver_cached_rdds"].samples[0].value == 1

    live_jobs = json.loads(_get(f"{api}/{sc.applicationId}/jobs")[2])
    pairs.unpersist()
    assert sc.runtime.bus.wait_until_empty(10) and sc.runtime.ui_process.sync()
    assert json.loads(_get(f"{api}/{sc.applicationId}/storage/rdd")[2]) == []
    sc.stop()
    final = os.path.join(tmp_path, sc.applicationId)
    assert os.path.exists(final) and not os.path.exists(inprogress)
    replayed = store_of(list(replay(final)))
    replayed_jobs = api_get(LiveStoreProvider(replayed), f"/applications/{sc.applicationId}/jobs",
                            {})[1]
    assert json.loads(json.dumps(replayed_jobs)) == live_jobs
    assert replayed.completed and replayed.rdds() == []
    assert replayed.stages()[0]["name"].startswith("count at ")
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(base.rsplit(":", 1)[1])), timeout=1)


def test_ui_port_retries_and_event_log_dir_errors(fresh_sc, tmp_path) -> None:
    from ember import SparkConf, SparkContext
    busy = socket.socket()
    busy.bind(("0.0.0.0", 0))
    busy.listen()
    port = busy.getsockname()[1]
    try:
        sc = fresh_sc("local[1]", "retry", SparkConf().set("spark.ui.port", str(port)))
        assert sc.uiWebUrl.endswith(f":{port + 1}")
        sc.stop()
    finally:
        busy.close()
    conf = (SparkConf().set("spark.ui.enabled", "false").set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path / "missing")))
    with pytest.raises(FileNotFoundError, match="spark.eventLog.dir"):
        fresh_sc("local[1]", "nolog", conf)
    assert SparkContext._active_spark_context is None
    sc = fresh_sc("local[1]", "noui", SparkConf().set("spark.ui.enabled", "false"))
    assert sc.uiWebUrl is None
    start = time.time()
    assert sc.parallelize([1, 2]).count() == 2 and time.time() - start < 5


def test_history_style_routes_serve_many_replayed_apps() -> None:
    """What the history server will do: stores rebuilt from logs behind one aiohttp app,
    pages under /history/<appId>, the API for all of them."""
    from aiohttp import web

    from ember.web.server import WebServerThread
    from ember.ui.api import api_routes
    from ember.ui.app_ui import make_routes

    stores = {}
    for app_id in ("app-1", "app-2"):
        events = [sl.ApplicationStart(app_id, app_id, T0, "u") if isinstance(e, sl.ApplicationStart)
                  else e for e in app_events()]
        stores[app_id] = store_of(events + [sl.ApplicationEnd(T0 + 9)])

    class Provider:
        def applications(self):
            return list(stores.values())

        def store(self, app_id, attempt_id=None):
            return stores.get(app_id)

    app = web.Application()
    app.add_routes(api_routes(Provider()) + make_routes(Provider(), "/history/{app_id}"))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    sock.setblocking(False)
    server = WebServerThread("history-test")
    server.start(sock, app)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        assert {a["id"] for a in json.loads(_get(base + "/api/v1/applications")[2])} == \
            {"app-1", "app-2"}
        assert json.loads(_get(base + "/api/v1/applications/app-2/jobs/0")[2])["jobId"] == 0
        status, _, html = _get(base + "/history/app-2/stages/stage/?id=0&attempt=0")
        assert status == 200 and 'href="/history/app-2/jobs/"' in html
        assert 'data-live="0"' in html
        status, _, html = _get(base + "/history/app-1/")
        assert status == 200 and "Spark Jobs" in html        # redirected to the jobs page
        assert _get(base + "/history/app-3/jobs/")[0] == 404
        assert _get(base + "/history/app-1/jobs/job/?id=12")[0] == 404
    finally:
        server.stop()


def test_spark_rolling_zstd_logs_list_and_replay(tmp_path) -> None:
    """Spark 4's default layout: eventlog_v2_<appId>/events_<n>_<appId>.zstd plus an
    appstatus file (.inprogress while running); a crash can cut the last zstd frame short."""
    import zstandard
    lines = [event_log._dumps(e).encode() for e in app_events()]
    rolled = tmp_path / "eventlog_v2_app-1"
    rolled.mkdir()
    half = len(lines) // 2
    for n, chunk in ((1, lines[:half]), (2, lines[half:])):
        c = zstandard.ZstdCompressor()
        data = b"".join(c.compress(line) for line in chunk)     # one frame per line
        if n == 2:
            data += c.compress(b'{"Event":"SparkListenerUnpersistRDD","RDD ID":1}\n')[:-3]
        (rolled / f"events_{n}_app-1.zstd").write_bytes(data)
    (rolled / "appstatus_app-1.inprogress").write_bytes(b"")
    (tmp_path / "app-2.lz4").write_bytes(b"\x00")
    infos = {i.app_id: i for i in list_event_logs(str(tmp_path))}
    assert set(infos) == {"app-1", "app-2"} and infos["app-1"].in_progress
    assert not infos["app-2"].in_progress
    replayed = store_of(list(replay(infos["app-1"].path)))
    assert replayed.jobs() == store_of(app_events()).jobs()
    with pytest.raises(ValueError, match="compressed with lz4 are not supported"):
        list(replay(infos["app-2"].path))
    (rolled / "appstatus_app-1.inprogress").rename(rolled / "appstatus_app-1")
    assert not {i.app_id: i for i in list_event_logs(str(tmp_path))}["app-1"].in_progress


def test_event_log_writer_compresses_and_rolls(tmp_path) -> None:
    """spark.eventLog.compress + rolling.enabled: Spark's names, a zstd frame per batch, a
    new events file past max_size, appstatus complete at finish; replay reads it back."""
    conf = {"spark.eventLog.dir": str(tmp_path), "spark.eventLog.compress": "true",
            "spark.eventLog.rolling.enabled": "true"}
    log_file = EventLog(conf)
    spec = log_file.start("app-1")
    rolled = tmp_path / "eventlog_v2_app-1"
    assert spec["path"] == str(rolled / "events_1_app-1.zstd")
    assert (rolled / "appstatus_app-1.inprogress").exists()
    spec["rolling"]["max_size"] = 2000          # (EventLog insists on >= 10 MiB)
    writer = event_log.EventLogWriter(spec)
    for e in app_events():
        writer.write(event_log._dumps(e).encode())
    writer.close()
    log_file.finish()
    files = sorted(p.name for p in rolled.iterdir())
    assert "appstatus_app-1" in files and "events_3_app-1.zstd" in files
    [info] = list_event_logs(str(tmp_path))
    assert not info.in_progress and info.app_id == "app-1"
    assert store_of(list(replay(info.path))).jobs() == store_of(app_events()).jobs()
    with pytest.raises(FileExistsError):
        EventLog(conf).start("app-1")
    for bad, match in (({"spark.eventLog.compression.codec": "lz4"}, "zstd only"),
                       ({"spark.eventLog.rolling.maxFileSize": "1m"}, "at least 10 MiB")):
        with pytest.raises(ValueError, match=match):
            EventLog({**conf, **bad})
