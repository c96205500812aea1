"""The worker's web UI (Spark §4.7): `/`, `/json`, `/logPage/`, `/log` and
`/metrics/prometheus`.

Why its own thread and loop: the RpcEnv does not expose its event loop, and a slow HTTP
client must never delay the worker's messages. The UI only *reads* the worker's state, by
asking the Worker endpoint for a `WorkerStateResponse` snapshot (like Spark's WorkerPage),
so it needs no lock and cannot change anything.

Log pages are `ember.deploy.log_pages` (shared with the master's UI): the query names the
file, and it is checked against the work dir before any file is touched.

`?self&logType=out` (Spark 4) is the daemon's own log instead: the file its output goes to
(`ember.deploy.daemon.own_log_file`, never a guess from the log dir). The master's UI serves
the same query through `log_pages.parse_self_log_request` and `serve_log`, so both daemons page
their logs with one parser and one renderer. A daemon whose output is not a file answers 404
with a one-line text. Deviation from Spark: "stdout", "stderr" and "out" all name that one
file (a daemon's stdout and stderr both go to its `.out` file), and `/log`'s header names the
file actually read.

Every user-controlled string (app names, main classes, exception text, log text) is
HTML-escaped by `ember.web.pages`; failures are a one-line text, never a stack trace.
Executors' commands (environment, arguments, javaOpts) are redacted with
spark.redaction.regex before `/json` shows them, and the server applies
`ember.web.security` (bind host, Host/Origin checks, tokens or login cookie and ACLs with
spark.authenticate=true; HTTPS with spark.ssl.standalone.*).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from typing import Any, Mapping, Optional

from aiohttp import web

from ember.deploy.json_protocol import driver_main_class, worker_state_json
from ember.util.units import megabytes_to_string as _mb
from ember.deploy.messages import (
    DriverRunnerSummary, ExecutorRunnerSummary, ExecutorState, RequestWorkerState,
    WorkerStateResponse,
)
from ember.web.server import WebServerThread, bind_web, security_middleware
from ember.deploy.log_pages import (
    SELF_LOG_QUERY, LogRequest, parse_log_request, serve_log,
)
from ember.web.security import HttpGuard
from ember.redaction import redact_command, redaction_pattern
from ember.rpc import RpcEndpointRef
from ember.web.pages import (
    Html, PrometheusText, esc, format_resource_usage, format_resources, html_response, link,
    page, prometheus_response, safe_url, table, ui_middleware, url_with_query,
)

log = logging.getLogger("ember.deploy.worker.WorkerWebUI")

__all__ = ["WorkerWebUI", "render_worker_page", "worker_metrics"]

SERVICE_NAME = "WorkerUI"


class WorkerWebUI:
    """An aiohttp server on its own thread. `start()` binds (trying successive ports when
    busy) and returns once it is serving; `url` is then `http://<public host>:<port>`."""

    def __init__(self, worker_ref: RpcEndpointRef, work_dir: str, host: str, port: int, *,
                 public_host: Optional[str] = None, max_retries: int = 16,
                 ask_timeout: float = 30.0, conf: Optional[Mapping[str, str]] = None) -> None:
        self.worker_ref = worker_ref
        self.work_dir = os.path.abspath(work_dir)
        self.host = host
        self.requested_port = port
        self.public_host = public_host or host
        self.max_retries = max_retries
        self.ask_timeout = ask_timeout
        self.conf = dict(conf or {})
        self.redaction = redaction_pattern(self.conf)
        self.scheme = "http"
        self.bound_port: Optional[int] = None
        self._server = WebServerThread("worker-web-ui")

    @property
    def url(self) -> str:
        host = f"[{self.public_host}]" if ":" in self.public_host else self.public_host
        return f"{self.scheme}://{host}:{self.bound_port}"

    # -- server lifecycle ------------------------------------------------------------------

    def start(self) -> "WorkerWebUI":
        guard = HttpGuard(self.conf, self.host, public_hosts=(self.public_host,))
        sock, plain, tls = bind_web(SERVICE_NAME, self.host, self.requested_port,
                                    self.max_retries, self.conf, "standalone")
        guard.tls = tls is not None
        self.bound_port = guard.port = sock.getsockname()[1]
        self.scheme = "https" if tls is not None else "http"
        app = web.Application(middlewares=[ui_middleware(log, "Worker"),
                                           security_middleware(guard)])
        routes = {"/": self._index, "/json": self._json, "/json/": self._json,
                  "/logPage": self._log_page, "/logPage/": self._log_page, "/log": self._log,
                  "/log/": self._log, "/metrics/prometheus": self._metrics}
        for path, handler in routes.items():
            app.router.add_get(path, handler)
        try:
            self._server.start(sock, app, ssl_context=tls, limits=guard.limits,
                               redirect=(plain, guard) if plain is not None else None)
        except Exception as e:
            raise OSError(f"Cannot start the worker web UI: {e}") from e
        log.info("Bound %s to %s, and started at %s", SERVICE_NAME, self.host, self.url)
        return self

    def stop(self) -> None:
        self._server.stop()

    # -- handlers --------------------------------------------------------------------------

    async def _state(self) -> WorkerStateResponse:
        fut = self.worker_ref.ask(RequestWorkerState(), self.ask_timeout)
        return await asyncio.wrap_future(fut)

    async def _json(self, request: web.Request) -> web.Response:
        state = redacted_state(await self._state(), self.redaction)
        return web.Response(text=json.dumps(worker_state_json(state), indent=2),
                            content_type="text/json")

    def _parse(self, query: Mapping[str, str]) -> LogRequest:
        return parse_log_request(self.work_dir, query)

    async def _log_page(self, request: web.Request) -> web.Response:
        return await serve_log(request, self._parse, raw=False, work_dir=self.work_dir)

    async def _log(self, request: web.Request) -> web.Response:
        return await serve_log(request, self._parse, raw=True, work_dir=self.work_dir)

    async def _index(self, request: web.Request) -> web.Response:
        return html_response(render_worker_page(
            redacted_state(await self._state(), self.redaction), self.url))

    async def _metrics(self, request: web.Request) -> web.Response:
        state = await self._state()
        return prometheus_response(worker_metrics(state, int(time.time() * 1000)))


def redacted_state(s: WorkerStateResponse, pattern: Any) -> WorkerStateResponse:
    """`s` with every executor's and driver's command redacted (ember.redaction)."""
    def executor(e: ExecutorRunnerSummary) -> ExecutorRunnerSummary:
        desc = dataclasses.replace(e.appDesc,
                                   command=redact_command(pattern, e.appDesc.command))
        return dataclasses.replace(e, appDesc=desc)

    def driver(d: DriverRunnerSummary) -> DriverRunnerSummary:
        desc = dataclasses.replace(d.driverDesc,
                                   command=redact_command(pattern, d.driverDesc.command))
        return dataclasses.replace(d, driverDesc=desc)
    return dataclasses.replace(
        s, executors=[executor(e) for e in s.executors],
        finishedExecutors=[executor(e) for e in s.finishedExecutors],
        drivers=[driver(d) for d in s.drivers],
        finishedDrivers=[driver(d) for d in s.finishedDrivers])


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------

def _log_links(**ids: Any) -> Html:
    return Html(" ".join(link(url_with_query("/logPage/", **ids, logType=t), t)
                         for t in ("stdout", "stderr")))


def _executor_row(e: ExecutorRunnerSummary) -> list[Any]:
    name = (link(e.appDesc.appUiUrl, e.appDesc.name) if e.state == ExecutorState.RUNNING
            else esc(e.appDesc.name))
    details = Html(f"<ul><li><strong>ID:</strong> {esc(e.appId)}</li>"
                   f"<li><strong>Name:</strong> {name}</li>"
                   f"<li><strong>User:</strong> {esc(e.appDesc.user)}</li></ul>")
    return [e.execId, e.state, e.cores, _mb(e.memory), format_resources(e.resources), details,
            _log_links(appId=e.appId, executorId=e.execId)]


def _driver_row(d: DriverRunnerSummary) -> list[Any]:
    return [d.driverId, driver_main_class(d.driverDesc), d.state, d.driverDesc.cores,
            _mb(d.driverDesc.mem), format_resources(d.resources),
            _log_links(driverId=d.driverId), d.finalException or ""]


_EXECUTOR_HEADERS = ["ExecutorID", "State", "Cores", "Memory", "Resources", "Job Details",
                     "Logs"]
_DRIVER_HEADERS = ["DriverID", "Main Class", "State", "Cores", "Memory", "Resources", "Logs",
                   "Notes"]


def _section(caption: str, headers: list[str], rows: list[list[Any]]) -> Html:
    return Html(f"<h4>{esc(caption)} ({len(rows)})</h4>\n" + table(headers, rows))


def render_worker_page(s: WorkerStateResponse, web_ui_url: str = "") -> str:
    """Spark's WorkerPage: the worker's summary (its ID linked to the worker's own log at
    `<web_ui_url>/logPage/?self&logType=out`), then running and finished executors and
    drivers (with their log links and, for drivers, the failure text)."""
    master = link(s.masterWebUiUrl, s.masterUrl) if s.masterUrl else "(not registered)"
    own_log = link(f"{web_ui_url.rstrip('/')}/logPage/?{SELF_LOG_QUERY}", s.workerId)
    summary = Html(
        '<ul class="summary">'
        f"<li><strong>ID:</strong> {own_log}</li>"
        f"<li><strong>Master URL:</strong> {master}</li>"
        f"<li><strong>Cores:</strong> {s.cores} ({s.coresUsed} Used)</li>"
        f"<li><strong>Memory:</strong> {esc(_mb(s.memory))} ({esc(_mb(s.memoryUsed))} Used)</li>"
        f"<li><strong>Resources:</strong> "
        f"{esc(format_resource_usage(s.resources, s.resourcesUsed))}</li></ul>")
    back = (Html(f"<p>{link(s.masterWebUiUrl, 'Back to Master')}</p>")
            if safe_url(s.masterWebUiUrl) else Html(""))
    return page(
        f"Spark Worker at {s.host}:{s.port}", summary, back,
        _section("Running Executors", _EXECUTOR_HEADERS, [_executor_row(e) for e in s.executors]),
        _section("Running Drivers", _DRIVER_HEADERS, [_driver_row(d) for d in s.drivers]),
        _section("Finished Executors", _EXECUTOR_HEADERS,
                 [_executor_row(e) for e in s.finishedExecutors]),
        _section("Finished Drivers", _DRIVER_HEADERS,
                 [_driver_row(d) for d in s.finishedDrivers]))


def worker_metrics(s: WorkerStateResponse, now_ms: int) -> PrometheusText:
    """The worker's gauges in Prometheus text format."""
    age = (now_ms - s.lastHeartbeat) / 1000.0 if s.lastHeartbeat else float("nan")
    mib = 1024 * 1024
    return (PrometheusText()
            .add("ember_worker_info", "gauge", "This worker's id and active master (value 1).",
                 [({"worker_id": s.workerId, "master_url": s.masterUrl}, 1)])
            .add("ember_worker_registered", "gauge", "1 if registered with a master.",
                 1 if s.registered else 0)
            .add("ember_worker_heartbeat_age_seconds", "gauge",
                 "Seconds since the last heartbeat sent to the master over a live connection "
                 "(NaN before the first).", age)
            .add("ember_worker_cores_total", "gauge", "Cores offered by this worker.", s.cores)
            .add("ember_worker_cores_used", "gauge", "Cores used by executors and drivers.",
                 s.coresUsed)
            .add("ember_worker_memory_total_bytes", "gauge", "Memory offered by this worker.",
                 s.memory * mib)
            .add("ember_worker_memory_used_bytes", "gauge",
                 "Memory used by executors and drivers.", s.memoryUsed * mib)
            .add("ember_worker_executors_running", "gauge", "Executors running here.",
                 len(s.executors))
            .add("ember_worker_drivers_running", "gauge", "Cluster-mode drivers running here.",
                 len(s.drivers)))
