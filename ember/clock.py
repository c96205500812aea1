"""Spark's Clock: the scheduler reads time through one, so its timing rules (speculation,
exclude-on-failure expiry) are tested on a manual clock instead of by sleeping."""
from __future__ import annotations

import threading
import time


class Clock:
    def time(self) -> float:
        """Seconds since the epoch (time.time()'s scale, which TaskInfo times use)."""
        raise NotImplementedError


class SystemClock(Clock):
    # time.time itself, not a method calling it: the scheduler reads the clock ~3 times a
    # task, and a Python frame costs more than the call it wraps
    time = staticmethod(time.time)


class ManualClock(Clock):
    """Time moves only when told: advance(seconds)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start
        self._lock = threading.Lock()

    def time(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds
