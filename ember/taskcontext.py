"""TaskContext: what a running task may ask about itself (PySpark's pyspark.TaskContext).

One instance per running task inside a task process; `TaskContext.get()` returns it to user
code and None on the driver. The engine also hangs the task's environment (block manager,
shuffle locations, metrics) on it so RDD compute code needs no globals.
"""
from __future__ import annotations

from typing import Any


class TaskContext:
    _taskContext: "TaskContext | None" = None

    def __init__(self, stage_id: int = 0, stage_attempt: int = 0, partition_id: int = 0,
                 attempt_number: int = 0, task_attempt_id: int = 0,
                 local_properties: dict[str, str] | None = None, cpus: int = 1,
                 env: Any = None, map_locations: dict | None = None) -> None:
        self._stageId = stage_id
        self._stageAttemptNumber = stage_attempt
        self._partitionId = partition_id
        self._attemptNumber = attempt_number
        self._taskAttemptId = task_attempt_id
        self._localProperties = local_properties or {}
        self._cpus = cpus
        self._resources: dict = {}
        # engine internals
        self.env = env
        self.map_locations = map_locations or {}
        self.metrics: dict[str, int] = {}
        self.block_updates: list = []

    @classmethod
    def _getOrCreate(cls) -> "TaskContext":
        if cls._taskContext is None:
            cls._taskContext = TaskContext()
        return cls._taskContext

    @classmethod
    def _setTaskContext(cls, ctx: "TaskContext | None") -> None:
        cls._taskContext = ctx

    @classmethod
    def get(cls) -> "TaskContext | None":
        """The running task's context, or None outside a task (e.g. on the driver)."""
        return cls._taskContext

    def stageId(self) -> int:
        return self._stageId

    def partitionId(self) -> int:
        return self._partitionId

    def attemptNumber(self) -> int:
        return self._attemptNumber

    def taskAttemptId(self) -> int:
        return self._taskAttemptId

    def getLocalProperty(self, key: str) -> str | None:
        return self._localProperties.get(key)

    def cpus(self) -> int:
        return self._cpus

    def resources(self) -> dict:
        return self._resources

    def add_metric(self, name: str, value: int) -> None:
        self.metrics[name] = self.metrics.get(name, 0) + value


class BarrierTaskContext(TaskContext):
    """Present for API compatibility; barrier execution mode is not supported by Ember."""

    @classmethod
    def get(cls) -> "BarrierTaskContext":
        raise RuntimeError("Barrier execution mode is not supported by Ember")
