"""The endpoint API: what code above the RPC layer implements and holds.

`RpcEndpoint` (what receives), `RpcEndpointRef` (a handle to send and ask through),
`RpcCallContext` (the reply channel of one ask) and `PeerInfo` (who sent a message) are
Spark's names and semantics. They know nothing of loops, connections or transports: a ref
forwards to the `RpcEnv` it is bound to, a call context to the responder the env gave it.
See `ember.rpc.env` for the threading model.
"""
from __future__ import annotations

import concurrent.futures
import logging
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ember.rpc.address import RpcAddress
from ember.rpc.config import parse_time
from ember.rpc.errors import RpcError, RpcTimeoutError, UnsupportedMessageError
from ember.rpc.messages import _bind_core_types, message

if TYPE_CHECKING:
    from ember.rpc.env import RpcEnv

log = logging.getLogger("ember.rpc")

ENDPOINT_VERIFIER = "endpoint-verifier"

# `.env` is set on every RpcEnv's loop thread, so `ask_sync` can refuse to block one.
loop_thread_state = threading.local()


def describe(msg: Any) -> str:
    """How a message is named in logs: its type only (payloads may be large or secret)."""
    return type(msg).__name__


def timeout_message(address: RpcAddress, timeout: float) -> str:
    return (f"Cannot receive any reply from {address} in {timeout:g} seconds. "
            "This timeout is controlled by spark.rpc.askTimeout")


def as_seconds(timeout: float | str) -> float:
    """A timeout in seconds; Spark-style strings ("10s", "500ms") are accepted too."""
    if isinstance(timeout, str):
        return parse_time("timeout", timeout)
    return float(timeout)


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

    A callback that raises sends nothing: the messages, asks and replies it issued on the
    loop thread before raising are dropped (an ask it made fails), and an ask it was
    handling is failed with the exception.
    """

    rpc_env: "RpcEnv"
    self_ref: "RpcEndpointRef"
    app_messages: tuple[type, ...] | None = None

    def on_start(self) -> None:
        """Called once, before any message is delivered."""

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        """A message from ``ref.send``."""
        log.warning("%s to %s", UnsupportedMessageError(msg, sender), type(self).__name__)

    def receive_and_reply(self, msg: Any, context: "RpcCallContext") -> None:
        """A message from ``ref.ask``: answer with ``context.reply`` or ``send_failure``
        (now or later, from any thread). An exception raised here fails the ask."""
        context.send_failure(UnsupportedMessageError(msg, context.sender_address))

    def on_connected(self, remote: RpcAddress) -> None:
        """A connection with the remote env at `remote` was established."""

    def on_disconnected(self, remote: RpcAddress) -> None:
        """The last connection with the remote env closed or failed (it may have died)."""

    def on_network_error(self, cause: Exception, remote: RpcAddress) -> None:
        """A connection with `remote` failed with `cause` (on_disconnected follows)."""

    def on_stop(self) -> None:
        """Called once when the endpoint is stopped (or the env shuts down)."""


# respond(context, ok, value): deliver one answer of an ask (the env's, thread-safe)
Responder = Callable[["RpcCallContext", bool, Any], None]


class RpcCallContext:
    """The reply channel of one ask. Reply exactly once; later replies are ignored.

    `channel` (None for a local ask) and `req_id` identify the ask for the env that made
    the context; `answered` is whether a reply or failure was issued."""

    __slots__ = ("sender_address", "sender", "channel", "req_id", "answered", "_respond")

    def __init__(self, sender_address: RpcAddress, sender: PeerInfo, channel: Any,
                 req_id: int, respond: Responder) -> None:
        self.sender_address = sender_address
        self.sender = sender          # who asked (authorization by channel)
        self.channel = channel
        self.req_id = req_id
        self.answered = False
        self._respond = respond

    def reply(self, response: Any) -> None:
        """Complete the ask with `response` (any encodable value). Thread-safe."""
        self.answer(True, response)

    def send_failure(self, e: BaseException) -> None:
        """Fail the ask: the asker's future raises RpcRemoteError("<Type>: <message>")."""
        self.answer(False, e)

    def answer(self, ok: bool, value: Any) -> None:
        """``reply(value)`` if ok, else ``send_failure(value)``."""
        if self.answered:
            log.warning("Ignoring a second reply to an ask from %s (%s)", self.sender_address,
                        "reply" if ok else f"failure {value!r}")
            return
        self.answered = True
        self._respond(self, ok, value)

    def __deepcopy__(self, memo: dict) -> "RpcCallContext":
        return self     # a reply channel, not state: copies of a state share it


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
        self._bound_env().send_to(self, msg)

    def ask(self, msg: Any, timeout: float | None = None) -> concurrent.futures.Future:
        """Send `msg` and return a future of the reply. Thread-safe.

        The future fails with RpcTimeoutError after `timeout` seconds (default
        spark.rpc.askTimeout), RpcRemoteError if the endpoint failed the ask, or
        RpcConnectionError if the connection failed. Its callbacks run on the env's loop
        thread, so an endpoint may handle the reply there without locks.
        """
        return self._bound_env().ask_to(self, msg, timeout)

    def ask_sync(self, msg: Any, timeout: float | None = None) -> Any:
        """``ask`` and wait for the reply. Never call it from the env's loop thread (an
        endpoint callback or a scheduled function): the loop that must deliver the reply
        would be the one blocked, so it raises RuntimeError instead of deadlocking."""
        env = self._bound_env()
        loop_env = getattr(loop_thread_state, "env", None)
        if loop_env is not None:
            raise RuntimeError(
                f"ask_sync({describe(msg)}) to {self.url} was called on the event-loop thread "
                f"of RpcEnv '{loop_env.name}' (from an endpoint callback or a scheduled "
                "function); blocking an RpcEnv loop can deadlock it (the reply may need that "
                "very loop) and stalls every endpoint on it. Use ref.ask(msg) and handle the "
                "reply in a future callback instead.")
        t = env.rpc_conf.ask_timeout if timeout is None else as_seconds(timeout)
        fut = self.ask(msg, t)
        try:
            return fut.result(t + 10.0)  # the ask's own timer fires first; this is a backstop
        except RpcError:
            raise
        except concurrent.futures.TimeoutError:
            raise RpcTimeoutError(timeout_message(self.address, t)) from None

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


@message
@dataclass(frozen=True)
class CheckExistence:
    """Ask to the built-in "endpoint-verifier": is there an endpoint called `name`?"""
    name: str


class EndpointVerifier(RpcEndpoint):
    """Spark's RpcEndpointVerifier: lets setup_endpoint_ref_sync check a name remotely."""

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, CheckExistence):
            context.reply(self.rpc_env.has_endpoint(msg.name))
        else:
            super().receive_and_reply(msg, context)


_bind_core_types(RpcAddress, RpcEndpointRef)   # the codec encodes and rebuilds refs
