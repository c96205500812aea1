"""The standalone master as a sans-I/O state machine: `MasterState.handle(event, now_ms)`.

Why: Spark's `Master` is an RPC endpoint whose handlers read the clock, send messages and write
to the persistence engine as they go. Here the same handlers only change in-memory state and
return *instructions*; a thin I/O shell (the master daemon) feeds in what arrives (messages,
asks, disconnections, timer ticks) with the current time and carries the instructions out.
So every master behaviour - registration, liveness, executor allocation, retries, drivers,
removal, standby - is tested without sockets, threads or sleeps, and schedule() can be
simulated with thousands of fake workers. One writer: the shell must call `handle` from one
thread/loop at a time (Spark's ThreadSafeRpcEndpoint).

How an I/O shell drives it
--------------------------
Create `MasterState(conf, host=..., port=..., self_ref=<master's own RpcEndpointRef>,
web_ui_url=..., web_ui_port=..., rest_port=...)`, carry out `on_start(now_ms)` (a log line and
the periodic `CheckForWorkerTimeOut` timer), then feed `ElectedLeader(epoch)` once leadership
is granted with nothing persisted, or `BeginRecovery(...)` with what the persistence engine
returned (the master stays STANDBY until then).

Events (`handle(event, now_ms)`; `now_ms` = wall clock, epoch milliseconds):
- any deploy message received with `send` (RegisterWorker, Heartbeat, WorkerLatestState,
  DriverStateChanged, RegisterApplication, UnregisterApplication, MasterChangeAcknowledged,
  WorkerSchedulerStateResponse, WorkerDecommissioning, DecommissionWorkers, ElectedLeader,
  RevokedLeadership, CheckForWorkerTimeOut, CompleteRecovery), fed as is;
- any message received with `ask`, wrapped: `Ask(request, message)`, where `request` is any
  object the shell uses to route the answer (e.g. the RpcCallContext). Asks: ExecutorStateChanged
  (reply True), RequestSubmitDriver, RequestKillDriver, RequestKillAllDrivers, RequestDriverStatus,
  RequestClearCompletedDriversAndApps, RequestMasterState, RequestReadyz, RequestExecutors,
  KillExecutors, DecommissionWorkersOnHosts, BoundPortsRequest, RequestKillApplication,
  RequestAppStatus.
  An ask message fed without `Ask` is still handled; its reply is dropped.
- `Disconnected(address)`: the RPC layer lost the connection to a remote RpcEnv at `address`
  (a worker's or a driver's): the worker is removed / the application FINISHED.
- `BeginRecovery(stored_apps, stored_drivers, stored_workers, stored_completed_apps,
  stored_completed_drivers, completed_seq, epoch)`: instead of `ElectedLeader(epoch)` when the
  persistence engine returned data (fresh objects from `records.py`: apps WAITING without
  executors, drivers without a worker - SUBMITTED if never launched, RUNNING if launched -,
  workers ALIVE without executors). Recovery then follows Spark's flow (RECOVERING,
  MasterChanged, COMPLETING_RECOVERY at CompleteRecovery(epoch) or when nothing is UNKNOWN,
  ALIVE). `RevokedLeadership` steps down to STANDBY and forgets the cluster (Spark exits).

Fencing: every message sent to a worker or driver carries `self.epoch`, the epoch of the
current leadership; receivers refuse an older one (`ember.deploy.fencing`).

Instructions (`ember.deploy.instructions`, shared with the worker's state machine; returned
in order, carry them out in order):
- `Send(target, message)`: `target.send(message)`. `target` is always an endpoint ref the
  master received earlier (a worker's from RegisterWorker/Heartbeat/WorkerDecommissioning, a
  driver's from RegisterApplication) - tests use plain strings as refs.
- `Reply(request, message)`: answer the ask identified by `request` with `message`.
- `ReplyFailure(request, error, error_type)`: fail that ask (the asker sees an exception of
  type `error_type`, SparkException unless said, with `error`; an unsupported message is
  `UnsupportedMessageError`, as from every endpoint).
- `Persist(key, record)` / `Unpersist(key)`: keys `app_<id>`, `driver_<id>`, `worker_<id>`
  (Spark's), `completed_app_<id>`, `completed_driver_<id>` (the retained lists); `record` is a
  snapshot dict from `records.py`. The shell writes them to its PersistenceEngine, in order,
  before the replies that follow them.
- `DeleteUpload(url)`: an `ember-upload://` resource no active driver refers to any more
  (its last driver left the retained list): the shell may delete it (Ember's uploads).
- `Log(level, text)`: level "INFO" / "WARN" / "ERROR" (log4j names); texts are Spark's.
- `ScheduleTimer(delay_ms, message, period_ms)`: feed `message` back after `delay_ms`, then
  every `period_ms` if set (CheckForWorkerTimeOut; CompleteRecovery after recoveryTimeout).

Addresses: the master keys workers and apps by the RPC address of their endpoint ref, obtained
with `address_of(ref)` (default: `ref.address` if present, else the ref itself), so
`Disconnected(address)` must carry the same kind of value.

Deliberate deviations: a duplicate RUNNING ExecutorStateChanged (a retried ask) is answered
True without effect instead of failing Spark's assert; other illegal transitions to RUNNING
are refused with ReplyFailure and change nothing; a handler that raises is logged, leaves the
state as before the event and sends nothing (an ask gets a failure) instead of crashing the
daemon; self-sends (`DriverStateChanged(KILLED)` for a
waiting driver, `DecommissionWorkers`) are processed right after the reply instead of queued.
"""
from __future__ import annotations

import random
import re
import time
from itertools import compress
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional

from ember.deploy.fencing import relaunch_not_before_ms
from ember.deploy.instructions import (
    ERROR, INFO, WARN, Ask, DeleteUpload, Disconnected, Instruction, Log, Persist, Reply,
    ReplyFailure, ScheduleTimer, Send, Unpersist,
)
from ember.deploy.master.config import MasterConfig
from ember.deploy.rollback import Rollback
from ember.rpc.errors import UnsupportedMessageError
from ember.deploy.messages import (
    ApplicationDescription, ApplicationFinished, ApplicationRemoved, ApplicationState,
    ApplicationSummary, AppStatusResponse, RequestAppStatus, WorkerDriverStateResponse,
    WorkerExecutorStateResponse, BoundPortsRequest, BoundPortsResponse, CheckForWorkerTimeOut,
    CompleteRecovery, DecommissionWorker, DecommissionWorkers, DecommissionWorkersOnHosts,
    DriverDescription, DriverState, DriverStateChanged, DriverStatusResponse, DriverSummary,
    ElectedLeader, ExecutorAdded, ExecutorState, ExecutorStateChanged, ExecutorSummary,
    ExecutorUpdated, Heartbeat, HeartbeatResponse, KillAllDriversResponse, KillDriver,
    KillDriverResponse, KillExecutor, KillExecutors, LaunchDriver, LaunchExecutor,
    MasterChangeAcknowledged,
    MasterChanged, MasterInStandby, MasterStateResponse, NOT_RECORDED_PREFIX, ReconnectWorker,
    RecoveryState, RegisterApplication, RegisteredApplication, RegisteredWorker, RegisterWorker,
    RegisterWorkerFailed, RequestClearCompletedDriversAndApps, RequestDriverStatus,
    RequestExecutors, RequestKillAllDrivers, RequestKillApplication, RequestKillDriver,
    RequestMasterState, RequestReadyz, RequestSubmitDriver, RevokedLeadership,
    SubmitDriverResponse, UnregisterApplication, WorkerDecommissioning, WorkerLatestState,
    WorkerRemoved, WorkerSchedulerStateResponse, WorkerState, WorkerSummary,
)
from ember.deploy.master.scheduling import (
    ApplicationInfo, DriverInfo, ExecutorDesc, WorkerInfo,
    allocate_worker_resource_to_executors, app_warning,
    WorkerOrder, schedule_drivers, schedule_executors_on_workers, usable_workers,
)
from ember.deploy.master.records import (
    app_key, app_record, completed_app_key, completed_app_record, completed_driver_key,
    completed_driver_record, driver_key, driver_record, worker_key, worker_record,
)
from ember.util.liveness import ran_late
from ember.util.units import bytes_to_string, megabytes_to_string

_TRAILING_NUMBER = re.compile(r"(\d+)$")
_UPLOAD_URL = re.compile(r"ember-upload://[0-9a-f]{64}/[^,\s\"']+")
BACKUP_STANDALONE_MASTER_PREFIX = "Current state is not alive"
_SCHEDULE = "schedule()"     # a committed stand-alone schedule() pass, for the rollback
# Not state (or not changed by events): left out of rollback checkpoints.
_NOT_ROLLED_BACK = frozenset({"_handlers", "_out", "_rollback", "_now", "conf", "address_of",
                              "self_ref"})


# ---------------------------------------------------------------------------------------------
# Events that are not deploy messages
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LeaseExpired:
    """Internal timer event: the lease of the worker a supervised driver was lost with has
    run out, so the driver may be relaunched now (never arrives over the wire)."""
    driver_id: str


@dataclass(frozen=True)
class LaunchBackoffExpired:
    """Internal timer event: a worker where an application's executors kept failing to
    start may be tried again (never arrives over the wire)."""
    app_id: str
    worker_id: str


@dataclass(frozen=True)
class BeginRecovery:
    """Elected leader with persisted data (Spark: ElectedLeader + readPersistedData).
    Drivers come SUBMITTED (never launched: they wait again) or RUNNING (launched: looked
    for on the workers). Ember also restores the retained lists; `completed_seq` is the
    highest completion number stored, `epoch` the one this election gave."""
    stored_apps: list[ApplicationInfo] = field(default_factory=list)
    stored_drivers: list[DriverInfo] = field(default_factory=list)
    stored_workers: list[WorkerInfo] = field(default_factory=list)
    stored_completed_apps: list[ApplicationInfo] = field(default_factory=list)
    stored_completed_drivers: list[DriverInfo] = field(default_factory=list)
    completed_seq: int = 0
    epoch: int = 0


@dataclass(frozen=True)
class PersistFailed:
    """Event: the gated write of `key` (`app_` / `driver_` / `worker_<id>`) failed with
    `error`. The state forgets the entity as if it had never arrived and answers `request`
    (the submission's ask) with a failure the client may retry; a worker or an application
    gets no answer, so its registration retry asks again (Spark has no failure message for
    either that would not end it)."""
    key: str
    error: str = ""
    request: Any = None


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def format_timestamp(now_ms: int) -> str:
    """yyyyMMddHHmmss in the master's local time zone (app and driver ids)."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(now_ms / 1000.0))


def format_address(address: Any) -> str:
    """RpcAddress.toString: host:port."""
    host, port = getattr(address, "host", None), getattr(address, "port", None)
    if host is not None and port is not None:
        return f"{host}:{port}"
    return str(address)


def default_address_of(ref: Any) -> Any:
    address = getattr(ref, "address", None)
    return address if address is not None else ref


def _next_number(ids: list[str]) -> int:
    """One more than the highest trailing number of `ids` (app-<ts>-0007 -> 8), so ids made
    after a recovery cannot repeat recovered ones made in the same second."""
    numbers = [int(m.group(1)) for m in map(_TRAILING_NUMBER.search, ids) if m]
    return max(numbers) + 1 if numbers else 0


def upload_urls(desc: DriverDescription) -> set[str]:
    """The `ember-upload://` resources a driver uses (its app file, --py-files, --files)."""
    texts = [desc.jarUrl, *desc.command.arguments, *desc.command.javaOpts,
             *desc.command.environment.values()]
    return {m.group(0) for text in texts for m in _UPLOAD_URL.finditer(text)}


def _validate_app_desc(desc: ApplicationDescription) -> Optional[str]:
    if desc.maxCores is not None and desc.maxCores < 0:
        return f"spark.cores.max must be non-negative, got {desc.maxCores}"
    cores = desc.coresPerExecutor
    if cores is not None and cores < 1:
        return f"spark.executor.cores must be positive, got {cores}"
    if desc.memoryPerExecutorMB < 0:
        return f"spark.executor.memory must be non-negative, got {desc.memoryPerExecutorMB} MB"
    return None


# ---------------------------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------------------------

class MasterState:
    """Spark's Master (§3.1 state, §3.2-§3.5 behaviour) as handle(event) -> instructions."""

    def __init__(self, conf: Optional[Mapping[str, Any]] = None, *, host: str = "localhost",
                 port: int = 7077, self_ref: Any = None, web_ui_url: str = "",
                 web_ui_port: int = 8080, rest_port: Optional[int] = None,
                 rng: Optional[random.Random] = None,
                 address_of: Callable[[Any], Any] = default_address_of) -> None:
        self.conf = MasterConfig.from_conf(conf or {})
        self.host = host
        self.port = port
        self.master_url = f"spark://{host}:{port}"
        self.self_ref = self_ref if self_ref is not None else self.master_url
        self.master_web_ui_url = web_ui_url
        self.web_ui_port = web_ui_port
        self.rest_port = rest_port
        self.rng = rng if rng is not None else random.Random()
        self.address_of = address_of

        self.state = RecoveryState.STANDBY
        self.epoch = 0                  # leadership epoch, carried by every instruction sent
        self.recovery_duration_ms = -1    # how long the last recovery took (-1: none yet)
        self._reset_cluster_state()

        self._now = 0
        self._out: list[Instruction] = []
        self._handlers: dict[type, Callable[[Any, Any], None]] = {
            RegisterWorker: self._on_register_worker,
            Heartbeat: self._on_heartbeat,
            LeaseExpired: lambda m, r: self._schedule(),
            LaunchBackoffExpired: lambda m, r: self._schedule(),
            WorkerLatestState: self._on_worker_latest_state,
            WorkerDecommissioning: self._on_worker_decommissioning,
            DecommissionWorkers: self._on_decommission_workers,
            DecommissionWorkersOnHosts: self._on_decommission_workers_on_hosts,
            ExecutorStateChanged: self._on_executor_state_changed,
            DriverStateChanged: self._on_driver_state_changed,
            RegisterApplication: self._on_register_application,
            UnregisterApplication: self._on_unregister_application,
            MasterChangeAcknowledged: self._on_master_change_acknowledged,
            WorkerSchedulerStateResponse: self._on_worker_scheduler_state_response,
            RequestExecutors: self._on_request_executors,
            KillExecutors: self._on_kill_executors,
            RequestSubmitDriver: self._on_request_submit_driver,
            RequestKillDriver: self._on_request_kill_driver,
            RequestKillAllDrivers: self._on_request_kill_all_drivers,
            RequestDriverStatus: self._on_request_driver_status,
            RequestClearCompletedDriversAndApps: self._on_request_clear_completed,
            RequestMasterState: self._on_request_master_state,
            RequestReadyz: self._on_request_readyz,
            RequestKillApplication: self._on_request_kill_application,
            BoundPortsRequest: self._on_bound_ports_request,
            RequestAppStatus: self._on_request_app_status,
            PersistFailed: self._on_persist_failed,
            ElectedLeader: self._on_elected_leader,
            BeginRecovery: self._on_begin_recovery,
            CompleteRecovery: self._on_complete_recovery,
            RevokedLeadership: self._on_revoked_leadership,
            CheckForWorkerTimeOut: lambda m, r: self._time_out_dead_workers(),
            Disconnected: self._on_disconnected,
        }
        self._rollback = Rollback(self, _NOT_ROLLED_BACK, self._replay)

    def _reset_cluster_state(self) -> None:
        """Everything a leader knows about the cluster, empty (at start, and when a revoked
        leader steps down: it keeps nothing it could act on)."""
        # Ordered "sets" (insertion order = registration order, shown by the UI).
        self.workers: dict[WorkerInfo, None] = {}  # includes DEAD ones until culled
        self.id_to_worker: dict[str, WorkerInfo] = {}
        self.address_to_worker: dict[Any, WorkerInfo] = {}
        self._host_port_to_workers: dict[tuple[str, int], list[WorkerInfo]] = {}
        self.apps: dict[ApplicationInfo, None] = {}
        self.id_to_app: dict[str, ApplicationInfo] = {}
        self.waiting_apps: list[ApplicationInfo] = []
        self.address_to_app: dict[Any, ApplicationInfo] = {}
        self.completed_apps: list[ApplicationInfo] = []
        self.next_app_number = 0
        self.drivers: dict[str, DriverInfo] = {}  # active: waiting + running
        self.waiting_drivers: list[DriverInfo] = []
        self.completed_drivers: list[DriverInfo] = []
        self.next_driver_number = 0
        self._capacity_warned: set[str] = set()  # drivers told "no worker is big enough"
        # (app id, worker id) -> (consecutive executor launch failures, no launch before ms)
        self._launch_backoff: dict[tuple[str, str], tuple[int, int]] = {}
        self.recovery_start_time_ms = 0
        self._completed_seq = 0  # orders the retained lists' records across restarts
        # Recovered workers whose executors and drivers are not re-attached yet.
        self._awaiting_worker_state: set[str] = set()
        self._last_worker_check_ms: int | None = None   # when CheckForWorkerTimeOut last ran
        self._silence_counts_from_ms = 0     # a late check's time: no silence before it counts

    # -- driving ----------------------------------------------------------------------------

    def on_start(self, now_ms: int) -> list[Instruction]:
        """What the shell does when the endpoint starts: log and start the liveness timer."""
        return [Log(INFO, f"Starting Spark master at {self.master_url}"),
                ScheduleTimer(0, CheckForWorkerTimeOut(), self.conf.worker_timeout_ms)]

    def handle(self, event: Any, now_ms: int) -> list[Instruction]:
        """Apply one event at wall-clock time `now_ms` (epoch ms); return what to do, in order.

        The one place a handler's failure is caught: if it raises, the state is put back as
        it was before the event (`ember.deploy.rollback`) and the instructions it had
        produced are dropped; what remains is the error logged and, for an ask, a failure
        reply. So a bad message never takes the master down nor half-applies."""
        self._rollback.begin()
        self._now = int(now_ms)
        self._out = out = []
        request, msg = (event.request, event.message) if isinstance(event, Ask) else (None, event)
        handler = self._handlers.get(type(msg))
        if handler is None:
            self._log(WARN, f"Master received an unexpected message: {type(msg).__name__}")
            if request is not None:
                error = UnsupportedMessageError(msg)
                out.append(ReplyFailure(request, str(error), type(error).__name__))
        else:
            try:
                handler(msg, request)
            except Exception as e:  # a bad message must not take the master down
                self._rollback.restore()
                out = [Log(ERROR, f"Error while handling {type(msg).__name__}: {e!r}")]
                if request is not None:
                    out.append(ReplyFailure(request, f"{type(e).__name__}: {e}"))
            else:
                self._rollback.committed(event, now_ms,
                                         checkpoint=isinstance(msg, BeginRecovery))
        self._out = []
        return out

    def schedule(self, now_ms: int) -> list[Instruction]:
        """Run one schedule() pass on its own (simulations, benchmarks)."""
        self._rollback.begin()
        self._now = int(now_ms)
        self._out = out = []
        self._schedule()
        self._out = []
        self._rollback.committed(_SCHEDULE, now_ms)
        return out

    def _replay(self, event: Any, now_ms: int) -> None:
        """Apply a committed event again, its instructions dropped (see `Rollback`)."""
        self._now = int(now_ms)
        self._out = []
        if event is _SCHEDULE:
            self._schedule()
        else:
            request, msg = ((event.request, event.message) if isinstance(event, Ask)
                            else (None, event))
            self._handlers[type(msg)](msg, request)
        self._out = []

    def live_records(self) -> list[tuple[str, dict]]:
        """Every record the Persist and Unpersist instructions so far leave in the store, for
        a store that lost them. The retained completed apps and drivers get sequence numbers
        in their lists' order, none above the one the next completion takes."""
        out = [(worker_key(w.id), worker_record(w)) for w in self.workers
               if w.state not in (WorkerState.DEAD, WorkerState.DECOMMISSIONED)]
        out += [(app_key(a.id), app_record(a)) for a in self.apps]
        out += [(driver_key(d.id), driver_record(d)) for d in self.drivers.values()]
        out += [(completed_app_key(a.id), completed_app_record(a, seq))
                for seq, a in enumerate(self.completed_apps, 1)]
        out += [(completed_driver_key(d.id), completed_driver_record(d, seq))
                for seq, d in enumerate(self.completed_drivers, len(self.completed_apps) + 1)]
        return out

    # -- instruction helpers ----------------------------------------------------------------

    def _send(self, target: Any, msg: Any) -> None:
        self._out.append(Send(target, msg))

    def _reply(self, request: Any, msg: Any) -> None:
        if request is not None:
            self._out.append(Reply(request, msg))

    def _log(self, level: str, text: str) -> None:
        self._out.append(Log(level, text))

    def _persist(self, key: str, obj: Any) -> None:
        self._out.append(Persist(key, obj))

    def _persist_gated(self, key: str, obj: Any, request: Any = None) -> None:
        """The write the next reply acknowledges: see Persist.failure."""
        self._out.append(Persist(key, obj, PersistFailed(key, request=request)))

    def _unpersist(self, key: str) -> None:
        self._out.append(Unpersist(key))

    def _not_alive(self, what: str) -> str:
        return f"{BACKUP_STANDALONE_MASTER_PREFIX}: {self.state}. Can only {what} in ALIVE state."

    # -- workers ----------------------------------------------------------------------------

    def _on_register_worker(self, m: RegisterWorker, request: Any) -> None:
        self._log(INFO, f"Registering worker {m.host}:{m.port} with {m.cores} cores, "
                        f"{megabytes_to_string(m.memory)} RAM")
        if self.state == RecoveryState.STANDBY:
            self._send(m.worker, MasterInStandby())
        elif m.cores <= 0 or m.memory <= 0:
            self._log(WARN, f"Worker registration failed. Invalid resources: {m.cores} cores, "
                            f"{m.memory} MB from {m.host}:{m.port}")
            self._send(m.worker, RegisterWorkerFailed(
                f"Invalid worker resources: cores and memory must be positive "
                f"(got {m.cores} cores, {m.memory} MB)"))
        elif m.id in self.id_to_worker:
            worker = self.id_to_worker[m.id]
            if worker.state == WorkerState.UNKNOWN:
                self._log(INFO, f"Worker has been re-registered: {m.id}")
                worker.state = WorkerState.ALIVE
            self._send(m.worker, RegisteredWorker(self.self_ref, self.master_web_ui_url,
                                                  m.masterAddress, True, self.epoch))
        else:
            worker = WorkerInfo(
                m.id, m.host, m.port, m.cores, m.memory, endpoint=m.worker,
                web_ui_address=m.workerWebUiUrl,
                resources={n: list(info.addresses) for n, info in (m.resources or {}).items()},
                last_heartbeat=self._now)
            if self._register_worker(worker):
                self._persist_gated(worker_key(worker.id), worker_record(worker))
                self._send(m.worker, RegisteredWorker(self.self_ref, self.master_web_ui_url,
                                                      m.masterAddress, False, self.epoch))
                self._schedule()
            else:
                address = format_address(self.address_of(m.worker))
                self._log(WARN, "Worker registration failed. Attempted to re-register worker "
                                f"at same address: {address}")
                self._send(m.worker, RegisterWorkerFailed(
                    f"Attempted to re-register worker at same address: {address}"))

    def _register_worker(self, worker: WorkerInfo) -> bool:
        key = (worker.host, worker.port)
        for old in list(self._host_port_to_workers.get(key, ())):
            if old.state == WorkerState.DEAD:
                self._forget_worker(old)
        address = self.address_of(worker.endpoint)
        old = self.address_to_worker.get(address)
        if old is not None:
            if old.state == WorkerState.UNKNOWN:
                # Restarted during recovery: the old one must be dead.
                self._remove_worker(old, "Worker replaced by a new worker with same address")
            else:
                self._log(INFO, "Attempted to re-register worker at same address: "
                                f"{format_address(address)}")
                return False
        self.workers[worker] = None
        self._host_port_to_workers.setdefault(key, []).append(worker)
        self.id_to_worker[worker.id] = worker
        self.address_to_worker[address] = worker
        return True

    def _forget_worker(self, worker: WorkerInfo) -> None:
        """Drop a (DEAD) worker from `workers` entirely (no longer listed)."""
        self.workers.pop(worker, None)
        same = self._host_port_to_workers.get((worker.host, worker.port))
        if same is not None:
            if worker in same:
                same.remove(worker)
            if not same:
                del self._host_port_to_workers[(worker.host, worker.port)]

    def _on_heartbeat(self, m: Heartbeat, request: Any) -> None:
        worker = self.id_to_worker.get(m.workerId)
        # Ember: a heartbeat sent as an ask is answered, renewing the worker's lease only
        # while this master leads and counts it as registered; the answer carries the epoch
        # so the worker can refuse a renewal from a deposed master.
        self._reply(request, HeartbeatResponse(
            worker is not None and self.state != RecoveryState.STANDBY, self.epoch))
        if worker is not None:
            worker.last_heartbeat = self._now
        elif any(w.id == m.workerId for w in self.workers):
            self._log(WARN, f"Got heartbeat from unregistered worker {m.workerId}. "
                            "Asking it to re-register.")
            self._send(m.worker, ReconnectWorker(self.master_url, self.epoch))
        else:
            self._log(WARN, f"Got heartbeat from unregistered worker {m.workerId}. "
                            "This worker was never registered, so ignoring the heartbeat.")

    def _on_worker_latest_state(self, m: WorkerLatestState, request: Any) -> None:
        worker = self.id_to_worker.get(m.id)
        if worker is None:
            self._log(WARN, f"Worker state from unknown worker: {m.id}")
            return
        if worker.id in self._awaiting_worker_state:
            # A recovered worker that re-registered before answering MasterChanged: what it
            # runs is re-attached, not killed as unknown.
            self._reattach(worker, [WorkerExecutorStateResponse(e) for e in m.executors],
                           [WorkerDriverStateResponse(d) for d in m.driverIds])
            return
        for e in m.executors:
            known = worker.executors.get(f"{e.appId}/{e.execId}")
            if known is None or known.application.id != e.appId or known.id != e.execId:
                # The master doesn't know this executor: tell the worker to kill it.
                self._send(worker.endpoint, KillExecutor(self.master_url, e.appId, e.execId,
                                                                   self.epoch))
        for driver_id in m.driverIds:
            if driver_id not in worker.drivers:
                self._send(worker.endpoint, KillDriver(driver_id, self.epoch))

    def _time_out_dead_workers(self) -> None:
        timeout = self.conf.worker_timeout_ms
        now = self._now
        previous, self._last_worker_check_ms = self._last_worker_check_ms, now
        if ran_late(previous, now, timeout):
            self._log(WARN, f"Checked for dead workers {now - previous} ms after the last "
                            f"check (every {timeout} ms): this master was stopped or "
                            "starved, so no worker is removed for that silence")
            self._silence_counts_from_ms = now
            return
        excused = self._silence_counts_from_ms >= now - timeout
        for worker in [w for w in self.workers if w.last_heartbeat < now - timeout]:
            if worker.state != WorkerState.DEAD:
                if not excused:
                    self._log(WARN, f"Removing {worker.id} because we got no heartbeat in "
                                    f"{timeout} ms")
                    self._remove_worker(worker, "Not receiving heartbeat for "
                                                f"{timeout // 1000} seconds")
            elif worker.last_heartbeat < now - (self.conf.reaper_iterations + 1) * timeout:
                self._forget_worker(worker)  # seen DEAD in the UI long enough; cull it

    def _remove_worker(self, worker: WorkerInfo, msg: str) -> None:
        self._log(INFO, f"Removing worker {worker.id} on {worker.host}:{worker.port}")
        worker.state = WorkerState.DEAD
        if self.id_to_worker.get(worker.id) is worker:
            del self.id_to_worker[worker.id]
        address = self.address_of(worker.endpoint)
        if self.address_to_worker.get(address) is worker:
            del self.address_to_worker[address]
        for exec in list(worker.executors.values()):
            self._log(INFO, f"Telling app of lost executor: {exec.id}")
            self._send(exec.application.driver, ExecutorUpdated(
                exec.id, ExecutorState.LOST, f"worker lost: {msg}", None, worker.host,
                self.epoch))
            exec.state = ExecutorState.LOST
            exec.application.remove_executor(exec)
        for driver in list(worker.drivers.values()):
            if driver.desc.supervise:
                self._log(INFO, f"Re-launching {driver.id}")
                self._relaunch_driver(driver, relaunch_not_before_ms(
                    worker.last_heartbeat, self.conf.worker_lease_ms))
            else:
                self._log(INFO, f"Not re-launching {driver.id} because it was not supervised")
                self._remove_driver(driver.id, DriverState.ERROR, None)
        self._log(INFO, f"Telling app of lost worker: {worker.id}")
        for app in self.apps:
            self._send(app.driver, WorkerRemoved(worker.id, worker.host, msg, self.epoch))
        self._unpersist(worker_key(worker.id))
        self._schedule()

    def _on_worker_decommissioning(self, m: WorkerDecommissioning, request: Any) -> None:
        if self.state == RecoveryState.STANDBY:
            self._send(m.workerRef, MasterInStandby())
        else:
            worker = self.id_to_worker.get(m.id)
            if worker is not None:
                self._decommission_worker(worker)

    def _on_decommission_workers(self, m: DecommissionWorkers, request: Any) -> None:
        for worker_id in m.ids:
            worker = self.id_to_worker.get(worker_id)
            if worker is not None:
                self._decommission_worker(worker)
                self._send(worker.endpoint, DecommissionWorker(self.epoch))

    def _on_decommission_workers_on_hosts(self, m: DecommissionWorkersOnHosts,
                                          request: Any) -> None:
        if self.state == RecoveryState.STANDBY:
            self._reply(request, 0)
            return
        hosts = {h.lower() for h in m.hostnames}
        matching = [w for address, w in self.address_to_worker.items()
                    if str(getattr(address, "host", w.host)).lower() in hosts]
        host_ports = ", ".join(w.host_port for w in matching)
        self._log(INFO, f"Decommissioning the workers with host:ports List({host_ports})")
        self._reply(request, len(matching))
        # Spark sends DecommissionWorkers to itself; processed right away here.
        self._on_decommission_workers(DecommissionWorkers([w.id for w in matching]), None)

    def _decommission_worker(self, worker: WorkerInfo) -> None:
        if worker.state != WorkerState.DECOMMISSIONED:
            self._log(INFO, f"Decommissioning worker {worker.id} on {worker.host}:{worker.port}")
            worker.state = WorkerState.DECOMMISSIONED
            for exec in list(worker.executors.values()):
                self._log(INFO, "Telling app of decommission executors")
                self._send(exec.application.driver, ExecutorUpdated(
                    exec.id, ExecutorState.DECOMMISSIONED, "worker decommissioned", None,
                    worker.host, self.epoch))
                exec.state = ExecutorState.DECOMMISSIONED
                exec.application.remove_executor(exec)
            # On recovery do not add a decommissioned worker back.
            self._unpersist(worker_key(worker.id))
        else:
            self._log(WARN, f"Skipping decommissioning worker {worker.id} on "
                            f"{worker.host}:{worker.port} as worker is already decommissioned")

    # -- applications -----------------------------------------------------------------------

    def _on_register_application(self, m: RegisterApplication, request: Any) -> None:
        if self.state == RecoveryState.STANDBY:
            return  # ignore, don't send response
        desc = m.appDescription
        problem = _validate_app_desc(desc)
        if problem is not None:
            self._log(ERROR, f"Refusing to register app {desc.name}: {problem}")
            self._send(m.driver, ApplicationRemoved(f"Invalid application: {problem}",
                                                        self.epoch))
            return
        self._log(INFO, f"Registering app {desc.name}")
        app = self._create_application(desc, m.driver)
        self._register_application(app)
        self._log(INFO, f"Registered app {desc.name} with ID {app.id}")
        self._persist_gated(app_key(app.id), app_record(app))
        self._send(m.driver, RegisteredApplication(app.id, self.self_ref, self.epoch))
        self._schedule()

    def _create_application(self, desc: ApplicationDescription, driver: Any) -> ApplicationInfo:
        now = self._now
        if self.conf.use_app_name_as_app_id:
            app_id = "".join(desc.name.lower().split())
        else:
            app_id = self._new_application_id(now)
        return ApplicationInfo(now, app_id, desc, now, driver, self.conf.default_cores)

    def _new_application_id(self, now_ms: int) -> str:
        app_id = self.conf.app_id_pattern % (format_timestamp(now_ms), self.next_app_number)
        self.next_app_number += 1
        if self.conf.app_number_modulo > 0:
            self.next_app_number %= self.conf.app_number_modulo
        return app_id

    def _register_application(self, app: ApplicationInfo) -> None:
        address = self.address_of(app.driver)
        if address in self.address_to_app:
            self._log(INFO, "Attempted to re-register application at same address: "
                            f"{format_address(address)}")
            return
        self.apps[app] = None
        self.id_to_app[app.id] = app
        self.address_to_app[address] = app
        self.waiting_apps.append(app)

    def _on_unregister_application(self, m: UnregisterApplication, request: Any) -> None:
        self._log(INFO, f"Received unregister request from application {m.appId}")
        app = self.id_to_app.get(m.appId)
        if app is not None:
            self._remove_application(app, ApplicationState.FINISHED)

    def _on_request_kill_application(self, m: RequestKillApplication, request: Any) -> None:
        app = self.id_to_app.get(m.appId)
        if app is not None:
            self._remove_application(app, ApplicationState.KILLED)
        self._reply(request, app is not None)

    def _remove_application(self, app: ApplicationInfo, state: ApplicationState) -> None:
        if app not in self.apps:
            return
        self._log(INFO, f"Removing app {app.id}")
        for key in [k for k in self._launch_backoff if k[0] == app.id]:
            del self._launch_backoff[key]
        del self.apps[app]
        self.id_to_app.pop(app.id, None)
        address = self.address_of(app.driver)
        if self.address_to_app.get(address) is app:
            del self.address_to_app[address]
        retained = self.conf.retained_applications
        if len(self.completed_apps) >= retained:
            for old in self.completed_apps[:max(retained // 10, 1)]:
                self._unpersist(completed_app_key(old.id))
            del self.completed_apps[:max(retained // 10, 1)]
        self.completed_apps.append(app)
        if app in self.waiting_apps:
            self.waiting_apps.remove(app)
        for exec in list(app.executors.values()):
            self._kill_executor(exec)
        app.mark_finished(state, self._now)
        self._completed_seq += 1
        self._persist(completed_app_key(app.id), completed_app_record(app, self._completed_seq))
        if state != ApplicationState.FINISHED:
            self._send(app.driver, ApplicationRemoved(str(state), self.epoch))
        self._unpersist(app_key(app.id))
        self._schedule()
        # Tell all workers the application has finished, so they can clean up its state.
        for worker in self.workers:
            self._send(worker.endpoint, ApplicationFinished(app.id, self.epoch))

    def _kill_executor(self, exec: ExecutorDesc) -> None:
        exec.worker.remove_executor(exec)
        self._send(exec.worker.endpoint,
                   KillExecutor(self.master_url, exec.application.id, exec.id, self.epoch))
        exec.state = ExecutorState.KILLED

    def _on_executor_state_changed(self, m: ExecutorStateChanged, request: Any) -> None:
        app = self.id_to_app.get(m.appId)
        exec = app.executors.get(m.execId) if app is not None else None
        if exec is None:
            self._log(WARN, f"Got status update for unknown executor {m.appId}/{m.execId}")
            self._reply(request, True)
            return
        old_state = exec.state
        if m.state == ExecutorState.RUNNING and old_state != ExecutorState.LAUNCHING:
            if old_state == ExecutorState.RUNNING:  # a retried ask: already applied
                self._reply(request, True)
                return
            text = f"executor {m.execId} state transfer from {old_state} to RUNNING is illegal"
            self._log(ERROR, text)
            if request is not None:
                self._out.append(ReplyFailure(request, text))
            return
        exec.state = m.state
        if m.state == ExecutorState.RUNNING:
            app.reset_retry_count()
            self._launch_backoff.pop((app.id, exec.worker.id), None)
        self._send(app.driver, ExecutorUpdated(m.execId, m.state, m.message, m.exitStatus, None,
                                               self.epoch))
        if m.state.isFinished():
            self._log(INFO, f"Removing executor {exec.full_id} because it is {m.state}")
            # A finished app keeps its executors so the UI shows them.
            if not app.is_finished():
                app.remove_executor(exec)
            exec.worker.remove_executor(exec)
            normal_exit = m.exitStatus == 0
            if not normal_exit and old_state == ExecutorState.LAUNCHING:
                self._back_off_launches(app, exec.worker)
            retries = self.conf.max_executor_retries
            # Only retry so many times so we don't loop forever; exits of decommissioned
            # executors are expected and don't count.
            if (not normal_exit and old_state != ExecutorState.DECOMMISSIONED
                    and app.increment_retry_count() >= retries and retries >= 0):
                if not any(e.state == ExecutorState.RUNNING for e in app.executors.values()):
                    self._log(ERROR, f"Application {app.desc.name} with ID {app.id} failed "
                                     f"{app.retry_count} times; removing it")
                    self._remove_application(app, ApplicationState.FAILED)
        self._schedule()
        self._reply(request, True)

    def _back_off_launches(self, app: ApplicationInfo, worker: WorkerInfo) -> None:
        """Ember: after an executor failed before it ever ran (a full disk, a broken
        environment), the next launch on that worker waits 1 s, 2 s, 4 s ... up to 60 s
        whenever the app can run elsewhere (another worker is alive, or another of its
        executors is starting or running), and past spark.deploy.maxExecutorRetries
        consecutive failures there in any case; meanwhile a replacement goes to another
        worker that can take it (_usable_after_failed_starts). Spark relaunches on that
        worker at once: thousands of launches a minute while the app runs elsewhere, and a
        young app removed after maxExecutorRetries failures in the same second on the one
        worker with free cores, a full one. Alone on one worker, the app's executor is
        replaced at once, as Spark's (so a broken app is removed as soon)."""
        key = (app.id, worker.id)
        failures, until = self._launch_backoff.get(key, (0, 0))
        failures += 1
        elsewhere = any(e.state in (ExecutorState.LAUNCHING, ExecutorState.RUNNING)
                        for e in app.executors.values()) or \
            sum(w.state == WorkerState.ALIVE for w in self.workers) > 1
        steps = failures if elsewhere else failures - max(self.conf.max_executor_retries, 0)
        delay = 0 if steps <= 0 else min(60_000, 1000 * 2 ** min(steps - 1, 6))
        self._launch_backoff[key] = (failures, max(until, self._now + delay))
        if delay:
            if steps == 1:
                self._log(WARN, f"Executors of {app.id} failed to start {failures} times in a "
                                f"row on {worker.id}; backing off launches there")
            self._out.append(ScheduleTimer(delay, LaunchBackoffExpired(app.id, worker.id),
                                           None))

    def _usable_after_failed_starts(self, app: ApplicationInfo, usable: list[WorkerInfo]
                                    ) -> list[WorkerInfo]:
        """Ember: the workers where the app's executors failed to start since one last ran
        there are left out while they back off (_back_off_launches), and used only when no
        other usable worker is left; Spark takes the worker that just failed again first,
        its cores being free."""
        backoff = self._launch_backoff
        now = self._now
        usable = [w for w in usable if backoff.get((app.id, w.id), (0, 0))[1] <= now]
        clean = [w for w in usable if (app.id, w.id) not in backoff]
        return clean or usable

    def _on_request_executors(self, m: RequestExecutors, request: Any) -> None:
        pairs = list(m.resourceProfileToTotalExecs.items()
                     if isinstance(m.resourceProfileToTotalExecs, dict)
                     else m.resourceProfileToTotalExecs)
        shown = "Map(" + ", ".join(f"ResourceProfile(id={rp.id}) -> {n}"
                                   for rp, n in pairs) + ")"
        app = self.id_to_app.get(m.appId)
        if app is None:
            self._log(WARN, f"Unknown application {m.appId} requested executors: {shown}.")
            self._reply(request, False)
            return
        for rp, _ in pairs:
            cores = rp.getExecutorCores()
            if cores is not None and cores < 1:
                raise ValueError(f"spark.executor.cores must be positive, got {cores}")
        self._log(INFO, f"Application {m.appId} requested executors: {shown}.")
        app.request_executors(pairs)
        self._schedule()
        self._reply(request, True)

    def _on_kill_executors(self, m: KillExecutors, request: Any) -> None:
        ids: list[int] = []
        for raw in m.executorIds:
            try:
                ids.append(int(str(raw)))
            except ValueError:
                self._log(ERROR, f"Encountered executor with a non-integer ID: {raw}. Ignoring")
        app = self.id_to_app.get(m.appId)
        if app is None:
            self._log(WARN, f"Unregistered application {m.appId} requested us to kill executors!")
            self._reply(request, False)
            return
        self._log(INFO, f"Application {m.appId} requests to kill executors: "
                        f"{', '.join(map(str, ids))}")
        known = [i for i in ids if i in app.executors]
        unknown = [i for i in ids if i not in app.executors]
        for exec_id in known:
            exec = app.executors[exec_id]
            app.remove_executor(exec)
            self._kill_executor(exec)
        if unknown:
            self._log(WARN, f"Application {m.appId} attempted to kill non-existent executors: "
                            f"{', '.join(map(str, unknown))}")
        self._schedule()
        self._reply(request, True)

    # -- drivers ----------------------------------------------------------------------------

    def _on_request_submit_driver(self, m: RequestSubmitDriver, request: Any) -> None:
        if self.state != RecoveryState.ALIVE:
            self._reply(request, SubmitDriverResponse(
                self.self_ref, False, None, self._not_alive("accept driver submissions")))
            return
        desc = m.driverDescription
        if desc.cores < 0 or desc.mem < 0:
            self._reply(request, SubmitDriverResponse(
                self.self_ref, False, None,
                f"Invalid driver description: cores ({desc.cores}) and memory ({desc.mem} MB) "
                "must be non-negative."))
            return
        self._log(INFO, f"Driver submitted {desc.command.mainClass}")
        driver = self._create_driver(desc)
        self._persist_gated(driver_key(driver.id), driver_record(driver), request)
        self.waiting_drivers.append(driver)
        self.drivers[driver.id] = driver
        self._schedule()
        # "Fire and forget": the client polls RequestDriverStatus.
        self._reply(request, SubmitDriverResponse(
            self.self_ref, True, driver.id, f"Driver successfully submitted as {driver.id}"))

    def _create_driver(self, desc: DriverDescription) -> DriverInfo:
        now = self._now
        driver_id = self.conf.driver_id_pattern % (format_timestamp(now), self.next_driver_number)
        self.next_driver_number += 1
        if self.conf.use_driver_id_as_app_name:
            opts = [o for o in desc.command.javaOpts if not o.startswith("-Dspark.app.name=")]
            opts.append(f"-Dspark.app.name={driver_id}")
            desc = replace(desc, command=replace(desc.command, javaOpts=opts))
        return DriverInfo(now, driver_id, desc, now)

    def _on_request_kill_driver(self, m: RequestKillDriver, request: Any) -> None:
        driver_id = m.driverId
        if self.state != RecoveryState.ALIVE:
            self._reply(request, KillDriverResponse(self.self_ref, driver_id, False,
                                                    self._not_alive("kill drivers")))
            return
        self._log(INFO, f"Asked to kill driver {driver_id}")
        driver = self.drivers.get(driver_id)
        if driver is None:
            text = f"Driver {driver_id} has already finished or does not exist"
            self._log(WARN, text)
            self._reply(request, KillDriverResponse(self.self_ref, driver_id, False, text))
            return
        was_waiting = self._kill_driver(driver)
        text = f"Kill request for {driver_id} submitted"
        self._log(INFO, text)
        self._reply(request, KillDriverResponse(self.self_ref, driver_id, True, text))
        if was_waiting:  # Spark: self.send(DriverStateChanged(driverId, KILLED, None))
            self._on_driver_state_changed(DriverStateChanged(driver_id, DriverState.KILLED), None)

    def _kill_driver(self, driver: DriverInfo) -> bool:
        """Waiting: drop it from the queue (caller then removes it as KILLED) -> True.
        Running: ask its worker to kill it; the worker's DriverStateChanged finishes it."""
        if driver in self.waiting_drivers:
            self.waiting_drivers.remove(driver)
            return True
        if driver.worker is not None:
            self._send(driver.worker.endpoint, KillDriver(driver.id, self.epoch))
        return False

    def _on_request_kill_all_drivers(self, m: RequestKillAllDrivers, request: Any) -> None:
        if self.state != RecoveryState.ALIVE:
            self._reply(request, KillAllDriversResponse(self.self_ref, False,
                                                        self._not_alive("kill drivers")))
            return
        self._log(INFO, "Asked to kill all drivers")
        killed_waiting = []
        for driver in list(self.drivers.values()):
            if self._kill_driver(driver):
                killed_waiting.append(driver.id)
            self._log(INFO, f"Kill request for {driver.id} submitted")
        self._reply(request, KillAllDriversResponse(self.self_ref, True,
                                                    "Kill request for all drivers submitted"))
        for driver_id in killed_waiting:
            self._on_driver_state_changed(DriverStateChanged(driver_id, DriverState.KILLED), None)

    def find_driver(self, driver_id: str) -> Optional[DriverInfo]:
        """An active or retained completed driver by id."""
        driver = self.drivers.get(driver_id)
        if driver is None:
            driver = next((d for d in reversed(self.completed_drivers) if d.id == driver_id),
                          None)
        return driver

    def _on_request_driver_status(self, m: RequestDriverStatus, request: Any) -> None:
        if self.state != RecoveryState.ALIVE:
            self._reply(request, DriverStatusResponse(
                False, None, None, None, self._not_alive("request driver status")))
            return
        driver = self.find_driver(m.driverId)
        if driver is None:
            self._reply(request, DriverStatusResponse(False, None, None, None, None))
        else:
            w = driver.worker
            self._reply(request, DriverStatusResponse(
                True, driver.state, w.id if w else None, w.host_port if w else None,
                driver.exception, driver.exit_status, driver.attempt))

    def _on_driver_state_changed(self, m: DriverStateChanged, request: Any) -> None:
        driver = self.drivers.get(m.driverId)
        if driver is not None and m.attempt is not None and m.attempt != driver.attempt:
            # Fencing: a copy from before a relaunch (its worker was lost, then came back)
            # reports on a driver that now runs elsewhere; it must not end the live one.
            self._log(WARN, f"Ignoring {m.state} of {m.driverId} attempt {m.attempt}: attempt "
                            f"{driver.attempt} is the current one")
            return
        if driver is None and any(d.id == m.driverId for d in self.completed_drivers):
            # A worker re-sends the final states of drivers that ended around a failover.
            self._log(INFO, f"Driver {m.driverId} has already finished; ignoring {m.state}")
            return
        if driver is not None and m.exitStatus is not None:
            driver.exit_status = m.exitStatus
        if m.state == DriverState.RELAUNCHING and driver is not None:
            # Ember: its worker killed this copy when no master answered within its lease
            # (fencing); the copy is gone, so a supervised driver is placed again at once.
            if driver.desc.supervise:
                self._log(INFO, f"Re-launching {driver.id}: {m.exception}")
                self._relaunch_driver(driver)
            else:
                self._remove_driver(m.driverId, DriverState.ERROR, m.exception)
            return
        if m.state in (DriverState.ERROR, DriverState.FINISHED, DriverState.KILLED,
                       DriverState.FAILED):
            self._remove_driver(m.driverId, m.state, m.exception)
        else:
            self._log(ERROR, f"Received unexpected state update for driver {m.driverId}: "
                             f"{m.state}")

    def _on_request_clear_completed(self, m: Any, request: Any) -> None:
        self._log(INFO, f"Asked to clear {len(self.completed_drivers)} completed drivers and "
                        f"{len(self.completed_apps)} completed apps.")
        for driver in self.completed_drivers:
            self._unpersist(completed_driver_key(driver.id))
        for app in self.completed_apps:
            self._unpersist(completed_app_key(app.id))
        self._forget_uploads(self.completed_drivers)
        self.completed_drivers.clear()
        self.completed_apps.clear()
        self._reply(request, True)

    def _launch_driver(self, worker: WorkerInfo, driver: DriverInfo) -> None:
        self._log(INFO, f"Launching driver {driver.id} on worker {worker.id}")
        worker.add_driver(driver)
        driver.worker = worker
        # Recorded as launched before it is sent: a master that dies in between looks for
        # it on the workers after recovery instead of launching it a second time.
        self._persist(driver_key(driver.id), driver_record(driver))
        self._send(worker.endpoint, LaunchDriver(driver.id, driver.desc, driver.resources,
                                                 driver.attempt, self.epoch))
        driver.state = DriverState.RUNNING

    def _remove_driver(self, driver_id: str, final_state: DriverState,
                       exception: Optional[str]) -> None:
        driver = self.drivers.pop(driver_id, None)
        if driver is None:
            self._log(WARN, f"Asked to remove unknown driver: {driver_id}")
            return
        self._log(INFO, f"Removing driver: {driver_id} ({final_state})")
        retained = self.conf.retained_drivers
        if len(self.completed_drivers) >= retained:
            dropped = self.completed_drivers[:max(retained // 10, 1)]
            for old in dropped:
                self._unpersist(completed_driver_key(old.id))
            del self.completed_drivers[:max(retained // 10, 1)]
            self._forget_uploads(dropped)
        self.completed_drivers.append(driver)
        self._unpersist(driver_key(driver.id))
        driver.state = final_state
        driver.exception = exception
        self._completed_seq += 1
        self._persist(completed_driver_key(driver.id),
                      completed_driver_record(driver, self._completed_seq))
        if driver in self.waiting_drivers:
            self.waiting_drivers.remove(driver)
        if driver.worker is not None:
            driver.worker.remove_driver(driver)
        self._schedule()

    def _forget_uploads(self, dropped: list[DriverInfo]) -> None:
        """Uploads of drivers leaving the retained list that no active driver still uses."""
        used = set().union(*(upload_urls(d.desc) for d in self.drivers.values()))
        for url in sorted(set().union(*(upload_urls(d.desc) for d in dropped)) - used):
            self._out.append(DeleteUpload(url))

    def _relaunch_driver(self, driver: DriverInfo, not_before_ms: int = 0) -> None:
        """Place a supervised driver whose worker was lost again, under the same id and the
        next attempt number. Spark gives it a new id instead (SPARK-19900), so that a copy
        still running behind a partition cannot be confused with the relaunch; here the
        attempt number does that job (stale reports are ignored, and the old worker is told
        to kill its copy when it re-registers), and `--status`/`ember logs` keep working
        with the id the user was given. Fencing (SPARK-19900): it is placed no earlier than
        `not_before_ms`, when the lost worker's lease has expired and it killed its copy."""
        if driver.worker is not None:
            driver.worker.remove_driver(driver)
        driver.worker = None
        driver.resources = {}
        driver.attempt += 1
        driver.state = DriverState.SUBMITTED
        self._log(INFO, f"Driver {driver.id} will be relaunched as attempt {driver.attempt}")
        driver.relaunch_not_before = not_before_ms
        if not_before_ms > self._now:
            self._log(INFO, f"Driver {driver.id} waits {not_before_ms - self._now} ms for the "
                            "lease of its lost worker to expire before it is relaunched")
            self._out.append(ScheduleTimer(not_before_ms - self._now, LeaseExpired(driver.id),
                                           None))
        self._persist(driver_key(driver.id), driver_record(driver))
        self.waiting_drivers.append(driver)
        self._schedule()

    # -- UI / REST queries ------------------------------------------------------------------

    def _on_request_master_state(self, m: RequestMasterState, request: Any) -> None:
        self._reply(request, self.master_state_response())

    def _on_request_readyz(self, m: RequestReadyz, request: Any) -> None:
        self._reply(request, self.state != RecoveryState.STANDBY)

    def _on_bound_ports_request(self, m: BoundPortsRequest, request: Any) -> None:
        self._reply(request, BoundPortsResponse(self.port, self.web_ui_port, self.rest_port))

    def master_state_response(self, now_ms: Optional[int] = None) -> MasterStateResponse:
        """A snapshot of everything the UI and `/json` show (RequestMasterState's answer)."""
        now = self._now if now_ms is None else int(now_ms)
        return MasterStateResponse(
            self.host, self.port, self.rest_port,
            [worker_summary(w) for w in self.workers],
            [application_summary(a, now) for a in self.apps],
            [application_summary(a, now) for a in self.completed_apps],
            [driver_summary(d) for d in self.drivers.values()],
            [driver_summary(d) for d in self.completed_drivers],
            self.state, self.epoch, self.recovery_duration_ms,
            None if self.state == RecoveryState.STANDBY else f"spark://{self.host}:{self.port}")

    # -- leadership and recovery ------------------------------------------------------------

    def _on_elected_leader(self, m: ElectedLeader, request: Any) -> None:
        # Nothing persisted (or recovery mode NONE): straight to ALIVE.
        if self.state != RecoveryState.STANDBY:
            self._log(WARN, f"Elected leader again (epoch {m.epoch}) while {self.state}; "
                            "ignoring")
            return
        self.epoch = m.epoch
        self.state = RecoveryState.ALIVE
        self._log(INFO, f"I have been elected leader! New state: {self.state}")

    def _on_begin_recovery(self, m: BeginRecovery, request: Any) -> None:
        if self.state != RecoveryState.STANDBY:
            self._log(WARN, f"Elected leader again (epoch {m.epoch}) while {self.state}; "
                            "ignoring")
            return
        self._restore_completed(m)
        if not (m.stored_apps or m.stored_drivers or m.stored_workers):
            self._on_elected_leader(ElectedLeader(m.epoch), request)
            return
        self.epoch = m.epoch
        self.state = RecoveryState.RECOVERING
        self._log(INFO, f"I have been elected leader! New state: {self.state}")
        self.recovery_start_time_ms = self._now
        changed = MasterChanged(self.self_ref, self.master_web_ui_url, self.epoch)
        for app in m.stored_apps:
            self._log(INFO, f"Trying to recover app: {app.id}")
            self._register_application(app)
            app.state = ApplicationState.UNKNOWN
            self._send(app.driver, changed)
        for driver in m.stored_drivers:
            self.drivers[driver.id] = driver
            if driver.state == DriverState.SUBMITTED:
                # Never launched: it waits for resources again (Spark would declare it lost).
                self.waiting_drivers.append(driver)
            # Launched ones are re-attached by their worker, or found missing at the end.
        for worker in m.stored_workers:
            self._log(INFO, f"Trying to recover worker: {worker.id}")
            self._register_worker(worker)
            worker.state = WorkerState.UNKNOWN
            worker.last_heartbeat = self._now  # transient in Spark: reset on read
            self._awaiting_worker_state.add(worker.id)
            self._send(worker.endpoint, changed)
        self.next_app_number = max(self.next_app_number, _next_number(
            [a.id for a in m.stored_apps] + [a.id for a in self.completed_apps]))
        self.next_driver_number = max(self.next_driver_number, _next_number(
            [d.id for d in m.stored_drivers] + [d.id for d in self.completed_drivers]))
        if self._can_complete_recovery():
            self._complete_recovery()
        else:
            self._out.append(ScheduleTimer(self.conf.recovery_timeout_ms,
                                           CompleteRecovery(self.epoch)))

    def _restore_completed(self, m: BeginRecovery) -> None:
        """The retained lists as they were (newest last), trimmed to today's limits."""
        self.completed_apps = list(m.stored_completed_apps)[-self.conf.retained_applications:]
        self.completed_drivers = list(m.stored_completed_drivers)[-self.conf.retained_drivers:]
        self._completed_seq = max(self._completed_seq, m.completed_seq)
        self.next_app_number = _next_number([a.id for a in self.completed_apps])
        self.next_driver_number = _next_number([d.id for d in self.completed_drivers])

    def _can_complete_recovery(self) -> bool:
        return (not any(w.state == WorkerState.UNKNOWN for w in self.workers)
                and not any(a.state == ApplicationState.UNKNOWN for a in self.apps))

    def _on_master_change_acknowledged(self, m: MasterChangeAcknowledged, request: Any) -> None:
        app = self.id_to_app.get(m.appId)
        if app is not None:
            self._log(INFO, f"Application has been re-registered: {m.appId}")
            if app.state == ApplicationState.UNKNOWN:
                app.state = ApplicationState.WAITING
        else:
            self._log(WARN, f"Master change ack from unknown app: {m.appId}")
        if self.state == RecoveryState.RECOVERING and self._can_complete_recovery():
            self._complete_recovery()

    def _on_worker_scheduler_state_response(self, m: WorkerSchedulerStateResponse,
                                            request: Any) -> None:
        worker = self.id_to_worker.get(m.id)
        if worker is None:
            self._log(WARN, f"Scheduler state from unknown worker: {m.id}")
        else:
            self._log(INFO, f"Worker has been re-registered: {m.id}")
            worker.state = WorkerState.ALIVE
            self._reattach(worker, m.execResponses, m.driverResponses)
        if self.state == RecoveryState.RECOVERING and self._can_complete_recovery():
            self._complete_recovery()

    def _reattach(self, worker: WorkerInfo, executors: list[WorkerExecutorStateResponse],
                  drivers: list[WorkerDriverStateResponse]) -> None:
        """Take back what a recovered worker runs. Idempotent (a worker may report twice:
        WorkerSchedulerStateResponse and, after re-registering, WorkerLatestState). Work the
        recovered master has no record of (its app or driver ended meanwhile) is killed."""
        self._awaiting_worker_state.discard(worker.id)
        for resp in executors:
            d = resp.desc
            app = self.id_to_app.get(d.appId)
            if app is None:
                self._log(WARN, f"Killing executor {d.appId}/{d.execId} on {worker.id}: its "
                                "application is not known after recovery")
                self._send(worker.endpoint,
                           KillExecutor(self.master_url, d.appId, d.execId, self.epoch))
                continue
            if d.execId in app.executors:
                continue
            exec = app.add_executor(worker, d.cores, d.memoryMb, dict(resp.resources),
                                    d.rpId, use_id=d.execId)
            worker.add_executor(exec)
            worker.recover_resources(resp.resources)
            exec.copy_state(d)
        for resp in drivers:
            driver = self.drivers.get(resp.driverId)
            if driver is None or (driver.worker is not None and driver.worker is not worker):
                self._log(WARN, f"Killing driver {resp.driverId} on {worker.id}: it is not "
                                "known after recovery")
                self._send(worker.endpoint, KillDriver(resp.driverId, self.epoch))
                continue
            if driver.worker is worker:
                continue
            if driver in self.waiting_drivers:
                self.waiting_drivers.remove(driver)
            driver.worker = worker
            driver.state = DriverState.RUNNING
            driver.resources = dict(resp.resources)
            worker.recover_resources(resp.resources)
            worker.add_driver(driver)

    def _complete_recovery(self) -> None:
        if self.state != RecoveryState.RECOVERING:
            return  # only once
        self.state = RecoveryState.COMPLETING_RECOVERY
        silent = [w for w in self.workers if w.state == WorkerState.UNKNOWN]
        for worker in silent:
            self._remove_worker(worker, "Not responding for recovery")
        for app in [a for a in self.apps if a.state == ApplicationState.UNKNOWN]:
            self._remove_application(app, ApplicationState.FINISHED)
        for app in self.apps:
            if app.state == ApplicationState.WAITING:
                app.state = ApplicationState.RUNNING
        for driver in [d for d in self.drivers.values()
                       if d.worker is None and d not in self.waiting_drivers]:
            self._log(WARN, f"Driver {driver.id} was not found after master recovery")
            if driver.desc.supervise:
                self._log(WARN, f"Re-launching {driver.id}")
                # every worker answered without it: nobody runs it. Else a silent worker
                # may, behind a partition: wait out a lease counted from when the old
                # master was last able to renew it, at the latest
                self._relaunch_driver(driver, relaunch_not_before_ms(
                    self.recovery_start_time_ms, self.conf.worker_lease_ms) if silent else 0)
            else:
                self._remove_driver(driver.id, DriverState.ERROR, None)
                self._log(WARN, f"Did not re-launch {driver.id} because it was not supervised")
        self._awaiting_worker_state.clear()
        self.state = RecoveryState.ALIVE
        self._schedule()
        self.recovery_duration_ms = self._now - self.recovery_start_time_ms
        self._log(INFO, f"Recovery complete in {self.recovery_duration_ms} ms - "
                        "resuming operations!")

    def _on_complete_recovery(self, m: CompleteRecovery, request: Any) -> None:
        if m.epoch == self.epoch:   # a timer armed in an earlier leadership does nothing
            self._complete_recovery()

    def _on_revoked_leadership(self, m: RevokedLeadership, request: Any) -> None:
        """Step down at once and keep nothing to act on; a later election recovers from the
        persisted records (Spark exits the process instead)."""
        if self.state == RecoveryState.STANDBY:
            return
        self._log(ERROR, "Leadership has been revoked -- stepping down to STANDBY.")
        self.state = RecoveryState.STANDBY
        self._reset_cluster_state()

    def _on_persist_failed(self, m: PersistFailed, request: Any) -> None:
        """A registration or submission whose record could not be written is undone, with
        what the same batch's schedule() gave it (the shell sent none of it): nothing that
        was never durable is acknowledged or acted on."""
        kind, _, entity_id = m.key.partition("_")
        self._log(ERROR, f"Cannot write {m.key} to the recovery store ({m.error}): "
                         "forgetting it, its sender will ask again")
        if kind == "driver":
            driver = self.drivers.pop(entity_id, None)
            if driver is not None:
                if driver.worker is not None:
                    driver.worker.remove_driver(driver)
                if driver in self.waiting_drivers:
                    self.waiting_drivers.remove(driver)
            self._reply(m.request, SubmitDriverResponse(
                self.self_ref, False, None,
                f"{NOT_RECORDED_PREFIX} ({m.error}); nothing was submitted, try again."))
        elif kind == "app":
            app = self.id_to_app.pop(entity_id, None)
            if app is not None:
                for exec in list(app.executors.values()):
                    exec.worker.remove_executor(exec)
                self.apps.pop(app, None)
                address = self.address_of(app.driver)
                if self.address_to_app.get(address) is app:
                    del self.address_to_app[address]
                if app in self.waiting_apps:
                    self.waiting_apps.remove(app)
        elif kind == "worker":
            worker = self.id_to_worker.pop(entity_id, None)
            if worker is not None:
                self._forget_worker(worker)
                address = self.address_of(worker.endpoint)
                if self.address_to_worker.get(address) is worker:
                    del self.address_to_worker[address]
                for exec in list(worker.executors.values()):
                    app = exec.application
                    app.executors.pop(exec.id, None)
                    app.executors_per_resource_profile_id.get(exec.rp_id, set()).discard(exec.id)
                    app.cores_granted -= exec.cores
                for driver in list(worker.drivers.values()):
                    driver.worker, driver.resources = None, {}
                    driver.state = DriverState.SUBMITTED
                    self.waiting_drivers.append(driver)
                self._schedule()    # what it was given goes to the other workers
        else:
            self._log(ERROR, f"PersistFailed for an unexpected record {m.key}")

    def _on_request_app_status(self, m: RequestAppStatus, request: Any) -> None:
        self._reply(request, AppStatusResponse(self.state, m.appId in self.id_to_app,
                                               self.epoch))

    def _on_disconnected(self, m: Disconnected, request: Any) -> None:
        # The disconnected client could be a worker or an app; remove whichever it was.
        shown = format_address(m.address)
        self._log(INFO, f"{shown} got disassociated, removing it.")
        worker = self.address_to_worker.get(m.address)
        if worker is not None:
            self._remove_worker(worker, f"{shown} got disassociated")
        app = self.address_to_app.get(m.address)
        if app is not None:
            self._remove_application(app, ApplicationState.FINISHED)
        if self.state == RecoveryState.RECOVERING and self._can_complete_recovery():
            self._complete_recovery()

    # -- schedule() -------------------------------------------------------------------------

    def _schedule(self) -> None:
        """Spark's schedule(): waiting drivers first, then executors for waiting apps (FIFO)."""
        if self.state != RecoveryState.ALIVE:
            return
        alive = [w for w in self.workers if w.state == WorkerState.ALIVE]
        ready = [d for d in self.waiting_drivers if d.relaunch_not_before <= self._now]
        if ready:
            plan = schedule_drivers(ready, alive, self.conf.spread_out_drivers,
                                    self.conf.max_drivers,
                                    len(self.drivers) - len(self.waiting_drivers), self.rng,
                                    self.conf.reserve_executor_for_drivers)
            # Warnings and launches interleave in Spark; launches first is equivalent here.
            for driver, worker in plan.placements:
                driver.resources = worker.acquire_resources(driver.desc.resourceReqs)
                self._launch_driver(worker, driver)
                self.waiting_drivers.remove(driver)
            for text in plan.warnings:
                self._log(WARN, text)
            for d in self.waiting_drivers:
                reason = plan.waiting_reasons.get(d.id)
                if reason is not None and reason != d.wait_reason:
                    self._log(INFO, f"Driver {d.id} waits: {reason}")
                d.wait_reason = reason
            self._warn_unplaceable_drivers(alive)
        self._start_executors_on_workers(alive)

    def _warn_unplaceable_drivers(self, alive: list[WorkerInfo]) -> None:
        """Once per driver: no alive worker is big enough for it even when idle, so it will
        wait until a bigger worker registers (Spark only warns while the cluster is idle,
        which hides this behind any running executor)."""
        for d in self.waiting_drivers:
            if d.id in self._capacity_warned or any(
                    w.memory >= d.desc.mem and w.cores >= d.desc.cores for w in alive):
                continue
            self._capacity_warned.add(d.id)
            self._log(WARN, f"Driver {d.id} requires more resources than any of our workers "
                            f"have: it asks for {d.desc.cores} cores and "
                            f"{megabytes_to_string(d.desc.mem)}; it waits for a worker that "
                            "large to register")

    def _start_executors_on_workers(self, alive: list[WorkerInfo]) -> None:
        policy = self.conf.worker_selection_policy
        spread_out = self.conf.spread_out_apps
        ordered: Optional[WorkerOrder] = None  # alive workers in policy order, built on demand
        for app in list(self.waiting_apps):
            for rp_id in app.requested_rp_ids():
                self._log(INFO, f"Start scheduling for app {app.id} with rpId: {rp_id}")
                desc = app.resource_desc(rp_id)
                cpe = desc.cores_per_executor
                # If the cores left are fewer than one executor's, they are not allocated.
                if app.cores_left < (cpe if cpe is not None else 1):
                    continue
                if ordered is None:
                    ordered = WorkerOrder(alive, policy)
                usable = usable_workers(app, ordered, policy, rp_id, presorted=True)
                if self._launch_backoff:
                    usable = self._usable_after_failed_starts(app, usable)
                if (len(self.waiting_apps) == 1 and not self.waiting_apps[0].executors
                        and not usable):
                    self._log(WARN, app_warning(app.id))
                assigned = schedule_executors_on_workers(app, usable, spread_out, rp_id)
                changed = []
                for pos in compress(range(len(assigned)), assigned):  # cores > 0 only
                    cores = assigned[pos]
                    worker = usable[pos]
                    changed.append(worker)
                    for exec_cores in allocate_worker_resource_to_executors(cores, cpe):
                        allocated = worker.acquire_resources(desc.custom_resources_per_executor)
                        exec = app.add_executor(worker, exec_cores, desc.memory_mb_per_executor,
                                                allocated, rp_id)
                        self._launch_executor(worker, exec)
                        app.state = ApplicationState.RUNNING
                if changed:
                    ordered.update(changed)

    def _launch_executor(self, worker: WorkerInfo, exec: ExecutorDesc) -> None:
        self._log(INFO, f"Launching executor {exec.full_id} on worker {worker.id}")
        worker.add_executor(exec)
        app = exec.application
        self._send(worker.endpoint, LaunchExecutor(
            self.master_url, app.id, exec.id, exec.rp_id, app.desc, exec.cores, exec.memory,
            exec.resources, self.epoch))
        self._send(app.driver, ExecutorAdded(exec.id, worker.id, worker.host_port, exec.cores,
                                             exec.memory, self.epoch))


# ---------------------------------------------------------------------------------------------
# Snapshots for MasterStateResponse
# ---------------------------------------------------------------------------------------------

def worker_summary(w: WorkerInfo) -> WorkerSummary:
    return WorkerSummary(w.id, w.host, w.port, w.web_ui_address, w.cores, w.cores_used, w.memory,
                         w.memory_used, w.resources_info, w.resources_info_used, w.state,
                         w.last_heartbeat)


def executor_summary(e: ExecutorDesc) -> ExecutorSummary:
    return ExecutorSummary(e.id, e.application.id, e.worker.id, e.worker.host_port, e.cores,
                           e.memory, dict(e.resources), e.rp_id, e.state)


def application_summary(a: ApplicationInfo, now_ms: int) -> ApplicationSummary:
    return ApplicationSummary(
        a.id, a.start_time, a.desc, a.submit_date, a.state, a.cores_granted, a.end_time,
        a.duration(now_ms), [executor_summary(e) for e in a.executors.values()],
        [executor_summary(e) for e in a.removed_executors])


def driver_summary(d: DriverInfo) -> DriverSummary:
    w = d.worker
    return DriverSummary(d.id, d.start_time, d.desc, d.submit_date, d.state,
                         w.id if w else None, w.host_port if w else None, dict(d.resources),
                         d.exception, d.wait_reason)


__all__ = [
    "MasterState", "MasterConfig", "Ask", "Disconnected", "BeginRecovery", "Send", "Reply",
    "ReplyFailure", "Persist", "PersistFailed", "Unpersist", "DeleteUpload", "Log",
    "ScheduleTimer", "Instruction", "LeaseExpired", "LaunchBackoffExpired",
    "INFO", "WARN", "ERROR", "BACKUP_STANDALONE_MASTER_PREFIX", "megabytes_to_string",
    "bytes_to_string", "format_timestamp", "format_address", "worker_summary",
    "application_summary", "driver_summary", "executor_summary",
]
