"""AppStatusStore: an application's state for the UI and REST API, built from events only.

Spark's AppStatusListener + AppStatusStore in one object. It is an asynchronous bus
listener (never on the scheduler's thread) and it reads nothing but the events, so the
history server builds the very same store by replaying an event log into a fresh one. One
lock: the bus thread writes, UI threads read through the query methods, which return plain
dicts shaped like Spark's REST API (`/api/v1`) objects, times as epoch milliseconds.

Task events are most of the traffic (two per task) and cost the driver's GIL, so a task
updates only its stage attempt: per-executor sums within the stage (counts, time, metrics).
Stage, job, executor and application totals are added up from those when read, which
the UI does at most once a second; a finished job keeps the counts it ended with, and a
stage dropped by retention leaves its per-executor sums behind, so neither moves later.

Memory is bounded as in Spark: finished jobs and stages beyond spark.ui.retainedJobs /
retainedStages, tasks of a stage beyond retainedTasks and removed executors beyond
retainedDeadExecutors are dropped oldest first, a tenth of the limit at a time (Spark's
ElementTrackingStore cleanup), so trimming is rare and cheap.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, Iterable, Mapping, NamedTuple

from ember import config
from ember.version import SPARK_VERSION
from ember.scheduler import listener as sl
from ember.scheduler.task import TaskKilled

log = logging.getLogger(__name__)

# Stage and job states (Spark's StageStatus / JobExecutionStatus) and task states.
ACTIVE, COMPLETE, FAILED, PENDING, SKIPPED = "ACTIVE", "COMPLETE", "FAILED", "PENDING", "SKIPPED"
RUNNING, SUCCEEDED = "RUNNING", "SUCCEEDED"
SUCCESS, KILLED = "SUCCESS", "KILLED"


def ms(t: float | None) -> int | None:
    """Event time (epoch seconds) -> epoch ms; round() so replayed ms/1000 round-trips."""
    return None if t is None else round(t * 1000)


def storage_level_description(level: Any) -> str:
    """Spark's StorageLevel.description: 'Memory Deserialized 1x Replicated', ..."""
    if level is None or not (level.useDisk or level.useMemory or level.useOffHeap):
        return "None"
    words = []
    if level.useDisk:
        words.append("Disk")
    if level.useMemory:
        words.append("Memory (off heap)" if level.useOffHeap else "Memory")
    words.append("Deserialized" if level.deserialized else "Serialized")
    words.append(f"{level.replication}x Replicated")
    return " ".join(words)


def _to_remove(size: int, limit: int) -> int:
    """How many to drop once over the limit (Spark's calculateNumberToRemove)."""
    return max(limit // 10, size - limit) if size > limit else 0


def _add(totals: dict, more: Mapping) -> None:
    for k, v in more.items():
        totals[k] = totals.get(k, 0) + v


class _Task(NamedTuple):
    """One task attempt, as read. Stored as a plain tuple of the same fields on purpose:
    the garbage collector stops tracking exact tuples of plain values (not NamedTuples), so
    100,000 retained tasks cost no collector time; a tracked object per task made every
    collection of a 10,000-task job slower."""
    task_id: int
    index: int
    attempt: int
    partition_id: int
    launch_time: int
    finish_time: int
    executor_id: str
    host: str
    status: str
    locality: str
    speculative: bool
    error: str


def _task(info: Any, status: str = RUNNING, error: str = "") -> tuple:
    """The stored form of _Task."""
    return (info.task_id, info.index, info.attempt_number, info.partition_id,
                 round(info.launch_time * 1000),
                 round(info.finish_time * 1000) if status != RUNNING else 0,
                 info.executor_id, info.host, status, info.locality, info.speculative,
                 error)


_LAUNCH, _FINISH, _STATUS, _LOCALITY = (
    _Task._fields.index(f) for f in ("launch_time", "finish_time", "status", "locality"))


class _Sums:
    """Task counts, time and metrics of one executor within one stage attempt (Spark's
    ExecutorStageSummary); summed further to stage, job, executor and app totals."""
    __slots__ = ("active", "succeeded", "failed", "killed", "task_time", "metrics")

    def __init__(self) -> None:
        self.active = self.succeeded = self.failed = self.killed = self.task_time = 0
        self.metrics: dict[str, int] = {}

    def merge(self, other: "_Sums") -> None:
        self.active += other.active
        self.succeeded += other.succeeded
        self.failed += other.failed
        self.killed += other.killed
        self.task_time += other.task_time
        _add(self.metrics, other.metrics)

    def read_bytes(self) -> int:
        return self.metrics.get("shuffleLocalBytesRead", 0) + \
            self.metrics.get("shuffleRemoteBytesRead", 0)


class _Stage:
    __slots__ = ("stage_id", "attempt_id", "name", "num_tasks", "details", "status",
                 "submission_time", "first_launch", "completion_time", "failure_reason",
                 "description", "pool", "rdd_ids", "job_ids", "indices", "killed_summary",
                 "tasks", "task_metrics", "executors", "resource_profile_id",
                 "excluded_executors")

    def __init__(self, info: sl.StageInfo, props: Mapping[str, str]) -> None:
        self.stage_id = info.stage_id
        self.resource_profile_id = info.resource_profile_id
        self.excluded_executors: set[str] = set()
        self.attempt_id = info.attempt_id
        self.name = info.name
        self.num_tasks = info.num_tasks
        self.details = info.details
        self.status = PENDING
        self.submission_time: int | None = None
        self.first_launch: int | None = None
        self.completion_time: int | None = None
        self.failure_reason: str | None = None
        self.description = props.get("spark.job.description")
        self.pool = props.get("spark.scheduler.pool") or "default"
        self.rdd_ids = [r.rdd_id for r in info.rdd_infos]
        self.job_ids: set[int] = set()
        self.indices: set[int] = set()
        self.killed_summary: dict[str, int] = {}
        self.tasks: dict[int, tuple] = {}           # task id -> a _Task's fields
        # task id -> the event's metrics dict: dicts of plain values are not tracked by the
        # garbage collector, but a tuple holding one would be, forever
        self.task_metrics: dict[int, Mapping[str, int]] = {}
        self.executors: dict[str, _Sums] = {}

    def sums(self) -> _Sums:
        total = _Sums()
        for s in self.executors.values():
            total.merge(s)
        return total


class _Job:
    __slots__ = ("job_id", "name", "description", "submission_time", "completion_time",
                 "stage_ids", "group", "tags", "status", "num_tasks", "active_stages",
                 "completed_stages", "skipped_stages", "skipped_tasks", "failed_stages",
                 "not_run", "dropped", "dropped_indices")

    def __init__(self, e: sl.JobStart) -> None:
        infos = sorted(e.stage_infos, key=lambda s: s.stage_id)
        props = e.properties
        self.job_id = e.job_id
        self.name = infos[-1].name if infos else ""
        self.description = props.get("spark.job.description")
        self.submission_time = ms(e.time)
        self.completion_time: int | None = None
        self.stage_ids = [s.stage_id for s in infos]
        self.group = props.get("spark.jobGroup.id")
        self.tags = sorted(t for t in (props.get("spark.job.tags") or "").split(",") if t)
        self.status = RUNNING
        # Spark counts only the tasks of stages not computed yet by an earlier job
        self.num_tasks = sum(s.num_tasks for s in infos if s.completion_time is None)
        self.active_stages: set[int] = set()
        self.completed_stages: set[int] = set()
        self.skipped_stages = self.skipped_tasks = self.failed_stages = 0
        self.not_run = {s.stage_id: s.num_tasks for s in infos}   # skipped unless submitted
        self.dropped = _Sums()          # tasks of its stage attempts dropped by retention
        self.dropped_indices = 0


class _Executor:
    __slots__ = ("executor_id", "host", "cores", "add_time", "remove_time", "remove_reason",
                 "log_urls", "resources", "resource_profile_id", "is_excluded",
                 "excluded_in_stages")

    def __init__(self, executor_id: str, host: str, cores: int, add_time: int | None,
                 log_urls: Mapping[str, str]) -> None:
        self.executor_id = executor_id
        self.host = host
        self.cores = cores
        self.add_time = add_time
        self.remove_time: int | None = None
        self.remove_reason: str | None = None
        self.log_urls = dict(log_urls)
        self.resources: dict[str, list[str]] = {}
        self.resource_profile_id = 0
        self.is_excluded = False
        self.excluded_in_stages: set[int] = set()


class _RDD:
    __slots__ = ("rdd_id", "name", "num_partitions", "level", "blocks")

    def __init__(self, info: sl.RDDInfo) -> None:
        self.rdd_id = info.rdd_id
        self.name = info.name
        self.num_partitions = info.num_partitions
        self.level = storage_level_description(info.storage_level)
        # block name -> executor id -> (memory size, disk size, host)
        self.blocks: dict[str, dict[str, tuple[int, int, str]]] = {}



def removal_cause(reason: str) -> str:
    """A removal reason's kind, for metrics: decommission, idle (dynamic allocation),
    killed (by the driver), or lost."""
    if reason.startswith("Executor decommission"):
        return "decommission"
    if "(dynamic allocation)" in reason:
        return "idle"
    if reason.startswith("Executor killed by driver"):
        return "killed"
    return "lost"

class AppStatusStore:
    """See the module doc. Feed it with `on_event` (replay) or `on_events` (the bus)."""

    def __init__(self, conf: Any = None) -> None:
        conf = conf if conf is not None else {}
        self.retained_jobs: int = config.read(conf, "spark.ui.retainedJobs")
        self.retained_stages: int = config.read(conf, "spark.ui.retainedStages")
        self.retained_tasks: int = config.read(conf, "spark.ui.retainedTasks")
        self.retained_dead_executors: int = config.read(conf, "spark.ui.retainedDeadExecutors")
        self.lock = threading.RLock()
        self.app: dict[str, Any] = {"id": "", "name": "", "user": "", "attempt_id": None,
                                    "start": None, "end": None, "version": SPARK_VERSION}
        self.last_updated = int(time.time() * 1000)
        self.environment: dict[str, list[tuple[str, str]]] = {}
        self.resource_profiles: dict[int, dict[str, Any]] = {}   # id -> ResourceProfileInfo
        self._jobs: dict[int, _Job] = {}
        self._stages: dict[tuple[int, int], _Stage] = {}
        self._stage_jobs: dict[int, set[int]] = {}       # stage id -> running jobs with it
        self._executors: dict[str, _Executor] = {}
        self._dropped: dict[str, _Sums] = {}        # per-executor sums of trimmed stages
        self._rdds: dict[int, _RDD] = {}
        self._ending: set[int] = set()      # tasks whose TaskEnd is in the current batch
        self.counters = dict.fromkeys(("jobs_succeeded", "jobs_failed", "stages_completed",
                                       "stages_failed", "executors_added",
                                       "speculative_tasks_submitted", "executors_excluded",
                                       "nodes_excluded"), 0)
        self.executors_removed: dict[str, int] = {}   # cause -> count (removal_cause)
        self._handlers: dict[type, Callable[[Any], None]] = {
            sl.TaskStart: self._task_start, sl.TaskEnd: self._task_end,
            sl.JobStart: self._job_start, sl.JobEnd: self._job_end,
            sl.StageSubmitted: self._stage_submitted, sl.StageCompleted: self._stage_completed,
            sl.ExecutorAdded: self._executor_added, sl.ExecutorRemoved: self._executor_removed,
            sl.ApplicationStart: self._app_start, sl.ApplicationEnd: self._app_end,
            sl.EnvironmentUpdate: self._environment, sl.BlockUpdated: self._block_updated,
            sl.UnpersistRDD: self._unpersist, sl.LogStart: self._log_start,
            sl.ResourceProfileAdded: self._resource_profile_added,
            sl.SpeculativeTaskSubmitted: self._speculative_submitted,
            sl.ExecutorExcluded: self._exclusion, sl.ExecutorUnexcluded: self._exclusion,
            sl.NodeExcluded: self._exclusion, sl.NodeUnexcluded: self._exclusion,
            sl.ExecutorExcludedForStage: self._excluded_for_stage,
            sl.NodeExcludedForStage: self._excluded_for_stage}

    # --- writing (bus thread or replay) -------------------------------------------------
    def on_event(self, e: Any) -> None:
        self.on_events((e,))

    def on_events(self, events: Iterable[Any]) -> None:
        """Apply events in order, under the lock once (the bus delivers batches). A task
        that starts and ends within the batch is recorded once, at its end."""
        handlers = self._handlers
        events = events if isinstance(events, (list, tuple)) else list(events)
        with self.lock:
            self._ending = {e.task_info.task_id for e in events if type(e) is sl.TaskEnd}
            for e in events:
                handler = handlers.get(type(e))
                if handler is not None:
                    try:
                        handler(e)
                    except Exception:
                        log.exception("Cannot apply %r to the UI status store", e)

    def _app_start(self, e: sl.ApplicationStart) -> None:
        self.app.update(id=e.app_id, name=e.app_name, user=e.user, attempt_id=e.attempt_id,
                        start=ms(e.time))
        self.last_updated = ms(e.time) or self.last_updated

    def _app_end(self, e: sl.ApplicationEnd) -> None:
        self.app["end"] = self.last_updated = ms(e.time)

    def _log_start(self, e: sl.LogStart) -> None:
        self.app["version"] = e.spark_version

    def _resource_profile_added(self, e: sl.ResourceProfileAdded) -> None:
        """Spark's ResourceProfileInfo, as the environment API lists it."""
        self.resource_profiles[e.resource_profile_id] = {
            "id": e.resource_profile_id,
            "executorResources": {n: {"resourceName": n, "amount": a, "discoveryScript": s,
                                      "vendor": v}
                                  for n, (a, s, v) in e.executor_resources.items()},
            "taskResources": {n: {"resourceName": n, "amount": a}
                              for n, a in e.task_resources.items()}}

    def _environment(self, e: sl.EnvironmentUpdate) -> None:
        self.environment = {k: list(v) for k, v in e.details.items()}

    def _job_start(self, e: sl.JobStart) -> None:
        self._jobs[e.job_id] = _Job(e)
        for info in e.stage_infos:
            self._stage_jobs.setdefault(info.stage_id, set()).add(e.job_id)
            key = (info.stage_id, info.attempt_id)
            st = self._stages.get(key)
            if st is None:
                st = self._stages[key] = _Stage(info, e.properties)
            if st.status in (PENDING, ACTIVE):      # a finished attempt is skipped here
                st.job_ids.add(e.job_id)

    def _job_end(self, e: sl.JobEnd) -> None:
        job = self._jobs.get(e.job_id)
        if job is None:
            return
        job.status = SUCCEEDED if e.succeeded else FAILED
        job.completion_time = ms(e.time)
        self.counters["jobs_succeeded" if e.succeeded else "jobs_failed"] += 1
        for sid, num_tasks in job.not_run.items():
            job.skipped_stages += 1
            job.skipped_tasks += num_tasks
            for (s, _a), st in self._stages.items():
                if s == sid and st.status == PENDING:
                    st.status = SKIPPED
        job.not_run = {}
        job.active_stages.clear()
        for sid in job.stage_ids:
            jobs = self._stage_jobs.get(sid)
            if jobs is not None:
                jobs.discard(e.job_id)
                if not jobs:
                    del self._stage_jobs[sid]
        self._trim_jobs()

    def _stage_submitted(self, e: sl.StageSubmitted) -> None:
        info = e.stage_info
        key = (info.stage_id, info.attempt_id)
        st = self._stages.get(key)
        if st is None or st.status != PENDING:
            st = self._stages[key] = _Stage(info, e.properties)
        st.name, st.num_tasks, st.details = info.name, info.num_tasks, info.details
        st.rdd_ids = [r.rdd_id for r in info.rdd_infos]
        st.resource_profile_id = info.resource_profile_id
        st.status = ACTIVE
        st.submission_time = ms(info.submission_time)
        if e.properties:
            st.description = e.properties.get("spark.job.description")
            st.pool = e.properties.get("spark.scheduler.pool") or "default"
        st.job_ids |= self._stage_jobs.get(info.stage_id, set())
        for jid in st.job_ids:
            job = self._jobs.get(jid)
            if job is not None and job.status == RUNNING:
                job.not_run.pop(info.stage_id, None)
                job.active_stages.add(info.stage_id)
                job.completed_stages.discard(info.stage_id)
        for r in info.rdd_infos:
            level = r.storage_level
            if level is not None and (level.useMemory or level.useDisk):
                rdd = self._rdds.get(r.rdd_id)
                if rdd is None:
                    self._rdds[r.rdd_id] = _RDD(r)
                else:
                    rdd.name, rdd.num_partitions = r.name, r.num_partitions

    def _stage_completed(self, e: sl.StageCompleted) -> None:
        info = e.stage_info
        st = self._stages.get((info.stage_id, info.attempt_id))
        if st is None:
            return
        failed = info.failure_reason is not None
        st.status = FAILED if failed else COMPLETE
        st.failure_reason = info.failure_reason
        st.completion_time = ms(info.completion_time)
        if st.submission_time is None:
            st.submission_time = ms(info.submission_time)
        self.counters["stages_failed" if failed else "stages_completed"] += 1
        for ex in self._executors.values():
            ex.excluded_in_stages.discard(info.stage_id)
        for jid in st.job_ids:
            job = self._jobs.get(jid)
            if job is None:
                continue
            job.active_stages.discard(info.stage_id)
            job.not_run.pop(info.stage_id, None)
            if failed:
                job.failed_stages += 1
            else:
                job.completed_stages.add(info.stage_id)
        self._trim_stages()

    def _sums(self, st: _Stage, executor_id: str, host: str) -> _Sums:
        sums = st.executors.get(executor_id)
        if sums is None:
            sums = st.executors[executor_id] = _Sums()
            if executor_id not in self._executors:      # tasks before its registration
                self._executors[executor_id] = _Executor(executor_id, host, 0, None, {})
        return sums

    def _task_start(self, e: sl.TaskStart) -> None:
        st = self._stages.get((e.stage_id, e.stage_attempt))
        if st is None:
            return
        info = e.task_info
        if st.first_launch is None:
            st.first_launch = ms(info.launch_time)
        if info.task_id not in self._ending:
            st.tasks[info.task_id] = _task(info)
            self._sums(st, info.executor_id, info.host).active += 1

    def _task_end(self, e: sl.TaskEnd) -> None:
        st = self._stages.get((e.stage_id, e.stage_attempt))
        if st is None:
            return
        info = e.task_info
        sums = self._sums(st, info.executor_id, info.host)
        before = st.tasks.get(info.task_id)
        if before is not None and before[_STATUS] == RUNNING:
            sums.active -= 1
        m = e.metrics or {}
        status = info.status
        # Spark's AppStatusListener: a killed task's message is the kill reason itself
        error = ("" if status == SUCCESS else e.reason.reason
                 if isinstance(e.reason, TaskKilled) else e.reason.to_error_string())
        task = st.tasks[info.task_id] = _task(info, status, error)
        st.task_metrics[info.task_id] = m
        sums.task_time += task[_FINISH] - task[_LAUNCH]
        _add(sums.metrics, m)
        if status == SUCCESS:
            sums.succeeded += 1
            st.indices.add(info.index)
        elif status == KILLED:
            sums.killed += 1
            why = getattr(e.reason, "reason", "killed")
            st.killed_summary[why] = st.killed_summary.get(why, 0) + 1
        else:
            sums.failed += 1
        if len(st.tasks) > self.retained_tasks:
            self._trim_tasks(st)

    def _executor_added(self, e: sl.ExecutorAdded) -> None:
        self.counters["executors_added"] += 1
        ex = self._executors.get(e.executor_id)
        if ex is None:
            self._executors[e.executor_id] = _Executor(e.executor_id, e.host, e.cores,
                                                       ms(e.time), e.log_urls)
        else:       # tasks were seen before the registration event
            ex.host, ex.cores, ex.add_time = e.host, e.cores, ms(e.time)
            ex.log_urls = dict(e.log_urls)
        ex = self._executors[e.executor_id]
        ex.resources = dict(e.resources)
        ex.resource_profile_id = e.resource_profile_id

    def _speculative_submitted(self, e: sl.SpeculativeTaskSubmitted) -> None:
        self.counters["speculative_tasks_submitted"] += 1

    def _executors_of(self, e: Any) -> list[_Executor]:
        """The live executors an exclusion event names: one, or all on its host."""
        eid = getattr(e, "executor_id", None)
        if eid is not None:
            ex = self._executors.get(eid)
            return [ex] if ex is not None else []
        return [x for x in self._executors.values()
                if x.remove_time is None and x.host.split(":")[0] == e.host_id]

    def _exclusion(self, e: Any) -> None:
        """Spark's AppStatusListener: an excluded executor, or every executor of an excluded
        node, shows isExcluded until it is unexcluded."""
        excluded = type(e) in (sl.ExecutorExcluded, sl.NodeExcluded)
        if type(e) is sl.ExecutorExcluded:
            self.counters["executors_excluded"] += 1
        elif type(e) is sl.NodeExcluded:
            self.counters["nodes_excluded"] += 1
        for ex in self._executors_of(e):
            ex.is_excluded = excluded

    def _excluded_for_stage(self, e: Any) -> None:
        st = self._stages.get((e.stage_id, e.stage_attempt_id))
        for ex in self._executors_of(e):
            ex.excluded_in_stages.add(e.stage_id)
            if st is not None:
                st.excluded_executors.add(ex.executor_id)

    def _executor_removed(self, e: sl.ExecutorRemoved) -> None:
        ex = self._executors.get(e.executor_id)
        if ex is None:
            return
        ex.remove_time, ex.remove_reason = ms(e.time), e.reason
        cause = removal_cause(e.reason)
        self.executors_removed[cause] = self.executors_removed.get(cause, 0) + 1
        for rdd in self._rdds.values():
            for name in list(rdd.blocks):
                locs = rdd.blocks[name]
                locs.pop(e.executor_id, None)
                if not locs:
                    del rdd.blocks[name]
        dead = [x for x in self._executors.values() if x.remove_time is not None]
        for x in sorted(dead, key=lambda x: x.remove_time or 0)[
                :_to_remove(len(dead), self.retained_dead_executors)]:
            del self._executors[x.executor_id]

    def _block_updated(self, e: sl.BlockUpdated) -> None:
        parts = e.block_name.split("_")
        if len(parts) != 3 or parts[0] != "rdd":
            return
        rdd = self._rdds.get(int(parts[1]))
        if rdd is None:             # not (or no longer) persisted, as Spark ignores it
            return
        level = e.storage_level
        if level is None or not (level.useMemory or level.useDisk) or \
                not (e.mem_size or e.disk_size):
            locs = rdd.blocks.get(e.block_name)
            if locs is not None:
                locs.pop(e.executor_id, None)
                if not locs:
                    del rdd.blocks[e.block_name]
        else:
            rdd.blocks.setdefault(e.block_name, {})[e.executor_id] = \
                (e.mem_size, e.disk_size, e.host)

    def _unpersist(self, e: sl.UnpersistRDD) -> None:
        self._rdds.pop(e.rdd_id, None)

    def _trim_jobs(self) -> None:
        n = _to_remove(len(self._jobs), self.retained_jobs)
        for jid in [j for j, job in self._jobs.items() if job.status != RUNNING][:n]:
            del self._jobs[jid]

    def _trim_stages(self) -> None:
        """Drop the oldest finished stages no running job still counts on; their
        per-executor sums stay in the executors' totals."""
        n = _to_remove(len(self._stages), self.retained_stages)
        if not n:
            return
        done = [k for k, st in self._stages.items()
                if st.status not in (ACTIVE, PENDING) and k[0] not in self._stage_jobs]
        for key in done[:n]:
            st = self._stages.pop(key)
            for eid, sums in st.executors.items():
                self._dropped.setdefault(eid, _Sums()).merge(sums)
            for job in filter(None, map(self._jobs.get, st.job_ids)):
                job.dropped.merge(st.sums())
                job.dropped_indices += len(st.indices)

    def _trim_tasks(self, st: _Stage) -> None:
        n = _to_remove(len(st.tasks), self.retained_tasks)
        for tid in [tid for tid, t in st.tasks.items() if t[_STATUS] != RUNNING][:n]:
            del st.tasks[tid]
            st.task_metrics.pop(tid, None)

    # --- reading (UI threads) -----------------------------------------------------------
    @property
    def app_id(self) -> str:
        return self.app["id"]

    @property
    def completed(self) -> bool:
        return self.app["end"] is not None

    def application_info(self) -> dict[str, Any]:
        """Spark's ApplicationInfo with its one attempt (end -1 while running)."""
        with self.lock:
            a = dict(self.app)
            last = self.last_updated
        start = a["start"] or 0
        end = a["end"]
        done = end is not None
        attempt = {"attemptId": a["attempt_id"], "startTime": start,
                   "endTime": end if done else -1, "lastUpdated": end if done else last,
                   "duration": end - start if done else 0, "sparkUser": a["user"],
                   "completed": done, "appSparkVersion": a["version"],
                   "startTimeEpoch": start, "endTimeEpoch": end if done else -1,
                   "lastUpdatedEpoch": end if done else last}
        return {"id": a["id"], "name": a["name"], "attempts": [attempt]}

    def jobs(self, statuses: set[str] | None = None) -> list[dict[str, Any]]:
        """Spark's JobData list, newest first."""
        with self.lock:
            found = [j for j in reversed(self._jobs.values())
                     if not statuses or j.status in statuses]
            tasks = self._job_tasks({j.job_id for j in found})
            return [self._job_dict(j, tasks[j.job_id]) for j in found]

    def job(self, job_id: int) -> dict[str, Any] | None:
        with self.lock:
            j = self._jobs.get(job_id)
            return None if j is None else self._job_dict(j, self._job_tasks({job_id})[job_id])

    def _job_tasks(self, job_ids: set[int]) -> dict[int, tuple[_Sums, dict, dict]]:
        """Per job: the summed task counts, completed indices by stage and kill reasons of
        the stage attempts it ran (one pass over the stages for all jobs asked)."""
        out: dict[int, tuple[_Sums, dict, dict]] = {jid: (_Sums(), {}, {}) for jid in job_ids}
        for (sid, _a), st in self._stages.items():
            for jid in st.job_ids & job_ids:
                total, indices, killed = out[jid]
                total.merge(st.sums())
                indices.setdefault(sid, set()).update(st.indices)
                _add(killed, st.killed_summary)
        return out

    @staticmethod
    def _job_dict(j: _Job, tasks: tuple[_Sums, dict, dict]) -> dict[str, Any]:
        """Spark's JobData; task counts are those of the stage attempts the job ran (tasks
        ending after a failed job's end count too, as in Spark)."""
        total, indices, killed = tasks
        total.merge(j.dropped)
        return {"jobId": j.job_id, "name": j.name, "description": j.description,
                "submissionTime": j.submission_time, "completionTime": j.completion_time,
                "stageIds": list(j.stage_ids), "jobGroup": j.group, "jobTags": list(j.tags),
                "status": j.status, "numTasks": j.num_tasks, "numActiveTasks": total.active,
                "numCompletedTasks": total.succeeded, "numSkippedTasks": j.skipped_tasks,
                "numFailedTasks": total.failed, "numKilledTasks": total.killed,
                "numCompletedIndices": j.dropped_indices + sum(map(len, indices.values())),
                "numActiveStages": len(j.active_stages),
                "numCompletedStages": len(j.completed_stages),
                "numSkippedStages": j.skipped_stages, "numFailedStages": j.failed_stages,
                "killedTasksSummary": dict(killed)}

    def stages(self, statuses: set[str] | None = None, details: bool = False
               ) -> list[dict[str, Any]]:
        """Spark's StageData list, newest stage (and attempt) first."""
        with self.lock:
            found = [st for st in self._stages.values() if not statuses or st.status in statuses]
            found.sort(key=lambda st: (st.stage_id, st.attempt_id), reverse=True)
            return [self._stage_dict(st, details) for st in found]

    def stage_attempts(self, stage_id: int, details: bool = False) -> list[dict[str, Any]]:
        with self.lock:
            found = sorted((st for (sid, _a), st in self._stages.items() if sid == stage_id),
                           key=lambda st: st.attempt_id, reverse=True)
            return [self._stage_dict(st, details) for st in found]

    def stage(self, stage_id: int, attempt: int, details: bool = True) -> dict[str, Any] | None:
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            return None if st is None else self._stage_dict(st, details)

    def _stage_dict(self, st: _Stage, details: bool) -> dict[str, Any]:
        sums = st.sums()
        g = sums.metrics.get
        d: dict[str, Any] = {
            "status": st.status, "stageId": st.stage_id, "attemptId": st.attempt_id,
            "numTasks": st.num_tasks, "numActiveTasks": sums.active,
            "numCompleteTasks": sums.succeeded, "numFailedTasks": sums.failed,
            "numKilledTasks": sums.killed, "numCompletedIndices": len(st.indices),
            "submissionTime": st.submission_time, "firstTaskLaunchedTime": st.first_launch,
            "completionTime": st.completion_time, "failureReason": st.failure_reason,
            "executorDeserializeTime": 0, "executorDeserializeCpuTime": 0,
            "executorRunTime": g("executorRunTime", 0),
            "executorCpuTime": g("executorCpuTime", 0), "resultSize": g("resultSize", 0),
            "jvmGcTime": 0, "resultSerializationTime": 0,
            "memoryBytesSpilled": g("memoryBytesSpilled", 0),
            "diskBytesSpilled": g("diskBytesSpilled", 0), "peakExecutionMemory": 0,
            "inputBytes": 0, "inputRecords": 0, "outputBytes": 0, "outputRecords": 0,
            "shuffleRemoteBlocksFetched": 0, "shuffleLocalBlocksFetched": 0,
            "shuffleFetchWaitTime": 0, "shuffleRemoteBytesRead": g("shuffleRemoteBytesRead", 0),
            "shuffleRemoteBytesReadToDisk": 0,
            "shuffleLocalBytesRead": g("shuffleLocalBytesRead", 0),
            "shuffleReadBytes": sums.read_bytes(), "shuffleReadRecords": 0,
            "shuffleWriteBytes": g("shuffleBytesWritten", 0), "shuffleWriteTime": 0,
            "shuffleWriteRecords": g("shuffleRecordsWritten", 0), "name": st.name,
            "description": st.description, "details": st.details,
            "schedulingPool": st.pool, "rddIds": list(st.rdd_ids), "accumulatorUpdates": [],
            "killedTasksSummary": dict(st.killed_summary),
            "resourceProfileId": st.resource_profile_id,
            "isShufflePushEnabled": False, "shuffleMergersCount": 0}
        if details:
            d["tasks"] = {str(t[0]): self._task_dict(st, _Task._make(t))
                          for t in st.tasks.values()}
            d["executorSummary"] = self._exec_summaries(st)
        return d

    def executor_summary(self, stage_id: int, attempt: int) -> dict[str, dict[str, Any]]:
        """Spark's executorSummary of a stage attempt (without building its tasks)."""
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            return {} if st is None else self._exec_summaries(st)

    def locality_summary(self, stage_id: int, attempt: int) -> dict[str, int]:
        """Tasks by locality level (Spark's AppStatusStore.localitySummary)."""
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            out: dict[str, int] = {}
            for t in st.tasks.values() if st is not None else ():
                out[t[_LOCALITY]] = out.get(t[_LOCALITY], 0) + 1
            return out

    def _exec_summaries(self, st: _Stage) -> dict[str, dict[str, Any]]:
        return {eid: self._exec_stage_dict(s, eid in st.excluded_executors)
                for eid, s in sorted(st.executors.items())}

    @staticmethod
    def _exec_stage_dict(s: _Sums, excluded: bool = False) -> dict[str, Any]:
        g = s.metrics.get
        return {"taskTime": s.task_time, "failedTasks": s.failed, "succeededTasks": s.succeeded,
                "killedTasks": s.killed, "inputBytes": 0, "inputRecords": 0, "outputBytes": 0,
                "outputRecords": 0, "shuffleRead": s.read_bytes(), "shuffleReadRecords": 0,
                "shuffleWrite": g("shuffleBytesWritten", 0),
                "shuffleWriteRecords": g("shuffleRecordsWritten", 0),
                "memoryBytesSpilled": g("memoryBytesSpilled", 0),
                "diskBytesSpilled": g("diskBytesSpilled", 0),
                "isBlacklistedForStage": excluded, "isExcludedForStage": excluded}

    def tasks(self, stage_id: int, attempt: int, offset: int = 0, length: int = 20,
              sort_by: str = "ID", status: str | None = None) -> list[dict[str, Any]] | None:
        """A page of Spark's TaskData of one stage attempt (None: no such attempt). sort_by:
        ID, -ID, index, runtime, -runtime (Spark's TaskSorting); status filters."""
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            if st is None:
                return None
            found = [_Task._make(t) for t in st.tasks.values()
                     if status is None or t[_STATUS] == status]
            key = sort_by.lstrip("-").lower()
            now = int(time.time() * 1000)
            if key in ("runtime", "duration", "decreasingruntime"):
                found.sort(key=lambda t: (t.finish_time or now) - t.launch_time)
            elif key == "index":
                found.sort(key=lambda t: (t.index, t.attempt))
            else:
                found.sort(key=lambda t: t.task_id)
            if sort_by.startswith("-") or sort_by == "decreasingRuntime":
                found.reverse()
            start = max(0, offset)
            return [self._task_dict(st, t) for t in found[start:start + length]]

    def task_summary(self, stage_id: int, attempt: int, quantiles: Iterable[float]
                     ) -> dict[str, Any] | None:
        """Spark's TaskMetricDistributions of a stage attempt's successful tasks: per metric,
        one value per quantile (sorted), the value at index min(int(q * n), n - 1) of the n
        sorted values, no interpolation (AppStatusStore.taskSummary). None: no such attempt
        or no successful task yet. Metrics Ember does not measure are 0s."""
        qs = sorted(quantiles)
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            done = [] if st is None else [
                (t[_FINISH] - t[_LAUNCH], st.task_metrics.get(t[0], {}))
                for t in st.tasks.values() if t[_STATUS] == SUCCESS]
        n = len(done)
        if not n:
            return None
        at = [min(max(int(q * n), 0), n - 1) for q in qs]

        def dist(value: Callable[[int, Mapping[str, int]], int]) -> list[float]:
            values = sorted(value(d, m) for d, m in done)
            return [float(values[i]) for i in at]

        def metric(*keys: str) -> list[float]:
            return dist(lambda d, m: sum(m.get(k, 0) for k in keys))

        zero = [0.0] * len(qs)
        push = ("corruptMergedBlockChunks", "mergedFetchFallbackCount",
                "remoteMergedBlocksFetched", "localMergedBlocksFetched",
                "remoteMergedChunksFetched", "localMergedChunksFetched",
                "remoteMergedBytesRead", "localMergedBytesRead", "remoteMergedReqsDuration")
        return {
            "quantiles": qs, "duration": dist(lambda d, m: d),
            "executorDeserializeTime": zero, "executorDeserializeCpuTime": zero,
            "executorRunTime": metric("executorRunTime"),
            "executorCpuTime": metric("executorCpuTime"), "resultSize": metric("resultSize"),
            "jvmGcTime": zero, "resultSerializationTime": zero, "gettingResultTime": zero,
            "schedulerDelay": zero, "peakExecutionMemory": zero,
            "peakOnHeapExecutionMemory": zero, "peakOffHeapExecutionMemory": zero,
            "memoryBytesSpilled": metric("memoryBytesSpilled"),
            "diskBytesSpilled": metric("diskBytesSpilled"),
            "inputMetrics": {"bytesRead": zero, "recordsRead": zero},
            "outputMetrics": {"bytesWritten": zero, "recordsWritten": zero},
            "shuffleReadMetrics": {
                "readBytes": metric("shuffleLocalBytesRead", "shuffleRemoteBytesRead"),
                "readRecords": zero, "remoteBlocksFetched": zero, "localBlocksFetched": zero,
                "fetchWaitTime": zero, "remoteBytesRead": metric("shuffleRemoteBytesRead"),
                "remoteBytesReadToDisk": zero, "totalBlocksFetched": zero,
                "remoteReqsDuration": zero,
                "shufflePushReadMetricsDist": dict.fromkeys(push, zero)},
            "shuffleWriteMetrics": {"writeBytes": metric("shuffleBytesWritten"),
                                    "writeRecords": metric("shuffleRecordsWritten"),
                                    "writeTime": zero}}

    def task_count(self, stage_id: int, attempt: int) -> int:
        with self.lock:
            st = self._stages.get((stage_id, attempt))
            return 0 if st is None else len(st.tasks)

    def _task_dict(self, st: _Stage, t: _Task) -> dict[str, Any]:
        ex = self._executors.get(t.executor_id)
        d: dict[str, Any] = {
            "taskId": t.task_id, "index": t.index, "attempt": t.attempt,
            "partitionId": t.partition_id, "launchTime": t.launch_time,
            "duration": (t.finish_time or int(time.time() * 1000)) - t.launch_time,
            "executorId": t.executor_id, "host": t.host, "status": t.status,
            "taskLocality": t.locality, "speculative": t.speculative,
            "accumulatorUpdates": [], "errorMessage": t.error or None,
            "executorLogs": dict(ex.log_urls) if ex is not None else {},
            "schedulerDelay": 0, "gettingResultTime": 0}
        if t.status != RUNNING:
            g = st.task_metrics.get(t.task_id, {}).get
            d["taskMetrics"] = {
                "executorDeserializeTime": 0, "executorDeserializeCpuTime": 0,
                "executorRunTime": g("executorRunTime", 0),
                "executorCpuTime": g("executorCpuTime", 0),
                "resultSize": g("resultSize", 0), "jvmGcTime": 0, "resultSerializationTime": 0,
                "memoryBytesSpilled": g("memoryBytesSpilled", 0),
                "diskBytesSpilled": g("diskBytesSpilled", 0), "peakExecutionMemory": 0,
                "inputMetrics": {"bytesRead": 0, "recordsRead": 0},
                "outputMetrics": {"bytesWritten": 0, "recordsWritten": 0},
                "shuffleReadMetrics": {
                    "remoteBlocksFetched": 0, "localBlocksFetched": 0, "fetchWaitTime": 0,
                    "remoteBytesRead": g("shuffleRemoteBytesRead", 0),
                    "remoteBytesReadToDisk": 0,
                    "localBytesRead": g("shuffleLocalBytesRead", 0), "recordsRead": 0,
                    "remoteReqsDuration": 0},
                "shuffleWriteMetrics": {"bytesWritten": g("shuffleBytesWritten", 0),
                                        "writeTime": 0,
                                        "recordsWritten": g("shuffleRecordsWritten", 0)}}
        return d

    def _executor_sums(self) -> dict[str, _Sums]:
        """Per-executor totals over every stage, trimmed ones included."""
        out: dict[str, _Sums] = {}
        for eid, s in self._dropped.items():
            out.setdefault(eid, _Sums()).merge(s)
        for st in self._stages.values():
            for eid, s in st.executors.items():
                out.setdefault(eid, _Sums()).merge(s)
        return out

    def executors(self, active_only: bool = True) -> list[dict[str, Any]]:
        """Spark's ExecutorSummary list ("driver" first, then by id)."""
        with self.lock:
            sums = self._executor_sums()
            usage: dict[str, list[int]] = {}
            for rdd in self._rdds.values():
                for locs in rdd.blocks.values():
                    for eid, (mem, disk, _h) in locs.items():
                        u = usage.setdefault(eid, [0, 0, 0])
                        u[0] += 1
                        u[1] += mem
                        u[2] += disk
            out = []
            for ex in sorted(self._executors.values(),
                             key=lambda x: (x.executor_id != "driver",
                                            int(x.executor_id) if x.executor_id.isdigit()
                                            else 0, x.executor_id)):
                if active_only and ex.remove_time is not None:
                    continue
                s = sums.get(ex.executor_id) or _Sums()
                blocks, mem, disk = usage.get(ex.executor_id, (0, 0, 0))
                out.append({
                    "id": ex.executor_id, "hostPort": ex.host,
                    "isActive": ex.remove_time is None, "rddBlocks": blocks,
                    "memoryUsed": mem, "diskUsed": disk, "totalCores": ex.cores,
                    "maxTasks": ex.cores, "activeTasks": s.active, "failedTasks": s.failed,
                    "completedTasks": s.succeeded,
                    "totalTasks": s.active + s.failed + s.succeeded + s.killed,
                    "totalDuration": s.task_time, "totalGCTime": 0, "totalInputBytes": 0,
                    "totalShuffleRead": s.read_bytes(),
                    "totalShuffleWrite": s.metrics.get("shuffleBytesWritten", 0),
                    "isBlacklisted": ex.is_excluded, "maxMemory": 0, "addTime": ex.add_time,
                    "removeTime": ex.remove_time, "removeReason": ex.remove_reason,
                    "executorLogs": dict(ex.log_urls),
                    "blacklistedInStages": sorted(ex.excluded_in_stages),
                    "attributes": {},
                    "resources": {n: {"name": n, "addresses": list(a)}
                                  for n, a in ex.resources.items()},
                    "resourceProfileId": ex.resource_profile_id,
                    "isExcluded": ex.is_excluded,
                    "excludedInStages": sorted(ex.excluded_in_stages)})
            return out

    def rdds(self, cached_only: bool = True) -> list[dict[str, Any]]:
        """Spark's RDDStorageInfo list (without distribution/partitions), by id."""
        with self.lock:
            found = [self._rdd_dict(r, False) for _, r in sorted(self._rdds.items())]
        return [r for r in found if r["numCachedPartitions"] or not cached_only]

    def rdd(self, rdd_id: int) -> dict[str, Any] | None:
        with self.lock:
            r = self._rdds.get(rdd_id)
            return None if r is None else self._rdd_dict(r, True)

    @staticmethod
    def _rdd_dict(r: _RDD, details: bool) -> dict[str, Any]:
        mem = sum(m for locs in r.blocks.values() for m, _d, _h in locs.values())
        disk = sum(d for locs in r.blocks.values() for _m, d, _h in locs.values())
        out: dict[str, Any] = {"id": r.rdd_id, "name": r.name,
                               "numPartitions": r.num_partitions,
                               "numCachedPartitions": len(r.blocks), "storageLevel": r.level,
                               "memoryUsed": mem, "diskUsed": disk}
        if details:
            dist: dict[str, list[int]] = {}
            parts = []
            for name in sorted(r.blocks, key=lambda n: int(n.rsplit("_", 1)[1])):
                locs = r.blocks[name]
                for m, d, host in locs.values():
                    u = dist.setdefault(host, [0, 0])
                    u[0] += m
                    u[1] += d
                parts.append({"blockName": name, "storageLevel": r.level,
                              "memoryUsed": sum(v[0] for v in locs.values()),
                              "diskUsed": sum(v[1] for v in locs.values()),
                              "executors": sorted(locs)})
            out["dataDistribution"] = [
                {"address": host, "memoryUsed": m, "memoryRemaining": 0, "diskUsed": d,
                 "onHeapMemoryUsed": m, "offHeapMemoryUsed": 0, "onHeapMemoryRemaining": 0,
                 "offHeapMemoryRemaining": 0} for host, (m, d) in sorted(dist.items())]
            out["partitions"] = parts
        return out

    def environment_info(self) -> dict[str, Any]:
        """Spark's ApplicationEnvironmentInfo; the runtime holds Python's details under
        pythonVersion/pythonExecutable beside Spark's (empty) JVM keys."""
        with self.lock:
            env = {k: list(v) for k, v in self.environment.items()}
            profiles = [p for _, p in sorted(self.resource_profiles.items())]
        runtime = dict(env.get("JVM Information", []))
        return {"runtime": {"javaVersion": runtime.get("Java Version", ""),
                            "javaHome": runtime.get("Java Home", ""),
                            "scalaVersion": runtime.get("Scala Version", ""),
                            "pythonVersion": runtime.get("Python Version", ""),
                            "pythonExecutable": runtime.get("Python Executable", "")},
                **{key: [list(kv) for kv in env.get(section, [])] for key, section in (
                    ("sparkProperties", "Spark Properties"),
                    ("hadoopProperties", "Hadoop Properties"),
                    ("systemProperties", "System Properties"),
                    ("metricsProperties", "Metrics Properties"),
                    ("classpathEntries", "Classpath Entries"))},
                "resourceProfiles": profiles}

    def summary(self) -> dict[str, Any]:
        """What runs now and totals since the start (for /metrics/prometheus)."""
        with self.lock:
            total = _Sums()
            for s in self._executor_sums().values():
                total.merge(s)
            live = [x for x in self._executors.values() if x.remove_time is None]
            g = total.metrics.get
            return {"jobs_active": sum(j.status == RUNNING for j in self._jobs.values()),
                    "stages_active": sum(s.status == ACTIVE for s in self._stages.values()),
                    "tasks_active": total.active, "tasks_completed": total.succeeded,
                    "tasks_failed": total.failed, "tasks_killed": total.killed,
                    "executors_active": len(live), "cores": sum(x.cores for x in live),
                    "executors_excluded_now": sum(x.is_excluded for x in live),
                    "cached_rdds": sum(1 for r in self._rdds.values() if r.blocks),
                    "shuffle_read_bytes": total.read_bytes(),
                    "shuffle_write_bytes": g("shuffleBytesWritten", 0),
                    "disk_bytes_spilled": g("diskBytesSpilled", 0),
                    "executor_run_time_ms": g("executorRunTime", 0),
                    "executors_removed": dict(self.executors_removed), **self.counters}
