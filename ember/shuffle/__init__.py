"""Shuffle: map output writing, fetching, and external (spilling) aggregation/sort.

The package is also PySpark's pyspark.shuffle for programs that use it: the spilling
mergers and sorter (ember.shuffle.external, loaded when first named here) and the bytes the
running task spilled, MemoryBytesSpilled and DiskBytesSpilled, which a task process resets
when a task starts and adds to that task's metrics when it ends.
"""
from typing import Any

MemoryBytesSpilled = 0
DiskBytesSpilled = 0

_EXTERNAL = frozenset({"Aggregator", "SimpleAggregator", "Merger", "ExternalMerger",
                       "ExternalGroupBy", "ExternalSorter", "GroupByKey", "get_used_memory"})


def __getattr__(name: str) -> Any:
    if name in _EXTERNAL:
        from ember.shuffle import external
        return getattr(external, name)
    raise AttributeError(f"module 'ember.shuffle' has no attribute {name!r}")
