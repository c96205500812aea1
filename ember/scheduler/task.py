"""The data that flows between DAGScheduler, TaskScheduler and backends.

Plain objects with Spark's names: Task (one partition of one stage attempt), TaskSet (the
tasks of one stage attempt, with the stage's serialized closure shared by all of them),
TaskDescription (a task bound to an executor slot), TaskInfo, and the end reasons.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ember.rdd_sources import Partition
from ember.serializers import dumps_node_by_node, too_deep
from ember.util.pickling import dumps


@dataclass(frozen=True)
class TaskLocation:
    """Where a task would like to run: an executor slot (memory-cached block), an executor
    (disk-cached block) or a host."""
    host: str
    executor_id: str | None = None
    slot: int | None = None


@dataclass
class Task:
    stage_id: int
    stage_attempt: int
    partition: Any            # the RDD Partition object shipped to the task process
    partition_id: int         # index of the partition in the stage's RDD
    is_result: bool
    output_id: int = 0        # index among the job's requested partitions (result tasks)
    job_id: int | None = None
    locations: list[TaskLocation] = field(default_factory=list)

    @property
    def type_name(self) -> str:
        return "ResultTask" if self.is_result else "ShuffleMapTask"


@dataclass
class TaskSet:
    tasks: list[Task]
    stage_id: int
    stage_attempt: int
    priority: int             # the job id: lower runs first under FIFO
    properties: dict[str, str]
    blob: bytes               # the stage's closure (cloudpickled), sent once per slot
    meta: bytes               # shuffle map locations the stage reads (pickled)
    barrier: bool = False     # a barrier stage: all tasks launch together or not at all
    resource_profile_id: int = 0   # the stage's ResourceProfile (withResources)

    @property
    def id(self) -> str:
        return f"{self.stage_id}.{self.stage_attempt}"


@dataclass(slots=True)
class TaskDescription:
    """A task bound to an executor slot. The locality decision only chooses it; the
    caller (TaskSchedulerImpl) serializes it into task_bytes afterwards, as Spark's
    TaskDescription.encode runs outside TaskSetManager's choice."""
    task_id: int
    attempt_number: int
    executor_id: str
    slot: int
    index: int
    stage_key: tuple
    blob: bytes
    meta: bytes
    partition: Any = None
    partition_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    resources: tuple | None = None      # (cpus, {name: addresses}) the task is given
    task_bytes: bytes = b""

    @property
    def name(self) -> str:
        """Spark's TaskDescription.name, built only when asked (not per launched task)."""
        return f"task {self.index}.{self.attempt_number} in stage " \
            f"{self.stage_key[0]}.{self.stage_key[1]}"

    def encode(self) -> bytes:
        """What the task process unpickles: partition, attempt, properties, resources. A
        plain Partition (a shuffle's reduce side: its index only) goes as None, and the
        process makes it from the partition id: the class reference alone costs the pickler
        a module lookup per task, more than the rest of the tuple."""
        stage_id, stage_attempt = self.stage_key
        part = self.partition
        if type(part) is Partition and part.index == self.partition_id:
            part = None
        task = (part, self.partition_id, self.attempt_number, self.properties, stage_id,
                stage_attempt, self.resources)
        try:
            return dumps(task)
        except Exception as e:
            if not too_deep(e):
                raise
            # a partition nested too deep for one recursion (a zip or a coalesce in a loop
            # of hundreds holds its parents' partitions, and theirs)
            return dumps_node_by_node(task, _is_partition)


def _is_partition(obj: Any) -> bool:
    return isinstance(obj, Partition)


@dataclass(slots=True)
class TaskInfo:
    task_id: int
    index: int
    attempt_number: int
    partition_id: int
    launch_time: float
    executor_id: str
    host: str
    locality: str
    speculative: bool = False
    finish_time: float = 0.0
    failed: bool = False
    killed: bool = False
    successful: bool = False
    error_message: str = ""

    def mark_finished(self, state: str, when: float) -> None:
        """`when`: the scheduler's Clock time, as launch_time is."""
        self.finish_time = when
        self.failed = state in ("FAILED", "LOST", "FETCH_FAILED")
        self.killed = state == "KILLED"
        self.successful = state == "FINISHED"

    @property
    def status(self) -> str:
        if self.finish_time == 0:
            return "RUNNING"
        if self.failed:
            return "FAILED"
        if self.killed:
            return "KILLED"
        return "SUCCESS"

    @property
    def duration(self) -> float:
        end = self.finish_time or time.time()
        return end - self.launch_time


# --- task end reasons --------------------------------------------------------------------
class TaskEndReason:
    count_towards_failures = True

    def to_error_string(self) -> str:
        return type(self).__name__


class Success(TaskEndReason):
    def to_error_string(self) -> str:
        return "Success"

    def __repr__(self) -> str:        # Spark's case object Success prints as "Success"
        return "Success"


SUCCESS = Success()


@dataclass
class ExceptionFailure(TaskEndReason):
    exc_type: str
    message: str
    traceback: str
    retryable: bool = True

    def to_error_string(self) -> str:
        if self.exc_type == "NotSerializableResult":
            return self.message
        tb = self.traceback.rstrip("\n")
        return f"org.apache.spark.api.python.PythonException: {tb}\n" if tb else \
            f"{self.exc_type}: {self.message}"


@dataclass
class FetchFailed(TaskEndReason):
    shuffle_id: int
    map_index: int
    reduce_id: int
    executor_id: str | None
    message: str
    count_towards_failures = False

    def to_error_string(self) -> str:
        return (f"FetchFailed(executor={self.executor_id}, shuffleId={self.shuffle_id}, "
                f"mapIndex={self.map_index}, reduceId={self.reduce_id}, message=\n"
                f"{self.message}\n)")


@dataclass
class TaskKilled(TaskEndReason):
    reason: str
    count_towards_failures = False

    def to_error_string(self) -> str:
        return f"TaskKilled ({self.reason})"


@dataclass
class ExecutorLostFailure(TaskEndReason):
    executor_id: str
    exit_caused_by_app: bool
    reason: str

    @property
    def count_towards_failures(self) -> bool:  # type: ignore[override]
        return self.exit_caused_by_app

    def to_error_string(self) -> str:
        caused = ("caused by one of the running tasks" if self.exit_caused_by_app
                  else "unrelated to the running tasks")
        return f"ExecutorLostFailure (executor {self.executor_id} exited {caused}) Reason: {self.reason}"


@dataclass
class TaskProcessCrashed(TaskEndReason):
    """The task process died under the task (os._exit, segfault, OOM kill)."""
    message: str

    def to_error_string(self) -> str:
        return f"org.apache.spark.SparkException: {self.message}"
