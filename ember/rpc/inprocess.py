"""In-process transport: envs of one process linked by an in-memory router, no sockets.

For fast unit tests of the master/worker/driver state machines with many envs. Semantics
match TCP where tests can observe them: each env still has its own loop thread, messages are
still encoded/decoded with the msgpack codec (so codec mistakes show up here too), order per
sender is kept, asks get replies or time out, the size limit closes the link, auth settings
must match, and shutting an env down fires on_disconnected at its peers. Addresses are
synthetic: port 0 gets a unique number, a taken port is retried upwards like TCP.
"""
from __future__ import annotations

import hmac
import itertools
import logging
import threading
from typing import Any

from ember.rpc import framing
from ember.rpc.address import RpcAddress
from ember.rpc.errors import (RpcAuthenticationError, RpcBindError, RpcConnectionError,
                              RpcMessageTooLargeError)
from ember.rpc.transport import Channel, Transport, TransportHandler

log = logging.getLogger("ember.rpc")


class _Router:
    """Which in-process env listens at which address (process-global)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.transports: dict[RpcAddress, "InProcessTransport"] = {}
        self._ports = itertools.count(30000)

    def next_port(self) -> int:
        return next(self._ports) % 1_000_000 + 1  # synthetic; never 0


ROUTER = _Router()


class InProcessTransport(Transport):
    def __init__(self, handler: TransportHandler) -> None:
        super().__init__(handler)
        self.registered: RpcAddress | None = None

    async def start(self, host: str, port: int, client_mode: bool) -> RpcAddress:
        if client_mode:
            return RpcAddress(host, 0)
        retries = self.handler.rpc_conf.port_max_retries
        with ROUTER.lock:
            if port == 0:
                while True:
                    addr = RpcAddress(host, ROUTER.next_port())
                    if addr not in ROUTER.transports:
                        break
            else:
                for offset in range(retries + 1):
                    addr = RpcAddress(host, port + offset)
                    if addr not in ROUTER.transports:
                        break
                    log.warning("Service '%s' could not bind on port %d. Attempting port %d.",
                                self.handler.name, port + offset, port + offset + 1)
                else:
                    raise RpcBindError(
                        f"Service '{self.handler.name}' failed after {retries} retries (starting "
                        f"from {port})! Consider explicitly setting the appropriate port for "
                        f"the service '{self.handler.name}' or increasing spark.port.maxRetries.")
            ROUTER.transports[addr] = self
            self.registered = addr
        log.info("Successfully started service '%s' on port %d (in-process).", self.handler.name,
                 addr.port)
        return addr

    async def connect(self, address: RpcAddress) -> Channel:
        env = self.handler
        with ROUTER.lock:
            listener = ROUTER.transports.get(address)
        target = listener.handler if listener is not None else None
        if target is None or target.stopping:
            raise RpcConnectionError(f"Failed to connect to {address}: Connection refused "
                                     "(no in-process RpcEnv listens there)")
        if env.client_mode:
            identity = RpcAddress(env.address.host, ROUTER.next_port())
        else:
            identity = env.address
        mine, theirs = env.rpc_conf, target.rpc_conf
        if theirs.authenticate != mine.authenticate:
            if theirs.authenticate:
                log.warning("Authentication failed for connection from %s", identity)
                msg = (f"{address} requires authentication but spark.authenticate is not "
                       "enabled here; set spark.authenticate=true and the same "
                       "spark.authenticate.secret on both sides")
            else:
                msg = (f"{address} does not authenticate connections but "
                       "spark.authenticate=true here; refusing to talk to an unauthenticated "
                       "peer (enable spark.authenticate on both sides)")
            log.error("%s", msg)
            raise RpcAuthenticationError(msg)
        if theirs.authenticate and not hmac.compare_digest(theirs.secret or b"",
                                                           mine.secret or b""):
            log.warning("Authentication failed for connection from %s", identity)
            msg = (f"Authentication failed: {address} closed the connection during the "
                   "handshake (is spark.authenticate.secret the same on both sides?)")
            log.error("%s", msg)
            raise RpcAuthenticationError(msg)
        local = InProcessChannel(env, target, peer=address, outbound=True)
        remote = InProcessChannel(target, env, peer=identity, outbound=False,
                                  peer_is_client=env.client_mode)
        local.other, remote.other = remote, local
        try:
            target.run_on_loop(target.channel_opened, remote)
        except RuntimeError:
            raise RpcConnectionError(f"Failed to connect to {address}: it is shutting down") \
                from None
        env.channel_opened(local)
        return local

    def close(self) -> None:
        if self.registered is not None:
            with ROUTER.lock:
                if ROUTER.transports.get(self.registered) is self:
                    del ROUTER.transports[self.registered]
            self.registered = None


class InProcessChannel(Channel):
    """One end of an in-memory link; writes run the peer env's handlers on its loop."""

    def __init__(self, handler: TransportHandler, peer_handler: TransportHandler,
                 peer: RpcAddress, outbound: bool, peer_is_client: bool = False) -> None:
        super().__init__(peer, outbound, peer_is_client)
        self.handler = handler
        self.peer_handler = peer_handler
        self.other: InProcessChannel | None = None

    def _post(self, kind: int, a: Any, b: Any, body: bytes) -> None:
        if self.closed:
            return
        try:
            self.peer_handler.run_on_loop(self.other._arrive, kind, a, b, body)  # type: ignore[union-attr]
        except RuntimeError:
            pass  # the peer's loop is gone; its shutdown already closed our side

    def write_one_way(self, name: str, body: bytes) -> None:
        self._post(framing.ONE_WAY, name, None, body)

    def write_request(self, req_id: int, name: str, body: bytes) -> None:
        self._post(framing.REQUEST, req_id, name, body)

    def write_response(self, req_id: int, ok: bool, body: bytes) -> None:
        self._post(framing.RESPONSE, req_id, ok, body)

    def _arrive(self, kind: int, a: Any, b: Any, body: bytes) -> None:
        """On this side's loop: a frame from the other side."""
        if self.closed:
            return
        limit = self.handler.rpc_conf.max_message_size
        if len(body) + 16 > limit:
            log.error("Closing the connection with %s: a frame of %d bytes exceeds "
                      "spark.rpc.message.maxSize (%d bytes)", self.peer, len(body) + 16, limit)
            self._close(RpcMessageTooLargeError(
                f"frame exceeds spark.rpc.message.maxSize ({limit} bytes)"))
            return
        if kind == framing.ONE_WAY:
            self.handler.one_way_received(self, a, body)
        elif kind == framing.REQUEST:
            self.handler.request_received(self, a, b, body)
        else:
            self.handler.response_received(self, a, b, body)

    def close(self) -> None:
        self._close(None)

    def _close(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        other = self.other
        if other is not None:
            try:
                self.peer_handler.run_on_loop(other._remote_closed)
            except RuntimeError:
                pass
        self.handler.channel_closed(self, exc)

    def _remote_closed(self) -> None:
        if not self.closed:
            self.closed = True
            self.handler.channel_closed(self, None)
