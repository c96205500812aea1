"""Partitions a sample pass read, held for the shuffle that follows it.

sortByKey and sortBy run two passes over their input, as Spark's RangePartitioner does: a
job that samples the keys for the range bounds, then the shuffle's map stage. Unless the
input is cached, Spark computes it twice (the text read, the parsing, whatever made it).
Here the sample pass keeps each partition it read, as a list in the task process that read
it, while it fits: within the free storage memory of that process (never evicting a cached
block) and half the Python worker memory (spark.python.worker.memory), counting what the
process already holds this way. The block travels to the driver as a cached block's
location does, so the map task of that partition goes to that process (PROCESS_LOCAL) and
takes the list, which frees it. A partition that did not fit, or a task that ran elsewhere,
computes the input again, as before. What no task took is released once a stage has
computed every partition (or with the RDD, by the context cleaner). zipWithIndex,
histogram and takeSample read their input twice the same way, and hold it the same way.
"""
from __future__ import annotations

from itertools import chain, islice
from typing import Any, Iterable, Iterator

from ember.dependency import Dependency, OneToOneDependency
from ember.rdd import RDD, Partition
from ember.storage.block_manager import block_name, estimate_size

_FIRST_CHUNK = 256
_MAX_CHUNK = 65536


class HeldRDD(RDD):
    """`prev`'s partitions: held by the tasks of the first job that reads them (while
    `holding`), then taken by later tasks from the task process that holds them."""
    _lineage_attrs = ("prev",)

    def __init__(self, prev: RDD) -> None:
        super().__init__(prev.ctx)
        self.prev = prev
        self.holding = True
        self._clean_when_unreachable()

    @property
    def holds_blocks(self) -> bool:
        """Whether its tasks prefer where its blocks are, and a stage that computed all
        its partitions releases what is left of them (the DAG scheduler asks)."""
        return not self.holding

    def __repr__(self) -> str:
        return f"HeldRDD[{self._id}] of {self.prev!r}"

    def _get_partitions(self) -> list[Partition]:
        return self.prev.partitions()

    def _get_dependencies(self) -> list[Dependency]:
        return [OneToOneDependency(self.prev)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        return self.prev.iterator(split, context)

    def iterator(self, split: Partition, context: Any) -> Iterator:
        env = getattr(context, "env", None)
        if env is None:
            return self.compute(split, context)
        name = block_name(self._id, split.index)
        if self.holding:
            return iter(hold_partition(self.compute(split, context), env, name))
        values = env.block_manager.take(name)
        return iter(values) if values is not None else self.compute(split, context)


def held_for_reread(rdd: RDD) -> RDD:
    """A HeldRDD of `rdd`, for an operation that reads it in a job of its own before the
    job that reads it again (sortByKey's sample, zipWithIndex's counts, histogram's
    minimum and maximum, takeSample's count); `rdd` itself when its partitions are at hand
    anyway (cached, checkpointed, parallelized) or it belongs to a barrier stage."""
    from ember.rdd import ParallelCollectionRDD
    from ember.storagelevel import StorageLevel
    if rdd._storage_level != StorageLevel.NONE or rdd.isCheckpointed() or \
            rdd._local_checkpointed or isinstance(rdd, ParallelCollectionRDD) or \
            getattr(rdd, "_from_barrier", False):
        return rdd
    return HeldRDD(rdd)


def stop_holding(rdd: RDD) -> None:
    """After the first job: later tasks take the held partitions."""
    if isinstance(rdd, HeldRDD):
        rdd.holding = False


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
