"""The master's and worker's `/json` documents, key for key as Spark's `deploy/JsonProtocol`.

Why a module of its own: monitoring scripts and tests written against Spark's standalone JSON
(`curl master:8080/json`) must work unchanged, so the keys, their order and their types are a
contract: app `starttime` is a number but driver `starttime` a *string*, `submitdate` is
`java.util.Date.toString` text, totals count ALIVE workers only while `workers` lists all,
`resources` is a list with one object per alive worker. The functions take the immutable
snapshots of `ember.deploy.messages` (what RequestMasterState / RequestWorkerState return),
so the web UI renders without touching live daemon state; `master_state_json` also accepts a
`MasterState` and snapshots it. Results are plain dicts; `json.dumps` keeps insertion order.
"""
from __future__ import annotations

import time
from typing import Any, Optional, Union

from ember.deploy.messages import (
    ApplicationDescription, ApplicationSummary, DriverDescription, DriverState, DriverSummary,
    ExecutorRunnerSummary, MasterStateResponse, ResourceInformation, ResourceRequirement,
    WorkerStateResponse, WorkerSummary,
)

_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")

MASTER_JSON_FIELDS = ("url", "workers", "aliveworkers", "cores", "coresused", "memory",
                      "memoryused", "resources", "resourcesused", "activeapps", "completedapps",
                      "activedrivers", "completeddrivers", "status", "leaderurl")


def java_date_string(epoch_ms: int) -> str:
    """`java.util.Date.toString` in the local time zone: 'Tue Nov 04 10:11:12 UTC 2025'."""
    t = time.localtime(epoch_ms / 1000.0)
    zone = t.tm_zone or time.strftime("%Z", t)
    return (f"{_DAYS[t.tm_wday]} {_MONTHS[t.tm_mon - 1]} {t.tm_mday:02d} "
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d} {zone} {t.tm_year}")


def resources_info_json(info: dict[str, ResourceInformation]) -> dict:
    return {name: r.toJson() for name, r in info.items()}


def resource_requirement_json(req: ResourceRequirement) -> dict:
    return {"name": req.resourceName, "amount": req.amount}


def worker_info_json(w: WorkerSummary) -> dict:
    return {
        "id": w.id,
        "host": w.host,
        "port": w.port,
        "webuiaddress": w.webUiAddress,
        "cores": w.cores,
        "coresused": w.coresUsed,
        "coresfree": w.coresFree,
        "memory": w.memory,
        "memoryused": w.memoryUsed,
        "memoryfree": w.memoryFree,
        "resources": resources_info_json(w.resources),
        "resourcesused": resources_info_json(w.resourcesUsed),
        "resourcesfree": resources_info_json(w.resourcesFree),
        "state": str(w.state),
        "lastheartbeat": w.lastHeartbeat,
    }


def application_info_json(a: ApplicationSummary) -> dict:
    reqs = [resource_requirement_json(r) for r in a.desc.resourceReqsPerExecutor]
    return {
        "id": a.id,
        "starttime": a.startTime,
        "name": a.desc.name,
        "cores": a.coresGranted,
        "user": a.desc.user,
        "memoryperexecutor": a.desc.memoryPerExecutorMB,
        "memoryperslave": a.desc.memoryPerExecutorMB,
        "resourcesperexecutor": reqs,
        "resourcesperslave": [dict(r) for r in reqs],
        "submitdate": java_date_string(a.submitDate),
        "state": str(a.state),
        "duration": a.duration,
    }


def application_description_json(d: ApplicationDescription) -> dict:
    reqs = [resource_requirement_json(r) for r in d.resourceReqsPerExecutor]
    return {
        "name": d.name,
        "cores": d.maxCores if d.maxCores is not None else 0,
        "memoryperexecutor": d.memoryPerExecutorMB,
        "resourcesperexecutor": reqs,
        "memoryperslave": d.memoryPerExecutorMB,
        "resourcesperslave": [dict(r) for r in reqs],
        "user": d.user,
        "command": d.command.toString(),
    }


def executor_runner_json(e: ExecutorRunnerSummary) -> dict:
    return {
        "id": e.execId,
        "memory": e.memory,
        "resources": resources_info_json(e.resources),
        "appid": e.appId,
        "appdesc": application_description_json(e.appDesc),
    }


def driver_main_class(desc: DriverDescription) -> str:
    """The user's main class of a cluster-mode driver: the 3rd command argument, after
    `{{WORKER_URL}} {{USER_JAR}}` (what Spark's JSON and UI pages show)."""
    args = desc.command.arguments
    return args[2] if len(args) > 2 else desc.command.mainClass


def driver_info_json(d: DriverSummary) -> dict:
    return {
        "id": d.id,
        "starttime": str(d.startTime),
        "state": str(d.state),
        "cores": d.desc.cores,
        "memory": d.desc.mem,
        "resources": resources_info_json(d.resources),
        "submitdate": java_date_string(d.submitDate),
        "worker": d.workerId if d.workerId is not None else "None",
        "mainclass": driver_main_class(d.desc),
    }


def _snapshot(obj: Any, now_ms: Optional[int]) -> MasterStateResponse:
    if isinstance(obj, MasterStateResponse):
        return obj
    now = int(time.time() * 1000) if now_ms is None else now_ms
    return obj.master_state_response(now)  # a MasterState


def _master_field(s: MasterStateResponse, name: str, alive: list[WorkerSummary]) -> Any:
    if name == "url":
        return s.uri
    if name == "workers":
        return [worker_info_json(w) for w in s.workers]
    if name == "aliveworkers":
        return len(alive)
    if name == "cores":
        return sum(w.cores for w in alive)
    if name == "coresused":
        return sum(w.coresUsed for w in alive)
    if name == "memory":
        return sum(w.memory for w in alive)
    if name == "memoryused":
        return sum(w.memoryUsed for w in alive)
    if name == "resources":
        return [resources_info_json(w.resources) for w in alive]
    if name == "resourcesused":
        return [resources_info_json(w.resourcesUsed) for w in alive]
    if name == "activeapps":
        return [application_info_json(a) for a in s.activeApps]
    if name == "completedapps":
        return [application_info_json(a) for a in s.completedApps]
    if name == "activedrivers":
        return [driver_info_json(d) for d in s.activeDrivers]
    if name == "completeddrivers":
        return [driver_info_json(d) for d in s.completedDrivers]
    if name == "status":
        return str(s.status)
    if name == "leaderurl":
        # Ember: which master leads (null when no leader is known), next to Spark's status.
        return s.leaderUrl
    raise KeyError(name)


def master_state_json(obj: Union[MasterStateResponse, Any], field: Optional[str] = None,
                      now_ms: Optional[int] = None) -> dict:
    """Spark's writeMasterState: the whole `/json` document, or `{field: value}` for
    `/json/<field>` (`{field: ""}` when the field is unknown).

    `obj` is a MasterStateResponse or a MasterState (snapshotted at `now_ms`, default now).
    """
    s = _snapshot(obj, now_ms)
    alive = [w for w in s.workers if w.isAlive()]
    if field is None:
        return {name: _master_field(s, name, alive) for name in MASTER_JSON_FIELDS}
    if field in MASTER_JSON_FIELDS:
        return {field: _master_field(s, field, alive)}
    return {field: ""}


def master_state_field_json(obj: Union[MasterStateResponse, Any], field: str,
                            now_ms: Optional[int] = None) -> dict:
    """`/json/<field>` (the UI extracts `field` with the pattern `/json/([a-zA-Z]+).*`)."""
    return master_state_json(obj, field, now_ms)


def cluster_utilization_json(obj: Union[MasterStateResponse, Any],
                             now_ms: Optional[int] = None) -> dict:
    """Spark's writeClusterUtilization (`/json/clusterutilization`); integer percentages,
    100 when the total is 0."""
    s = _snapshot(obj, now_ms)
    alive = [w for w in s.workers if w.isAlive()]
    cores = sum(w.cores for w in alive)
    cores_used = sum(w.coresUsed for w in alive)
    memory = sum(w.memory for w in alive)
    memory_used = sum(w.memoryUsed for w in alive)
    return {
        "waitingDrivers": sum(1 for d in s.activeDrivers if d.state == DriverState.SUBMITTED),
        "cores": cores,
        "coresused": cores_used,
        "coresutilization": 100 if cores == 0 else 100 * cores_used // cores,
        "memory": memory,
        "memoryused": memory_used,
        "memoryutilization": 100 if memory == 0 else 100 * memory_used // memory,
    }


def worker_state_json(w: WorkerStateResponse) -> dict:
    """Spark's writeWorkerState: the worker's `/json` (no drivers listed)."""
    return {
        "id": w.workerId,
        "masterurl": w.masterUrl,
        "masterwebuiurl": w.masterWebUiUrl,
        "cores": w.cores,
        "coresused": w.coresUsed,
        "memory": w.memory,
        "memoryused": w.memoryUsed,
        "resources": resources_info_json(w.resources),
        "resourcesused": resources_info_json(w.resourcesUsed),
        "executors": [executor_runner_json(e) for e in w.executors],
        "finishedexecutors": [executor_runner_json(e) for e in w.finishedExecutors],
    }
