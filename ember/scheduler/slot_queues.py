"""The driver's view of one executor's busy task slots: the task each runs and the short
tasks queued behind it (spark.ember.scheduler.queueShortTasks), in the order its task
process runs them.

Both backends keep one per executor (local mode has one executor), so a task end says the
same thing everywhere: the slot became free, or the next queued task started and now holds
the slot's core (TaskSchedulerImpl.promote_queued).
"""
from __future__ import annotations

import time
from collections import deque
from typing import Callable

from ember import config

# the most tasks that may wait per slot: the task process pool's bound (MAX_WAITING)
MAX_DEPTH = 63
# spark.ember.scheduler.queueDepth when it is not set. What waits behind a slot must cover
# the time its process's report takes to come back as new tasks: local mode's task
# processes talk to the driver over socket pairs, a cluster's through their executor (a TCP
# hop each way, and the executor's own turns on the same cores). 8,000 tasks of one record
# on 2 workers x 1 core: 28,400 -> 31,000 tasks/s with 63 (medians of 9 runs); local[2]
# 46,900 with 31 against 44,600 with 63 (4 runs: larger bursts, and no relay to cover)
LOCAL_DEPTH, CLUSTER_DEPTH = 31, 63
# nothing more is queued behind a task running longer than this (a short task takes less,
# see task_set_manager.QUEUEABLE_TASK_S): what waits behind a long one waits for an unknown
# time, until the task process pool hands it back
LONG_RUNNING_S = 0.005


def queue_depth(conf, cluster: bool) -> int:
    """Tasks that may wait behind a busy slot: 0 when short tasks are not queued."""
    if not config.read(conf, "spark.ember.scheduler.queueShortTasks"):
        return 0
    depth = config.read(conf, "spark.ember.scheduler.queueDepth",
                        CLUSTER_DEPTH if cluster else LOCAL_DEPTH)
    return max(1, min(MAX_DEPTH, depth))


class SlotQueues:
    def __init__(self, depth: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.depth = depth
        self.clock = clock
        self.running: dict[int, int] = {}          # busy slot -> its task
        self.since: dict[int, float] = {}          # busy slot -> when its task started
        self.waiting: dict[int, deque[int]] = {}   # busy slot -> tasks queued behind it

    def started(self, slot: int, tid: int) -> None:
        """A task launched on the free slot."""
        self.running[slot] = tid
        self.since[slot] = self.clock()

    def queued(self, slot: int, tid: int) -> None:
        self.waiting.setdefault(slot, deque()).append(tid)

    def room(self, most: int) -> list[tuple[int, int]]:
        """(busy slot, how many tasks the next one queued on it would wait behind), for
        each task that may still be queued there, up to `most` more a slot: none behind a
        task that has run longer than LONG_RUNNING_S."""
        recent = self.clock() - LONG_RUNNING_S
        room = []
        for s in self.running:
            if self.since[s] >= recent:
                waiting = len(self.waiting.get(s, ()))
                room += ((s, n) for n in range(waiting + 1,
                                               min(self.depth, waiting + most) + 1))
        return room

    def ended(self, slot: int, tid: int) -> tuple[bool, int | None]:
        """Task `tid` of `slot` ended: (the slot is free now, the queued task that started
        in its place)."""
        queue = self.waiting.get(slot)
        if self.running.get(slot) == tid:
            if queue:
                nxt = self.running[slot] = queue.popleft()
                self.since[slot] = self.clock()
                return False, nxt
            del self.running[slot]
            del self.since[slot]
            return True, None
        if queue and tid in queue:      # ended before it started (killed while it waited)
            queue.remove(tid)
        return False, None
