"""The driver's scheduler loop: handlers run one at a time, on the loop thread or, for a
job's submission while the loop is idle, on the submitting thread (run_here)."""
from __future__ import annotations

import socket
import threading

import pytest

from ember.util.event_loop import EventLoop
from tests.helpers.one_at_a_time import OneAtATime

pytestmark = pytest.mark.timeout(30)


@pytest.fixture
def loop():
    lp = EventLoop("test-loop")
    lp.start()
    yield lp
    lp.stop()


def _settled(lp: EventLoop) -> None:
    """Wait until the loop thread has run everything posted so far."""
    done = threading.Event()
    lp.post(done.set)
    assert done.wait(5)


def test_run_here_runs_on_the_calling_thread_when_the_loop_is_idle(loop):
    _settled(loop)
    seen = []
    loop.run_here(lambda: seen.append((threading.get_ident(), loop.in_loop())))
    assert seen == [(threading.get_ident(), True)]
    assert not loop.in_loop()


def test_what_a_handler_run_here_posts_runs_before_run_here_returns(loop):
    _settled(loop)
    order = []
    loop.run_here(lambda: (order.append("first"), loop.post(order.append, "posted")))
    assert order == ["first", "posted"]


def test_run_here_posts_while_the_loop_thread_runs_a_handler(loop):
    inside, release = threading.Event(), threading.Event()
    loop.post(lambda: (inside.set(), release.wait(5)))
    assert inside.wait(5)
    ran = []
    loop.run_here(lambda: ran.append(threading.get_ident()))
    assert ran == []                     # queued behind the running handler
    release.set()
    _settled(loop)
    assert ran == [loop._thread.ident]


def test_run_here_keeps_the_order_of_what_was_posted_before(loop):
    gate = threading.Event()
    loop.post(gate.wait, 5)
    order = []
    loop.post(order.append, 1)
    loop.run_here(order.append, 2)       # the queue is not empty: posted after 1
    gate.set()
    _settled(loop)
    assert order == [1, 2]


def test_a_failing_handler_run_here_is_logged_and_the_loop_goes_on(loop, caplog):
    _settled(loop)
    loop.run_here(lambda: 1 / 0)
    assert "event handler" in caplog.text
    ran = threading.Event()
    loop.run_here(ran.set)
    assert ran.is_set()


def test_handlers_never_overlap_between_callers_sockets_and_the_loop(loop):
    """Socket callbacks on the loop thread, posts from one thread and run_here from two
    others, bounded in count: no two handlers are ever inside at once."""
    handler = OneAtATime()

    r, w = socket.socketpair()
    r.setblocking(False)

    def on_readable() -> None:
        try:
            r.recv(4096)
        except BlockingIOError:
            pass
        handler()
    loop.register(r, on_readable)
    n = 300

    def poster() -> None:
        for _ in range(n):
            loop.post(handler)
            w.send(b"x")

    def caller() -> None:
        for _ in range(n):
            loop.run_here(handler)
    threads = [threading.Thread(target=poster), threading.Thread(target=caller),
               threading.Thread(target=caller)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    _settled(loop)
    loop.unregister(r)
    r.close()
    w.close()
    assert handler.overlaps == []
    assert handler.count >= 3 * n             # every post and run_here ran (plus socket reads)


def test_stop_runs_what_is_queued_and_run_here_after_stop_runs_nothing():
    lp = EventLoop("test-loop")
    lp.start()
    ran = []
    lp.post(ran.append, 1)
    lp.stop()
    assert ran == [1]
    lp.run_here(ran.append, 2)
    assert ran == [1]
