"""Dynamic allocation: Spark's ExecutorAllocationManager and ExecutorMonitor, with no I/O.

Why: with spark.dynamicAllocation.enabled an application holds only the executors its
tasks need. The standalone backend feeds this state machine, every 100 ms (Spark's
interval), the scheduler's demand per resource profile (pending and running tasks) and a
snapshot of its executors; `schedule(now, ...)` answers with the executor totals to send
to the master (RequestExecutors) and the executors to remove (KillExecutors or graceful
decommission). The clock is passed in, so the whole algorithm is unit tested on a manual
clock.

The algorithm is Spark's:
- maxNeeded = ceil((pending + running tasks) x executorAllocationRatio / tasks per executor).
- While initializing (until the first stage is submitted or an executor times out) the
  target stays at the initial number: max(minExecutors, initialExecutors,
  spark.executor.instances).
- A target above maxNeeded drops at once to max(maxNeeded, minExecutors).
- Tasks pending for schedulerBacklogTimeout (1 s) add executors, then again every
  sustainedSchedulerBacklogTimeout: 1, 2, 4, ... (numExecutorsToAdd doubles while each
  round's request is granted in full), capped by maxNeeded and maxExecutors.
- An executor idle for executorIdleTimeout (60 s) is removed unless that would leave its
  profile below minExecutors or below its target. One holding cached blocks waits
  cachedExecutorIdleTimeout (default: forever); one holding live shuffle output, with
  shuffle tracking on and no external shuffle service, waits shuffleTracking.timeout
  (default: forever, i.e. until the shuffle is no longer referenced). With the external
  shuffle service on, shuffle output does not keep an executor: the service serves it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from ember import config
from ember.deploy.messages import DEFAULT_RESOURCE_PROFILE_ID
from ember.errors import SparkException

log = logging.getLogger("ember.ExecutorAllocationManager")

__all__ = ["AllocationSettings", "ExecutorSnapshot", "AllocationDecision",
           "ExecutorAllocationManager", "initial_executors", "SCHEDULE_INTERVAL"]

SCHEDULE_INTERVAL = 0.1   # Spark's intervalMillis
INFINITE = math.inf


def initial_executors(conf: Any) -> int:
    """Spark's Utils.getDynamicAllocationInitialExecutors (with its warnings)."""
    minimum = config.read(conf, "spark.dynamicAllocation.minExecutors")
    initial = config.read(conf, "spark.dynamicAllocation.initialExecutors", minimum)
    instances = config.read(conf, "spark.executor.instances", 0)
    if initial < minimum:
        log.warning("spark.dynamicAllocation.initialExecutors less than "
                    "spark.dynamicAllocation.minExecutors is invalid, ignoring its setting, "
                    "please update your configs.")
    if conf.get("spark.executor.instances") is not None and instances < minimum:
        log.warning("spark.executor.instances less than spark.dynamicAllocation.minExecutors "
                    "is invalid, ignoring its setting, please update your configs.")
    return max(minimum, initial, instances)


@dataclass(frozen=True)
class AllocationSettings:
    min_executors: int
    max_executors: int
    initial_executors: int
    ratio: float
    backlog_timeout: float
    sustained_backlog_timeout: float
    idle_timeout: float
    cached_idle_timeout: float
    shuffle_tracking: bool        # tracking on and no external shuffle service
    shuffle_timeout: float

    @classmethod
    def from_conf(cls, conf: Any) -> "AllocationSettings":
        """Read and validate (Spark's validateSettings texts, as SparkException)."""
        def read(key: str) -> Any:
            return config.read(conf, key)
        minimum = read("spark.dynamicAllocation.minExecutors")
        maximum = read("spark.dynamicAllocation.maxExecutors")
        backlog = read("spark.dynamicAllocation.schedulerBacklogTimeout")
        sustained = read("spark.dynamicAllocation.sustainedSchedulerBacklogTimeout")
        idle = read("spark.dynamicAllocation.executorIdleTimeout")
        cached = read("spark.dynamicAllocation.cachedExecutorIdleTimeout")
        ratio = read("spark.dynamicAllocation.executorAllocationRatio")
        service = read("spark.shuffle.service.enabled")
        tracking = read("spark.dynamicAllocation.shuffleTracking.enabled")
        if minimum < 0 or maximum < 0:
            raise SparkException("spark.dynamicAllocation.{min/max}Executors must be positive!")
        if maximum == 0:
            raise SparkException("spark.dynamicAllocation.maxExecutors cannot be 0!")
        if minimum > maximum:
            raise SparkException(
                f"spark.dynamicAllocation.minExecutors ({minimum}) must be less than or equal "
                f"to spark.dynamicAllocation.maxExecutors ({maximum})!")
        if backlog <= 0:
            raise SparkException("spark.dynamicAllocation.schedulerBacklogTimeout must be > 0!")
        if sustained <= 0:
            raise SparkException(
                "spark.dynamicAllocation.sustainedSchedulerBacklogTimeout must be > 0!")
        if idle < 0:
            raise SparkException("spark.dynamicAllocation.executorIdleTimeout must be >= 0!")
        if cached < 0:
            raise SparkException(
                "spark.dynamicAllocation.cachedExecutorIdleTimeout must be >= 0!")
        if not service:
            if tracking:
                log.info("Dynamic allocation is enabled without a shuffle service.")
            elif (read("spark.decommission.enabled")
                  and read("spark.storage.decommission.shuffleBlocks.enabled")):
                log.info("Shuffle data decommission is enabled without a shuffle service.")
            else:
                raise SparkException(
                    "Dynamic allocation of executors requires one of the following "
                    "conditions: 1) enabling external shuffle service through "
                    "spark.shuffle.service.enabled. 2) enabling shuffle tracking through "
                    "spark.dynamicAllocation.shuffleTracking.enabled. 3) enabling shuffle "
                    "blocks decommission through spark.decommission.enabled and "
                    "spark.storage.decommission.shuffleBlocks.enabled. 4) (Experimental) "
                    "configuring spark.shuffle.sort.io.plugin.class to use a custom "
                    "ShuffleDataIO who's ShuffleDriverComponents supports reliable storage.")
        if ratio > 1.0 or ratio <= 0.0:
            raise SparkException(
                "spark.dynamicAllocation.executorAllocationRatio must be > 0 and <= 1.0")
        initial = initial_executors(conf)
        if initial > maximum:
            raise SparkException(
                f"initial executor number {initial} must between min executor number "
                f"{minimum} and max executor number {maximum}")
        return cls(minimum, maximum, initial, ratio, backlog, sustained, idle, cached,
                   bool(tracking and not service),
                   read("spark.dynamicAllocation.shuffleTracking.timeout"))


@dataclass(frozen=True)
class ExecutorSnapshot:
    """What the allocation manager reads about one live executor."""
    executor_id: str
    rp_id: int
    idle_since: Optional[float]       # None while it runs tasks
    has_cached_blocks: bool = False
    has_shuffle_output: bool = False  # output of a shuffle still referenced


@dataclass
class AllocationDecision:
    totals: list[tuple[int, int]] = field(default_factory=list)   # (profile, target) to send
    remove: list[str] = field(default_factory=list)               # executor ids to remove


class ExecutorAllocationManager:
    """Targets per resource profile and idle removal (one writer: the scheduler loop)."""

    def __init__(self, settings: AllocationSettings,
                 tasks_per_executor: Callable[[int], int]) -> None:
        self.settings = settings
        self.tasks_per_executor = tasks_per_executor
        self.initializing = True
        self.targets: dict[int, int] = {DEFAULT_RESOURCE_PROFILE_ID: settings.initial_executors}
        self.to_add: dict[int, int] = {DEFAULT_RESOURCE_PROFILE_ID: 1}
        self.add_time: Optional[float] = None
        self.sent: dict[int, int] = {}
        self.pending_removal: set[str] = set()

    # --- Spark's maxNumExecutorsNeededPerResourceProfile ----------------------------------
    def max_needed(self, rp_id: int, pending: int, running: int) -> int:
        per = max(1, self.tasks_per_executor(rp_id))
        return math.ceil((pending + running) * self.settings.ratio / per)

    def timeout_of(self, e: ExecutorSnapshot) -> float:
        """Spark's ExecutorMonitor timeout for an idle executor."""
        s = self.settings
        shuffle = e.has_shuffle_output and s.shuffle_tracking
        if e.has_cached_blocks or shuffle:
            return min(s.cached_idle_timeout if e.has_cached_blocks else INFINITE,
                       s.shuffle_timeout if shuffle else INFINITE)
        return s.idle_timeout

    def schedule(self, now: float, demand: Mapping[int, tuple[int, int]],
                 executors: list[ExecutorSnapshot]) -> AllocationDecision:
        """One tick: `demand` = (pending, running) tasks of active stages per profile."""
        s = self.settings
        for rp_id in demand:
            if rp_id not in self.targets:   # a stage of a new profile: Spark starts it here
                self.targets[rp_id] = s.initial_executors
                self.to_add[rp_id] = 1
        if demand:
            self.initializing = False
        if any(p > 0 for p, _ in demand.values()):
            if self.add_time is None:       # onSchedulerBacklogged
                self.add_time = now + s.backlog_timeout
        else:                               # onSchedulerQueueEmpty
            self.add_time = None
            self.to_add = {rp: 1 for rp in self.to_add}

        timed_out = sorted(
            ((e.idle_since + self.timeout_of(e), e) for e in executors
             if e.idle_since is not None and e.executor_id not in self.pending_removal
             and now >= e.idle_since + self.timeout_of(e)),
            key=lambda t: (t[0], t[1].executor_id))
        if timed_out:
            self.initializing = False
        if not self.initializing:
            self._update_targets(now, demand, executors)
        decision = AllocationDecision()
        decision.totals = sorted((rp, n) for rp, n in self.targets.items()
                                 if self.sent.get(rp) != n)
        decision.remove = self._remove(timed_out, executors)
        return decision

    def _update_targets(self, now: float, demand: Mapping[int, tuple[int, int]],
                        executors: list[ExecutorSnapshot]) -> None:
        s = self.settings
        adding = self.add_time is not None and now >= self.add_time
        for rp_id in sorted(self.targets):
            pending, running = demand.get(rp_id, (0, 0))
            needed = self.max_needed(rp_id, pending, running)
            target = self.targets[rp_id]
            if needed < target:
                self.targets[rp_id] = max(needed, s.min_executors)
                self.to_add[rp_id] = 1
                if self.targets[rp_id] < target:
                    log.debug("Lowering target number of executors to %d (previously %d) "
                              "for resource profile id: %d because not all requested "
                              "executors are actually needed", self.targets[rp_id], target,
                              rp_id)
            elif adding:
                self._add_executors(rp_id, needed, sum(1 for e in executors
                                                       if e.rp_id == rp_id))
        if adding:
            self.add_time = now + s.sustained_backlog_timeout

    def _add_executors(self, rp_id: int, needed: int, existing: int) -> None:
        s = self.settings
        old = self.targets[rp_id]
        to_add = self.to_add.get(rp_id, 1)
        if old >= s.max_executors:
            log.debug("Not adding executors because our current target total is already %d "
                      "(limit %d)", old, s.max_executors)
            self.to_add[rp_id] = 1
            return
        target = max(old, existing) + to_add
        target = min(target, needed)
        target = max(min(target, s.max_executors), s.min_executors)
        delta = target - old
        self.targets[rp_id] = target
        if delta == 0:
            self.to_add[rp_id] = 1
            return
        log.info("Requesting %d new executor%s because tasks are backlogged (new desired "
                 "total will be %d for resource profile id: %d)", delta,
                 "s" if delta > 1 else "", target, rp_id)
        self.to_add[rp_id] = to_add * 2 if delta == to_add else 1

    def _remove(self, timed_out: list[tuple[float, ExecutorSnapshot]],
                executors: list[ExecutorSnapshot]) -> list[str]:
        if not timed_out:
            return []
        s = self.settings
        totals: dict[int, int] = {}
        for e in executors:
            if e.executor_id not in self.pending_removal:
                totals[e.rp_id] = totals.get(e.rp_id, 0) + 1
        out: list[str] = []
        for _, e in timed_out:
            left = totals[e.rp_id]
            if left - 1 < s.min_executors:
                log.debug("Not removing idle executor %s because there are only %d "
                          "executor(s) left (minimum number of executor limit %d)",
                          e.executor_id, left, s.min_executors)
            elif left - 1 < self.targets.get(e.rp_id, 0):
                log.debug("Not removing idle executor %s because there are only %d "
                          "executor(s) left (number of executor target %d)", e.executor_id,
                          left, self.targets.get(e.rp_id, 0))
            else:
                out.append(e.executor_id)
                totals[e.rp_id] = left - 1
        if out:
            log.info("Request to remove executorIds: %s", ", ".join(out))
        return out

    # --- feedback from the backend --------------------------------------------------------
    def totals_sent(self, totals: list[tuple[int, int]]) -> None:
        self.sent.update(totals)

    def removal_requested(self, executor_ids: list[str]) -> None:
        self.pending_removal.update(executor_ids)

    def executor_removed(self, executor_id: str) -> None:
        self.pending_removal.discard(executor_id)
