"""The driver's scheduler thread: one loop for DAG events and task-process sockets.

Task results arrive on sockets, the DAG scheduler reacts, and the next tasks go out, all on
this one thread with no hand-offs between threads (each hand-off costs a wake-up and a
GIL transfer, which is most of the cost of a tiny task). Other threads post callables into
it, or take its place while it idles: to submit a job (run_here) and to handle the results
they wait for (claim, drive, release).

It lives in the bottom layer because both sides use it: the scheduler runs on it, and the
executor's task-process pool registers its sockets with it (in local mode the same loop).
"""
from __future__ import annotations

import collections
import functools
import logging
import selectors
import socket
import threading
from typing import Any, Callable

log = logging.getLogger(__name__)


def poke(sock: socket.socket) -> None:
    """A byte that makes the select watching the other end return (one is enough: a full
    buffer or a closed socket means it will return anyway, or never needs to)."""
    try:
        sock.send(b"\0")
    except (BlockingIOError, OSError):
        pass


def swallow(sock: socket.socket) -> None:
    """Read what wake-up bytes are there (one read: leftovers only make the next select
    return)."""
    try:
        sock.recv(4096)
    except (BlockingIOError, OSError):
        pass


class EventLoop:
    def __init__(self, name: str) -> None:
        self.name = name
        # the loop thread waits on `_sel`: its wake-up socket and `_socks`, the selector of
        # every registered socket, nested (an epoll is itself pollable) so that a caller
        # waiting for its own job (`drive`) takes them over with no wake-up of this thread
        self._sel = selectors.DefaultSelector()
        self._socks = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._driver_wake_r, self._driver_wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w, self._driver_wake_r, self._driver_wake_w):
            s.setblocking(False)
        self._sel.register(self._wake_r, selectors.EVENT_READ, None)
        self._sel.register(self._socks, selectors.EVENT_READ, self._socks)
        self._socks.register(self._driver_wake_r, selectors.EVENT_READ,
                             functools.partial(swallow, self._driver_wake_r))
        self._driver: int | None = None     # the thread in `drive`, if any
        # threads taking the turn without blocking, until they have given it back: a
        # Ctrl-C raised between a successful acquire and its try would keep the turn for
        # good (every later handler, and job, waits for it)
        self._taking: set[int] = set()
        self._queue: collections.deque = collections.deque()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopping = False
        self._turn = threading.Lock()       # held by whichever thread runs handlers now
        self._owner: int | None = None
        # told of a posted handler's exception after it is logged (DriverRuntime's net)
        self.on_error: Callable[[Callable[..., Any], Exception], None] | None = None

    def start(self) -> None:
        self._thread.start()

    def in_loop(self) -> bool:
        """Whether the calling thread is the one running handlers right now."""
        return threading.get_ident() == self._owner

    def run_here(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn, and what it posts, on the calling thread while the loop thread waits in
        select with nothing queued; otherwise post it. A job's submission then costs no
        wake-up of the loop thread and no hand-off of the GIL to it (about 50 us of a
        0.6 ms warm job on this host). Handlers still never run two at a time: whoever runs
        them holds the turn, and the loop thread takes it before handling what select
        returned."""
        me = threading.get_ident()
        self._taking.add(me)
        try:
            if self._queue or not self._turn.acquire(blocking=False):
                self.post(fn, *args)
                return
            try:
                if self._queue or self._stopping:
                    self.post(fn, *args)
                    return
                self._owner = me
                self._queue.append((fn, args))
                self._drain()
            finally:
                self._owner = None
                self._turn.release()
        finally:
            self._taking.discard(me)

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        self._queue.append((fn, args))
        if not self.in_loop():
            self._wake()

    def post_after_turn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn after what the loop has to do in this turn (here: what is posted so far,
        which _drain runs first)."""
        self.post(fn, *args)

    def _wake(self) -> None:
        poke(self._wake_w)

    def register(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        self._socks.register(sock, selectors.EVENT_READ, callback)

    def unregister(self, sock: socket.socket) -> None:
        try:
            self._socks.unregister(sock)
        except (KeyError, ValueError):
            pass

    def claim(self) -> bool:
        """Take the sockets' work over for drive(): False if another thread has it, the
        loop thread is busy or stopping. Taken before the job's tasks go out, so that
        their results find no select of the loop thread to wake."""
        me = threading.get_ident()
        self._taking.add(me)
        try:
            if not self._turn.acquire(blocking=False):
                return False
            try:
                if self._driver is not None or self._stopping:
                    return False
                self._driver = me
                self._sel.unregister(self._socks)
                return True
            finally:
                self._turn.release()
        finally:
            self._taking.discard(me)

    def drive(self, done: Callable[[], bool]) -> None:
        """After claim(), until release(): wait until done() by doing the loop's socket
        work on the calling thread. A caller waiting for its job handles the results
        itself, where the loop thread would handle them and then wake it (a futex wake-up
        and a hand-off of the GIL: a warm local job 0.454 -> 0.432 ms, its driver CPU 366
        -> 334 us); the loop thread is not woken either, the sockets' selector having left
        its select. Posts from other threads (timers among them) still wake the loop
        thread, handlers never run two at a time (the turn), and whatever makes done()
        true from another thread calls wake_driver()."""
        me = threading.get_ident()
        while not done():
            try:
                events = self._socks.select(timeout=0.5)
            except (OSError, ValueError):       # closed by stop()
                return
            with self._turn:
                if self._stopping:
                    return
                self._owner = me
                try:
                    self._handle(events)
                    self._drain()
                finally:
                    self._owner = None

    def release(self) -> None:
        """Give the sockets' work back to the loop thread, if this thread claimed it.
        Until the last line a Ctrl-C here is held (holds_interrupts)."""
        with self._turn:
            if self._driver == threading.get_ident():
                if not self._stopping:
                    self._sel.register(self._socks, selectors.EVENT_READ, self._socks)
                self._driver = None

    def holds_interrupts(self) -> bool:
        """Whether a Ctrl-C in the calling thread must wait (DriverRuntime.interrupt): it
        runs handlers now or takes the turn (run_here, claim), or it drives (claim to
        release), which is then made to look at its done() again at once."""
        me = threading.get_ident()
        if me == self._owner or me in self._taking:
            return True
        if me == self._driver:
            poke(self._driver_wake_w)
            return True
        return False

    def wake_driver(self) -> None:
        """Make a thread waiting in drive() check done() again."""
        if self._driver is not None and self._driver != threading.get_ident():
            poke(self._driver_wake_w)

    def _handle(self, events: list) -> None:
        for key, _ in events:
            try:
                key.data()
            except Exception:
                log.exception("%s: socket handler failed", self.name)

    def _drain(self) -> None:
        q = self._queue
        while q:
            fn, args = q.popleft()
            try:
                fn(*args)
            except Exception as e:
                log.exception("%s: event handler %s failed", self.name,
                              getattr(fn, "__qualname__", fn))
                if self.on_error is not None:
                    self.on_error(fn, e)

    def _run(self) -> None:
        me = threading.get_ident()
        turn = self._turn
        events: list = []
        while True:
            with turn:
                self._owner = me
                for key, _ in events:
                    if key.data is None:
                        swallow(self._wake_r)
                    elif self._driver is None:      # else the driver has them now
                        self._handle(self._socks.select(0))
                self._drain()
                self._owner = None
                if self._stopping:
                    break
                timeout = None if not self._queue else 0
            events = self._sel.select(timeout=timeout)
        with turn:
            self._owner = me
            self._drain()
            self._owner = None

    def stop(self, timeout: float = 10.0) -> None:
        """Run what is queued, then stop the thread."""
        def _stop() -> None:
            self._stopping = True
        self.post(_stop)
        if self._thread.is_alive() and not self.in_loop():
            self._thread.join(timeout)
        self._stopping = True           # also if the thread never ran
        self.wake_driver()
        self._sel.close()
        self._socks.close()
        for s in (self._wake_r, self._wake_w, self._driver_wake_r, self._driver_wake_w):
            s.close()


class RpcLoop:
    """The EventLoop interface on top of an RpcEnv's asyncio loop.

    On a cluster the driver's scheduler (and an executor's task pool) run on the RPC loop
    itself, so a task result arriving from the network is handled, and the next task sent,
    without any hand-off between threads — the same one-thread design as local mode.
    """

    # posts one drain runs before it leaves the rest to the loop's other callbacks (I/O)
    DRAIN_MAX = 1024

    def __init__(self, env: Any) -> None:
        self.env = env
        self._posted: collections.deque = collections.deque()
        self._drain_scheduled = False
        self.on_error: Callable[[Callable[..., Any], Exception], None] | None = None

    def start(self) -> None:
        pass

    def in_loop(self) -> bool:
        return self.env.in_loop()

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """From the loop thread, posts gather in a deque that one loop callback drains, as
        EventLoop's do: each task's end posts its completion to the DAG scheduler, and an
        asyncio callback apiece (a handle made, scheduled, run, guarded) cost the driver
        ~4 us of its ~38 per tiny task. Posts keep their order, and each runs no later than
        it would have as its own callback (short of a flood past DRAIN_MAX, whose rest
        waits its turn behind the loop's I/O)."""
        if not self.env.in_loop():
            self.env.call_soon(fn, *args)
            return
        self._posted.append((fn, args))
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.env.call_soon(self._drain)

    def post_after_turn(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run fn after what the loop has to do in this turn: after the posts and the
        callbacks scheduled so far (the offer round among them), not inside the drain."""
        self.env.call_soon(fn, *args)

    def _drain(self) -> None:
        posted = self._posted
        for _ in range(self.DRAIN_MAX):
            if not posted:
                break
            fn, args = posted.popleft()
            try:
                fn(*args)
            except Exception as e:
                log.exception("%s: event handler %s failed", self.env.name,
                              getattr(fn, "__qualname__", fn))
                if self.on_error is not None:
                    self.on_error(fn, e)
        if posted:
            self.env.call_soon(self._drain)
        else:
            self._drain_scheduled = False

    def run_here(self, fn: Callable[..., Any], *args: Any) -> None:
        self.env.run_here(fn, *args)

    def claim(self) -> bool:
        return self.env.claim()

    def drive(self, done: Callable[[], bool]) -> None:
        self.env.drive(done)

    def release(self) -> None:
        self.env.release()

    def holds_interrupts(self) -> bool:
        return self.env.holds_interrupts()

    def wake_driver(self) -> None:
        self.env.wake_driver()

    def register(self, sock: socket.socket, callback: Callable[[], None]) -> None:
        self.env.add_reader(sock, callback)

    def unregister(self, sock: socket.socket) -> None:
        self.env.remove_reader(sock)

    def stop(self, timeout: float = 10.0) -> None:
        pass
