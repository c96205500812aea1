"""The master's recovery records: live ApplicationInfo / DriverInfo / WorkerInfo <-> plain
dicts a PersistenceEngine stores (`persistence.encode_record` makes them bytes).

Why a record is a snapshot and not the object: the state machine emits `Persist(name,
record)` at the moment Spark's master persists (before the registration reply, at a driver's
launch, ...), and what is stored must be the state at that moment, whenever the shell writes
it. Only what a new leader needs is kept; runtime fields are rebuilt by the recovery flow
(an app comes back UNKNOWN without executors, a worker UNKNOWN without executors, a driver
without a worker). Beyond Spark: a driver record says whether the driver was launched, so a
driver that was still waiting goes back to the queue instead of being declared lost, and the
retained lists (`completed_app_<id>`, `completed_driver_<id>`) keep final states, exit codes
and exceptions across a restart.

Record dicts hold only data the RPC codec encodes (str, int, lists, dicts, @message
dataclasses such as ApplicationDescription, enums, endpoint refs); reading one back checks
every field, so a record that lost or changed a field raises RecordError.
"""
from __future__ import annotations

from typing import Any, Callable

from ember.deploy.master.persistence import RecordError
from ember.deploy.master.scheduling import ApplicationInfo, DriverInfo, WorkerInfo
from ember.deploy.messages import (
    ApplicationDescription, ApplicationState, DriverDescription, DriverState, WorkerState,
)

APP, DRIVER, WORKER = "app_", "driver_", "worker_"
COMPLETED_APP, COMPLETED_DRIVER = "completed_app_", "completed_driver_"


def app_key(app_id: str) -> str:
    return APP + app_id


def driver_key(driver_id: str) -> str:
    return DRIVER + driver_id


def worker_key(worker_id: str) -> str:
    return WORKER + worker_id


def completed_app_key(app_id: str) -> str:
    return COMPLETED_APP + app_id


def completed_driver_key(driver_id: str) -> str:
    return COMPLETED_DRIVER + driver_id


# ---------------------------------------------------------------------------------------------
# Live object -> record
# ---------------------------------------------------------------------------------------------

def app_record(app: ApplicationInfo) -> dict:
    return {"id": app.id, "startTime": app.start_time, "submitDate": app.submit_date,
            "desc": app.desc, "driver": app.driver, "defaultCores": app.default_cores}


def driver_record(driver: DriverInfo) -> dict:
    """`launched`: the driver was sent to a worker (the record is rewritten at each launch)."""
    return {"id": driver.id, "startTime": driver.start_time, "submitDate": driver.submit_date,
            "desc": driver.desc, "attempt": driver.attempt,
            "launched": driver.worker is not None,
            "workerId": driver.worker.id if driver.worker is not None else None}


def worker_record(worker: WorkerInfo) -> dict:
    return {"id": worker.id, "host": worker.host, "port": worker.port, "cores": worker.cores,
            "memory": worker.memory, "endpoint": worker.endpoint,
            "webUiAddress": worker.web_ui_address,
            "resources": {n: list(a) for n, a in worker.resources.items()}}


def completed_app_record(app: ApplicationInfo, seq: int) -> dict:
    return {"id": app.id, "startTime": app.start_time, "submitDate": app.submit_date,
            "desc": app.desc, "state": app.state, "endTime": app.end_time,
            "defaultCores": app.default_cores, "seq": seq}


def completed_driver_record(driver: DriverInfo, seq: int) -> dict:
    w = driver.worker
    return {"id": driver.id, "startTime": driver.start_time, "submitDate": driver.submit_date,
            "desc": driver.desc, "state": driver.state, "exception": driver.exception,
            "exitStatus": driver.exit_status, "attempt": driver.attempt,
            "workerId": w.id if w is not None else None,
            "workerHost": w.host if w is not None else None,
            "workerPort": w.port if w is not None else None, "seq": seq}


# ---------------------------------------------------------------------------------------------
# Record -> fresh object (runtime fields reset, as Spark's readObject does)
# ---------------------------------------------------------------------------------------------

def _get(record: dict, name: str, kind: Any, optional: bool = False) -> Any:
    value = record.get(name)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        shown = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RecordError(f"field {name!r} should be {shown}, but is {value!r}")
    return value


def app_from_record(record: dict, bind: Callable[[Any], Any]) -> ApplicationInfo:
    """A fresh WAITING application; `bind` turns the stored driver ref into a live one."""
    return ApplicationInfo(_get(record, "startTime", int), _get(record, "id", str),
                           _get(record, "desc", ApplicationDescription),
                           _get(record, "submitDate", int), bind(record.get("driver")),
                           _get(record, "defaultCores", int))


def driver_from_record(record: dict) -> DriverInfo:
    """A driver without a worker: SUBMITTED if it was never launched (it waits again),
    RUNNING if it was (recovery looks for it on the workers)."""
    driver = DriverInfo(_get(record, "startTime", int), _get(record, "id", str),
                        _get(record, "desc", DriverDescription), _get(record, "submitDate", int))
    driver.attempt = _get(record, "attempt", int)
    launched = _get(record, "launched", bool)
    driver.state = DriverState.RUNNING if launched else DriverState.SUBMITTED
    return driver


def worker_from_record(record: dict, bind: Callable[[Any], Any]) -> WorkerInfo:
    resources = _get(record, "resources", dict)
    return WorkerInfo(_get(record, "id", str), _get(record, "host", str),
                      _get(record, "port", int), _get(record, "cores", int),
                      _get(record, "memory", int), endpoint=bind(record.get("endpoint")),
                      web_ui_address=_get(record, "webUiAddress", str),
                      resources={str(n): [str(a) for a in addrs]
                                 for n, addrs in resources.items()})


def completed_app_from_record(record: dict) -> ApplicationInfo:
    app = ApplicationInfo(_get(record, "startTime", int), _get(record, "id", str),
                          _get(record, "desc", ApplicationDescription),
                          _get(record, "submitDate", int), None,
                          _get(record, "defaultCores", int))
    app.state = _get(record, "state", ApplicationState)
    app.end_time = _get(record, "endTime", int)
    return app


def completed_driver_from_record(record: dict) -> DriverInfo:
    """A finished driver; the worker that ran it is a DEAD stand-in (id and address only)
    until the recovery flow finds that worker alive."""
    driver = DriverInfo(_get(record, "startTime", int), _get(record, "id", str),
                        _get(record, "desc", DriverDescription), _get(record, "submitDate", int))
    driver.state = _get(record, "state", DriverState)
    driver.exception = _get(record, "exception", str, optional=True)
    driver.exit_status = _get(record, "exitStatus", int, optional=True)
    driver.attempt = _get(record, "attempt", int)
    worker_id = _get(record, "workerId", str, optional=True)
    if worker_id is not None:
        driver.worker = WorkerInfo(worker_id, _get(record, "workerHost", str),
                                   _get(record, "workerPort", int), 0, 0,
                                   state=WorkerState.DEAD)
    return driver


class StoredState:
    """Everything a PersistenceEngine returned, as fresh objects in Spark's order. Records
    that cannot be turned back into objects are listed in `skipped` (name, reason)."""

    def __init__(self, records: dict[str, dict], bind: Callable[[Any], Any]) -> None:
        self.apps: list[ApplicationInfo] = []
        self.drivers: list[DriverInfo] = []
        self.workers: list[WorkerInfo] = []
        self.completed_apps: list[ApplicationInfo] = []
        self.completed_drivers: list[DriverInfo] = []
        self.skipped: list[tuple[str, str]] = []
        completed_apps: list[tuple[int, ApplicationInfo]] = []
        completed_drivers: list[tuple[int, DriverInfo]] = []
        for name in sorted(records, key=lambda n: (records[n].get("startTime", 0)
                                                   if isinstance(records[n], dict) else 0, n)):
            record = records[name]
            try:
                if name.startswith(COMPLETED_APP):
                    completed_apps.append((_get(record, "seq", int),
                                           completed_app_from_record(record)))
                elif name.startswith(COMPLETED_DRIVER):
                    completed_drivers.append((_get(record, "seq", int),
                                              completed_driver_from_record(record)))
                elif name.startswith(APP):
                    self.apps.append(app_from_record(record, bind))
                elif name.startswith(DRIVER):
                    self.drivers.append(driver_from_record(record))
                elif name.startswith(WORKER):
                    self.workers.append(worker_from_record(record, bind))
                else:
                    raise RecordError("unknown record kind")
            except (RecordError, TypeError, ValueError, AttributeError) as e:
                self.skipped.append((name, str(e)))
        self.completed_apps = [a for _, a in sorted(completed_apps, key=lambda p: p[0])]
        self.completed_drivers = [d for _, d in sorted(completed_drivers, key=lambda p: p[0])]
        # Completion numbers go on from the highest stored one, so the order survives.
        self.completed_seq = max([s for s, _ in completed_apps + completed_drivers], default=0)


def no_bind(ref: Any) -> Any:
    return ref


__all__ = ["app_record", "driver_record", "worker_record", "completed_app_record",
           "completed_driver_record", "app_from_record", "driver_from_record",
           "worker_from_record", "completed_app_from_record", "completed_driver_from_record",
           "StoredState", "app_key", "driver_key", "worker_key", "completed_app_key",
           "completed_driver_key", "no_bind"]
