"""The driver's UI process (ember.ui.ui_process): the driver must not depend on it."""
from __future__ import annotations

import logging
import os

from ember import SparkConf


def test_driver_outlives_its_ui_process(fresh_sc, tmp_path, caplog) -> None:
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path)))
    sc = fresh_sc("local[2]", "ui-dies", conf)
    ui = sc.runtime.ui_process
    ui.proc.kill()
    ui.proc.wait()
    with caplog.at_level(logging.ERROR, logger="ember.ui.UiProcess"):
        assert sc.parallelize(range(100), 10).sum() == 4950
        assert sc.runtime.bus.wait_until_empty(10)
    assert "The UI process failed" in caplog.text
    assert not ui.sync(timeout=1)
    assert sc.parallelize(range(10), 2).count() == 10
    sc.stop()
    assert os.listdir(tmp_path) == [sc.applicationId]     # what was written is kept


def test_without_an_event_log_the_ui_loads_when_first_needed(fresh_sc) -> None:
    """ember.ui.ui_process_main: the UI process holds the driver's frames and imports the UI
    only when a page is asked for (or a SYNC, or after a while); the page then shows every
    event sent before."""
    import json
    import time
    import urllib.request

    import psutil

    from ember.ui.ui_process_main import FIRST_USE_WAIT
    started = time.monotonic()
    sc = fresh_sc("local[2]", "ui-lazy", SparkConf().set("spark.ui.port", "0"))
    assert sc.parallelize(range(10), 2).count() == 10
    assert sc.runtime.bus.wait_until_empty(10)
    proc = psutil.Process(sc.runtime.ui_process.proc.pid)
    if time.monotonic() - started < FIRST_USE_WAIT - 1.0:   # else it may have loaded by now
        assert proc.num_threads() == 2     # main and ui-starter: no server yet
    port = sc.uiWebUrl.rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=60) as r:
        jobs = json.load(r)
    assert [(j["status"], j["numTasks"]) for j in jobs] == [("SUCCEEDED", 2)]
    assert proc.num_threads() > 2
    assert sc.runtime.ui_process.sync()


def test_events_wake_the_idle_writer_once(fresh_sc, tmp_path) -> None:
    """UiProcess.on_event: the first event posted while the writer thread sleeps idle wakes
    it; the events posted before it runs again (it waits for the posting thread's GIL) do
    not take the lock to wake it again."""
    import threading
    import time

    from ember.scheduler.listener import UnpersistRDD
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path)))
    sc = fresh_sc("local[2]", "ui-wake-once", conf)
    ui = sc.runtime.ui_process
    assert ui.flush(10)
    deadline = time.monotonic() + 10
    while not ui._idle and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ui._idle
    entered = []
    cv = ui._cv

    class Counting:
        def __enter__(self) -> None:
            entered.append(threading.current_thread())
            cv.__enter__()

        def __exit__(self, *exc: object) -> None:
            cv.__exit__(*exc)

        def __getattr__(self, name: str) -> object:
            return getattr(cv, name)
    ui._cv = Counting()
    try:
        for _ in range(1000):
            ui.on_event(UnpersistRDD(10 ** 6))
    finally:
        ui._cv = cv
    assert 1 <= len(entered) <= 10       # one per BATCH_DELAY at most; 1000 before
    assert ui.flush(10)


def test_a_stalled_ui_process_never_blocks_the_driver(fresh_sc, tmp_path) -> None:
    """ember.ui.ui_process: the posting thread only packs; frames the process has not read
    wait in the driver (here more than its 1 MiB pipe), and nothing is lost."""
    import collections
    import glob
    import json
    import signal
    import time

    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path)))
    sc = fresh_sc("local[2]", "ui-stalled", conf)
    ui = sc.runtime.ui_process
    os.kill(ui.proc.pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        assert sc.parallelize(range(30000), 30000).count() == 30000
        assert time.monotonic() - started < 60
        assert not sc.runtime.bus.wait_until_empty(0.5)     # queued behind the full pipe
        assert ui._queued_bytes > (1 << 20)
    finally:
        os.kill(ui.proc.pid, signal.SIGCONT)
    assert sc.runtime.bus.wait_until_empty(60)
    assert ui.sync(60)
    sc.stop()
    [log] = glob.glob(str(tmp_path / "*"))
    events = [json.loads(line) for line in open(log, encoding="utf-8")]
    starts = [e for e in events if e["Event"] == "SparkListenerTaskStart"]
    ends = [e for e in events if e["Event"] == "SparkListenerTaskEnd"]
    assert len(starts) == len(ends) >= 30000      # a loaded host may relaunch a queued task
    reasons = collections.Counter(e["Task End Reason"]["Reason"] for e in ends)
    assert reasons["Success"] == 30000, reasons
    assert ui.dropped == 0


def _frame(items: list) -> bytes:
    import marshal

    from ember.ui.ui_frames import HEADER
    data = marshal.dumps([marshal.dumps(i, 2) for i in items])
    return HEADER.pack(len(data)) + data


def _items(batch: list) -> list:
    """A batch of the UI process's held items (still marshalled), unmarshalled."""
    import marshal
    return [marshal.loads(b) for b in batch]


def test_the_ui_process_applies_when_the_driver_pauses(monkeypatch) -> None:
    """ember.ui.ui_process_main: frames are held while more keep coming and applied when
    none came for QUIET seconds, at HOLD_ITEMS items, at a SYNC, at a page's request and at
    the end of input."""
    import threading
    import time

    from ember.ui import ui_process_main as m
    from ember.ui.ui_frames import SYNC
    monkeypatch.setattr(m, "QUIET", 0.5)
    monkeypatch.setattr(m, "HOLD_ITEMS", 7)
    r, w = os.pipe()
    catch_up = m._CatchUp()
    batches = m._coalesced(m._frames(r), r, catch_up)
    try:
        for i in range(3):                                   # busy: held together
            os.write(w, _frame([f"a{i}", f"b{i}"]))
        started = time.monotonic()
        assert _items(next(batches)) == ["a0", "b0", "a1", "b1", "a2", "b2"]
        assert time.monotonic() - started >= 0.4             # after a quiet QUIET
        os.write(w, _frame(["c"]) + _frame([(SYNC,)]))       # a SYNC: at once
        started = time.monotonic()
        assert _items(next(batches)) == ["c", (SYNC,)]
        assert time.monotonic() - started < 0.4
        os.write(w, _frame(list("defg")) + _frame(list("hijk")))
        assert _items(next(batches)) == list("defghijk")     # HOLD_ITEMS reached
        os.write(w, _frame(["l"]))
        asker = threading.Thread(target=catch_up.request)
        asker.start()
        assert _items(next(batches)) == ["l"]                # a page asks: at once
        catch_up.answered()
        asker.join(5)
        assert not asker.is_alive()
        os.write(w, _frame(["m"]))
        os.close(w)
        w = -1
        assert [_items(b) for b in batches] == [["m"]]       # end of input: the rest
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_the_ui_process_holds_nothing_longer_than_hold_seconds(monkeypatch) -> None:
    """However steadily frames keep coming, the first one held is applied (and logged)
    HOLD_SECONDS after it came."""
    import threading
    import time

    from ember.ui import ui_process_main as m
    monkeypatch.setattr(m, "QUIET", 5.0)
    monkeypatch.setattr(m, "HOLD_SECONDS", 0.5)
    r, w = os.pipe()
    stop = threading.Event()

    def feed() -> None:
        i = 0
        while not stop.is_set() and i < 100:
            os.write(w, _frame([f"x{i}"]))
            i += 1
            time.sleep(0.05)
    feeder = threading.Thread(target=feed)
    batches = m._coalesced(m._frames(r), r, None)
    try:
        started = time.monotonic()
        feeder.start()
        first = _items(next(batches))
        assert 0.4 <= time.monotonic() - started < 4.0
        assert first[0] == "x0" and len(first) < 100
    finally:
        stop.set()
        feeder.join(10)
        os.close(w)
        os.close(r)


def test_with_an_event_log_the_ui_process_loads_in_the_drivers_first_pause(
        monkeypatch) -> None:
    """ember.ui.ui_process_main: with an event log the process holds the driver's frames
    (without importing the UI) until the log is due: QUIET after the last frame, HOLD_SECONDS
    after the start, or the end of input, which is not the end of the log."""
    import time

    from ember.ui import ui_process_main as m
    monkeypatch.setattr(m, "QUIET", 0.3)
    monkeypatch.setattr(m, "HOLD_SECONDS", 3.0)
    r, w = os.pipe()
    try:
        os.write(w, _frame(["a"]) + _frame(["b"]))
        started = time.monotonic()
        held, ended = m._wait_for_first_use(m._frames(r), r, [], True)
        assert ([_items(f) for f in held], ended) == ([["a"], ["b"]], False)
        assert 0.25 <= time.monotonic() - started < 2.5         # the driver paused
        started = time.monotonic()
        assert m._wait_for_first_use(m._frames(r), r, [], True) == ([], False)
        assert 2.5 <= time.monotonic() - started < 10           # nothing came: HOLD_SECONDS
        os.write(w, _frame(["c"]))
        os.close(w)
        w = -1
        held, ended = m._wait_for_first_use(m._frames(r), r, [], True)
        assert ([_items(f) for f in held], ended) == ([["c"]], True)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_flush_after_close_answers_at_once(fresh_sc, tmp_path) -> None:
    """UiProcess.flush (the bus's wait_until_empty) after the UI process's input ended:
    nothing is left to write, so it answers at once."""
    import time
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path)))
    sc = fresh_sc("local[2]", "ui-flush-closed", conf)
    assert sc.parallelize(range(100), 10).count() == 100
    ui = sc.runtime.ui_process
    sc.stop()
    started = time.monotonic()
    assert ui.flush(5.0)
    assert time.monotonic() - started < 1.0


def test_event_dicts_sent_to_the_ui_process_are_json_native(fresh_sc, monkeypatch) -> None:
    """Events other than task starts and ends reach the UI process as their event-log
    dicts (marshalled), which it applies without parsing its own line back: so every dict
    must be what the line parses to (lists, not tuples; str keys)."""
    import json
    import marshal

    import pytest

    from ember.errors import SparkException
    from ember.scheduler.listener import ListenerBus
    from ember.ui.event_log import event_to_json, json_line
    events: list = []
    post = ListenerBus.post

    def record(bus, e) -> None:
        events.append(e)
        post(bus, e)
    monkeypatch.setattr(ListenerBus, "post", record)
    sc = fresh_sc("local[2]", "ui-dicts", SparkConf().set("spark.ui.port", "0"))
    pairs = sc.parallelize([(i % 7, i) for i in range(100)], 4).cache()
    assert pairs.reduceByKey(lambda a, b: a + b).count() == 7
    pairs.unpersist()
    sc.setJobGroup("g", "a group")
    with pytest.raises(SparkException):
        sc.parallelize(range(4), 2).map(lambda x: 1 // 0).count()
    sc.stop()
    kinds = set()
    for e in events:
        d = event_to_json(e)
        if d is None:
            continue
        kinds.add(d["Event"])
        assert marshal.loads(marshal.dumps(d, 2)) == json.loads(json_line(d)), d["Event"]
    assert {"SparkListenerApplicationStart", "SparkListenerEnvironmentUpdate",
            "SparkListenerJobStart", "SparkListenerStageSubmitted",
            "SparkListenerStageCompleted", "SparkListenerJobEnd",
            "SparkListenerApplicationEnd"} <= kinds


def test_task_starts_held_for_their_ends_keep_the_order_of_events(tmp_path) -> None:
    """ember.ui.ui_process: a successful end carries its held start (TASK_RAN); a start is
    sent alone before its task's failure, before any other kind of event and when a frame is
    cut, so every task's start comes before its end and before its stage's completion."""
    import glob
    import json

    from ember.scheduler import listener as sl
    from ember.scheduler.task import SUCCESS, TaskInfo, TaskKilled
    from ember.ui.event_log import EventLog
    from ember.ui.ui_process import UiProcess

    class Unmarshallable(int):      # marshal refuses int subclasses: the line path
        pass

    def info(tid: int, state: str | None = None) -> TaskInfo:
        i = TaskInfo(tid, tid, 0, tid, 1000.0 + tid, "1", "h1", "PROCESS_LOCAL")
        if state is not None:
            i.mark_finished(state, 1010.0 + tid)
        return i

    def end(tid: int, reason=SUCCESS, **metrics) -> sl.TaskEnd:
        state = "FINISHED" if reason is SUCCESS else "KILLED"
        return sl.TaskEnd(1, 0, "ResultTask", reason, info(tid, state), metrics)

    stage = sl.StageInfo(1, 0, "count at a.py:1", 6)
    conf = {"spark.eventLog.dir": str(tmp_path)}
    ui, event_log = UiProcess(conf, None, event_log=True), EventLog(conf)
    ui.open_log(event_log.start("app-order"))
    ui.on_events([sl.StageSubmitted(stage, {})] +
                 [sl.TaskStart(1, 0, info(t)) for t in (1, 2, 3, 4)] +
                 [end(1, executorRunTime=5), end(2, TaskKilled("stop")),
                  end(3, executorRunTime=Unmarshallable(7)), sl.TaskStart(1, 0, info(5))])
    ui.flush()                      # a frame is cut while task 5 runs: its start goes
    assert not ui._starts
    ui.on_events([sl.StageCompleted(stage), end(4), end(5)])
    ui.close()
    event_log.finish()
    [path] = glob.glob(str(tmp_path / "app-order*"))
    order = []
    for line in open(path, encoding="utf-8"):
        e = json.loads(line)
        if "Task Info" in e:
            order.append((e["Event"][len("SparkListener"):], e["Task Info"]["Task ID"]))
        elif e["Event"].startswith("SparkListenerStage"):
            order.append((e["Event"][len("SparkListener"):], None))
    assert order == [("StageSubmitted", None), ("TaskStart", 1), ("TaskEnd", 1),
                     ("TaskStart", 2), ("TaskEnd", 2), ("TaskStart", 3), ("TaskEnd", 3),
                     ("TaskStart", 4), ("TaskStart", 5), ("StageCompleted", None),
                     ("TaskEnd", 4), ("TaskEnd", 5)]
    lines = [json.loads(line) for line in open(path, encoding="utf-8")]
    run_times = {e["Task Info"]["Task ID"]: e["Task Metrics"]["Executor Run Time"]
                 for e in lines if e["Event"] == "SparkListenerTaskEnd" and "Task Metrics" in e}
    assert run_times[1] == 5 and run_times[3] == 7
