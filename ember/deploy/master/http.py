"""The master's web UI port: `/json` (Spark's JSON contract) and a minimal `/` page.

Why its own thread and event loop: the RpcEnv keeps its asyncio loop private (no public way
to run a server on it), and keeping HTTP off that loop means rendering a large `/json` never
delays a heartbeat. The UI reads the master only the way Spark's MasterPage does, with an
ask of `RequestMasterState` to the "Master" endpoint: the answer is an immutable snapshot,
built on the master's loop between two messages, so there is nothing to lock and the UI can
never change master state. Rendering and serialising then happen here.

What is served (Spark's `MasterWebUI` / `MasterPage.renderJson`):
- `GET /json`, `/json/` - the whole `writeMasterState` document;
- `GET /json/<field>...` - `{field: value}`, the field taken with Spark's pattern
  `/json/([a-zA-Z]+).*` (unknown field -> `{"<field>": ""}`); `/json/clusterutilization`
  is `writeClusterUtilization`;
- `GET /` - a minimal HTML summary (the full UI is another piece of work);
- anything else - `404: Not Found` as text; a failure inside a handler is logged and
  answered `500` as text, never with a stack trace.
JSON is pretty-printed like json4s' `pretty(render(...))` (Jackson's default pretty printer)
and served as `text/json;charset=utf-8`, as Spark's JettyUtils does, so scripts written
against Spark's UI read the same bytes.
"""
from __future__ import annotations

import asyncio
import html
import json
import logging
import re
from typing import Any, Mapping, Optional

from aiohttp import web

from ember.deploy.json_protocol import (
    cluster_utilization_json, java_date_string, master_state_json,
)
from ember.deploy.master.state import megabytes_to_string
from ember.deploy.messages import DriverState, MasterStateResponse, RequestMasterState
from ember.deploy.web import WebServerThread
from ember.rpc import RpcEndpointRef, RpcError
from ember.rpc.bind import bind_with_retries

log = logging.getLogger("ember.deploy.master.MasterWebUI")
_utils_log = logging.getLogger("ember.deploy.master.Utils")

SERVICE_NAME = "MasterUI"
JSON_CONTENT_TYPE = "text/json"
_JSON_FIELD = re.compile(r"/json/([a-zA-Z]+).*")
# Spark's default security headers for its UIs (spark.ui.xXssProtection, ...).
_SECURITY_HEADERS = {"X-Frame-Options": "SAMEORIGIN", "X-XSS-Protection": "1; mode=block",
                     "X-Content-Type-Options": "nosniff"}


# ---------------------------------------------------------------------------------------------
# JSON text exactly like Jackson's DefaultPrettyPrinter (what json4s' `pretty` uses)
# ---------------------------------------------------------------------------------------------

def jackson_pretty(value: Any) -> str:
    """Serialise like Jackson's DefaultPrettyPrinter: objects one entry per line indented by
    two spaces per object level, `"key" : value`, arrays inline (`[ 1, 2 ]`, `[ {` ... `} ]`),
    empty ones as `{ }` / `[ ]`. Non-ASCII text is written as is (UTF-8)."""
    out: list[str] = []
    _pretty(value, 0, out)
    return "".join(out)


_encode_str = json.encoder.encode_basestring   # C-accelerated, keeps non-ASCII as is
_INDENTS = ["\n" + "  " * i for i in range(64)]


def _scalar(v: Any) -> str:
    t = type(v)
    if t is str:
        return _encode_str(v)
    if t is int:
        return int.__repr__(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    return json.dumps(v, ensure_ascii=False)   # floats (and anything exotic)


def _indent(level: int) -> str:
    return _INDENTS[level] if level < len(_INDENTS) else "\n" + "  " * level


def _pretty(v: Any, level: int, out: list[str]) -> None:
    t = type(v)
    if t is dict:
        if not v:
            out.append("{ }")
            return
        inner = _indent(level + 1)
        sep = "," + inner
        out.append("{" + inner)
        first = True
        for k, item in v.items():
            if not first:
                out.append(sep)
            first = False
            out.append(_encode_str(str(k)) + " : ")
            ti = type(item)
            if ti is dict or ti is list or ti is tuple:
                _pretty(item, level + 1, out)
            else:
                out.append(_scalar(item))
        out.append(_indent(level) + "}")
    elif t is list or t is tuple:
        if not v:
            out.append("[ ]")
            return
        out.append("[ ")
        first = True
        for item in v:
            if not first:
                out.append(", ")
            first = False
            _pretty(item, level, out)   # arrays do not indent (Jackson's FixedSpaceIndenter)
        out.append(" ]")
    elif isinstance(v, dict):
        _pretty(dict(v), level, out)
    elif isinstance(v, (list, tuple)):
        _pretty(list(v), level, out)
    else:
        out.append(_scalar(v))


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

class MasterWebUI:
    """HTTP server of the master on its own thread + asyncio loop (see the module doc)."""

    def __init__(self, master_ref: RpcEndpointRef, master_url: str,
                 conf: Optional[Mapping[str, Any]] = None) -> None:
        self.master_ref = master_ref
        self.master_url = master_url
        conf = conf or {}
        self.title = str(conf.get("spark.master.ui.title") or f"Spark Master at {master_url}")
        self.port = 0
        self._server = WebServerThread("MasterWebUI")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, host: str, port: int, max_retries: int = 16) -> int:
        """Bind (with retries) and serve; returns the bound port. Raises OSError."""
        sock = bind_with_retries(SERVICE_NAME, host, port, max_retries)
        self.port = sock.getsockname()[1]
        app = web.Application(middlewares=[self._guard])
        app.router.add_get("/", self._root)
        app.router.add_get("/json", self._json)
        app.router.add_get("/json/{tail:.*}", self._json)
        self._server.start(sock, app)
        return self.port

    def stop(self) -> None:
        """Close the listening socket and connections, stop the thread. Idempotent."""
        self._server.stop()

    # -- handlers ---------------------------------------------------------------------------

    @web.middleware
    async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as e:   # 404, 405: plain text, as aiohttp words them
            headers = {k: v for k, v in e.headers.items() if k.lower() != "content-length"}
            response = web.Response(status=e.status, reason=e.reason, text=e.text,
                                    headers=headers)
        except RpcError as e:
            log.warning("Cannot answer %s %s: %s", request.method, request.path, e)
            response = web.Response(status=503, text=f"503: Master unavailable ({e})\n")
        except Exception:
            log.exception("Error serving %s %s", request.method, request.path)
            response = web.Response(status=500, text="500: Internal Server Error\n")
        for k, v in _SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        response.headers["Server"] = "Ember"   # no version banner (Spark hides Jetty's too)
        return response

    async def _master_state(self) -> MasterStateResponse:
        return await asyncio.wrap_future(self.master_ref.ask(RequestMasterState()))

    async def _json(self, request: web.Request) -> web.Response:
        state = await self._master_state()
        m = _JSON_FIELD.search(request.path)
        if m is None:
            doc = master_state_json(state)
        elif m.group(1) == "clusterutilization":
            doc = cluster_utilization_json(state)
        else:
            doc = master_state_json(state, m.group(1))
        return web.Response(text=jackson_pretty(doc), content_type=JSON_CONTENT_TYPE,
                            charset="utf-8")

    async def _root(self, request: web.Request) -> web.Response:
        state = await self._master_state()
        return web.Response(text=render_master_page(state, self.title),
                            content_type="text/html", charset="utf-8")


# ---------------------------------------------------------------------------------------------
# The minimal HTML page
# ---------------------------------------------------------------------------------------------

def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _table(anchor: str, caption: str, headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return (f'<h4 id="{anchor}">{_e(caption)} ({len(rows)})</h4>\n'
            f'<table border="1" cellpadding="4"><thead><tr>{head}</tr></thead>'
            f"<tbody>{body}</tbody></table>\n")


def render_master_page(s: MasterStateResponse, title: str) -> str:
    """Spark's MasterPage summary list plus plain tables; every value is HTML-escaped (ids,
    names and users come from remote peers)."""
    alive = [w for w in s.workers if w.isAlive()]
    cores = sum(w.cores for w in alive)
    cores_used = sum(w.coresUsed for w in alive)
    memory = sum(w.memory for w in alive)
    memory_used = sum(w.memoryUsed for w in alive)
    waiting = sum(1 for d in s.activeDrivers if d.state == DriverState.SUBMITTED)
    workers = [[w.id, f"{w.host}:{w.port}", str(w.state), f"{w.cores} ({w.coresUsed} Used)",
                f"{megabytes_to_string(w.memory)} ({megabytes_to_string(w.memoryUsed)} Used)"]
               for w in s.workers]

    def apps(lst: list) -> list[list[Any]]:
        return [[a.id, a.desc.name, a.coresGranted, megabytes_to_string(a.desc.memoryPerExecutorMB),
                 java_date_string(a.submitDate), a.desc.user, str(a.state), f"{a.duration} ms"]
                for a in lst]

    def drivers(lst: list) -> list[list[Any]]:
        return [[d.id, java_date_string(d.submitDate), d.workerId or "None", str(d.state),
                 d.desc.cores, megabytes_to_string(d.desc.mem), d.desc.command.mainClass]
                for d in lst]

    app_headers = ["Application ID", "Name", "Cores", "Memory per Executor", "Submitted Time",
                   "User", "State", "Duration"]
    driver_headers = ["Submission ID", "Submitted Time", "Worker", "State", "Cores", "Memory",
                      "Main Class"]
    rest = (f"<li><strong>REST URL:</strong> spark://{_e(s.host)}:{_e(s.restPort)} "
            "<span>(cluster mode)</span></li>\n" if s.restPort else "")
    return (
        "<!DOCTYPE html>\n<html>\n<head>\n<meta charset=\"utf-8\">\n"
        f"<title>{_e(title)}</title>\n</head>\n<body>\n<h3>{_e(title)}</h3>\n<ul>\n"
        f"<li><strong>URL:</strong> {_e(s.uri)}</li>\n{rest}"
        f"<li><strong>Workers:</strong> {len(s.workers)}</li>\n"
        f"<li><strong>Alive Workers:</strong> {len(alive)}</li>\n"
        f"<li><strong>Cores in use:</strong> {cores} Total, {cores_used} Used</li>\n"
        f"<li><strong>Memory in use:</strong> {_e(megabytes_to_string(memory))} Total, "
        f"{_e(megabytes_to_string(memory_used))} Used</li>\n"
        f"<li><strong>Applications:</strong> {len(s.activeApps)} "
        f"<a href=\"#running-app\">Running</a>, {len(s.completedApps)} "
        f"<a href=\"#completed-app\">Completed</a></li>\n"
        f"<li><strong>Drivers:</strong> {len(s.activeDrivers)} Running ({waiting} Waiting), "
        f"{len(s.completedDrivers)} Completed</li>\n"
        f"<li><strong>Status:</strong> {_e(s.status)}</li>\n</ul>\n"
        + _table("workers", "Workers", ["Worker Id", "Address", "State", "Cores", "Memory"],
                 workers)
        + _table("running-app", "Running Applications", app_headers, apps(s.activeApps))
        + _table("running-driver", "Running Drivers", driver_headers, drivers(s.activeDrivers))
        + _table("completed-app", "Completed Applications", app_headers, apps(s.completedApps))
        + _table("completed-driver", "Completed Drivers", driver_headers,
                 drivers(s.completedDrivers))
        + "</body>\n</html>\n")


__all__ = ["MasterWebUI", "jackson_pretty", "render_master_page",
           "JSON_CONTENT_TYPE"]
