"""Executor targets per resource profile under dynamic allocation (Spark's
ExecutorAllocationManager, reduced to its target arithmetic).

Why: with spark.dynamicAllocation.enabled a standalone application registers asking for no
executors (Spark's initialExecutorLimit = 0) and then tells the master, per resource
profile, how many executors it wants (RequestExecutors). That is how a stage whose RDD
carries a ResourceProfile with executor requirements gets executors of that profile: its
tasks create demand for that profile only. Targets follow Spark's formula,
ceil(tasks * spark.dynamicAllocation.executorAllocationRatio / tasks per executor), within
[minExecutors, maxExecutors]; the default profile starts at max(minExecutors,
initialExecutors, spark.executor.instances).

Executors idle for spark.dynamicAllocation.executorIdleTimeout (60s) are released while
their profile has more than its target, except those holding shuffle output or cached
blocks (Spark's shuffle tracking and cachedExecutorIdleTimeout, both unlimited by default).
Not here: Spark's gradual ramp-up (schedulerBacklogTimeout) - targets move to the demand at
once.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional

from ember import config
from ember.deploy.messages import DEFAULT_RESOURCE_PROFILE_ID

log = logging.getLogger("ember.ExecutorAllocationManager")

__all__ = ["ExecutorAllocationManager", "executor_targets", "IdleExecutor",
           "executors_to_release"]


@dataclass(frozen=True)
class IdleExecutor:
    """What release decisions read about one executor."""
    executor_id: str
    rp_id: int
    idle_since: Optional[float]   # None while it runs tasks
    keeps_data: bool              # shuffle output or cached blocks live there


def executors_to_release(executors: list[IdleExecutor], targets: Mapping[int, int],
                         now: float, idle_timeout: float) -> list[str]:
    """Executors idle for `idle_timeout` seconds, oldest idle first, while their profile
    keeps more executors than its target; executors keeping data are never chosen."""
    out: list[str] = []
    by_rp: dict[int, list[IdleExecutor]] = {}
    for e in executors:
        by_rp.setdefault(e.rp_id, []).append(e)
    for rp_id, execs in by_rp.items():
        surplus = len(execs) - targets.get(rp_id, len(execs))
        idle = sorted((e for e in execs if e.idle_since is not None and not e.keeps_data
                       and now - e.idle_since >= idle_timeout),
                      key=lambda e: (e.idle_since, e.executor_id))
        out += [e.executor_id for e in idle[:max(0, surplus)]]
    return out


def executor_targets(demand: Mapping[int, int], tasks_per_executor: Mapping[int, int],
                     known: Mapping[int, int], min_executors: int, max_executors: int,
                     ratio: float) -> dict[int, int]:
    """Executors wanted per profile: `demand` = unfinished tasks of active stages per
    profile, `known` = each profile's floor (the initial target, or 0)."""
    out: dict[int, int] = {}
    for rp_id in set(demand) | set(known):
        tasks = demand.get(rp_id, 0)
        per = max(1, tasks_per_executor.get(rp_id, 1))
        needed = math.ceil(tasks * ratio / per)
        out[rp_id] = min(max_executors, max(needed, min_executors, known.get(rp_id, 0)))
    return out


class ExecutorAllocationManager:
    """Keeps the master's per-profile targets in line with the scheduler's demand."""

    def __init__(self, conf: Mapping[str, Any], rp_manager: Any,
                 request_totals: Callable[[list[tuple[int, int]]], bool]) -> None:
        self.rp_manager = rp_manager
        self.request_totals = request_totals
        self.min_executors = config.read(conf, "spark.dynamicAllocation.minExecutors")
        self.max_executors = config.read(conf, "spark.dynamicAllocation.maxExecutors")
        initial = max(self.min_executors,
                      config.read(conf, "spark.dynamicAllocation.initialExecutors", 0),
                      config.read(conf, "spark.executor.instances", 0))
        self.ratio = config.read(conf, "spark.dynamicAllocation.executorAllocationRatio")
        if self.min_executors < 0 or self.max_executors < self.min_executors:
            raise ValueError("spark.dynamicAllocation.minExecutors must be non-negative and "
                             "not greater than spark.dynamicAllocation.maxExecutors")
        if not 0.0 < self.ratio <= 1.0:
            raise ValueError("spark.dynamicAllocation.executorAllocationRatio must be > 0 "
                             "and <= 1.0")
        self.idle_timeout = config.read(conf, "spark.dynamicAllocation.executorIdleTimeout")
        self.initial = {DEFAULT_RESOURCE_PROFILE_ID: initial}
        self.seen_stage = False
        self.sent: dict[int, int] = {}

    def update(self, demand: Mapping[int, int]) -> None:
        """Send new targets when they changed (demand: unfinished tasks per profile)."""
        if demand:
            self.seen_stage = True
        floors = {} if self.seen_stage else self.initial
        floors = {**{rp: 0 for rp in self.sent}, **floors}
        per = {rp: self.rp_manager.max_tasks_per_executor(rp)
               for rp in set(demand) | set(floors)}
        targets = executor_targets(demand, per, floors, self.min_executors,
                                   self.max_executors, self.ratio)
        changed = sorted((rp, n) for rp, n in targets.items() if self.sent.get(rp) != n)
        if changed and self.request_totals(changed):
            self.sent.update(changed)
            log.info("Requesting executors per resource profile: %s",
                     ", ".join(f"{rp} -> {n}" for rp, n in changed))
