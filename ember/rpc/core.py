"""RpcEnv: named endpoints, send/ask, connections, on an asyncio loop thread per env.

This is Spark's NettyRpcEnv reduced to what the standalone cluster needs. An RpcEnv owns one
thread running an asyncio event loop; every endpoint callback, timer and reply callback runs
on that thread, one at a time, so endpoint state needs no locks (Spark's
ThreadSafeRpcEndpoint). Endpoints are plain objects with plain (non-async) methods: they
must not block - blocking work goes to ``run_in_executor`` and comes back with ``call_soon``.

Addressing: an env listens on ``spark://host:port``; an endpoint is ``spark://Name@host:port``.
A client-mode env (``client_mode=True``) does not listen; its address is ``(host, 0)``.
Peers identify it by the remote address of its connection (as Spark does), and messages to
its endpoints travel back through that connection.

Wire protocol (TCP), per connection
-----------------------------------
0. Admission (`ember.rpc.security`): without a secret an env listens on loopback only and
   both ends look the other up in /proc/net/tcp: a socket of another Unix user is closed
   before a byte is read or written. A non-loopback listener needs a secret or the named
   opt-out spark.ember.network.insecure.allowUnauthenticated.

1. Server greeting, sent by the accepting side as soon as it accepts::

       b"EMBR" | version (1 byte, =2) | flags (1 byte: bit 0 authentication required,
       bit 1 encryption requested) | server nonce (32 random bytes; zeros without auth)
       [with auth: scope length (u8) | server scope (UTF-8; empty = the cluster)]

2. Authentication, only if the flag is set (spark.authenticate=true with a secret)::

       client -> server: proof | client_nonce (32) | client flags (1) | scope length (u8)
                         | client scope
       server -> client: proof'

   The key K is the cluster secret for the scope "" and HKDF-SHA256(cluster secret,
   scope) for an application's scope (what workers give the drivers and executors they
   launch). T = "ember-rpc-v2" | server nonce | client nonce | server flags | client flags
   | len | server scope | len | client scope; proof = HMAC-SHA256(K, "client" | T),
   proof' = HMAC-SHA256(K, "server" | T). An application's env admits only its own scope;
   a daemon admits the cluster and the applications it was told to. Both sides verify with
   ``hmac.compare_digest``. Until the client's proof checks out the server reads only
   these bytes: no frame is parsed, no payload is decoded. A wrong proof is logged
   ("Authentication failed for connection from <peer>", WARNING) and the connection
   closed; at most spark.ember.rpc.maxPendingConnections connections may be in this phase
   (the oldest is dropped), each for at most spark.ember.rpc.handshakeTimeout.

   After it the stream is a sequence of sealed records, each holding one or more whole
   frames (what one write carries; the hello is the first), with keys HKDF(K,
   salt=SHA-256(T)): ``length (u32, counting the tag) | frames | tag``, tag = GMAC
   (AES-256-GCM of nothing, nonce = 4 zero bytes | sequence number (u64), associated
   data = length | frames); with
   spark.network.crypto.enabled on either side the record is AES-256-GCM encrypted instead
   (nonce = sequence number, the length as associated data). One key per direction; the
   sequence numbers are implicit, so a tampered, replayed, dropped or reordered record
   closes the connection, and no frame of a record is used before the record checked out.

3. Frames, in both directions::

       length (4 bytes, big-endian; counts the type byte and the payload) | type (1 byte)
       | payload

   A length above spark.rpc.message.maxSize is refused before its body is read: the
   connection is logged and closed (the stream cannot be re-synchronised); the env keeps
   serving its other connections. Partial frames of all connections of a process share
   spark.ember.rpc.inboundBufferBudget: above it a connection is paused (TCP pushes back)
   and closed if it stays paused for spark.ember.rpc.stalledFrameTimeout.

   ======  ========  ===========================================================
   type    name      payload
   ======  ========  ===========================================================
   0       hello     msgpack ``{"v": 1, "addr": [host, port] | None, "id": str,
                     "name": env name}``; first frame from the connecting side
   1       one-way   name length (u16) | endpoint name (UTF-8) | message
   2       request   request id (u64) | name length (u16) | endpoint name | message
   3       response  request id (u64) | status (u8: 0 ok, 1 failure) | body
   ======  ========  ===========================================================

   "message" and an ok body are ``ember.rpc.messages.encode`` output (msgpack, never
   pickle); a failure body is msgpack ``[exception type name, message]``. A malformed
   frame or message, an unknown frame type or an unknown endpoint name is logged and, for
   a request, answered with a failure; the connection stays up.

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
import itertools
import logging
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ember.rpc import framing
from ember.rpc.address import RpcAddress
from ember.rpc.config import RpcConf, parse_time
from ember.rpc.errors import (RpcConnectionError, RpcEndpointNotFoundError, RpcEnvStoppedError,
                              RpcError, RpcMessageTooLargeError, RpcRemoteError, RpcTimeoutError)
from ember.rpc.messages import MessageDecodeError, _bind_core_types, _decode_with, _make_hook
from ember.rpc.messages import encode, message
from ember.rpc.transport import Channel, Transport

log = logging.getLogger("ember.rpc")

__all__ = ["RpcAddress", "RpcEndpoint", "RpcCallContext", "RpcEndpointRef", "RpcEnv",
           "Cancellable", "CheckExistence", "create_inprocess_env", "ENDPOINT_VERIFIER"]

ENDPOINT_VERIFIER = "endpoint-verifier"
_MAX_GONE_CLIENTS = 10_000
_thread_state = threading.local()   # .env is set on every RpcEnv's loop thread
_SLOW_CALLBACK_SECONDS = 2.0

# Kinds of deliveries to an endpoint.
_RECEIVE, _ASK, _CONNECTED, _DISCONNECTED, _NETWORK_ERROR = range(5)


def _fmt_seconds(t: float) -> str:
    return f"{t:g}"


def _describe(msg: Any) -> str:
    return type(msg).__name__


@dataclass(frozen=True)
class PeerInfo:
    """Who sent the message being handled: the connection's peer address (its own claim in
    the hello), `scope` (None: the cluster - cluster secret, same-user loopback peer or the
    insecure opt-out; else the application it authenticated as), the connection's id, and
    whether it came from this env itself."""
    address: RpcAddress
    scope: str | None
    channel_id: int
    local: bool = False


class RpcEndpoint:
    """Base class of everything that receives messages. Subclass it.

    ``app_messages``: when a tuple, the only message types this endpoint takes from a
    connection that authenticated as an application (its derived credential, not the
    cluster secret); anything else from such a connection is refused before delivery.
    None (the default) delivers everything the env admitted.

    All callbacks run on the env's event-loop thread, one message at a time per endpoint
    and never concurrently, so the endpoint's state needs no locks. They are plain methods
    and must not block (no sleeping, no blocking I/O, no ``ask_sync``): the loop also
    carries every other endpoint's messages and the network.
    """

    rpc_env: "RpcEnv"
    self_ref: "RpcEndpointRef"
    app_messages: tuple[type, ...] | None = None

    def on_start(self) -> None:
        """Called once, before any message is delivered."""

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        """A message from ``ref.send``."""
        log.warning("Unexpected message %r from %s to %s", msg, sender, type(self).__name__)

    def receive_and_reply(self, msg: Any, context: "RpcCallContext") -> None:
        """A message from ``ref.ask``: answer with ``context.reply`` or ``send_failure``
        (now or later, from any thread). An exception raised here fails the ask."""
        context.send_failure(ValueError(
            f"Unsupported message {msg!r} from {context.sender_address} "
            f"to {type(self).__name__}"))

    def on_connected(self, remote: RpcAddress) -> None:
        """A connection with the remote env at `remote` was established."""

    def on_disconnected(self, remote: RpcAddress) -> None:
        """The last connection with the remote env closed or failed (it may have died)."""

    def on_network_error(self, cause: Exception, remote: RpcAddress) -> None:
        """A connection with `remote` failed with `cause` (on_disconnected follows)."""

    def on_stop(self) -> None:
        """Called once when the endpoint is stopped (or the env shuts down)."""


class RpcCallContext:
    """The reply channel of one ask. Reply exactly once; later replies are ignored."""

    __slots__ = ("sender_address", "sender", "_env", "_channel", "_req_id", "_done")

    def __init__(self, env: "RpcEnv", sender_address: RpcAddress, channel: Channel | None,
                 req_id: int) -> None:
        self.sender_address = sender_address
        self.sender = env._peer_info(channel)     # who asked (authorization by channel)
        self._env = env
        self._channel = channel       # None: a local ask
        self._req_id = req_id
        self._done = False

    def reply(self, response: Any) -> None:
        """Complete the ask with `response` (any encodable value). Thread-safe."""
        self._respond(True, response)

    def send_failure(self, e: BaseException) -> None:
        """Fail the ask: the asker's future raises RpcRemoteError("<Type>: <message>")."""
        self._respond(False, e)

    def _respond(self, ok: bool, value: Any) -> None:
        if self._done:
            log.warning("Ignoring a second reply to an ask from %s (%s)", self.sender_address,
                        "reply" if ok else f"failure {value!r}")
            return
        self._done = True
        env = self._env
        if env._on_loop_thread():
            env._send_response(self, ok, value)
            return
        try:
            env._run_on_loop(env._send_response, self, ok, value)
        except RuntimeError:   # the env shut down meanwhile: the asker already got an error
            log.debug("Dropping a reply to %s: RpcEnv %s is shut down", self.sender_address,
                      env.name)


class RpcEndpointRef:
    """A handle to a named endpoint at an address: ``spark://Name@host:port``.

    Refs are cheap values, equal when address and name are equal. A ref decoded from a
    message is bound to the env that received it; ``send``/``ask`` go through that env.
    """

    __slots__ = ("address", "name", "_env")

    def __init__(self, address: RpcAddress, name: str, env: "RpcEnv | None" = None) -> None:
        self.address = address
        self.name = name
        self._env = env

    @property
    def url(self) -> str:
        return f"spark://{self.name}@{self.address.host_port}"

    def _bound_env(self) -> "RpcEnv":
        env = self._env
        if env is None:
            raise RuntimeError(f"{self!r} is not bound to an RpcEnv; get refs from "
                               "RpcEnv.endpoint_ref() or decode messages with env=")
        return env

    def send(self, msg: Any) -> None:
        """Fire and forget. Thread-safe; network failures are logged, never raised (the
        receiving env's endpoints learn of a lost peer through on_disconnected). Raises
        TypeError at once for a message that cannot be encoded (a programming error)."""
        self._bound_env()._send(self, msg)

    def ask(self, msg: Any, timeout: float | None = None) -> concurrent.futures.Future:
        """Send `msg` and return a future of the reply. Thread-safe.

        The future fails with RpcTimeoutError after `timeout` seconds (default
        spark.rpc.askTimeout), RpcRemoteError if the endpoint failed the ask, or
        RpcConnectionError if the connection failed. Its callbacks run on the env's loop
        thread, so an endpoint may handle the reply there without locks.
        """
        return self._bound_env()._ask(self, msg, timeout)

    def ask_sync(self, msg: Any, timeout: float | None = None) -> Any:
        """``ask`` and wait for the reply. Never call it from the env's loop thread (an
        endpoint callback or a scheduled function): the loop that must deliver the reply
        would be the one blocked, so it raises RuntimeError instead of deadlocking."""
        env = self._bound_env()
        loop_env = getattr(_thread_state, "env", None)
        if loop_env is not None:
            raise RuntimeError(
                f"ask_sync({_describe(msg)}) to {self.url} was called on the event-loop thread "
                f"of RpcEnv '{loop_env.name}' (from an endpoint callback or a scheduled "
                "function); blocking an RpcEnv loop can deadlock it (the reply may need that "
                "very loop) and stalls every endpoint on it. Use ref.ask(msg) and handle the "
                "reply in a future callback instead.")
        t = env._conf.ask_timeout if timeout is None else _as_seconds(timeout)
        fut = self.ask(msg, t)
        try:
            return fut.result(t + 10.0)  # the ask's own timer fires first; this is a backstop
        except RpcError:
            raise
        except concurrent.futures.TimeoutError:
            raise RpcTimeoutError(_timeout_message(self.address, t)) from None

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, RpcEndpointRef) and self.address == other.address
                and self.name == other.name)

    def __hash__(self) -> int:
        return hash((self.address, self.name))

    def __repr__(self) -> str:
        return f"NettyRpcEndpointRef({self.url})"

    def __reduce__(self):  # pickles as an unbound ref: an env (thread, loop) cannot travel
        return (RpcEndpointRef, (self.address, self.name))

    def __copy__(self) -> "RpcEndpointRef":
        return self

    def __deepcopy__(self, memo: dict) -> "RpcEndpointRef":
        return self


def _timeout_message(address: RpcAddress, timeout: float) -> str:
    return (f"Cannot receive any reply from {address} in {_fmt_seconds(timeout)} seconds. "
            "This timeout is controlled by spark.rpc.askTimeout")


@message
@dataclass(frozen=True)
class CheckExistence:
    """Ask to the built-in "endpoint-verifier": is there an endpoint called `name`?"""
    name: str


class _EndpointVerifier(RpcEndpoint):
    """Spark's RpcEndpointVerifier: lets setup_endpoint_ref_sync check a name remotely."""

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, CheckExistence):
            context.reply(msg.name in self.rpc_env._endpoints)
        else:
            super().receive_and_reply(msg, context)


class Cancellable:
    """Handle of a scheduled function; ``cancel()`` is thread-safe and idempotent."""

    __slots__ = ("_env", "_handle", "_cancelled", "_next")

    def __init__(self, env: "RpcEnv") -> None:
        self._env = env
        self._handle: asyncio.TimerHandle | None = None
        self._cancelled = False
        self._next = 0.0

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True   # checked before every run, so it wins even if racing
        handle = self._handle
        if handle is not None:
            try:
                self._env._run_on_loop(handle.cancel)
            except RuntimeError:
                pass  # loop already gone


class _Slot:
    """An endpoint's registration: started flag and the backlog before on_start ran."""

    __slots__ = ("name", "endpoint", "ref", "started", "stopped", "backlog")

    def __init__(self, name: str, endpoint: RpcEndpoint, ref: RpcEndpointRef) -> None:
        self.name = name
        self.endpoint = endpoint
        self.ref = ref
        self.started = False
        self.stopped = False
        self.backlog: deque | None = deque()


class _PendingAsk:
    __slots__ = ("req_id", "future", "timer", "channel", "address", "timeout")

    def __init__(self, req_id: int, future: concurrent.futures.Future, address: RpcAddress,
                 timeout: float) -> None:
        self.req_id = req_id
        self.future = future
        self.timer: asyncio.TimerHandle | None = None
        self.channel: Channel | None = None
        self.address = address
        self.timeout = timeout


class _Outbox:
    """The one outbound connection to a remote address, and what waits for it."""

    __slots__ = ("env", "address", "channel", "queue", "task")

    def __init__(self, env: "RpcEnv", address: RpcAddress) -> None:
        self.env = env
        self.address = address
        self.channel: Channel | None = None
        self.queue: deque = deque()
        self.task: asyncio.Task | None = None

    def post(self, kind: int, name: str, body: bytes, pending: _PendingAsk | None) -> None:
        ch = self.channel
        if ch is not None and not ch.closed:
            self.env._write(ch, kind, name, body, pending)
            return
        self.channel = None
        self.queue.append((kind, name, body, pending))
        if self.task is None:
            self.task = self.env._loop.create_task(self._connect())

    async def _connect(self) -> None:
        env = self.env
        try:
            ch = await env._transport.connect(self.address)
            if ch.closed:
                raise RpcConnectionError(f"Connection to {self.address} closed during set-up")
        except Exception as e:
            self.task = None
            items = list(self.queue)
            self.queue.clear()
            env._connect_failed(self.address, items, e)
            return
        self.task = None
        self.channel = ch
        while self.queue and not ch.closed:
            env._write(ch, *self.queue.popleft())
        if self.queue:  # closed while flushing: try again with what is left
            self.task = env._loop.create_task(self._connect())

    def abort(self, exc: Exception) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None
        items = list(self.queue)
        self.queue.clear()
        self.env._connect_failed(self.address, items, exc, quiet=True)


class RpcEnv:
    """One per process (or per role): the loop thread, its endpoints and connections."""

    def __init__(self, name: str, host: str, port: int, conf: Mapping[str, Any] | None,
                 client_mode: bool) -> None:
        self.name = name
        self.conf: dict[str, Any] = dict(conf or {})
        self._conf = RpcConf.from_conf(self.conf)
        self.client_mode = client_mode
        self.address = RpcAddress(host, 0)
        self._client_id = uuid.uuid4().hex
        self._loop = asyncio.new_event_loop()
        self._loop_tid: int | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._endpoints: dict[str, _Slot] = {}
        self._pending: dict[int, _PendingAsk] = {}
        self._ids = itertools.count(1)
        self._outboxes: dict[RpcAddress, _Outbox] = {}
        self._client_channels: dict[RpcAddress, Channel] = {}
        self._gone_clients: dict[RpcAddress, None] = {}   # ordered set, bounded
        self._channels: set[Channel] = set()
        self._peer_counts: dict[RpcAddress, int] = {}
        self._inbox: deque = deque()
        self._wake_pending = False
        self._stopping = False
        self._terminated = threading.Event()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._max_size = self._conf.max_message_size
        self._current: PeerInfo | None = None
        self._admit_any_scope = False
        self._admitted_scopes: set[str] = set()
        self._derived: dict[str, bytes] = {}
        self._transport: Transport
        if self._conf.inprocess:
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
        if self.client_mode or self._conf.inprocess:
            return
        security.raise_open_files_limit()
        mode = self._conf.mode
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
            self._transport.start(host, port, self.client_mode), self._loop)
        try:
            self.address = fut.result()
        except BaseException:
            self._stopping = True
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            raise
        self.setup_endpoint(ENDPOINT_VERIFIER, _EndpointVerifier())

    def _run_loop(self, ready: threading.Event) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        self._loop_tid = threading.get_ident()
        _thread_state.env = self
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
                self._drain_after_close()
                self._terminated.set()

    def _drain_after_close(self) -> None:
        """Fail or drop what other threads queued while the loop was stopping.

        With the flag cleared, a later ``_run_on_loop`` reaches the closed loop and raises
        (its caller then fails the ask itself), so no ask can be left waiting forever."""
        self._wake_pending = False
        inbox = self._inbox
        while inbox:
            fn, args = inbox.popleft()
            if fn is self._safe_call:
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

    def _on_loop_thread(self) -> bool:
        return threading.get_ident() == self._loop_tid

    def _run_on_loop(self, fn: Callable, *args: Any) -> None:
        """Run fn(*args) on the loop soon (always deferred, FIFO per calling thread).

        From other threads, calls are batched behind a single wake-up of the loop, so a
        thread sending many messages costs one self-pipe write per batch, not per message.
        Raises RuntimeError if the loop is closed.
        """
        if threading.get_ident() == self._loop_tid:
            self._loop.call_soon(fn, *args)
            return
        self._inbox.append((fn, args))
        if not self._wake_pending:
            self._wake_pending = True
            try:
                self._loop.call_soon_threadsafe(self._drain_inbox)
            except RuntimeError:
                self._wake_pending = False
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
            self._loop.call_soon(self._drain_inbox)

    # -- endpoints ------------------------------------------------------------------------

    def setup_endpoint(self, name: str, endpoint: RpcEndpoint) -> RpcEndpointRef:
        """Register `endpoint` under `name`; on_start runs on the loop before any message.
        A duplicate name raises ValueError."""
        if not isinstance(endpoint, RpcEndpoint):
            raise TypeError(f"setup_endpoint needs an RpcEndpoint, got {type(endpoint).__name__}")
        if not isinstance(name, str) or not name or len(name.encode()) > 0xFFFF:
            raise ValueError(f"Invalid endpoint name {name!r}")
        with self._lock:
            if self._stopping:
                raise RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down")
            if name in self._endpoints:
                raise ValueError(f"There is already an RpcEndpoint called {name}")
            ref = RpcEndpointRef(self.address, name, self)
            endpoint.rpc_env = self
            endpoint.self_ref = ref
            slot = _Slot(name, endpoint, ref)
            self._endpoints[name] = slot
        self._run_on_loop(self._start_slot, slot)
        return ref

    def _start_slot(self, slot: _Slot) -> None:
        if slot.stopped:
            return
        self._call_endpoint(slot, "on_start", slot.endpoint.on_start)
        backlog = slot.backlog
        while backlog and not slot.stopped:
            kind, a, b, info = backlog.popleft()
            self._invoke(slot, kind, a, b, info)
        slot.started = True
        slot.backlog = None

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
            slot = self._endpoints.pop(name, None)
        if slot is None:
            return
        slot.stopped = True
        try:
            self._run_on_loop(self._finish_stop, slot)
        except RuntimeError:
            pass

    def _finish_stop(self, slot: _Slot) -> None:
        if slot.started:
            slot.started = False
            self._call_endpoint(slot, "on_stop", slot.endpoint.on_stop)

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

    # -- delivery to endpoints ------------------------------------------------------------

    def _call_endpoint(self, slot: _Slot, what: Any, fn: Callable, *args: Any) -> None:
        """Run one endpoint callback: log (never propagate) its exceptions, and warn when it
        blocked the loop. `what` is a str or a callable making one (only on those paths)."""
        start = time.perf_counter()
        try:
            fn(*args)
        except Exception:
            log.exception("Endpoint %s (%s) failed in %s", slot.name,
                          type(slot.endpoint).__name__, what if isinstance(what, str) else what())
        elapsed = time.perf_counter() - start
        if elapsed > _SLOW_CALLBACK_SECONDS:
            log.warning("Endpoint %s blocked the event loop of RpcEnv %s for %.1f s in %s; "
                        "endpoint callbacks must not block (use rpc_env.run_in_executor)",
                        slot.name, self.name, elapsed, what if isinstance(what, str) else what())

    def _invoke(self, slot: _Slot, kind: int, a: Any, b: Any, info: PeerInfo | None = None) -> None:
        ep = slot.endpoint
        if kind == _RECEIVE:
            self._current = info
            try:
                self._call_endpoint(slot, lambda: f"receive({_describe(a)})", ep.receive, a, b)
            finally:
                self._current = None
        elif kind == _ASK:
            self._call_endpoint(slot, lambda: f"receive_and_reply({_describe(a)})",
                                self._reply_or_fail, slot, ep, a, b)
        elif kind == _CONNECTED:
            self._call_endpoint(slot, "on_connected", ep.on_connected, a)
        elif kind == _DISCONNECTED:
            self._call_endpoint(slot, "on_disconnected", ep.on_disconnected, a)
        else:
            self._call_endpoint(slot, "on_network_error", ep.on_network_error, a, b)

    @staticmethod
    def _reply_or_fail(slot: _Slot, ep: RpcEndpoint, msg: Any, ctx: RpcCallContext) -> None:
        """An exception from receive_and_reply fails the ask (Spark's Inbox does the same)."""
        try:
            ep.receive_and_reply(msg, ctx)
        except Exception as e:
            log.warning("Endpoint %s failed an ask %s from %s: %s: %s", slot.name,
                        _describe(msg), ctx.sender_address, type(e).__name__, e,
                        exc_info=log.isEnabledFor(logging.DEBUG))
            if not ctx._done:
                ctx.send_failure(e)

    def _deliver(self, slot: _Slot, kind: int, a: Any, b: Any,
                 info: PeerInfo | None = None) -> None:
        if slot.stopped:
            if kind == _ASK:
                b._respond(False, _not_found(slot.name))
            elif kind == _RECEIVE:
                log.warning("Dropping %s from %s: Could not find %s.", _describe(a), b, slot.name)
            return
        if not slot.started:
            slot.backlog.append((kind, a, b, info))  # type: ignore[union-attr]
            return
        self._invoke(slot, kind, a, b, info)

    def _post_all(self, kind: int, a: Any, b: Any = None) -> None:
        for slot in list(self._endpoints.values()):
            self._deliver(slot, kind, a, b)

    # -- sending ----------------------------------------------------------------------------

    def _send(self, ref: RpcEndpointRef, msg: Any) -> None:
        if self._stopping:
            log.warning("Dropping %s to %s: RpcEnv %s has been shut down", _describe(msg), ref,
                        self.name)
            return
        addr = ref.address
        try:
            if addr == self.address:
                self._run_on_loop(self._local_send, ref.name, msg)
                return
            body = encode(msg)
            if len(body) + framing.frame_overhead(ref.name) > self._max_size:
                log.error("Dropping %s to %s: %s", _describe(msg), ref,
                          _too_large(len(body), self._max_size))
                return
            self._run_on_loop(self._remote_post, addr, framing.ONE_WAY, ref.name, body, None)
        except RuntimeError as e:
            if self._terminated.is_set() or self._loop.is_closed():
                log.warning("Dropping %s to %s: RpcEnv %s has been shut down", _describe(msg),
                            ref, self.name)
                return
            raise e

    def _ask(self, ref: RpcEndpointRef, msg: Any, timeout: float | None) -> concurrent.futures.Future:
        fut: concurrent.futures.Future = concurrent.futures.Future()
        t = self._conf.ask_timeout if timeout is None else _as_seconds(timeout)
        if self._stopping:
            fut.set_exception(RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
            return fut
        p = _PendingAsk(next(self._ids), fut, ref.address, t)
        try:
            if ref.address == self.address:
                self._run_on_loop(self._local_ask, p, ref.name, msg)
                return fut
            body = encode(msg)
            if len(body) + framing.frame_overhead(ref.name) > self._max_size:
                fut.set_exception(RpcMessageTooLargeError(_too_large(len(body), self._max_size)))
                return fut
            self._run_on_loop(self._remote_ask, p, ref.name, body)
        except RuntimeError:
            if not self._loop.is_closed():
                raise
            fut.set_exception(RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
        return fut

    def _arm(self, p: _PendingAsk) -> bool:
        if self._stopping:
            _set_exc(p.future, RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down"))
            return False
        self._pending[p.req_id] = p
        p.timer = self._loop.call_later(p.timeout, self._ask_timed_out, p.req_id)
        return True

    def _local_send(self, name: str, msg: Any) -> None:
        slot = self._endpoints.get(name)
        if slot is None:
            log.warning("Dropping %s from %s: Could not find %s.", _describe(msg), self.address,
                        name)
            return
        self._deliver(slot, _RECEIVE, msg, self.address, self._peer_info(None))

    def _local_ask(self, p: _PendingAsk, name: str, msg: Any) -> None:
        if not self._arm(p):
            return
        ctx = RpcCallContext(self, self.address, None, p.req_id)
        slot = self._endpoints.get(name)
        if slot is None:
            self._send_response(ctx, False, _not_found(name))
            return
        self._deliver(slot, _ASK, msg, ctx)

    def _remote_ask(self, p: _PendingAsk, name: str, body: bytes) -> None:
        if self._arm(p):
            self._remote_post(p.address, framing.REQUEST, name, body, p)

    def _remote_post(self, addr: RpcAddress, kind: int, name: str, body: bytes,
                     pending: _PendingAsk | None) -> None:
        if self._stopping:
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
            ob = self._outboxes[addr] = _Outbox(self, addr)
        ob.post(kind, name, body, pending)

    def _write(self, ch: Channel, kind: int, name: str, body: bytes,
               pending: _PendingAsk | None) -> None:
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
        for kind, name, _body, pending in items:
            if pending is None:
                sends += 1
            else:
                self._finish(pending, exc=err)
        if sends and not quiet:
            log.warning("Failed to send %d message(s) to %s: %s", sends, addr, err)

    # -- receiving ------------------------------------------------------------------------

    def _on_one_way(self, ch: Channel, name: str, body: Any) -> None:
        slot = self._endpoints.get(name)
        if slot is None:
            log.warning("Dropping a message from %s: Could not find %s.", ch.peer, name)
            return
        try:
            msg = _decode_with(body, ch.hook)  # type: ignore[arg-type]
        except MessageDecodeError as e:
            log.warning("Dropping a malformed message from %s to %s: %s", ch.peer, name, e)
            return
        refusal = _app_refusal(slot, ch, msg)
        if refusal:
            log.warning("Dropping %s", refusal)
            return
        self._deliver(slot, _RECEIVE, msg, ch.peer, self._peer_info(ch))

    def _on_request(self, ch: Channel, req_id: int, name: str, body: Any) -> None:
        ctx = RpcCallContext(self, ch.peer, ch, req_id)
        slot = self._endpoints.get(name)
        if slot is None:
            log.warning("Failing an ask from %s: Could not find %s.", ch.peer, name)
            ctx._respond(False, _not_found(name))
            return
        try:
            msg = _decode_with(body, ch.hook)  # type: ignore[arg-type]
        except MessageDecodeError as e:
            log.warning("Failing a malformed ask from %s to %s: %s", ch.peer, name, e)
            ctx._respond(False, e)
            return
        refusal = _app_refusal(slot, ch, msg)
        if refusal:
            log.warning("Refusing %s", refusal)
            ctx._respond(False, RpcRemoteError("SecurityException", refusal))
            return
        self._deliver(slot, _ASK, msg, ctx)

    def _on_response(self, ch: Channel, req_id: int, ok: bool, body: Any) -> None:
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

    def _send_response(self, ctx: RpcCallContext, ok: bool, value: Any) -> None:
        ch = ctx._channel
        if ch is None:   # local ask
            p = self._pending.get(ctx._req_id)
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
        ch.write_response(ctx._req_id, ok, body)

    def _finish(self, p: _PendingAsk, value: Any = None, exc: BaseException | None = None) -> None:
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
            self._finish(p, exc=RpcTimeoutError(_timeout_message(p.address, p.timeout)))

    # -- identities ---------------------------------------------------------------------------

    @property
    def scope(self) -> str | None:
        """The application this env's credential is for (None: the cluster secret, or no
        secret at all)."""
        return self._conf.scope

    def current_sender(self) -> PeerInfo | None:
        """Who sent the one-way message being handled (inside ``receive`` only; an ask's
        is ``context.sender``)."""
        return self._current

    def _peer_info(self, ch: Channel | None) -> PeerInfo:
        if ch is None:
            return PeerInfo(self.address, self._conf.scope, 0, local=True)
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
        from dataclasses import replace
        if not self._conf.authenticate:
            raise ValueError("spark.network.crypto.enabled needs spark.authenticate=true")
        self._conf = replace(self._conf, crypto=True)

    def _admits_scope(self, scope: str) -> bool:
        return self._admit_any_scope or scope in self._admitted_scopes

    def _derived_key(self, scope: str) -> bytes:
        key = self._derived.get(scope)
        if key is None:
            from ember.rpc.security import app_credential, parse_credential
            assert self._conf.secret is not None
            key = parse_credential(app_credential(self._conf.secret, scope).encode())[1]
            if len(self._derived) > 4096:
                self._derived.clear()
            self._derived[scope] = key
        return key

    # -- connections ------------------------------------------------------------------------

    def _ref_from_wire(self, host: str, port: int, name: str, ch: Channel | None) -> RpcEndpointRef:
        """Rebuild a decoded ref, bound to this env. A port-0 ref from a client-mode peer
        names one of that peer's endpoints: bind it to the peer's identity (its
        connection), through which it can be reached."""
        if port == 0 and ch is not None and ch.peer_is_client:
            return RpcEndpointRef(ch.peer, name, self)
        return RpcEndpointRef(RpcAddress(host, port), name, self)

    def _channel_opened(self, ch: Channel) -> None:
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
            self._post_all(_CONNECTED, peer)

    def _channel_closed(self, ch: Channel, exc: BaseException | None) -> None:
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
            if not ob.queue and ob.task is None:
                del self._outboxes[peer]       # the next send makes a new one
        if self._client_channels.get(peer) is ch:
            del self._client_channels[peer]
            self._gone_clients[peer] = None
            if len(self._gone_clients) > _MAX_GONE_CLIENTS:
                del self._gone_clients[next(iter(self._gone_clients))]
        if self._stopping:
            return
        if exc is not None:
            self._post_all(_NETWORK_ERROR, exc, peer)
        n = self._peer_counts.get(peer, 1) - 1
        if n <= 0:
            self._peer_counts.pop(peer, None)
            self._post_all(_DISCONNECTED, peer)
        else:
            self._peer_counts[peer] = n

    # -- timers and helpers -------------------------------------------------------------------

    def _safe_call(self, fn: Callable, args: tuple) -> None:
        start = time.perf_counter()
        try:
            fn(*args)
        except Exception:
            log.exception("RpcEnv %s: error in scheduled function %r", self.name, fn)
        elapsed = time.perf_counter() - start
        if elapsed > _SLOW_CALLBACK_SECONDS:
            log.warning("%r blocked the event loop of RpcEnv %s for %.1f s", fn, self.name,
                        elapsed)

    def call_soon(self, fn: Callable, *args: Any) -> None:
        """Run fn(*args) on the loop thread soon. Thread-safe (the way to bring the result
        of run_in_executor back to an endpoint)."""
        if self._stopping:
            log.debug("RpcEnv %s is shut down; not running %r", self.name, fn)
            return
        self._run_on_loop(self._safe_call, fn, args)

    def in_loop(self) -> bool:
        """True on this env's loop thread (where endpoint callbacks run)."""
        return self._on_loop_thread()

    def add_reader(self, sock: Any, callback: Callable[[], None]) -> None:
        """Call callback() on the loop whenever sock is readable. Thread-safe. Lets other
        socket users (an executor's task processes) share this loop instead of a thread."""
        if self._on_loop_thread():
            self._loop.add_reader(sock, self._safe_call, callback, ())
        else:
            self._run_on_loop(self._loop.add_reader, sock, self._safe_call, callback, ())

    def remove_reader(self, sock: Any) -> None:
        """Stop watching sock. Thread-safe; a no-op once the loop is closed."""
        fd = sock if isinstance(sock, int) else sock.fileno()   # before the caller closes it
        if self._loop.is_closed() or fd < 0:
            return
        if self._on_loop_thread():
            self._loop.remove_reader(fd)
        else:
            try:
                self._run_on_loop(self._loop.remove_reader, fd)
            except RuntimeError:
                pass

    def schedule(self, delay: float, fn: Callable, *args: Any) -> Cancellable:
        """Run fn(*args) once on the loop after `delay` seconds. Thread-safe."""
        c = Cancellable(self)
        if self._stopping:
            c._cancelled = True   # a shut-down env runs nothing more
            return c

        def fire() -> None:
            if not c._cancelled:
                self._safe_call(fn, args)

        def arm() -> None:
            if not c._cancelled:
                c._handle = self._loop.call_later(max(0.0, delay), fire)
        self._run_on_loop(arm)
        return c

    def schedule_periodic(self, delay: float, period: float, fn: Callable,
                          *args: Any) -> Cancellable:
        """Run fn(*args) on the loop after `delay`, then every `period` seconds (fixed
        rate; a late run does not cause a burst of catch-up runs). An exception is logged
        and the schedule goes on. Thread-safe."""
        if period <= 0:
            raise ValueError(f"period must be positive, got {period}")
        c = Cancellable(self)
        if self._stopping:
            c._cancelled = True
            return c
        loop = self._loop

        def fire() -> None:
            if c._cancelled:
                return
            self._safe_call(fn, args)
            if c._cancelled:
                return
            now = loop.time()
            c._next += period
            if c._next < now:
                c._next = now + period - ((now - c._next) % period)
            c._handle = loop.call_at(c._next, fire)

        def arm() -> None:
            if not c._cancelled:
                c._next = loop.time() + max(0.0, delay)
                c._handle = loop.call_at(c._next, fire)
        self._run_on_loop(arm)
        return c

    def run_in_executor(self, fn: Callable, *args: Any) -> concurrent.futures.Future:
        """Run blocking fn(*args) (process spawning, file I/O) on the env's thread pool.
        Its future completes on a pool thread; use ``call_soon`` to act on the loop."""
        with self._lock:
            if self._stopping:
                raise RpcEnvStoppedError(f"RpcEnv {self.name} has been shut down")
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._conf.executor_threads,
                    thread_name_prefix=f"rpc-{self.name}-executor")
            return self._executor.submit(fn, *args)

    # -- shutdown ---------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop every endpoint (on_stop), fail pending asks, close connections and the
        server, and stop the loop thread. Idempotent. Off the loop thread it waits (up to
        10 s) for all that; on the loop thread it only starts it."""
        with self._lock:
            first = not self._stopping
            self._stopping = True
        if first:
            try:
                self._loop.call_soon_threadsafe(self._shutdown_on_loop)
            except RuntimeError:
                pass  # loop already closed
        if not self._on_loop_thread():
            self._terminated.wait(10)

    def _shutdown_on_loop(self) -> None:
        with self._lock:
            slots = list(self._endpoints.values())
            self._endpoints.clear()
        for slot in slots:
            slot.stopped = True
            self._finish_stop(slot)
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
        # _stopping checks; give close callbacks one turn, then stop
        self._loop.call_soon(self._loop.stop)
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        log.debug("RpcEnv %s stopped", self.name)

    def await_termination(self, timeout: float | None = None) -> None:
        """Wait until the loop thread has finished (after ``shutdown``)."""
        if self._on_loop_thread():
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


def _as_seconds(timeout: float | str) -> float:
    """A timeout in seconds; Spark-style strings ("10s", "500ms") are accepted too."""
    if isinstance(timeout, str):
        return parse_time("timeout", timeout)
    return float(timeout)


def _set_exc(fut: concurrent.futures.Future, exc: BaseException) -> None:
    try:
        fut.set_exception(exc)
    except concurrent.futures.InvalidStateError:
        pass


def _app_refusal(slot: _Slot, ch: Channel, msg: Any) -> str:
    """Why `msg` from an application-identity connection is refused by this endpoint ("" if
    it is not)."""
    allowed = slot.endpoint.app_messages
    if ch.scope is None or allowed is None or isinstance(msg, allowed):
        return ""
    return (f"{_describe(msg)} from {ch.peer}: the connection authenticated as application "
            f"{ch.scope!r}, and {slot.name} takes it only from the cluster's daemons")


def _not_found(name: str) -> RpcRemoteError:
    return RpcRemoteError("SparkException", f"Could not find {name}.")


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


_bind_core_types(RpcAddress, RpcEndpointRef)
