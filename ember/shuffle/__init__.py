"""Shuffle: map output writing, fetching, and external (spilling) aggregation/sort.

The package is also PySpark's pyspark.shuffle for programs that use it: the spilling
mergers and sorter (ember.shuffle.external, loaded when first named here) and the running
task's spill counters MemoryBytesSpilled and DiskBytesSpilled (kept in
ember.shuffle.spilled).
"""
import sys
import types
from typing import Any

from ember.shuffle import spilled as _spilled

_EXTERNAL = frozenset({"Aggregator", "SimpleAggregator", "Merger", "ExternalMerger",
                       "ExternalGroupBy", "ExternalSorter", "GroupByKey", "get_used_memory",
                       "ExternalList", "ExternalListOfList"})


def _counter(name: str) -> property:
    return property(lambda _self: getattr(_spilled, name),
                    lambda _self, value: setattr(_spilled, name, value))


class _Package(types.ModuleType):
    MemoryBytesSpilled = _counter("MemoryBytesSpilled")
    DiskBytesSpilled = _counter("DiskBytesSpilled")

    def __getattr__(self, name: str) -> Any:
        if name in _EXTERNAL:
            from ember.shuffle import external
            return getattr(external, name)
        raise AttributeError(f"module 'ember.shuffle' has no attribute {name!r}")


sys.modules[__name__].__class__ = _Package
