"""The worker's web UI (Spark §4.7): ``/``, ``/json``, ``/logPage/`` and ``/log``.

Why its own thread and loop: the RpcEnv does not expose its event loop, and a slow HTTP
client must never delay the worker's messages. The UI only *reads* the worker's state, by
asking the Worker endpoint for a ``WorkerStateResponse`` snapshot (like Spark's WorkerPage),
so it needs no lock and cannot change anything. Log files are read straight from the work
dir, after checking that the requested directory really is inside it.

Every user-controlled string is HTML-escaped on ``/``; ``/logPage/`` answers plain text (the
log bytes), ``/log`` Spark's plain-text format with its ``==== Bytes a-b of n of <file> ====``
header. Unknown paths get aiohttp's 404; an unexpected error a 500 with a one-line message,
never a stack trace.
"""
from __future__ import annotations

import asyncio
import html
import json
import logging
import os
from typing import Any, Optional
from urllib.parse import quote

from aiohttp import web

from ember.deploy.json_protocol import worker_state_json
from ember.deploy.messages import RequestWorkerState, WorkerStateResponse
from ember.deploy.web import WebServerThread
from ember.rpc import RpcEndpointRef
from ember.rpc.bind import bind_with_retries

log = logging.getLogger("ember.deploy.worker.WorkerWebUI")

__all__ = ["WorkerWebUI", "read_log", "LOG_TYPES", "DEFAULT_BYTE_LENGTH"]

LOG_TYPES = ("stderr", "stdout", "out")
DEFAULT_BYTE_LENGTH = 100 * 1024
SERVICE_NAME = "WorkerUI"


def _is_in_directory(parent: str, child: str) -> bool:
    parent = os.path.realpath(parent)
    child = os.path.realpath(child)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def read_log(work_dir: str, log_dir: str, log_type: str, offset: Optional[int] = None,
             byte_length: int = DEFAULT_BYTE_LENGTH) -> tuple[str, int, int, int]:
    """Spark's LogPage.getLog: (text, start, end, total). The text is an error message
    (start=end=total=0) for a bad log type, a directory outside the work dir or a file
    that cannot be read. Without `offset`, the last `byte_length` bytes."""
    if log_type not in LOG_TYPES:
        return ("Error: Log type must be one of " + ", ".join(LOG_TYPES), 0, 0, 0)
    normalized = os.path.normpath(os.path.abspath(log_dir))
    if not _is_in_directory(work_dir, normalized):
        return (f"Error: invalid log directory {log_dir}", 0, 0, 0)
    path = os.path.join(normalized, log_type)
    try:
        total = os.path.getsize(path)
        start = total - byte_length if offset is None else offset
        start = min(max(start, 0), total)
        end = min(start + max(byte_length, 0), total)
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        return (data.decode("utf-8", errors="replace"), start, end, total)
    except OSError as e:
        log.error("Error getting %s logs from directory %s: %s", log_type, log_dir, e)
        return (f"Error getting logs due to exception: {e.strerror or e}", 0, 0, 0)


def _mb(mb: int) -> str:
    from ember.deploy.worker.worker import megabytes_to_string
    return megabytes_to_string(mb)


class WorkerWebUI:
    """An aiohttp server on its own thread. ``start()`` binds (trying successive ports when
    busy) and returns once it is serving; ``url`` is then ``http://<public host>:<port>``."""

    def __init__(self, worker_ref: RpcEndpointRef, work_dir: str, host: str, port: int, *,
                 public_host: Optional[str] = None, max_retries: int = 16,
                 ask_timeout: float = 30.0) -> None:
        self.worker_ref = worker_ref
        self.work_dir = os.path.abspath(work_dir)
        self.host = host
        self.requested_port = port
        self.public_host = public_host or host
        self.max_retries = max_retries
        self.ask_timeout = ask_timeout
        self.bound_port: Optional[int] = None
        self._server = WebServerThread("worker-web-ui")

    @property
    def url(self) -> str:
        host = f"[{self.public_host}]" if ":" in self.public_host else self.public_host
        return f"http://{host}:{self.bound_port}"

    # -- server lifecycle ------------------------------------------------------------------

    def start(self) -> "WorkerWebUI":
        sock = bind_with_retries(SERVICE_NAME, self.host, self.requested_port,
                                 self.max_retries)
        self.bound_port = sock.getsockname()[1]
        app = web.Application(middlewares=[_errors_middleware])
        app.router.add_get("/", self._index)
        app.router.add_get("/json", self._json)
        app.router.add_get("/json/", self._json)
        app.router.add_get("/logPage", self._log_page)
        app.router.add_get("/logPage/", self._log_page)
        app.router.add_get("/log", self._log)
        app.router.add_get("/log/", self._log)
        try:
            self._server.start(sock, app)
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
        state = await self._state()
        return web.Response(text=json.dumps(worker_state_json(state), indent=2),
                            content_type="text/json")

    def _log_dir(self, request: web.Request) -> tuple[Optional[str], Optional[str]]:
        """(log dir, error) from appId+executorId or driverId (Spark's LogPage rules)."""
        q = request.query
        app_id, exec_id, driver_id = q.get("appId"), q.get("executorId"), q.get("driverId")
        if app_id is not None and exec_id is not None and driver_id is None:
            return os.path.join(self.work_dir, app_id, exec_id) + os.sep, None
        if app_id is None and exec_id is None and driver_id is not None:
            return os.path.join(self.work_dir, driver_id) + os.sep, None
        return None, "Request must specify either application or driver identifiers"

    def _log_request(self, request: web.Request) -> tuple[str, int, int, int, str]:
        q = request.query
        log_type = q.get("logType", "")
        try:
            offset = int(q["offset"]) if "offset" in q else None
            length = int(q["byteLength"]) if "byteLength" in q else DEFAULT_BYTE_LENGTH
        except ValueError:
            raise web.HTTPBadRequest(text="Error: offset and byteLength must be integers")
        log_dir, error = self._log_dir(request)
        if log_dir is None:
            raise web.HTTPBadRequest(text=f"Error: {error}")
        text, start, end, total = read_log(self.work_dir, log_dir, log_type, offset, length)
        return text, start, end, total, log_dir

    async def _log_page(self, request: web.Request) -> web.Response:
        text, *_ = await asyncio.get_running_loop().run_in_executor(
            None, self._log_request, request)
        return web.Response(text=text, content_type="text/plain")

    async def _log(self, request: web.Request) -> web.Response:
        text, start, end, total, log_dir = await asyncio.get_running_loop().run_in_executor(
            None, self._log_request, request)
        log_type = request.query.get("logType", "")
        header = f"==== Bytes {start}-{end} of {total} of {log_dir}{log_type} ====\n"
        return web.Response(text=header + text, content_type="text/plain")

    async def _index(self, request: web.Request) -> web.Response:
        s = await self._state()
        return web.Response(text=render_index(s, self.url), content_type="text/html")


@web.middleware
async def _errors_middleware(request: web.Request, handler: Any) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException:
        raise
    except Exception as e:   # a one-line message, never a stack trace
        log.warning("Web UI request %s failed: %s: %s", request.path, type(e).__name__, e)
        return web.Response(status=500, text=f"Error: {type(e).__name__}: {e}",
                            content_type="text/plain")


def _e(v: Any) -> str:
    return html.escape(str(v), quote=True)


def _safe_link(url: str) -> Optional[str]:
    return url if isinstance(url, str) and url.startswith(("http://", "https://")) else None


def _executor_rows(executors: list, ui_url: str) -> str:
    rows = []
    for e in executors:
        q = f"appId={quote(e.appId, safe='')}&executorId={e.execId}"
        rows.append(
            "<tr>"
            f"<td>{_e(e.execId)}</td><td>{_e(e.state)}</td><td>{_e(e.cores)}</td>"
            f"<td>{_e(_mb(e.memory))}</td>"
            f"<td>ID: {_e(e.appId)}<br>Name: {_e(e.appDesc.name)}<br>"
            f"User: {_e(e.appDesc.user)}</td>"
            f"<td><a href=\"logPage/?{_e(q)}&amp;logType=stdout\">stdout</a> "
            f"<a href=\"logPage/?{_e(q)}&amp;logType=stderr\">stderr</a></td>"
            "</tr>")
    head = ("<tr><th>ExecutorID</th><th>State</th><th>Cores</th><th>Memory</th>"
            "<th>Job Details</th><th>Logs</th></tr>")
    return f"<table border=\"1\">{head}{''.join(rows)}</table>"


def render_index(s: WorkerStateResponse, ui_url: str) -> str:
    """The worker page: id, master, resources, running and finished executors."""
    master_link = _safe_link(s.masterWebUiUrl)
    back = (f"<p><a href=\"{_e(master_link)}\">Back to Master</a></p>" if master_link else "")
    return (
        "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
        f"<title>Spark Worker at {_e(s.host)}:{_e(s.port)}</title></head><body>"
        f"<h1>Spark Worker at {_e(s.host)}:{_e(s.port)}</h1>"
        "<ul>"
        f"<li><strong>ID:</strong> {_e(s.workerId)}</li>"
        f"<li><strong>Master URL:</strong> {_e(s.masterUrl)}</li>"
        f"<li><strong>Cores:</strong> {_e(s.cores)} ({_e(s.coresUsed)} Used)</li>"
        f"<li><strong>Memory:</strong> {_e(_mb(s.memory))} ({_e(_mb(s.memoryUsed))} Used)</li>"
        "</ul>"
        f"{back}"
        f"<h2>Running Executors ({len(s.executors)})</h2>"
        f"{_executor_rows(s.executors, ui_url)}"
        f"<h2>Finished Executors ({len(s.finishedExecutors)})</h2>"
        f"{_executor_rows(s.finishedExecutors, ui_url)}"
        "</body></html>")
