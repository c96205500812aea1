"""distinct, intersection and subtract of RDDs: what they need of each element is only
which sides hold it and how many times, so each map task counts its elements in C
(ExternalMerger.mergeKeyCounts, spilling as any combine does) and writes one record an
element it holds, and the reduce side adds the counts up. PySpark tags every element with
a Python call and groups the tags into lists (cogroup) instead: three times the time.

The partitions are PySpark's: as many (the default of the union of the two sides' tagged
RDDs for intersection and subtract, of the RDD for distinct, or the number asked for) and
portable_hash, so an element lands where PySpark puts it."""
from __future__ import annotations

import operator
from itertools import chain, repeat
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ember.shuffle.external import Aggregator, ExternalMerger, _identity

if TYPE_CHECKING:
    from ember.rdd import RDD

_FIRST = operator.itemgetter(0)
# an element of `other` in subtract: adding it to any count (int) gives -inf, so an
# element present there is never emitted however many times the left side holds it
_IN_OTHER = float("-inf")


def _counted(rdd: RDD, tag: Any = None) -> RDD:
    """(element, how many times a map task holds it), or (element, tag) when a tag is
    given; both built in C."""
    memory = rdd._memory_limit()
    local_dirs = rdd.ctx.runtime.spill_dirs
    agg = Aggregator(_identity, operator.add, operator.add)

    def count(it: Iterable) -> Iterator:
        merger = ExternalMerger(agg, int(memory * 0.9), local_dirs=local_dirs,
                                over_current_rss=True)
        merger.mergeKeyCounts(it)
        items = merger.items()
        return items if tag is None else zip(map(_FIRST, items), repeat(tag))
    return rdd.mapPartitions(count)


def _merged(counted: RDD, num_partitions: int, merge: Callable[[Any, Any], Any],
            emit: Callable[[Iterator[tuple]], Iterator]) -> RDD:
    """Shuffle (element, count) records into `num_partitions`, fold each element's counts
    with `merge` and hand (element, total) to `emit`."""
    memory = counted._memory_limit()
    local_dirs = counted.ctx.runtime.spill_dirs
    agg = Aggregator(_identity, merge, merge)

    def merge_counts(it: Iterable) -> Iterator:
        merger = ExternalMerger(agg, memory, local_dirs=local_dirs, over_current_rss=True)
        merger.mergeCombiners(it)
        return emit(merger.items())
    return counted.partitionBy(num_partitions).mapPartitions(merge_counts)


def distinct(rdd: RDD, num_partitions: int | None) -> RDD:
    n = rdd._default_reduce_partitions() if num_partitions is None else num_partitions
    return _merged(_counted(rdd), n, operator.add, lambda items: map(_FIRST, items))


def intersection(rdd: RDD, other: RDD) -> RDD:
    """Each element held by both, once: the sides' tags 1 and 2 or-ed give 3."""
    sides = _counted(rdd, 1).union(_counted(other, 2))
    return _merged(sides, sides._default_reduce_partitions(), operator.or_,
                   lambda items: (k for k, tags in items if tags == 3))


def subtract(rdd: RDD, other: RDD, num_partitions: int | None) -> RDD:
    """Each element of `rdd` that `other` does not hold, as many times as `rdd` holds it."""
    sides = _counted(rdd).union(_counted(other, _IN_OTHER))
    n = sides._default_reduce_partitions() if num_partitions is None else num_partitions
    return _merged(sides, n, operator.add,
                   lambda items: chain.from_iterable(repeat(k, c) for k, c in items if c > 0))
