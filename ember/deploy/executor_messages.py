"""Driver <-> executor messages (Spark's CoarseGrainedClusterMessages, the part Ember needs,
with the block-manager and shuffle-service asks executors make).

Why apart from ember.deploy.messages (which re-exports every class here): an executor
process registers only these with the RPC codec at start-up instead of all ~100 deploy
message dataclasses, about 60 ms less before it can register with its driver. The class name
stays the wire name, so nothing on the wire changes.
"""
from dataclasses import dataclass, field
from typing import Optional

from ember.deploy.resource_messages import (DEFAULT_RESOURCE_PROFILE_ID, ResourceInformation,
                                            ResourceProfile)
from ember.rpc import RpcEndpointRef
from ember.rpc.messages import message

__all__ = [
    "RetrieveSparkAppConfig", "SparkAppConfig", "ExecutorHeartbeat", "RegisterExecutor",
    "RegisteredExecutor", "RegisterExecutorFailed", "LaunchTask", "LaunchTasks", "KillTask",
    "StatusUpdate", "StatusUpdates", "TaskProcessLost", "RequestToSync", "StopExecutor",
    "RemoveExecutor", "FetchShuffleBlocks", "RegisterExecutorShuffleInfo",
    "DecommissionExecutor", "ExecutorDecommissioning", "BlockManagerPeer", "GetPeers",
    "PutMigratedBlock", "UpdateBlockInfo", "FetchBroadcast", "FetchFile", "RemoveStage",
    "RecycleTaskProcesses", "RemoveRdd", "RemoveBroadcast", "RemoveShuffle",
]


@message
@dataclass(frozen=True)
class RetrieveSparkAppConfig:
    """Executor -> driver ask at start-up; reply SparkAppConfig."""
    resourceProfileId: int = DEFAULT_RESOURCE_PROFILE_ID


@message
@dataclass(frozen=True)
class SparkAppConfig:
    sparkProperties: list[tuple[str, str]]
    ioEncryptionKey: Optional[bytes] = None
    hadoopDelegationCreds: Optional[bytes] = None
    resourceProfile: ResourceProfile = field(default_factory=ResourceProfile)
    logLevel: Optional[str] = None


@message
@dataclass(frozen=True)
class ExecutorHeartbeat:
    """Executor -> driver ask (Spark's Heartbeat to the HeartbeatReceiver, without metrics);
    reply True while the driver knows the executor. Unanswered for
    spark.ember.executor.driverLease, the executor exits: its driver is gone."""
    executorId: str


@message
@dataclass(frozen=True)
class RegisterExecutor:
    """Executor -> driver ask; reply True, then the driver sends RegisteredExecutor."""
    executorId: str
    executorRef: RpcEndpointRef
    hostname: str
    cores: int
    logUrls: dict[str, str] = field(default_factory=dict)
    attributes: dict[str, str] = field(default_factory=dict)
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    resourceProfileId: int = DEFAULT_RESOURCE_PROFILE_ID


@message
@dataclass(frozen=True)
class RegisteredExecutor:
    pass


@message
@dataclass(frozen=True)
class RegisterExecutorFailed:
    message: str


@message
@dataclass(frozen=True)
class LaunchTask:
    """Driver -> executor: a serialized task description (opaque bytes; decoded only after auth)."""
    data: bytes


@message
@dataclass(frozen=True)
class LaunchTasks:
    """Driver -> executor (Ember): the LaunchTask data of every task one offer round gave
    this executor, as one pickled list (decoded only after auth). One message, one wake-up
    and one read for several tasks, where a LaunchTask each cost those per task. Stages the
    executor may forget (RemoveStage's) ride along: a message of their own would wake it
    again right after the launch."""
    data: bytes
    forgetStages: list[int] = field(default_factory=list)


@message
@dataclass(frozen=True)
class KillTask:
    taskId: int
    executor: str
    interruptThread: bool
    reason: str


@message
@dataclass(frozen=True)
class StatusUpdate:
    """Executor -> driver: task state (TaskState name) and serialized result/failure bytes."""
    executorId: str
    taskId: int
    state: str
    data: bytes


@message
@dataclass(frozen=True)
class StatusUpdates:
    """Executor -> driver (Ember): the StatusUpdates of several tasks that ended in one turn
    of the executor's loop, in order (entry i is task `taskIds[i]`); sent when more than one
    is waiting, so no task's update waits for another task."""
    executorId: str
    taskIds: list[int]
    states: list[str]
    data: list[bytes]

    def __post_init__(self) -> None:
        if not len(self.taskIds) == len(self.states) == len(self.data):
            raise ValueError(f"{len(self.taskIds)} task ids, {len(self.states)} states and "
                             f"{len(self.data)} results: one of each per task")


@message
@dataclass(frozen=True)
class TaskProcessLost:
    """Executor -> driver (Ember): the task process of `slot` died, idle or not, after every
    StatusUpdate it caused was sent. What it cached in memory died with it, so the driver
    stops listing those blocks there (a death during a task also says so by the task's
    LOST update; an idle one says it only by this)."""
    executorId: str
    slot: int


@message
@dataclass(frozen=True)
class RequestToSync:
    """Barrier task (through its executor) -> driver's BarrierCoordinator ask: one task's
    barrier() or allGather() call of a barrier stage attempt; the reply, once all `numTasks`
    tasks made the call of epoch `barrierEpoch`, is every task's message by partition id."""
    numTasks: int
    stageId: int
    stageAttemptId: int
    taskAttemptId: int
    barrierEpoch: int
    partitionId: int
    message: str
    requestMethod: str          # RequestMethod: BARRIER or ALL_GATHER


@message
@dataclass(frozen=True)
class StopExecutor:
    pass


@message
@dataclass(frozen=True)
class RemoveExecutor:
    executorId: str
    reason: str


@message
@dataclass(frozen=True)
class FetchShuffleBlocks:
    """Spark's block-transfer FetchShuffleBlocks, by Ember's file segments: a reducer's
    segments of map outputs served by one executor or shuffle service, as parallel lists
    (map output file base path as its MapStatus names it, start, end); the reply is the
    segments' bytes, concatenated in the order asked."""
    shuffleId: int
    mapPaths: list[str]
    starts: list[int]
    ends: list[int]


@message
@dataclass(frozen=True)
class RegisterExecutorShuffleInfo:
    """Executor -> its worker's external shuffle service (Spark's shuffle protocol
    RegisterExecutor with ExecutorShuffleInfo): serve map output under these dirs, also
    after this executor exits, until the application ends."""
    appId: str
    execId: str
    localDirs: list[str]


@message
@dataclass(frozen=True)
class DecommissionExecutor:
    """Driver -> executor (Spark's CoarseGrainedClusterMessages.DecommissionExecutor): stop
    taking tasks, migrate shuffle and cached blocks to peers, then exit."""


@message
@dataclass(frozen=True)
class ExecutorDecommissioning:
    """Executor -> driver ask (Spark's CoarseGrainedClusterMessages.ExecutorDecommissioning):
    this executor got the decommission signal (SIGPWR); the driver answers True and
    decommissions it (DecommissionExecutor)."""
    executorId: str


@message
@dataclass(frozen=True)
class BlockManagerPeer:
    """One executor a decommissioning executor can migrate blocks to (Spark's
    BlockManagerId, as GetPeers answers)."""
    executorId: str
    host: str
    port: int


@message
@dataclass(frozen=True)
class GetPeers:
    """Executor -> driver ask (Spark's BlockManagerMessages.GetPeers): the live, not
    decommissioning executors other than this one; the reply is a list of BlockManagerPeer."""
    executorId: str


@message
@dataclass(frozen=True)
class PutMigratedBlock:
    """Decommissioning executor -> peer executor ask: one chunk of a migrated block file
    (a map output file ``shuffle_<s>_<pid>_<tag>.data`` or ``rdd_<r>_<p>``), written at
    `offset`; the last chunk puts the file in place (and reports it to the driver with
    UpdateBlockInfo before answering)."""
    blockId: str
    offset: int
    data: bytes
    last: bool


@message
@dataclass(frozen=True)
class UpdateBlockInfo:
    """Executor -> driver ask (Spark's BlockManagerMessages.UpdateBlockInfo): this executor
    now holds `blockId`. For a migrated map output file, `path` is its base here and
    `shuffleAddress`/`shuffleEndpoint` where reducers fetch it: every map output in that
    file moves (Spark's updateMapOutput)."""
    executorId: str
    blockId: str
    memSize: int
    diskSize: int
    path: str = ""
    shuffleAddress: str = ""
    shuffleEndpoint: str = ""


@message
@dataclass(frozen=True)
class FetchBroadcast:
    """Ember: executor -> driver ask for a broadcast variable's file; the reply is its bytes."""
    id: int


@message
@dataclass(frozen=True)
class FetchFile:
    """Ember: executor -> driver ask for a file added with SparkContext.addFile; reply: bytes."""
    name: str


@message
@dataclass(frozen=True)
class RemoveStage:
    """Ember: driver -> executor: no job needs this stage; drop its cached closure."""
    stageId: int


@message
@dataclass(frozen=True)
class RecycleTaskProcesses:
    """Driver -> executor (Ember only), before a job that fills a memory cache: idle task
    processes that did much work and are not in keepSlots (they hold memory blocks) are
    replaced by fresh ones (TaskProcessPool.recycle_idle)."""
    keepSlots: list[int]


@message
@dataclass(frozen=True)
class RemoveRdd:
    """Driver -> executor (Spark's BlockManager message): drop an RDD's cached blocks."""
    rddId: int


@message
@dataclass(frozen=True)
class RemoveShuffle:
    """Driver -> executor (Spark's BlockManager message): no RDD the driver can reach reads
    this shuffle any more; delete its files."""
    shuffleId: int


@message
@dataclass(frozen=True)
class RemoveBroadcast:
    """Driver -> executor: drop loaded copies and the local file of a broadcast variable."""
    broadcastId: int
    removeFromDriver: bool = False
