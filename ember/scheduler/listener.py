"""Scheduler events (Spark's SparkListener* events) and the bus that delivers them.

The status store is updated synchronously when an event is posted, so StatusTracker
answers are exact the moment an action returns; other listeners (progress bar, UI, event
log) get events on a separate thread so they can never slow the scheduler down.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class StageInfo:
    stage_id: int
    attempt_id: int
    name: str
    num_tasks: int
    rdd_name: str = ""
    details: str = ""
    submission_time: float | None = None
    completion_time: float | None = None
    failure_reason: str | None = None
    parent_ids: list[int] = field(default_factory=list)


@dataclass
class JobStart:
    job_id: int
    time: float
    stage_infos: list[StageInfo]
    properties: dict[str, str]


@dataclass
class JobEnd:
    job_id: int
    time: float
    succeeded: bool
    error: str = ""


@dataclass
class StageSubmitted:
    stage_info: StageInfo


@dataclass
class StageCompleted:
    stage_info: StageInfo


@dataclass
class TaskStart:
    stage_id: int
    stage_attempt: int
    task_info: Any


@dataclass
class TaskEnd:
    stage_id: int
    stage_attempt: int
    task_type: str
    reason: Any
    task_info: Any
    metrics: dict


@dataclass
class ExecutorAdded:
    executor_id: str
    host: str
    cores: int
    time: float = field(default_factory=time.time)


@dataclass
class ExecutorRemoved:
    executor_id: str
    reason: str
    time: float = field(default_factory=time.time)


class ListenerBus:
    def __init__(self) -> None:
        self.sync_listeners: list[Any] = []
        self.listeners: list[Any] = []
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._idle = threading.Condition()
        self._pending = 0

    def add_sync(self, listener: Any) -> None:
        self.sync_listeners.append(listener)

    def add(self, listener: Any) -> None:
        self.listeners.append(listener)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="listener-bus", daemon=True)
            self._thread.start()

    def post(self, event: Any) -> None:
        for l in self.sync_listeners:
            try:
                l.on_event(event)
            except Exception:
                log.exception("listener %r failed on %r", l, event)
        if self.listeners:
            with self._idle:
                self._pending += 1
            self._q.put(event)

    def _run(self) -> None:
        while True:
            event = self._q.get()
            if event is None:
                return
            for l in self.listeners:
                try:
                    l.on_event(event)
                except Exception:
                    log.exception("listener %r failed on %r", l, event)
            with self._idle:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def wait_until_empty(self, timeout: float = 10.0) -> bool:
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def stop(self) -> None:
        if self._thread is not None:
            self._q.put(None)
            self._thread.join(timeout=5)
            self._thread = None
