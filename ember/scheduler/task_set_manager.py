"""TaskSetManager: one stage attempt's tasks — which to launch where, retries, aborts.

Delay scheduling over locality levels PROCESS_LOCAL (the task process holding a cached
block), NODE_LOCAL (same executor or host), NO_PREF and ANY, with spark.locality.wait per
level; failures counted per task up to spark.task.maxFailures, as TaskSetManager.scala does.
"""
from __future__ import annotations

import logging
import pickle
import time
from typing import Any

from ember.scheduler.task import (SUCCESS, ExceptionFailure, FetchFailed, TaskDescription,
                                  TaskInfo, TaskProcessCrashed, TaskSet)

log = logging.getLogger(__name__)

PROCESS_LOCAL, NODE_LOCAL, NO_PREF, ANY = "PROCESS_LOCAL", "NODE_LOCAL", "NO_PREF", "ANY"
LEVELS = [PROCESS_LOCAL, NODE_LOCAL, NO_PREF, ANY]


def _dumps(obj: Any) -> bytes:
    try:
        return pickle.dumps(obj, protocol=5)
    except Exception:
        import cloudpickle
        return cloudpickle.dumps(obj, protocol=5)


class TaskSetManager:
    def __init__(self, sched: Any, task_set: TaskSet, max_task_failures: int,
                 max_crashes: int = 4, locality_wait: float = 3.0) -> None:
        self.sched = sched
        self.task_set = task_set
        self.tasks = task_set.tasks
        self.num_tasks = len(self.tasks)
        self.max_task_failures = max_task_failures
        self.max_crashes = max(max_crashes, max_task_failures)
        self.stage_id = task_set.stage_id
        self.priority = task_set.priority
        self.name = f"TaskSet_{task_set.id}"
        self.weight = 1
        self.min_share = 0
        self.parent: Any = None
        self.is_zombie = False
        self.successful = [False] * self.num_tasks
        self.num_failures = [0] * self.num_tasks
        self.num_crashes = [0] * self.num_tasks
        # A failed task is retried on another executor while one exists (a full disk or a
        # broken host would otherwise use up spark.task.maxFailures on the same executor in
        # a second): executors each task failed on, and the executors that made offers.
        self.failed_on: dict[int, set[str]] = {}
        self.seen_executors: set[str] = set()
        self.copies_running = [0] * self.num_tasks
        self.attempts: list[list[TaskInfo]] = [[] for _ in range(self.num_tasks)]
        self.tasks_successful = 0
        self.running: set[int] = set()
        self.task_infos: dict[int, TaskInfo] = {}
        self.stage_key = (task_set.stage_id, task_set.stage_attempt)
        # pending indices by locality
        self.for_process: dict[tuple[str, int], list[int]] = {}
        self.for_executor: dict[str, list[int]] = {}
        self.for_host: dict[str, list[int]] = {}
        self.no_prefs: list[int] = []
        self.all_pending: list[int] = []
        for i in reversed(range(self.num_tasks)):
            self._add_pending(i)
        self.locality_wait = locality_wait
        self.levels = self._valid_levels()
        self.current_level_index = 0
        self.last_reset = time.monotonic()

    @property
    def running_tasks(self) -> int:
        return len(self.running)

    def _add_pending(self, i: int) -> None:
        locs = self.tasks[i].locations
        for loc in locs:
            if loc.executor_id is not None and loc.slot is not None:
                self.for_process.setdefault((loc.executor_id, loc.slot), []).append(i)
            if loc.executor_id is not None:
                self.for_executor.setdefault(loc.executor_id, []).append(i)
            self.for_host.setdefault(loc.host, []).append(i)
        if not locs:
            self.no_prefs.append(i)
        self.all_pending.append(i)

    def _valid_levels(self) -> list[str]:
        levels = []
        if self.for_process:
            levels.append(PROCESS_LOCAL)
        if self.for_executor or self.for_host:
            levels.append(NODE_LOCAL)
        if self.no_prefs:
            levels.append(NO_PREF)
        levels.append(ANY)
        return levels

    def _wait(self, level: str) -> float:
        return self.locality_wait if level in (PROCESS_LOCAL, NODE_LOCAL) else 0.0

    def _has_pending(self, lst: list[int] | None) -> bool:
        if not lst:
            return False
        while lst and (self.successful[lst[-1]] or self.copies_running[lst[-1]]):
            lst.pop()
        return bool(lst)

    def _more_tasks_at(self, level: str) -> bool:
        if level == PROCESS_LOCAL:
            return any(self._has_pending(l) for l in self.for_process.values())
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

    @staticmethod
    def _pop(lst: list[int] | None, ok) -> int | None:
        if not lst:
            return None
        for j in range(len(lst) - 1, -1, -1):
            i = lst[j]
            if ok(i):
                del lst[j]
                return i
        return None

    def _dequeue(self, executor_id: str, host: str, slot: int, max_level: str
                 ) -> tuple[int, str] | None:
        def ok(i: int) -> bool:
            if self.successful[i] or self.copies_running[i]:
                return False
            failed = self.failed_on.get(i)
            return not failed or executor_id not in failed or not self.seen_executors - failed
        i = self._pop(self.for_process.get((executor_id, slot)), ok)
        if i is not None:
            return i, PROCESS_LOCAL
        order = LEVELS.index(max_level)
        if order >= 1:
            i = self._pop(self.for_executor.get(executor_id), ok)
            if i is None:
                i = self._pop(self.for_host.get(host), ok)
            if i is not None:
                return i, NODE_LOCAL
        if order >= 2:
            i = self._pop(self.no_prefs, ok)
            if i is not None:
                return i, NO_PREF
        if order >= 3:
            i = self._pop(self.all_pending, ok)
            if i is not None:
                return i, ANY
        return None

    def resource_offer(self, executor_id: str, host: str, slot: int, max_level: str
                       ) -> TaskDescription | None:
        if self.is_zombie:
            return None
        self.seen_executors.add(executor_id)
        now = time.monotonic()
        allowed = max_level
        if max_level != NO_PREF:
            level = self.levels[self.allowed_level(now)]
            if LEVELS.index(level) < LEVELS.index(max_level):
                allowed = level
        found = self._dequeue(executor_id, host, slot, allowed)
        if found is None:
            return None
        index, level = found
        task = self.tasks[index]
        tid = self.sched.new_task_id()
        attempt = len(self.attempts[index])
        info = TaskInfo(tid, index, attempt, task.partition_id, time.time(), executor_id,
                        host, level)
        self.attempts[index].append(info)
        self.task_infos[tid] = info
        self.copies_running[index] += 1
        self.running.add(tid)
        if max_level != NO_PREF and level in self.levels:
            self.current_level_index = self.levels.index(level)
            self.last_reset = now
        ts = self.task_set
        task_bytes = _dumps((task.partition, task.partition_id, attempt, ts.properties,
                             ts.stage_id, ts.stage_attempt))
        return TaskDescription(tid, attempt, executor_id, slot,
                               f"task {index}.{attempt} in stage {ts.id}", index,
                               self.stage_key, ts.blob, ts.meta, task_bytes)

    # --- results ------------------------------------------------------------------------
    def handle_success(self, tid: int, result: Any, accum: dict, metrics: dict) -> None:
        info = self.task_infos[tid]
        index = info.index
        info.mark_finished("FINISHED")
        self.running.discard(tid)
        self.copies_running[index] -= 1
        if self.successful[index]:
            log.info("Ignoring task-finished event for %s because it has already completed "
                     "successfully", info.task_id)
            self.sched.dag.task_ended(self.tasks[index], SUCCESS, result, {}, metrics, info)
            return
        self.successful[index] = True
        self.tasks_successful += 1
        # kill other running attempts of the same task
        for other in self.attempts[index]:
            if other.task_id != tid and other.finish_time == 0:
                self.sched.kill_task_attempt(other.task_id, "another attempt succeeded")
        if self.tasks_successful == self.num_tasks:
            self.is_zombie = True
        self.sched.dag.task_ended(self.tasks[index], SUCCESS, result, accum, metrics, info)
        self._maybe_finish()

    def handle_failure(self, tid: int, state: str, reason: Any, metrics: dict) -> None:
        info = self.task_infos.get(tid)
        if info is None or info.finish_time:
            return
        index = info.index
        info.mark_finished(state)
        self.running.discard(tid)
        self.copies_running[index] -= 1
        task = self.tasks[index]
        host = info.host
        if isinstance(reason, FetchFailed):
            if not self.successful[index]:
                self.successful[index] = True
                self.tasks_successful += 1
            self.is_zombie = True
            info.error_message = reason.to_error_string()
        else:
            info.error_message = reason.to_error_string()
            log.warning("Lost task %d.%d in stage %s (TID %d) (%s executor %s): %s", index,
                        info.attempt_number, self.task_set.id, tid, host, info.executor_id,
                        info.error_message)
        self.sched.dag.task_ended(task, reason, None, {}, metrics, info)
        if self.successful[index] or isinstance(reason, FetchFailed):
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
            self.failed_on.setdefault(index, set()).add(info.executor_id)
            self.num_failures[index] += 1
            if self.num_failures[index] >= self.max_task_failures:
                self._abort_after_failures(index, info, reason, self.num_failures[index])
                return
        if not self.is_zombie:
            self._add_pending(index)
            self.levels = self._valid_levels()
            self.current_level_index = min(self.current_level_index, len(self.levels) - 1)
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

    def executor_lost(self, executor_id: str) -> list[int]:
        self.seen_executors.discard(executor_id)
        return [tid for tid in self.running if self.task_infos[tid].executor_id == executor_id]
