"""Exclude-on-failure: Spark's TaskSetExcludelist (one stage attempt) and HealthTracker (the
application), with Spark's keys, defaults, validation and thresholds.

A task set counts failures per (executor, task) and per node; an executor with too many
failed tasks is excluded for the stage, and a node with too many excluded executors too.
Only when a task set *succeeds* do its failures count towards the application level (a
task set that failed may have failed for reasons unrelated to the executors), where an
executor (then a node) is excluded for spark.excludeOnFailure.timeout.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Callable

from ember import config
from ember.clock import Clock
from ember.scheduler import listener as sl

log = logging.getLogger(__name__)

_POSITIVE_KEYS = ("spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor",
                  "spark.excludeOnFailure.task.maxTaskAttemptsPerNode",
                  "spark.excludeOnFailure.stage.maxFailedTasksPerExecutor",
                  "spark.excludeOnFailure.stage.maxFailedExecutorsPerNode",
                  "spark.excludeOnFailure.application.maxFailedTasksPerExecutor",
                  "spark.excludeOnFailure.application.maxFailedExecutorsPerNode")


@dataclass(frozen=True)
class ExcludeSettings:
    max_task_attempts_per_executor: int = 1
    max_task_attempts_per_node: int = 2
    max_failures_per_exec_stage: int = 2
    max_failed_exec_per_node_stage: int = 2
    max_failures_per_exec: int = 2
    max_failed_exec_per_node: int = 2
    timeout: float = 3600.0
    kill_excluded_executors: bool = False
    fetch_failure_enabled: bool = False
    unschedulable_timeout: float = 120.0

    @classmethod
    def from_conf(cls, conf: Any) -> ExcludeSettings | None:
        """None when exclude-on-failure is off; IllegalArgumentException's text (as a
        ValueError) for a configuration Spark refuses (validateExcludeOnFailureConfs)."""
        if not config.read(conf, "spark.excludeOnFailure.enabled"):
            return None
        values = [config.read(conf, k) for k in _POSITIVE_KEYS]
        for key, v in zip(_POSITIVE_KEYS, values):
            if v <= 0:
                raise ValueError(f"{key} was {v}, but must be > 0.")
        timeout = config.read(conf, "spark.excludeOnFailure.timeout")
        if timeout <= 0:
            raise ValueError(f"spark.excludeOnFailure.timeout was {int(timeout * 1000)}, "
                             "but must be > 0.")
        max_task_failures = config.read(conf, "spark.task.maxFailures")
        per_node = values[1]
        if per_node >= max_task_failures:
            raise ValueError(
                f"spark.excludeOnFailure.task.maxTaskAttemptsPerNode ( = {per_node}) was >= "
                f"spark.task.maxFailures ( = {max_task_failures} ). Though excludeOnFailure is "
                "enabled, with this configuration, Spark will not be robust to one bad node. "
                "Decrease spark.excludeOnFailure.task.maxTaskAttemptsPerNode, increase "
                "spark.task.maxFailures, or disable excludeOnFailure with "
                "spark.excludeOnFailure.enabled")
        return cls(*values, timeout,
                   config.read(conf, "spark.excludeOnFailure.killExcludedExecutors"),
                   config.read(conf, "spark.excludeOnFailure.application.fetchFailure.enabled"),
                   config.read(conf,
                               "spark.scheduler.excludeOnFailure.unschedulableTaskSetTimeout"))


@dataclass
class ExecutorFailuresInTaskSet:
    """Failures of one task set on one executor: task index -> (count, last failure time)."""
    node: str
    task_to_failure: dict[int, tuple[int, float]] = field(default_factory=dict)

    def update_with_failure(self, index: int, when: float) -> None:
        count, last = self.task_to_failure.get(index, (0, 0.0))
        self.task_to_failure[index] = (count + 1, max(last, when))

    @property
    def num_unique_tasks_with_failures(self) -> int:
        return len(self.task_to_failure)

    def num_task_failures(self, index: int) -> int:
        return self.task_to_failure.get(index, (0, 0.0))[0]


class TaskSetExcludelist:
    def __init__(self, settings: ExcludeSettings, stage_id: int, stage_attempt: int,
                 clock: Clock, post: Callable[[Any], None] | None = None) -> None:
        self.s = settings
        self.stage_id = stage_id
        self.stage_attempt = stage_attempt
        self.clock = clock
        self.post = post or (lambda e: None)
        self.exec_to_failures: dict[str, ExecutorFailuresInTaskSet] = {}
        self.node_to_execs_with_failures: dict[str, set[str]] = {}
        self.node_to_excluded_task_indexes: dict[str, set[int]] = {}
        self.excluded_execs: set[str] = set()
        self.excluded_nodes: set[str] = set()
        self.latest_failure_reason = ""

    def is_executor_excluded_for_task(self, executor_id: str, index: int) -> bool:
        f = self.exec_to_failures.get(executor_id)
        return f is not None and \
            f.num_task_failures(index) >= self.s.max_task_attempts_per_executor

    def is_node_excluded_for_task(self, host: str, index: int) -> bool:
        return index in self.node_to_excluded_task_indexes.get(host, ())

    def is_executor_excluded_for_task_set(self, executor_id: str) -> bool:
        return executor_id in self.excluded_execs

    def is_node_excluded_for_task_set(self, host: str) -> bool:
        return host in self.excluded_nodes

    def update_excluded_for_failed_task(self, host: str, executor_id: str, index: int,
                                        failure_reason: str) -> None:
        self.latest_failure_reason = failure_reason
        now = self.clock.time()
        exec_failures = self.exec_to_failures.setdefault(
            executor_id, ExecutorFailuresInTaskSet(host))
        exec_failures.update_with_failure(index, now)
        on_node = self.node_to_execs_with_failures.setdefault(host, set())
        on_node.add(executor_id)
        # attempts, not executors: jobs abort on attempts (spark.task.maxFailures)
        failures_on_host = sum(self.exec_to_failures[e].num_task_failures(index)
                               for e in on_node if e in self.exec_to_failures)
        if failures_on_host >= self.s.max_task_attempts_per_node:
            self.node_to_excluded_task_indexes.setdefault(host, set()).add(index)
        n = exec_failures.num_unique_tasks_with_failures
        if n >= self.s.max_failures_per_exec_stage and executor_id not in self.excluded_execs:
            self.excluded_execs.add(executor_id)
            log.info("Excluding executor %s for stage %d", executor_id, self.stage_id)
            self.post(sl.ExecutorExcludedForStage(now, executor_id, n, self.stage_id,
                                                 self.stage_attempt))
            excluded_on_node = on_node & self.excluded_execs
            if len(excluded_on_node) >= self.s.max_failed_exec_per_node_stage and \
                    host not in self.excluded_nodes:
                self.excluded_nodes.add(host)
                log.info("Excluding %s for stage %d", host, self.stage_id)
                self.post(sl.NodeExcludedForStage(now, host, len(excluded_on_node),
                                                 self.stage_id, self.stage_attempt))


@dataclass
class _ExcludedExecutor:
    node: str
    expiry_time: float


class HealthTracker:
    """Application-level exclusion. `kill_executors(ids)` / `kill_executors_on_host(host)`
    are the backend's (for spark.excludeOnFailure.killExcludedExecutors)."""

    def __init__(self, settings: ExcludeSettings, clock: Clock,
                 post: Callable[[Any], None] | None = None,
                 kill_executors: Callable[[list[str]], Any] | None = None,
                 kill_executors_on_host: Callable[[str], Any] | None = None,
                 shuffle_service_enabled: bool = False) -> None:
        self.s = settings
        self.clock = clock
        self.post = post or (lambda e: None)
        self.kill_executors = kill_executors
        self.kill_executors_on_host = kill_executors_on_host
        self.shuffle_service_enabled = shuffle_service_enabled
        self.executor_to_failure_times: dict[str, list[tuple[float, str]]] = {}
        self.executor_to_excluded: dict[str, _ExcludedExecutor] = {}
        self.node_to_expiry: dict[str, float] = {}
        self.node_to_excluded_execs: dict[str, set[str]] = {}
        self.next_expiry_time = float("inf")

    # --- queries --------------------------------------------------------------------------
    def is_executor_excluded(self, executor_id: str) -> bool:
        return executor_id in self.executor_to_excluded

    def is_node_excluded(self, host: str) -> bool:
        return host in self.node_to_expiry

    # --- expiry -----------------------------------------------------------------------------
    def apply_exclude_on_failure_timeout(self) -> None:
        now = self.clock.time()
        if now <= self.next_expiry_time:
            return
        for ex, st in list(self.executor_to_excluded.items()):
            if st.expiry_time < now:
                log.info("Removing executor %s from exclude list because the exclude list "
                         "for that executor has timed out", ex)
                del self.executor_to_excluded[ex]
                execs = self.node_to_excluded_execs.get(st.node)
                if execs is not None:
                    execs.discard(ex)
                    if not execs:
                        del self.node_to_excluded_execs[st.node]
                self.post(sl.ExecutorUnexcluded(now, ex))
        for node, expiry in list(self.node_to_expiry.items()):
            if expiry < now:
                log.info("Removing node %s from exclude list because the exclude list for "
                         "that node has timed out", node)
                del self.node_to_expiry[node]
                self.post(sl.NodeUnexcluded(now, node))
        self._update_next_expiry_time()

    def _update_next_expiry_time(self) -> None:
        times = [st.expiry_time for st in self.executor_to_excluded.values()]
        times += list(self.node_to_expiry.values())
        self.next_expiry_time = min(times, default=float("inf"))

    # --- updates --------------------------------------------------------------------------
    def update_excluded_for_successful_task_set(
            self, stage_id: int, stage_attempt: int,
            failures_by_exec: dict[str, ExecutorFailuresInTaskSet]) -> None:
        now = self.clock.time()
        for exec_id, in_task_set in failures_by_exec.items():
            times = self.executor_to_failure_times.setdefault(exec_id, [])
            cutoff = now - self.s.timeout
            times[:] = [t for t in times if t[0] > cutoff]
            for index, (count, when) in in_task_set.task_to_failure.items():
                times.extend([(when, f"{stage_id}.{stage_attempt}:{index}")] * count)
            total = len(times)
            if total >= self.s.max_failures_per_exec and exec_id not in self.executor_to_excluded:
                log.info("Excluding executor id: %s because it has %d task failures in "
                         "successful task sets", exec_id, total)
                node = in_task_set.node
                expiry = now + self.s.timeout
                self.executor_to_excluded[exec_id] = _ExcludedExecutor(node, expiry)
                self.post(sl.ExecutorExcluded(now, exec_id, total))
                del self.executor_to_failure_times[exec_id]
                self._update_next_expiry_time()
                self._kill_excluded_executor(exec_id)
                on_node = self.node_to_excluded_execs.setdefault(node, set())
                on_node.add(exec_id)
                if len(on_node) >= self.s.max_failed_exec_per_node and \
                        node not in self.node_to_expiry:
                    log.info("Excluding node %s because it has %d executors excluded: %s",
                             node, len(on_node), ",".join(sorted(on_node)))
                    self.node_to_expiry[node] = expiry
                    self.post(sl.NodeExcluded(now, node, len(on_node)))
                    self._kill_executors_on_node(node)

    def update_excluded_for_fetch_failure(self, host: str, exec_id: str) -> None:
        """spark.excludeOnFailure.application.fetchFailure.enabled: exclude at once (the
        node, when its shuffle service served the failed fetch)."""
        if not self.s.fetch_failure_enabled:
            return
        now = self.clock.time()
        expiry = now + self.s.timeout
        if self.shuffle_service_enabled:
            if host not in self.node_to_expiry:
                log.info("excluding node %s due to fetch failure of external shuffle service",
                         host)
                self.node_to_expiry[host] = expiry
                self.post(sl.NodeExcluded(now, host, 1))
                self._update_next_expiry_time()
                self._kill_executors_on_node(host)
        elif exec_id not in self.executor_to_excluded:
            log.info("Excluding executor %s due to fetch failure", exec_id)
            self.executor_to_excluded[exec_id] = _ExcludedExecutor(host, expiry)
            self.post(sl.ExecutorExcluded(now, exec_id, 1))
            self._update_next_expiry_time()
            self._kill_excluded_executor(exec_id)
            self.node_to_excluded_execs.setdefault(host, set()).add(exec_id)

    def handle_removed_executor(self, exec_id: str) -> None:
        """A removed executor's pending failures no longer count (its exclusion stays, so a
        node collects its excluded executors even when they are replaced)."""
        self.executor_to_failure_times.pop(exec_id, None)

    def _kill_excluded_executor(self, exec_id: str) -> None:
        if self.s.kill_excluded_executors and self.kill_executors is not None:
            log.info("Killing excluded executor id %s since "
                     "spark.excludeOnFailure.killExcludedExecutors is set.", exec_id)
            self.kill_executors([exec_id])

    def _kill_executors_on_node(self, node: str) -> None:
        if self.s.kill_excluded_executors and self.kill_executors_on_host is not None:
            log.info("Killing all executors on excluded host %s since "
                     "spark.excludeOnFailure.killExcludedExecutors is set.", node)
            self.kill_executors_on_host(node)
