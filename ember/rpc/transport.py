"""The seam between the RpcEnv (endpoints, asks, routing) and how bytes move (TCP, in-process).

A transport makes `Channel`s: established, authenticated, bidirectional links to one peer
env. The env never sees sockets; the transports never see endpoints or messages beyond
(endpoint name, encoded bytes). All methods run on the owning env's event-loop thread.

Callbacks a transport makes into its env (all on the env's loop thread):
``env._channel_opened(ch)``, ``env._channel_closed(ch, exc)``,
``env._on_one_way(ch, name, body)``, ``env._on_request(ch, req_id, name, body)``,
``env._on_response(ch, req_id, ok, body)``.
"""
from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any, Callable

from ember.rpc.address import RpcAddress

if TYPE_CHECKING:
    from ember.rpc.core import RpcEnv


_channel_ids = itertools.count(1)


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
        """Close and notify the env (``_channel_closed``) synchronously."""
        raise NotImplementedError

    def __repr__(self) -> str:
        kind = "to" if self.outbound else "from"
        return f"<{type(self).__name__} {kind} {self.peer}{' closed' if self.closed else ''}>"


class Transport:
    """Creates the listening side and outbound channels for one env."""

    def __init__(self, env: "RpcEnv") -> None:
        self.env = env

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
