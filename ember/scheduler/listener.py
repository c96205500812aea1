"""Scheduler events (Spark's SparkListener* events) and the bus that delivers them.

The status store is updated synchronously when an event is posted, so StatusTracker
answers are exact the moment an action returns; other listeners (UI status store, event
log) get events on a separate thread so they can never slow the scheduler down.

Events are plain data: the application UI's store and the event log are built from them
alone, so replaying an event log (history server) rebuilds the same store.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class RDDInfo:
    """An RDD of a stage (the stage's RDD and its narrow ancestors), as Spark's RDDInfo:
    how the UI learns names, partition counts and storage levels of cached RDDs."""
    rdd_id: int
    name: str
    num_partitions: int
    storage_level: Any          # ember.storagelevel.StorageLevel
    callsite: str = ""
    parent_ids: list[int] = field(default_factory=list)
    barrier: bool = False


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
    rdd_infos: list[RDDInfo] = field(default_factory=list)
    resource_profile_id: int = 0


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
    properties: dict[str, str] = field(default_factory=dict)


@dataclass
class StageCompleted:
    stage_info: StageInfo


@dataclass(slots=True)       # one per task: slots make it cheaper to build
class TaskStart:
    stage_id: int
    stage_attempt: int
    task_info: Any


@dataclass(slots=True)
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
    log_urls: dict[str, str] = field(default_factory=dict)
    resources: dict[str, list[str]] = field(default_factory=dict)   # name -> addresses
    resource_profile_id: int = 0


@dataclass
class ExecutorRemoved:
    executor_id: str
    reason: str
    time: float = field(default_factory=time.time)


@dataclass
class SpeculativeTaskSubmitted:
    """Spark's SparkListenerSpeculativeTaskSubmitted: a running task got a speculative copy."""
    stage_id: int
    stage_attempt_id: int
    task_index: int
    partition_id: int


@dataclass
class ExecutorExcluded:
    """The application excluded an executor (Spark's SparkListenerExecutorExcluded)."""
    time: float
    executor_id: str
    task_failures: int


@dataclass
class ExecutorUnexcluded:
    time: float
    executor_id: str


@dataclass
class NodeExcluded:
    time: float
    host_id: str
    executor_failures: int


@dataclass
class NodeUnexcluded:
    time: float
    host_id: str


@dataclass
class ExecutorExcludedForStage:
    time: float
    executor_id: str
    task_failures: int
    stage_id: int
    stage_attempt_id: int


@dataclass
class NodeExcludedForStage:
    time: float
    host_id: str
    executor_failures: int
    stage_id: int
    stage_attempt_id: int


@dataclass
class ApplicationStart:
    app_name: str
    app_id: str
    time: float
    user: str
    attempt_id: str | None = None


@dataclass
class ApplicationEnd:
    time: float


@dataclass
class ResourceProfileAdded:
    """A resource profile the application registered (Spark's
    SparkListenerResourceProfileAdded). executor_resources: name -> (amount, discovery
    script, vendor); task_resources: name -> amount."""
    resource_profile_id: int
    executor_resources: dict[str, tuple[int, str, str]]
    task_resources: dict[str, float]


@dataclass
class EnvironmentUpdate:
    """details: section ("JVM Information", "Spark Properties", "System Properties",
    "Classpath Entries", ...) -> [(key, value)], secrets already redacted."""
    details: dict[str, list[tuple[str, str]]]


@dataclass
class BlockUpdated:
    """A block stored, moved or dropped (storage level NONE, sizes 0) on an executor."""
    executor_id: str
    host: str
    block_name: str
    storage_level: Any          # ember.storagelevel.StorageLevel
    mem_size: int
    disk_size: int


@dataclass
class UnpersistRDD:
    rdd_id: int


@dataclass
class LogStart:
    """First line of an event log: the Spark version that wrote it (replay only)."""
    spark_version: str


class ListenerBus:
    """Sync listeners (`on_event(event)`) run inside post(); async ones (`on_events(batch)`)
    get the events in order, in batches, on one bus thread; at most `capacity` events wait
    for them (spark.scheduler.listenerbus.eventqueue.capacity), later ones are dropped with
    Spark's error, as Spark's listener queues do.

    Why batches: a thread woken for every event makes the scheduler's threads fight it for
    the GIL twice per task (a 10,000-task job ran 60% slower with a listener that did
    nothing). So post() only appends to a deque, waking the bus thread only when it sleeps
    idle, and the thread lets events gather for BATCH_DELAY before taking them all: async
    listeners see events at most that much later and take a lock once per batch. (Yielding
    the GIL between slices of a batch measured slower: every hand-over costs more than it
    saves.)
    """

    BATCH_DELAY = 0.05
    DROP_REPORT_INTERVAL = 60.0

    def __init__(self, capacity: int = 10000) -> None:
        if capacity <= 0:
            raise ValueError("The capacity of listener bus event queue must be positive "
                             "(spark.scheduler.listenerbus.eventqueue.capacity)")
        self.sync_listeners: list[Any] = []
        self.listeners: list[Any] = []
        self.capacity = capacity
        self.dropped = 0
        self._dropped_reported = 0
        self._last_drop_report = 0.0
        self._q: collections.deque = collections.deque()
        self._thread: threading.Thread | None = None
        self._wakeup = threading.Event()
        self._stopping = threading.Event()      # stop() cuts the batching delay short
        self._idle = False

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
            if len(self._q) >= self.capacity:
                self._drop()
                return
            self._q.append(event)
            if self._idle:      # the GIL orders this check after the thread's own
                self._wakeup.set()

    def _drop(self) -> None:
        """Spark's AsyncEventQueue when a listener falls behind: drop the event rather than
        hold ever more of them in the driver's memory, and say so (once, then a count every
        minute)."""
        self.dropped += 1
        if self.dropped == 1:
            log.error("Dropping event from queue appStatus. This likely means one of the "
                      "listeners is too slow and cannot keep up with the rate at which tasks "
                      "are being started by the scheduler.")
        now = time.monotonic()
        if now - self._last_drop_report >= self.DROP_REPORT_INTERVAL:
            log.warning("Dropped %d events from appStatus since %s.",
                        self.dropped - self._dropped_reported,
                        "the application started" if not self._last_drop_report
                        else "the last report")
            self._dropped_reported, self._last_drop_report = self.dropped, now

    def _run(self) -> None:
        q = self._q
        while True:
            self._idle = True
            if not q:
                self._wakeup.wait()
            self._idle = False
            self._wakeup.clear()
            self._stopping.wait(self.BATCH_DELAY)
            batch: list[Any] = []
            while q:
                event = q.popleft()
                if event is None or isinstance(event, threading.Event):
                    self._deliver(batch)
                    batch = []
                    if event is None:
                        return
                    event.set()                 # a wait_until_empty marker
                else:
                    batch.append(event)
            self._deliver(batch)

    def _deliver(self, batch: list[Any]) -> None:
        if batch:
            for l in self.listeners:
                try:
                    l.on_events(batch)
                except Exception:
                    log.exception("listener %r failed on a batch of events", l)

    def wait_until_empty(self, timeout: float = 10.0) -> bool:
        """True once every event posted before this call reached the async listeners, and
        the sync listeners that hold events to pass on (a `flush(timeout)`, the driver's UI
        process) have passed them on."""
        deadline = time.monotonic() + timeout
        done = True
        if self._thread is not None:
            marker = threading.Event()
            self._q.append(marker)
            self._wakeup.set()
            done = marker.wait(timeout)
        for l in self.sync_listeners:
            flush = getattr(l, "flush", None)
            if flush is not None:
                done = flush(max(0.0, deadline - time.monotonic())) and done
        return done

    def stop(self) -> None:
        """Deliver what was posted, then end the bus thread; later events are dropped."""
        if self._thread is not None:
            self._q.append(None)
            self._stopping.set()
            self._wakeup.set()
            self._thread.join(timeout=10)
            self._thread = None
            self.listeners = []
