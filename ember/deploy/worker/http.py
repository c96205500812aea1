"""The worker's web UI (Spark §4.7): `/`, `/json`, `/logPage/`, `/log` and
`/metrics/prometheus`.

Why its own thread and loop: the RpcEnv does not expose its event loop, and a slow HTTP
client must never delay the worker's messages. The UI only *reads* the worker's state, by
asking the Worker endpoint for a `WorkerStateResponse` snapshot (like Spark's WorkerPage),
so it needs no lock and cannot change anything.

Log files are read straight from the work dir - `<workDir>/<appId>/<executorId>/<logType>`
or `<workDir>/<driverId>/<logType>` - and the query names them, so it is checked before any
file is touched, by the same rule `ember logs` goes through (log_files.log_dir), and the
file must exist; a bad request is answered 400 and a missing log 404 with a one-line text,
never a file outside.
`/logPage/` pages through a log by byte offset as Spark's LogPage does (`offset`,
`byteLength`, default the last 100 KiB); `/log` answers the same slice as plain text under
Spark's `==== Bytes a-b of n of <file> ====` header.

`?self&logType=out` (Spark 4) is the daemon's own log instead: the file its output goes to
(`ember.deploy.daemon.own_log_file`, never a guess from the log dir). The master's UI serves
the same query through `parse_self_log_request` and `serve_log` here, so both daemons page
their logs with one parser and one renderer. A daemon whose output is not a file answers 404
with a one-line text. Deviation from Spark: "stdout", "stderr" and "out" all name that one
file (a daemon's stdout and stderr both go to its `.out` file), and `/log`'s header names the
file actually read.

Every user-controlled string (app names, main classes, exception text, log text) is
HTML-escaped by `ember.ui_common`; failures are a one-line text, never a stack trace.
Executors' commands (environment, arguments, javaOpts) are redacted with
spark.redaction.regex before `/json` shows them, and the server applies
`ember.http_security` (bind host, Host/Origin checks, tokens or login cookie and ACLs with
spark.authenticate=true; HTTPS with spark.ssl.standalone.*).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from aiohttp import web

from ember.deploy import daemon as daemon_files
from ember.deploy.json_protocol import driver_main_class, worker_state_json
from ember.util.units import bytes_to_string, megabytes_to_string as _mb
from ember.deploy.messages import (
    DriverRunnerSummary, ExecutorRunnerSummary, ExecutorState, RequestWorkerState,
    WorkerStateResponse,
)
from ember.deploy.web import WebServerThread, bind_web, security_middleware
from ember.deploy.worker import log_files
from ember.http_security import HttpGuard
from ember.redaction import redact_command, redaction_pattern
from ember.rpc import RpcEndpointRef
from ember.ui_common import (
    Html, PrometheusText, esc, format_resource_usage, format_resources, html_response, link,
    page, prometheus_response, safe_url, table, ui_middleware, url_with_query,
)

log = logging.getLogger("ember.deploy.worker.WorkerWebUI")

__all__ = ["WorkerWebUI", "read_log", "read_log_file", "parse_log_request",
           "parse_self_log_request", "read_request", "serve_log", "LogRequest",
           "LogRequestError", "render_worker_page", "render_log_page", "worker_metrics",
           "LOG_TYPES", "DEFAULT_BYTE_LENGTH", "SELF_LOG_QUERY"]

LOG_TYPES = ("stderr", "stdout", "out")
DEFAULT_BYTE_LENGTH = 100 * 1024     # Spark's LogPage defaultBytes
SERVICE_NAME = "WorkerUI"
SELF_LOG_QUERY = "self&logType=out"   # Spark's link to a daemon's own log


def read_log(work_dir: str, log_dir: str, log_type: str, offset: Optional[int] = None,
             byte_length: int = DEFAULT_BYTE_LENGTH) -> tuple[str, int, int, int]:
    """Spark's LogPage.getLog: (text, start, end, total). The text is an error message
    (start=end=total=0) for a bad log type, a directory outside the work dir or a file
    that cannot be read. Without `offset`, the last `byte_length` bytes."""
    if log_type not in LOG_TYPES:
        return ("Error: Log type must be one of " + ", ".join(LOG_TYPES), 0, 0, 0)
    normalized = os.path.normpath(os.path.abspath(log_dir))
    if not log_files.is_in_directory(work_dir, normalized):
        return (f"Error: invalid log directory {log_dir}", 0, 0, 0)
    return read_log_file(os.path.join(normalized, log_type), offset, byte_length)


def read_log_file(path: str, offset: Optional[int] = None,
                  byte_length: int = DEFAULT_BYTE_LENGTH) -> tuple[str, int, int, int]:
    """(text, start, end, total) of one log file (`log_files.read_slice`); a file that cannot
    be read gives Spark's error text with start=end=total=0. The caller checked `path`."""
    try:
        data, start, total = log_files.read_slice(path, offset, byte_length)
    except OSError as e:
        log.error("Error getting logs from %s: %s", path, e)
        return (f"Error getting logs due to exception: {e.strerror or e}", 0, 0, 0)
    return (data.decode("utf-8", errors="replace"), start, start + len(data), total)


class LogRequestError(Exception):
    """A log query that cannot be served: HTTP `status` and a one-line `text`."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


@dataclass(frozen=True)
class LogRequest:
    """A validated `/logPage/` or `/log` query."""
    ids: dict[str, str]          # {"appId", "executorId"} or {"driverId"}; {} for `self`
    log_type: str
    log_dir: str                 # the file's directory, with a trailing separator
    offset: Optional[int]        # None: the last `byte_length` bytes
    byte_length: int
    daemon: str = "worker"       # whose UI answers: "worker" or "master"
    path: Optional[str] = None   # `self`: the daemon's own log file

    @property
    def name(self) -> str:
        """What the log belongs to: `<appId>/<executorId>`, the driver id, or the daemon."""
        return "/".join(self.ids.values()) if self.ids else self.daemon

    @property
    def file(self) -> str:
        """The file read."""
        return self.path if self.path is not None else self.log_dir + self.log_type

    def query(self, **params: Any) -> str:
        """This log's query string with `params` added: `self&logType=..` for the daemon's
        own log, else `<ids>&logType=..`, every value URL-encoded."""
        q = url_with_query("", **self.ids, logType=self.log_type, **params)[1:]
        return q if self.ids else "self&" + q


def _int_param(query: Mapping[str, str], key: str) -> Optional[int]:
    if key not in query:
        return None
    try:
        return int(query[key])
    except ValueError:
        raise LogRequestError(400, f"Error: {key} must be an integer") from None


def _log_type(query: Mapping[str, str]) -> str:
    log_type = query.get("logType", "")
    if log_type not in LOG_TYPES:
        raise LogRequestError(400, "Error: Log type must be one of " + ", ".join(LOG_TYPES))
    return log_type


def _byte_range(query: Mapping[str, str]) -> tuple[Optional[int], int]:
    """(offset, byteLength) of a log query: integers, not negative; byteLength defaults to
    100 KiB and is capped at `log_files.MAX_LOG_SLICE`."""
    offset = _int_param(query, "offset")
    length = _int_param(query, "byteLength")
    length = DEFAULT_BYTE_LENGTH if length is None else length
    if length < 0 or (offset is not None and offset < 0):
        raise LogRequestError(400, "Error: offset and byteLength must not be negative")
    return offset, min(length, log_files.MAX_LOG_SLICE)


def parse_self_log_request(query: Mapping[str, str], daemon: str) -> LogRequest:
    """Validate a query for the daemon's own log (`?self&logType=out`; the other ids are not
    looked at, as Spark's master LogPage does): 400 for a bad log type, offset or length,
    404 when this process writes no log file (`daemon_files.own_log_file`)."""
    log_type = _log_type(query)
    offset, length = _byte_range(query)
    path = daemon_files.own_log_file()
    if path is None:
        raise LogRequestError(
            404, f"Error: this {daemon} writes no log file (it was not started by "
                 f"`ember start-{daemon}` and its output is not a file)")
    return LogRequest({}, log_type, os.path.dirname(path) + os.sep, offset, length,
                      daemon=daemon, path=path)


def parse_log_request(work_dir: str, query: Mapping[str, str]) -> LogRequest:
    """Validate a log query (Spark's LogPage rules, plus the path checks in the module doc);
    raises LogRequestError (400 bad request, 404 no such log). `self` alone is the worker's
    own log (`parse_self_log_request`)."""
    app_id, exec_id, driver_id = query.get("appId"), query.get("executorId"), query.get("driverId")
    is_self = "self" in query
    if is_self and app_id is None and exec_id is None and driver_id is None:
        return parse_self_log_request(query, "worker")
    if not is_self and app_id is not None and exec_id is not None and driver_id is None:
        ids = {"appId": app_id, "executorId": exec_id}
    elif not is_self and app_id is None and exec_id is None and driver_id is not None:
        ids = {"driverId": driver_id}
    else:
        raise LogRequestError(
            400, "Error: Request must specify either application or driver identifiers")
    log_type = _log_type(query)
    offset, length = _byte_range(query)
    directory = log_files.log_dir(work_dir, ids.values())
    if directory is None:
        raise LogRequestError(400, "Error: invalid log directory "
                              + os.path.join(work_dir, *ids.values()) + os.sep)
    if not os.path.isfile(directory + log_type):
        raise LogRequestError(404, f"Error: no {log_type} log for {'/'.join(ids.values())}")
    return LogRequest(ids, log_type, directory, offset, length)


def read_request(req: LogRequest, work_dir: Optional[str] = None
                 ) -> tuple[str, int, int, int]:
    """Read the slice `req` asks for: (text, start, end, total). A work-dir log goes through
    `read_log` (which checks the directory against `work_dir` again)."""
    if req.path is not None:
        return read_log_file(req.path, req.offset, req.byte_length)
    if work_dir is None:
        raise ValueError("a work-dir log request needs the work dir")
    return read_log(work_dir, req.log_dir, req.log_type, req.offset, req.byte_length)


async def serve_log(request: web.Request, parse: Callable[[Mapping[str, str]], LogRequest], *,
                    raw: bool, work_dir: Optional[str] = None) -> web.Response:
    """`/logPage/` (raw=False) or `/log` (raw=True) of the master's and the worker's UIs:
    validate with `parse`, read off the event loop (file I/O), answer the page or the text
    under Spark's `==== Bytes a-b of n of <file> ====` header; a bad query is 400/404 text."""
    def run() -> tuple[LogRequest, tuple[str, int, int, int]]:
        req = parse(request.query)
        return req, read_request(req, work_dir)
    try:
        req, (text, start, end, total) = await asyncio.get_running_loop().run_in_executor(
            None, run)
    except LogRequestError as e:
        raise _http_error(e) from None
    if raw:
        header = f"==== Bytes {start}-{end} of {total} of {req.file} ====\n"
        return web.Response(text=header + text, content_type="text/plain")
    return html_response(render_log_page(req, text, start, end, total))


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


def _http_error(e: LogRequestError) -> web.HTTPException:
    cls = web.HTTPNotFound if e.status == 404 else web.HTTPBadRequest
    return cls(text=e.text)


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


def render_log_page(req: LogRequest, text: str, start: int, end: int, total: int) -> str:
    """Spark's LogPage (the worker's and the master's, `req.daemon`): "Showing N Bytes:
    start - end of total", with links to the previous (older) and next (newer) page of the
    same size, to the raw slice and back to the daemon's page. Everything is escaped."""
    size = req.byte_length

    def page_link(offset: int, length: int, label: str) -> Html:
        return link(f"/logPage/?{req.query(offset=offset, byteLength=length)}", label)

    older = min(size, start)
    newer = min(size, total - end)
    prev = (page_link(start - older, older, f"Previous {bytes_to_string(older)} (older)")
            if older > 0 else Html('<span class="disabled">Previous (older)</span>'))
    nxt = (page_link(end, size, f"Next {bytes_to_string(newer)} (newer)")
           if newer > 0 else Html('<span class="disabled">Next (newer)</span>'))
    raw = link(f"/log?{req.query(offset=start, byteLength=end - start)}", "Raw")
    back = link("/", f"Back to {req.daemon.capitalize()}")
    pager = Html(f'<div class="pager"><span>Showing {end - start} Bytes: '
                 f'{start} - {end} of {total}</span>{prev}{nxt}{raw}{back}</div>')
    return page(f"{req.log_type} log page for {req.name}", pager,
                Html(f'<pre class="log">{esc(text)}</pre>'), pager)


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
