"""ContextCleaner: a shuffle's outputs and a persisted RDD's cached blocks live only as long
as the driver can still reach the ShuffleDependency or the RDD (Spark's ContextCleaner,
spark.cleaner.referenceTracking).

Why: without it every shuffle a long-lived context ran kept its map output files on disk and
its MapStatuses in the driver (one per map task, so the driver's heap, and with it each full
garbage collection, grew with every job), and every cached RDD the program dropped kept its
blocks in the task processes for the application's life.

A weakref finalizer only puts the id on a queue: it runs wherever the collector happened to
run, possibly inside a lock of the scheduler, so it must neither block nor take a lock
(SimpleQueue.put is reentrant for exactly this). The cleaning thread does the work; every
spark.cleaner.periodicGC.interval it also runs a full collection, so objects kept only by a
reference cycle are found on a driver that allocates too little to trigger one.
"""
from __future__ import annotations

import gc
import logging
import queue
import threading
import weakref
from typing import Any

log = logging.getLogger(__name__)

SHUFFLE, RDD = "shuffle", "rdd"
_STOP = ("stop", -1)


class ContextCleaner:
    def __init__(self, runtime: Any, periodic_gc_s: float) -> None:
        self.runtime = runtime
        self.periodic_gc_s = periodic_gc_s
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def register_shuffle_for_cleanup(self, dep: Any) -> None:
        self._watch(dep, SHUFFLE, dep.shuffle_id)

    def register_rdd_for_cleanup(self, rdd: Any) -> None:
        self._watch(rdd, RDD, rdd.id())

    def _watch(self, obj: Any, kind: str, ident: int) -> None:
        # the callback must not hold `obj` (it would never be collected)
        weakref.finalize(obj, self._queue.put, (kind, ident)).atexit = False

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="Spark Context Cleaner",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stops cleaning; what is still queued is left to the directories' removal."""
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(10)
            self._thread = None

    def _run(self) -> None:
        while True:
            try:
                kind, ident = self._queue.get(timeout=self.periodic_gc_s)
            except queue.Empty:
                gc.collect()         # Spark's periodic System.gc(): finds unreachable cycles
                continue
            if kind == "stop":
                return
            try:
                self.do_clean(kind, ident)
            except Exception:      # a failed clean-up must not end the cleaning
                log.exception("Error cleaning %s %d", kind, ident)

    def do_clean(self, kind: str, ident: int) -> None:
        runtime = self.runtime
        if runtime.stopped:
            return
        if kind == SHUFFLE:
            log.debug("Cleaning shuffle %d", ident)
            runtime.remove_shuffle(ident)
            log.debug("Cleaned shuffle %d", ident)
        else:
            log.debug("Cleaning RDD %d", ident)
            runtime.unpersist_rdd(ident)
            log.debug("Cleaned RDD %d", ident)
