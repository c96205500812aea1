"""SparkUI: the web server (port 4040) for the pages, `/api/v1` and `/metrics/prometheus`
of the driver's one running application.

The driver binds the port synchronously, in SparkContext's start-up (`bind_ui`): the URL goes
into the application's registration with a master, and a busy 4040 moves to 4041...
(spark.port.maxRetries) or fails start-up, as in Spark. Serving happens in the driver's UI
process (ember.ui.ui_process), which gets the bound socket. It uses the standard library's
threaded HTTP server, not aiohttp: importing aiohttp costs about 0.35 s and a driver UI gets
few requests. The page renderers (which pull in ember.ui_common, and with it aiohttp) are
imported on the first page request; the REST API needs no such import.
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


def _advertised_host(conf: Any) -> str:
    """The driver's host as its peers know it (the standalone backend's choice), so the
    master's link to this UI works from other hosts; loopback for local mode."""
    master = str(conf.get("spark.master") or "")
    if not master.startswith("spark://"):
        return conf.get("spark.driver.host") or os.environ.get("SPARK_LOCAL_IP") \
            or "127.0.0.1"
    from ember.deploy.app_client import parse_master_urls
    from ember.scheduler.standalone_backend import driver_host
    return driver_host(conf, parse_master_urls(master))


def bind_ui(conf: Any) -> tuple[socket.socket, str]:
    """Bind spark.ui.port (or the next free one): (the listening socket, the UI's URL).
    Raises OSError (Spark's 'Service SparkUI failed after N retries') when no port is free."""
    from ember.rpc.bind import bind_with_retries
    host = os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"
    sock = bind_with_retries(SERVICE_NAME, host, config.read(conf, "spark.ui.port"),
                             config.read(conf, "spark.port.maxRetries"))
    sock.setblocking(True)
    public = os.environ.get("SPARK_PUBLIC_DNS") or _advertised_host(conf)
    url = f"http://{public}:{sock.getsockname()[1]}"
    log.info("Bound SparkUI to %s, and started at %s", host, url)
    return sock, url


class SparkUI:
    """Serves `store` on the bound socket `sock` from a daemon thread, for as long as the
    process lives (`start()`)."""

    def __init__(self, store: AppStatusStore, sock: socket.socket) -> None:
        self.store = store
        self._provider = LiveStoreProvider(store)
        self._sock = sock

    def start(self) -> None:
        threading.Thread(target=self._serve, name="SparkUI", daemon=True).start()

    def _serve(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        ui = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "Ember"
            sys_version = ""

            def do_GET(self) -> None:
                try:
                    status, headers, data = ui.respond(self.path)
                except Exception:
                    log.exception("Error serving GET %s", self.path)
                    status, headers, data = (500, {"Content-Type": "text/plain; charset=utf-8"},
                                             b"500: Internal Server Error\n")
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Cache-Control", "no-store")
                for k, v in {**headers, **_SECURITY_HEADERS}.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("%s - %s", self.address_string(), format % args)

        server = ThreadingHTTPServer(self._sock.getsockname()[:2], Handler,
                                     bind_and_activate=False)
        server.socket.close()
        server.socket = self._sock
        server.daemon_threads = True
        server.serve_forever()

    def respond(self, target: str) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) for GET `target`."""
        parts = urlsplit(target)
        path, query = parts.path, flat_query(parse_qsl(parts.query, keep_blank_values=True))
        if path == API_ROOT or path.startswith(API_ROOT + "/"):
            return api_response(self._provider, path[len(API_ROOT):], query)
        from ember.ui import app_ui
        if path.rstrip("/") == "/metrics/prometheus":
            from ember.ui_common import PROMETHEUS_CONTENT_TYPE
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
