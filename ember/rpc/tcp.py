"""TCP transport: asyncio Protocols speaking Ember's RPC wire protocol.

Protocol objects (not streams) because they let one ``data_received`` parse every frame that
arrived in a read and dispatch them inline, and let writes of one loop turn be coalesced into
a single ``transport.write``: a flood of small one-way messages then costs a few syscalls per
batch instead of a few per message. What it uses of its env is `TransportHandler`.

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
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import os
import socket
import threading
import time
from typing import Any

from ember.rpc import framing, security
from ember.rpc.address import RpcAddress
from ember.rpc.bind import bind_with_retries
from ember.rpc.errors import (RpcAuthenticationError, RpcConnectionError, RpcError,
                              RpcMessageTooLargeError)
from ember.rpc.transport import Channel, Transport, TransportHandler


log = logging.getLogger("ember.rpc")

# connection states
_S_AUTH = "server: awaiting client proof"
_S_HELLO = "server: awaiting hello"
_C_GREETING = "client: awaiting greeting"
_C_AUTH = "client: awaiting server proof"
_OPEN = "open"


_S_AUTH_SCOPE = "server: awaiting client scope"
_C_SCOPE = "client: awaiting server scope"

_PAUSE_MIN_HELD = 1 << 20     # a connection holding less than this is never paused


class _InboundBudget:
    """Bytes of partial frames held by every connection of this process. Above the budget,
    a connection that holds more than 1 MiB is paused (pause_reading: TCP pushes back on
    the sender) until the total falls to 3/4 of it; a closed connection returns its bytes."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held = 0
        self.paused: set["TcpConnection"] = set()

    def update(self, conn: "TcpConnection", held: int, limit: int) -> bool:
        """Record `conn`'s new holding; True if it must pause."""
        with self.lock:
            self.held += held - conn._held
            conn._held = held
            if self.held > limit and held > _PAUSE_MIN_HELD:
                self.paused.add(conn)
                return True
            if self.paused and self.held <= limit * 3 // 4:
                wake, self.paused = self.paused, set()
            else:
                return False
        for c in wake:
            c._resume_threadsafe()
        return False


_BUDGET = _InboundBudget()


class TcpTransport(Transport):
    def __init__(self, handler: TransportHandler) -> None:
        super().__init__(handler)
        self.server: asyncio.AbstractServer | None = None
        self.pending: dict["TcpConnection", None] = {}   # inbound, not yet authenticated
        self._pending_warned = 0.0
        self._auth_window = 0.0
        self._auth_logged = 0
        self._auth_suppressed = 0
        # what every connection of this env reads into (asyncio's BufferedProtocol): they
        # all read on the env's loop thread and copy the bytes out at once. A plain
        # Protocol gets a fresh 256 KB bytes per read, which glibc may serve with an mmap
        # and munmap each time.
        self.read_buffer = bytearray(READ_BUFFER_SIZE)

    async def start(self, host: str, port: int, client_mode: bool) -> RpcAddress:
        if client_mode:
            return RpcAddress(host, 0)
        handler = self.handler
        sock = bind_with_retries(handler.name, host, port, handler.rpc_conf.port_max_retries,
                                 512)
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(
            lambda: TcpConnection(self, outbound=False), sock=sock)
        return RpcAddress(host, sock.getsockname()[1])

    def auth_warning(self, fmt: str, *args: Any) -> None:
        """Refused peers are logged, at most 20 per 10 s per env, then counted: a flood
        of strangers must not fill the disk with log lines."""
        now = time.monotonic()
        if now - self._auth_window >= 10.0:
            if self._auth_suppressed:
                log.warning("RpcEnv %s: %d more connections failed authentication in the last "
                            "%.0f s (not logged one by one)", self.handler.name,
                            self._auth_suppressed, now - self._auth_window)
            self._auth_window, self._auth_logged, self._auth_suppressed = now, 0, 0
        if self._auth_logged < 20:
            self._auth_logged += 1
            log.warning(fmt, *args)
        else:
            self._auth_suppressed += 1

    def admit_pending(self, conn: "TcpConnection") -> None:
        """Count an unauthenticated connection; past the cap the oldest one is dropped (a
        flood of silent connections cannot hold every descriptor, and a real client's
        handshake, done in milliseconds, is not the oldest)."""
        self.pending[conn] = None
        cap = self.handler.rpc_conf.max_pending_connections
        while len(self.pending) > cap:
            oldest = next(iter(self.pending))
            self.pending.pop(oldest, None)
            now = time.monotonic()
            if now - self._pending_warned > 10:
                self._pending_warned = now
                log.warning("RpcEnv %s: more than %d connections are in their handshake "
                            "(spark.ember.rpc.maxPendingConnections); dropping the oldest, "
                            "from %s", self.handler.name, cap, oldest._remote)
            oldest.abort()

    async def connect(self, address: RpcAddress) -> Channel:
        loop = asyncio.get_running_loop()
        ready: asyncio.Future = loop.create_future()
        timeout = self.handler.rpc_conf.connect_timeout
        protocol: TcpConnection | None = None

        def factory() -> TcpConnection:
            nonlocal protocol
            protocol = TcpConnection(self, outbound=True, peer=address, ready=ready)
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


READ_BUFFER_SIZE = 256 * 1024      # asyncio's own read size for a plain Protocol


class TcpConnection(asyncio.BufferedProtocol, Channel):
    """One TCP connection: handshake state machine, then frames in both directions."""

    def __init__(self, owner: TcpTransport, outbound: bool, peer: RpcAddress | None = None,
                 ready: asyncio.Future | None = None) -> None:
        Channel.__init__(self, peer, outbound)
        self._owner = owner
        self._handler = owner.handler
        self._conf = owner.handler.rpc_conf
        self._reader = framing.FrameReader(self._conf.max_message_size)
        self._ready = ready
        self._state = _C_GREETING if outbound else _S_AUTH
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._out: list[Any] = []
        self._flush_scheduled = False
        self._written_in = -1           # the loop turn that wrote a frame at once
        self._opened = False
        self._remote = "?"
        self._peername: tuple[str, int] = ("?", 0)
        self._server_nonce = b""
        self._client_nonce = b""
        self._server_flags = 0
        self._client_flags = 0
        self._server_scope = ""
        self._proof = b""
        self._key = b""
        self._sealer: Any = None        # seals what we write (after authentication)
        self._opener: Any = None        # checks/decrypts what we read
        self._frames: framing.FrameReader | None = None   # frames of opened records
        self._scope_len = -1            # length of the scope being read in the handshake
        self._held = 0                  # bytes counted in _BUDGET
        self._paused = False

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
        conf = self._conf
        timeout = conf.connect_timeout if self.outbound else min(conf.connect_timeout,
                                                                 conf.handshake_timeout)
        self._timer = self._handler.loop.call_later(timeout, self._handshake_timed_out)
        if conf.mode == security.MODE_LOCAL_USER and not self._same_user(transport):
            return
        if not self.outbound:
            self._owner.admit_pending(self)
            if self.closed:
                return
            auth = conf.mode == security.MODE_SECRET
            self._server_nonce = os.urandom(framing.NONCE_LEN) if auth else bytes(framing.NONCE_LEN)
            g = framing.greeting(auth, self._server_nonce, conf.crypto, conf.scope or "")
            self._server_flags = framing.greeting_flags(g)
            self._server_scope = conf.scope or ""
            transport.write(g)  # type: ignore[attr-defined]
            self._state = _S_AUTH if auth else _S_HELLO

    def _same_user(self, transport: asyncio.BaseTransport) -> bool:
        """Local-user mode: the other end must be a loopback socket of our own uid, checked
        before any byte is read or written."""
        local = transport.get_extra_info("sockname")
        ok, why = (False, "no socket address")
        if isinstance(local, tuple) and self._peername[1]:
            ok, why = security.peer_is_same_user((str(local[0]), int(local[1])),
                                                 self._peername)
        if ok:
            return True
        if self.outbound:
            self._fail_connect(RpcAuthenticationError(
                f"Refusing to talk to {self.peer} ({self._remote}): {why}"))
        else:
            self._auth_failed("Authentication failed for connection from %s: %s", self._remote, why)
            self.abort()
        return False

    def _auth_failed(self, fmt: str, *args: Any) -> None:
        self._owner.auth_warning(fmt, *args)

    def get_buffer(self, sizehint: int) -> bytearray:
        return self._owner.read_buffer

    def buffer_updated(self, nbytes: int) -> None:
        with memoryview(self._owner.read_buffer) as view:
            self.data_received(view[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        """`data` is only valid during the call (the env's shared read buffer): the
        reader copies it."""
        if self.closed:
            return
        self._reader.feed(data)
        if self._state is not _OPEN:
            self._handshake()
            if self.closed:
                return
            if self._state is not _OPEN:
                return     # before the proof, at most one read (<= 321 bytes used) is held
        self._read_frames()
        if not self.closed:
            held = self._reader.buffered()
            if held != self._held and _BUDGET.update(self, held, self._conf.inbound_budget):
                self._pause()

    def _pause(self) -> None:
        if not self._paused and not self.closed and self._transport is not None:
            self._paused = True
            log.warning("Pausing reads from %s: partial frames of this process exceed "
                        "spark.ember.rpc.inboundBufferBudget", self._describe())
            self._transport.pause_reading()
            # a paused connection cannot finish its frame nor see its peer go away: past
            # the timeout it is closed and its bytes returned to the budget
            self._timer = self._handler.loop.call_later(self._conf.stalled_frame_timeout,
                                                     self._stalled)

    def _stalled(self) -> None:
        self._timer = None
        if self._paused and not self.closed:
            log.warning("Closing the connection with %s: its partial frame stayed paused for "
                        "%g s (spark.ember.rpc.stalledFrameTimeout)", self._describe(),
                        self._conf.stalled_frame_timeout)
            self.abort()

    def _resume_threadsafe(self) -> None:
        try:
            self._handler.loop.call_soon_threadsafe(self._resume)
        except RuntimeError:
            pass

    def _resume(self) -> None:
        if self._paused and not self.closed and self._transport is not None:
            self._paused = False
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._transport.resume_reading()

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
            elif self._state in (_S_AUTH, _S_AUTH_SCOPE):
                self._auth_failed("Authentication failed for connection from %s: it closed "
                                  "before proving the shared secret", self._remote)
        self._teardown(exc)

    # -- handshake -------------------------------------------------------------------------

    def _server_key(self, claim: str) -> bytes | None:
        """The key a client claiming `claim` must prove, or None if this env does not
        admit that identity."""
        conf = self._conf
        assert conf.secret is not None
        if conf.scope is not None:           # an application's env: its own scope only
            return conf.secret if claim == conf.scope else None
        if claim == "":
            return conf.secret
        if not self._handler.admits_scope(claim):
            return None
        return self._handler.derived_key(claim)

    def _install_sealers(self) -> None:
        t = framing.transcript(self._server_nonce, self._client_nonce, self._server_flags,
                               self._client_flags, self._server_scope, self.scope or "")
        c2s_mac, s2c_mac, c2s_enc, s2c_enc = framing.session_keys(self._key, t)
        if (self._server_flags | self._client_flags) & framing.FLAG_CRYPTO:
            send, recv = (c2s_enc, s2c_enc) if self.outbound else (s2c_enc, c2s_enc)
            self._sealer, self._opener = framing.GcmSealer(send), framing.GcmSealer(recv)
        else:
            send, recv = (c2s_mac, s2c_mac) if self.outbound else (s2c_mac, c2s_mac)
            self._sealer, self._opener = framing.MacSealer(send), framing.MacSealer(recv)
        # the outer reader now reads sealed records; frames come out of opened ones
        self._frames = framing.FrameReader(self._conf.max_message_size)
        self._reader.limit = self._record_limit()
        self._key = b""

    def _record_limit(self) -> int:
        return self._conf.max_message_size + 64 + framing.TAG_LEN

    def _transcript(self) -> bytes:
        return framing.transcript(self._server_nonce, self._client_nonce, self._server_flags,
                                  self._client_flags, self._server_scope, self.scope or "")

    def _handshake(self) -> None:
        reader = self._reader
        conf = self._conf
        while not self.closed and self._state is not _OPEN:
            state = self._state
            if state is _S_AUTH:
                data = reader.read_exact(framing.CLIENT_AUTH_LEN)
                if data is None:
                    return
                self._proof = data[:framing.MAC_LEN]
                self._client_nonce = data[framing.MAC_LEN:framing.MAC_LEN + framing.NONCE_LEN]
                self._client_flags = data[-2]
                self._scope_len = data[-1]
                self._state = _S_AUTH_SCOPE
            elif state is _S_AUTH_SCOPE:
                data = reader.read_exact(self._scope_len)
                if data is None:
                    return
                try:
                    claim = framing.decode_scope(data)
                except framing.HandshakeError:
                    claim = None
                key = self._server_key(claim) if claim is not None else None
                if key is None:
                    self._auth_failed("Authentication failed for connection from %s: this "
                                      "RpcEnv does not admit the identity %r", self._remote,
                                      claim)
                    self.abort()
                    return
                self.scope = claim or None
                t = self._transcript()
                if not hmac.compare_digest(self._proof, framing.client_proof(key, t)):
                    self._auth_failed("Authentication failed for connection from %s", self._remote)
                    self.abort()
                    return
                self._transport.write(framing.server_proof(key, t))  # type: ignore[union-attr]
                self._key = key
                self._install_sealers()
                self._owner.pending.pop(self, None)
                self._state = _S_HELLO
            elif state is _S_HELLO:
                try:
                    if self._opener is None:
                        frame = reader.next_frame(min(framing.MAX_HELLO_LEN, reader.limit))
                        if frame is None:
                            return
                    else:
                        assert self._frames is not None
                        frame = self._frames.next_frame(framing.MAX_HELLO_LEN)
                        if frame is None:
                            content = reader.next_content(framing.MAX_HELLO_LEN + 64)
                            if content is None:
                                return
                            self._frames.feed(self._opener.open(content))
                            continue
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
                    self._server_nonce = snonce
                    self._server_flags = framing.greeting_flags(data)
                    self._state = _C_SCOPE
                else:
                    self._send_hello()
            elif state is _C_SCOPE:
                if self._scope_len < 0:
                    head = reader.read_exact(1)
                    if head is None:
                        return
                    self._scope_len = head[0]
                data = reader.read_exact(self._scope_len)
                if data is None:
                    return
                try:
                    self._server_scope = framing.decode_scope(data)
                except framing.HandshakeError as e:
                    self._fail_connect(RpcConnectionError(f"Cannot talk to {self.peer}: {e}"))
                    return
                assert conf.secret is not None
                if conf.scope is None:
                    self.scope = self._server_scope or None
                    key = (self._handler.derived_key(self._server_scope) if self._server_scope
                           else conf.secret)
                elif self._server_scope in ("", conf.scope):
                    self.scope = conf.scope
                    key = conf.secret
                else:
                    self._fail_connect(RpcAuthenticationError(
                        f"{self.peer} belongs to application {self._server_scope!r}; this "
                        f"process only holds the credential of {conf.scope!r}"))
                    return
                self._client_nonce = os.urandom(framing.NONCE_LEN)
                self._client_flags = framing.FLAG_CRYPTO if conf.crypto else 0
                t = self._transcript()
                self._key = key
                self._transport.write(framing.client_auth(  # type: ignore[union-attr]
                    framing.client_proof(key, t), self._client_nonce, self._client_flags,
                    self.scope or ""))
                self._state = _C_AUTH
            elif state is _C_AUTH:
                data = reader.read_exact(framing.SERVER_AUTH_LEN)
                if data is None:
                    return
                if not hmac.compare_digest(data, framing.server_proof(self._key,
                                                                      self._transcript())):
                    self._fail_connect(RpcAuthenticationError(
                        f"Authentication failed: {self.peer} could not prove the shared "
                        "secret (spark.authenticate.secret differs?)"))
                    return
                self._install_sealers()
                self._send_hello()
            else:  # pragma: no cover
                raise AssertionError(state)

    def _send_hello(self) -> None:
        handler = self._handler
        addr = None if handler.client_mode else (handler.address.host, handler.address.port)
        hello = framing.hello_frame(addr, handler.client_id, handler.name)
        if self._sealer is not None:
            self._transport.writelines(self._sealer.seal([hello]))  # type: ignore[union-attr]
        else:
            self._transport.write(hello)  # type: ignore[union-attr]
        self._open()

    def _open(self) -> None:
        self._state = _OPEN
        self._opened = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self.outbound:
            self._owner.pending.pop(self, None)
        self._handler.channel_opened(self)
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
        t = min(t, self._conf.handshake_timeout)
        if self._state in (_S_AUTH, _S_AUTH_SCOPE):
            self._auth_failed("Authentication failed for connection from %s: no proof of the "
                              "shared secret within %g s", self._remote, t)
        else:
            log.warning("Closing connection from %s: no hello within %g s", self._remote, t)
        self.abort()

    # -- frames ----------------------------------------------------------------------------

    def _read_frames(self) -> None:
        reader = self._reader
        handler = self._handler
        opener = self._opener
        frames = self._frames
        while not self.closed:
            try:
                if opener is None:
                    frame = reader.next_frame()
                else:
                    assert frames is not None
                    frame = frames.next_frame()
                    if frame is None:
                        content = reader.next_content()
                        if content is None:
                            return
                        try:
                            frames.feed(opener.open(content))
                        except framing.FrameError as e:
                            log.warning("Closing the connection with %s: %s",
                                        self._describe(), e)
                            self.abort(RpcConnectionError(f"integrity check failed: {e}"))
                            return
                        continue
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
                    handler.one_way_received(self, name, body)
                elif ftype == framing.REQUEST:
                    req_id, name, body = framing.parse_request(payload)
                    handler.request_received(self, req_id, name, body)
                elif ftype == framing.RESPONSE:
                    req_id, ok, body = framing.parse_response(payload)
                    handler.response_received(self, req_id, ok, body)
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
        turn into one write at its end (throughput under a flood of small messages). Only
        a second frame schedules that end: a turn's one message (a task's status) costs the
        loop no extra turn for an empty flush."""
        if self.closed:
            return
        turn = self._handler.loop_turn
        if turn != self._written_in and not self._out:
            self._written_in = turn
            parts = [header, body]
            self._transport.writelines(  # type: ignore[union-attr]
                parts if self._sealer is None else self._sealer.seal(parts))
            return
        self._out.append(header)
        self._out.append(body)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._handler.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        out = self._out
        if out and not self.closed and self._transport is not None:
            self._out = []
            if self._sealer is None:
                self._transport.write(b"".join(out))
                return
            # one sealed record per batch of whole frames, each within the record limit
            limit = self._conf.max_message_size
            batch: list = []
            size = 0
            for part in out:
                if batch and size + len(part) > limit and len(batch) % 2 == 0:
                    self._transport.writelines(self._sealer.seal(batch))
                    batch, size = [], 0
                batch.append(part)
                size += len(part)
            self._transport.writelines(self._sealer.seal(batch))

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
        self._reader.release()
        if self._frames is not None:
            self._frames.release()
        if self._held:
            _BUDGET.update(self, 0, self._conf.inbound_budget)
        with _BUDGET.lock:
            _BUDGET.paused.discard(self)
        if not self.outbound:
            self._owner.pending.pop(self, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(RpcConnectionError(
                f"Connection to {self.peer} closed during the handshake"))
        if self._opened:
            self._handler.channel_closed(self, exc)
