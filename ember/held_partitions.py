"""An input that two jobs read: the first job's tasks hold what they read for the second.

sortByKey and sortBy run two passes over their input, as Spark's RangePartitioner does: a
job that samples the keys for the range bounds, then the shuffle's map stage; zipWithIndex
counts before it zips, histogram(n) finds the minimum and maximum before it counts,
takeSample counts before it samples. Unless the input is cached, Spark computes it in both
jobs (the text read, the parsing, whatever made it). Here each task of the first job keeps
the partition it read, as a list in its task process, while it fits: within the free
storage memory of that process (never evicting a cached block) and half the Python worker
memory (spark.python.worker.memory), counting what the process already holds this way.
The block travels to the driver as a cached block's location does, so the second job's
task of that partition goes to that process (PROCESS_LOCAL) and takes the list, which
frees it. A partition that did not fit, or a task that ran elsewhere, computes the input
again, as before. What no task took is released once a stage has computed every partition,
when the first job fails (ember.rdd.read_twice), or else with the RDD, by the context
cleaner. The RDD is ember.rdd.HeldRDD; here is how a task holds a partition.
"""
from __future__ import annotations

from itertools import chain, islice
from typing import Any, Iterable

from ember.storage.block_manager import estimate_size

_FIRST_CHUNK = 256
_MAX_CHUNK = 65536


def hold_partition(records: Iterable, env: Any, name: str) -> Iterable:
    """The records of a partition, read whole into a list and held under `name` in this
    task process when they fit (see the module docstring); the list, or an iterator over
    the same records in the same order when they did not."""
    manager = env.block_manager
    room = min(manager.memory_budget - manager.memory_used,
               (env.memory_limit_mb << 19) - manager.held_bytes)
    it = iter(records)
    values: list = []
    size = 0
    chunk = _FIRST_CHUNK
    while room > 0:
        before = len(values)
        values.extend(islice(it, chunk))
        if len(values) == before:
            manager.hold(name, values, size)
            return values
        size = estimate_size(values)
        if size > room:
            break
        # the next chunk should fill at most half the room left, at the size seen so far
        per_record = size / len(values)
        chunk = max(_FIRST_CHUNK, min(_MAX_CHUNK, int((room - size) / per_record / 2)))
    return chain(values, it)
