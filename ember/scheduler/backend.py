"""The seam between the TaskScheduler and whatever runs tasks (local processes or a cluster).

A backend offers free task slots (WorkerOffer), launches the TaskDescriptions the scheduler
picks for them, reports every task end through TaskSchedulerImpl.status_update, and kills
tasks on request. The local backend and the standalone backend both implement this.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import NamedTuple


class WorkerOffer(NamedTuple):
    """A slot offered to the task sets. A named tuple, not a frozen dataclass: an offer
    round of short tasks makes one per place a task may wait on every busy slot (62 on
    local[2]), and a frozen dataclass took ~1 us apiece to make (an 8-task job -5 to
    -12 % as a tuple, in an in-process A/B)."""
    executor_id: str
    host: str
    slot: int
    address: str | None = None    # the executor's host:port (BarrierTaskInfo.address)
    queued: int = 0               # > 0, a busy slot: its task would wait behind this many


class SchedulerBackend(ABC):
    @abstractmethod
    def start(self) -> None: ...

    @abstractmethod
    def stop(self) -> None: ...

    @abstractmethod
    def revive_offers(self) -> None:
        """Offer every free slot to the scheduler and launch what it picks."""

    def before_cache_build(self) -> None:
        """Nothing runs, and the job about to start fills a memory cache."""

    @abstractmethod
    def kill_task(self, task_id: int, executor_id: str, slot: int, reason: str) -> None: ...

    @abstractmethod
    def default_parallelism(self) -> int: ...

    def application_id(self) -> str:
        return "local"

    def unpersist_rdd(self, rdd_id: int) -> None:
        """Drop cached blocks of an RDD everywhere."""

    def unpersist_broadcast(self, bid: int) -> None:
        """Drop loaded copies of a broadcast everywhere."""

    def remove_shuffle(self, shuffle_id: int) -> None:
        """Delete a shuffle's files everywhere, and what task processes keep open of them."""

    def forget_stage(self, stage_id: int) -> None:
        """A stage is done for good: its cached closures may be dropped."""

    def is_executor_alive(self, executor_id: str) -> bool:
        return True

    def max_num_concurrent_tasks(self) -> int:
        """Task slots of the whole application right now (a barrier stage needs one per
        task, all at once)."""
        return self.default_parallelism()
