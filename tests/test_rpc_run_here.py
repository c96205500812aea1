"""RpcEnv.run_here: a thread borrows the idle asyncio loop's turn (a driver's job
submission on a cluster), and everything that runs on the loop still runs one at a time."""
from __future__ import annotations

import asyncio
import socket
import threading
import time

import pytest

from ember.rpc import RpcEndpoint, RpcEnv
from ember.rpc.endpoint import loop_thread_state
from tests.helpers.one_at_a_time import OneAtATime
from tests.helpers.rpc_idle import idle, settled

pytestmark = pytest.mark.timeout(60)

CONF = {"spark.rpc.connect.timeout": "3s"}


@pytest.fixture
def env():
    e = RpcEnv.create("borrowed", "127.0.0.1", 0, CONF)
    yield e
    e.shutdown()
    e.await_termination(5)


def _loop_thread(env: RpcEnv) -> int:
    got = []
    env.call_soon(lambda: got.append(threading.get_ident()))
    settled(env)
    return got[0]


def test_run_here_runs_on_the_calling_thread_as_the_loop(env):
    loop_tid = _loop_thread(env)
    seen = []

    def fn() -> None:
        seen.append((threading.get_ident(), env.in_loop(),
                     getattr(loop_thread_state, "env", None) is env))
        with pytest.raises(RuntimeError, match="event-loop thread"):
            env.setup_endpoint("x", RpcEndpoint()).ask_sync("anything", 1)
    idle(env)
    env.run_here(fn)
    assert seen == [(threading.get_ident(), True, True)]
    assert not env.in_loop() and getattr(loop_thread_state, "env", None) is None
    assert _loop_thread(env) == loop_tid         # the loop thread is itself again


def test_what_it_queues_runs_before_it_returns_and_timers_wake_the_loop(env):
    loop_tid = _loop_thread(env)
    me = threading.get_ident()
    order: list = []
    fired = threading.Event()
    resumed = threading.Event()

    async def step() -> None:
        order.append(("task", threading.get_ident(), asyncio.get_running_loop() is env.loop))
        await asyncio.sleep(0.02)
        order.append(("resumed", threading.get_ident()))
        resumed.set()

    def fn() -> None:
        order.append("first")
        env.call_soon(order.append, "queued")
        env.schedule(0.02, lambda: (order.append(("timer", threading.get_ident())),
                                    fired.set()))
        env.loop.create_task(step())
    idle(env)
    env.run_here(fn)
    # the task's first step was queued by fn: it ran in the borrowed turn, as on the loop
    assert order == ["first", "queued", ("task", me, True)]
    # the loop was waiting in select with no timeout: it must have been woken for the rest
    assert fired.wait(5) and resumed.wait(5)
    assert ("timer", loop_tid) in order and ("resumed", loop_tid) in order


def test_a_caller_inside_its_own_asyncio_loop_keeps_it(env):
    seen = []

    async def main() -> None:
        mine = asyncio.get_running_loop()
        idle(env)
        env.run_here(lambda: seen.append(asyncio.get_running_loop() is env.loop))
        seen.append(asyncio.get_running_loop() is mine)
    asyncio.run(main())
    assert seen == [True, True]


def test_run_here_is_posted_while_the_loop_runs_a_callback(env):
    loop_tid = _loop_thread(env)
    inside, release = threading.Event(), threading.Event()
    env.call_soon(lambda: (inside.set(), release.wait(5)))
    assert inside.wait(5)
    ran: list = []
    env.run_here(lambda: ran.append(threading.get_ident()))
    assert ran == []
    release.set()
    settled(env)
    assert ran == [loop_tid]


def test_run_here_keeps_the_order_of_what_was_posted_before(env):
    gate = threading.Event()
    env.call_soon(gate.wait, 5)
    order: list = []
    env.call_soon(order.append, 1)
    env.run_here(order.append, 2)
    gate.set()
    settled(env)
    assert order == [1, 2]
    for i in range(200):                 # nothing overtakes a call posted just before it
        env.call_soon(order.append, ("posted", i))
        env.run_here(order.append, ("here", i))
    settled(env)
    assert order[2:] == [x for i in range(200) for x in (("posted", i), ("here", i))]


class _Collector(RpcEndpoint):
    def __init__(self) -> None:
        self.got: list = []

    def receive(self, msg, sender) -> None:
        self.got.append(msg)


def test_sends_from_a_borrowed_turn_reach_the_peer_in_order():
    a = RpcEnv.create("a", "127.0.0.1", 0, CONF)
    b = RpcEnv.create("b", "127.0.0.1", 0, CONF)
    try:
        collector = _Collector()
        b.setup_endpoint("collect", collector)
        ref = a.endpoint_ref(b.address, "collect")
        for i in range(50):
            a.run_here(lambda i=i: (ref.send(f"direct-{i}"),
                                    a.call_soon(ref.send, f"queued-{i}")))
        deadline = time.monotonic() + 10
        while len(collector.got) < 100 and time.monotonic() < deadline:
            time.sleep(0.01)
        got = collector.got
        assert sorted(got) == sorted(f"{kind}-{i}" for i in range(50) for kind in ("direct", "queued"))
        for kind in ("direct", "queued"):        # each kind in the order it was issued
            assert [m for m in got if m.startswith(kind)] == [f"{kind}-{i}" for i in range(50)]
        assert all(got.index(f"direct-{i}") < got.index(f"queued-{i}") for i in range(50))
    finally:
        a.shutdown()
        b.shutdown()
        a.await_termination(5)
        b.await_termination(5)


def test_callbacks_never_overlap_between_borrowers_sockets_and_the_loop(env):
    """Socket callbacks on the loop thread, posts from one thread and run_here from two
    others, then the two borrowers against socket traffic alone (the loop mostly idle, so
    they do borrow), bounded in count: no two callbacks are ever inside at once, and every
    one ran."""
    handler = OneAtATime()
    borrowed = [0]

    r, w = socket.socketpair()
    r.setblocking(False)
    reads = [0]

    def on_readable() -> None:
        try:
            r.recv(4096)
        except BlockingIOError:
            return
        reads[0] += 1
        handler()
    env.add_reader(r, on_readable)
    n = 300

    def poster() -> None:
        for _ in range(n):
            env.call_soon(handler)
            w.send(b"x")

    def writer() -> None:
        for i in range(n):
            w.send(b"x")
            if i % 10 == 0:
                time.sleep(0.001)

    def caller() -> None:
        me = threading.get_ident()

        def mine() -> None:
            if threading.get_ident() == me:
                borrowed[0] += 1
            handler()
        for i in range(n):
            if i % 10 == 0:              # back-to-back calls can post behind each other's
                idle(env)                # posts for ever: let the loop go idle now and then
            env.run_here(mine)
    for feeder in (poster, writer):
        threads = [threading.Thread(target=feeder), threading.Thread(target=caller),
                   threading.Thread(target=caller)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    settled(env)
    env.remove_reader(r)
    settled(env)
    r.close()
    w.close()
    assert handler.overlaps == []
    assert handler.count == 5 * n + reads[0]
    assert borrowed[0] > 0               # the borrowing path was exercised


def test_after_shutdown_run_here_runs_nothing():
    e = RpcEnv.create("gone", "127.0.0.1", 0, CONF)
    e.shutdown()
    e.await_termination(5)
    ran: list = []
    e.run_here(ran.append, 1)
    assert ran == []


def test_the_loop_still_stops_and_closes_its_selector():
    e = RpcEnv.create("closing", "127.0.0.1", 0, CONF)
    e.run_here(lambda: None)
    e.shutdown()
    e.await_termination(5)
    assert e.loop.is_closed()


def test_rpc_loop_posts_from_the_loop_thread_run_in_order_in_one_callback(env, caplog):
    """RpcLoop.post on the loop thread: FIFO, what a post posts runs in the same drain, a
    failing handler is logged and the rest still run, and the loop's other callbacks go on;
    posts from another thread still arrive."""
    from ember.util.event_loop import RpcLoop
    loop = RpcLoop(env)
    ran: list = []
    handles_before = []

    def boom() -> None:
        raise ValueError("handler failed")

    def first() -> None:
        ran.append(("first", env.in_loop()))
        loop.post(ran.append, "posted by first")

    def on_loop() -> None:
        handles_before.append(len(env.loop._ready))
        loop.post(first)
        env.call_soon(ran.append, "a callback scheduled between posts")
        loop.post(boom)
        loop.post(ran.append, "after the failure")
        handles_before.append(len(env.loop._ready))

    env.call_soon(on_loop)
    settled(env)
    settled(env)
    assert ran == [("first", True), "after the failure", "posted by first",
                   "a callback scheduled between posts"]
    assert handles_before[1] - handles_before[0] == 2, "one drain for three posts"
    assert "handler failed" in caplog.text
    done = threading.Event()
    loop.post(done.set)             # from this thread: through the env, as before
    assert done.wait(5)
