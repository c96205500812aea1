"""The worker's memory limit on the processes it starts (a YARN-style monitor).

spark.executor.memory and spark.driver.memory size a JVM heap in Spark; Ember's executors
and drivers are Python processes, which no flag bounds. An address-space limit would be
wrong for them (a Python process reserves far more address space than it touches), so the
worker polls the resident size of the process it started and kills it, with a reason that
says so, once it exceeds its memory plus overhead (Spark's memoryOverhead: max(384 MiB,
10%) unless set). Task processes are not counted: spark.executor.pyspark.memory bounds them
(an RLIMIT_AS each, as PySpark does).
"""
from __future__ import annotations

import logging
import threading
from typing import Callable, Optional

import psutil

log = logging.getLogger(__name__)

MEMORY_OVERHEAD_MIN_MB = 384
MEMORY_OVERHEAD_FACTOR = 0.10


def memory_limit_mb(memory_mb: int, overhead_mb: Optional[int] = None) -> int:
    """Memory plus overhead, Spark's container size without pyspark memory."""
    if overhead_mb is None:
        overhead_mb = max(MEMORY_OVERHEAD_MIN_MB, int(memory_mb * MEMORY_OVERHEAD_FACTOR))
    return memory_mb + overhead_mb


def exceeded_message(what: str, rss_mb: int, limit_mb: int, key: str) -> str:
    return (f"{what} exceeded memory limit: {rss_mb} MiB resident > {limit_mb} MiB "
            f"({key} plus overhead); killed by the worker")


class MemoryWatchdog:
    """Polls `pid` every `interval` seconds until stop(); calls `on_exceeded(rss_mb)` once
    when its resident size passes `limit_mb`."""

    def __init__(self, pid: int, limit_mb: int, on_exceeded: Callable[[int], None],
                 interval: float = 1.0) -> None:
        self.pid = pid
        self.limit_mb = limit_mb
        self.on_exceeded = on_exceeded
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"memory-watchdog-{pid}",
                                        daemon=True)

    def start(self) -> "MemoryWatchdog":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            proc = psutil.Process(self.pid)
        except psutil.Error:
            return
        while not self._stop.wait(self.interval):
            try:
                rss_mb = proc.memory_info().rss >> 20
            except psutil.Error:
                return
            if rss_mb > self.limit_mb:
                self.on_exceeded(rss_mb)
                return
