"""TaskContext: what a running task may ask about itself (PySpark's pyspark.TaskContext).

One instance per running task inside a task process; `TaskContext.get()` (and, as in
PySpark, `TaskContext()`) returns it to user code, and get() is None on the driver. Tasks of a
barrier stage get a BarrierTaskContext. The engine also hangs the task's environment (block
manager, shuffle locations, metrics) on it so RDD compute code needs no globals.
"""
from __future__ import annotations

from typing import Any

from ember.errors import PySparkRuntimeError


class TaskContext:
    _task_context: "TaskContext | None" = None

    # PySpark's defaults for a context built by user code outside any task
    _stage_id: int | None = None
    _stage_attempt_number: int | None = None
    _partition_id: int | None = None
    _attempt_number: int | None = None
    _task_attempt_id: int | None = None
    _local_properties: dict[str, str] | None = None
    _cpus: int | None = None
    _resources: dict | None = None

    def __new__(cls) -> "TaskContext":
        """Even if users construct TaskContext instead of calling get(), they get the running
        task's context (PySpark's singleton)."""
        ctx = TaskContext._task_context
        if ctx is not None:
            return ctx
        TaskContext._task_context = ctx = object.__new__(cls)
        return ctx

    @classmethod
    def _create(cls, stage_id: int = 0, stage_attempt: int = 0, partition_id: int = 0,
                attempt_number: int = 0, task_attempt_id: int = 0,
                local_properties: dict[str, str] | None = None, cpus: int = 1,
                env: Any = None, map_locations: dict | None = None) -> "TaskContext":
        """The engine's constructor: one fresh context per task attempt."""
        self = object.__new__(cls)
        self._stage_id = stage_id
        self._stage_attempt_number = stage_attempt
        self._partition_id = partition_id
        self._attempt_number = attempt_number
        self._task_attempt_id = task_attempt_id
        self._local_properties = local_properties or {}
        self._cpus = cpus
        self._resources = {}
        # engine internals
        self.env = env
        self.map_locations = map_locations or {}
        self.metrics: dict[str, int] = {}
        self.block_updates: list = []
        return self

    @classmethod
    def _getOrCreate(cls) -> "TaskContext":
        if TaskContext._task_context is None:
            TaskContext._task_context = cls._create()
        return TaskContext._task_context

    @classmethod
    def _setTaskContext(cls, ctx: "TaskContext | None") -> None:
        TaskContext._task_context = ctx

    @classmethod
    def get(cls) -> "TaskContext | None":
        """The running task's context, or None outside a task (e.g. on the driver)."""
        return TaskContext._task_context

    def stageId(self) -> int:
        return self._stage_id  # type: ignore[return-value]

    def stageAttemptNumber(self) -> int:
        return self._stage_attempt_number  # type: ignore[return-value]

    def partitionId(self) -> int:
        return self._partition_id  # type: ignore[return-value]

    def attemptNumber(self) -> int:
        return self._attempt_number  # type: ignore[return-value]

    def taskAttemptId(self) -> int:
        return self._task_attempt_id  # type: ignore[return-value]

    def getLocalProperty(self, key: str) -> str | None:
        return (self._local_properties or {}).get(key)

    def cpus(self) -> int:
        return self._cpus  # type: ignore[return-value]

    def resources(self) -> dict:
        return self._resources  # type: ignore[return-value]

    def add_metric(self, name: str, value: int) -> None:
        self.metrics[name] = self.metrics.get(name, 0) + value

    def __reduce__(self) -> tuple:
        """A task may return its context (PySpark's doctest does): what it says about the
        task travels, the engine's handles (block manager, sockets) stay in the task, and
        loading it never makes it the running task's context."""
        return (_restore_context, (type(self), {k: getattr(self, k) for k in _TASK_FIELDS}))


_TASK_FIELDS = ("_stage_id", "_stage_attempt_number", "_partition_id", "_attempt_number",
                "_task_attempt_id", "_local_properties", "_cpus", "_resources")


def _restore_context(cls: type, fields: dict) -> TaskContext:
    ctx = object.__new__(cls)
    ctx.__dict__.update(fields)
    return ctx


BARRIER, ALL_GATHER = "BARRIER", "ALL_GATHER"   # Spark's RequestMethod names


class BarrierTaskContext(TaskContext):
    """A TaskContext with the tools of a barrier stage's task: a global barrier() and
    allGather() coordinated by the driver's BarrierCoordinator, and the stage's task infos.

    The engine gives it `_sync(request) -> list[str]`, which carries a RequestToSync to the
    coordinator (through the task process pool and, on a cluster, the executor) and blocks
    until every task of the stage attempt has made the same call.
    """

    _sync: Any = None
    _barrier_epoch = 0

    @classmethod
    def _getOrCreate(cls) -> "BarrierTaskContext":
        if not isinstance(TaskContext._task_context, BarrierTaskContext):
            TaskContext._task_context = cls._create()
        return TaskContext._task_context

    @classmethod
    def get(cls) -> "BarrierTaskContext":
        """The running barrier task's context; an error outside a barrier stage."""
        ctx = TaskContext._task_context
        if not isinstance(ctx, BarrierTaskContext):
            raise PySparkRuntimeError(errorClass="NOT_IN_BARRIER_STAGE", messageParameters={})
        return ctx

    def _not_initialized(self, func_name: str) -> PySparkRuntimeError:
        return PySparkRuntimeError(
            errorClass="CALL_BEFORE_INITIALIZE",
            messageParameters={"func_name": func_name, "object": "BarrierTaskContext"})

    def _run_barrier(self, method: str, message: str) -> list[str]:
        from ember.deploy.executor_messages import RequestToSync
        request = RequestToSync(len(self._addresses()), self._stage_id, self._stage_attempt_number,
                                self._task_attempt_id, self._barrier_epoch, self._partition_id,
                                message, method)
        messages = self._sync(request)
        self._barrier_epoch += 1
        return messages

    def barrier(self) -> None:
        """Block until every task of this stage attempt has reached this barrier (each task
        must call barrier() the same number of times, or the sync fails or times out)."""
        if self._sync is None:
            raise self._not_initialized("barrier")
        self._run_barrier(BARRIER, "")

    def allGather(self, message: str = "") -> list[str]:
        """A barrier that also returns every task's message, ordered by partition id."""
        if not isinstance(message, str):
            raise TypeError("Argument `message` must be of type `str`")
        if self._sync is None:
            raise self._not_initialized("allGather")
        return self._run_barrier(ALL_GATHER, message)

    def _addresses(self) -> list[str]:
        addresses = (self._local_properties or {}).get("addresses", "")
        return [h.strip() for h in addresses.split(",")]

    def getTaskInfos(self) -> list["BarrierTaskInfo"]:
        """BarrierTaskInfo of every task of this barrier stage, ordered by partition id."""
        if self._sync is None:
            raise self._not_initialized("getTaskInfos")
        return [BarrierTaskInfo(h) for h in self._addresses()]


class BarrierTaskInfo:
    """Where a barrier task runs: `address` is the host:port of its executor."""

    def __init__(self, address: str) -> None:
        self.address = address

    def __repr__(self) -> str:
        return f"BarrierTaskInfo(address={self.address!r})"
