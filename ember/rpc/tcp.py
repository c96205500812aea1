"""TCP transport: asyncio Protocols speaking the wire protocol of `ember.rpc.core`.

Protocol objects (not streams) because they let one ``data_received`` parse every frame that
arrived in a read and dispatch them inline, and let writes of one loop turn be coalesced into
a single ``transport.write``: a flood of small one-way messages then costs a few syscalls per
batch instead of a few per message.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import socket
from typing import TYPE_CHECKING, Any

from ember.rpc import framing
from ember.rpc.address import RpcAddress
from ember.rpc.bind import bind_with_retries
from ember.rpc.errors import (RpcAuthenticationError, RpcConnectionError, RpcError,
                              RpcMessageTooLargeError)
from ember.rpc.transport import Channel, Transport

if TYPE_CHECKING:
    from ember.rpc.core import RpcEnv

log = logging.getLogger("ember.rpc")

# connection states
_S_AUTH = "server: awaiting client proof"
_S_HELLO = "server: awaiting hello"
_C_GREETING = "client: awaiting greeting"
_C_AUTH = "client: awaiting server proof"
_OPEN = "open"


class TcpTransport(Transport):
    def __init__(self, env: "RpcEnv") -> None:
        super().__init__(env)
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int, client_mode: bool) -> RpcAddress:
        if client_mode:
            return RpcAddress(host, 0)
        env = self.env
        sock = bind_with_retries(env.name, host, port, env._conf.port_max_retries, 512)
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: TcpConnection(env, outbound=False), sock=sock)
        return RpcAddress(host, sock.getsockname()[1])

    async def connect(self, address: RpcAddress) -> Channel:
        env = self.env
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        timeout = env._conf.connect_timeout
        protocol: TcpConnection | None = None

        def factory() -> TcpConnection:
            nonlocal protocol
            protocol = TcpConnection(env, outbound=True, peer=address, ready=ready)
            return protocol
        try:
            async with asyncio.timeout(timeout):
                await loop.create_connection(factory, address.host, address.port)
                return await ready
        except RpcError:
            raise
        except TimeoutError:
            if protocol is not None:
                protocol.abort()
            raise RpcConnectionError(
                f"Failed to connect to {address}: no answer within {timeout:g} s "
                "(spark.rpc.connect.timeout)") from None
        except OSError as e:
            raise RpcConnectionError(f"Failed to connect to {address}: "
                                     f"{e.strerror or e}") from None

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


class TcpConnection(asyncio.Protocol, Channel):
    """One TCP connection: handshake state machine, then frames in both directions."""

    def __init__(self, env: "RpcEnv", outbound: bool, peer: RpcAddress | None = None,
                 ready: asyncio.Future | None = None) -> None:
        Channel.__init__(self, peer, outbound)
        self._env = env
        self._conf = env._conf
        self._reader = framing.FrameReader(env._conf.max_message_size)
        self._ready = ready
        self._state = _C_GREETING if outbound else _S_AUTH
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._out: list[Any] = []
        self._flush_scheduled = False
        self._opened = False
        self._remote = "?"
        self._peername: tuple[str, int] = ("?", 0)
        self._server_nonce = b""
        self._client_nonce = b""

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        peername = transport.get_extra_info("peername")
        if isinstance(peername, tuple) and len(peername) >= 2:
            self._peername = (str(peername[0]), int(peername[1]))
            self._remote = f"{peername[0]}:{peername[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass
        self._timer = self._env._loop.call_later(self._conf.connect_timeout,
                                                 self._handshake_timed_out)
        if not self.outbound:
            auth = self._conf.authenticate
            self._server_nonce = os.urandom(framing.NONCE_LEN) if auth else bytes(framing.NONCE_LEN)
            transport.write(framing.greeting(auth, self._server_nonce))  # type: ignore[attr-defined]
            self._state = _S_AUTH if auth else _S_HELLO

    def data_received(self, data: bytes) -> None:
        if self.closed:
            return
        self._reader.feed(data)
        if self._state is not _OPEN:
            self._handshake()
            if self.closed or self._state is not _OPEN:
                return
        self._read_frames()

    def eof_received(self) -> bool:
        return False  # close our side too

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._opened and not self.closed:
            if self.outbound:
                if self._state is _C_AUTH:
                    self._fail_connect(RpcAuthenticationError(
                        f"Authentication failed: {self.peer} closed the connection during the "
                        "handshake (is spark.authenticate.secret the same on both sides?)"))
                else:
                    self._fail_connect(RpcConnectionError(
                        f"Connection to {self.peer} closed during the handshake"
                        + (f": {exc}" if exc else "")))
            elif self._state is _S_AUTH:
                log.warning("Authentication failed for connection from %s: it closed before "
                            "proving the shared secret", self._remote)
        self._teardown(exc)

    # -- handshake -------------------------------------------------------------------------

    def _handshake(self) -> None:
        reader = self._reader
        conf = self._conf
        while not self.closed and self._state is not _OPEN:
            state = self._state
            if state is _S_AUTH:
                data = reader.read_exact(framing.CLIENT_AUTH_LEN)
                if data is None:
                    return
                proof, cnonce = data[:framing.MAC_LEN], data[framing.MAC_LEN:]
                assert conf.secret is not None
                expected = framing.client_proof(conf.secret, self._server_nonce, cnonce)
                if not hmac.compare_digest(proof, expected):
                    log.warning("Authentication failed for connection from %s", self._remote)
                    self.abort()
                    return
                self._transport.write(framing.server_proof(  # type: ignore[union-attr]
                    conf.secret, self._server_nonce, cnonce))
                self._state = _S_HELLO
            elif state is _S_HELLO:
                try:
                    frame = reader.next_frame(min(framing.MAX_HELLO_LEN, reader.limit))
                    if frame is None:
                        return
                    ftype, payload = frame
                    if ftype != framing.HELLO:
                        raise framing.FrameError(f"expected a hello frame, got type {ftype}")
                    addr, _cid, _name = framing.parse_hello(payload)
                except framing.FrameError as e:
                    log.warning("Closing connection from %s: %s", self._remote, e)
                    self.abort()
                    return
                if addr is not None:
                    self.peer = RpcAddress(addr[0], addr[1])
                else:
                    self.peer = RpcAddress(*self._peername)
                    self.peer_is_client = True
                self._open()
            elif state is _C_GREETING:
                data = reader.read_exact(framing.GREETING_LEN)
                if data is None:
                    return
                try:
                    server_auth, snonce = framing.parse_greeting(data)
                except framing.HandshakeError as e:
                    self._fail_connect(RpcConnectionError(f"Cannot talk to {self.peer}: {e}"))
                    return
                if server_auth and not conf.authenticate:
                    self._fail_connect(RpcAuthenticationError(
                        f"{self.peer} requires authentication but spark.authenticate is not "
                        "enabled here; set spark.authenticate=true and the same "
                        "spark.authenticate.secret on both sides"))
                    return
                if conf.authenticate and not server_auth:
                    self._fail_connect(RpcAuthenticationError(
                        f"{self.peer} does not authenticate connections but "
                        "spark.authenticate=true here; refusing to talk to an "
                        "unauthenticated peer (enable spark.authenticate on both sides)"))
                    return
                if conf.authenticate:
                    assert conf.secret is not None
                    self._server_nonce = snonce
                    self._client_nonce = os.urandom(framing.NONCE_LEN)
                    self._transport.write(  # type: ignore[union-attr]
                        framing.client_proof(conf.secret, snonce, self._client_nonce)
                        + self._client_nonce)
                    self._state = _C_AUTH
                else:
                    self._send_hello()
            elif state is _C_AUTH:
                data = reader.read_exact(framing.SERVER_AUTH_LEN)
                if data is None:
                    return
                assert conf.secret is not None
                expected = framing.server_proof(conf.secret, self._server_nonce,
                                                self._client_nonce)
                if not hmac.compare_digest(data, expected):
                    self._fail_connect(RpcAuthenticationError(
                        f"Authentication failed: {self.peer} could not prove the shared "
                        "secret (spark.authenticate.secret differs?)"))
                    return
                self._send_hello()
            else:  # pragma: no cover
                raise AssertionError(state)

    def _send_hello(self) -> None:
        env = self._env
        addr = None if env.client_mode else (env.address.host, env.address.port)
        self._transport.write(framing.hello_frame(addr, env._client_id, env.name))  # type: ignore[union-attr]
        self._open()

    def _open(self) -> None:
        self._state = _OPEN
        self._opened = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._env._channel_opened(self)
        if self._ready is not None and not self._ready.done():
            self._ready.set_result(self)

    def _fail_connect(self, exc: Exception) -> None:
        if isinstance(exc, RpcAuthenticationError) or "Cannot talk" in str(exc):
            log.error("%s", exc)
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(exc)
        self.abort()

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if self._opened or self.closed:
            return
        t = self._conf.connect_timeout
        if self.outbound:
            self._fail_connect(RpcConnectionError(
                f"Failed to connect to {self.peer}: handshake not completed within {t:g} s "
                "(spark.rpc.connect.timeout)"))
            return
        if self._state is _S_AUTH:
            log.warning("Authentication failed for connection from %s: no proof of the shared "
                        "secret within %g s", self._remote, t)
        else:
            log.warning("Closing connection from %s: no hello within %g s", self._remote, t)
        self.abort()

    # -- frames ----------------------------------------------------------------------------

    def _read_frames(self) -> None:
        reader = self._reader
        env = self._env
        while not self.closed:
            try:
                frame = reader.next_frame()
            except framing.FrameTooLargeError as e:
                log.error("Closing the connection with %s: a frame of %d bytes exceeds "
                          "spark.rpc.message.maxSize (%d bytes)", self._describe(), e.size,
                          e.limit)
                self.abort(RpcMessageTooLargeError(
                    f"frame of {e.size} bytes exceeds spark.rpc.message.maxSize ({e.limit} bytes)"))
                return
            except framing.FrameError as e:
                log.warning("Ignoring a malformed frame from %s: %s", self._describe(), e)
                continue
            if frame is None:
                return
            ftype, payload = frame
            try:
                if ftype == framing.ONE_WAY:
                    name, body = framing.parse_one_way(payload)
                    env._on_one_way(self, name, body)
                elif ftype == framing.REQUEST:
                    req_id, name, body = framing.parse_request(payload)
                    env._on_request(self, req_id, name, body)
                elif ftype == framing.RESPONSE:
                    req_id, ok, body = framing.parse_response(payload)
                    env._on_response(self, req_id, ok, body)
                else:
                    log.warning("Ignoring a frame of unknown type %d from %s", ftype,
                                self._describe())
            except framing.FrameError as e:
                log.warning("Ignoring a malformed %s frame from %s: %s",
                            framing.FRAME_NAMES.get(ftype, "?"), self._describe(), e)

    def _describe(self) -> str:
        if self.peer is not None and self.peer.port and str(self.peer) != self._remote:
            return f"{self.peer} ({self._remote})"
        return self._remote

    # -- Channel ---------------------------------------------------------------------------

    def _queue(self, header: bytes, body: Any) -> None:
        """Write the first frame of a loop turn at once (latency), batch the rest of the
        turn into one write at its end (throughput under a flood of small messages)."""
        if self.closed:
            return
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._env._loop.call_soon(self._flush)
            self._transport.writelines((header, body))  # type: ignore[union-attr]
            return
        self._out.append(header)
        self._out.append(body)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and not self.closed and self._transport is not None:
            self._out = []
            self._transport.write(b"".join(out))

    def write_one_way(self, name: str, body: bytes) -> None:
        self._queue(framing.one_way_header(name.encode(), len(body)), body)

    def write_request(self, req_id: int, name: str, body: bytes) -> None:
        self._queue(framing.request_header(req_id, name.encode(), len(body)), body)

    def write_response(self, req_id: int, ok: bool, body: bytes) -> None:
        self._queue(framing.response_header(req_id, ok, len(body)), body)

    def close(self) -> None:
        if self.closed:
            return
        self._flush()
        if self._transport is not None:
            self._transport.close()
        self._teardown(None)

    def abort(self, exc: Exception | None = None) -> None:
        """Drop the connection now, without flushing (bad peer, oversized frame)."""
        if self.closed:
            return
        if self._transport is not None:
            self._transport.abort()
        self._teardown(exc)

    def _teardown(self, exc: BaseException | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._out = []
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RpcConnectionError(
                f"Connection to {self.peer} closed during the handshake"))
        if self._opened:
            self._env._channel_closed(self, exc)
