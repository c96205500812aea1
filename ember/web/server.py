"""An aiohttp server on its own thread and event loop, for the daemons' web UIs.

The RpcEnv keeps its loop private, so each UI runs aiohttp beside it and reads daemon state
only through RPC asks (RequestMasterState, RequestWorkerState): it never touches state.

Every server here is also guarded against slow and hostile clients (aiohttp itself has no
header timeout): `_GuardedProtocol` wraps aiohttp's protocol per connection, closes one whose
request headers are not complete `header_timeout` after its first byte (slowloris), one whose
body stalls for `idle_timeout`, and refuses connections beyond `max_connections`; TLS is the
asyncio server's. `security_middleware` applies `ember.web.security.HttpGuard` (Host,
Origin, authentication, ACLs, CSRF, the login form) to every UI request.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
import time
from typing import Any, Awaitable, Callable, Optional

from aiohttp import web

from ember.web.security import (
    CSRF_FIELD, LOGIN_PATH, SAFE_METHODS, ConnectionLimits, Denial, HttpGuard,
    https_redirect, login_page, safe_next, secure_port, server_ssl_context, wants_html,
)
from ember.rpc.bind import bind_with_retries

log = logging.getLogger(__name__)


class WebServerThread:
    def __init__(self, name: str) -> None:
        self.name = name
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._thread: Optional[threading.Thread] = None
        self._runner: Optional[web.AppRunner] = None
        self._server: Optional[asyncio.AbstractServer] = None
        self._reaper: Optional[asyncio.Task] = None
        self._redirector: Optional[web.AppRunner] = None
        self._redirect_server: Optional[asyncio.AbstractServer] = None

    def start(self, sock: socket.socket, app: web.Application, timeout: float = 30.0, *,
              ssl_context: Optional[ssl.SSLContext] = None,
              limits: ConnectionLimits = ConnectionLimits(),
              redirect: Optional[tuple[socket.socket, HttpGuard]] = None) -> None:
        """Serve app on the bound, listening sock (over TLS with `ssl_context`), each
        connection under `limits`; with `redirect` (a plain-HTTP socket and the guard whose
        Host rule applies), answer every request there with Spark's redirect to this HTTPS
        port. Returns once serving. Re-raises a start failure (and closes the sockets)."""
        loop = asyncio.new_event_loop()
        self._loop = loop
        ready = threading.Event()
        errors: list[BaseException] = []

        async def serve() -> None:
            runner = web.AppRunner(app, access_log=None, handle_signals=False,
                                   keepalive_timeout=limits.idle_timeout)
            await runner.setup()
            self._runner = runner
            open_connections: set[_GuardedProtocol] = set()
            handler = runner.server
            assert handler is not None
            self._server = await loop.create_server(
                lambda: _GuardedProtocol(handler(), limits, open_connections), sock=sock,
                ssl=ssl_context, ssl_handshake_timeout=(
                    limits.header_timeout if ssl_context is not None else None))
            self._reaper = loop.create_task(_reap(open_connections, limits))
            if redirect is not None:
                plain, guard = redirect
                secure = sock.getsockname()[1]
                redirector = web.AppRunner(_redirect_app(guard, secure), access_log=None,
                                           handle_signals=False,
                                           keepalive_timeout=limits.idle_timeout)
                await redirector.setup()
                self._redirector = redirector
                handler2 = redirector.server
                assert handler2 is not None
                self._redirect_server = await loop.create_server(
                    lambda: _GuardedProtocol(handler2(), limits, open_connections), sock=plain)

        def run() -> None:
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(serve())
            except BaseException as e:  # reported to start()'s caller
                errors.append(e)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                try:
                    if self._reaper is not None:
                        self._reaper.cancel()
                    if self._server is not None:
                        self._server.close()
                    if self._redirect_server is not None:
                        self._redirect_server.close()
                    if self._redirector is not None:
                        loop.run_until_complete(self._redirector.cleanup())
                    if self._runner is not None:
                        loop.run_until_complete(self._runner.cleanup())
                    loop.run_until_complete(loop.shutdown_asyncgens())
                except Exception:
                    log.debug("Error closing the %s loop", self.name, exc_info=True)
                loop.close()

        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()
        ready.wait(timeout)
        if errors:
            sock.close()
            if redirect is not None:
                redirect[0].close()
            raise errors[0]

    def stop(self) -> None:
        """Close the listening socket and connections, stop the thread. Idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        self._loop = None
        try:
            loop.call_soon_threadsafe(loop.stop)
        except RuntimeError:
            pass  # loop already closed
        thread.join(10)


def bind_web(service: str, host: str, port: int, max_retries: int, conf: Any,
             namespace: str) -> tuple[socket.socket, Optional[socket.socket],
                                      Optional[ssl.SSLContext]]:
    """Bind a UI as Spark does (JettyUtils.startJettyServer): without TLS in `namespace`,
    one HTTP socket on `port`; with it, the HTTPS socket on `secure_port` first, then the
    HTTP socket on `port`, which only redirects. Returns (the socket the UI serves on, the
    redirect socket or None, the TLS context or None). Raises OSError / ValueError."""
    tls = server_ssl_context(conf, namespace)
    if tls is None:
        return bind_with_retries(service, host, port, max_retries), None, None
    main = bind_with_retries(f"{service} (HTTPS)", host, secure_port(conf, namespace, port),
                             max_retries)
    try:
        plain = bind_with_retries(service, host, port, max_retries)
    except BaseException:
        main.close()
        raise
    return main, plain, tls


def _redirect_app(guard: HttpGuard, secure: int) -> web.Application:
    """The HTTP port of a TLS UI: Spark's redirect to `https://<host>:<secure><path>`
    (the Host must still name this server, so a rebinding name is never echoed)."""
    async def redirect(request: web.Request) -> web.StreamResponse:
        try:
            if not guard.host_ok(request.headers.get("Host")):
                return web.Response(status=403, text="403: Host header does not name this "
                                                     "server\n")
            return web.Response(status=302, headers={"Location": https_redirect(
                request.headers.get("Host"), secure, request.raw_path)})
        finally:
            request_done(request)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    return app


# ---------------------------------------------------------------------------------------------
# Slow clients
# ---------------------------------------------------------------------------------------------

_IDLE, _HEADERS, _BODY, _HANDLING = range(4)
_MAX_HEADER_BYTES = 64 * 1024


class _GuardedProtocol(asyncio.Protocol):
    """aiohttp's per-connection protocol with deadlines (see the module doc). States: IDLE
    (no byte of the next request yet: aiohttp's keep-alive timeout, or `header_timeout` for
    a new connection), HEADERS (deadline: first byte + `header_timeout`), BODY (until
    Content-Length bytes arrived; closed after `idle_timeout` without data), HANDLING (no
    deadline; `request_done` - called by `security_middleware` - returns to IDLE)."""

    def __init__(self, inner: asyncio.Protocol, limits: ConnectionLimits,
                 registry: set["_GuardedProtocol"]) -> None:
        self.inner = inner
        self.limits = limits
        self.registry = registry
        self.transport: Optional[asyncio.BaseTransport] = None
        self.state = _IDLE
        self.fresh = True
        self.since = time.monotonic()
        self.last_data = self.since
        self.head = bytearray()
        self.body_left = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        if len(self.registry) >= self.limits.max_connections:
            log.warning("Refusing a connection: %d open (spark.ember.ui.maxConnections)",
                        len(self.registry))
            transport.abort()
            return
        self.registry.add(self)
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Optional[Exception]) -> None:
        if self in self.registry:
            self.registry.discard(self)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.last_data = now
        if self.state == _IDLE:
            self.state, self.since, self.fresh = _HEADERS, now, False
            self.head.clear()
        if self.state == _HEADERS:
            start = max(0, len(self.head) - 3)
            self.head += data[:_MAX_HEADER_BYTES]
            end = self.head.find(b"\r\n\r\n", start)
            if end >= 0:
                self.body_left = _content_length(bytes(self.head[:end])) - (
                    len(self.head) - end - 4)
                self.state = _BODY if self.body_left > 0 else _HANDLING
                self.head.clear()
            elif len(self.head) >= _MAX_HEADER_BYTES:
                self.head = self.head[-3:]     # aiohttp refuses such headers itself
        elif self.state == _BODY:
            self.body_left -= len(data)
            if self.body_left <= 0:
                self.state = _HANDLING
        self.inner.data_received(data)

    def eof_received(self) -> Optional[bool]:
        return self.inner.eof_received()

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def request_done(self) -> None:
        if self.state == _HANDLING:
            self.state = _IDLE
            self.since = time.monotonic()

    def expired(self, now: float) -> bool:
        lim = self.limits
        if self.state == _HEADERS or (self.state == _IDLE and self.fresh):
            return now - self.since > lim.header_timeout
        if self.state == _BODY:
            return now - self.last_data > lim.idle_timeout
        return False


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            try:
                return max(0, int(value.strip()))
            except ValueError:
                return 0
    return 0


async def _reap(connections: set[_GuardedProtocol], limits: ConnectionLimits) -> None:
    """Close connections past their deadline, every fraction of the shorter timeout."""
    period = max(0.05, min(limits.header_timeout, limits.idle_timeout) / 4)
    while True:
        await asyncio.sleep(period)
        now = time.monotonic()
        for conn in [c for c in connections if c.expired(now)]:
            log.debug("Closing a connection that is too slow to send its request")
            if conn.transport is not None:
                conn.transport.abort()


def request_done(request: web.Request) -> None:
    """Tell the connection's guard its request was answered (see `_GuardedProtocol`)."""
    transport = request.transport
    proto = transport.get_protocol() if transport is not None else None
    if isinstance(proto, _GuardedProtocol):
        proto.request_done()


# ---------------------------------------------------------------------------------------------
# Authentication, authorization, CSRF
# ---------------------------------------------------------------------------------------------

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
USER_KEY: Any = (web.RequestKey("ember.user", object) if hasattr(web, "RequestKey")
                 else "ember.user")


def denial_response(request: web.Request, d: Denial) -> web.Response:
    """A Denial as a response; a browser that must log in gets the login form."""
    if d.status == 401 and request.method == "GET" and wants_html(request.headers):
        return web.Response(status=401, text=login_page(request.path_qs, d.text.strip()),
                            content_type="text/html", headers=dict(d.headers))
    return web.Response(status=d.status, text=d.text, headers=dict(d.headers))


def security_middleware(guard: HttpGuard, *, forms: bool = True,
                        acls_for: Optional[Callable[[web.Request], Any]] = None) -> Any:
    """aiohttp middleware applying `guard` to every request (see ember.web.security):
    Host, Origin, credentials, ACLs (`acls_for(request)`, when given and not None, instead
    of the server's: an application's own in the history server); the login form at
    `/login`; with `forms`, a POST must carry the `csrf` field of the page that showed the
    form."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await _guarded(request, handler)
        finally:
            request_done(request)

    async def _guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path == LOGIN_PATH and guard.authenticates:
            return await _login(request)
        acls = acls_for(request) if acls_for is not None else None
        user, denied = guard.check(request.method, request.headers, acls=acls)
        if denied is not None:
            return denial_response(request, denied)
        if forms and request.method not in SAFE_METHODS:
            try:
                form = await request.post()
            except ValueError:          # a malformed multipart or urlencoded body
                return web.Response(status=400, text="400: Malformed form\n")
            if not guard.csrf_ok(form.get(CSRF_FIELD), user):
                return web.Response(status=403, text="403: Missing or invalid CSRF token\n")
        request[USER_KEY] = user
        return await handler(request)

    async def _login(request: web.Request) -> web.StreamResponse:
        target = safe_next(request.query.get("next"))
        if request.method == "GET":
            return web.Response(text=login_page(target), content_type="text/html")
        if not guard.host_ok(request.headers.get("Host")) or not guard.origin_ok(
                request.headers.get("Origin")):
            return web.Response(status=403, text="403: Cross-origin request refused\n")
        try:
            form = await request.post()
        except ValueError:
            return web.Response(status=400, text="400: Malformed form\n")
        cookie, denied = guard.login(str(form.get("token", "")))
        if denied is not None:
            return web.Response(status=401, text=login_page(target, denied.text.strip()),
                                content_type="text/html")
        return web.Response(status=303, headers={"Location": target, "Set-Cookie": cookie})

    return middleware


def csrf_token(guard: Optional[HttpGuard], request: web.Request) -> str:
    """The CSRF token a page served for `request` puts in its forms."""
    return guard.csrf_token(request.get(USER_KEY)) if guard is not None else ""
