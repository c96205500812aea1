"""The driver's scheduler loop: handlers run one at a time, on the loop thread or, for a
job's submission while the loop is idle, on the submitting thread (run_here), and for the
results a caller waits for, on that caller's thread (claim, drive)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from ember.util.event_loop import EventLoop
from tests.helpers.one_at_a_time import OneAtATime
from tests.helpers.switches import context_switches

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


def test_a_driving_caller_handles_socket_work_and_the_loop_thread_sleeps_through_it(loop):
    """What arrives on the sockets while a caller drives is handled on the caller's thread,
    without a single wake-up of the loop thread; given back, the loop thread handles it."""
    r, w = socket.socketpair()
    r.setblocking(False)
    seen: list[int] = []

    def on_readable() -> None:
        r.recv(4096)
        seen.append(threading.get_ident())
    loop.register(r, on_readable)
    _settled(loop)
    assert loop.claim()
    before = context_switches(loop._thread.native_id)
    n = 20
    writer = threading.Thread(target=lambda: [(w.send(b"x"), time.sleep(0.005))
                                              for _ in range(n)])
    writer.start()
    loop.drive(lambda: len(seen) >= n)
    loop.release()
    writer.join(5)
    assert set(seen) == {threading.get_ident()} and len(seen) == n
    assert context_switches(loop._thread.native_id) - before <= 1       # not one per write
    del seen[:]
    w.send(b"y")                              # given back: the loop thread's again
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert seen == [loop._thread.ident]
    loop.unregister(r)
    r.close()
    w.close()


def test_while_a_caller_drives_posts_still_wake_the_loop_thread_and_nothing_overlaps(loop):
    """Posts from other threads wake the loop thread as ever (the driver may also run them,
    at the end of its own turns); handlers never overlap."""
    handler = OneAtATime()
    r, w = socket.socketpair()
    r.setblocking(False)
    loop.register(r, lambda: (r.recv(4096), handler()))
    _settled(loop)
    assert loop.claim()
    ran_on: set[int] = set()
    before = context_switches(loop._thread.native_id)
    n = 200

    def post() -> None:
        loop.post(lambda: (ran_on.add(threading.get_ident()), handler()))

    def poster() -> None:
        for _ in range(n):
            post()
            w.send(b"x")
        # on a loaded host the driving caller may have run every one of them; posts spaced
        # out still wake the loop thread, which takes one (bounded: 5 s)
        deadline = time.monotonic() + 5
        while loop._thread.ident not in ran_on and time.monotonic() < deadline:
            post()
            time.sleep(0.005)
    t = threading.Thread(target=poster)
    t.start()
    loop.drive(lambda: not t.is_alive() and handler.count >= n + 1)
    loop.release()
    t.join(5)
    _settled(loop)
    assert handler.overlaps == [] and handler.count >= n + 1   # reads coalesce writes
    assert loop._thread.ident in ran_on and context_switches(loop._thread.native_id) > before
    loop.unregister(r)
    r.close()
    w.close()


def test_one_driver_at_a_time_and_wake_driver_ends_a_wait_made_true_elsewhere(loop):
    _settled(loop)
    assert not loop.holds_interrupts()
    assert loop.claim()
    assert loop.holds_interrupts()            # a Ctrl-C waits until release
    other: list[bool] = []
    t = threading.Thread(target=lambda: other.append(loop.claim()))
    t.start()
    t.join(5)
    assert other == [False]
    flag = threading.Event()

    def from_the_loop() -> None:
        flag.set()
        loop.wake_driver()
    threading.Timer(0.05, loop.post, (from_the_loop,)).start()
    t0 = time.monotonic()
    loop.drive(flag.is_set)
    assert time.monotonic() - t0 < 0.4        # woken, not the select's 0.5 s timeout
    loop.release()
    assert not loop.holds_interrupts()
    assert loop.claim()
    loop.release()
    loop.release()                            # a second release changes nothing
    assert loop.claim()
    loop.release()


def test_stop_ends_a_drive_and_a_claim_after_stop_fails():
    lp = EventLoop("test-loop")
    lp.start()
    _settled(lp)
    assert lp.claim()
    threading.Timer(0.05, lp.stop).start()
    t0 = time.monotonic()
    lp.drive(lambda: False)
    lp.release()
    assert time.monotonic() - t0 < 5
    assert not lp.claim()
