"""Spark's REST monitoring API (`/api/v1`) over application status stores.

`api_get(provider, path, query)` is the whole API as a pure function of a store provider:
the live driver UI wraps its one store (`LiveStoreProvider`), the history server wraps the
stores it rebuilt from event logs, and both serve the same routes through `api_routes`.
Answers use Spark's field names; absent values are omitted and dates are written as Spark's
Jackson does (`2025-01-01T10:11:12.345GMT`). Unknown apps, jobs, stages and RDDs answer 404
and malformed query parameters 400, with Spark's message as plain text, never a stack trace.
"""
from __future__ import annotations

import io
import json
import math
import time
import zipfile
from typing import Any, Iterable, Mapping, Protocol

from ember.version import SPARK_VERSION
from ember.ui.status_store import AppStatusStore

API_ROOT = "/api/v1"
_DATE_KEYS = frozenset({"submissionTime", "completionTime", "firstTaskLaunchedTime",
                        "launchTime", "addTime", "removeTime", "startTime", "endTime",
                        "lastUpdated"})
_APP_RESOURCES = frozenset({"jobs", "stages", "executors", "allexecutors", "storage",
                            "environment"})
_JOB_STATUSES = {"running": "RUNNING", "succeeded": "SUCCEEDED", "failed": "FAILED",
                 "unknown": "UNKNOWN"}
_STAGE_STATUSES = {"active": "ACTIVE", "complete": "COMPLETE", "failed": "FAILED",
                   "pending": "PENDING", "skipped": "SKIPPED"}
_DEFAULT_QUANTILES = "0.05,0.25,0.5,0.75,0.95"


class StoreProvider(Protocol):
    """Where the API and the pages find application stores."""

    def applications(self) -> Iterable[AppStatusStore]:
        """Every application served (for /applications)."""

    def store(self, app_id: str | None, attempt_id: str | None = None
              ) -> AppStatusStore | None:
        """The store of one app (attempt); app_id None means the default app (live UI)."""


class LiveStoreProvider:
    """The driver's one running application."""

    def __init__(self, store: AppStatusStore) -> None:
        self._store = store

    def applications(self) -> list[AppStatusStore]:
        return [self._store]

    def store(self, app_id: str | None, attempt_id: str | None = None
              ) -> AppStatusStore | None:
        if app_id is None or app_id == self._store.app_id:
            return self._store
        return None


class NotFound(Exception):
    """A 404 with Spark's message."""


class BadParameter(Exception):
    """A 400 with Spark's message (its BadParameterException)."""

    def __init__(self, param: str, expected: str, actual: str) -> None:
        super().__init__(f'Bad value for parameter "{param}".  Expected a {expected}, '
                         f'got "{actual}"')


def format_api_date(epoch_ms: int) -> str:
    """Spark's REST date format, in GMT (-1, 'not yet', is 1969-12-31T23:59:59.999GMT)."""
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch_ms // 1000)) + \
        f".{epoch_ms % 1000:03d}GMT"


def to_api_json(value: Any) -> Any:
    """Store dicts -> Spark's JSON: None fields dropped (Jackson NON_ABSENT), dates as text."""
    if isinstance(value, dict):
        return {k: (format_api_date(v) if k in _DATE_KEYS and isinstance(v, int) else
                    to_api_json(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [to_api_json(v) for v in value]
    return value


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise NotFound(f"unknown {what}: {text}") from None


def _qint(query: Mapping[str, str], name: str, default: int) -> int:
    v = query.get(name)
    return int(v) if v and v.lstrip("-").isdigit() else default


def _flag(query: Mapping[str, str], name: str, default: bool) -> bool:
    v = query.get(name)
    return default if v is None else v.lower() == "true"


def _quantiles(query: Mapping[str, str]) -> list[float]:
    """?quantiles=0.05,0.5 -> doubles; finite ones only, so the answer stays valid JSON."""
    out = []
    text = query.get("quantiles")
    for s in (_DEFAULT_QUANTILES if text is None else text).split(","):
        try:
            q = float(s)
        except ValueError:
            q = math.nan
        if not math.isfinite(q):
            raise BadParameter("quantiles", "double", s)
        out.append(q)
    return out


def _statuses(query: Mapping[str, str], names: Mapping[str, str]) -> set[str] | None:
    """?status=a&status=b (repeated values arrive comma-joined) -> Spark's enum names."""
    values = [v for v in (query.get("status") or "").split(",") if v]
    return {names.get(v.lower(), v.upper()) for v in values} or None


def flat_query(pairs: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Query pairs -> {name: values joined by ','}, the form api_get and the pages take."""
    out: dict[str, str] = {}
    for k, v in pairs:
        out[k] = f"{out[k]},{v}" if k in out else v
    return out


def api_get(provider: StoreProvider, path: str, query: Mapping[str, str]) -> tuple[int, Any]:
    """Answer GET `/api/v1<path>` (query as flat_query makes it): (200, JSON-able value),
    (404, message text) or (400, message text)."""
    parts = [p for p in path.split("/") if p]
    try:
        return 200, to_api_json(_route(provider, parts, query))
    except NotFound as e:
        return 404, str(e)
    except BadParameter as e:
        return 400, str(e)


def _route(provider: StoreProvider, parts: list[str], query: Mapping[str, str]) -> Any:
    if parts == ["version"]:
        return {"spark": SPARK_VERSION}
    if not parts or parts[0] != "applications":
        raise NotFound("unknown resource: /" + "/".join(parts))
    if len(parts) == 1:
        return _applications(provider, query)
    app_id, rest = parts[1], parts[2:]
    attempt = None
    if rest and rest[0] not in _APP_RESOURCES:
        attempt, rest = rest[0], rest[1:]
    store = provider.store(app_id, attempt)
    if store is None:
        raise NotFound(f"no such app: {app_id}")
    if not rest:
        return store.application_info()
    kind, args = rest[0], rest[1:]
    if kind == "jobs":
        if not args:
            return store.jobs(_statuses(query, _JOB_STATUSES))
        job = store.job(_int(args[0], "job")) if len(args) == 1 else None
        if job is None:
            raise NotFound(f"unknown job: {args[0]}")
        return job
    if kind == "stages":
        return _stages(store, args, query)
    if kind in ("executors", "allexecutors") and not args:
        return store.executors(active_only=kind == "executors")
    if kind == "storage" and args[:1] == ["rdd"]:
        if len(args) == 1:
            return store.rdds()
        rdd = store.rdd(_int(args[1], "rdd")) if len(args) == 2 else None
        if rdd is None:
            raise NotFound(f"no rdd found w/ id {args[1]}")
        return rdd
    if kind == "environment" and not args:
        return store.environment_info()
    raise NotFound("unknown resource: /" + "/".join(rest))


def _applications(provider: StoreProvider, query: Mapping[str, str]) -> list[dict[str, Any]]:
    status = (query.get("status") or "").lower()
    apps = []
    for store in provider.applications():
        if status == "completed" and not store.completed or \
                status == "running" and store.completed:
            continue
        apps.append(store.application_info())
    apps.sort(key=lambda a: a["attempts"][0]["startTime"], reverse=True)
    limit = _qint(query, "limit", -1)
    return apps[:limit] if limit >= 0 else apps


def _stages(store: AppStatusStore, args: list[str], query: Mapping[str, str]) -> Any:
    if not args:
        return store.stages(_statuses(query, _STAGE_STATUSES), _flag(query, "details", False))
    stage_id = _int(args[0], "stage")
    details = _flag(query, "details", True)
    if len(args) == 1:
        attempts = store.stage_attempts(stage_id, details)
        if not attempts:
            raise NotFound(f"unknown stage: {stage_id}")
        return attempts
    attempt = _int(args[1], "stage attempt")
    if len(args) == 2:
        found = store.stage(stage_id, attempt, details)
    elif len(args) == 3 and args[2] == "taskList":
        found = store.tasks(stage_id, attempt, _qint(query, "offset", 0),
                            _qint(query, "length", 20), query.get("sortBy") or "ID",
                            query.get("status"))
    elif len(args) == 3 and args[2] == "taskSummary":
        found = store.task_summary(stage_id, attempt, _quantiles(query))
        if found is None and store.stage(stage_id, attempt, details=False) is not None:
            raise NotFound(f"No tasks reported metrics for {stage_id} / {attempt} yet.")
    else:
        raise NotFound("unknown resource: " + "/".join(args))
    if found is None:
        attempts = [a["attemptId"] for a in store.stage_attempts(stage_id)]
        if not attempts:
            raise NotFound(f"unknown stage: {stage_id}")
        raise NotFound(f"unknown attempt for stage {stage_id}.  Found attempts: "
                       f"[{', '.join(map(str, sorted(attempts)))}]")
    return found


def api_response(provider: StoreProvider, path: str, query: Mapping[str, str]
                 ) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of GET `/api/v1<path>`, for any HTTP server."""
    parts = [p for p in path.split("/") if p]
    if len(parts) in (3, 4) and parts[0] == "applications" and parts[-1] == "logs":
        return _event_logs(provider, parts[1], parts[2] if len(parts) == 4 else None)
    status, body = api_get(provider, path, query)
    if status != 200:
        return status, {"Content-Type": "text/plain; charset=utf-8"}, (body + "\n").encode()
    return status, {"Content-Type": "application/json"}, json.dumps(body, indent=2).encode()


def _event_logs(provider: Any, app_id: str, attempt_id: str | None
                ) -> tuple[int, dict[str, str], bytes]:
    """`/applications/<id>[/<attempt>]/logs`: the app's event log files in a zip, as Spark's
    history server gives them (a rolling log as its directory); the live UI has none to
    give (Spark: 'only available through the history server')."""
    text = {"Content-Type": "text/plain; charset=utf-8"}
    files = getattr(provider, "event_log_files", None)
    if files is None:
        return 503, text, b"Event logs are only available through the history server.\n"
    found = files(app_id, attempt_id)
    if found is None:
        return 404, text, f"no such app: {app_id}\n".encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, path in found:
            if path is None:
                z.writestr(zipfile.ZipInfo(name), b"")      # a directory entry
            else:
                from ember.ui.event_log import open_regular
                with open_regular(path) as f:      # never a symlink's target; or fsspec's
                    z.writestr(zipfile.ZipInfo(name), f.read(), zipfile.ZIP_DEFLATED)
    name = f"eventLogs-{app_id}" + (f"-{attempt_id}" if attempt_id else "") + ".zip"
    return 200, {"Content-Type": "application/octet-stream",
                 "Content-Disposition": f"attachment; filename={name}"}, buf.getvalue()


def api_routes(provider: StoreProvider) -> list[Any]:
    """aiohttp routes serving `/api/v1/...` from `provider` (the history server's)."""
    from aiohttp import web

    async def handle(request: web.Request) -> web.Response:
        status, headers, body = api_response(provider, request.match_info["tail"],
                                             flat_query(request.query.items()))
        return web.Response(status=status, body=body, headers=headers)

    return [web.get(API_ROOT + "/{tail:.*}", handle)]
