"""RpcEnv: named endpoints, send/ask, connections, on an asyncio loop thread per env.

This is Spark's NettyRpcEnv reduced to what the standalone cluster needs. An RpcEnv owns one
thread running an asyncio event loop; every endpoint callback, timer and reply callback runs
on that thread, one at a time, so endpoint state needs no locks (Spark's
ThreadSafeRpcEndpoint). Endpoints are plain objects with plain (non-async) methods: they
must not block - blocking work goes to ``run_in_executor`` and comes back with ``call_soon``.
While the loop waits in select, another thread may take its turn and act as that thread
(``run_here``: a driver's job submission), or take its sockets and handle them itself while
it waits for its job (``claim``, ``drive``, ``release``); callbacks still run one at a time.

The pieces, one module each: the endpoint API (`ember.rpc.endpoint`), delivery to
endpoints (`ember.rpc.dispatcher`), outbound connections and asks in flight
(`ember.rpc.outbox`), timers (`ember.rpc.timers`), and the transports behind the
`TransportHandler` seam (`ember.rpc.transport`; TCP with its wire protocol in
`ember.rpc.tcp`, in-process in `ember.rpc.inprocess`). This module is the env that ties
them: it implements `TransportHandler`.

Addressing: an env listens on ``spark://host:port``; an endpoint is ``spark://Name@host:port``.
A client-mode env (``client_mode=True``) does not listen; its address is ``(host, 0)``.
Peers identify it by the remote address of its connection (as Spark does), and messages to
its endpoints travel back through that connection.

Authorization by channel: an endpoint reads who sent the message it handles from
``rpc_env.current_sender()`` (one-way) or ``context.sender`` (ask): the connection's id,
peer address and scope. ``RpcEndpoint.app_messages`` lists what an endpoint takes from a
connection that authenticated as an application; anything else is refused before delivery.

Connections: one outbound connection per remote address, shared by every ref to it, opened
lazily by the first send/ask and re-opened by the next send after it fails. Messages queued
while connecting are written in order once it is up. Replies to an ask travel back on the
connection the request came in on. Messages from one sender to one endpoint keep their
order. ``on_connected``/``on_disconnected`` are posted to every endpoint when the first
connection with a remote env opens / the last one closes (in either direction).

The in-process transport (``spark.ember.rpc.inprocess=true`` or ``create_inprocess_env``)
replaces TCP with an in-memory router between envs of one process; the messages are still
encoded and decoded, so the codec is exercised by fast tests too.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import itertools
import logging
import math
import selectors
import socket
import threading
import time
import uuid
from collections import deque
from dataclasses import replace
from typing import Any, Callable, Mapping

from ember.rpc import framing
from ember.rpc.address import RpcAddress
from ember.rpc.config import RpcConf
from ember.rpc.dispatcher import (ASK, CONNECTED, DISCONNECTED, NETWORK_ERROR, RECEIVE,
                                  SLOW_CALLBACK_SECONDS, Dispatcher, Inbox,
                                  app_refusal, not_found)
from ember.rpc.endpoint import (ENDPOINT_VERIFIER, CheckExistence, EndpointVerifier, PeerInfo,
                                RpcCallContext, RpcEndpoint, RpcEndpointRef, as_seconds,
                                describe, loop_thread_state, timeout_message)
from ember.rpc.errors import (RpcConnectionError, RpcEndpointNotFoundError, RpcEnvStoppedError,
                              RpcError, RpcMessageTooLargeError, RpcRemoteError, RpcTimeoutError)
from ember.rpc.messages import MessageDecodeError, _decode_with, _make_hook
from ember.rpc.messages import encode
from ember.rpc.outbox import Outbox, PendingAsk
from ember.rpc.timers import Cancellable, LoopTimers
from ember.rpc.transport import Channel, Transport
from ember.util.event_loop import poke, swallow

log = logging.getLogger("ember.rpc")

__all__ = ["RpcEnv", "create_inprocess_env"]

_MAX_GONE_CLIENTS = 10_000


def _set_exc(fut: concurrent.futures.Future, exc: BaseException) -> None:
    try:
        fut.set_exception(exc)
    except concurrent.futures.InvalidStateError:
        pass


def _as_remote_error(e: Any) -> RpcRemoteError:
    if isinstance(e, RpcRemoteError):
        return e
    if isinstance(e, BaseException):
        return RpcRemoteError(type(e).__name__, str(e))
    return RpcRemoteError("Exception", str(e))


def _too_large(size: int, limit: int) -> str:
    return (f"the encoded message is {size} bytes, larger than spark.rpc.message.maxSize "
            f"({limit} bytes); send large data as blocks or increase spark.rpc.message.maxSize")


def _as_address(address: RpcAddress | str | tuple) -> RpcAddress:
    if isinstance(address, RpcAddress):
        return address
    if isinstance(address, str):
        return RpcAddress.from_spark_url(address)
    if isinstance(address, tuple) and len(address) == 2:
        return RpcAddress(str(address[0]), int(address[1]))
    raise TypeError(f"Expected an RpcAddress or 'spark://host:port', got {address!r}")


# callbacks a borrowed turn runs after its function before leaving the rest to the loop
BORROWED_READY_MAX = 64


def _fd(fileobj: Any) -> int:
    return fileobj if isinstance(fileobj, int) else fileobj.fileno()


class _TurnSelector(selectors.DefaultSelector):  # type: ignore[misc,valid-type]
    """The loop's selector: the loop thread gives up the turn while it waits in select.

    Once `nest()`ed (a driver's env, at its first claim), sockets are registered in a
    selector of their own (`sockets`) nested in this one (an epoll is itself pollable), so
    that a caller waiting for its job can take them out of the loop thread's select and
    handle them itself (`RpcEnv.drive`) without waking that thread. The loop's self-pipe
    stays here (`keep_here`): other threads' calls still wake the loop thread. Other envs
    (executors, daemons) never nest and pay nothing for it."""

    def __init__(self, turn: threading.Lock) -> None:
        super().__init__()
        self._turn = turn
        self.sockets = selectors.DefaultSelector()
        self._here: set[int] = set()
        self.nested = False
        self.lent = False
        self.turns = 0          # turns of the loop so far (a borrowed turn counts as one)

    def keep_here(self, fd: int) -> None:
        self._here.add(fd)

    def nest(self) -> None:
        """Move every socket into `sockets` (under the turn)."""
        for key in list(self.get_map().values()):
            if key.fd not in self._here:
                super().unregister(key.fd)
                self.sockets.register(key.fd, key.events, key.data)
        super().register(self.sockets, selectors.EVENT_READ)
        self.nested = True

    def lend(self) -> None:
        """Stop watching the sockets (a driver watches them now)."""
        super().unregister(self.sockets)
        self.lent = True

    def take_back(self) -> None:
        super().register(self.sockets, selectors.EVENT_READ)
        self.lent = False

    def _owner(self, fileobj: Any) -> Any:
        """The selector that watches fileobj: this one, or the nested one."""
        if not self.nested or _fd(fileobj) in self._here:
            return super()
        return self.sockets

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._owner(fileobj).register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._owner(fileobj).unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._owner(fileobj).modify(fileobj, events, data)

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._owner(fileobj).get_key(fileobj)

    def select(self, timeout: float | None = None) -> list:
        self._turn.release()
        try:
            events = super().select(timeout)
        finally:
            self._turn.acquire()
            self.turns += 1
        if self.nested:
            for i, (key, _) in enumerate(events):
                if key.fileobj is self.sockets:     # what is ready in there now (if not lent)
                    del events[i]
                    if not self.lent:
                        events.extend(self.sockets.select(0))
                    break
        return events

    def close(self) -> None:
        super().close()
        self.sockets.close()


class RpcEnv:
    """One per process (or per role): the loop thread, its endpoints and connections.

    It is the `TransportHandler` of its transport: `name`, `address`, `client_mode`,
    `client_id`, `rpc_conf`, `loop`, `stopping`, `run_on_loop`, `admits_scope`,
    `derived_key` and the channel/frame callbacks below are what a transport uses."""

    def __init__(self, name: str, host: str, port: int, conf: Mapping[str, Any] | None,
                 client_mode: bool) -> None:
        self.name = name
        self.conf: dict[str, Any] = dict(conf or {})
        self.rpc_conf = RpcConf.from_conf(self.conf)
        self.client_mode = client_mode
        self.address = RpcAddress(host, 0)
        self.client_id = uuid.uuid4().hex
        # held by the loop thread except while it waits in select (and by nobody else until
        # the loop runs): whoever holds it may act as the loop thread (`run_here`)
        self._turn = threading.Lock()
        self._turn.acquire()
        self._selector = _TurnSelector(self._turn)
        self.loop = asyncio.SelectorEventLoop(self._selector)
        self._selector.keep_here(self.loop._ssock.fileno())     # type: ignore[attr-defined]
        self._loop_tid: int | None = None
        self._driver: int | None = None         # the thread in `drive`, if any
        # threads taking the turn without blocking, until they have given it back (see
        # EventLoop._taking)
        self._taking: set[int] = set()
        self._driver_wake: tuple[socket.socket, socket.socket] | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._dispatcher = Dispatcher(name, self.loop, self._schedule_effect)
        # sends/asks issued on the loop thread that wait in the loop's ready queue: while
        # there are none, a remote send outside an endpoint callback goes out at once
        self._effects_queued = 0
        self._inboxes = self._dispatcher.inboxes     # endpoint name -> Inbox
        self._pending: dict[int, PendingAsk] = {}
        self._ids = itertools.count(1)
        self._outboxes: dict[RpcAddress, Outbox] = {}
        self._client_channels: dict[RpcAddress, Channel] = {}
        self._gone_clients: dict[RpcAddress, None] = {}   # ordered set, bounded
        self._channels: set[Channel] = set()
        self._peer_counts: dict[RpcAddress, int] = {}
        self._inbox: deque = deque()
        self._wake_pending = False
        self._stopping = False
        # set on the loop when shutdown begins there: sends accepted before `shutdown` was
        # called (queued in `_inbox` ahead of it) still go out, flushed as connections close
        self._shut_down_on_loop = False
        self._terminated = threading.Event()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._max_size = self.rpc_conf.max_message_size
        self._admit_any_scope = False
        self._admitted_scopes: set[str] = set()
        self._derived: dict[str, bytes] = {}
        self._timers = LoopTimers(self.loop, self.run_on_loop, self._safe_call)
        self._transport: Transport
        if self.rpc_conf.inprocess:
            from ember.rpc.inprocess import InProcessTransport
            self._transport = InProcessTransport(self)
        else:
            from ember.rpc.tcp import TcpTransport
            self._transport = TcpTransport(self)

    # -- creation and the loop thread -------------------------------------------------------

    @staticmethod
    def create(name: str, host: str, port: int, conf: Mapping[str, Any] | None = None,
               client_mode: bool = False, advertise: str | None = None) -> "RpcEnv":
        """Start an env: a loop thread, listening on host:port unless client_mode.
        `advertise`: the host peers are told (Spark's spark.driver.host when it differs
        from spark.driver.bindAddress, e.g. behind NAT or bound to 0.0.0.0).

        port 0 picks a free port; a busy non-zero port is retried on the following ports
        up to spark.port.maxRetries (Spark's startServiceOnPort). Raises ValueError for a
        bad configuration (e.g. spark.authenticate=true without a secret) and RpcBindError
        if no port could be bound.
        """
        env = RpcEnv(name, host, port, conf, client_mode)
        env._check_start_rules(host)
        env._start(host, port)
        if advertise and not client_mode:
            env.address = RpcAddress(advertise, env.address.port)
        return env

    def _check_start_rules(self, host: str) -> None:
        """Secure by default: no listener on a network address without a secret (unless
        the operator opted out by name); a secret on the command line draws a warning."""
        from ember.rpc import security
        security.warn_secret_on_command_line()
        security.install_pickle_audit()
        if self.client_mode or self.rpc_conf.inprocess:
            return
        security.raise_open_files_limit()
        mode = self.rpc_conf.mode
        if mode == security.MODE_SECRET or security.is_loopback_host(host):
            return
        if mode == security.MODE_LOCAL_USER:
            raise ValueError(security.refuse_unauthenticated_listener(host))
        log.warning("RpcEnv %s listens on %s WITHOUT authentication (%s=true): anyone who "
                    "reaches it can run code as this user", self.name, host or "*",
                    security.INSECURE_OPT_OUT)

    def _start(self, host: str, port: int) -> None:
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run_loop, args=(ready,),
                                        name=f"rpc-env-{self.name}", daemon=True)
        self._thread.start()
        ready.wait()
        fut = asyncio.run_coroutine_threadsafe(
            self._transport.start(host, port, self.client_mode), self.loop)
        try:
            self.address = fut.result()
        except BaseException:
            self._stopping = True
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(10)
            raise
        self.setup_endpoint(ENDPOINT_VERIFIER, EndpointVerifier())

    def _run_loop(self, ready: threading.Event) -> None:
        loop = self.loop
        asyncio.set_event_loop(loop)
        self._loop_tid = threading.get_ident()
        loop_thread_state.env = self
        loop.set_exception_handler(self._loop_exception)
        ready.set()
        try:
            loop.run_forever()
        finally:
            try:
                # let transports closed during shutdown run their close callbacks
                loop.run_until_complete(asyncio.sleep(0.01))
                tasks = asyncio.all_tasks(loop)
                for t in tasks:
                    t.cancel()
                if tasks:
                    loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
                loop.run_until_complete(loop.shutdown_asyncgens())
            except Exception:
                log.debug("Error while closing the loop of RpcEnv %s", self.name, exc_info=True)
            finally:
                loop.close()
                for sock in self._driver_wake or ():
                    sock.close()
                self._drain_after_close()
                self._terminated.set()

    def _drain_after_close(self) -> None:
        """Fail or drop what other threads queued while the loop was stopping.

        With the flag cleared, a later ``run_on_loop`` reaches the closed loop and raises
        (its caller then fails the ask itself), so no ask can be left waiting forever."""
        self._wake_pending = False
        inbox = self._inbox
        while inbox:
            fn, args = inbox.popleft()
            if fn == self._safe_call:
                continue        # user functions do not run after shutdown
            try:
                fn(*args)
            except Exception:
                log.debug("RpcEnv %s: %r after shutdown", self.name, fn, exc_info=True)

    def _loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict) -> None:
        exc = context.get("exception")
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)):
            log.debug("RpcEnv %s: %s", self.name, context.get("message"))
            return
        log.error("RpcEnv %s: unhandled error on the event loop: %s", self.name,
                  context.get("message"), exc_info=exc)

    def in_loop(self) -> bool:
        """True on this env's loop thread (where endpoint callbacks run)."""
        return threading.get_ident() == self._loop_tid

    def run_here(self, fn: Callable, *args: Any) -> None:
        """``call_soon``, but run on the calling thread at once while the loop is idle
        (waiting in select, nothing queued): the caller takes the loop's turn and acts as
        its thread, so a driver's job submission costs no wake-up of the loop thread and no
        hand-over of the GIL. What fn queued for the end of the turn (an offer round, the
        batched writes of a connection) runs here too, as the loop would run it next;
        anything still queued, or a timer due earlier than the loop's wait, wakes the loop."""
        loop = self.loop
        me = threading.get_ident()
        self._taking.add(me)
        try:
            if not self._turn.acquire(blocking=False):
                self.call_soon(fn, *args)
                return
            try:
                if self._stopping or self._inbox or loop._ready or loop.get_debug():
                    self.call_soon(fn, *args)
                    return
                saved = self._borrow()
                try:
                    self._safe_call(fn, args)
                    self._run_ready()
                finally:
                    self._give_back(saved)
            finally:
                self._turn.release()
        finally:
            self._taking.discard(me)

    def _borrow(self) -> tuple:
        """Make the calling thread (which holds the turn) act as the loop thread."""
        loop = self.loop
        saved = (self._loop_tid, getattr(loop_thread_state, "env", None),
                 asyncio.events._get_running_loop(), self._next_timer())
        self._loop_tid = threading.get_ident()
        loop_thread_state.env = self
        asyncio.events._set_running_loop(loop)
        self._selector.turns += 1
        return saved

    def _give_back(self, saved: tuple) -> None:
        """Undo _borrow; wake the loop thread if it has callbacks to run, is to stop, or
        has a timer due before the earliest one when this turn began (which its select
        waits for at the latest)."""
        self._loop_tid, loop_thread_state.env, running, next_timer = saved
        asyncio.events._set_running_loop(running)
        loop = self.loop
        if loop._ready or loop._stopping or self._next_timer() < next_timer:
            loop._write_to_self()

    def _next_timer(self) -> float:
        scheduled = self.loop._scheduled
        return scheduled[0].when() if scheduled else math.inf

    def _run_ready(self) -> None:
        ready = self.loop._ready
        for _ in range(BORROWED_READY_MAX):
            if not ready:
                break
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()

    # -- a caller that waits for its job handles the loop's sockets itself ------------------

    def claim(self) -> bool:
        """Take the sockets' work over for drive(): False if another thread has it, the loop
        is busy, shutting down, in debug mode or has no sockets (in-process transport).
        Taken before the job's tasks go out, so that their results find no select of the
        loop thread to wake."""
        if self.rpc_conf.inprocess:
            return False
        me = threading.get_ident()
        self._taking.add(me)
        try:
            if not self._turn.acquire(blocking=False):
                return False
            try:
                if self._driver is not None or self._stopping or self.loop.get_debug():
                    return False
                if self._driver_wake is None:
                    r, w = socket.socketpair()
                    r.setblocking(False)
                    w.setblocking(False)
                    self.loop.add_reader(r.fileno(), swallow, r)
                    self._driver_wake = (r, w)
                if not self._selector.nested:
                    self._selector.nest()
                self._driver = me
                self._selector.lend()
                return True
            finally:
                self._turn.release()
        finally:
            self._taking.discard(me)

    def drive(self, done: Callable[[], bool]) -> None:
        """After claim(), until release(): wait until done() by doing the loop's socket
        work on the calling thread, as EventLoop.drive does in local mode. A caller waiting
        for its job handles the StatusUpdates itself, where the loop thread would read them
        and then wake it (a futex wake-up and a hand-over of the GIL); the loop thread is
        not woken either, the sockets having left its select. Other threads' calls and
        timers still wake the loop thread, callbacks never run two at a time (the turn),
        and whatever makes done() true from another thread calls wake_driver()."""
        me = threading.get_ident()
        sockets = self._selector.sockets
        keys = sockets.get_map()
        loop = self.loop
        while not done():
            try:
                events = sockets.select(0.5)
            except (OSError, ValueError):       # closed: the env has stopped
                return
            with self._turn:
                if self._stopping or self._driver != me:
                    return
                saved = self._borrow()
                try:
                    # a key unregistered since (its fd maybe reused) is not this event's
                    loop._process_events([e for e in events if keys.get(e[0].fd) is e[0]])
                    self._run_ready()
                finally:
                    self._give_back(saved)

    def release(self) -> None:
        """Give the sockets' work back to the loop thread, if this thread claimed it."""
        with self._turn:
            if self._driver == threading.get_ident():
                if not self._stopping:
                    self._selector.take_back()
                self._driver = None

    def holds_interrupts(self) -> bool:
        """Whether a Ctrl-C in the calling thread must wait: it runs callbacks now or takes
        the turn (run_here, claim), or it drives (claim to release), which is then made to
        look at its done() again."""
        me = threading.get_ident()
        if me == self._loop_tid or me in self._taking:
            return True
        if me == self._driver:
            self._poke_driver()
            return True
        return False

    def wake_driver(self) -> None:
        """Make a thread waiting in drive() check done() again."""
        if self._driver is not None and self._driver != threading.get_ident():
            self._poke_driver()

    def _poke_driver(self) -> None:
        if self._driver_wake is not None:
            poke(self._driver_wake[1])

    @property
    def stopping(self) -> bool:
        """True once ``shutdown`` began."""
        return self._stopping

    @property
    def loop_turn(self) -> int:
        """Which turn of the loop runs now (it changes between any two turns)."""
        return self._selector.turns

    def run_on_loop(self, fn: Callable, *args: Any) -> None:
        """Run fn(*args) on the loop soon (always deferred, FIFO per calling thread).

        From other threads, calls are batched behind a single wake-up of the loop, so a
        thread sending many messages costs one self-pipe write per batch, not per message.
        Raises RuntimeError if the loop is closed. Unlike ``call_soon`` it runs fn even
        while the env shuts down and does not catch what fn raises: it is the RPC layer's
        own hop onto the loop (transports use it), not a way to run endpoint code.
        """
        if threading.get_ident() == self._loop_tid:
            self.loop.call_soon(fn, *args)
            return
        self._inbox.append((fn, args))
        if not self._wake_pending:
            self._wake_up()

    def _wake_up(self) -> None:
        """Have the loop drain `_inbox` (one self-pipe write per batch of calls)."""
        self._wake_pending = True
        try:
            self.loop.call_soon_threadsafe(self._drain_inbox)
        except BaseException:   # a closed loop; or a Ctrl-C in the calling thread, which
            self._wake_pending = False  # left pending would keep every later call asleep
            raise

    def _drain_inbox(self) -> None:
        self._wake_pending = False
        inbox = self._inbox
        for _ in range(2048):   # bounded, so I/O is not starved by a flooding thread
            try:
                fn, args = inbox.popleft()
            except IndexError:
                return
            try:
                fn(*args)
            except Exception:
                log.exception("RpcEnv %s: error in %r", self.name, fn)
        if inbox and not self._wake_pending:
            self._wake_pending = True
            self.loop.call_soon(self._drain_inbox)

    def _emit(self, fn: Callable, args: tuple, pending: PendingAsk | None = None,
              remote: bool = False) -> None:
        """Issue a send or an ask: on the loop thread during an endpoint callback it is
        held until the callback returns (see `ember.rpc.dispatcher`); outside one, a remote
        one is written at once when nothing issued earlier still waits (so order is kept
        and a task's status costs no extra turns of the loop), else it goes out as
        ``run_on_loop`` would send it."""
        if threading.get_ident() == self._loop_tid:
            held = self._dispatcher.held
            if held is not None:
                held.append((fn, args, pending, None))
            elif remote and not self._effects_queued:
                try:
                    fn(*args)
                except Exception:
                    log.exception("RpcEnv %s: error sending %r", self.name, fn)
            else:
                self._schedule_effect(fn, args)
            return
        self._inbox.append((fn, args))
        if not self._wake_pending:
            self._wake_up()

    def _schedule_effect(self, fn: Callable, args: tuple) -> None:
        self._effects_queued += 1
        self.loop.call_soon(self._run_effect, fn, args)

    def _run_effect(self, fn: Callable, args: tuple) -> None:
        self._effects_queued -= 1
        fn(*args)

    # -- endpoints ------------------------------------------------------------------------

    def setup_endpoint(self, name: str, endpoint: RpcEndpoint) -> RpcEndpointRef:
        """Register `endpoint` under `name`; on_start runs on the loop before any message.
        A duplicate name raises ValueError."""
        if not isinstance(endpoint, RpcEndpoint):
            raise TypeError(f"setup_endpoint needs an RpcEndpoint, got {type(endpoint).__name__}")
        if not isinstance(name, str) or not name or len(name.encode()) > 0xFFFF:
            raise ValueError(f"Invalid endpoint name {name!r}")
        inboxes = self._dispatcher.inboxes
        with self._lock:
            if self._stopping:
                raise RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down")
            if name in inboxes:
                raise ValueError(f"There is already an RpcEndpoint called {name}")
            ref = RpcEndpointRef(self.address, name, self)
            endpoint.rpc_env = self
            endpoint.self_ref = ref
            inbox = Inbox(name, endpoint, ref)
            inboxes[name] = inbox
        self.run_on_loop(self._dispatcher.start, inbox)
        return ref

    def has_endpoint(self, name: str) -> bool:
        """Whether an endpoint is registered under `name` here (Spark's verifier asks it)."""
        return name in self._dispatcher.inboxes

    def stop_endpoint(self, ref: RpcEndpointRef | str) -> None:
        """Unregister an endpoint (its name is free on return) and run its on_stop on the
        loop. Messages for it from then on are answered "Could not find <name>."."""
        if isinstance(ref, RpcEndpointRef):
            if ref.address != self.address:
                raise ValueError(f"{ref} is not an endpoint of RpcEnv {self.name} "
                                 f"({self.address})")
            name = ref.name
        else:
            name = ref
        with self._lock:
            inbox = self._dispatcher.inboxes.pop(name, None)
        if inbox is None:
            return
        inbox.stopped = True
        try:
            self.run_on_loop(self._dispatcher.stop, inbox)
        except RuntimeError:
            pass

    def endpoint_ref(self, address: RpcAddress | str | tuple, name: str) -> RpcEndpointRef:
        """A ref to `name` at `address` (this env or another); no I/O until first use."""
        return RpcEndpointRef(_as_address(address), name, self)

    def setup_endpoint_ref_sync(self, address: RpcAddress | str | tuple, name: str,
                                timeout: float | None = None) -> RpcEndpointRef:
        """A ref to `name` at `address`, after checking with the remote endpoint-verifier
        that it exists. RpcEndpointNotFoundError if not; RpcConnectionError/RpcTimeoutError
        if the env cannot be reached. Not on the loop thread (it blocks)."""
        return self.setup_endpoint_ref_async(address, name, timeout).result()

    def setup_endpoint_ref_async(self, address: RpcAddress | str | tuple, name: str,
                                 timeout: float | None = None) -> concurrent.futures.Future:
        """Non-blocking ``setup_endpoint_ref_sync``: a future of the verified ref."""
        addr = _as_address(address)
        out: concurrent.futures.Future = concurrent.futures.Future()
        check = self.endpoint_ref(addr, ENDPOINT_VERIFIER).ask(CheckExistence(name), timeout)

        def done(f: concurrent.futures.Future) -> None:
            exc = f.exception()
            if exc is not None:
                out.set_exception(exc)
            elif f.result():
                out.set_result(self.endpoint_ref(addr, name))
            else:
                out.set_exception(RpcEndpointNotFoundError(
                    f"Cannot find endpoint: spark://{name}@{addr.host}:{addr.port}"))
        check.add_done_callback(done)
        return out

    # -- sending ----------------------------------------------------------------------------

    def send_to(self, ref: RpcEndpointRef, msg: Any) -> None:
        """``ref.send(msg)`` (what refs bound to this env call)."""
        if self._stopping:
            log.warning("Dropping %s to %s: RpcEnv %s has been shut down", describe(msg), ref,
                        self.name)
            return
        addr = ref.address
        try:
            if addr == self.address:
                self._emit(self._local_send, (ref.name, msg))
                return
            body = encode(msg)
            if len(body) + framing.frame_overhead(ref.name) > self._max_size:
                log.error("Dropping %s to %s: %s", describe(msg), ref,
                          _too_large(len(body), self._max_size))
                return
            self._emit(self._remote_post, (addr, framing.ONE_WAY, ref.name, body, None),
                       remote=True)
        except RuntimeError as e:
            if self._terminated.is_set() or self.loop.is_closed():
                log.warning("Dropping %s to %s: RpcEnv %s has been shut down", describe(msg),
                            ref, self.name)
                return
            raise e

    def ask_to(self, ref: RpcEndpointRef, msg: Any,
               timeout: float | None) -> concurrent.futures.Future:
        """``ref.ask(msg, timeout)`` (what refs bound to this env call)."""
        fut: concurrent.futures.Future = concurrent.futures.Future()
        t = self.rpc_conf.ask_timeout if timeout is None else as_seconds(timeout)
        if self._stopping:
            fut.set_exception(RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
            return fut
        p = PendingAsk(next(self._ids), fut, ref.address, t)
        try:
            if ref.address == self.address:
                self._emit(self._local_ask, (p, ref.name, msg), p)
                return fut
            body = encode(msg)
            if len(body) + framing.frame_overhead(ref.name) > self._max_size:
                fut.set_exception(RpcMessageTooLargeError(_too_large(len(body), self._max_size)))
                return fut
            self._emit(self._remote_ask, (p, ref.name, body), p, remote=True)
        except RuntimeError:
            if not self.loop.is_closed():
                raise
            fut.set_exception(RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
        return fut

    def _arm(self, p: PendingAsk) -> bool:
        if self._stopping:
            _set_exc(p.future, RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
            return False
        self._pending[p.req_id] = p
        p.timer = self.loop.call_later(p.timeout, self._ask_timed_out, p.req_id)
        return True

    def _local_send(self, name: str, msg: Any) -> None:
        inbox = self._inboxes.get(name)
        if inbox is None:
            log.warning("Dropping %s from %s: Could not find %s.", describe(msg), self.address,
                        name)
            return
        self._dispatcher.deliver(inbox, RECEIVE, msg, self.address, self._peer_info(None))

    def _local_ask(self, p: PendingAsk, name: str, msg: Any) -> None:
        if not self._arm(p):
            return
        ctx = RpcCallContext(self.address, self._peer_info(None), None, p.req_id, self._respond)
        inbox = self._inboxes.get(name)
        if inbox is None:
            self._send_response(ctx, False, not_found(name))
            return
        self._dispatcher.deliver(inbox, ASK, msg, ctx)

    def _remote_ask(self, p: PendingAsk, name: str, body: bytes) -> None:
        if self._arm(p):
            self._remote_post(p.address, framing.REQUEST, name, body, p)

    def _remote_post(self, addr: RpcAddress, kind: int, name: str, body: bytes,
                     pending: PendingAsk | None) -> None:
        if self._shut_down_on_loop:
            self._connect_failed(addr, [(kind, name, body, pending)],
                                 RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"),
                                 quiet=True)
            return
        ch = self._client_channels.get(addr)
        if ch is not None:
            self._write(ch, kind, name, body, pending)
            return
        if addr.port == 0 or addr in self._gone_clients:
            why = (f"the client-mode RpcEnv at {addr} is no longer connected" if addr.port
                   else f"{addr} is a client-mode RpcEnv address; it can only be reached "
                   "through a connection it opened")
            self._connect_failed(addr, [(kind, name, body, pending)], RpcConnectionError(why))
            return
        ob = self._outboxes.get(addr)
        if ob is None:
            ob = self._outboxes[addr] = Outbox(addr, self.loop, self._transport.connect,
                                               self._write, self._connect_failed)
        ob.post(kind, name, body, pending)

    def _write(self, ch: Channel, kind: int, name: str, body: bytes,
               pending: PendingAsk | None) -> None:
        if ch.closed:
            self._connect_failed(ch.peer, [(kind, name, body, pending)],
                                 RpcConnectionError(f"Connection to {ch.peer} is closed"))
            return
        if kind == framing.ONE_WAY:
            ch.write_one_way(name, body)
            return
        assert pending is not None
        if pending.future.done():       # timed out (or cancelled) while queued
            self._pending.pop(pending.req_id, None)
            return
        pending.channel = ch
        ch.pending.add(pending.req_id)
        ch.write_request(pending.req_id, name, body)

    def _connect_failed(self, addr: RpcAddress, items: list, exc: BaseException,
                        quiet: bool = False) -> None:
        """Fail what was queued for `addr`: asks get the error, sends are logged."""
        err = exc if isinstance(exc, RpcError) else RpcConnectionError(
            f"Failed to connect to {addr}: {exc}")
        sends = 0
        for _kind, _name, _body, pending in items:
            if pending is None:
                sends += 1
            else:
                self._finish(pending, exc=err)
        if sends and not quiet:
            log.warning("Failed to send %d message(s) to %s: %s", sends, addr, err)

    # -- TransportHandler: frames in ----------------------------------------------------------

    def one_way_received(self, ch: Channel, name: str, body: Any) -> None:
        inbox = self._inboxes.get(name)
        if inbox is None:
            log.warning("Dropping a message from %s: Could not find %s.", ch.peer, name)
            return
        try:
            msg = _decode_with(body, ch.hook)  # type: ignore[arg-type]
        except MessageDecodeError as e:
            log.warning("Dropping a malformed message from %s to %s: %s", ch.peer, name, e)
            return
        refusal = app_refusal(inbox, ch.scope, ch.peer, msg)
        if refusal:
            log.warning("Dropping %s", refusal)
            return
        self._dispatcher.deliver(inbox, RECEIVE, msg, ch.peer, self._peer_info(ch))

    def request_received(self, ch: Channel, req_id: int, name: str, body: Any) -> None:
        ctx = RpcCallContext(ch.peer, self._peer_info(ch), ch, req_id, self._respond)
        inbox = self._inboxes.get(name)
        if inbox is None:
            log.warning("Failing an ask from %s: Could not find %s.", ch.peer, name)
            ctx.answer(False, not_found(name))
            return
        try:
            msg = _decode_with(body, ch.hook)  # type: ignore[arg-type]
        except MessageDecodeError as e:
            log.warning("Failing a malformed ask from %s to %s: %s", ch.peer, name, e)
            ctx.answer(False, e)
            return
        refusal = app_refusal(inbox, ch.scope, ch.peer, msg)
        if refusal:
            log.warning("Refusing %s", refusal)
            ctx.answer(False, RpcRemoteError("SecurityException", refusal))
            return
        self._dispatcher.deliver(inbox, ASK, msg, ctx)

    def response_received(self, ch: Channel, req_id: int, ok: bool, body: Any) -> None:
        p = self._pending.get(req_id)
        if p is None or p.channel is not ch:
            log.debug("Ignoring a reply from %s to ask %d (timed out or unknown)", ch.peer, req_id)
            return
        if not ok:
            t, m = framing.decode_failure(body)
            self._finish(p, exc=RpcRemoteError(t, m))
            return
        try:
            value = _decode_with(body, ch.hook)  # type: ignore[arg-type]
        except MessageDecodeError as e:
            log.warning("Malformed reply from %s: %s", ch.peer, e)
            self._finish(p, exc=RpcError(f"Malformed reply from {ch.peer}: {e}"))
            return
        self._finish(p, value=value)

    # -- answers to asks ------------------------------------------------------------------------

    def _respond(self, ctx: RpcCallContext, ok: bool, value: Any) -> None:
        """A call context's answer: on the loop thread at once (held if a callback is
        running), from other threads through the loop."""
        if threading.get_ident() == self._loop_tid:
            held = self._dispatcher.held
            if held is not None:
                held.append((self._send_response, (ctx, ok, value), None, ctx))
            else:
                self._send_response(ctx, ok, value)
            return
        try:
            self.run_on_loop(self._send_response, ctx, ok, value)
        except RuntimeError:   # the env shut down meanwhile: the asker already got an error
            log.debug("Dropping a reply to %s: RpcEnv %s is shut down", ctx.sender_address,
                      self.name)

    def _send_response(self, ctx: RpcCallContext, ok: bool, value: Any) -> None:
        ch = ctx.channel
        if ch is None:   # local ask
            p = self._pending.get(ctx.req_id)
            if p is not None:
                if ok:
                    self._finish(p, value=value)
                else:
                    self._finish(p, exc=_as_remote_error(value))
            return
        if ch.closed:
            log.info("Dropping the reply to %s: its connection is closed", ch.peer)
            return
        if ok:
            try:
                body = encode(value)
            except Exception as e:
                log.error("Cannot encode the reply %r to %s: %s", value, ch.peer, e)
                ok, body = False, framing.encode_failure(type(e).__name__,
                                                         f"Cannot encode the reply: {e}")
            else:
                if len(body) + 14 > self._max_size:
                    text = _too_large(len(body), self._max_size)
                    log.error("Cannot send the reply to %s: %s", ch.peer, text)
                    ok, body = False, framing.encode_failure("RpcMessageTooLargeError", text)
        else:
            e = value
            if isinstance(e, RpcRemoteError):
                body = framing.encode_failure(e.remote_type, e.remote_message)
            else:
                body = framing.encode_failure(type(e).__name__, str(e))
        ch.write_response(ctx.req_id, ok, body)

    def _finish(self, p: PendingAsk, value: Any = None, exc: BaseException | None = None) -> None:
        self._pending.pop(p.req_id, None)
        if p.timer is not None:
            p.timer.cancel()
        if p.channel is not None:
            p.channel.pending.discard(p.req_id)
        if exc is not None:
            _set_exc(p.future, exc)
        else:
            try:
                p.future.set_result(value)
            except concurrent.futures.InvalidStateError:
                pass   # cancelled by the asker

    def _ask_timed_out(self, req_id: int) -> None:
        p = self._pending.get(req_id)
        if p is not None:
            p.timer = None
            self._finish(p, exc=RpcTimeoutError(timeout_message(p.address, p.timeout)))

    # -- identities ---------------------------------------------------------------------------

    @property
    def scope(self) -> str | None:
        """The application this env's credential is for (None: the cluster secret, or no
        secret at all)."""
        return self.rpc_conf.scope

    def current_sender(self) -> PeerInfo | None:
        """Who sent the one-way message being handled (inside ``receive`` only; an ask's
        is ``context.sender``)."""
        return self._dispatcher.current

    def _peer_info(self, ch: Channel | None) -> PeerInfo:
        if ch is None:
            return PeerInfo(self.address, self.rpc_conf.scope, 0, local=True)
        return PeerInfo(ch.peer, ch.scope, ch.channel_id)

    def admit_app_scopes(self, *scopes: str, any_scope: bool = False) -> None:
        """Let connections that authenticated with these applications' derived
        credentials in (a daemon admits any: ``any_scope=True``). Only meaningful for an env
        holding the cluster secret; an application's env admits its own scope only."""
        with self._lock:
            if any_scope:
                self._admit_any_scope = True
            self._admitted_scopes.update(scopes)

    def require_encryption(self) -> None:
        """Encrypt every connection opened from now on (an executor learns that its
        application asked for spark.network.crypto.enabled only after connecting)."""
        if not self.rpc_conf.authenticate:
            raise ValueError("spark.network.crypto.enabled needs spark.authenticate=true")
        self.rpc_conf = replace(self.rpc_conf, crypto=True)

    def admits_scope(self, scope: str) -> bool:
        return self._admit_any_scope or scope in self._admitted_scopes

    def derived_key(self, scope: str) -> bytes:
        key = self._derived.get(scope)
        if key is None:
            from ember.rpc.security import app_credential, parse_credential
            assert self.rpc_conf.secret is not None
            key = parse_credential(app_credential(self.rpc_conf.secret, scope).encode())[1]
            if len(self._derived) > 4096:
                self._derived.clear()
            self._derived[scope] = key
        return key

    # -- TransportHandler: channels -----------------------------------------------------------

    def _ref_from_wire(self, host: str, port: int, name: str, ch: Channel | None) -> RpcEndpointRef:
        """Rebuild a decoded ref, bound to this env. A port-0 ref from a client-mode peer
        names one of that peer's endpoints: bind it to the peer's identity (its
        connection), through which it can be reached."""
        if port == 0 and ch is not None and ch.peer_is_client:
            return RpcEndpointRef(ch.peer, name, self)
        return RpcEndpointRef(RpcAddress(host, port), name, self)

    def channel_opened(self, ch: Channel) -> None:
        if self._stopping:
            ch.close()
            return
        ch.hook = _make_hook(lambda h, p, n, _ch=ch: self._ref_from_wire(h, p, n, _ch))
        self._channels.add(ch)
        peer = ch.peer
        if ch.peer_is_client and not ch.outbound:
            self._client_channels[peer] = ch
            self._gone_clients.pop(peer, None)
        n = self._peer_counts.get(peer, 0)
        self._peer_counts[peer] = n + 1
        log.debug("RpcEnv %s: %r opened", self.name, ch)
        if n == 0:
            self._dispatcher.post_all(CONNECTED, peer)

    def channel_closed(self, ch: Channel, exc: BaseException | None) -> None:
        if ch not in self._channels:
            return
        self._channels.discard(ch)
        peer = ch.peer
        log.debug("RpcEnv %s: %r closed (%s)", self.name, ch, exc)
        if ch.pending:
            err = RpcConnectionError(f"Connection to {peer} closed before a reply was received")
            for req_id in list(ch.pending):
                p = self._pending.get(req_id)
                if p is not None:
                    self._finish(p, exc=err)
            ch.pending.clear()
        ob = self._outboxes.get(peer)
        if ob is not None and ob.channel is ch:
            ob.channel = None
            if ob.idle():
                del self._outboxes[peer]       # the next send makes a new one
        if self._client_channels.get(peer) is ch:
            del self._client_channels[peer]
            self._gone_clients[peer] = None
            if len(self._gone_clients) > _MAX_GONE_CLIENTS:
                del self._gone_clients[next(iter(self._gone_clients))]
        if self._stopping:
            return
        if exc is not None:
            self._dispatcher.post_all(NETWORK_ERROR, exc, peer)
        n = self._peer_counts.get(peer, 1) - 1
        if n <= 0:
            self._peer_counts.pop(peer, None)
            self._dispatcher.post_all(DISCONNECTED, peer)
        else:
            self._peer_counts[peer] = n

    # -- scheduled functions ----------------------------------------------------------------

    def _safe_call(self, fn: Callable, args: tuple) -> None:
        start = time.perf_counter()
        try:
            fn(*args)
        except Exception:
            log.exception("RpcEnv %s: error in scheduled function %r", self.name, fn)
        elapsed = time.perf_counter() - start
        if elapsed > SLOW_CALLBACK_SECONDS:
            log.warning("%r blocked the event loop of RpcEnv %s for %.1f s", fn, self.name,
                        elapsed)

    def call_soon(self, fn: Callable, *args: Any) -> None:
        """Run fn(*args) on the loop thread soon. Thread-safe (the way to bring the result
        of run_in_executor back to an endpoint)."""
        if self._stopping:
            log.debug("RpcEnv %s is shut down; not running %r", self.name, fn)
            return
        self.run_on_loop(self._safe_call, fn, args)

    def add_reader(self, sock: Any, callback: Callable[[], None]) -> None:
        """Call callback() on the loop whenever sock is readable. Thread-safe. Lets other
        socket users (an executor's task processes) share this loop instead of a thread."""
        if self.in_loop():
            self.loop.add_reader(sock, self._safe_call, callback, ())
        else:
            self.run_on_loop(self.loop.add_reader, sock, self._safe_call, callback, ())

    def remove_reader(self, sock: Any) -> None:
        """Stop watching sock. Thread-safe; a no-op once the loop is closed."""
        fd = sock if isinstance(sock, int) else sock.fileno()   # before the caller closes it
        if self.loop.is_closed() or fd < 0:
            return
        if self.in_loop():
            self.loop.remove_reader(fd)
        else:
            try:
                self.run_on_loop(self.loop.remove_reader, fd)
            except RuntimeError:
                pass

    def schedule(self, delay: float, fn: Callable, *args: Any) -> Cancellable:
        """Run fn(*args) once on the loop after `delay` seconds. Thread-safe."""
        if self._stopping:
            return self._timers.stopped()   # a shut-down env runs nothing more
        return self._timers.once(delay, fn, args)

    def schedule_periodic(self, delay: float, period: float, fn: Callable,
                          *args: Any) -> Cancellable:
        """Run fn(*args) on the loop after `delay`, then every `period` seconds (fixed
        rate; a late run does not cause a burst of catch-up runs). An exception is logged
        and the schedule goes on. Thread-safe."""
        if period <= 0:
            raise ValueError(f"period must be positive, got {period}")
        if self._stopping:
            return self._timers.stopped()
        return self._timers.periodic(delay, period, fn, args)

    def run_in_executor(self, fn: Callable, *args: Any) -> concurrent.futures.Future:
        """Run blocking fn(*args) (process spawning, file I/O) on the env's thread pool.
        Its future completes on a pool thread; use ``call_soon`` to act on the loop. What
        fn raises is logged (most callers never look at the future)."""
        with self._lock:
            if self._stopping:
                raise RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.rpc_conf.executor_threads,
                    thread_name_prefix=f"rpc-{self.name}-executor")
            fut = self._executor.submit(fn, *args)
        fut.add_done_callback(functools.partial(self._log_failure, fn))
        return fut

    def _log_failure(self, fn: Callable, fut: concurrent.futures.Future) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            log.error("RpcEnv %s: %r failed", self.name, fn, exc_info=fut.exception())

    # -- shutdown ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every endpoint (on_stop), fail pending asks, close connections and the
        server, and stop the loop thread. Idempotent. Off the loop thread it waits (up to
        10 s) for all that; on the loop thread it only starts it."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
        if first:
            self.wake_driver()
            try:
                self.loop.call_soon_threadsafe(self._shutdown_on_loop)
            except RuntimeError:
                pass  # loop already closed
        if not self.in_loop():
            self._terminated.wait(10)

    def _shutdown_on_loop(self) -> None:
        self._shut_down_on_loop = True
        inboxes = self._dispatcher.inboxes
        with self._lock:
            stopping = list(inboxes.values())
            inboxes.clear()
        for inbox in stopping:
            inbox.stopped = True
            self._dispatcher.stop(inbox)
        stopped = RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down")
        for ob in list(self._outboxes.values()):
            ob.abort(stopped)
        for p in list(self._pending.values()):
            self._finish(p, exc=stopped)
        try:
            self._transport.close()
        except Exception:
            log.exception("RpcEnv %s: error closing the transport", self.name)
        for ch in list(self._channels):
            try:
                ch.close()
            except Exception:
                log.debug("error closing %r", ch, exc_info=True)
        # anything queued from other threads after this point is dropped/failed by the
        # stopping checks; give close callbacks one turn, then stop
        self.loop.call_soon(self.loop.stop)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.debug("RpcEnv %s stopped", self.name)

    def await_termination(self, timeout: float | None = None) -> None:
        """Wait until the loop thread has finished (after ``shutdown``)."""
        if self.in_loop():
            raise RuntimeError("await_termination() cannot be called on the RpcEnv's own "
                               "event-loop thread")
        self._terminated.wait(timeout)
        if self._thread is not None and self._terminated.is_set():
            self._thread.join(timeout)

    def __enter__(self) -> "RpcEnv":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()
        self.await_termination(10)

    def __repr__(self) -> str:
        mode = "client" if self.client_mode else self.address.to_spark_url()
        return f"RpcEnv({self.name!r}, {mode})"


def create_inprocess_env(name: str, host: str = "localhost", port: int = 0,
                         conf: Mapping[str, Any] | None = None,
                         client_mode: bool = False) -> RpcEnv:
    """An RpcEnv on the in-process transport: same API and semantics, no sockets.

    Envs created this way reach each other (and only each other) through an in-memory
    router, so master/worker state machines can be tested with many envs in one process.
    """
    c = dict(conf or {})
    c["spark.ember.rpc.inprocess"] = "true"
    return RpcEnv.create(name, host, port, c, client_mode)

