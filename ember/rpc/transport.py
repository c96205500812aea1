"""The seam between the RpcEnv (endpoints, asks, routing) and how bytes move (TCP, in-process).

A transport makes `Channel`s: established, authenticated, bidirectional links to one peer
env. The env never sees sockets; the transports never see endpoints or messages beyond
(endpoint name, encoded bytes). Everything a transport may use of its env is the
`TransportHandler` protocol (Spark's RpcHandler): the env's identity and settings, its loop,
the credentials it admits, and the five callbacks through which channels and frames come
in. `RpcEnv` implements it; a test may drive a transport with any other implementation.
All methods run on the owning env's event-loop thread unless they say otherwise.
"""
from __future__ import annotations

import asyncio
import itertools
from typing import Any, Callable, Protocol

from ember.rpc.address import RpcAddress
from ember.rpc.config import RpcConf

_channel_ids = itertools.count(1)


class TransportHandler(Protocol):
    """What a transport sees of the env it carries bytes for."""

    name: str
    address: RpcAddress          # where the env listens ((host, 0) in client mode)
    client_mode: bool
    client_id: str               # this env's id in its hello frames
    rpc_conf: RpcConf
    loop: asyncio.AbstractEventLoop

    @property
    def stopping(self) -> bool:
        """True once the env began to shut down (it takes no new channel)."""

    @property
    def loop_turn(self) -> int:
        """Which turn of the loop runs now (it changes between any two turns)."""

    def run_on_loop(self, fn: Callable, *args: Any) -> None:
        """Run fn(*args) on the env's loop soon; any thread. RuntimeError if it is closed."""

    def admits_scope(self, scope: str) -> bool:
        """Whether a peer that proved application `scope`'s derived key may connect."""

    def derived_key(self, scope: str) -> bytes:
        """Application `scope`'s derived key (the env holds the cluster secret)."""

    def channel_opened(self, ch: "Channel") -> None:
        """`ch` finished its handshake: frames may flow both ways."""

    def channel_closed(self, ch: "Channel", exc: BaseException | None) -> None:
        """`ch` closed (`exc`: why, if it failed); called once per opened channel."""

    def one_way_received(self, ch: "Channel", name: str, body: Any) -> None:
        """A one-way frame for endpoint `name` (body: the encoded message)."""

    def request_received(self, ch: "Channel", req_id: int, name: str, body: Any) -> None:
        """A request frame: an ask to endpoint `name`, to be answered on `ch`."""

    def response_received(self, ch: "Channel", req_id: int, ok: bool, body: Any) -> None:
        """The answer to ask `req_id` written earlier on `ch`."""


class Channel:
    """One established link to a peer env.

    `scope` is who the peer authenticated as: None for the cluster (the cluster secret, a
    same-user loopback peer, or anyone with the insecure opt-out), or an application's
    scope (it proved that application's derived key). `channel_id` tells connections apart
    for authorization by channel (a message is believed from the connection it must come
    on, never from the fields it carries).

    `peer` identifies the remote env: its listening address (from the hello), or for a
    client-mode peer the connection's own remote address (Spark's behaviour), so that
    disconnects stay attributable and replies can be routed back through this channel.
    """

    outbound: bool
    peer: RpcAddress
    peer_is_client: bool
    closed: bool
    pending: set[int]           # ids of asks written to this channel awaiting a reply
    hook: Callable[[dict], Any] | None  # msgpack object hook, set by the env on open

    def __init__(self, peer: RpcAddress | None, outbound: bool,
                 peer_is_client: bool = False) -> None:
        self.peer = peer  # type: ignore[assignment]
        self.outbound = outbound
        self.peer_is_client = peer_is_client
        self.closed = False
        self.pending = set()
        self.hook = None
        self.scope: str | None = None
        self.channel_id = next(_channel_ids)

    def write_one_way(self, name: str, body: bytes) -> None:
        raise NotImplementedError

    def write_request(self, req_id: int, name: str, body: bytes) -> None:
        raise NotImplementedError

    def write_response(self, req_id: int, ok: bool, body: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Close and notify the handler (``channel_closed``) synchronously."""
        raise NotImplementedError

    def __repr__(self) -> str:
        kind = "to" if self.outbound else "from"
        return f"<{type(self).__name__} {kind} {self.peer}{' closed' if self.closed else ''}>"


class Transport:
    """Creates the listening side and outbound channels for one env."""

    def __init__(self, handler: TransportHandler) -> None:
        self.handler = handler

    async def start(self, host: str, port: int, client_mode: bool) -> RpcAddress:
        """Start listening (unless client_mode) and return the env's address."""
        raise NotImplementedError

    async def connect(self, address: RpcAddress) -> Channel:
        """Open, authenticate and introduce a channel to `address`; RpcConnectionError on
        failure (RpcAuthenticationError if the handshake fails)."""
        raise NotImplementedError

    def close(self) -> None:
        """Stop listening (channels are closed by the env)."""
        raise NotImplementedError
