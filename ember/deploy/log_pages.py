"""The log pages of the master's and the worker's UIs: `/logPage/` and `/log`.

Why a module shared by both daemons: Spark's master and worker serve the same LogPage (the
worker for executors' and drivers' logs in its work dir, both for the daemon's own log with
`?self&logType=out`); one parser and one renderer keep their rules identical, and living
beside the daemons instead of inside one keeps `deploy/master` and `deploy/worker` from
importing each other.

Log files are read straight from the work dir - `<workDir>/<appId>/<executorId>/<logType>`
or `<workDir>/<driverId>/<logType>` - and the query names them, so it is checked before any
file is touched, by the same rule `ember logs` goes through (log_files.log_dir), and the
file must exist; a bad request is answered 400 and a missing log 404 with a one-line text,
never a file outside. `/logPage/` pages through a log by byte offset as Spark's LogPage does
(`offset`, `byteLength`, default the last 100 KiB); `/log` answers the same slice as plain
text under Spark's `==== Bytes a-b of n of <file> ====` header.
"""
from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from aiohttp import web

from ember.deploy import daemon as daemon_files
from ember.deploy import log_files
from ember.util.units import bytes_to_string
from ember.web.pages import Html, esc, html_response, link, page, url_with_query

log = logging.getLogger("ember.deploy.worker.WorkerWebUI")

__all__ = ["read_log", "read_log_file", "parse_log_request", "parse_self_log_request",
           "read_request", "serve_log", "LogRequest", "LogRequestError", "render_log_page",
           "LOG_TYPES", "DEFAULT_BYTE_LENGTH", "SELF_LOG_QUERY"]

LOG_TYPES = ("stderr", "stdout", "out")
DEFAULT_BYTE_LENGTH = 100 * 1024     # Spark's LogPage defaultBytes
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


def _http_error(e: LogRequestError) -> web.HTTPException:
    cls = web.HTTPNotFound if e.status == 404 else web.HTTPBadRequest
    return cls(text=e.text)


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
