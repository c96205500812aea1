"""TaskSetManager: one stage attempt's tasks — which to launch where, retries, aborts.

Delay scheduling over locality levels PROCESS_LOCAL (the task process holding a cached
block), NODE_LOCAL (same executor or host), NO_PREF and ANY, with spark.locality.wait per
level; failures counted per task up to spark.task.maxFailures, as TaskSetManager.scala does.
Speculation (checkSpeculatableTasks) and the task set's exclude list (TaskSetExcludelist)
also live here; time comes from the scheduler's Clock so both are tested on a manual one.
"""
from __future__ import annotations

import bisect
import logging
from typing import Any

from ember.clock import Clock, SystemClock
from ember.errors import TASK_HANDED_BACK
from ember.scheduler.health_tracker import HealthTracker, TaskSetExcludelist
from ember.scheduler.speculation import SpeculationSettings, median
from ember.storage.block_manager import BLOCK_IN_SIBLING
from ember.util.units import bytes_to_string

from ember.scheduler.task import (SUCCESS, ExceptionFailure, FetchFailed, TaskDescription,
                                  TaskInfo, TaskKilled, TaskLocation, TaskProcessCrashed,
                                  TaskSet)

log = logging.getLogger(__name__)

PROCESS_LOCAL, NODE_LOCAL, NO_PREF, ANY = "PROCESS_LOCAL", "NODE_LOCAL", "NO_PREF", "ANY"
LEVELS = [PROCESS_LOCAL, NODE_LOCAL, NO_PREF, ANY]
_LEVEL_ORDER = {level: n for n, level in enumerate(LEVELS)}
# a task set whose tasks take less than this (launch to result, on the driver's clock) may
# queue tasks on busy slots (TaskSetManager.queueable; a queued task is launched, for its
# duration, when its slot's task before it ends), as many per slot as its tasks' run time
# says fit in it (queueable_at)
QUEUEABLE_TASK_S = 0.005
# the least run time a task is counted at for that (its run time is the larger of
# executorRunTime, whole milliseconds, and executorCpuTime)
MIN_RUN_S = 0.0001


class TaskSetManager:
    def __init__(self, sched: Any, task_set: TaskSet, max_task_failures: int,
                 max_crashes: int = 4, clock: Clock | None = None,
                 speculation: SpeculationSettings | None = None,
                 health_tracker: HealthTracker | None = None) -> None:
        self.sched = sched
        self.clock = clock or SystemClock()
        self.speculation = speculation
        self.health_tracker = health_tracker
        self.excludelist: TaskSetExcludelist | None = None
        if health_tracker is not None:
            self.excludelist = TaskSetExcludelist(
                health_tracker.s, task_set.stage_id, task_set.stage_attempt, self.clock,
                health_tracker.post)
        self.task_set = task_set
        self.tasks = task_set.tasks
        self.num_tasks = len(self.tasks)
        self.max_task_failures = max_task_failures
        self.max_crashes = max(max_crashes, max_task_failures)
        self.stage_id = task_set.stage_id
        self.is_barrier = task_set.barrier
        # Spark's emittedTaskSizeWarning: the caller warns once per task set
        self.emitted_task_size_warning = False
        # what each task takes from an executor (the scheduler's cache of the profile's)
        self.requirements: Any = None
        self.priority = task_set.priority
        self.name = f"TaskSet_{task_set.id}"
        self.weight = 1
        self.min_share = 0
        self.parent: Any = None
        self.is_zombie = False
        self.total_result_size = 0      # Spark's, of a result stage's serialized results
        self.calculated_tasks = 0
        self.successful = [False] * self.num_tasks
        self.num_failures = [0] * self.num_tasks
        self.num_crashes = [0] * self.num_tasks
        # Without exclude-on-failure, a failed task is retried on another executor while one
        # exists (a full disk or a broken host would otherwise use up spark.task.maxFailures
        # on the same executor in a second): executors each task failed on, and the executors
        # that made offers. With it, the excludelist (maxTaskAttemptsPerExecutor) decides.
        self.failed_on: dict[int, set[str]] = {}
        self.seen_executors: set[str] = set()
        self.copies_running = [0] * self.num_tasks
        self.attempts: list[list[TaskInfo]] = [[] for _ in range(self.num_tasks)]
        self.tasks_successful = 0
        self.running: set[int] = set()
        self.task_infos: dict[int, TaskInfo] = {}
        self.quick_streak = 0    # successes in a row that took under QUEUEABLE_TASK_S
        self.run_s = 0.0         # recent tasks' run time in their process (moving average)
        # speculation: sorted durations of successes, indices marked speculatable and not
        # yet launched, and the pending list they launch from
        self.successful_durations: list[float] = []
        self.speculatable: set[int] = set()
        # speculatable indices by locality, as the regular pending lists
        self.spec_for_executor: dict[str, list[int]] = {}
        self.spec_for_host: dict[str, list[int]] = {}
        self.spec_no_prefs: list[int] = []
        self.spec_all: list[int] = []
        if speculation is not None:
            self.min_finished_for_speculation = max(
                int(speculation.quantile * self.num_tasks), 1)
        self.stage_key = (task_set.stage_id, task_set.stage_attempt)
        # pending indices by locality
        self.for_process: dict[tuple[str, int], list[int]] = {}
        self.for_executor: dict[str, list[int]] = {}
        # executor-wide cached blocks (on disk, or migrated here): any slot of that
        # executor reads them, so they count as PROCESS_LOCAL (Spark's ExecutorCacheTaskLocation)
        self.for_executor_cache: dict[str, list[int]] = {}
        self.for_host: dict[str, list[int]] = {}
        self.no_prefs: list[int] = []
        self.all_pending: list[int] = []
        self.taken_from_sibling: set[int] = set()   # launch with BLOCK_IN_SIBLING set
        if any(t.locations for t in self.tasks):
            for i in reversed(range(self.num_tasks)):
                self._add_pending(i)
        else:       # what _add_pending makes of tasks without preferences, in one go
            self.no_prefs = list(range(self.num_tasks - 1, -1, -1))
            self.all_pending = self.no_prefs.copy()
        self.locality_waits: dict[str, float] = sched.locality_waits
        self.levels = self._valid_levels()
        self.current_level_index = 0
        self.last_reset = self.clock.time()

    @property
    def running_tasks(self) -> int:
        return len(self.running)

    def _add_pending(self, i: int) -> None:
        locs = self.tasks[i].locations
        dead = self.sched.dead_executors        # a lost executor never comes back
        for loc in locs:
            eid = loc.executor_id
            if eid is not None and eid not in dead:
                if loc.slot is not None:
                    self.for_process.setdefault((eid, loc.slot), []).append(i)
                else:
                    self.for_executor_cache.setdefault(eid, []).append(i)
                self.for_executor.setdefault(eid, []).append(i)
            self.for_host.setdefault(loc.host, []).append(i)
        if not locs:
            self.no_prefs.append(i)
        self.all_pending.append(i)

    def block_migrated(self, old_executor: str, new_executor: str, new_host: str,
                       partition_id: int) -> None:
        """A cached block this task set's task `partition_id` preferred moved from a
        decommissioning executor to `new_executor`: prefer that executor now (Spark would
        fetch it remotely; here the task goes where the block is)."""
        for i, task in enumerate(self.tasks):
            if task.partition_id == partition_id and not self.successful[i] and any(
                    loc.executor_id == old_executor for loc in task.locations):
                task.locations.append(TaskLocation(new_host, new_executor, None))
                self.for_executor_cache.setdefault(new_executor, []).append(i)
                self.for_executor.setdefault(new_executor, []).append(i)
                self.for_host.setdefault(new_host, []).append(i)
        self._recompute_levels()

    def _recompute_levels(self) -> None:
        """Spark's recomputeLocality: the valid levels again, staying at the level reached
        (or the next less local one still valid), or back at the most local one if that is
        more local than before."""
        before_index = self.current_level_index
        before = _LEVEL_ORDER[self.levels[before_index]]
        self.levels = self._valid_levels()
        index = 0
        while _LEVEL_ORDER[self.levels[index]] < before:
            index += 1
        self.current_level_index = 0 if index > before_index else index

    def _valid_levels(self) -> list[str]:
        levels = []
        if self.for_process or self.for_executor_cache:
            levels.append(PROCESS_LOCAL)
        if self.for_executor or self.for_host:
            levels.append(NODE_LOCAL)
        if self.no_prefs:
            levels.append(NO_PREF)
        levels.append(ANY)
        return levels

    def _wait(self, level: str) -> float:
        return self.locality_waits.get(level, 0.0)

    def _has_pending(self, lst: list[int] | None) -> bool:
        if not lst:
            return False
        while lst and (self.successful[lst[-1]] or self.copies_running[lst[-1]]):
            lst.pop()
        return bool(lst)

    def _more_tasks_at(self, level: str) -> bool:
        if level == PROCESS_LOCAL:
            return any(self._has_pending(l) for l in self.for_process.values()) or \
                any(self._has_pending(l) for l in self.for_executor_cache.values())
        if level == NODE_LOCAL:
            return any(self._has_pending(l) for l in self.for_executor.values()) or \
                any(self._has_pending(l) for l in self.for_host.values())
        if level == NO_PREF:
            return self._has_pending(self.no_prefs)
        return self._has_pending(self.all_pending)

    def allowed_level(self, now: float) -> int:
        while self.current_level_index < len(self.levels) - 1:
            level = self.levels[self.current_level_index]
            if not self._more_tasks_at(level):
                self.current_level_index += 1
                self.last_reset = now
            elif now - self.last_reset >= self._wait(level):
                self.last_reset += self._wait(level)
                self.current_level_index += 1
            else:
                break
        return self.current_level_index

    def _pop(self, lst: list[int] | None, executor_id: str, host: str) -> int | None:
        """The last index of `lst` that may launch on this executor and host (removed from
        it), else None. The common case (nothing excluded, nothing failed before) takes
        only the two list checks."""
        if not lst:
            return None
        successful, copies = self.successful, self.copies_running
        checked = self.excludelist is not None or bool(self.failed_on)
        for j in range(len(lst) - 1, -1, -1):
            i = lst[j]
            if successful[i] or copies[i] or checked and self._held_back(i, executor_id, host):
                continue
            del lst[j]
            return i
        return None

    def _held_back(self, index: int, executor_id: str, host: str) -> bool:
        return (self._excluded_for_task(index, executor_id, host)
                or self._failed_here_elsewhere_possible(index, executor_id))

    def _excluded_for_task(self, index: int, executor_id: str, host: str) -> bool:
        ex = self.excludelist
        return ex is not None and (ex.is_node_excluded_for_task(host, index)
                                   or ex.is_executor_excluded_for_task(executor_id, index))

    def _failed_here_elsewhere_possible(self, index: int, executor_id: str) -> bool:
        """Without an excludelist: the task failed on this executor and another live
        executor that made offers has not seen it fail, so it waits for that one."""
        failed = self.failed_on.get(index)
        return bool(failed) and executor_id in failed and bool(self.seen_executors - failed)

    def _dequeue(self, executor_id: str, host: str, slot: int, max_level: str
                 ) -> tuple[int, str, bool] | None:
        """(index, locality, speculative): a regular pending task first, else a speculative
        copy of a speculatable one, never on a host where the task already has an attempt."""
        found = self._dequeue_regular(executor_id, host, slot, max_level)
        if found is not None:
            return found[0], found[1], False
        if not self.speculatable:
            return None
        order = _LEVEL_ORDER[max_level]
        for lst, level, min_order in ((self.spec_for_executor.get(executor_id), PROCESS_LOCAL, 0),
                                      (self.spec_for_host.get(host), NODE_LOCAL, 1),
                                      (self.spec_no_prefs, PROCESS_LOCAL, 2),
                                      (self.spec_all, ANY, 3)):
            if order < min_order or not lst:
                continue
            i = self._pop_speculative(lst, executor_id, host)
            if i is not None:
                return i, level, True
        return None

    def _pop_speculative(self, lst: list[int], executor_id: str, host: str) -> int | None:
        """Spark's dequeueTaskFromList for speculative copies: never on a host where the
        task has an attempt, nor where it is excluded; only while one copy runs."""
        for j in range(len(lst) - 1, -1, -1):
            i = lst[j]
            if self._excluded_for_task(i, executor_id, host) or \
                    any(a.host == host for a in self.attempts[i]):
                continue
            del lst[j]
            if not self.successful[i] and self.copies_running[i] == 1 and \
                    i in self.speculatable:
                self.speculatable.discard(i)
                return i
        return None

    def _dequeue_regular(self, executor_id: str, host: str, slot: int, max_level: str
                         ) -> tuple[int, str] | None:
        i = None
        if self.for_process:
            i = self._pop(self.for_process.get((executor_id, slot)), executor_id, host)
        if i is None and self.for_executor_cache:
            i = self._pop(self.for_executor_cache.get(executor_id), executor_id, host)
        if i is not None:
            return i, PROCESS_LOCAL
        order = _LEVEL_ORDER[max_level]
        if order >= 1 and (self.for_executor or self.for_host):
            i = self._pop(self.for_executor.get(executor_id), executor_id, host)
            if i is None:
                i = self._pop(self.for_host.get(host), executor_id, host)
            if i is not None:
                return i, NODE_LOCAL
        if order >= 2:
            i = self._pop(self.no_prefs, executor_id, host)
            if i is not None:
                return i, NO_PREF
        i = self._steal_from_sibling(executor_id, host, slot)
        if i is not None:
            self.taken_from_sibling.add(i)
            return i, PROCESS_LOCAL
        if order >= 3:
            i = self._pop(self.all_pending, executor_id, host)
            if i is not None:
                return i, ANY
        return None

    def _steal_from_sibling(self, executor_id: str, host: str, slot: int) -> int | None:
        """A task whose memory block another process of this executor holds, when that
        process has a backlog (2+ such tasks waiting) and this one has nothing of its own.
        To Spark the whole executor is PROCESS_LOCAL: it runs the task on any free core.
        Here the block lives in one task process: the task asks that one for a copy (it
        answers between two of its tasks) and keeps it, so the next job finds the block in
        both. That beats idling while the holder works through its backlog: a cache that
        the first job spread 6/2 over two processes stays 6/2 otherwise, as the 3 s
        locality wait outlasts a short job."""
        for (ex, s), lst in self.for_process.items():
            if ex != executor_id or s == slot:
                continue
            front = None       # the task the holder would run last (it pops the end)
            for j, i in enumerate(lst):
                if not (self.successful[i] or self.copies_running[i]
                        or self._held_back(i, executor_id, host)):
                    if front is not None:
                        return lst.pop(front)
                    front = j
        return None

    def resource_offer(self, executor_id: str, host: str, slot: int, max_level: str,
                       task_resources: tuple | None = None) -> TaskDescription | None:
        """The task chosen for this slot, or None; the caller serializes it. `task_resources`
        = (cpus, {name: addresses}) the task is given (TaskContext.cpus() / resources())."""
        if self.is_zombie:
            return None
        ex = self.excludelist
        if ex is not None and (ex.is_node_excluded_for_task_set(host) or
                               ex.is_executor_excluded_for_task_set(executor_id)):
            return None
        self.seen_executors.add(executor_id)
        now = self.clock.time()
        allowed = max_level
        if self.is_barrier:
            # all tasks launch in one offer round or none do: no delay scheduling
            allowed = ANY
        elif max_level != NO_PREF:
            level = self.levels[self.allowed_level(now)]
            if _LEVEL_ORDER[level] < _LEVEL_ORDER[max_level]:
                allowed = level
        found = self._dequeue(executor_id, host, slot, allowed)
        if found is None:
            return None
        index, level, speculative = found
        task = self.tasks[index]
        tid = self.sched.new_task_id()
        attempt = len(self.attempts[index])
        info = TaskInfo(tid, index, attempt, task.partition_id, now, executor_id, host, level,
                        speculative)
        if speculative:
            log.info("Starting speculative task %d.%d in stage %s (TID %d) (%s, executor %s)",
                     index, attempt, self.task_set.id, tid, host, executor_id)
        self.attempts[index].append(info)
        self.task_infos[tid] = info
        self.copies_running[index] += 1
        self.running.add(tid)
        if max_level != NO_PREF and level in self.levels:
            self.current_level_index = self.levels.index(level)
            self.last_reset = now
        ts = self.task_set
        props = ts.properties
        if index in self.taken_from_sibling:
            self.taken_from_sibling.discard(index)
            props = dict(props, **{BLOCK_IN_SIBLING: "true"})
        return TaskDescription(tid, attempt, executor_id, slot, index, self.stage_key,
                               ts.blob, ts.meta, task.partition, task.partition_id,
                               props, task_resources)

    @property
    def has_pending(self) -> bool:
        """Is any task waiting to launch (a regular or a speculative copy)? False means no
        offer can take anything from this set (all ran or are running)."""
        return self._has_pending(self.all_pending) or bool(self.speculatable)

    @property
    def queueable(self) -> bool:
        """May a task wait on a busy slot (WorkerOffer.queued)? Only once tasks are seen to
        be short, where the driver round trip a slot waits between tasks is a large part of
        each task: a longer one could hold a queued task back while another slot idles.
        Never for barrier stages (all tasks must run at once) or under speculation (a
        queued task's wait would count as its run time)."""
        return self.quick_streak >= 2 and self.speculation is None and not self.is_barrier

    def queueable_at(self, position: int) -> bool:
        """May a task be the `position`-th waiting behind a busy slot's running one? Only
        while the tasks ahead of it are expected to take under QUEUEABLE_TASK_S in all (a
        longer wait would outlast what queueing saves)."""
        return self.queueable and position * max(self.run_s, MIN_RUN_S) <= QUEUEABLE_TASK_S

    def can_launch_barrier(self, free_offers: int) -> bool:
        """A barrier task set launches once, all of its tasks in one round of offers."""
        return (not self.is_zombie and not any(self.attempts)
                and free_offers >= self.num_tasks)

    def set_barrier_addresses(self, launched: list[TaskDescription],
                              addresses: dict[int, str]) -> None:
        """Tell every task of the barrier stage where all of them run (the local property
        "addresses", ordered by partition id, which BarrierTaskContext.getTaskInfos reads)."""
        by_partition = sorted(launched, key=lambda td: td.partition_id)
        props = dict(self.task_set.properties)
        props["addresses"] = ",".join(addresses[td.task_id] for td in by_partition)
        for td in launched:
            td.properties = props

    # --- results ------------------------------------------------------------------------
    def handle_success(self, tid: int, result: Any, accum: dict, metrics: dict) -> None:
        info = self.task_infos[tid]
        index = info.index
        limit = self.sched.max_result_size
        if limit and type(result) is bytes:     # Spark's canFetchMoreResults: result stages
            self.total_result_size += len(result)
            self.calculated_tasks += 1
            if self.total_result_size > limit:
                self._abort_for_result_size(limit)
                self.handle_failure(tid, "KILLED", TaskKilled("Tasks result size has exceeded "
                                                              "maxResultSize"), metrics)
                return
        info.mark_finished("FINISHED", self.clock.time())
        self.running.discard(tid)
        self.copies_running[index] -= 1
        self.quick_streak = self.quick_streak + 1 if info.duration < QUEUEABLE_TASK_S else 0
        run_s = max(metrics.get("executorRunTime", 0) / 1000,
                    metrics.get("executorCpuTime", 0) / 1e9)
        self.run_s = run_s if self.tasks_successful == 0 else 0.75 * self.run_s + 0.25 * run_s
        if self.speculation is not None and not self.successful[index]:
            bisect.insort(self.successful_durations, info.duration)
        if self.successful[index]:
            log.info("Ignoring task-finished event for %s because it has already completed "
                     "successfully", info.task_id)
            self.sched.dag.task_ended(self.tasks[index], SUCCESS, result, {}, metrics, info)
            return
        self.successful[index] = True
        self.tasks_successful += 1
        # first success wins: kill the other running attempts of the same task
        for other in self.attempts[index]:
            if other.task_id != tid and other.finish_time == 0:
                log.info("Killing attempt %d for task %d.%d in stage %s (TID %d) on %s as the "
                         "attempt %d succeeded on %s", other.attempt_number, index,
                         other.attempt_number, self.task_set.id, other.task_id, other.host,
                         info.attempt_number, info.host)
                self.sched.kill_task_attempt(other.task_id, "another attempt succeeded")
        if self.tasks_successful == self.num_tasks:
            self.is_zombie = True
        self.sched.dag.task_ended(self.tasks[index], SUCCESS, result, accum, metrics, info)
        self._maybe_finish()

    def _abort_for_result_size(self, limit: int) -> None:
        message = (f"Total size of serialized results of {self.calculated_tasks} tasks "
                   f"({bytes_to_string(self.total_result_size)}) is bigger than "
                   f"spark.driver.maxResultSize ({bytes_to_string(limit)})")
        log.error(message)
        self.abort(message, None)

    def handle_failure(self, tid: int, state: str, reason: Any, metrics: dict) -> None:
        info = self.task_infos.get(tid)
        if info is None or info.finish_time:
            return
        index = info.index
        info.mark_finished(state, self.clock.time())
        self.running.discard(tid)
        self.copies_running[index] -= 1
        self.quick_streak = 0       # queue no more tasks until short ones are seen again
        task = self.tasks[index]
        host = info.host
        info.error_message = reason.to_error_string()
        handed_back = isinstance(reason, TaskKilled) and reason.reason == TASK_HANDED_BACK
        (log.info if handed_back else log.warning)(
            "Lost task %d.%d in stage %s (TID %d) (%s executor %s): %s", index,
            info.attempt_number, self.task_set.id, tid, host, info.executor_id,
            info.error_message)
        if isinstance(reason, FetchFailed):
            if not self.successful[index]:
                self.successful[index] = True
                self.tasks_successful += 1
            self.is_zombie = True
            host_of_map = self.sched.executor_hosts.get(reason.executor_id or "")
            if self.health_tracker is not None and host_of_map is not None:
                self.health_tracker.update_excluded_for_fetch_failure(host_of_map,
                                                                      reason.executor_id)
        if self.is_barrier:
            # the DAG scheduler fails the whole stage attempt and retries it as one
            self.is_zombie = True
        self.sched.dag.task_ended(task, reason, None, {}, metrics, info)
        if self.successful[index] or isinstance(reason, FetchFailed) or self.is_barrier:
            self._maybe_finish()
            return
        if isinstance(reason, ExceptionFailure) and not reason.retryable:
            self.abort(f"Task {index} in stage {self.task_set.id} had a not serializable "
                       f"result: {reason.message}", None)
            return
        if isinstance(reason, TaskProcessCrashed):
            self.num_crashes[index] += 1
            if self.num_crashes[index] >= self.max_crashes:
                self._abort_after_failures(index, info, reason, self.num_crashes[index])
                return
        elif reason.count_towards_failures and not self.is_zombie:
            if self.excludelist is not None:
                self.excludelist.update_excluded_for_failed_task(
                    host, info.executor_id, index, info.error_message)
            else:
                self.failed_on.setdefault(index, set()).add(info.executor_id)
            self.num_failures[index] += 1
            if self.num_failures[index] >= self.max_task_failures:
                self._abort_after_failures(index, info, reason, self.num_failures[index])
                return
        if not self.is_zombie:
            self._add_pending(index)
            self._recompute_levels()
        self._maybe_finish()

    def _abort_after_failures(self, index: int, info: TaskInfo, reason: Any, n: int) -> None:
        log.error("Task %d in stage %s failed %d times; aborting job", index, self.task_set.id, n)
        msg = (f"Task {index} in stage {self.task_set.id} failed {n} times, most recent "
               f"failure: Lost task {index}.{info.attempt_number} in stage {self.task_set.id} "
               f"(TID {info.task_id}) ({info.host} executor {info.executor_id}): "
               f"{reason.to_error_string()}\nDriver stacktrace:")
        self.abort(msg, reason if isinstance(reason, ExceptionFailure) else None)

    def abort(self, message: str, exception: Any) -> None:
        self.sched.dag.task_set_failed(self.task_set, message, exception)
        self.is_zombie = True
        self._maybe_finish()

    def _maybe_finish(self) -> None:
        if self.is_zombie and not self.running:
            self.sched.task_set_finished(self)
            if self.tasks_successful == self.num_tasks and self.excludelist is not None \
                    and not self._finished_reported:
                self._finished_reported = True
                self.health_tracker.update_excluded_for_successful_task_set(
                    self.task_set.stage_id, self.task_set.stage_attempt,
                    self.excludelist.exec_to_failures)

    _finished_reported = False

    # --- speculation (Spark's checkSpeculatableTasks) -------------------------------------
    def check_speculatable_tasks(self, min_time_to_speculation: float) -> bool:
        """Mark running tasks that may get a speculative copy: once `quantile` of the tasks
        succeeded, those running longer than max(minTaskRuntime, multiplier x the median
        successful duration); before that, with spark.speculation.task.duration.threshold
        and no more tasks than one executor's slots, those running longer than it."""
        sp = self.speculation
        if sp is None or self.is_zombie or self.is_barrier or \
                (self.num_tasks == 1 and sp.duration_threshold is None):
            return False
        now = self.clock.time()
        if len(self.successful_durations) >= self.min_finished_for_speculation:
            threshold = max(sp.multiplier * median(self.successful_durations),
                            min_time_to_speculation)
            return self._check_and_submit(now, threshold, customized=False)
        if sp.duration_threshold is not None and self.num_tasks <= sp.executor_cores:
            return self._check_and_submit(now, sp.duration_threshold, customized=True)
        return False

    def _check_and_submit(self, now: float, threshold: float, customized: bool) -> bool:
        found = False
        for tid in sorted(self.running):
            info = self.task_infos[tid]
            index = info.index
            if self.successful[index] or self.copies_running[index] != 1 or \
                    index in self.speculatable:
                continue
            runtime = now - info.launch_time
            # Ember measures no per-task record rate: with the efficiency check on, such a
            # task counts as inefficient, as Spark treats a task whose rate it cannot compute
            if runtime > threshold:
                log.info("Marking task %d in stage %s (on %s) as speculatable because it ran "
                         "more than %.0f ms", index, self.task_set.id, info.host,
                         threshold * 1000)
                self.speculatable.add(index)
                self._add_speculatable(index)
                self.sched.speculative_task_submitted(self, index)
                found = True
        return found

    def _add_speculatable(self, index: int) -> None:
        locs = self.tasks[index].locations
        for loc in locs:
            if loc.executor_id is not None:
                self.spec_for_executor.setdefault(loc.executor_id, []).append(index)
            self.spec_for_host.setdefault(loc.host, []).append(index)
        if not locs:
            self.spec_no_prefs.append(index)
        self.spec_all.append(index)

    # --- exclusion: a task no executor may run -----------------------------------------------
    def completely_excluded_task(self, host_to_executors: dict[str, set[str]]) -> int | None:
        """Spark's getCompletelyExcludedTaskIfAny: the last pending task, if every live
        executor (or its node) is excluded for it by this task set or the application."""
        ex, ht = self.excludelist, self.health_tracker
        if ex is None or not host_to_executors:
            return None
        pending = [i for i in self.all_pending
                   if self.copies_running[i] == 0 and not self.successful[i]]
        if not pending:
            return None
        index = pending[-1]
        for host, execs in host_to_executors.items():
            if ht.is_node_excluded(host) or ex.is_node_excluded_for_task_set(host) or \
                    ex.is_node_excluded_for_task(host, index):
                continue
            if all(ht.is_executor_excluded(e) or ex.is_executor_excluded_for_task_set(e) or
                   ex.is_executor_excluded_for_task(e, index) for e in execs):
                continue
            return None
        return index

    def abort_since_completely_excluded(self, index: int) -> None:
        partition = self.tasks[index].partition_id
        self.abort(f"\nAborting TaskSet {self.task_set.id} because task {index} (partition "
                   f"{partition})\ncannot run anywhere due to node and executor "
                   f"excludeOnFailure.\nMost recent failure:\n"
                   f"{self.excludelist.latest_failure_reason}\n\nExcludeOnFailure behavior "
                   f"can be configured via spark.excludeOnFailure.*.\n", None)

    def executor_lost(self, executor_id: str) -> None:
        """Forget the lost executor as a preference: the tasks that waited for it (their
        cached blocks died with it) take their host, or any executor, at once, rather than
        after a locality wait (Spark waits it out when another executor is preferred too).
        Its running tasks end through the scheduler's status updates."""
        self.seen_executors.discard(executor_id)
        for key in [k for k in self.for_process if k[0] == executor_id]:
            del self.for_process[key]
        self.for_executor_cache.pop(executor_id, None)
        self.for_executor.pop(executor_id, None)
        if not self.is_zombie:
            self._recompute_levels()
