"""Every deploy message, payload and state enum of the standalone cluster, with Spark's names.

Why one file with Spark's names and camelCase fields: the seed's sequence diagrams (and
Spark's `DeployMessages`, `MasterMessages`, `CoarseGrainedClusterMessages`) then read as a map
of this code - `RegisterWorker(id, host, port, worker, cores, memory, workerWebUiUrl,
masterAddress, resources)` here is the same message as there. Messages are frozen dataclasses
registered with `ember.rpc.messages.message`, so the RPC layer encodes them with msgpack (a
non-executable format) by class name; nothing here knows how a byte crosses a socket.
Two parts are defined in small modules of their own and re-exported here, so that this one
import still names every message: the resource payloads (`ember.deploy.resource_messages`,
which every SparkContext needs) and the driver <-> executor messages
(`ember.deploy.executor_messages`, all an executor process registers) - both to keep ~70
dataclass definitions out of a local driver's and an executor's start-up.

Deviations from Spark, forced by a data-only encoding:
- `Option[Exception]` fields (`DriverStateChanged.exception`, `DriverStatusResponse.exception`)
  carry the exception's text (`Optional[str]`).
- `RequestExecutors.resourceProfileToTotalExecs` is a list of `(ResourceProfile, total)` pairs
  instead of a `Map[ResourceProfile, Int]` (msgpack maps want string keys).
- `MasterStateResponse` / `WorkerStateResponse` carry immutable snapshots (`WorkerSummary`,
  `ApplicationSummary`, `DriverSummary`, `ExecutorRunnerSummary`, `DriverRunnerSummary`)
  instead of the daemons' live mutable `WorkerInfo` / `ExecutorRunner` objects.
- Dates (`submitDate`) are epoch milliseconds; `ember.deploy.json_protocol` renders them the
  way `java.util.Date.toString` does.
- `RequestKillApplication(appId)` is an Ember addition: the master web UI's `/app/kill` calls
  `removeApplication(app, KILLED)` directly in Spark; here the UI must ask the master.
"""
from dataclasses import dataclass, field
from enum import Enum
from typing import Optional

from ember.rpc import RpcAddress, RpcEndpointRef
from ember.rpc.messages import message

# the resource payloads live in their own small module (a local driver builds its resource
# profiles from them without loading every message class); they are deploy messages all the same
from ember.deploy.resource_messages import (  # noqa: F401 (re-exported)
    BUILTIN_EXECUTOR_RESOURCES, DEFAULT_RESOURCE_PROFILE_ID, ExecutorResourceRequest,
    ResourceInformation, ResourceProfile, ResourceRequirement, TaskResourceRequest)
# driver <-> executor messages: their own module, so that an executor process registers them
# without the ~80 master/worker/submission classes (its start-up); the same classes here
from ember.deploy.executor_messages import *  # noqa: F401,F403


# ---------------------------------------------------------------------------------------------
# §2.4 States
# ---------------------------------------------------------------------------------------------

class _NamedEnum(Enum):
    """Enum whose value is its Spark name; `str()` gives the name like Scala's `toString`."""

    def __str__(self) -> str:
        return self.name


@message
class RecoveryState(_NamedEnum):
    """The master's state (Scala: `RecoveryState`, type alias `MasterState`)."""
    STANDBY = "STANDBY"
    ALIVE = "ALIVE"
    RECOVERING = "RECOVERING"
    COMPLETING_RECOVERY = "COMPLETING_RECOVERY"


@message
class WorkerState(_NamedEnum):
    ALIVE = "ALIVE"
    DEAD = "DEAD"
    DECOMMISSIONED = "DECOMMISSIONED"
    UNKNOWN = "UNKNOWN"


@message
class ApplicationState(_NamedEnum):
    WAITING = "WAITING"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILED = "FAILED"
    KILLED = "KILLED"
    UNKNOWN = "UNKNOWN"

    def isFinished(self) -> bool:
        return self not in (ApplicationState.WAITING, ApplicationState.RUNNING)


@message
class DriverState(_NamedEnum):
    SUBMITTED = "SUBMITTED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    RELAUNCHING = "RELAUNCHING"
    UNKNOWN = "UNKNOWN"
    KILLED = "KILLED"
    FAILED = "FAILED"
    ERROR = "ERROR"


@message
class ExecutorState(_NamedEnum):
    LAUNCHING = "LAUNCHING"
    RUNNING = "RUNNING"
    KILLED = "KILLED"
    FAILED = "FAILED"
    LOST = "LOST"
    EXITED = "EXITED"
    DECOMMISSIONED = "DECOMMISSIONED"

    def isFinished(self) -> bool:
        """KILLED, FAILED, LOST, EXITED; DECOMMISSIONED is *not* finished (Spark)."""
        return self in (ExecutorState.KILLED, ExecutorState.FAILED, ExecutorState.LOST,
                        ExecutorState.EXITED)


# ---------------------------------------------------------------------------------------------
# Payloads
# ---------------------------------------------------------------------------------------------

def _scala_seq(items: list) -> str:
    return "List(" + ", ".join(str(i) for i in items) + ")"


@message
@dataclass(frozen=True)
class Command:
    """How to start a process (Spark: a JVM main class; Ember: a Python entry point)."""
    mainClass: str
    arguments: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    classPathEntries: list[str] = field(default_factory=list)
    libraryPathEntries: list[str] = field(default_factory=list)
    javaOpts: list[str] = field(default_factory=list)

    def toString(self) -> str:
        """Scala case-class `toString`, as the worker JSON's `appdesc.command` shows it."""
        env = "Map(" + ", ".join(f"{k} -> {v}" for k, v in self.environment.items()) + ")"
        return (f"Command({self.mainClass},{_scala_seq(self.arguments)},{env},"
                f"{_scala_seq(self.classPathEntries)},{_scala_seq(self.libraryPathEntries)},"
                f"{_scala_seq(self.javaOpts)})")


@message
@dataclass(frozen=True)
class ApplicationDescription:
    """What an application asks the master for (sent in RegisterApplication)."""
    name: str
    maxCores: Optional[int]
    command: Command
    appUiUrl: str
    defaultProfile: ResourceProfile = field(default_factory=ResourceProfile)
    eventLogDir: Optional[str] = None
    eventLogCodec: Optional[str] = None
    initialExecutorLimit: Optional[int] = None
    user: str = "<unknown>"

    @property
    def memoryPerExecutorMB(self) -> int:
        mem = self.defaultProfile.getExecutorMemory()
        return int(mem) if mem is not None else 1024

    @property
    def coresPerExecutor(self) -> Optional[int]:
        return self.defaultProfile.getExecutorCores()

    @property
    def resourceReqsPerExecutor(self) -> list[ResourceRequirement]:
        custom = self.defaultProfile.getCustomExecutorResources()
        return [ResourceRequirement(r.resourceName, int(r.amount))
                for _, r in sorted(custom.items())]


@message
@dataclass(frozen=True)
class DriverDescription:
    """A cluster-mode driver to run on some worker (sent in RequestSubmitDriver)."""
    jarUrl: str
    mem: int
    cores: int
    supervise: bool
    command: Command
    resourceReqs: list[ResourceRequirement] = field(default_factory=list)


@message
@dataclass(frozen=True)
class ExecutorDescription:
    """An executor as a worker reports it (WorkerLatestState, WorkerSchedulerStateResponse)."""
    appId: str
    execId: int
    rpId: int
    cores: int
    memoryMb: int
    state: ExecutorState


@message
@dataclass(frozen=True)
class WorkerExecutorStateResponse:
    desc: ExecutorDescription
    resources: dict[str, ResourceInformation] = field(default_factory=dict)


@message
@dataclass(frozen=True)
class WorkerDriverStateResponse:
    driverId: str
    resources: dict[str, ResourceInformation] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# §2.1 Worker <-> Master
# ---------------------------------------------------------------------------------------------

@message
@dataclass(frozen=True)
class RegisterWorker:
    id: str
    host: str
    port: int
    worker: RpcEndpointRef
    cores: int
    memory: int  # MB
    workerWebUiUrl: str
    masterAddress: RpcAddress
    resources: dict[str, ResourceInformation] = field(default_factory=dict)


@message
@dataclass(frozen=True)
class RegisteredWorker:
    master: RpcEndpointRef
    masterWebUiUrl: str
    masterAddress: RpcAddress
    duplicate: bool
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class RegisterWorkerFailed:
    message: str


@message
@dataclass(frozen=True)
class MasterInStandby:
    pass


@message
@dataclass(frozen=True)
class Heartbeat:
    workerId: str
    worker: RpcEndpointRef


@message
@dataclass(frozen=True)
class HeartbeatResponse:
    """Ember (driver fencing): the answer to a Heartbeat sent as an ask. `renewed` only
    from the leader that counts the worker as registered; `epoch` is that leader's, so a
    worker renews its lease from no master older than the newest it has seen."""
    renewed: bool
    epoch: int = 0


@message
@dataclass(frozen=True)
class ReconnectWorker:
    masterUrl: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class WorkerLatestState:
    id: str
    executors: list[ExecutorDescription]
    driverIds: list[str]


@message
@dataclass(frozen=True)
class LaunchExecutor:
    masterUrl: str
    appId: str
    execId: int
    rpId: int
    appDesc: ApplicationDescription
    cores: int
    memory: int
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class KillExecutor:
    masterUrl: str
    appId: str
    execId: int
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class LaunchDriver:
    driverId: str
    driverDesc: DriverDescription
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    # Ember: which master-level launch of this driver this is (1, then +1 per relaunch after
    # a worker loss). The worker echoes it in DriverStateChanged so the master can ignore
    # a stale copy's report (fencing); Spark instead gives a relaunched driver a new id.
    attempt: int = 1
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class KillDriver:
    driverId: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class ExecutorStateChanged:
    """Worker -> master *ask*; the master always replies True."""
    appId: str
    execId: int
    state: ExecutorState
    message: Optional[str] = None
    exitStatus: Optional[int] = None


@message
@dataclass(frozen=True)
class DriverStateChanged:
    driverId: str
    state: DriverState
    exception: Optional[str] = None  # Spark: Option[Exception]; here its text
    exitStatus: Optional[int] = None  # Ember: the driver process's last exit code
    attempt: Optional[int] = None     # Ember: LaunchDriver.attempt of the reporting copy


@message
@dataclass(frozen=True)
class ApplicationFinished:
    id: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class MasterChanged:
    master: RpcEndpointRef
    masterWebUiUrl: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class WorkerSchedulerStateResponse:
    id: str
    execResponses: list[WorkerExecutorStateResponse]
    driverResponses: list[WorkerDriverStateResponse]


@message
@dataclass(frozen=True)
class WorkerDecommissioning:
    id: str
    workerRef: RpcEndpointRef


@message
@dataclass(frozen=True)
class DecommissionWorker:
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class DecommissionWorkersOnHosts:
    """Master web UI -> master ask; reply: number of matching workers (int)."""
    hostnames: list[str]


@message
@dataclass(frozen=True)
class DecommissionWorkers:
    ids: list[str]


@message
@dataclass(frozen=True)
class WorkerDecommissionSigReceived:
    pass


# ---------------------------------------------------------------------------------------------
# §2.2 Application client (driver's StandaloneAppClient) <-> Master
# ---------------------------------------------------------------------------------------------

@message
@dataclass(frozen=True)
class RegisterApplication:
    appDescription: ApplicationDescription
    driver: RpcEndpointRef


@message
@dataclass(frozen=True)
class RegisteredApplication:
    appId: str
    master: RpcEndpointRef
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class ExecutorAdded:
    id: int
    workerId: str
    hostPort: str
    cores: int
    memory: int
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class ExecutorUpdated:
    id: int
    state: ExecutorState
    message: Optional[str]
    exitStatus: Optional[int]
    workerHost: Optional[str]
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class WorkerRemoved:
    id: str
    host: str
    message: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class ApplicationRemoved:
    message: str
    epoch: int = 0   # the sender's leadership epoch (fencing, see deploy/fencing.py)


@message
@dataclass(frozen=True)
class MasterChangeAcknowledged:
    appId: str


@message
@dataclass(frozen=True)
class UnregisterApplication:
    appId: str


@message
@dataclass(frozen=True)
class RequestExecutors:
    """App -> master ask; reply Boolean. Pairs of (profile, total executors wanted)."""
    appId: str
    resourceProfileToTotalExecs: list[tuple[ResourceProfile, int]]


@message
@dataclass(frozen=True)
class KillExecutors:
    """App -> master ask; reply Boolean. Non-integer ids are dropped with an error log."""
    appId: str
    executorIds: list[str]


# ---------------------------------------------------------------------------------------------
# §2.3 Submission clients / UI <-> Master
# ---------------------------------------------------------------------------------------------

@message
@dataclass(frozen=True)
class RequestSubmitDriver:
    driverDescription: DriverDescription


@message
@dataclass(frozen=True)
class SubmitDriverResponse:
    master: RpcEndpointRef
    success: bool
    driverId: Optional[str]
    message: str


@message
@dataclass(frozen=True)
class RequestKillDriver:
    driverId: str


@message
@dataclass(frozen=True)
class KillDriverResponse:
    master: RpcEndpointRef
    driverId: str
    success: bool
    message: str


@message
@dataclass(frozen=True)
class RequestKillAllDrivers:
    pass


@message
@dataclass(frozen=True)
class KillAllDriversResponse:
    master: RpcEndpointRef
    success: bool
    message: str


@message
@dataclass(frozen=True)
class RequestDriverStatus:
    driverId: str


@message
@dataclass(frozen=True)
class DriverStatusResponse:
    found: bool
    state: Optional[DriverState]
    workerId: Optional[str]
    workerHostPort: Optional[str]
    exception: Optional[str]  # Spark: Option[Exception]; here its text
    exitStatus: Optional[int] = None  # Ember: the driver's exit code once it has ended
    attempt: int = 1                  # Ember: master-level launch attempt (see LaunchDriver)


# -- Ember extensions for cluster deploy mode: resources without a shared file system, and
# -- driver logs through the master.

# Ember: the start of the answer of a leader that could not write a submission's record to
# its recovery store and so changed nothing: clients may ask again (client.py).
NOT_RECORDED_PREFIX = "Could not record the submission in the recovery store"


@message
@dataclass(frozen=True)
class UploadAppResource:
    """Client -> master ask: keep `data` (an app file, --py-files or --files entry) with the
    master, which answers the `ember-upload://<sha256>/<name>` URL a DriverDescription can
    name. `sha256` is the client's checksum of `data`, verified on arrival."""
    name: str
    data: bytes
    sha256: str


@message
@dataclass(frozen=True)
class UploadAppResourceResponse:
    success: bool
    url: Optional[str]
    message: str


@message
@dataclass(frozen=True)
class FetchAppResource:
    """Worker -> master ask for an `ember-upload://` URL's bytes (answer: AppResourceData)."""
    url: str


@message
@dataclass(frozen=True)
class AppResourceData:
    found: bool
    data: bytes
    sha256: str
    message: str = ""


@message
@dataclass(frozen=True)
class RequestDriverLog:
    """Client -> master ask, which the master forwards to the driver's worker: up to
    `maxBytes` of the driver's `logType` (stdout|stderr) file from byte `offset`
    (negative: that many bytes before the end). Answer: DriverLogResponse."""
    driverId: str
    logType: str = "stdout"
    offset: int = 0
    maxBytes: int = 1 << 20


@message
@dataclass(frozen=True)
class DriverLogResponse:
    found: bool
    data: bytes = b""
    offset: int = 0         # where `data` starts
    nextOffset: int = 0     # where the next read should start
    totalLength: int = 0    # the file's size when read
    state: Optional[DriverState] = None      # the master's view, filled in by the master
    exitStatus: Optional[int] = None
    message: str = ""


@message
@dataclass(frozen=True)
class RequestClearCompletedDriversAndApps:
    """Ask; reply True."""


@message
@dataclass(frozen=True)
class RequestReadyz:
    """Ask; reply Boolean: master state != STANDBY."""


@message
@dataclass(frozen=True)
class RequestAppStatus:
    """Ember addition: an app client that lost its master asks whether the (restarted or
    new) master still knows its application; reply AppStatusResponse."""
    appId: str


@message
@dataclass(frozen=True)
class AppStatusResponse:
    state: RecoveryState   # the master's state; only ALIVE makes `found=False` final
    found: bool
    epoch: int = 0


@message
@dataclass(frozen=True)
class RequestKillApplication:
    """Ember addition (UI `/app/kill`): ask; master removes the app as KILLED; reply Boolean."""
    appId: str


@message
@dataclass(frozen=True)
class RequestMasterState:
    pass


@message
@dataclass(frozen=True)
class WorkerSummary:
    """Snapshot of the master's WorkerInfo for the UI and `/json`."""
    id: str
    host: str
    port: int
    webUiAddress: str
    cores: int
    coresUsed: int
    memory: int
    memoryUsed: int
    resources: dict[str, ResourceInformation]
    resourcesUsed: dict[str, ResourceInformation]
    state: WorkerState
    lastHeartbeat: int  # epoch ms

    @property
    def coresFree(self) -> int:
        return self.cores - self.coresUsed

    @property
    def memoryFree(self) -> int:
        return self.memory - self.memoryUsed

    @property
    def resourcesFree(self) -> dict[str, ResourceInformation]:
        out = {}
        for name, info in self.resources.items():
            used = set(self.resourcesUsed.get(name, ResourceInformation(name)).addresses)
            out[name] = ResourceInformation(name, [a for a in info.addresses if a not in used])
        return out

    @property
    def hostPort(self) -> str:
        return f"{self.host}:{self.port}"

    def isAlive(self) -> bool:
        return self.state == WorkerState.ALIVE


@message
@dataclass(frozen=True)
class ExecutorSummary:
    """Snapshot of the master's ExecutorDesc (application page)."""
    id: int
    appId: str
    workerId: str
    workerHostPort: str
    cores: int
    memory: int
    resources: dict[str, ResourceInformation]
    rpId: int
    state: ExecutorState


@message
@dataclass(frozen=True)
class ApplicationSummary:
    """Snapshot of the master's ApplicationInfo."""
    id: str
    startTime: int  # epoch ms
    desc: ApplicationDescription
    submitDate: int  # epoch ms
    state: ApplicationState
    coresGranted: int
    endTime: int  # -1 while running
    duration: int  # ms, as of the snapshot
    executors: list[ExecutorSummary] = field(default_factory=list)
    removedExecutors: list[ExecutorSummary] = field(default_factory=list)


@message
@dataclass(frozen=True)
class DriverSummary:
    """Snapshot of the master's DriverInfo."""
    id: str
    startTime: int  # epoch ms
    desc: DriverDescription
    submitDate: int  # epoch ms
    state: DriverState
    workerId: Optional[str]
    workerHostPort: Optional[str]
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    exception: Optional[str] = None
    waitReason: Optional[str] = None    # Ember: why a waiting driver is not launched yet


@message
@dataclass(frozen=True)
class MasterStateResponse:
    host: str
    port: int
    restPort: Optional[int]
    workers: list[WorkerSummary]
    activeApps: list[ApplicationSummary]
    completedApps: list[ApplicationSummary]
    activeDrivers: list[DriverSummary]
    completedDrivers: list[DriverSummary]
    status: RecoveryState
    # Ember: the leadership epoch, and how long the last recovery took (-1: none yet).
    epoch: int = 0
    recoveryDurationMs: int = -1
    # Ember: the spark:// URL of the leading master (this one while it leads; a standby
    # fills in the one the leader election names), None when none is known.
    leaderUrl: Optional[str] = None

    @property
    def uri(self) -> str:
        return f"spark://{self.host}:{self.port}"

    @property
    def restUri(self) -> Optional[str]:
        return None if self.restPort is None else f"spark://{self.host}:{self.restPort}"


@message
@dataclass(frozen=True)
class RequestWorkerState:
    pass


@message
@dataclass(frozen=True)
class ExecutorRunnerSummary:
    """Snapshot of a worker's ExecutorRunner (worker UI and `/json`)."""
    appId: str
    execId: int
    appDesc: ApplicationDescription
    cores: int
    memory: int
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    state: ExecutorState = ExecutorState.LAUNCHING
    rpId: int = DEFAULT_RESOURCE_PROFILE_ID


@message
@dataclass(frozen=True)
class DriverRunnerSummary:
    """Snapshot of a worker's DriverRunner."""
    driverId: str
    driverDesc: DriverDescription
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    state: DriverState = DriverState.SUBMITTED
    finalException: Optional[str] = None


@message
@dataclass(frozen=True)
class WorkerStateResponse:
    host: str
    port: int
    workerId: str
    executors: list[ExecutorRunnerSummary]
    finishedExecutors: list[ExecutorRunnerSummary]
    drivers: list[DriverRunnerSummary]
    finishedDrivers: list[DriverRunnerSummary]
    masterUrl: str
    cores: int
    memory: int
    coresUsed: int
    memoryUsed: int
    masterWebUiUrl: str
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    resourcesUsed: dict[str, ResourceInformation] = field(default_factory=dict)
    # Ember additions for the worker's metrics: registered with a master, and when the last
    # heartbeat was sent to it over a live connection (epoch ms, 0 = never).
    registered: bool = False
    lastHeartbeat: int = 0


@message
@dataclass(frozen=True)
class BoundPortsRequest:
    pass


@message
@dataclass(frozen=True)
class BoundPortsResponse:
    rpcEndpointPort: int
    webUIPort: int
    restPort: Optional[int]


# MasterMessages: leader agent / timers -> master

@message
@dataclass(frozen=True)
class ElectedLeader:
    epoch: int = 0   # grows with each election (persistence.LeaderElectionAgent)


@message
@dataclass(frozen=True)
class RevokedLeadership:
    pass


@message
@dataclass(frozen=True)
class CheckForWorkerTimeOut:
    pass


@message
@dataclass(frozen=True)
class CompleteRecovery:
    epoch: int = 0   # the leadership that armed the recovery timer


__all__ = [name for name, obj in list(globals().items())
           if isinstance(obj, type) and getattr(obj, "__module__", None) in (
               __name__, "ember.deploy.resource_messages", "ember.deploy.executor_messages")
           and not name.startswith("_")] + ["DEFAULT_RESOURCE_PROFILE_ID"]
