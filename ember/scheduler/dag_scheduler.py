"""DAGScheduler: turns an action into stages cut at shuffles and drives them to completion.

Its state (jobs, stages, which are waiting, running or failed) is changed only by the
handle_* methods, one event at a time on one thread, and it acts on the world only through
injected collaborators (task scheduler, listener bus, timer, clock) — so the unit tests drive it
with fake task results and no processes. Names and messages follow Spark's DAGScheduler.
"""
from __future__ import annotations

import logging
import pickle
import threading
from typing import Any, Callable

from ember.clock import Clock, SystemClock
from ember.dependency import NarrowDependency, ShuffleDependency, stage_rdds
from ember.errors import (BarrierJobRunWithDynamicAllocationException,
                          BarrierJobSlotsNumberCheckFailed,
                          BarrierJobUnsupportedRDDChainException, IllegalArgumentException,
                          JobCancelledException, PicklingError, SparkException,
                          make_python_exception)
from ember.scheduler.listener import (JobEnd, JobStart, ListenerBus, RDDInfo, StageCompleted,
                                      StageInfo, StageSubmitted, TaskEnd)
from ember.scheduler.map_output_tracker import MapOutputTracker
from ember.scheduler.task import (ExceptionFailure, FetchFailed, Success, Task, TaskLocation,
                                  TaskSet)
from ember.shuffle.base import MapStatus, StageStatuses

log = logging.getLogger(__name__)

RESUBMIT_TIMEOUT = 0.2


def rdd_infos(rdd: Any) -> list[RDDInfo]:
    """The stage's RDD and its narrow ancestors, as Spark's StageInfo.fromStage lists them:
    the UI learns cached RDDs' names, sizes and storage levels from these. Each one's
    barrier flag is a walk of its own ancestors, taken only when the stage's RDD (whose
    walk covers them all) is a barrier one."""
    barrier = rdd._is_barrier()
    return [RDDInfo(r.id(), r.name() or type(r).__name__, len(r.partitions()),
                      r._storage_level, r._call_site, [d.rdd.id() for d in r.dependencies()],
                      barrier and r._is_barrier())
            for r in stage_rdds(rdd)]


def _persisted(rdd: Any) -> bool:
    """Whether rdd's partitions are kept (in memory or on disk, or held: HeldRDD), so its
    tasks prefer where."""
    level = getattr(rdd, "_storage_level", None)
    return level is not None and (level.useMemory or level.useDisk) or \
        getattr(rdd, "holds_blocks", False)


def _snapshot(info: StageInfo) -> StageInfo:
    """A shallow copy of a StageInfo (dataclasses.replace without its per-call field
    introspection: one per stage of every job)."""
    copy = object.__new__(StageInfo)
    copy.__dict__.update(info.__dict__)
    return copy


class Stage:
    def __init__(self, stage_id: int, rdd: Any, num_tasks: int, parents: list["Stage"],
                 first_job_id: int, call_site: str) -> None:
        self.id = stage_id
        self.rdd = rdd
        self.num_tasks = num_tasks
        self.parents = parents
        self.first_job_id = first_job_id
        self.job_ids: set[int] = {first_job_id}
        self.call_site = call_site
        self.next_attempt_id = 0
        self.failed_attempt_ids: set[int] = set()
        self.pending_partitions: set[int] = set()
        self.latest_info = StageInfo(stage_id, 0, call_site, num_tasks,
                                       parent_ids=[p.id for p in parents],
                                       rdd_infos=rdd_infos(rdd))
        self.is_barrier = self.latest_info.rdd_infos[0].barrier     # the stage's own RDD

    @property
    def name(self) -> str:
        return self.call_site

    def make_new_attempt(self, num_partitions_to_compute: int) -> None:
        # a first attempt without parent stages is submitted in the event that made the
        # stage: the infos made with it (for JobStart) are current; others are made anew,
        # to see cache() and names set while they waited
        infos = (self.latest_info.rdd_infos if self.next_attempt_id == 0 and not self.parents
                 else rdd_infos(self.rdd))
        self.latest_info = StageInfo(self.id, self.next_attempt_id, self.call_site,
                                       num_partitions_to_compute,
                                       rdd_name=self.rdd.name() or "",
                                       parent_ids=[p.id for p in self.parents],
                                       rdd_infos=infos)
        self.next_attempt_id += 1

    def __repr__(self) -> str:
        return f"{type(self).__name__} {self.id}"


class ShuffleMapStage(Stage):
    def __init__(self, stage_id: int, rdd: Any, num_tasks: int, parents: list[Stage],
                 first_job_id: int, call_site: str, dep: ShuffleDependency,
                 tracker: MapOutputTracker) -> None:
        super().__init__(stage_id, rdd, num_tasks, parents, first_job_id, call_site)
        self.shuffle_dep = dep
        self._tracker = tracker

    @property
    def is_available(self) -> bool:
        return self._tracker.num_available(self.shuffle_dep.shuffle_id) == self.num_tasks

    def find_missing_partitions(self) -> list[int]:
        return self._tracker.missing(self.shuffle_dep.shuffle_id)


class ResultStage(Stage):
    def __init__(self, stage_id: int, rdd: Any, func: Callable, partitions: list[int],
                 parents: list[Stage], first_job_id: int, call_site: str) -> None:
        super().__init__(stage_id, rdd, len(partitions), parents, first_job_id, call_site)
        self.func = func
        self.partitions = partitions
        self.active_job: ActiveJob | None = None

    def find_missing_partitions(self) -> list[int]:
        job = self.active_job
        if job is None:
            return []
        return [i for i in range(job.num_partitions) if not job.finished[i]]


class ActiveJob:
    def __init__(self, job_id: int, final_stage: ResultStage, listener: Any,
                 properties: dict[str, str], call_site: str) -> None:
        self.job_id = job_id
        self.final_stage = final_stage
        self.listener = listener
        self.properties = properties
        self.call_site = call_site
        self.num_partitions = len(final_stage.partitions)
        self.finished = [False] * self.num_partitions
        self.num_finished = 0


class JobWaiter:
    """Collects a job's per-partition results; the caller blocks in wait().

    The lock a caller blocks on is made only if one has to block: a caller that drove the
    loop itself (DriverRuntime.run_job) finds the job done. It is a plain lock, released
    once by the scheduler's loop, not an Event: Event.set takes a Condition's lock, which a
    Ctrl-C in the waiting thread between that Condition's acquire and its `with` (Python
    code in threading) left held for good, and the loop thread, and every later job, with
    it. A release never blocks."""

    def __init__(self, dag: "DAGScheduler", job_id: int, total: int,
                 result_handler: Callable[[int, Any], None]) -> None:
        self.dag = dag
        self.job_id = job_id
        self.total = total
        self.result_handler = result_handler
        self.finished = 0
        self.error: BaseException | None = None
        self._woken = total == 0
        self._done: threading.Lock | None = None     # held until the job is done
        self._done_lock = threading.Lock()

    def task_succeeded(self, index: int, result: Any) -> None:
        self.result_handler(index, result)
        self.finished += 1
        if self.finished == self.total:
            self._wake_caller()

    def job_failed(self, error: BaseException) -> None:
        self.error = error
        self._wake_caller()

    def _wake_caller(self) -> None:
        """Wake the caller once the scheduler loop has done the rest of its turn (the task's
        end, the job's cleanup, the offer round): woken earlier, it would only wait for the
        GIL the loop still holds and be woken a second time when the loop lets go of it.
        A wake-up lost to a loop shutting down is caught by wait()'s timeout."""
        loop = self.dag.loop
        if loop is not None and loop.in_loop():
            loop.post_after_turn(self._wake)
        else:
            self._wake()
        if loop is not None:
            loop.wake_driver()

    def _wake(self) -> None:
        with self._done_lock:
            if self._woken:
                return
            self._woken = True
            done = self._done
        if done is not None:
            done.release()

    @property
    def completed(self) -> bool:
        """The outcome is known (the caller may not have been woken yet)."""
        return self.error is not None or self.finished == self.total

    def cancel(self) -> None:
        self.dag.cancel_job(self.job_id, "")

    def wait(self) -> None:
        with self._done_lock:
            if not self._woken and self._done is None:
                done = threading.Lock()
                done.acquire()
                self._done = done
            done = self._done
        if done is not None:
            while not done.acquire(timeout=0.5) and not self.completed:
                pass
        if self.error is not None:
            raise self.error


class DAGScheduler:
    def __init__(self, task_scheduler: Any, bus: ListenerBus, tracker: MapOutputTracker,
                 cache_locations: Callable[[int, int], list[TaskLocation]],
                 serialize_stage: Callable[[str, Any, Any], bytes],
                 map_writer: Callable[[ShuffleDependency], Any],
                 max_consecutive_attempts: int = 4,
                 timer: Callable[[float, Callable[[], None]], None] | None = None,
                 loop: Any = None, barrier_check_interval: float = 15.0,
                 barrier_check_max_failures: int = 40,
                 dynamic_allocation: bool = False,
                 shuffle_service_enabled: bool = False, clock: Clock | None = None,
                 release_blocks: Callable[[int], None] | None = None) -> None:
        self.task_scheduler = task_scheduler
        # drops an RDD's blocks everywhere: what a HeldRDD still holds once a stage that
        # computed all its partitions is done
        self.release_blocks = release_blocks
        self.clock = clock or SystemClock()
        self.shuffle_service_enabled = shuffle_service_enabled
        self.bus = bus
        self.tracker = tracker
        self.cache_locations = cache_locations
        self.serialize_stage = serialize_stage
        self.map_writer = map_writer
        self.max_consecutive_attempts = max_consecutive_attempts
        self.max_stage_attempts = max(4, max_consecutive_attempts)
        self.timer = timer or self._thread_timer
        self.next_job_id = 0
        self.next_stage_id = 0
        self.job_id_to_stage_ids: dict[int, set[int]] = {}
        self.stage_id_to_stage: dict[int, Stage] = {}
        self.shuffle_id_to_map_stage: dict[int, ShuffleMapStage] = {}
        self.job_id_to_active_job: dict[int, ActiveJob] = {}
        # RDDs persisted in memory that no job has computed yet (see _before_cache_build)
        self.caches_to_build: set[int] = set()
        self.active_jobs: set[ActiveJob] = set()
        self.waiting_stages: set[Stage] = set()
        self.running_stages: set[Stage] = set()
        self.failed_stages: set[Stage] = set()
        self.cancelled_job_groups: set[str] = set()
        self.barrier_check_interval = barrier_check_interval
        self.barrier_check_max_failures = barrier_check_max_failures
        self.dynamic_allocation = dynamic_allocation
        self.barrier_job_id_to_num_tasks_check_failures: dict[int, int] = {}
        # barrier jobs between two slot checks: job id -> (waiter, properties)
        self.barrier_jobs_waiting_for_slots: dict[int, tuple[JobWaiter, dict]] = {}
        self._lock = threading.Lock()
        self.loop = loop      # None: handle events synchronously (unit tests)

    # --- event loop (the only I/O shell) ------------------------------------------------
    def post(self, fn: Callable, *args: Any) -> None:
        if self.loop is None:
            fn(*args)
        else:
            self.loop.post(fn, *args)

    def _thread_timer(self, delay: float, fn: Callable[[], None]) -> None:
        t = threading.Timer(delay, lambda: self.post(fn))
        t.daemon = True
        t.start()

    def new_job_id(self) -> int:
        with self._lock:
            jid = self.next_job_id
            self.next_job_id += 1
            return jid

    # --- public API (any thread) --------------------------------------------------------
    def submit_job(self, rdd: Any, func: Callable, partitions: list[int], call_site: str,
                   result_handler: Callable[[int, Any], None],
                   properties: dict[str, str], on_caller: bool = False) -> JobWaiter:
        """on_caller: the calling thread may run the submission itself while the loop is
        idle (EventLoop.run_here); only for a caller no exception can interrupt halfway.
        Raises IllegalArgumentException, as Spark, for a partition the RDD does not have."""
        if partitions:
            total = len(rdd.partitions())
            if min(partitions) < 0 or max(partitions) >= total:
                bad = next(p for p in partitions if p < 0 or p >= total)
                raise IllegalArgumentException(
                    f"Attempting to access a non-existent partition: {bad}. Total number of "
                    f"partitions: {total}")
        job_id = self.new_job_id()
        waiter = JobWaiter(self, job_id, len(partitions), result_handler)
        if not partitions:
            return waiter
        args = (job_id, rdd, func, partitions, call_site, waiter, dict(properties))
        if on_caller and self.loop is not None:
            self.loop.run_here(self.handle_job_submitted, *args)
        else:
            self.post(self.handle_job_submitted, *args)
        return waiter

    def cancel_job(self, job_id: int, reason: str) -> None:
        self.post(self.handle_job_cancellation, job_id, reason)

    def cancel_job_group(self, group_id: str, cancel_future_jobs: bool = False) -> None:
        self.post(self.handle_job_group_cancelled, group_id, cancel_future_jobs)

    def cancel_jobs_with_tag(self, tag: str) -> None:
        self.post(self.handle_job_tag_cancelled, tag)

    def cancel_all_jobs(self) -> None:
        self.post(self.handle_all_jobs_cancelled)

    def task_ended(self, task: Task, reason: Any, result: Any, accum_updates: dict,
                   metrics: dict, task_info: Any) -> None:
        self.post(self.handle_task_completion, task, reason, result, accum_updates, metrics,
                  task_info)

    def task_set_failed(self, task_set: TaskSet, reason: str,
                        exception: BaseException | None) -> None:
        self.post(self.handle_task_set_failed, task_set, reason, exception)

    def executor_lost(self, executor_id: str, worker_host: str | None = None) -> None:
        self.post(self.handle_executor_lost, executor_id, worker_host)

    # --- stage graph --------------------------------------------------------------------
    def _shuffle_deps(self, rdd: Any) -> list[ShuffleDependency]:
        """The immediate shuffle dependencies of rdd (walking narrow deps only)."""
        return [dep for r in stage_rdds(rdd) for dep in r.dependencies()
                if isinstance(dep, ShuffleDependency)]

    def _parent_stages(self, rdd: Any, job_id: int) -> list[Stage]:
        return [self._get_or_create_map_stage(d, job_id) for d in self._shuffle_deps(rdd)]

    def _get_or_create_map_stage(self, dep: ShuffleDependency, job_id: int) -> ShuffleMapStage:
        stage = self.shuffle_id_to_map_stage.get(dep.shuffle_id)
        if stage is not None:
            return stage
        # create missing ancestors first, deepest first
        for anc in self._missing_ancestor_deps(dep.rdd):
            if anc.shuffle_id not in self.shuffle_id_to_map_stage:
                self._create_map_stage(anc, job_id)
        return self._create_map_stage(dep, job_id)

    def _missing_ancestor_deps(self, rdd: Any) -> list[ShuffleDependency]:
        ancestors: list[ShuffleDependency] = []
        visited: set[int] = set()
        stack = [rdd]
        while stack:
            r = stack.pop()
            if r.id() in visited:
                continue
            visited.add(r.id())
            for dep in self._shuffle_deps(r):
                if dep.shuffle_id not in self.shuffle_id_to_map_stage:
                    ancestors.insert(0, dep)
                    stack.append(dep.rdd)
        return ancestors

    # --- barrier stage checks (Spark's checkBarrierStageWith*) ---------------------------
    def _check_barrier_stage(self, rdd: Any, num_tasks_in_stage: int) -> None:
        if not rdd._is_barrier():
            return
        if self.dynamic_allocation:
            raise BarrierJobRunWithDynamicAllocationException()
        num_partitions = rdd.getNumPartitions()
        max_concurrent = self.task_scheduler.backend.max_num_concurrent_tasks()
        if num_partitions > max_concurrent:
            raise BarrierJobSlotsNumberCheckFailed(num_partitions, max_concurrent)
        # no ancestor within the stage may change the partition count or join barrier RDDs
        for r in stage_rdds(rdd):
            if r.getNumPartitions() != num_tasks_in_stage or \
                    sum(1 for d in r.dependencies() if d.rdd._is_barrier()) > 1:
                raise BarrierJobUnsupportedRDDChainException()

    def _create_map_stage(self, dep: ShuffleDependency, job_id: int) -> ShuffleMapStage:
        rdd = dep.rdd
        self._check_barrier_stage(rdd, rdd.getNumPartitions())
        num_tasks = len(rdd.partitions())
        parents = self._parent_stages(rdd, job_id)
        sid = self.next_stage_id
        self.next_stage_id += 1
        stage = ShuffleMapStage(sid, rdd, num_tasks, parents, job_id,
                                self._stage_name(rdd, "map"), dep, self.tracker)
        self.stage_id_to_stage[sid] = stage
        self.shuffle_id_to_map_stage[dep.shuffle_id] = stage
        self._update_job_id_stage_id_maps(job_id, stage)
        self.tracker.register_shuffle(dep.shuffle_id, num_tasks)
        return stage

    @staticmethod
    def _stage_name(rdd: Any, kind: str) -> str:
        site = getattr(rdd, "_call_site", "") or ""
        return site or f"{kind} at <unknown>"

    def _update_job_id_stage_id_maps(self, job_id: int, stage: Stage) -> None:
        stack = [stage]
        while stack:
            s = stack.pop()
            s.job_ids.add(job_id)
            self.job_id_to_stage_ids.setdefault(job_id, set()).add(s.id)
            stack.extend(p for p in s.parents if job_id not in p.job_ids)

    def _rdd_fully_cached(self, rdd: Any) -> bool:
        if not _persisted(rdd):
            return False
        n = len(rdd.partitions())
        return all(self.cache_locations(rdd.id(), p) for p in range(n))

    def _missing_parent_stages(self, stage: Stage) -> list[Stage]:
        missing: dict[int, Stage] = {}
        visited: set[int] = set()
        stack = [stage.rdd]
        while stack:
            rdd = stack.pop()
            if rdd.id() in visited:
                continue
            visited.add(rdd.id())
            if self._rdd_fully_cached(rdd):
                continue
            for dep in rdd.dependencies():
                if isinstance(dep, ShuffleDependency):
                    ms = self._get_or_create_map_stage(dep, stage.first_job_id)
                    if not ms.is_available:
                        missing[ms.id] = ms
                else:
                    stack.append(dep.rdd)
        return sorted(missing.values(), key=lambda s: s.id)

    def _active_job_for_stage(self, stage: Stage) -> int | None:
        jobs = sorted(j for j in stage.job_ids if j in self.job_id_to_active_job)
        return jobs[0] if jobs else None

    # --- handlers -----------------------------------------------------------------------
    def handle_job_submitted(self, job_id: int, rdd: Any, func: Callable, partitions: list[int],
                             call_site: str, waiter: JobWaiter, properties: dict) -> None:
        group = properties.get("spark.jobGroup.id")
        if group is not None and group in self.cancelled_job_groups:
            waiter.job_failed(JobCancelledException(
                f"Job {job_id} cancelled part of cancelled job group {group}"))
            return
        try:
            self._check_barrier_stage(rdd, len(set(partitions)))
            parents = self._parent_stages(rdd, job_id)
            sid = self.next_stage_id
            self.next_stage_id += 1
            final = ResultStage(sid, rdd, func, partitions, parents, job_id, call_site)
            self.stage_id_to_stage[sid] = final
            self._update_job_id_stage_id_maps(job_id, final)
        except BarrierJobSlotsNumberCheckFailed as e:
            # the cluster may still be starting: check again later, up to maxFailures times
            failures = self.barrier_job_id_to_num_tasks_check_failures.get(job_id, 0) + 1
            self.barrier_job_id_to_num_tasks_check_failures[job_id] = failures
            log.warning("Barrier stage in job %d requires %d slots, but only %d are available. "
                        "Will retry up to %d more times", job_id, e.required_concurrent_tasks,
                        e.max_concurrent_tasks, self.barrier_check_max_failures - failures + 1)
            if failures <= self.barrier_check_max_failures:
                self.barrier_jobs_waiting_for_slots[job_id] = (waiter, properties)
                self.timer(self.barrier_check_interval, lambda: self._recheck_barrier_job(
                    job_id, rdd, func, partitions, call_site, waiter, properties))
            else:
                del self.barrier_job_id_to_num_tasks_check_failures[job_id]
                waiter.job_failed(e)
            return
        except Exception as e:
            log.warning("Creating new stage failed due to exception - job: %d", job_id)
            self.barrier_job_id_to_num_tasks_check_failures.pop(job_id, None)
            waiter.job_failed(e)
            return
        self.barrier_job_id_to_num_tasks_check_failures.pop(job_id, None)
        if self.caches_to_build and not self.active_jobs:
            self._before_cache_build(rdd)
        job = ActiveJob(job_id, final, waiter, properties, call_site)
        final.active_job = job
        self.job_id_to_active_job[job_id] = job
        self.active_jobs.add(job)
        # copies: async listeners must see the stages as they were when the job started
        stage_infos = [_snapshot(self.stage_id_to_stage[s].latest_info)
                       for s in sorted(self.job_id_to_stage_ids.get(job_id, ()))]
        self.bus.post(JobStart(job_id, self.clock.time(), stage_infos, properties))
        self.submit_stage(final)

    def _before_cache_build(self, rdd: Any) -> None:
        """Nothing runs and this job computes an RDD persisted in memory for the first time:
        the backend may give idle task processes that did much work a fresh start first
        (SchedulerBackend.before_cache_build)."""
        found, seen, todo = False, {id(rdd)}, [rdd]
        while todo:
            r = todo.pop()
            # the id if it has one: reading a PipelinedRDD's _id would number it
            rid = vars(r).get("_id", vars(r).get("_rdd_id"))
            if rid in self.caches_to_build:
                self.caches_to_build.discard(rid)
                found = True
            for dep in r.dependencies():
                if id(dep.rdd) not in seen:
                    seen.add(id(dep.rdd))
                    todo.append(dep.rdd)
        if found:
            self.task_scheduler.backend.before_cache_build()

    def _recheck_barrier_job(self, job_id: int, *submission: Any) -> None:
        """The slot check again, unless the job was cancelled or the context stopped."""
        if self.barrier_jobs_waiting_for_slots.pop(job_id, None) is not None:
            self.handle_job_submitted(job_id, *submission)

    def submit_stage(self, stage: Stage) -> None:
        """Submit the stage, or its missing parents first (Spark's submitStage, with a stack
        of its own: a job of a thousand shuffles in a row is not a recursion a thousand
        deep). A fault below (the task scheduler refusing a task set, say) fails the jobs
        that need that stage, as Spark fails what its event loop cannot handle, instead of
        leaving their callers waiting."""
        stack = [stage]
        while stack:
            s = stack.pop()
            try:
                stack.extend(reversed(self._submit_stage(s)))
            except Exception as e:
                log.exception("Submitting %s failed", s)
                self.abort_stage(s, f"{s} could not be submitted: {type(e).__name__}: {e}", e)

    def _submit_stage(self, stage: Stage) -> list[Stage]:
        """Submits the stage's tasks if no parent stage is missing; otherwise makes it wait
        and returns the missing parents, to be submitted in their order."""
        job_id = self._active_job_for_stage(stage)
        if job_id is None:
            self.abort_stage(stage, f"No active job for stage {stage.id}", None)
            return []
        if stage in self.waiting_stages or stage in self.running_stages \
                or stage in self.failed_stages:
            return []
        if stage.next_attempt_id >= self.max_stage_attempts:
            self.abort_stage(
                stage, f"{stage} (name={stage.name}) has been resubmitted for the maximum "
                f"allowable number of times: {self.max_stage_attempts}, which is the max "
                "value of config spark.stage.maxAttempts and "
                "spark.stage.maxConsecutiveAttempts.", None)
            return []
        missing = self._missing_parent_stages(stage)
        if not missing:
            self.submit_missing_tasks(stage, job_id)
        else:
            self.waiting_stages.add(stage)
        return missing

    def _preferred_locations(self, rdd: Any, partition: int) -> list[TaskLocation]:
        """Spark's getPreferredLocs: the first cached or preferred location found depth
        first through narrow dependencies (the first parent partition of each), with a
        stack of its own for a lineage thousands deep."""
        visited: set[tuple[int, int]] = set()
        stack = [(rdd, partition)]
        while stack:
            r, p = stack.pop()
            if _persisted(r):
                locs = self.cache_locations(r.id(), p)
                if locs:
                    return locs
            prefs = r.preferred_locations(p)
            if prefs:
                return [TaskLocation(h) for h in prefs]
            parents = [(dep.rdd, parent) for dep in r.dependencies()
                       if isinstance(dep, NarrowDependency)
                       for parent in dep.get_parents(p)[:1]]
            for parent_rdd, parent in reversed(parents):
                key = (parent_rdd.id(), parent)
                if key not in visited:
                    visited.add(key)
                    stack.append((parent_rdd, parent))
        return []

    def _release_held(self, rdd: Any) -> None:
        """The partitions a HeldRDD of a stage that computed all its partitions still
        holds: their tasks ran elsewhere (see ember.held_partitions), and no later task
        wants them."""
        if self.release_blocks is None:
            return
        for r in stage_rdds(rdd):
            if getattr(r, "holds_blocks", False) and any(
                    self.cache_locations(r.id(), p) for p in range(len(r.partitions()))):
                self.release_blocks(r.id())

    @staticmethod
    def _may_prefer_locations(rdd: Any) -> bool:
        """Whether a task of the stage of `rdd` can have a preferred location: some RDD of
        the stage is persisted (its cached blocks) or names locations itself. Most stages
        have none, and asking per partition cost ~4 us per task (40 ms for 10,000)."""
        for r in stage_rdds(rdd):
            if _persisted(r):
                return True
            names = getattr(r, "names_locations", None)
            if names is None or names():
                return True
        return False

    def _stage_meta(self, rdd: Any) -> dict[int, list[MapStatus | None]]:
        """Map output locations of every shuffle this stage reads."""
        meta = {}
        visited: set[int] = set()
        stack = [rdd]
        while stack:
            r = stack.pop()
            if r.id() in visited:
                continue
            visited.add(r.id())
            for dep in r.dependencies():
                if isinstance(dep, ShuffleDependency):
                    meta[dep.shuffle_id] = StageStatuses(self.tracker.statuses(dep.shuffle_id))
                else:
                    stack.append(dep.rdd)
        return meta

    def _stage_resource_profile(self, rdd: Any) -> int:
        """The ResourceProfile id the stage's tasks run with (0 without withResources)."""
        manager = getattr(self.task_scheduler, "rp_manager", None)
        if manager is None or manager.only_default:
            return 0
        from ember.scheduler.resource_profiles import profiles_of_stage
        return manager.stage_profile(profiles_of_stage(rdd))

    def submit_missing_tasks(self, stage: Stage, job_id: int) -> None:
        parts = stage.find_missing_partitions()
        job = self.job_id_to_active_job[job_id]
        properties = job.properties
        try:
            rp_id = self._stage_resource_profile(stage.rdd)
        except Exception as e:   # conflicting profiles: Spark fails the job
            self.abort_stage(stage, str(e), e)
            return
        self.running_stages.add(stage)
        stage.make_new_attempt(len(parts))
        stage.latest_info.resource_profile_id = rp_id
        stage.latest_info.submission_time = self.clock.time()
        self.bus.post(StageSubmitted(stage.latest_info, properties))
        try:
            if isinstance(stage, ResultStage):
                blob = self.serialize_stage("result", stage.rdd, stage.func)
            else:
                blob = self.serialize_stage("map", stage.rdd, self.map_writer(stage.shuffle_dep))
            meta = pickle.dumps(self._stage_meta(stage.rdd), protocol=5)
        except Exception as e:
            self.abort_stage(stage, f"Task not serializable: {e}", e)
            self.running_stages.discard(stage)
            return
        attempt = stage.latest_info.attempt_id
        tasks = []
        rdd = stage.rdd
        try:
            locate = self._preferred_locations if self._may_prefer_locations(rdd) else None
            all_parts = rdd.partitions()
            if isinstance(stage, ShuffleMapStage):
                stage.pending_partitions = set(parts)
                for p in parts:
                    tasks.append(Task(stage.id, attempt, all_parts[p], p, False, job_id=job_id,
                                      locations=locate(rdd, p) if locate else []))
            else:
                for out_id in parts:
                    p = stage.partitions[out_id]
                    tasks.append(Task(stage.id, attempt, all_parts[p], p, True, out_id, job_id,
                                      locate(rdd, p) if locate else []))
        except Exception as e:      # Spark's "Task creation failed": the job fails, no hang
            self.abort_stage(stage, f"Task creation failed: {type(e).__name__}: {e}", e)
            self.running_stages.discard(stage)
            return
        if tasks:
            self.task_scheduler.submit_tasks(TaskSet(tasks, stage.id, attempt, job_id,
                                                     properties, blob, meta, stage.is_barrier,
                                                     rp_id))
        else:
            self.mark_stage_finished(stage)
            self.submit_waiting_child_stages(stage)

    def submit_waiting_child_stages(self, parent: Stage) -> None:
        children = [s for s in self.waiting_stages if parent in s.parents]
        for s in sorted(children, key=lambda s: s.first_job_id):
            self.waiting_stages.discard(s)
            self.submit_stage(s)

    def mark_stage_finished(self, stage: Stage, error: str | None = None,
                            will_retry: bool = False) -> None:
        info = stage.latest_info
        info.completion_time = self.clock.time()
        if error is None:
            stage.failed_attempt_ids.clear()
        else:
            info.failure_reason = error
        self.bus.post(StageCompleted(info))
        self.running_stages.discard(stage)

    def handle_task_completion(self, task: Task, reason: Any, result: Any,
                               accum_updates: dict, metrics: dict, task_info: Any) -> None:
        stage = self.stage_id_to_stage.get(task.stage_id)
        self.bus.post(TaskEnd(task.stage_id, task.stage_attempt, task.type_name, reason,
                                task_info, metrics))
        if stage is None:
            return
        if isinstance(reason, Success):
            job = None
            if isinstance(stage, ResultStage):
                job = stage.active_job
                if job is None or job.finished[task.output_id]:
                    return      # as Spark: a result task's accumulator updates count once
            if accum_updates:
                from ember.accumulators import merge_updates
                merge_updates(accum_updates, task.partition_id)
            if job is not None:
                job.finished[task.output_id] = True
                job.num_finished += 1
                if job.num_finished == job.num_partitions:
                    self.mark_stage_finished(stage)
                    if job.num_partitions == len(stage.rdd.partitions()):
                        self._release_held(stage.rdd)
                    self.cleanup_state_for_job(job)
                    self.bus.post(JobEnd(job.job_id, self.clock.time(), True))
                try:
                    job.listener.task_succeeded(task.output_id, result)
                except Exception as e:
                    job.listener.job_failed(e)
            else:
                assert isinstance(result, MapStatus)
                if stage.is_barrier and (stage not in self.running_stages or
                                         stage.latest_info.attempt_id != task.stage_attempt):
                    return      # a task of a failed barrier attempt: the stage reruns whole
                self.tracker.register_map_output(stage.shuffle_dep.shuffle_id,
                                                 task.partition_id, result)
                stage.pending_partitions.discard(task.partition_id)
                if stage in self.running_stages and not stage.pending_partitions:
                    self.mark_stage_finished(stage)
                    if not stage.is_available:
                        self.submit_stage(stage)
                    else:
                        self.submit_waiting_child_stages(stage)
                        self._release_held(stage.rdd)
        elif isinstance(reason, FetchFailed):
            map_stage = self.shuffle_id_to_map_stage.get(reason.shuffle_id)
            if stage.latest_info.attempt_id != task.stage_attempt:
                log.info("Ignoring fetch failure from %s as it's from %s attempt %d and there "
                         "is a more recent attempt for that stage (attempt %d) running",
                         task, stage, task.stage_attempt, stage.latest_info.attempt_id)
                return
            stage.failed_attempt_ids.add(task.stage_attempt)
            should_abort = len(stage.failed_attempt_ids) >= self.max_consecutive_attempts
            if stage in self.running_stages:
                log.info("Marking %s (%s) as failed due to a fetch failure from %s (%s)",
                         stage, stage.name, map_stage, getattr(map_stage, "name", ""))
                self.mark_stage_finished(stage, reason.message, not should_abort)
                self.task_scheduler.zombify(stage.id, task.stage_attempt)
            if map_stage is not None:
                # Like Spark without an external shuffle service: whatever else that
                # executor wrote for this shuffle is suspect too, so recompute it in one go.
                for i, st in enumerate(self.tracker.statuses(reason.shuffle_id)):
                    if i == reason.map_index or reason.map_index < 0 or (
                            st is not None and st.executor_id == reason.executor_id):
                        self.tracker.unregister_map_output(reason.shuffle_id, i)
            if reason.executor_id and not self.task_scheduler.is_executor_alive(reason.executor_id):
                self.tracker.remove_outputs_on_executor(reason.executor_id)
            if stage.is_barrier:
                self._fail_barrier_stage_outputs(stage, reason.to_error_string())
            if should_abort:
                self.abort_stage(
                    stage, f"{stage} ({stage.name}) has failed the maximum allowable number of "
                    f"times: {self.max_consecutive_attempts}. Most recent failure reason:\n"
                    f"{reason.to_error_string()}", None)
            else:
                if not self.failed_stages:
                    log.info("Resubmitting %s (%s) and %s (%s) due to fetch failure", map_stage,
                             getattr(map_stage, "name", ""), stage, stage.name)
                    self.timer(RESUBMIT_TIMEOUT, self.handle_resubmit_failed_stages)
                self.failed_stages.add(stage)
                if map_stage is not None:
                    self.failed_stages.add(map_stage)

        elif stage.is_barrier:
            self._handle_barrier_task_failure(stage, task, reason)

    def _handle_barrier_task_failure(self, stage: Stage, task: Task, reason: Any) -> None:
        """Any failed task of a barrier stage fails its whole attempt: the sibling tasks are
        killed and the stage is retried as a whole (a ResultStage cannot be: it aborts)."""
        if stage.latest_info.attempt_id != task.stage_attempt or stage not in self.running_stages:
            log.info("Ignoring task failure from %s as it's from %s attempt %d and there is a "
                     "more recent attempt for that stage (attempt %d) running", task.type_name,
                     stage, task.stage_attempt, stage.latest_info.attempt_id)
            return
        log.info("Marking %s (%s) as failed due to a barrier task failed.", stage, stage.name)
        task_name = f"{task.type_name}({task.stage_id}, {task.partition_id})"
        message = (f"Stage failed because barrier task {task_name} finished unsuccessfully.\n"
                   f"{reason.to_error_string()}")
        self.task_scheduler.cancel_tasks(
            stage.id, f"Task {task_name} from barrier stage {stage} ({stage.name}) failed.")
        self.mark_stage_finished(stage, message)
        stage.failed_attempt_ids.add(task.stage_attempt)
        if len(stage.failed_attempt_ids) >= self.max_consecutive_attempts:
            self.abort_stage(stage, f"{stage} ({stage.name}) has failed the maximum allowable "
                             f"number of times: {self.max_consecutive_attempts}. Most recent "
                             f"failure reason: {message}", None)
            return
        if self._fail_barrier_stage_outputs(stage, message):
            if not self.failed_stages:
                log.info("Resubmitting %s (%s) due to barrier stage failure.", stage, stage.name)
                self.timer(RESUBMIT_TIMEOUT, self.handle_resubmit_failed_stages)
            self.failed_stages.add(stage)

    def _fail_barrier_stage_outputs(self, stage: Stage, message: str) -> bool:
        """A failed barrier attempt leaves nothing usable: every map output of the stage is
        dropped so the retry runs all tasks together; a ResultStage may have committed output
        already, so its job is aborted. True if the stage may be retried."""
        if isinstance(stage, ShuffleMapStage):
            for i in range(stage.num_tasks):
                self.tracker.unregister_map_output(stage.shuffle_dep.shuffle_id, i)
            return True
        self.abort_stage(stage, "Could not recover from a failed barrier ResultStage. Most "
                         f"recent failure reason: {message}", None)
        return False

    def handle_resubmit_failed_stages(self) -> None:
        if not self.failed_stages:
            return
        log.info("Resubmitting failed stages")
        failed = sorted(self.failed_stages, key=lambda s: s.first_job_id)
        self.failed_stages.clear()
        for s in failed:
            self.submit_stage(s)

    def handle_task_set_failed(self, task_set: TaskSet, reason: str,
                               exception: BaseException | None) -> None:
        stage = self.stage_id_to_stage.get(task_set.stage_id)
        if stage is not None:
            self.abort_stage(stage, reason, exception)

    def handle_executor_lost(self, executor_id: str, worker_host: str | None = None) -> None:
        """Spark's fileLost rule: with the external shuffle service an executor's map
        output outlives it (the service serves it) unless its worker went too, which takes
        every output that worker's service served."""
        if self.shuffle_service_enabled:
            if worker_host is None:
                log.info("Executor %s lost; its shuffle files stay with the external shuffle "
                         "service", executor_id)
                return
            n = self.tracker.remove_outputs_served_with(executor_id)
            if n:
                log.info("Shuffle files lost with the worker on %s (%d map outputs)",
                         worker_host, n)
            return
        n = self.tracker.remove_outputs_on_executor(executor_id)
        if n:
            log.info("Shuffle files lost for executor: %s (%d map outputs)", executor_id, n)

    def handle_job_cancellation(self, job_id: int, reason: str) -> None:
        job = self.job_id_to_active_job.get(job_id)
        waiting = self.barrier_jobs_waiting_for_slots.pop(job_id, None)
        if waiting is not None:         # a barrier job between two slot checks
            self.barrier_job_id_to_num_tasks_check_failures.pop(job_id, None)
            waiting[0].job_failed(JobCancelledException(
                f"Job {job_id} cancelled{' ' + reason if reason else ''}"))
        if job is None:
            return
        suffix = f" {reason}" if reason else ""
        self.fail_job_and_independent_stages(
            job, JobCancelledException(f"Job {job_id} cancelled{suffix}"))

    def handle_job_group_cancelled(self, group_id: str, cancel_future_jobs: bool) -> None:
        if cancel_future_jobs:
            self.cancelled_job_groups.add(group_id)
        for job_id in self._jobs_where(lambda p: p.get("spark.jobGroup.id") == group_id):
            self.handle_job_cancellation(job_id, f"part of cancelled job group {group_id}")

    def handle_job_tag_cancelled(self, tag: str) -> None:
        for job_id in self._jobs_where(
                lambda p: tag in (p.get("spark.job.tags") or "").split(",")):
            self.handle_job_cancellation(job_id, f"part of cancelled job tags {tag}")

    def _jobs_where(self, matches: Callable[[dict], bool]) -> list[int]:
        """Active jobs, and barrier jobs waiting for slots, whose properties match."""
        return [j.job_id for j in self.active_jobs if matches(j.properties)] + \
            [jid for jid, (_, props) in self.barrier_jobs_waiting_for_slots.items()
             if matches(props)]

    def handle_all_jobs_cancelled(self) -> None:
        for job_id in self._jobs_where(lambda p: True):
            self.handle_job_cancellation(job_id, "as part of cancellation of all jobs")

    def handle_shutdown(self) -> None:
        for job_id, (waiting, _) in list(self.barrier_jobs_waiting_for_slots.items()):
            waiting.job_failed(SparkException(
                f"Job {job_id} cancelled because SparkContext was shut down"))
        self.barrier_jobs_waiting_for_slots.clear()
        for job in list(self.active_jobs):
            self.fail_job_and_independent_stages(job, SparkException(
                f"Job {job.job_id} cancelled because SparkContext was shut down"))

    # --- failure plumbing ---------------------------------------------------------------
    @staticmethod
    def _stage_depends_on(stage: Stage, target: Stage) -> bool:
        seen: set[int] = set()
        stack = [stage]
        while stack:
            s = stack.pop()
            if s is target:
                return True
            if s.id not in seen:
                seen.add(s.id)
                stack.extend(s.parents)
        return False

    def abort_stage(self, failed: Stage, reason: str, exception: BaseException | None) -> None:
        if failed.id not in self.stage_id_to_stage:
            return
        jobs = [j for j in self.active_jobs if self._stage_depends_on(j.final_stage, failed)]
        failed.latest_info.completion_time = self.clock.time()
        for job in jobs:
            msg = f"Job aborted due to stage failure: {reason}"
            if isinstance(exception, PicklingError):
                err: BaseException = exception     # PySpark raises it as is
            elif isinstance(exception, ExceptionFailure) and \
                    exception.exc_type != "NotSerializableResult":
                err = make_python_exception(
                    msg, exception.exc_type, exception.message, exception.traceback)
            else:
                err = SparkException(msg)
                if exception is not None and not isinstance(exception, ExceptionFailure):
                    err.__cause__ = exception
            self.fail_job_and_independent_stages(job, err)
        if not jobs:
            log.info("Ignoring failure of %s because all jobs depending on it are done", failed)

    def fail_job_and_independent_stages(self, job: ActiveJob, error: BaseException) -> None:
        for sid in sorted(self.job_id_to_stage_ids.get(job.job_id, ())):
            stage = self.stage_id_to_stage.get(sid)
            if stage is None:
                continue
            if stage.job_ids == {job.job_id} and stage in self.running_stages:
                self.task_scheduler.cancel_tasks(sid, f"Stage {sid} was cancelled")
                self.mark_stage_finished(stage, str(error))
        self.cleanup_state_for_job(job)
        self.bus.post(JobEnd(job.job_id, self.clock.time(), False, str(error)))
        job.listener.job_failed(error)

    def cleanup_state_for_job(self, job: ActiveJob) -> None:
        for sid in self.job_id_to_stage_ids.pop(job.job_id, set()):
            stage = self.stage_id_to_stage.get(sid)
            if stage is None:
                continue
            stage.job_ids.discard(job.job_id)
            if not stage.job_ids:
                self.running_stages.discard(stage)
                self.waiting_stages.discard(stage)
                self.failed_stages.discard(stage)
                del self.stage_id_to_stage[sid]
                self.task_scheduler.stage_removed(sid)
                if isinstance(stage, ShuffleMapStage):
                    sdep = stage.shuffle_dep.shuffle_id
                    if self.shuffle_id_to_map_stage.get(sdep) is stage:
                        del self.shuffle_id_to_map_stage[sdep]
        self.job_id_to_active_job.pop(job.job_id, None)
        self.active_jobs.discard(job)
        if isinstance(job.final_stage, ResultStage):
            job.final_stage.active_job = None
