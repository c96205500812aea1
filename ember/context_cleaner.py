"""ContextCleaner: a shuffle's outputs, a persisted RDD's cached blocks and a broadcast's
file and loaded copies live only as long as the driver can still reach the
ShuffleDependency, the RDD or the Broadcast (Spark's ContextCleaner,
spark.cleaner.referenceTracking).

Why: without it every shuffle a long-lived context ran kept its map output files on disk and
its MapStatuses in the driver (one per map task, so the driver's heap, and with it each full
garbage collection, grew with every job), and every cached RDD and broadcast the program
dropped kept its blocks or value in the task processes for the application's life.

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

from ember import fs

log = logging.getLogger(__name__)

SHUFFLE, RDD, BROADCAST, CHECKPOINT = "shuffle", "rdd", "broadcast", "checkpoint"
_STOP = ("stop", -1)


class ContextCleaner:
    def __init__(self, runtime: Any, periodic_gc_s: float, clean_checkpoints: bool = False
                 ) -> None:
        self.runtime = runtime
        self.periodic_gc_s = periodic_gc_s
        self.clean_checkpoints = clean_checkpoints    # ...referenceTracking.cleanCheckpoints
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def register_shuffle_for_cleanup(self, dep: Any) -> None:
        self._watch(dep, SHUFFLE, dep.shuffle_id)

    def register_rdd_for_cleanup(self, rdd: Any) -> None:
        self._watch(rdd, RDD, rdd.id())

    def register_broadcast_for_cleanup(self, broadcast: Any) -> None:
        self._watch(broadcast, BROADCAST, broadcast._bid)

    def register_slice_file_for_cleanup(self, rdd: Any, bid: int) -> None:
        """A parallelized RDD's slice in a file (ember.rdd_sources.SliceFile): removed as a
        broadcast is, once the RDD is unreachable."""
        self._watch(rdd, BROADCAST, bid)

    def register_checkpoint_for_cleanup(self, rdd: Any, path: str) -> None:
        """A reliably checkpointed RDD's files, when cleanCheckpoints is on."""
        if self.clean_checkpoints:
            self._watch(rdd, CHECKPOINT, path)

    def _watch(self, obj: Any, kind: str, ident: Any) -> None:
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
                log.exception("Error cleaning %s %s", kind, ident)

    def do_clean(self, kind: str, ident: Any) -> None:
        """`ident`: the shuffle, RDD or broadcast id, or a checkpoint's directory."""
        runtime = self.runtime
        if runtime.stopped:
            return
        log.debug("Cleaning %s %s", kind, ident)
        if kind == SHUFFLE:
            runtime.remove_shuffle(ident)
        elif kind == RDD:
            runtime.unpersist_rdd(ident)
        elif kind == BROADCAST:
            runtime.remove_broadcast(ident)
        else:
            fs.remove_tree(ident)
        log.debug("Cleaned %s %s", kind, ident)
