"""StatusTracker: job and stage progress for user code and the console progress bar.

Backed by a StatusStore that the listener bus updates synchronously, so answers are
current the moment an action returns or a stage starts.
"""
from __future__ import annotations

import threading
from collections import namedtuple
from typing import Any, Callable

from ember.scheduler import listener as sl

SparkJobInfo = namedtuple("SparkJobInfo", "jobId stageIds status")
SparkStageInfo = namedtuple("SparkStageInfo", "stageId currentAttemptId name numTasks "
                                              "numActiveTasks numCompletedTasks numFailedTasks")


class _StageState:
    __slots__ = ("info", "active", "completed", "failed", "done_indices", "status")

    def __init__(self, info: sl.StageInfo) -> None:
        self.info = info
        self.active = 0
        self.completed = 0
        self.failed = 0
        self.done_indices: set[int] = set()
        self.status = "ACTIVE"


class StatusStore:
    def __init__(self, retained: int = 1000) -> None:
        self._lock = threading.Lock()
        self.jobs: dict[int, dict] = {}
        self.stages: dict[int, _StageState] = {}
        self.active_stage_ids: set[int] = set()
        self.retained = retained

    def on_event(self, e: Any) -> None:
        """Every event of the driver passes here, on the scheduler's thread: one dict
        lookup finds its handler (8 events a warm job; the isinstance chain it replaces
        cost a few us of a job of ~400)."""
        handler = self._handlers.get(type(e))
        if handler is not None:
            with self._lock:
                handler(self, e)

    def _task_start(self, e: sl.TaskStart) -> None:
        st = self.stages.get(e.stage_id)
        if st is not None and st.info.attempt_id == e.stage_attempt:
            st.active += 1

    def _task_end(self, e: sl.TaskEnd) -> None:
        st = self.stages.get(e.stage_id)
        if st is not None and st.info.attempt_id == e.stage_attempt:
            st.active = max(0, st.active - 1)
            info = e.task_info
            if info is not None and info.successful:
                if info.index not in st.done_indices:
                    st.done_indices.add(info.index)
                    st.completed += 1
            elif info is not None and info.failed:
                st.failed += 1

    def _job_start(self, e: sl.JobStart) -> None:
        self.jobs[e.job_id] = {"stageIds": [s.stage_id for s in e.stage_infos],
                               "status": "RUNNING",
                               "group": e.properties.get("spark.jobGroup.id"),
                               "tags": e.properties.get("spark.job.tags", "")}
        for s in e.stage_infos:
            self.stages.setdefault(s.stage_id, _StageState(s))
        self._trim()

    def _job_end(self, e: sl.JobEnd) -> None:
        job = self.jobs.get(e.job_id)
        if job is not None:
            job["status"] = "SUCCEEDED" if e.succeeded else "FAILED"

    def _stage_submitted(self, e: sl.StageSubmitted) -> None:
        info = e.stage_info
        st = self.stages.get(info.stage_id)
        if st is None or st.info.attempt_id != info.attempt_id or st.status != "ACTIVE":
            st = _StageState(info)
            self.stages[info.stage_id] = st
        st.info = info
        self.active_stage_ids.add(info.stage_id)

    def _stage_completed(self, e: sl.StageCompleted) -> None:
        st = self.stages.get(e.stage_info.stage_id)
        if st is not None:
            st.status = "FAILED" if e.stage_info.failure_reason else "COMPLETE"
        self.active_stage_ids.discard(e.stage_info.stage_id)

    _handlers: dict[type, Callable[[StatusStore, Any], None]] = {
        sl.TaskStart: _task_start, sl.TaskEnd: _task_end, sl.JobStart: _job_start,
        sl.JobEnd: _job_end, sl.StageSubmitted: _stage_submitted,
        sl.StageCompleted: _stage_completed}

    def _trim(self) -> None:
        """Forget the oldest jobs past `retained`: the first in the dict, as jobs are added
        at their start (sorting every id at each job's start cost 15-20 us a job once an
        application had run `retained` of them)."""
        while len(self.jobs) > self.retained:
            jid = next(iter(self.jobs))
            for sid in self.jobs.pop(jid)["stageIds"]:
                if sid not in self.active_stage_ids:
                    self.stages.pop(sid, None)

    def stage_snapshot(self, stage_id: int) -> SparkStageInfo | None:
        with self._lock:
            st = self.stages.get(stage_id)
            if st is None:
                return None
            i = st.info
            return SparkStageInfo(stage_id, i.attempt_id, i.name, i.num_tasks, st.active,
                                  st.completed, st.failed)

    def active_stages(self) -> list[tuple[SparkStageInfo, float]]:
        with self._lock:
            ids = sorted(self.active_stage_ids)
        out = []
        for sid in ids:
            snap = self.stage_snapshot(sid)
            st = self.stages.get(sid)
            if snap is not None and st is not None:
                out.append((snap, st.info.submission_time or 0.0))
        return out


class StatusTracker:
    """Low-level status reporting APIs (PySpark's pyspark.status.StatusTracker)."""

    def __init__(self, store: StatusStore) -> None:
        self._store = store

    def getJobIdsForGroup(self, jobGroup: str | None = None) -> list[int]:  # noqa: N802, N803
        with self._store._lock:
            return [jid for jid, j in self._store.jobs.items() if j["group"] == jobGroup]

    def getJobIdsForTag(self, jobTag: str) -> list[int]:  # noqa: N802, N803
        with self._store._lock:
            return [jid for jid, j in self._store.jobs.items()
                    if jobTag in (j["tags"] or "").split(",")]

    def getActiveStageIds(self) -> list[int]:  # noqa: N802
        with self._store._lock:
            return sorted(self._store.active_stage_ids)

    def getActiveJobsIds(self) -> list[int]:  # noqa: N802
        with self._store._lock:
            return sorted(jid for jid, j in self._store.jobs.items() if j["status"] == "RUNNING")

    def getJobInfo(self, jobId: int) -> SparkJobInfo | None:  # noqa: N802, N803
        with self._store._lock:
            j = self._store.jobs.get(jobId)
            if j is None:
                return None
            return SparkJobInfo(jobId, list(j["stageIds"]), j["status"])

    def getStageInfo(self, stageId: int) -> SparkStageInfo | None:  # noqa: N802, N803
        return self._store.stage_snapshot(stageId)
