"""The task scheduler's collaborators as recorders: a backend and a DAG scheduler that only
note what TaskSchedulerImpl and TaskSetManager ask of them, so those two run as pure state
machines on a manual clock."""
from __future__ import annotations

from ember.scheduler.backend import SchedulerBackend


class RecordingBackend(SchedulerBackend):
    def __init__(self):
        self.killed = []
        self.killed_executors = []

    def start(self): ...
    def stop(self): ...
    def revive_offers(self): ...
    def default_parallelism(self): return 2

    def kill_task(self, task_id, executor_id, slot, reason):
        self.killed.append((task_id, reason))

    def kill_executors(self, ids):
        self.killed_executors.extend(ids)
        return True


class RecordingDag:
    def __init__(self):
        self.ended = []
        self.failed = []

    def task_ended(self, task, reason, result, accum, metrics, info):
        self.ended.append((task.partition_id, type(reason).__name__, result, accum, info))

    def task_set_failed(self, task_set, message, exception):
        self.failed.append(message)

    def executor_lost(self, executor_id, worker_host=None):
        pass
