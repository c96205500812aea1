"""The standalone worker as a sans-I/O state machine: `WorkerState.handle(event, now, wall_ms)`.

Why: Spark's `Worker` is an RPC endpoint whose handlers send messages, start processes, arm
timers and create directories as they go, so every behaviour needs real processes to test.
Here, as in the master (`deploy/master/state.py`), the handlers only change in-memory
bookkeeping and return *instructions* (`ember.deploy.instructions`); the `Worker` endpoint
in `worker.py` is the thin shell that turns RPC messages, runner reports and timer ticks
into events and carries the instructions out in order. No sockets, processes, clocks or
files in here: registration and its backoff, fencing and the master lease, executor and
driver bookkeeping, resources, cleanup decisions and decommissioning are tested directly
(tests/test_worker_state.py). One writer: the shell calls `handle` from its loop only.

Events (`handle(event, now, wall_ms)`: `now` monotonic seconds, `wall_ms` epoch ms):
- `Started(self_ref)`: the endpoint is up (logs, then registers with every master);
- `Received(message, sender, peer)`: a deploy message that arrived with `send`; `peer` is
  the connection's `PeerInfo` (address, scope, local) - trust comes from it, never from a
  field of the message;
- `Ask(request, message)`: RequestWorkerState or RequestDriverLog arrived as an ask;
- `Disconnected(address)`, `MasterRefResolved(...)`, `AskAnswered(...)`: outcomes of I/O;
- `ExecutorRunnerReport(m)` / `DriverRunnerReport(m)`: a runner's state change;
  `RunnerLaunchFailed(...)`: a launch instruction failed before its runner started;
- timer ticks it armed itself: `RegistrationRetryTick`, `HeartbeatTick`, `LeaseCheckTick`,
  `WorkDirCleanupTick`, `RetryExecutorStateSync(m)` (never arrive over the wire);
- `KillAll(state, message)` (the daemon stops) and `Stopping()` (the endpoint stops).

Behaviour and its deliberate deviations from Spark are those described in `worker.py`'s
module docstring. A handler that raises changes nothing: the state is restored to what it
was before the event and only a log line and the ask's failure come out.
"""
from __future__ import annotations

import copy
import enum
import math
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from ember.deploy.fencing import EpochFence, MasterLease
from ember.deploy.instructions import (
    ERROR, INFO, WARN, Ask, AskAnswered, CancelTimer, CleanupApplication, CleanupWorkDir,
    ConnectToMaster, Disconnected, Exit, Instruction, KillDriverRunner, KillExecutorRunner,
    LaunchDriverRunner, LaunchExecutorRunner, Log, MasterRefResolved, Reply, ReplyFailure,
    RunnerLaunchFailed, ScheduleTimer, Send, SendAsk, ServeDriverLog,
)
from ember.deploy.messages import (
    ApplicationDescription, ApplicationFinished, DecommissionWorker, DriverDescription,
    DriverRunnerSummary, DriverState, DriverStateChanged, ExecutorDescription,
    ExecutorRunnerSummary, ExecutorState, ExecutorStateChanged, Heartbeat, HeartbeatResponse,
    KillDriver, KillExecutor, LaunchDriver, LaunchExecutor, MasterChanged, MasterInStandby,
    ReconnectWorker, RegisteredWorker, RegisterWorker, RegisterWorkerFailed, RequestDriverLog,
    RequestWorkerState, ResourceInformation, WorkerDecommissioning,
    WorkerDecommissionSigReceived, WorkerDriverStateResponse, WorkerExecutorStateResponse,
    WorkerLatestState, WorkerSchedulerStateResponse, WorkerStateResponse,
)
from ember.deploy.worker.config import WorkerConf
from ember.rpc.address import RpcAddress
from ember.rpc.errors import RpcTimeoutError, UnsupportedMessageError
from ember.rpc.security import SCOPE_ENV
from ember.util.units import megabytes_to_string

ENDPOINT_NAME = "Worker"

# Start or stop work: only from the current master's connection (Deliver 2 of issue 11).
MASTER_ONLY_MESSAGES: tuple[type, ...] = (LaunchExecutor, KillExecutor, LaunchDriver,
                                          KillDriver, ApplicationFinished, DecommissionWorker)
# What only the active master may tell a worker: refused from an older leadership epoch.
FENCED_MESSAGES: tuple[type, ...] = (RegisteredWorker, ReconnectWorker, MasterChanged,
                                     LaunchExecutor, KillExecutor, ApplicationFinished,
                                     LaunchDriver, KillDriver, DecommissionWorker)
# The asks the worker answers; any other ask is an UnsupportedMessageError.
ASK_MESSAGES: tuple[type, ...] = (RequestWorkerState, RequestDriverLog)
RESEND_SLACK_S = 10.0   # driver reports this long before a lost connection may be lost too

# Spark's Worker companion constants (§4.2)
FUZZ_MULTIPLIER_INTERVAL_LOWER_BOUND = 0.500
INITIAL_INTERVAL_BASE = 10   # seconds, times FUZZ, rounded
PROLONGED_INTERVAL_BASE = 60

# Keys of the periodic timers the state arms and cancels.
REGISTRATION_TIMER = "registration-retry"
HEARTBEAT_TIMER = "heartbeat"
LEASE_TIMER = "lease-check"
CLEANUP_TIMER = "work-dir-cleanup"


# ---------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------

def _java_round(x: float) -> int:
    """Scala's math.round: half up (Python's round() is half-to-even)."""
    return int(math.floor(x + 0.5))


def registration_intervals(fuzz: float, scale: float = 1.0) -> tuple[float, float]:
    """(INITIAL, PROLONGED) retry intervals in seconds: round(10*fuzz), round(60*fuzz)
    (5-15 s and 30-90 s), multiplied by spark.ember.worker.registrationIntervalScale."""
    return (_java_round(INITIAL_INTERVAL_BASE * fuzz) * scale,
            _java_round(PROLONGED_INTERVAL_BASE * fuzz) * scale)


class RetryAction(enum.Enum):
    """What one tick of the registration retry timer does (Worker.reregisterWithMaster)."""
    CANCEL = "cancel"                       # registered meanwhile: stop the timer
    RETRY = "retry"                         # try again, keep the interval
    RETRY_AND_PROLONG = "retry_and_prolong" # try again, then switch to PROLONGED
    GIVE_UP = "give_up"                     # "All masters are unresponsive! Giving up."


def reregister_action(attempt: int, registered: bool, initial_retries: int = 6,
                      max_retries: int = 16) -> RetryAction:
    """The decision of retry tick number `attempt` (1-based, counted since the last
    registration round began): retries 1..max_retries happen, the one numbered
    initial_retries switches the timer to the prolonged interval, the next tick gives up."""
    if registered:
        return RetryAction.CANCEL
    if attempt > max_retries:
        return RetryAction.GIVE_UP
    if attempt == initial_retries:
        return RetryAction.RETRY_AND_PROLONG
    return RetryAction.RETRY


def registration_timeline(initial: float, prolonged: float, initial_retries: int = 6,
                          max_retries: int = 16) -> tuple[list[float], float]:
    """For a worker that never reaches a master: the times (s after start) of the retries,
    and the time it gives up. With Spark's defaults at FUZZ=1: retries at 10..60 then every
    60 s up to 660, give-up at 720 (= 6 x INITIAL + 11 x PROLONGED)."""
    t, period, retries, attempt = 0.0, initial, [], 0
    while True:
        t += period
        attempt += 1
        action = reregister_action(attempt, False, initial_retries, max_retries)
        if action is RetryAction.GIVE_UP:
            return retries, t
        retries.append(t)
        if action is RetryAction.RETRY_AND_PROLONG:
            period = prolonged


def trim_finished(finished: "OrderedDict[str, Any]", retained: int) -> None:
    """Spark's trimFinishedExecutorsIfNecessary: past `retained`, drop the oldest
    max(n/10, 1) entries at once (so trimming is not paid on every executor exit)."""
    if len(finished) > retained:
        for _ in range(max(len(finished) // 10, 1)):
            finished.popitem(last=False)


def _ms(seconds: float) -> int:
    """A timer interval in ms; never 0 (a period of 0 would not repeat)."""
    return max(1, int(round(seconds * 1000)))


# ---------------------------------------------------------------------------------------------
# Events that are not deploy messages (none arrives over the wire)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Started:
    """The endpoint is set up; `self_ref` is the worker's own endpoint ref."""
    self_ref: Any


@dataclass(frozen=True)
class Stopping:
    """The endpoint stops: no more registrations, every executor and driver is killed."""


@dataclass(frozen=True)
class KillAll:
    """The daemon shuts down: kill every executor (final `state`, `message`) and driver."""
    state: ExecutorState = ExecutorState.KILLED
    message: Optional[str] = None


@dataclass(frozen=True)
class Received:
    """A message that arrived with `send` from `sender`, on a connection whose peer is
    `peer` (an `ember.rpc` PeerInfo: address, scope, local; None if unknown)."""
    message: Any
    sender: Any
    peer: Any = None


@dataclass(frozen=True)
class ExecutorRunnerReport:
    """An ExecutorRunner's state change (RUNNING, then one final state)."""
    message: ExecutorStateChanged


@dataclass(frozen=True)
class DriverRunnerReport:
    """A DriverRunner's final state."""
    message: DriverStateChanged


@dataclass(frozen=True)
class RegistrationRetryTick:
    """Spark's ReregisterWithMaster timer."""


@dataclass(frozen=True)
class HeartbeatTick:
    """Spark's SendHeartbeat timer."""


@dataclass(frozen=True)
class LeaseCheckTick:
    """Check the master lease (driver fencing)."""


@dataclass(frozen=True)
class WorkDirCleanupTick:
    """Spark's WorkDirCleanup timer (spark.worker.cleanup.interval)."""


@dataclass(frozen=True)
class RetryExecutorStateSync:
    """Send a state change the master did not acknowledge again."""
    message: ExecutorStateChanged


@dataclass(frozen=True)
class HeartbeatTag:
    """What a heartbeat ask carries back: when it was sent, and to which master."""
    sent: float
    master: Any


@dataclass(frozen=True)
class StateSyncTag:
    """What an ExecutorStateChanged ask carries back."""
    message: ExecutorStateChanged
    master: Any


# ---------------------------------------------------------------------------------------------
# Bookkeeping records (immutable: a change replaces the record)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExecutorRecord:
    """An executor this worker runs or ran (Spark's ExecutorRunner, minus the process)."""
    app_id: str
    exec_id: int
    app_desc: ApplicationDescription
    cores: int
    memory: int
    resources: Mapping[str, ResourceInformation]
    rp_id: int
    state: ExecutorState = ExecutorState.LAUNCHING

    @property
    def full_id(self) -> str:
        return f"{self.app_id}/{self.exec_id}"

    def description(self) -> ExecutorDescription:
        return ExecutorDescription(self.app_id, self.exec_id, self.rp_id, self.cores,
                                   self.memory, self.state)

    def summary(self) -> ExecutorRunnerSummary:
        return ExecutorRunnerSummary(self.app_id, self.exec_id, self.app_desc, self.cores,
                                     self.memory, dict(self.resources), self.state, self.rp_id)


@dataclass(frozen=True)
class DriverRecord:
    """A cluster-mode driver this worker runs or ran (Spark's DriverRunner's bookkeeping)."""
    driver_id: str
    desc: DriverDescription
    resources: Mapping[str, ResourceInformation]
    attempt: int = 1
    state: DriverState = DriverState.RUNNING
    final_exception: Optional[str] = None

    @property
    def cores(self) -> int:
        return self.desc.cores

    @property
    def memory(self) -> int:
        return self.desc.mem

    def summary(self) -> DriverRunnerSummary:
        return DriverRunnerSummary(self.driver_id, self.desc, dict(self.resources), self.state,
                                   self.final_exception)


_FINAL_DRIVER_STATES = (DriverState.FINISHED, DriverState.FAILED, DriverState.KILLED,
                        DriverState.ERROR, DriverState.RELAUNCHING)


# ---------------------------------------------------------------------------------------------
# The state machine
# ---------------------------------------------------------------------------------------------

class WorkerState:
    """Everything Spark's Worker decides, as `handle(event, now, wall_ms) -> instructions`.
    (Not `messages.WorkerState`, the ALIVE/DEAD enum the master keeps per worker.)"""

    def __init__(self, *, worker_id: str, host: str, port: int, cores: int, memory: int,
                 master_addresses: Sequence[RpcAddress], work_dir: str, web_ui_url: str,
                 worker_conf: WorkerConf, fuzz: float,
                 resources: Optional[Mapping[str, ResourceInformation]] = None) -> None:
        self.worker_id = worker_id
        self.host = host
        self.port = port
        self.address = RpcAddress(host, port)
        self.cores = cores
        self.memory = memory
        self.master_addresses = list(master_addresses)
        self.work_dir = work_dir
        self.web_ui_url = web_ui_url
        self.wconf = worker_conf
        self.fuzz = fuzz
        self.initial_interval, self.prolonged_interval = registration_intervals(
            fuzz, worker_conf.registration_interval_scale)
        self.self_ref: Any = None

        self.master: Any = None
        self.master_address_to_connect: Optional[RpcAddress] = None
        self.active_master_url = ""
        self.active_master_web_ui_url = ""
        self.registered = False
        self.connected = False
        self.last_heartbeat_ms = 0   # epoch ms of the last heartbeat sent while connected
        self.decommissioned = False
        self.stopped = False
        self.exit_code: Optional[int] = None

        self.executors: dict[str, ExecutorRecord] = {}
        self.finished_executors: OrderedDict[str, ExecutorRecord] = OrderedDict()
        self.finished_apps: set[str] = set()
        self.drivers: dict[str, DriverRecord] = {}
        self.finished_drivers: OrderedDict[str, DriverRecord] = OrderedDict()
        self.fence = EpochFence()
        # Driver fencing (SPARK-19900): drivers die here before a master relaunches them.
        self.lease = MasterLease(worker_conf.master_lease)
        self.lease_killed: set[str] = set()
        # Final states of drivers that ended here (monotonic time, report), and since when a
        # report may have been lost (the master's connection dropped): re-sent on reconnect.
        self.driver_final_states: OrderedDict[str, tuple[float, DriverStateChanged]] = \
            OrderedDict()
        self.resend_since: Optional[float] = None
        self.cores_used = 0
        self.memory_used = 0
        # custom resources (spark.worker.resource.*): all addresses, and those in use
        self.resources: dict[str, ResourceInformation] = dict(resources or {})
        self.resources_used: dict[str, tuple[str, ...]] = {n: () for n in self.resources}

        self.connection_attempt_count = 0
        self.registration_generation = 0   # bumping it cancels in-flight attempts
        self.armed_timers: set[str] = set()
        self.sync_failures: dict[str, int] = {}

        self._now = 0.0
        self._wall_ms = 0
        self._out: list[Instruction] = []
        self._handlers: dict[type, Callable[[Any], None]] = {
            Started: self._on_started, Stopping: self._on_stopping, KillAll: self._on_kill_all,
            Received: self._on_received, Disconnected: self._on_disconnected,
            MasterRefResolved: self._on_master_ref, AskAnswered: self._on_ask_answered,
            ExecutorRunnerReport: self._on_executor_report,
            DriverRunnerReport: self._on_driver_report,
            RunnerLaunchFailed: self._on_launch_failed,
            RegistrationRetryTick: self._on_registration_retry_tick,
            HeartbeatTick: self._on_heartbeat_tick, LeaseCheckTick: self._on_lease_check,
            WorkDirCleanupTick: self._on_work_dir_cleanup,
            RetryExecutorStateSync: lambda e: self._sync_executor_state(e.message),
        }
        self._receivers: dict[type, Callable[[Any, Any], None]] = {
            RegisteredWorker: lambda m, s: self._on_registered(m),
            RegisterWorkerFailed: lambda m, s: self._on_register_failed(m),
            MasterInStandby: lambda m, s: None,   # Master not yet ready.
            ReconnectWorker: lambda m, s: self._on_reconnect(m),
            MasterChanged: lambda m, s: self._on_master_changed(m),
            LaunchExecutor: lambda m, s: self._on_launch_executor(m),
            KillExecutor: lambda m, s: self._on_kill_executor(m),
            ApplicationFinished: lambda m, s: self._on_application_finished(m.id),
            LaunchDriver: lambda m, s: self._on_launch_driver(m),
            KillDriver: lambda m, s: self._on_kill_driver(m.driverId),
            DecommissionWorker: lambda m, s: self._decommission_self(),
            WorkerDecommissionSigReceived: self._on_decommission_signal,
        }

    # -- views -------------------------------------------------------------------------------

    @property
    def worker_url(self) -> str:
        """``spark://Worker@host:port`` (RpcEndpointAddress.toString)."""
        return f"spark://{ENDPOINT_NAME}@{self.address.host_port}"

    @property
    def cores_free(self) -> int:
        return self.cores - self.cores_used

    @property
    def memory_free(self) -> int:
        return self.memory - self.memory_used

    def state_response(self) -> WorkerStateResponse:
        """Spark's WorkerStateResponse (the web UI's and /json's view)."""
        return WorkerStateResponse(
            self.host, self.port, self.worker_id,
            [r.summary() for r in self.executors.values()],
            [r.summary() for r in self.finished_executors.values()],
            [r.summary() for r in self.drivers.values()],
            [r.summary() for r in self.finished_drivers.values()], self.active_master_url,
            self.cores, self.memory, self.cores_used, self.memory_used,
            self.active_master_web_ui_url, dict(self.resources),
            {n: ResourceInformation(n, list(a)) for n, a in self.resources_used.items()},
            self.registered, self.last_heartbeat_ms)

    # -- driving -----------------------------------------------------------------------------

    def handle(self, event: Any, now: float, wall_ms: int) -> list[Instruction]:
        """Apply one event at monotonic time `now` (s) and wall-clock `wall_ms` (epoch ms);
        return what to do, in order. A handler that raises leaves the state as it was and
        returns only an ERROR log line and, for an ask, its failure reply."""
        self._now, self._wall_ms = float(now), int(wall_ms)
        self._out = out = []
        request, msg = (event.request, event.message) if isinstance(event, Ask) else (None, event)
        saved = self._snapshot()
        try:
            if request is not None:
                self._on_ask(request, msg)
            else:
                handler = self._handlers.get(type(msg))
                if handler is None:
                    self._log(WARN, f"Ignoring unexpected event {type(msg).__name__}")
                else:
                    handler(msg)
        except Exception as e:   # a bad message must not take the worker down
            self.__dict__.update(saved)
            out = [Log(ERROR, f"Error while handling {type(msg).__name__}: {e!r}")]
            if request is not None:
                out.append(ReplyFailure(request, f"{type(e).__name__}: {e}"))
        self._out = []
        return out

    def _snapshot(self) -> dict[str, Any]:
        """A copy of every mutable attribute, deep enough to restore after a failed handler
        (records are immutable; containers and the fence/lease objects are copied)."""
        saved: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if name in ("_out", "_handlers", "_receivers"):
                continue
            if isinstance(value, (dict, set, list)):
                value = value.copy()
            elif isinstance(value, (EpochFence, MasterLease)):
                value = copy.copy(value)
            saved[name] = value
        return saved

    def _log(self, level: str, text: str) -> None:
        self._out.append(Log(level, text))

    def _emit(self, instruction: Instruction) -> None:
        self._out.append(instruction)

    def _arm(self, key: str, delay_s: float, event: Any, period_s: Optional[float]) -> None:
        self.armed_timers.add(key)
        self._emit(ScheduleTimer(0 if delay_s <= 0 else _ms(delay_s), event,
                                 None if period_s is None else _ms(period_s), key))

    def _disarm(self, key: str) -> None:
        if key in self.armed_timers:
            self.armed_timers.discard(key)
            self._emit(CancelTimer(key))

    # -- lifecycle ---------------------------------------------------------------------------

    def _on_started(self, e: Started) -> None:
        self.self_ref = e.self_ref
        self._log(INFO, f"Starting Spark worker {self.host}:{self.port} with {self.cores} "
                        f"cores, {megabytes_to_string(self.memory)} RAM")
        self._log(INFO, f"Worker id {self.worker_id}, work dir {self.work_dir}, web UI at "
                        f"{self.web_ui_url}")
        self._register_with_master()

    def _on_stopping(self, e: Stopping) -> None:
        self.stopped = True
        self._cancel_last_registration_retry()
        for key in (HEARTBEAT_TIMER, CLEANUP_TIMER, LEASE_TIMER):
            self._disarm(key)
        self._kill_all_executors(ExecutorState.KILLED, None)
        self._kill_all_drivers()

    def _on_kill_all(self, e: KillAll) -> None:
        self._kill_all_executors(e.state, e.message)
        self._kill_all_drivers()

    def _exit(self, code: int) -> None:
        """Spark's System.exit: stop trying and let the daemon shut the process down."""
        if self.exit_code is None:
            self.exit_code = code
        self._cancel_last_registration_retry()
        self._emit(Exit(code))

    # -- registration (§4.2) -----------------------------------------------------------------

    def _register_with_master(self) -> None:
        if REGISTRATION_TIMER in self.armed_timers:
            self._log(INFO, "Not spawning another attempt to register with the master, since "
                            "there is an attempt scheduled already.")
            return
        if self.stopped:
            return
        self.registered = False
        self._try_register_all_masters()
        self.connection_attempt_count = 0
        self._arm(REGISTRATION_TIMER, self.initial_interval, RegistrationRetryTick(),
                  self.initial_interval)

    def _try_register_all_masters(self) -> None:
        self.registration_generation += 1
        for address in self.master_addresses:
            self._connect(address)

    def _connect(self, address: RpcAddress) -> None:
        self._log(INFO, f"Connecting to master {address.host_port}...")
        self._emit(ConnectToMaster(address, self.registration_generation))

    def _on_master_ref(self, e: MasterRefResolved) -> None:
        """Spark's sendRegisterMessageToMaster, once "Master" was found at the address."""
        if e.generation != self.registration_generation or self.stopped:
            return   # cancelled: registered meanwhile, or a newer round started
        if e.error is not None:
            self._log(WARN, f"Failed to connect to master {e.address.host_port}: {e.error}")
            return
        self._emit(Send(e.ref, RegisterWorker(
            self.worker_id, self.host, self.port, self.self_ref, self.cores, self.memory,
            self.web_ui_url, e.address, dict(self.resources))))

    def _cancel_last_registration_retry(self) -> None:
        self.registration_generation += 1
        self._disarm(REGISTRATION_TIMER)

    def _on_registration_retry_tick(self, e: RegistrationRetryTick) -> None:
        if REGISTRATION_TIMER not in self.armed_timers:
            return   # a tick that was already on its way when the timer was cancelled
        self.connection_attempt_count += 1
        n = self.connection_attempt_count
        action = reregister_action(n, self.registered, self.wconf.initial_registration_retries,
                                   self.wconf.max_registration_retries)
        if action is RetryAction.CANCEL:
            self._cancel_last_registration_retry()
            return
        if action is RetryAction.GIVE_UP:
            self._log(ERROR, "All masters are unresponsive! Giving up.")
            self._exit(1)
            return
        self._log(INFO, f"Retrying connection to master (attempt # {n})")
        if self.master is not None:
            # Registered before and lost the connection: only that master (SPARK-4592).
            self.registration_generation += 1
            address = (self.master_address_to_connect
                       if self.wconf.prefer_configured_master_address
                       and self.master_address_to_connect is not None
                       else self.master.address)
            self._connect(address)
        else:
            self._try_register_all_masters()
        if action is RetryAction.RETRY_AND_PROLONG:
            self._arm(REGISTRATION_TIMER, self.prolonged_interval, RegistrationRetryTick(),
                      self.prolonged_interval)

    def _change_master(self, master: Any, ui_url: str, master_address: RpcAddress) -> None:
        self.active_master_url = master.address.to_spark_url()
        self.active_master_web_ui_url = ui_url
        self.master_address_to_connect = master_address
        self.master = master
        self.connected = True
        self._cancel_last_registration_retry()

    def _on_registered(self, m: RegisteredWorker) -> None:
        url = (m.masterAddress.to_spark_url() if self.wconf.prefer_configured_master_address
               else m.master.address.to_spark_url())
        if m.duplicate:
            self._log(WARN, f"Duplicate registration at master {url}")
        self._log(INFO, f"Successfully registered with master {url}")
        self.registered = True
        self.lease.renew(self._now)
        self._change_master(m.master, m.masterWebUiUrl, m.masterAddress)
        self._resend_driver_final_states(m.master)
        if HEARTBEAT_TIMER not in self.armed_timers:
            self._arm(HEARTBEAT_TIMER, 0.0, HeartbeatTick(), self.wconf.heartbeat_interval)
        if LEASE_TIMER not in self.armed_timers:
            every = self.lease.check_interval
            self._arm(LEASE_TIMER, every, LeaseCheckTick(), every)
        if self.wconf.cleanup_enabled and CLEANUP_TIMER not in self.armed_timers:
            self._log(INFO, "Worker cleanup enabled; old application directories will be "
                            f"deleted in: {self.work_dir}")
            self._arm(CLEANUP_TIMER, self.wconf.cleanup_interval, WorkDirCleanupTick(),
                      self.wconf.cleanup_interval)
        self._emit(Send(m.master, WorkerLatestState(
            self.worker_id, [r.description() for r in self.executors.values()],
            list(self.drivers))))

    def _on_register_failed(self, m: RegisterWorkerFailed) -> None:
        if not self.registered:
            self._log(ERROR, f"Worker registration failed: {m.message}")
            self._exit(1)

    def _on_reconnect(self, m: ReconnectWorker) -> None:
        self._log(INFO, f"Master with url {m.masterUrl} requested this worker to reconnect.")
        self._register_with_master()

    def _resend_driver_final_states(self, master: Any) -> None:
        """Reports of drivers that ended since the connection to the master dropped (a few
        seconds of slack for reports sent just before the drop was noticed) may be lost:
        send them again, before anything that lets the master conclude a driver is gone."""
        since = self.resend_since
        self.resend_since = None
        if since is None:
            return
        for ended, report in self.driver_final_states.values():
            if ended >= since:
                self._log(INFO, f"Re-sending the final state {report.state} of driver "
                                f"{report.driverId}")
                self._emit(Send(master, report))

    def _on_master_changed(self, m: MasterChanged) -> None:
        self._log(INFO, f"Master has changed, new master is at "
                        f"{m.master.address.to_spark_url()}")
        self._change_master(m.master, m.masterWebUiUrl, m.master.address)
        self.registered = True
        self._resend_driver_final_states(m.master)
        executors = [WorkerExecutorStateResponse(r.description(), dict(r.resources))
                     for r in self.executors.values()]
        drivers = [WorkerDriverStateResponse(r.driver_id, dict(r.resources))
                   for r in self.drivers.values()]
        self._emit(Send(m.master, WorkerSchedulerStateResponse(self.worker_id, executors,
                                                               drivers)))

    def _on_disconnected(self, e: Disconnected) -> None:
        if self.stopped:
            return
        remote = e.address
        if ((self.master is not None and self.master.address == remote)
                or self.master_address_to_connect == remote):
            self._log(INFO, f"{remote} Disassociated !")
            self._log(ERROR, "Connection to master failed! Waiting for master to reconnect...")
            self.connected = False
            if self.resend_since is None:
                self.resend_since = self._now - RESEND_SLACK_S
            self._register_with_master()

    # -- heartbeats and the master lease -----------------------------------------------------

    def _on_heartbeat_tick(self, e: HeartbeatTick) -> None:
        """Heartbeats go out while the connection to the master is up (a lost connection
        clears `connected` and stops them, so the metrics' heartbeat age then grows). Ember
        sends them as asks: the master's answer renews the lease from the moment the
        heartbeat was sent (a cut link or a frozen master leaves it unanswered)."""
        if self.connected and self.master is not None:
            self._emit(SendAsk(self.master, Heartbeat(self.worker_id, self.self_ref),
                               HeartbeatTag(self._now, self.master), self.lease.lease_s))
            self.last_heartbeat_ms = self._wall_ms

    def _on_ask_answered(self, e: AskAnswered) -> None:
        if isinstance(e.tag, HeartbeatTag):
            self._on_heartbeat_answer(e)
        elif isinstance(e.tag, StateSyncTag):
            self._on_state_sync_answer(e)

    def _on_heartbeat_answer(self, e: AskAnswered) -> None:
        """Renew the lease only on the answer of the master this worker still follows, at
        an epoch no older than the newest seen (i12a's fence): a deposed leader that has not
        noticed yet must not keep this worker's drivers alive."""
        if e.error is not None or e.tag.master is not self.master:
            return
        answer = e.answer
        if not isinstance(answer, HeartbeatResponse) or not answer.renewed:
            return
        if answer.epoch and answer.epoch < self.fence.newest:
            self._log(WARN, f"Not renewing the master lease from a master at epoch "
                            f"{answer.epoch}: a master at epoch {self.fence.newest} has taken "
                            f"over")
            return
        self.lease.renew(e.tag.sent)

    def _on_lease_check(self, e: LeaseCheckTick) -> None:
        """Kill every driver here once no master answered for longer than the lease: a
        master that lost this worker relaunches its supervised drivers after that lease, so
        two copies never run at once. Reported (re-sent final states) on re-registration."""
        now = self._now
        if self.stopped or not self.lease.expired(now):
            return
        for driver_id in list(self.drivers):
            if driver_id in self.lease_killed:
                continue
            self._log(WARN, f"No master has answered for {self.lease.silent_for(now):.1f} s "
                            f"(spark.ember.worker.masterLease={self.lease.lease_s:.1f} s): "
                            f"killing driver {driver_id}, which a master may relaunch "
                            f"elsewhere")
            self.lease_killed.add(driver_id)
            if self.resend_since is None:
                self.resend_since = now
            self._emit(KillDriverRunner(driver_id, fence=True))

    def _send_to_master(self, msg: Any) -> None:
        if self.master is not None:
            self._emit(Send(self.master, msg))
        else:
            self._log(WARN, f"Dropping {msg} because the connection to master has not yet "
                            f"been established")

    # -- messages ----------------------------------------------------------------------------

    def _from_current_master(self, msg: Any, sender: Any, peer: Any) -> bool:
        """Trust by channel: work is started or stopped only by the master this worker is
        registered with, on its own connection (never on a message's masterUrl field)."""
        if peer is not None and peer.local:
            return True     # this process itself
        if (peer is not None and peer.scope is None and self.master is not None
                and (peer.address == self.master.address
                     or peer.address == self.master_address_to_connect)):
            return True
        current = self.master.address if self.master is not None else "none yet"
        self._log(WARN, f"Refusing {type(msg).__name__} from {sender}: only the current "
                        f"master ({current}) may send it")
        return False

    def _on_received(self, e: Received) -> None:
        if self.stopped:
            return
        msg = e.message
        # authorization before the fence: a refused sender must not advance the epoch
        if isinstance(msg, MASTER_ONLY_MESSAGES) and not self._from_current_master(
                msg, e.sender, e.peer):
            return
        if isinstance(msg, FENCED_MESSAGES):
            refusal = self.fence.refusal(msg)
            if refusal is not None:
                self._log(WARN, refusal)
                return
        receiver = self._receivers.get(type(msg))
        if receiver is None:
            self._log(WARN, f"Ignoring unexpected message {type(msg).__name__} from {e.sender}")
        else:
            receiver(msg, e.sender)

    def _on_ask(self, request: Any, msg: Any) -> None:
        if isinstance(msg, RequestWorkerState):
            self._emit(Reply(request, self.state_response()))
        elif isinstance(msg, RequestDriverLog):
            known = msg.driverId in self.drivers or msg.driverId in self.finished_drivers
            self._emit(ServeDriverLog(request, msg, known))
        else:
            error = UnsupportedMessageError(msg)
            self._emit(ReplyFailure(request, str(error), type(error).__name__))

    def _on_decommission_signal(self, m: WorkerDecommissionSigReceived, sender: Any) -> None:
        if sender != self.address:
            self._log(WARN, f"Ignoring unexpected message {type(m).__name__} from {sender}")
            return
        self._decommission_self()
        self._send_to_master(WorkerDecommissioning(self.worker_id, self.self_ref))

    def _decommission_self(self) -> None:
        if self.wconf.decommission_enabled and not self.decommissioned:
            self.decommissioned = True
            self._log(INFO, f"Decommission worker {self.worker_id}.")
        elif self.decommissioned:
            self._log(WARN, f"Worker {self.worker_id} already started decommissioning.")
        else:
            self._log(WARN, "Receive decommission request, but decommission feature is "
                            "disabled.")

    # -- resources ---------------------------------------------------------------------------

    def _acquire_resources(self, allocated: Optional[Mapping[str, ResourceInformation]]) -> None:
        """Mark the addresses the master assigned to an executor or driver as in use."""
        for name, info in (allocated or {}).items():
            used = self.resources_used.get(name, ())
            self.resources_used[name] = used + tuple(a for a in info.addresses if a not in used)

    def _release_resources(self, allocated: Optional[Mapping[str, ResourceInformation]]) -> None:
        for name, info in (allocated or {}).items():
            if name in self.resources_used:
                freed = set(info.addresses)
                self.resources_used[name] = tuple(a for a in self.resources_used[name]
                                                  if a not in freed)

    def _take(self, cores: int, memory: int,
              resources: Optional[Mapping[str, ResourceInformation]]) -> None:
        self.cores_used += cores
        self.memory_used += memory
        self._acquire_resources(resources)

    def _give_back(self, cores: int, memory: int,
                   resources: Optional[Mapping[str, ResourceInformation]]) -> None:
        self.cores_used -= cores
        self.memory_used -= memory
        self._release_resources(resources)

    # -- executors (§4.3) --------------------------------------------------------------------

    def _on_launch_executor(self, m: LaunchExecutor) -> None:
        if m.masterUrl != self.active_master_url:
            self._log(WARN, f"Invalid Master ({m.masterUrl}) attempted to launch executor.")
            return
        if self.decommissioned:
            self._log(WARN, "Asked to launch an executor while decommissioned. Not launching "
                            "executor.")
            return
        full_id = f"{m.appId}/{m.execId}"
        if full_id in self.executors:
            self._log(WARN, f"Asked to launch executor {full_id}, which is already running "
                            f"here")
            return
        self._log(INFO, f"Asked to launch executor {full_id} for {m.appDesc.name}")
        record = ExecutorRecord(m.appId, m.execId, m.appDesc, m.cores, m.memory,
                                dict(m.resources or {}), m.rpId)
        self.executors[full_id] = record
        self._take(m.cores, m.memory, m.resources)
        scope = m.appDesc.command.environment.get(SCOPE_ENV) or m.appId
        self._emit(LaunchExecutorRunner(m.appId, m.execId, m.appDesc, m.cores, m.memory,
                                        m.rpId, dict(m.resources or {}), scope))

    def _on_launch_failed(self, e: RunnerLaunchFailed) -> None:
        if e.full_id is not None:
            record = self.executors.pop(e.full_id, None)
            if record is None:
                return
            self._log(ERROR, f"Failed to launch executor {e.full_id} for "
                             f"{record.app_desc.name}: {e.error}")
            self._give_back(record.cores, record.memory, record.resources)
            self._sync_executor_state(ExecutorStateChanged(
                record.app_id, record.exec_id, ExecutorState.FAILED, e.error, None))
        elif e.driver_id is not None:
            driver = self.drivers.pop(e.driver_id, None)
            if driver is None:
                return
            self._log(ERROR, f"Failed to launch driver {e.driver_id}: {e.error}")
            self._give_back(driver.cores, driver.memory, driver.resources)
            self._send_to_master(DriverStateChanged(e.driver_id, DriverState.ERROR, e.error,
                                                    None, driver.attempt))

    def _on_executor_report(self, e: ExecutorRunnerReport) -> None:
        m = e.message
        full_id = f"{m.appId}/{m.execId}"
        self._sync_executor_state(m)
        record = self.executors.get(full_id)
        if not m.state.isFinished():
            if (record is not None and m.state == ExecutorState.RUNNING
                    and record.state == ExecutorState.LAUNCHING):
                self.executors[full_id] = replace(record, state=ExecutorState.RUNNING)
            return
        extra = (f" message {m.message}" if m.message is not None else "") + (
            f" exitStatus {m.exitStatus}" if m.exitStatus is not None else "")
        if record is not None:
            del self.executors[full_id]
            self._log(INFO, f"Executor {full_id} finished with state {m.state}{extra}")
            self.finished_executors[full_id] = replace(record, state=m.state)
            trim_finished(self.finished_executors, self.wconf.retained_executors)
            self._give_back(record.cores, record.memory, record.resources)
        else:
            self._log(INFO, f"Unknown Executor {full_id} finished with state {m.state}{extra}")
        self._maybe_cleanup_application(m.appId)

    def _sync_executor_state(self, m: ExecutorStateChanged) -> None:
        """ExecutorStateChanged is an ask (SPARK-34245): a lost state would leak the
        executor on the master. Retried up to spark.worker.executorStateSync.maxAttempts,
        waiting askTimeout between non-timeout failures, then exit(1)."""
        if self.master is None:
            self._log(WARN, f"Dropping {m} because the connection to master has not yet been "
                            f"established")
            return
        self._emit(SendAsk(self.master, m, StateSyncTag(m, self.master)))

    def _on_state_sync_answer(self, e: AskAnswered) -> None:
        m, master = e.tag.message, e.tag.master
        full_id = f"{m.appId}/{m.execId}"
        if e.error is None:
            self.sync_failures.pop(full_id, None)
            return
        if self.stopped:
            return
        failures = self.sync_failures.get(full_id, 0) + 1
        max_attempts = self.wconf.executor_state_sync_max_attempts
        if failures < max_attempts:
            self._log(ERROR, f"Failed to send {m} to Master {master}, will retry "
                             f"({failures}/{max_attempts}): {e.error}")
            self.sync_failures[full_id] = failures
            delay = 0.0 if isinstance(e.error, RpcTimeoutError) else self.wconf.ask_timeout
            self._emit(ScheduleTimer(0 if delay <= 0 else _ms(delay), RetryExecutorStateSync(m)))
        else:
            self._log(ERROR, f"Failed to send {m} to Master {master} for {max_attempts} "
                             f"times. Giving up.")
            self._exit(1)

    def _kill_executor(self, record: ExecutorRecord, state: ExecutorState,
                       message: Optional[str]) -> None:
        """Ask the runner to kill; the record shows the kill's state at once, as the
        runner's own view does (a LAUNCHING or RUNNING executor becomes `state`)."""
        if record.state in (ExecutorState.LAUNCHING, ExecutorState.RUNNING):
            self.executors[record.full_id] = replace(record, state=state)
        self._emit(KillExecutorRunner(record.full_id, state, message))

    def _on_kill_executor(self, m: KillExecutor) -> None:
        if m.masterUrl != self.active_master_url:
            self._log(WARN, f"Invalid Master ({m.masterUrl}) attempted to kill executor "
                            f"{m.execId}")
            return
        full_id = f"{m.appId}/{m.execId}"
        record = self.executors.get(full_id)
        if record is None:
            self._log(INFO, f"Asked to kill unknown executor {full_id}")
            return
        self._log(INFO, f"Asked to kill executor {full_id}")
        self._kill_executor(record, ExecutorState.KILLED, None)

    def _on_application_finished(self, app_id: str) -> None:
        self.finished_apps.add(app_id)
        for record in list(self.executors.values()):
            if record.app_id == app_id:
                self._log(INFO, f"Killing executor {record.full_id} of finished application "
                                f"{app_id}")
                self._kill_executor(record, ExecutorState.KILLED, None)
        self._maybe_cleanup_application(app_id)

    def _maybe_cleanup_application(self, app_id: str) -> None:
        if app_id not in self.finished_apps:
            return
        if any(r.app_id == app_id for r in self.executors.values()):
            return
        self.finished_apps.discard(app_id)
        self._emit(CleanupApplication(app_id))

    def _kill_all_executors(self, state: ExecutorState, message: Optional[str]) -> None:
        for record in list(self.executors.values()):
            self._kill_executor(record, state, message)

    # -- drivers (§4.4) ----------------------------------------------------------------------

    def _on_launch_driver(self, m: LaunchDriver) -> None:
        if m.driverId in self.drivers:
            self._log(WARN, f"Asked to launch driver {m.driverId}, which is already running "
                            f"here")
            return
        self._log(INFO, f"Asked to launch driver {m.driverId}")
        record = DriverRecord(m.driverId, m.driverDesc, dict(m.resources or {}), m.attempt)
        self.drivers[m.driverId] = record
        self._take(record.cores, record.memory, m.resources)
        self._emit(LaunchDriverRunner(m.driverId, m.driverDesc, m.attempt,
                                      dict(m.resources or {})))

    def _on_driver_report(self, e: DriverRunnerReport) -> None:
        """Spark's handleDriverStateChanged: log, forward, release the driver's share. A
        driver this worker killed when its master lease ran out is reported RELAUNCHING
        (Ember): it is gone, and a supervised one may run again at once."""
        m = reported = e.message
        if m.driverId in self.lease_killed and m.state == DriverState.KILLED:
            self.lease_killed.discard(m.driverId)
            m = replace(m, state=DriverState.RELAUNCHING, exception=(
                f"Killed by worker {self.worker_id}: no master answered within "
                f"spark.ember.worker.masterLease ({self.lease.lease_s:g} s)"))
        if m.state == DriverState.ERROR:
            self._log(WARN, f"Driver {m.driverId} failed with unrecoverable exception: "
                            f"{m.exception}")
        elif m.state == DriverState.FAILED:
            self._log(WARN, f"Driver {m.driverId} exited with failure")
        elif m.state == DriverState.FINISHED:
            self._log(INFO, f"Driver {m.driverId} exited successfully")
        elif m.state == DriverState.KILLED:
            self._log(INFO, f"Driver {m.driverId} was killed by user")
        else:
            self._log(INFO, f"Driver {m.driverId} changed state to {m.state}")
        self._send_to_master(m)
        if m.state in _FINAL_DRIVER_STATES:
            self.driver_final_states[m.driverId] = (self._now, m)
            trim_finished(self.driver_final_states, self.wconf.retained_drivers)
        record = self.drivers.pop(m.driverId, None)
        if record is not None:
            # the runner's own view: what it reported, not the lease rewrite
            self.finished_drivers[m.driverId] = replace(
                record, state=reported.state, final_exception=reported.exception)
            trim_finished(self.finished_drivers, self.wconf.retained_drivers)
            self._give_back(record.cores, record.memory, record.resources)

    def _on_kill_driver(self, driver_id: str) -> None:
        if driver_id not in self.drivers:
            self._log(ERROR, f"Asked to kill unknown driver {driver_id}")
            return
        self._log(INFO, f"Asked to kill driver {driver_id}")
        self._emit(KillDriverRunner(driver_id))

    def _kill_all_drivers(self) -> None:
        for driver_id in list(self.drivers):
            self._emit(KillDriverRunner(driver_id))

    # -- work dir cleanup (§4.6) -------------------------------------------------------------

    def _on_work_dir_cleanup(self, e: WorkDirCleanupTick) -> None:
        active = frozenset({r.app_id for r in self.executors.values()} | set(self.drivers))
        self._emit(CleanupWorkDir(active, self.wconf.app_data_ttl))


__all__ = [
    "WorkerState", "ExecutorRecord", "DriverRecord", "Started", "Stopping", "KillAll",
    "Received", "ExecutorRunnerReport", "DriverRunnerReport", "RegistrationRetryTick",
    "HeartbeatTick", "LeaseCheckTick", "WorkDirCleanupTick", "RetryExecutorStateSync",
    "HeartbeatTag", "StateSyncTag", "RetryAction", "reregister_action",
    "registration_intervals", "registration_timeline", "megabytes_to_string",
    "trim_finished", "ENDPOINT_NAME", "MASTER_ONLY_MESSAGES", "FENCED_MESSAGES",
    "ASK_MESSAGES", "RESEND_SLACK_S", "REGISTRATION_TIMER", "HEARTBEAT_TIMER", "LEASE_TIMER",
    "CLEANUP_TIMER",
]
