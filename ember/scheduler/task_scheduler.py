"""TaskSchedulerImpl: task sets in pools, offers from the backend, task status updates.

Thread-safe behind one lock, like Spark's synchronized TaskSchedulerImpl: the DAG
scheduler's thread submits and cancels task sets; the backend's threads offer slots and
report task ends.
"""
from __future__ import annotations

import itertools
import logging
import random
import threading
from typing import Any, Callable

from ember.clock import Clock, SystemClock
from ember.scheduler.backend import SchedulerBackend, WorkerOffer
from ember.scheduler.barrier_coordinator import BarrierCoordinator
from ember.scheduler.health_tracker import HealthTracker
from ember.scheduler.listener import SpeculativeTaskSubmitted, TaskStart
from ember.scheduler.pool import SchedulableBuilder
from ember.scheduler.resource_profiles import ExecutorResources, TaskRequirements
from ember.scheduler.speculation import SpeculationSettings
from ember.scheduler.task import (ExceptionFailure, ExecutorLostFailure, FetchFailed,
                                  TaskDescription, TaskKilled, TaskProcessCrashed, TaskSet)
from ember.scheduler.task_set_manager import NODE_LOCAL, PROCESS_LOCAL, TaskSetManager

log = logging.getLogger(__name__)

TASK_SIZE_TO_WARN_KIB = 1000    # Spark's TaskSetManager.TASK_SIZE_TO_WARN_KIB


def spread(offers: list[WorkerOffer]) -> list[WorkerOffer]:
    """Spark's shuffleOffers and round-robin: executors in random order, and each pass over
    the list reaches every executor before any executor's next slot. Within an executor the
    slots keep the caller's (ascending) order, so a job smaller than the cluster runs on
    each executor's lowest free slots: the same few task processes, still warm in the
    CPU's caches, rather than a random one of them."""
    by_executor: dict[str, list[WorkerOffer]] = {}
    for o in offers:
        by_executor.setdefault(o.executor_id, []).append(o)
    groups = list(by_executor.values())
    random.shuffle(groups)
    return [o for rank in itertools.zip_longest(*groups) for o in rank if o is not None]


class TaskSchedulerImpl:
    def __init__(self, max_task_failures: int, scheduling_mode: str = "FIFO",
                 allocation_file: str | None = None, bus: Any = None,
                 block_master: Any = None, max_crashes: int = 4,
                 locality_wait: float | dict[str, float] = 3.0,
                 barrier_sync_timeout: float = 31536000.0,
                 clock: Clock | None = None, speculation: SpeculationSettings | None = None,
                 health_tracker: HealthTracker | None = None,
                 max_result_size: int = 0) -> None:
        self.lock = threading.RLock()
        self.max_result_size = max_result_size      # spark.driver.maxResultSize, 0: none
        self.clock = clock or SystemClock()
        self.speculation = speculation
        self.health_tracker = health_tracker
        self._timers_stop = threading.Event()   # the revive and speculation threads
        self.executor_hosts: dict[str, str] = {}          # from offers: executor -> host
        self.unschedulable_expiry: dict[TaskSetManager, float] = {}
        self.kill_reasons: dict[int, str] = {}     # tid -> why the driver killed it
        self.max_task_failures = max_task_failures
        self.max_crashes = max_crashes
        # level -> its delay-scheduling wait (spark.locality.wait.process / .node); one
        # number: the wait at every level that waits
        self.locality_waits = (dict(locality_wait) if isinstance(locality_wait, dict) else
                               {PROCESS_LOCAL: locality_wait, NODE_LOCAL: locality_wait})
        self.builder = SchedulableBuilder(scheduling_mode, allocation_file)
        self.root_pool = self.builder.root
        self.bus = bus
        self.block_master = block_master
        self.backend: SchedulerBackend | None = None
        self.dag: Any = None
        self._tids = itertools.count()
        self.task_id_to_tsm: dict[int, TaskSetManager] = {}
        self.task_id_to_location: dict[int, tuple[str, int]] = {}
        self.stage_tsms: dict[int, dict[int, TaskSetManager]] = {}
        self.dead_executors: set[str] = set()
        self.has_launched_task = False
        self.barrier_sync_timeout = barrier_sync_timeout
        self.barrier_coordinator: BarrierCoordinator | None = None
        # custom resources: the profiles (set by the SparkContext), each executor's free
        # cores and addresses, its profile, and what each running task holds
        self.rp_manager: Any = None
        self.executor_resources: dict[str, ExecutorResources] = {}
        self.executor_rp_ids: dict[str, int] = {}
        self.task_id_to_resources: dict[int, tuple[str, TaskRequirements, dict]] = {}
        # queued tasks (WorkerOffer.queued) take their core when they start (promote_queued)
        self.queued_requirements: dict[int, tuple[str, TaskRequirements]] = {}

    def initialize(self, backend: SchedulerBackend, dag: Any) -> None:
        self.backend = backend
        self.dag = dag

    def new_task_id(self) -> int:
        return next(self._tids)

    def default_parallelism(self) -> int:
        assert self.backend is not None
        return self.backend.default_parallelism()

    # --- from the DAG scheduler ---------------------------------------------------------
    def submit_tasks(self, task_set: TaskSet) -> None:
        with self.lock:
            if task_set.barrier and self.barrier_coordinator is None:
                self.barrier_coordinator = BarrierCoordinator(self.barrier_sync_timeout)
                if self.bus is not None:
                    self.bus.add_sync(self.barrier_coordinator)
            tsm = TaskSetManager(self, task_set, self.max_task_failures, self.max_crashes,
                                 self.clock, self.speculation,
                                 self.health_tracker)
            attempts = self.stage_tsms.setdefault(task_set.stage_id, {})
            for other in attempts.values():
                other.is_zombie = True
            attempts[task_set.stage_attempt] = tsm
            self.builder.add_task_set(tsm, task_set.properties)
        self.backend.revive_offers()

    def cancel_tasks(self, stage_id: int, reason: str) -> None:
        with self.lock:
            for tsm in list(self.stage_tsms.get(stage_id, {}).values()):
                for tid in list(tsm.running):
                    loc = self.task_id_to_location.get(tid)
                    if loc is not None:
                        self.backend.kill_task(tid, loc[0], loc[1], reason)
                tsm.is_zombie = True
                tsm._maybe_finish()

    def zombify(self, stage_id: int, attempt: int) -> None:
        with self.lock:
            tsm = self.stage_tsms.get(stage_id, {}).get(attempt)
            if tsm is not None:
                tsm.is_zombie = True
                tsm._maybe_finish()

    def stage_removed(self, stage_id: int) -> None:
        """No job needs the stage any more: its closure may be dropped everywhere."""
        self.backend.forget_stage(stage_id)

    # --- timers ---------------------------------------------------------------------------
    def start_revive(self, interval: float) -> None:
        """Spark's periodic ReviveOffers (spark.scheduler.revive.interval): an offer round
        every `interval` while a task set has tasks waiting. Offers otherwise come only
        when something happens (a task ends, an executor registers, a job is submitted), and
        a task held back by delay scheduling waited for the next event after its wait, which
        might never come (a job hung so when the executor a task preferred was lost with the
        others idle; a cached task whose task process stays busy waits for that process)."""
        self._revive_when(interval, self.wants_offers, "task-scheduler-revive")

    def start_speculation(self) -> None:
        """Spark's task-scheduler-speculation thread: every spark.speculation.interval, mark
        stragglers speculatable and revive offers so their copies launch."""
        if self.speculation is not None:
            self._revive_when(self.speculation.interval, self.check_speculatable_tasks,
                              "task-scheduler-speculation")

    def _revive_when(self, interval: float, due: Callable[[], bool], name: str) -> None:
        """A timer thread: every `interval` until stop, an offer round if `due()`, on the
        backend's own thread when it has one (its executors map is that thread's)."""
        def run() -> None:
            while not self._timers_stop.wait(interval):
                try:
                    if due():
                        loop = getattr(self.backend, "loop", None)
                        if loop is not None:
                            loop.post(self.backend.revive_offers)
                        else:
                            self.backend.revive_offers()
                except Exception:
                    log.exception("%s failed", name)
        threading.Thread(target=run, name=name, daemon=True).start()

    def stop(self) -> None:
        self._timers_stop.set()

    def check_speculatable_tasks(self) -> bool:
        with self.lock:
            found = False
            for attempts in list(self.stage_tsms.values()):
                for tsm in list(attempts.values()):
                    found |= tsm.check_speculatable_tasks(self.speculation.min_task_runtime)
            return found

    def speculative_task_submitted(self, tsm: TaskSetManager, index: int) -> None:
        if self.bus is not None:
            self.bus.post(SpeculativeTaskSubmitted(tsm.stage_id, tsm.task_set.stage_attempt,
                                                   index, tsm.tasks[index].partition_id))

    def kill_task_attempt(self, tid: int, reason: str) -> bool:
        with self.lock:
            loc = self.task_id_to_location.get(tid)
            if loc is None:
                return False
            self.kill_reasons[tid] = reason
            self.backend.kill_task(tid, loc[0], loc[1], reason)
            return True

    def task_set_finished(self, tsm: TaskSetManager) -> None:
        with self.lock:
            attempts = self.stage_tsms.get(tsm.stage_id)
            if attempts is not None:
                if attempts.get(tsm.task_set.stage_attempt) is tsm:
                    del attempts[tsm.task_set.stage_attempt]
                if not attempts:
                    del self.stage_tsms[tsm.stage_id]
            if tsm.parent is not None:
                tsm.parent.remove(tsm)

    # --- from the backend ---------------------------------------------------------------
    def tasks_needed_by_profile(self) -> dict[int, tuple[int, int]]:
        """(pending, running) tasks of active task sets per resource profile (the demand
        dynamic allocation turns into executor targets). As Spark's ExecutorAllocationManager:
        running counts attempts (speculative copies included), pending counts indices with no
        attempt plus speculative copies marked but not launched yet."""
        with self.lock:
            out: dict[int, tuple[int, int]] = {}
            for attempts in self.stage_tsms.values():
                for tsm in attempts.values():
                    if not tsm.is_zombie:
                        rp = tsm.task_set.resource_profile_id
                        running = len(tsm.running)
                        pending = tsm.num_tasks - tsm.tasks_successful - sum(
                            1 for i, n in enumerate(tsm.copies_running)
                            if n and not tsm.successful[i])
                        pending += sum(1 for i in tsm.speculatable
                                       if not tsm.successful[i] and tsm.copies_running[i])
                        p, r = out.get(rp, (0, 0))
                        out[rp] = (p + pending, r + running)
            return out

    def register_executor_resources(self, executor_id: str, cores: int,
                                    resources: dict[str, list[str]], rp_id: int = 0) -> None:
        """An executor's cores and custom resource addresses: from now on its tasks take
        `spark.task.cpus` cores and their task resources from these (Spark's ExecutorData)."""
        with self.lock:
            self.executor_resources[executor_id] = ExecutorResources(cores, resources)
            self.executor_rp_ids[executor_id] = rp_id

    def _task_requirements(self, tsm: TaskSetManager) -> TaskRequirements:
        """What each task of the set takes: its stage's profile is fixed, so asked once."""
        req = tsm.requirements
        if req is None:
            req = tsm.requirements = TaskRequirements() if self.rp_manager is None else \
                self.rp_manager.task_requirements(tsm.task_set.resource_profile_id)
        return req

    def _can_run_on(self, tsm: TaskSetManager, executor_id: str) -> bool:
        rp_id = tsm.task_set.resource_profile_id
        executor_rp_id = self.executor_rp_ids.get(executor_id, 0)
        if self.rp_manager is None or rp_id == executor_rp_id:
            return True
        return self.rp_manager.can_be_scheduled(rp_id, executor_rp_id)

    def _offer(self, tsm: TaskSetManager, o: WorkerOffer, level: str,
               req: TaskRequirements) -> TaskDescription | None:
        """One slot offer to one task set, taking the task's cores and addresses from the
        executor when it has them (and refusing the offer when it has not)."""
        pool = self.executor_resources.get(o.executor_id)
        if o.queued:
            # one core and nothing else, taken from the slot's current task when it ends
            if pool is None or req.cpus != 1 or req.resources \
                    or not tsm.queueable_at(o.queued) \
                    or not self._can_run_on(tsm, o.executor_id):
                return None
            td = tsm.resource_offer(o.executor_id, o.host, o.slot, level, (1, {}))
            if td is not None:
                self.queued_requirements[td.task_id] = (o.executor_id, req)
            return td
        if pool is None:
            return tsm.resource_offer(o.executor_id, o.host, o.slot, level)
        if not pool.fits(req) or not self._can_run_on(tsm, o.executor_id):
            return None
        assigned = pool.acquire(req)
        td = tsm.resource_offer(o.executor_id, o.host, o.slot, level, (req.cpus, assigned))
        if td is None:
            pool.release(req, assigned)
        else:
            self.task_id_to_resources[td.task_id] = (o.executor_id, req, assigned)
        return td

    def wants_offers(self) -> bool:
        """Could an offer round place anything? Not while every task set has all its tasks
        running or done (a job's last ends, a 2-task job's first): the round after a task's
        end is then skipped."""
        with self.lock:
            for attempts in self.stage_tsms.values():
                for tsm in attempts.values():
                    if tsm.has_pending:
                        return True
            return False

    def queueable_tasks(self) -> int:
        """At most how many tasks a round of queued offers could place now: the pending
        tasks of the task sets that take tasks on busy slots (TaskSetManager.queueable; an
        upper bound, as pending lists drop launched tasks lazily). 0: no such round is worth
        building; else no slot needs more places offered than this."""
        with self.lock:
            return sum(len(tsm.all_pending) for attempts in self.stage_tsms.values()
                       for tsm in attempts.values() if tsm.queueable and not tsm.is_zombie)

    def resource_offers(self, offers: list[WorkerOffer]) -> list[TaskDescription]:
        with self.lock:
            if self.dead_executors:
                offers = [o for o in offers if o.executor_id not in self.dead_executors]
            for o in offers:
                self.executor_hosts[o.executor_id] = o.host
            if not self.stage_tsms:     # nothing to place (the offers after a job's last end)
                return []
            ht = self.health_tracker
            if ht is not None:
                ht.apply_exclude_on_failure_timeout()
                offers = [o for o in offers if not ht.is_node_excluded(o.host)
                          and not ht.is_executor_excluded(o.executor_id)]
            if len(offers) > 1:
                offers = spread(offers)
            launched: list[TaskDescription] = []
            if self._pools_contend():
                for o in offers:
                    self._place([o], launched, ht)
            else:
                self._place(offers, launched, ht)
            if launched and ht is not None:
                self.unschedulable_expiry.clear()
            if launched:
                self.has_launched_task = True
            return self._serialize_tasks(launched)

    def _pools_contend(self) -> bool:
        """FAIR scheduling with several task sets waiting to place tasks: each slot of a round
        then goes to the one neediest at that moment, as in Spark, where every StatusUpdate
        offers the core it freed (in one pass over several slots, the set sorted first takes
        them all: tasks that ended together would starve the other pools). Not with a
        barrier set waiting, which needs its slots in one pass."""
        if self.root_pool.scheduling_mode != "FAIR":
            return False
        waiting = [tsm for attempts in self.stage_tsms.values() for tsm in attempts.values()
                   if tsm.has_pending and not tsm.is_zombie]
        return len(waiting) > 1 and not any(tsm.is_barrier for tsm in waiting)

    def _place(self, offers: list[WorkerOffer], launched: list[TaskDescription],
               ht: HealthTracker | None) -> None:
        """One pass of the task sets in scheduling order over the offers (locality level by
        level, round-robin over the offers); what launches is added to `launched`."""
        free = list(offers)
        queued = offers[0].queued if offers else False
        for tsm in self.root_pool.sorted_task_sets():
            if not free:
                break
            if queued and not tsm.queueable:
                continue
            if not tsm.has_pending:     # nothing to place: only note who offered
                tsm.seen_executors.update(o.executor_id for o in free)
                continue
            req = self._task_requirements(tsm)
            if tsm.is_barrier:
                if tsm.can_launch_barrier(len(free)):
                    free = self._launch_barrier(tsm, free, launched, req)
                continue
            before = len(launched)
            for level in list(tsm.levels):
                while free and tsm.has_pending:
                    progress = False
                    rest = []
                    # a slot whose queued offer took nothing takes nothing further back in
                    # its queue in this pass either: the task it could take does not depend
                    # on the place, which queueable_at only makes stricter further back
                    refused: set[tuple[str, int]] = set()
                    for i, o in enumerate(free):
                        if o.queued and (o.executor_id, o.slot) in refused:
                            rest.append(o)
                            continue
                        td = self._offer(tsm, o, level, req)
                        if td is None:
                            rest.append(o)
                            if o.queued:
                                refused.add((o.executor_id, o.slot))
                            continue
                        self._launched(tsm, td, o, launched)
                        progress = True
                        if not tsm.has_pending:
                            rest.extend(free[i + 1:])
                            break
                    free = rest
                    if not progress:
                        break
            if free and not tsm.has_pending:    # all placed: the rest would take nothing
                tsm.seen_executors.update(o.executor_id for o in free)
            if ht is not None and len(launched) == before and not queued:
                self._check_unschedulable(tsm)

    def _serialize_tasks(self, launched: list[TaskDescription]) -> list[TaskDescription]:
        """The chosen tasks, encoded. One that cannot be (its partition holds a lock, say)
        would fail on every attempt, so, as Spark, its task set is aborted, and its tasks
        of this round end killed without being sent (their cores and slots are free
        again)."""
        aborted: set[TaskSetManager] = set()
        unsent: set[int] = set()
        for td in launched:
            tsm = self.task_id_to_tsm[td.task_id]
            if tsm not in aborted:
                try:
                    self._serialize_task(tsm, td)
                    continue
                except Exception as e:
                    message = (f"Failed to serialize task {td.task_id}, not attempting to "
                               "retry it.")
                    log.error(message, exc_info=True)
                    tsm.abort(f"{message} Exception during serialization: "
                              f"{type(e).__name__}: {e}", None)
                    aborted.add(tsm)
            unsent.add(td.task_id)
        if not unsent:
            return launched
        for tid in unsent:
            self.status_update(tid, "KILLED", "Task not serializable", {}, {}, [])
        return [td for td in launched if td.task_id not in unsent]

    @staticmethod
    def _serialize_task(tsm: TaskSetManager, td: TaskDescription) -> None:
        """Encode a chosen task (after the locality decision, barrier addresses included)
        and warn once per task set about a very large one, as Spark's prepareLaunchingTask."""
        td.task_bytes = td.encode()
        size = len(td.task_bytes)
        if size > TASK_SIZE_TO_WARN_KIB * 1024 and not tsm.emitted_task_size_warning:
            tsm.emitted_task_size_warning = True
            log.warning("Stage %d contains a task of very large size (%d KiB). The maximum "
                        "recommended task size is %d KiB.", tsm.stage_id, size // 1024,
                        TASK_SIZE_TO_WARN_KIB)

    def _check_unschedulable(self, tsm: TaskSetManager) -> None:
        """Spark's handling of a task set one of whose tasks no executor may run: with an
        idle executor, kill it (a replacement may be allowed) and abort after
        spark.scheduler.excludeOnFailure.unschedulableTaskSetTimeout unless something
        launches meanwhile; with none idle, abort now."""
        live = {e: h for e, h in self.executor_hosts.items() if e not in self.dead_executors}
        host_to_executors: dict[str, set[str]] = {}
        for e, h in live.items():
            host_to_executors.setdefault(h, set()).add(e)
        index = tsm.completely_excluded_task(host_to_executors)
        if index is None:
            return
        expiry = self.unschedulable_expiry.get(tsm)
        if expiry is not None:
            if self.clock.time() >= expiry:
                log.error("Aborting %s because no executor became available within the "
                          "unschedulable task set timeout", tsm.name)
                tsm.abort_since_completely_excluded(index)
            return
        busy = {loc[0] for loc in self.task_id_to_location.values()}
        idle = sorted(e for e in live if e not in busy)
        kill = getattr(self.backend, "kill_executors", None)
        if idle and kill is not None:
            log.info("Killing idle excluded executor %s so that %s may get a new one",
                     idle[0], tsm.name)
            kill([idle[0]])
            self.unschedulable_expiry[tsm] = (self.clock.time() +
                                              self.health_tracker.s.unschedulable_timeout)
        else:
            log.info("Cannot schedule any task because all executors excluded from failures. "
                     "No idle executors can be found to kill. Aborting stage now.")
            tsm.abort_since_completely_excluded(index)

    def _launched(self, tsm: TaskSetManager, td: TaskDescription, o: WorkerOffer,
                  launched: list[TaskDescription]) -> None:
        launched.append(td)
        self.task_id_to_tsm[td.task_id] = tsm
        self.task_id_to_location[td.task_id] = (o.executor_id, o.slot)
        if not o.queued:                # a queued task starts later (_started_queued)
            self._post_task_start(tsm, td.task_id)

    def _post_task_start(self, tsm: TaskSetManager, tid: int) -> None:
        if self.bus is not None:
            self.bus.post(TaskStart(tsm.stage_id, tsm.task_set.stage_attempt,
                                    tsm.task_infos[tid]))

    def _started_queued(self, tsm: TaskSetManager | None, tid: int) -> None:
        """A task that waited on a busy slot starts now (or ends without having started):
        its launch time and TaskStart are now, so its duration and the executor's active
        tasks do not count the wait."""
        info = tsm.task_infos.get(tid) if tsm is not None else None
        if info is not None:
            info.launch_time = tsm.clock.time()
            self._post_task_start(tsm, tid)

    def _launch_barrier(self, tsm: TaskSetManager, free: list[WorkerOffer],
                        launched: list[TaskDescription],
                        req: TaskRequirements) -> list[WorkerOffer]:
        """Every task of a barrier task set on its own offer (the caller checked there are
        enough); the offers left over."""
        from ember.scheduler.task_set_manager import ANY
        tds: list[TaskDescription] = []
        addresses: dict[int, str] = {}
        for o in free[:tsm.num_tasks]:
            td = self._offer(tsm, o, ANY, req)
            assert td is not None, "a barrier task set got an offer it could not use"
            addresses[td.task_id] = o.address or f"{o.host}:0"
            tds.append(td)
            self._launched(tsm, td, o, launched)
        tsm.set_barrier_addresses(tds, addresses)
        return free[tsm.num_tasks:]

    def barrier_request(self, executor_id: str, request: Any, reply: Any, fail: Any) -> None:
        """A RequestToSync from a task process, believed only if its task runs on that
        executor in a barrier stage attempt of the stage it names."""
        with self.lock:
            tid = request.taskAttemptId
            tsm = self.task_id_to_tsm.get(tid)
            loc = self.task_id_to_location.get(tid)
            valid = (tsm is not None and tsm.is_barrier and loc is not None
                     and loc[0] == executor_id and tsm.stage_id == request.stageId
                     and tsm.task_set.stage_attempt == request.stageAttemptId
                     and tsm.num_tasks == request.numTasks)
            coordinator = self.barrier_coordinator
        if not valid or coordinator is None:
            fail(f"Task {tid} is not a running task of barrier stage {request.stageId} "
                 f"(Attempt {request.stageAttemptId}) on executor {executor_id}")
            return
        coordinator.handle_request(request, reply, fail)

    def status_update(self, tid: int, state: str, payload: Any, accum: dict, metrics: dict,
                      blocks: list) -> None:
        with self.lock:
            tsm = self.task_id_to_tsm.pop(tid, None)
            loc = self.task_id_to_location.pop(tid, None)
            held = self.task_id_to_resources.pop(tid, None)
            if self.queued_requirements.pop(tid, None) is not None:
                self._started_queued(tsm, tid)     # ended before it started: took no core
            kill_reason = self.kill_reasons.pop(tid, None)
            if held is not None and held[0] in self.executor_resources:
                self.executor_resources[held[0]].release(held[1], held[2])
            if blocks and self.block_master is not None and loc is not None:
                info = tsm.task_infos.get(tid) if tsm else None
                self.block_master.update(loc[0], loc[1], info.host if info else "", blocks)
            if tsm is None:
                log.debug("Ignoring update with state %s for TID %s because its task set is "
                          "gone", state, tid)
                return
            if state == "FINISHED":
                tsm.handle_success(tid, payload, accum, metrics)
                return
            if state == "FAILED":
                exc_type, message, tb, retryable = payload
                reason: Any = ExceptionFailure(exc_type, message, tb, retryable)
            elif state == "KILLED":
                reason = TaskKilled(kill_reason or str(payload))
            elif state == "FETCH_FAILED":
                reason = FetchFailed(*payload)
            elif state == "LOST":
                reason = TaskProcessCrashed(str(payload))
                if self.block_master is not None and loc is not None:
                    self.block_master.remove_slot(loc[0], loc[1])
            elif state == "EXECUTOR_LOST":
                reason = payload if isinstance(payload, ExecutorLostFailure) else \
                    ExecutorLostFailure(loc[0] if loc else "?", False, str(payload))
            else:
                reason = ExceptionFailure("SparkException", f"unknown task state {state}", "")
            tsm.handle_failure(tid, state, reason, metrics)

    def promote_queued(self, tid: int) -> None:
        """A queued task started (its slot's previous task ended): it holds a core now."""
        with self.lock:
            queued = self.queued_requirements.pop(tid, None)
            if queued is None:
                return
            self._started_queued(self.task_id_to_tsm.get(tid), tid)
            executor_id, req = queued
            pool = self.executor_resources.get(executor_id)
            if pool is not None:
                self.task_id_to_resources[tid] = (executor_id, req, pool.acquire(req))

    def executor_lost(self, executor_id: str, reason: str, exit_caused_by_app: bool = False,
                      worker_host: str | None = None) -> None:
        with self.lock:
            self.dead_executors.add(executor_id)
            self.executor_resources.pop(executor_id, None)
            self.executor_rp_ids.pop(executor_id, None)
            self.executor_hosts.pop(executor_id, None)
            if self.health_tracker is not None:
                self.health_tracker.handle_removed_executor(executor_id)
            for attempts in self.stage_tsms.values():
                for tsm in attempts.values():
                    tsm.executor_lost(executor_id)   # a failed task stops waiting for it
            lost = [tid for tid, loc in self.task_id_to_location.items() if loc[0] == executor_id]
        for tid in lost:
            self.status_update(tid, "EXECUTOR_LOST",
                               ExecutorLostFailure(executor_id, exit_caused_by_app, reason),
                               {}, {}, [])
        if self.block_master is not None:
            self.block_master.remove_executor(executor_id)
        self.dag.executor_lost(executor_id, worker_host)

    def block_migrated(self, old_executor: str, new_executor: str, new_host: str,
                       partition_id: int) -> None:
        """Active task sets whose tasks preferred a migrated cached block follow it."""
        with self.lock:
            for attempts in self.stage_tsms.values():
                for tsm in attempts.values():
                    if not tsm.is_zombie:
                        tsm.block_migrated(old_executor, new_executor, new_host, partition_id)

    def executor_added(self, executor_id: str) -> None:
        with self.lock:
            self.dead_executors.discard(executor_id)

    def is_executor_alive(self, executor_id: str) -> bool:
        return executor_id not in self.dead_executors and self.backend.is_executor_alive(executor_id)
