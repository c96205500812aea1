"""SparkUI: the web server (port 4040) for the pages, `/api/v1` and `/metrics/prometheus`
of the driver's one running application.

The driver binds the port synchronously, in SparkContext's start-up (`ember.ui.ui_bind`): the
URL goes into the application's registration with a master, and a busy 4040 moves to 4041...
(spark.port.maxRetries) or fails start-up, as in Spark. Serving happens in the driver's UI
process (ember.ui.ui_process), which gets the bound socket. It uses the standard library's
HTTP request handler on a bounded thread pool, not aiohttp: importing aiohttp costs about
0.35 s and a driver UI gets few requests. The page renderers (which pull in ember.web.pages, and with it aiohttp) are
imported on the first page request; the REST API needs no such import.
"""
from __future__ import annotations

import logging
import os
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping, Optional
from urllib.parse import parse_qsl, urlsplit

from ember import config
from ember.web.security import (
    LOGIN_PATH, ConnectionLimits, Denial, HttpGuard, https_redirect, login_page, safe_next,
    server_ssl_context, wants_html,
)
from ember.ui.api import API_ROOT, LiveStoreProvider, api_response, flat_query
from ember.ui.status_store import AppStatusStore
from ember.ui.ui_bind import bind_ui, ui_bind_host

__all__ = ["SparkUI", "bind_ui", "ui_bind_host"]

log = logging.getLogger("ember.ui.SparkUI")

# Spark's default security headers for its UIs (spark.ui.xXssProtection, ...).
_SECURITY_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "X-XSS-Protection": "1; mode=block",
                     "X-Content-Type-Options": "nosniff"}
UI_THREADS = 8          # requests served at once; more wait (up to maxConnections) or are refused
_MAX_LOGIN_BODY = 16 * 1024


class SparkUI:
    """Serves `store` on the bound socket `sock` from a daemon thread, for as long as the
    process lives (`start()`). `conf` is the application's: security (ember.web.security:
    Host/Origin checks, tokens or the login cookie and Spark's ACLs with
    spark.authenticate=true), TLS (spark.ssl.ui.*) and the slow-client limits. Requests are
    served by a pool of UI_THREADS threads, not a thread per connection."""

    def __init__(self, store: AppStatusStore, sock: socket.socket,
                 conf: Optional[Mapping[str, str]] = None,
                 redirect: Optional[socket.socket] = None,
                 catch_up: Optional[Callable[[], None]] = None) -> None:
        conf = dict(conf or {})
        self.store = store
        self._catch_up = catch_up       # the UI process: apply held events before a page
        self._provider = LiveStoreProvider(store)
        self._sock = sock
        self._redirect = redirect
        self._tls = server_ssl_context(conf, "ui")
        owners = [config.read(conf, "spark.user") or "", os.environ.get("SPARK_USER", "")]
        self.guard = HttpGuard(conf, sock.getsockname()[0], owners=owners,
                               public_hosts=[config.read(conf, "spark.driver.host") or ""],
                               tls=self._tls is not None)
        self.guard.port = sock.getsockname()[1]

    def start(self) -> None:
        threading.Thread(target=self._serve, name="SparkUI", daemon=True).start()
        if self._redirect is not None:
            threading.Thread(target=self._serve_redirect, name="SparkUI-redirect",
                             daemon=True).start()

    def _serve_redirect(self) -> None:
        """The HTTP port of a TLS UI: Spark's redirect to the HTTPS port."""
        from http.server import BaseHTTPRequestHandler
        guard, secure = self.guard, self._sock.getsockname()[1]
        assert self._redirect is not None
        server = _PooledServer(self._redirect, guard.limits, None)

        class Redirect(BaseHTTPRequestHandler):
            server_version = "Ember"
            sys_version = ""
            timeout = guard.limits.idle_timeout

            def handle_one_request(self) -> None:
                server.arm(self.connection)
                super().handle_one_request()

            def __getattr__(self, name: str) -> Any:
                if name.startswith("do_"):
                    return self._redirect
                raise AttributeError(name)

            def _redirect(self) -> None:
                server.disarm(self.connection)
                if guard.host_ok(self.headers.get("Host")):
                    self.send_response(302)
                    self.send_header("Location", https_redirect(self.headers.get("Host"),
                                                                secure, self.path))
                else:
                    self.send_response(403)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s - %s", self.address_string(), format % args)

        server.handler = Redirect
        server.serve_forever()

    def _serve(self) -> None:
        from http.server import BaseHTTPRequestHandler
        ui, guard = self, self.guard
        server = _PooledServer(self._sock, guard.limits, self._tls)

        class Handler(BaseHTTPRequestHandler):
            server_version = "Ember"
            sys_version = ""
            timeout = guard.limits.idle_timeout

            def handle_one_request(self) -> None:
                server.arm(self.connection)      # the request line and headers, in time
                super().handle_one_request()

            def do_GET(self) -> None:
                server.disarm(self.connection)
                if urlsplit(self.path).path == LOGIN_PATH and guard.authenticates:
                    self._send(200, {"Content-Type": "text/html; charset=utf-8"},
                               login_page(safe_next(_query(self.path).get("next"))).encode())
                    return
                user, denied = guard.check("GET", self.headers)
                if denied is not None:
                    self._deny(denied)
                    return
                try:
                    if ui._catch_up is not None:
                        ui._catch_up()
                    status, headers, data = ui.respond(self.path)
                except Exception:
                    log.exception("Error serving GET %s", self.path)
                    status, headers, data = (500, {"Content-Type": "text/plain; charset=utf-8"},
                                             b"500: Internal Server Error\n")
                self._send(status, headers, data)

            def do_POST(self) -> None:
                server.disarm(self.connection)
                if urlsplit(self.path).path != LOGIN_PATH or not guard.authenticates:
                    self._send(405, {"Content-Type": "text/plain; charset=utf-8"},
                               b"405: Method Not Allowed\n")
                    return
                if not guard.host_ok(self.headers.get("Host")) or not guard.origin_ok(
                        self.headers.get("Origin")):
                    self._deny(Denial(403, "403: Cross-origin request refused\n"))
                    return
                try:
                    length = int(self.headers.get("Content-Length") or 0)
                except ValueError:
                    length = -1
                if not 0 <= length <= _MAX_LOGIN_BODY:
                    self._deny(Denial(400, "400: Bad login request\n"))
                    return
                form = dict(parse_qsl(self.rfile.read(length).decode("utf-8", "replace")))
                target = safe_next(_query(self.path).get("next"))
                cookie, denied = guard.login(form.get("token", ""))
                if denied is not None:
                    self._send(401, {"Content-Type": "text/html; charset=utf-8"},
                               login_page(target, denied.text.strip()).encode())
                    return
                assert cookie is not None
                self._send(303, {"Location": target, "Set-Cookie": cookie}, b"")

            def __getattr__(self, name: str) -> Any:
                """Every other method (PUT, DELETE, even malformed ones): 405, where the
                standard library would answer 501."""
                if name.startswith("do_"):
                    return self._not_allowed
                raise AttributeError(name)

            def _not_allowed(self) -> None:
                server.disarm(self.connection)
                self._send(405, {"Content-Type": "text/plain; charset=utf-8", "Allow": "GET"},
                           b"405: Method Not Allowed\n")

            def _deny(self, d: Denial) -> None:
                if d.status == 401 and wants_html(self.headers):
                    body = login_page(self.path, d.text.strip()).encode()
                    self._send(401, {**d.headers, "Content-Type": "text/html; charset=utf-8"},
                               body)
                else:
                    self._send(d.status, {**d.headers,
                                          "Content-Type": "text/plain; charset=utf-8"},
                               d.text.encode())

            def _send(self, status: int, headers: Mapping[str, str], data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                for k, v in {**headers, **_SECURITY_HEADERS}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s - %s", self.address_string(), format % args)

        server.handler = Handler
        server.serve_forever()

    def respond(self, target: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for GET `target`."""
        parts = urlsplit(target)
        path, query = parts.path, flat_query(parse_qsl(parts.query, keep_blank_values=True))
        if path == API_ROOT or path.startswith(API_ROOT + "/"):
            return api_response(self._provider, path[len(API_ROOT):], query)
        from ember.ui import app_ui
        if path.rstrip("/") == "/metrics/prometheus":
            from ember.web.pages import PROMETHEUS_CONTENT_TYPE
            return (200, {"Content-Type": PROMETHEUS_CONTENT_TYPE},
                    app_ui.prometheus_metrics(self.store).text().encode())
        if path == "/":
            return _redirect("/jobs/")
        if path.strip("/") in app_ui.TABS and not path.endswith("/"):
            return _redirect(path + "/")
        status, html = app_ui.render_page(self.store, path, query)
        return status, {"Content-Type": "text/html; charset=utf-8"}, html.encode()


def _redirect(location: str) -> tuple[int, dict[str, str], bytes]:
    return 302, {"Content-Type": "text/plain; charset=utf-8", "Location": location}, b""


def _query(target: str) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(target).query))


class _PooledServer:
    """The accept loop of the application UI: each accepted connection goes to a bounded
    thread pool (at most `limits.max_connections` accepted at once; more are closed at
    once), TLS is negotiated on the pool's thread (a silent client cannot stall accepting),
    and a reaper closes connections whose request headers are late (`arm` / `disarm`)."""

    def __init__(self, sock: socket.socket, limits: ConnectionLimits,
                 tls: Optional[ssl.SSLContext]) -> None:
        self.sock = sock
        self.limits = limits
        self.tls = tls
        self.handler: Any = None
        self._pool = ThreadPoolExecutor(UI_THREADS, thread_name_prefix="SparkUI-request")
        self._lock = threading.Lock()
        self._open = 0
        self._deadlines: dict[socket.socket, float] = {}
        threading.Thread(target=self._reap, name="SparkUI-reaper", daemon=True).start()

    def serve_forever(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError as e:
                if self.sock.fileno() < 0:
                    return
                log.warning("SparkUI cannot accept a connection: %s", e)
                time.sleep(0.1)
                continue
            with self._lock:
                full = self._open >= self.limits.max_connections
                if not full:
                    self._open += 1
            if full:
                log.warning("Refusing a connection: %d open (spark.ember.ui.maxConnections)",
                            self.limits.max_connections)
                conn.close()
                continue
            self.arm(conn)      # waiting in the pool counts against the header deadline
            self._pool.submit(self._serve_one, conn, addr)

    def _serve_one(self, conn: socket.socket, addr: Any) -> None:
        raw = conn
        try:
            conn.settimeout(self.limits.header_timeout)
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
                self.disarm(raw)
                self.arm(conn)
            self.handler(conn, addr, self)
        except (OSError, ValueError) as e:
            log.debug("SparkUI connection from %s ended: %s", addr, e)
        except Exception:
            log.exception("Error serving a SparkUI connection from %s", addr)
        finally:
            self.disarm(raw)
            self.disarm(conn)
            try:
                conn.close()
            except OSError:
                pass
            with self._lock:
                self._open -= 1

    def arm(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines[conn] = time.monotonic() + self.limits.header_timeout

    def disarm(self, conn: socket.socket) -> None:
        with self._lock:
            self._deadlines.pop(conn, None)

    def _reap(self) -> None:
        period = max(0.05, self.limits.header_timeout / 4)
        while True:
            time.sleep(period)
            now = time.monotonic()
            with self._lock:
                late = [c for c, t in self._deadlines.items() if t < now]
                for c in late:
                    del self._deadlines[c]
            for c in late:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
