"""The driver runtime behind SparkContext: what backends, RDDs and the UI reach through
`sc.runtime`, and that a failed start releases what it built."""
from __future__ import annotations

import os
import threading

import pytest

from ember import SparkConf, SparkContext
from ember.driver_runtime import DriverRuntime, parse_local_cluster_master, parse_local_master
from ember.errors import PySparkRuntimeError, SparkException
from tests.helpers.ctrl_c import (IGNORED_IN_FINALIZERS, ctrl_c_at_every_step,
                                  interrupt_a_sleeping_job)
from tests.helpers.switches import context_switches


def test_master_urls_parse_as_sparks_regexes():
    assert parse_local_master("local") == (1, 1)
    assert parse_local_master("local[3, 2]") == (3, 2)
    assert parse_local_master("local[*]")[0] == (os.cpu_count() or 1)
    assert parse_local_master("spark://h:7077") is None
    assert parse_local_cluster_master("local-cluster[2, 1, 1024]") == (2, 1, 1024)
    assert parse_local_cluster_master("local[2]") is None


def test_a_failed_start_removes_its_scratch_directory_and_leaves_no_active_context(
        fresh_sc, tmp_path):
    conf = SparkConf().set("spark.local.dir", str(tmp_path)).set("spark.ui.enabled", "false")
    with pytest.raises(SparkException, match="Could not parse Master URL: 'bogus://x'"):
        SparkContext("bogus://x", "bad", conf=conf)
    assert SparkContext._active_spark_context is None
    assert [p for p in os.listdir(tmp_path) if p.startswith("ember-")] == []


def test_the_runtime_is_the_contexts_internals(fresh_sc):
    sc = fresh_sc("local[2]")
    rt = sc.runtime
    assert isinstance(rt, DriverRuntime) and not rt.stopped
    assert (rt.app_id, rt.start_time, rt.ui_url) == (sc.applicationId, sc.startTime,
                                                     sc.uiWebUrl)
    assert os.path.isdir(rt.broadcast_dir) and os.path.isdir(rt.files_dir)
    first = rt.new_rdd_id()
    assert sc.parallelize([1]).id() == first + 1, "RDDs take their ids from the runtime"
    assert rt.run_job(sc.parallelize(range(4), 2), sum) == [1, 5]
    sc.setLocalProperty("k", "main")
    seen = {}
    t = threading.Thread(target=lambda: seen.update(props=dict(rt.local_properties())))
    t.start()
    t.join()
    assert rt.local_properties()["k"] == "main" and seen["props"] == {}, "per thread"
    local_dir = rt.local_dir
    sc.stop()
    assert rt.stopped and not os.path.exists(local_dir)
    with pytest.raises(PySparkRuntimeError, match="stopped SparkContext"):
        sc.parallelize([1])


def test_a_task_s_end_makes_an_offer_round_only_when_something_waits(fresh_sc, monkeypatch):
    """A 2-task job on local[2, 2]: its submission offers the two slots; neither task's end
    does (nothing is left to place). A failed task's end does: its retry waits."""
    sc = fresh_sc("local[2, 2]", conf=SparkConf().set("spark.ui.enabled", "false"))
    backend = sc.runtime.scheduler_backend
    rounds = []
    real = backend.revive_offers
    monkeypatch.setattr(backend, "revive_offers", lambda: (rounds.append(1), real())[1])
    assert sc.parallelize(range(10), 2).count() == 10
    assert len(rounds) == 1
    marker = os.path.join(sc.runtime.local_dir, "failed-once")

    def fail_once(x):
        if x == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("first attempt")
        return x
    del rounds[:]
    assert sc.parallelize(range(10), 2).map(fail_once).sum() == 45
    assert len(rounds) == 2


# --- Ctrl-C (PySpark's SIGINT handler) and the submission run on the caller's thread -----


def _handler_threads(sc, monkeypatch, name: str = "handle_job_submitted") -> list[int]:
    """Record which thread runs each call of a DAG scheduler handler (by default each
    job's submission)."""
    dag = sc.runtime.dag_scheduler
    original = getattr(dag, name)
    threads: list[int] = []

    def recorded(*args):
        threads.append(threading.get_ident())
        original(*args)
    monkeypatch.setattr(dag, name, recorded)
    return threads


@pytest.mark.timeout(60)
def test_ctrl_c_cancels_the_running_job_and_raises_keyboard_interrupt(fresh_sc):
    sc = fresh_sc("local[2]")
    assert interrupt_a_sleeping_job(sc, 30) < 20
    assert sc.statusTracker().getJobInfo(0).status == "FAILED"


@pytest.mark.timeout(120)
@IGNORED_IN_FINALIZERS
def test_a_ctrl_c_anywhere_in_a_warm_job_leaves_the_context_working(fresh_sc):
    sc = fresh_sc("local[2]")
    rdd = sc.parallelize(range(100), 4)
    assert ctrl_c_at_every_step(sc, rdd.count) > 50


@pytest.mark.timeout(60)
@pytest.mark.parametrize("later_handler", [False, True])
def test_ctrl_c_while_the_main_thread_runs_a_submission_waits_for_its_end(fresh_sc,
                                                                          monkeypatch,
                                                                          later_handler):
    """Under the context's handler, or under one installed after it (which then gets the
    Ctrl-C once the submission is done)."""
    import signal
    import time
    sc = fresh_sc("local[2]")
    sc.parallelize([1]).count()                 # the loop idle: the next submission runs here
    dag = sc.runtime.dag_scheduler
    original = dag.handle_job_submitted
    seen = {}

    def submitted(*args):
        os.kill(os.getpid(), signal.SIGINT)     # handled in this thread, in the next lines
        time.sleep(0.05)
        seen["thread"] = threading.get_ident()
        original(*args)
        seen["finished"] = True

    def raising(signum, frame):
        seen["later handler after the submission"] = seen.get("finished", False)
        raise KeyboardInterrupt()
    monkeypatch.setattr(dag, "handle_job_submitted", submitted)
    if later_handler:
        signal.signal(signal.SIGINT, raising)
    try:
        with pytest.raises(KeyboardInterrupt):
            sc.parallelize(range(2), 2).map(lambda x: time.sleep(30)).collect()
    finally:
        after = signal.getsignal(signal.SIGINT)
        signal.signal(signal.SIGINT, sc.runtime.sigint_handler)
    assert after is (raising if later_handler else sc.runtime.sigint_handler)
    assert seen == {"thread": threading.get_ident(), "finished": True,
                    **({"later handler after the submission": True} if later_handler else {})}
    monkeypatch.undo()
    assert sc.parallelize([1, 2, 3]).count() == 3


def test_a_caller_handles_its_jobs_results_itself_and_the_loop_thread_sleeps(fresh_sc,
                                                                             monkeypatch):
    """The thread that waits for a job reads its results and ends it (EventLoop.drive): the
    loop thread, which would handle them and then wake the caller, is not woken at all."""
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.ui.enabled", "false"))
    sc.parallelize([1]).count()
    threads = _handler_threads(sc, monkeypatch, "handle_task_completion")
    loop_tid = sc.runtime.event_loop._thread.native_id
    before = context_switches(loop_tid)
    for _ in range(50):
        assert sc.parallelize(range(10), 2).count() == 10
    assert set(threads) == {threading.get_ident()} and len(threads) == 100
    assert context_switches(loop_tid) - before < 10           # (a stray timer may post; not one per job)
    done = {}
    t = threading.Thread(target=lambda: done.update(n=sc.parallelize([1, 2], 2).count(),
                                                    me=threading.get_ident()))
    t.start()
    t.join(10)
    assert done["n"] == 2 and threads[-2:] == [done["me"]] * 2


@pytest.mark.timeout(60)
def test_ctrl_c_while_the_main_thread_handles_a_result_waits_for_the_handler(fresh_sc,
                                                                           monkeypatch):
    import signal
    import time
    sc = fresh_sc("local[2]")
    sc.parallelize([1]).count()
    dag = sc.runtime.dag_scheduler
    original = dag.handle_task_completion
    seen: list = []

    def completed(*args):
        if not seen:
            os.kill(os.getpid(), signal.SIGINT)     # handled in this thread, in the next lines
            time.sleep(0.05)
        seen.append(threading.get_ident())
        original(*args)
    monkeypatch.setattr(dag, "handle_task_completion", completed)
    with pytest.raises(KeyboardInterrupt):
        sc.parallelize(range(2), 2).map(lambda x: time.sleep(30 * x)).collect()
    assert seen[0] == threading.get_ident()       # the handler ran to its end first
    monkeypatch.undo()
    t0 = time.monotonic()
    assert sc.parallelize([1, 2, 3]).count() == 3   # the sleeping task was killed
    assert time.monotonic() - t0 < 20


def test_a_submission_runs_on_the_caller_under_any_sigint_handler(fresh_sc, monkeypatch):
    """A handler installed after the context's (the user's, another library's) gives its
    place to the context's for each job and has it back after it; SIG_IGN needs neither."""
    import signal
    sc = fresh_sc("local[2]")
    sc.parallelize([1]).count()
    threads = _handler_threads(sc, monkeypatch)
    sc.parallelize([1, 2]).count()
    mine = lambda *a: None      # noqa: E731 - the user's own handler
    previous = signal.signal(signal.SIGINT, mine)
    try:
        assert sc.parallelize([1, 2]).count() == 2
        assert signal.getsignal(signal.SIGINT) is mine
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        assert sc.parallelize([1, 2]).count() == 2
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
    assert threads == [threading.get_ident()] * 3
    done = {}
    t = threading.Thread(target=lambda: done.update(n=sc.parallelize([1, 2]).count(),
                                                    me=threading.get_ident()))
    t.start()
    t.join(10)
    assert done["n"] == 2 and threads[3] == done["me"]   # no KeyboardInterrupt off main


@pytest.mark.timeout(60)
def test_ctrl_c_under_a_later_handler_has_that_handlers_effect(fresh_sc):
    """PySpark's own context, created after ours, installs a handler that raises
    KeyboardInterrupt: the job is cancelled, its tasks killed. A handler that only takes
    note leaves the job running to its result."""
    import signal
    import time
    sc = fresh_sc("local[2]")
    calls = []

    def raising(signum, frame):
        calls.append(signum)
        raise KeyboardInterrupt()
    previous = signal.signal(signal.SIGINT, raising)
    try:
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            sc.parallelize(range(2), 2).map(lambda x: time.sleep(30)).collect()
        timer.join()
        assert calls == [signal.SIGINT]
        assert sc.parallelize([1, 2, 3]).count() == 3       # the sleeping tasks were killed
        assert time.monotonic() - t0 < 20
        signal.signal(signal.SIGINT, lambda signum, frame: calls.append(signum))
        timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        assert sc.parallelize(range(2), 2).map(lambda x: time.sleep(1.5) or x).sum() == 1
        timer.join()
        assert calls == [signal.SIGINT] * 2
    finally:
        signal.signal(signal.SIGINT, previous)


def test_stop_puts_back_the_sigint_handler_the_context_replaced(fresh_sc):
    import signal
    previous = signal.getsignal(signal.SIGINT)
    sc = fresh_sc("local[2]")
    assert signal.getsignal(signal.SIGINT) is not previous
    sc.stop()
    assert signal.getsignal(signal.SIGINT) is previous
