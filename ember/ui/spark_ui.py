"""SparkUI: the driver's web server (port 4040) for the pages, `/api/v1` and
`/metrics/prometheus` of its one running application.

It binds synchronously, in SparkContext's start-up: the URL goes into the application's
registration with a master, and a busy 4040 moves to 4041... (spark.port.maxRetries) or
fails start-up, as in Spark. Serving uses the standard library's threaded HTTP server on a
thread of its own, not aiohttp: importing aiohttp costs about 0.35 s, more than the rest of
a SparkContext's start, and a driver UI gets few requests. The page renderers (which pull
in ember.ui_common, and with it aiohttp) are imported on the first page request, in the
server's thread; the REST API needs no such import.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from ember import config
from ember.ui.api import API_ROOT, LiveStoreProvider, api_response, flat_query
from ember.ui.status_store import AppStatusStore

log = logging.getLogger("ember.ui.SparkUI")

SERVICE_NAME = "SparkUI"
# Spark's default security headers for its UIs (spark.ui.xXssProtection, ...).
_SECURITY_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "X-XSS-Protection": "1; mode=block",
                     "X-Content-Type-Options": "nosniff"}


class SparkUI:
    """Bind with `bind()` (returns the URL), serve with `start()`, `stop()` at the end."""

    def __init__(self, store: AppStatusStore, conf: Any) -> None:
        self.store = store
        self._conf = conf
        self._provider = LiveStoreProvider(store)
        self.port = 0
        self.url = ""
        self._sock: Any = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopping = False

    def bind(self) -> str:
        """Bind spark.ui.port (or the next free one); returns the UI's URL. Raises OSError
        (Spark's 'Service SparkUI failed after N retries') when no port is free."""
        from ember.rpc.bind import bind_with_retries
        host = os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"
        self._sock = bind_with_retries(SERVICE_NAME, host,
                                       config.read(self._conf, "spark.ui.port"),
                                       config.read(self._conf, "spark.port.maxRetries"))
        self._sock.setblocking(True)
        self.port = self._sock.getsockname()[1]
        public = os.environ.get("SPARK_PUBLIC_DNS") or self._conf.get("spark.driver.host") \
            or os.environ.get("SPARK_LOCAL_IP") or "127.0.0.1"
        self.url = f"http://{public}:{self.port}"
        log.info("Bound SparkUI to %s, and started at %s", host, self.url)
        return self.url

    def start(self) -> None:
        """Serve on the bound socket from a daemon thread (connections wait in the socket's
        backlog until it runs)."""
        self._thread = threading.Thread(target=self._serve, name="SparkUI", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        ui = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "Ember"
            sys_version = ""

            def do_GET(self) -> None:
                try:
                    status, ctype, body, location = ui.respond(self.path)
                except Exception:
                    log.exception("Error serving GET %s", self.path)
                    status, ctype, body, location = (500, "text/plain; charset=utf-8",
                                                     "500: Internal Server Error\n", None)
                data = body.encode("utf-8")
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                if location:
                    self.send_header("Location", location)
                for k, v in _SECURITY_HEADERS.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s - %s", self.address_string(), format % args)

        sock = self._sock
        try:
            server = ThreadingHTTPServer(sock.getsockname()[:2], Handler,
                                         bind_and_activate=False)
        except (AttributeError, OSError):       # stop() came first and closed the port
            return
        server.socket.close()
        server.socket = sock
        server.daemon_threads = True
        with self._lock:
            if self._stopping:          # stopped before it ever served
                return
            self._server = server
        server.serve_forever(poll_interval=0.5)

    def respond(self, target: str) -> tuple[int, str, str, str | None]:
        """(status, content type, body, redirect location) for GET `target`."""
        parts = urlsplit(target)
        path, query = parts.path, flat_query(parse_qsl(parts.query, keep_blank_values=True))
        if path == API_ROOT or path.startswith(API_ROOT + "/"):
            return (*api_response(self._provider, path[len(API_ROOT):], query), None)
        from ember.ui import app_ui
        if path.rstrip("/") == "/metrics/prometheus":
            from ember.ui_common import PROMETHEUS_CONTENT_TYPE
            return 200, PROMETHEUS_CONTENT_TYPE, app_ui.prometheus_metrics(self.store).text(), None
        if path == "/":
            return 302, "text/plain; charset=utf-8", "", "/jobs/"
        if path.strip("/") in app_ui.TABS and not path.endswith("/"):
            return 302, "text/plain; charset=utf-8", "", path + "/"
        status, html = app_ui.render_page(self.store, path, query)
        return status, "text/html; charset=utf-8", html, None

    def stop(self) -> None:
        """Stop serving and close the port, at once: shutting the listening socket down
        wakes the server's select() instead of waiting for its next poll (a short-lived
        context must not pay the poll interval on stop). Idempotent."""
        with self._lock:
            self._stopping = True
            server, thread, sock = self._server, self._thread, self._sock
            self._server = self._thread = self._sock = None
        if server is not None:
            waiter = threading.Thread(target=server.shutdown, daemon=True)
            waiter.start()
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            waiter.join(5)
            server.server_close()
        elif sock is not None:
            sock.close()
        if thread is not None:
            thread.join(5)
