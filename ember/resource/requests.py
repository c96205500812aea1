"""Executor and task resource requests (PySpark's pyspark.resource.requests).

The single requests are the frozen records the deploy messages carry (one definition, sent
as is to the master); the builders here collect them under PySpark's keys: "cores",
"memory", "memoryOverhead", "pyspark.memory", "offHeap" (memory amounts in MiB) and custom
resource names for executors; "cpus" and custom names for tasks.
"""
from __future__ import annotations

from typing import Optional

from ember.config import parse_memory_mb
from ember.deploy.resource_messages import ExecutorResourceRequest, TaskResourceRequest

__all__ = ["ExecutorResourceRequest", "ExecutorResourceRequests", "TaskResourceRequest",
           "TaskResourceRequests", "check_task_amount"]


def check_task_amount(amount: float) -> float:
    """Spark's TaskResourceRequest rule: a fraction of one address, or whole addresses."""
    value = float(amount)
    if not (value <= 0.5 or value % 1 == 0):
        raise ValueError(f"The resource amount {value} must be either <= 0.5, or a whole "
                         "number.")
    return value


def _memory_mb(amount: str) -> int:
    try:
        return parse_memory_mb(str(amount))
    except ValueError:
        raise ValueError(f"invalid format: {amount}") from None


class ExecutorResourceRequests:
    """What each executor of a profile needs; every setter returns self for chaining."""
    _CORES = "cores"
    _MEMORY = "memory"
    _OVERHEAD_MEM = "memoryOverhead"
    _PYSPARK_MEM = "pyspark.memory"
    _OFFHEAP_MEM = "offHeap"

    def __init__(self, _jvm: None = None,
                 _requests: Optional[dict[str, ExecutorResourceRequest]] = None) -> None:
        self._executor_resources: dict[str, ExecutorResourceRequest] = dict(_requests or {})

    def _put(self, name: str, amount: int) -> "ExecutorResourceRequests":
        self._executor_resources[name] = ExecutorResourceRequest(name, amount)
        return self

    def memory(self, amount: str) -> "ExecutorResourceRequests":
        return self._put(self._MEMORY, _memory_mb(amount))

    def memoryOverhead(self, amount: str) -> "ExecutorResourceRequests":
        return self._put(self._OVERHEAD_MEM, _memory_mb(amount))

    def pysparkMemory(self, amount: str) -> "ExecutorResourceRequests":
        return self._put(self._PYSPARK_MEM, _memory_mb(amount))

    def offheapMemory(self, amount: str) -> "ExecutorResourceRequests":
        return self._put(self._OFFHEAP_MEM, _memory_mb(amount))

    def cores(self, amount: int) -> "ExecutorResourceRequests":
        return self._put(self._CORES, int(amount))

    def resource(self, resourceName: str, amount: int, discoveryScript: str = "",
                 vendor: str = "") -> "ExecutorResourceRequests":
        self._executor_resources[resourceName] = ExecutorResourceRequest(
            resourceName, int(amount), discoveryScript, vendor)
        return self

    @property
    def requests(self) -> dict[str, ExecutorResourceRequest]:
        return self._executor_resources


class TaskResourceRequests:
    """What each task of a profile needs: "cpus" and custom resources (amounts <= 0.5 let
    several tasks share one address, as in Spark)."""
    _CPUS = "cpus"

    def __init__(self, _jvm: None = None,
                 _requests: Optional[dict[str, TaskResourceRequest]] = None) -> None:
        self._task_resources: dict[str, TaskResourceRequest] = dict(_requests or {})

    def cpus(self, amount: int) -> "TaskResourceRequests":
        self._task_resources[self._CPUS] = TaskResourceRequest(self._CPUS, int(amount))
        return self

    def resource(self, resourceName: str, amount: float) -> "TaskResourceRequests":
        self._task_resources[resourceName] = TaskResourceRequest(
            resourceName, check_task_amount(amount))
        return self

    @property
    def requests(self) -> dict[str, TaskResourceRequest]:
        return self._task_resources
