"""The master's web UI port: Spark's MasterPage and ApplicationPage, `/json`, kill buttons
and Prometheus metrics.

Why its own thread and event loop: the RpcEnv keeps its asyncio loop private (no public way
to run a server on it), and keeping HTTP off that loop means rendering a large `/json` never
delays a heartbeat. The UI reads the master only the way Spark's MasterPage does, with an
ask of `RequestMasterState` to the "Master" endpoint: the answer is an immutable snapshot,
built on the master's loop between two messages, so there is nothing to lock. It changes
master state only through the asks a kill button sends (`RequestKillApplication`,
`RequestKillDriver`). Rendering and serialising happen here.

What is served (Spark's `MasterWebUI`, `MasterPage`, `ApplicationPage`):
- `GET /` - summary, workers, running/completed applications and drivers, kill buttons;
- `GET /app/?appId=<id>` - one application and its executors (404 page if unknown);
- `POST /app/kill/`, `POST /driver/kill/` (`id=..&terminate=true`) - only with
  spark.ui.killEnabled (default true; else 403); redirect to `/`. Other methods get 405;
- `GET /json`, `/json/` - the whole `writeMasterState` document;
- `GET /json/<field>...` - `{field: value}`, the field taken with Spark's pattern
  `/json/([a-zA-Z]+).*` (unknown field -> `{"<field>": ""}`); `/json/clusterutilization`
  is `writeClusterUtilization`;
- `GET /metrics/prometheus` (and Spark's path `/metrics/master/prometheus`) - Prometheus text;
- `GET /logPage/?self&logType=out` - the master's own log, paged by byte offset (`offset`,
  `byteLength`, default the last 100 KiB), and `GET /log?self&logType=out` - the same slice
  as plain text (Spark 4's master LogPage and `/log`); linked from the summary's Status
  line. Parsing, reading and rendering are `ember.deploy.log_pages`, shared with the
  worker, so both daemons page logs alike; a master whose output is not a file answers 404
  text;
- anything else - `404: Not Found` as text; a failure inside a handler is logged and
  answered `500` as text, never with a stack trace (`ember.web.pages.ui_middleware`).
JSON is pretty-printed like json4s' `pretty(render(...))` (Jackson's default pretty printer)
and served as `text/json;charset=utf-8`, as Spark's JettyUtils does, so scripts written
against Spark's UI read the same bytes.

Security (`ember.web.security`): the UI binds the host it is given; every request's Host
must name this master; with `spark.authenticate=true` every page, `/json`, log and metrics
request needs a bearer token or the login cookie, checked against Spark's ACLs (view; modify
for the kill buttons); a kill POST must carry the page's CSRF token and come from this
master's own Origin (deviation from Spark, which checks neither). `spark.ssl.standalone.*`
serves it over HTTPS. Commands and environments shown are redacted with
spark.redaction.regex.
"""
from __future__ import annotations

import asyncio
import functools
import html
import json
import logging
import re
from dataclasses import replace
from typing import Any, Callable, Mapping, Optional
from urllib.parse import quote

from aiohttp import web

from ember.deploy.json_protocol import (
    cluster_utilization_json, driver_main_class, master_state_json,
)
from ember import config
from ember.util.units import megabytes_to_string
from ember.deploy.messages import (
    ApplicationState, ApplicationSummary, DriverState, DriverSummary, ExecutorState,
    ExecutorSummary, MasterStateResponse, RecoveryState, RequestKillApplication,
    RequestKillDriver, RequestMasterState, WorkerState, WorkerSummary,
)
from ember.web.server import WebServerThread, bind_web, csrf_token, security_middleware
from ember.deploy.log_pages import (
    SELF_LOG_QUERY, LogRequest, parse_self_log_request, serve_log,
)
from ember.web.security import CSRF_FIELD, HttpGuard
from ember.rpc import RpcEndpointRef
from ember.web.pages import (
    Html, PrometheusText, esc, format_date, format_duration, format_resource_usage,
    format_resources, html_response, link, not_found, page, prometheus_response, table,
    ui_middleware, url_with_query,
)

log = logging.getLogger("ember.deploy.master.MasterWebUI")

SERVICE_NAME = "MasterUI"
JSON_CONTENT_TYPE = "text/json"
_JSON_FIELD = re.compile(r"/json/([a-zA-Z]+).*")
# Pages format the same few sizes thousands of times (one per app / worker row).
_mb = functools.lru_cache(maxsize=1024)(megabytes_to_string)


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
                 conf: Optional[Mapping[str, Any]] = None, *,
                 current_leader: Optional[Callable[[], Optional[str]]] = None) -> None:
        self.master_ref = master_ref
        self.master_url = master_url
        # The leader election's view of who leads (LeaderElectionAgent.current_leader): a
        # standby names the leader with it. Blocking, so it runs on an executor thread.
        self.current_leader = current_leader
        conf = conf or {}
        self.title = str(conf.get("spark.master.ui.title") or f"Spark Master at {master_url}")
        self.kill_enabled = config.read(conf, "spark.ui.killEnabled")
        history = (conf.get("spark.master.ui.historyServerUrl")
                   or conf.get("spark.master.historyServerUrl"))
        self.history_server_url: Optional[str] = str(history).rstrip("/") if history else None
        self.conf = conf
        self.port = 0
        self.http_port = 0
        self.scheme = "http"
        self.guard: Optional[HttpGuard] = None
        self._server = WebServerThread("MasterWebUI")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, host: str, port: int, max_retries: int = 16,
              public_hosts: tuple[str, ...] = ()) -> int:
        """Bind `host` (with retries) and serve; returns the port the UI is served on (with
        spark.ssl.standalone, the HTTPS port; `port` then redirects to it). Raises OSError,
        or ValueError for a bad security configuration (secret, TLS files)."""
        guard = HttpGuard(self.conf, host, public_hosts=public_hosts)
        sock, plain, tls = bind_web(SERVICE_NAME, host, port, max_retries, self.conf,
                                    "standalone")
        guard.tls = tls is not None
        self.port = guard.port = sock.getsockname()[1]
        self.http_port = plain.getsockname()[1] if plain is not None else self.port
        self.scheme = "https" if tls is not None else "http"
        self.guard = guard
        app = web.Application(middlewares=[ui_middleware(log, "Master"),
                                           security_middleware(guard)])
        r = app.router
        r.add_get("/", self._root)
        for path in ("/app", "/app/"):
            r.add_get(path, self._app)
        for path in ("/app/kill", "/app/kill/"):
            r.add_post(path, self._kill_app)
        for path in ("/driver/kill", "/driver/kill/"):
            r.add_post(path, self._kill_driver)
        for path in ("/metrics/prometheus", "/metrics/master/prometheus"):
            r.add_get(path, self._metrics)
        for path in ("/logPage", "/logPage/"):
            r.add_get(path, self._log_page)
        for path in ("/log", "/log/"):
            r.add_get(path, self._log)
        r.add_get("/json", self._json)
        r.add_get("/json/{tail:.*}", self._json)
        self._server.start(sock, app, ssl_context=tls, limits=guard.limits,
                           redirect=(plain, guard) if plain is not None else None)
        return self.port

    def stop(self) -> None:
        """Close the listening socket and connections, stop the thread. Idempotent."""
        self._server.stop()

    # -- handlers ---------------------------------------------------------------------------

    async def _ask(self, msg: Any) -> Any:
        return await asyncio.wrap_future(self.master_ref.ask(msg))

    async def _master_state(self) -> MasterStateResponse:
        """The master's snapshot; on a standby, with the leader the election names (the
        state machine only knows itself)."""
        state = await self._ask(RequestMasterState())
        if state.leaderUrl is None and self.current_leader is not None:
            leader = await asyncio.get_running_loop().run_in_executor(None, self.current_leader)
            if leader:
                state = replace(state, leaderUrl=leader)
        return state

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
        return html_response(render_master_page(state, self.title,
                                                kill_enabled=self.kill_enabled,
                                                history_server_url=self.history_server_url,
                                                csrf=csrf_token(self.guard, request)))

    async def _app(self, request: web.Request) -> web.Response:
        app_id = request.query.get("appId", "")
        state = await self._ask(RequestMasterState())
        document = render_app_page(state, app_id)
        if document is None:
            return not_found(f"No running application with ID {app_id}")
        return html_response(document)

    async def _log_page(self, request: web.Request) -> web.Response:
        return await serve_log(request, _parse_own_log, raw=False)

    async def _log(self, request: web.Request) -> web.Response:
        return await serve_log(request, _parse_own_log, raw=True)

    async def _metrics(self, request: web.Request) -> web.Response:
        return prometheus_response(master_metrics(await self._master_state()))

    async def _kill_app(self, request: web.Request) -> web.Response:
        return await self._kill(request, RequestKillApplication)

    async def _kill_driver(self, request: web.Request) -> web.Response:
        return await self._kill(request, RequestKillDriver)

    async def _kill(self, request: web.Request, message: Callable[[str], Any]) -> web.Response:
        """Spark's handleKillRequest: with killEnabled and `terminate=true`, ask the master to
        kill `id`; then back to `/` whatever the outcome (the page shows it)."""
        if not self.kill_enabled:
            raise web.HTTPForbidden(text="403: Killing is disabled (spark.ui.killEnabled)\n")
        form = await request.post()   # Origin, credentials, ACL and CSRF: security_middleware
        target = str(form.get("id", ""))
        if target and str(form.get("terminate", "false")).strip().lower() == "true":
            await self._ask(message(target))
        raise web.HTTPFound("/")


def _parse_own_log(query: Mapping[str, str]) -> LogRequest:
    return parse_self_log_request(query, "master")


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------

def _summary(items: list[tuple[str, Any]]) -> Html:
    return Html('<ul class="summary">' + "".join(
        f"<li><strong>{esc(k)}:</strong> {esc(v)}</li>" for k, v in items) + "</ul>")


def _section(anchor: str, caption: str, headers: list[str], rows: list[list[Any]]) -> Html:
    return Html(f'<h4 id="{anchor}">{esc(caption)} ({len(rows)})</h4>\n'
                + table(headers, rows))


def _app_link(app_id: str) -> Html:
    """Link to the application page (hot: one per row of possibly thousands; a quoted id
    needs no HTML escaping)."""
    return Html(f'<a href="/app/?appId={quote(app_id, safe="")}">{html.escape(app_id)}</a>')


def _kill_form(action: str, what: str, target_id: str, csrf: str) -> Html:
    """Spark's (kill) link: a POST form submitted after a JavaScript confirm(), carrying the
    page's CSRF token. The id goes through json.dumps (a JS string literal), then
    HTML-escaping (an attribute value)."""
    question = json.dumps(f"Are you sure you want to kill {what} {target_id} ?")
    onclick = esc(f"if (window.confirm({question})) {{ this.parentNode.submit(); }} "
                  "return false;")
    return Html(f'<form class="kill" action="{action}" method="POST">'
                f'<input type="hidden" name="id" value="{esc(target_id)}">'
                '<input type="hidden" name="terminate" value="true">'
                f'<input type="hidden" name="{CSRF_FIELD}" value="{esc(csrf)}">'
                f'<a href="#" onclick="{onclick}">(kill)</a></form>')


def _worker_link(worker: Optional[WorkerSummary], worker_id: Optional[str]) -> Html:
    """Spark links a worker only while it is alive (a dead one's UI is gone)."""
    if worker_id is None:
        return esc("None")
    if worker is not None and worker.isAlive():
        return link(worker.webUiAddress, worker_id)
    return esc(worker_id)


def _log_links(worker: Optional[WorkerSummary], **ids: Any) -> Html:
    """stdout / stderr links to a worker's log page, if that worker is still known."""
    if worker is None:
        return Html("")
    base = worker.webUiAddress.rstrip("/") + "/logPage/"
    return Html(" ".join(link(url_with_query(base, **ids, logType=t), t)
                         for t in ("stdout", "stderr")))


def _resources_in_use(alive: list[WorkerSummary]) -> str:
    """Spark's formatMasterResourcesInUse: `1 / 4 gpu` (used / total over alive workers)."""
    total: dict[str, int] = {}
    used: dict[str, int] = {}
    for w in alive:
        for name, info in w.resources.items():
            total[name] = total.get(name, 0) + len(info.addresses)
        for name, info in w.resourcesUsed.items():
            used[name] = used.get(name, 0) + len(info.addresses)
    return ", ".join(f"{used.get(n, 0)} / {t} {n}" for n, t in total.items())


_APP_HEADERS = ["Application ID", "Name", "Cores", "Memory per Executor",
                "Resources Per Executor", "Submitted Time", "User", "State", "Duration"]
_DRIVER_HEADERS = ["Submission ID", "Submitted Time", "Worker", "State", "Cores", "Memory",
                   "Resources", "Main Class", "Logs"]
_KILLABLE_DRIVER = (DriverState.RUNNING, DriverState.SUBMITTED, DriverState.RELAUNCHING)


def render_master_page(s: MasterStateResponse, title: str, *, kill_enabled: bool = True,
                       history_server_url: Optional[str] = None, csrf: str = "") -> str:
    """Spark's MasterPage. Every value is HTML-escaped: ids, names, users, main classes and
    URLs come from remote peers. `csrf` goes into the kill forms."""
    workers = {w.id: w for w in s.workers}
    alive = [w for w in s.workers if w.isAlive()]
    counts = {st: 0 for st in WorkerState}
    for w in s.workers:
        counts[w.state] += 1
    waiting = sum(1 for d in s.activeDrivers if d.state == DriverState.SUBMITTED)
    items: list[tuple[str, Any]] = [("URL", s.uri)]
    if s.restUri is not None:
        items.append(("REST URL", Html(f'{esc(s.restUri)} <span class="rest-uri">'
                                       "(cluster mode)</span>")))
    items += [
        ("Alive Workers", len(alive)),
        ("Workers", f"{counts[WorkerState.ALIVE]} Alive, {counts[WorkerState.DEAD]} Dead, "
                    f"{counts[WorkerState.DECOMMISSIONED]} Decommissioned, "
                    f"{counts[WorkerState.UNKNOWN]} Unknown"),
        ("Cores in use", f"{sum(w.cores for w in alive)} Total, "
                         f"{sum(w.coresUsed for w in alive)} Used"),
        ("Memory in use", f"{_mb(sum(w.memory for w in alive))} Total, "
                          f"{_mb(sum(w.memoryUsed for w in alive))} Used"),
        ("Resources in use", _resources_in_use(alive)),
        ("Applications", Html(f'{len(s.activeApps)} <a href="#running-app">Running</a>, '
                              f'{len(s.completedApps)} <a href="#completed-app">Completed</a>')),
        ("Drivers", f"{len(s.activeDrivers)} Running ({waiting} Waiting), "
                    f"{len(s.completedDrivers)} Completed"),
        ("Status", Html(f"{esc(s.status)} ({link('/logPage/?' + SELF_LOG_QUERY, 'Log')})")),
    ]
    if s.leaderUrl is not None:
        items.append(("Leader", s.leaderUrl))
    if s.epoch or s.recoveryDurationMs >= 0:
        last = (f"{s.recoveryDurationMs} ms" if s.recoveryDurationMs >= 0 else "none")
        items.append(("Recovery", f"leadership epoch {s.epoch}, last recovery took {last}"))
    worker_rows = [[_worker_link(w, w.id), w.hostPort, w.state,
                    f"{w.cores} ({w.coresUsed} Used)",
                    f"{_mb(w.memory)} ({_mb(w.memoryUsed)} Used)",
                    format_resource_usage(w.resources, w.resourcesUsed)] for w in s.workers]

    def app_row(a: ApplicationSummary) -> list[Any]:
        app_id = _app_link(a.id)
        if kill_enabled and a.state in (ApplicationState.RUNNING, ApplicationState.WAITING):
            app_id = Html(app_id + _kill_form("/app/kill/", "application", a.id, csrf))
        if not a.state.isFinished():
            name = link(a.desc.appUiUrl, a.desc.name)
        elif history_server_url:
            name = link(f"{history_server_url}/history/{a.id}", a.desc.name)
        else:
            name = esc(a.desc.name)
        reqs = ", ".join(f"{r.amount} {r.resourceName}" for r in a.desc.resourceReqsPerExecutor)
        return [app_id, name, a.coresGranted, _mb(a.desc.memoryPerExecutorMB),
                reqs, format_date(a.submitDate), a.desc.user, a.state,
                format_duration(a.duration)]

    def driver_row(d: DriverSummary) -> list[Any]:
        driver_id = esc(d.id)
        if kill_enabled and d.state in _KILLABLE_DRIVER:
            driver_id = Html(driver_id + _kill_form("/driver/kill/", "driver", d.id, csrf))
        worker = workers.get(d.workerId) if d.workerId else None
        state: Any = d.state
        if d.waitReason:
            state = Html(f'{esc(d.state)}<br><span class="wait-reason">waiting: '
                         f'{esc(d.waitReason)}</span>')
        return [driver_id, format_date(d.submitDate), _worker_link(worker, d.workerId),
                state, d.desc.cores, _mb(d.desc.mem),
                format_resources(d.resources), driver_main_class(d.desc),
                _log_links(worker, driverId=d.id)]

    return page(
        title, _summary(items),
        _section("workers", "Workers", ["Worker Id", "Address", "State", "Cores", "Memory",
                                        "Resources"], worker_rows),
        _section("running-app", "Running Applications", _APP_HEADERS,
                 [app_row(a) for a in s.activeApps]),
        _section("running-driver", "Running Drivers", _DRIVER_HEADERS,
                 [driver_row(d) for d in s.activeDrivers]),
        _section("completed-app", "Completed Applications", _APP_HEADERS,
                 [app_row(a) for a in s.completedApps]),
        _section("completed-driver", "Completed Drivers", _DRIVER_HEADERS,
                 [driver_row(d) for d in s.completedDrivers]))


def render_app_page(s: MasterStateResponse, app_id: str) -> Optional[str]:
    """Spark's ApplicationPage for `app_id` (running or completed); None if unknown.
    Executors still running or EXITED are the summary; killed/failed/lost ones are listed
    as removed, as Spark does."""
    app = next((a for a in [*s.activeApps, *s.completedApps] if a.id == app_id), None)
    if app is None:
        return None
    workers = {w.id: w for w in s.workers}
    d = app.desc
    if d.maxCores is None:
        cores = f"Unlimited ({app.coresGranted} granted)"
    else:
        cores = f"{d.maxCores} ({app.coresGranted} granted, {d.maxCores - app.coresGranted} left)"
    items: list[tuple[str, Any]] = [
        ("ID", app.id), ("Name", d.name), ("User", d.user), ("Cores", cores),
        ("Executor Memory - Default Resource Profile", _mb(d.memoryPerExecutorMB)),
        ("Submit Date", format_date(app.submitDate)), ("State", app.state),
        ("Duration", format_duration(app.duration))]
    if not app.state.isFinished():
        ui = link(d.appUiUrl, "Application Detail UI") if d.appUiUrl.strip() else "Disabled"
        items.append(("Application UI", ui))
    current: list[ExecutorSummary] = []
    removed: list[ExecutorSummary] = []
    for e in {e.id: e for e in [*app.removedExecutors, *app.executors]}.values():
        live = not e.state.isFinished() or e.state == ExecutorState.EXITED
        (current if live else removed).append(e)

    def row(e: ExecutorSummary) -> list[Any]:
        worker = workers.get(e.workerId)
        return [e.id, _worker_link(worker, e.workerId), e.cores, _mb(e.memory),
                e.rpId, format_resources(e.resources), e.state,
                _log_links(worker, appId=e.appId, executorId=e.id)]

    headers = ["ExecutorID", "Worker", "Cores", "Memory", "Resource Profile Id", "Resources",
               "State", "Logs"]
    sections = [_summary(items), Html('<p><a href="/">Back to Master</a></p>'),
                _section("executors", "Executor Summary", headers, [row(e) for e in current])]
    if removed:
        sections.append(_section("removed-executors", "Removed Executors", headers,
                                 [row(e) for e in removed]))
    return page(f"Application: {d.name}", *sections)


def master_metrics(s: MasterStateResponse) -> PrometheusText:
    """The master's gauges in Prometheus text format (totals over ALIVE workers, as /json)."""
    alive = [w for w in s.workers if w.isAlive()]
    worker_counts = {st: 0 for st in WorkerState}
    for w in s.workers:
        worker_counts[w.state] += 1
    cores = sum(w.cores for w in alive)
    cores_used = sum(w.coresUsed for w in alive)
    app_waiting = sum(1 for a in s.activeApps if a.state == ApplicationState.WAITING)
    drv_waiting = sum(1 for d in s.activeDrivers if d.state == DriverState.SUBMITTED)
    mib = 1024 * 1024
    return (PrometheusText()
            .add("ember_master_workers", "gauge", "Workers known to the master, by state.",
                 [({"state": str(st).lower()}, n) for st, n in worker_counts.items()])
            .add("ember_master_cores_total", "gauge", "Cores of alive workers.", cores)
            .add("ember_master_cores_used", "gauge", "Cores in use on alive workers.",
                 cores_used)
            .add("ember_master_cores_free", "gauge", "Free cores on alive workers.",
                 cores - cores_used)
            .add("ember_master_memory_total_bytes", "gauge", "Memory of alive workers.",
                 sum(w.memory for w in alive) * mib)
            .add("ember_master_memory_used_bytes", "gauge", "Memory in use on alive workers.",
                 sum(w.memoryUsed for w in alive) * mib)
            .add("ember_master_applications", "gauge", "Applications, by state.",
                 [({"state": "waiting"}, app_waiting),
                  ({"state": "running"}, len(s.activeApps) - app_waiting),
                  ({"state": "completed"}, len(s.completedApps))])
            .add("ember_master_drivers", "gauge", "Cluster-mode drivers, by state.",
                 [({"state": "waiting"}, drv_waiting),
                  ({"state": "running"}, len(s.activeDrivers) - drv_waiting),
                  ({"state": "completed"}, len(s.completedDrivers))])
            .add("ember_master_executors", "gauge", "Executors of running applications.",
                 sum(len(a.executors) for a in s.activeApps))
            .add("ember_master_alive", "gauge", "1 if this master is the ALIVE leader.",
                 1 if s.status == RecoveryState.ALIVE else 0)
            .add("ember_master_leader", "gauge",
                 "1 if this master leads (ALIVE or recovering), 0 if it is a STANDBY.",
                 0 if s.status == RecoveryState.STANDBY else 1)
            .add("ember_master_recovery_state", "gauge",
                 "1 for the master's current recovery state (Spark's RecoveryState).",
                 [({"state": str(st)}, 1 if st == s.status else 0) for st in RecoveryState])
            .add("ember_master_leader_epoch", "gauge",
                 "Leadership epoch of this master (0: no recovery mode).", s.epoch)
            .add("ember_master_last_recovery_duration_seconds", "gauge",
                 "How long this master's last recovery took (NaN: none yet).",
                 s.recoveryDurationMs / 1000 if s.recoveryDurationMs >= 0 else float("nan")))


__all__ = ["MasterWebUI", "jackson_pretty", "render_master_page", "render_app_page",
           "master_metrics", "JSON_CONTENT_TYPE"]
