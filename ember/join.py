"""`pyspark.join`: the joins and cogroup of pair RDDs, with PySpark's partitions and
answers. PySpark tags each value with its side (a Python call a record) and groups the
tagged values by key. Here each map task groups its side's values by key first (the
groupByKey loop, no Python call a record) and writes one (key, (side, values)) record a
key; the reduce side groups those, so a key's values are handled a list at a time."""
from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ember.resultiterable import ResultIterable

if TYPE_CHECKING:
    from ember.rdd import RDD


def _grouped_side(rdd: RDD, side: int) -> RDD:
    memory = rdd._memory_limit()
    local_dirs = rdd.ctx.runtime.spill_dirs

    def group(it: Iterable) -> Iterator:
        from ember.shuffle.external import ExternalGroupBy
        merger = ExternalGroupBy(None, int(memory * 0.9), local_dirs=local_dirs,
                                 over_current_rss=True)
        merger.mergeValues(it)
        return ((k, (side, values)) for k, values in merger.lists())
    return rdd.mapPartitions(group, True)


def _cogrouped(rdds: list[RDD], num_partitions: int | None) -> RDD:
    """(key, [(side, values), ...]): each side's values of the key in as many lists as
    map tasks held the key, in the order a groupByKey of the tagged union meets them."""
    union = reduce(lambda a, b: a.union(b),
                   [_grouped_side(rdd, side) for side, rdd in enumerate(rdds)])
    n = union._default_reduce_partitions() if num_partitions is None else num_partitions
    memory = union._memory_limit()
    local_dirs = union.ctx.runtime.spill_dirs

    def group(it: Iterable) -> Iterator:
        from ember.shuffle.external import ExternalGroupBy
        merger = ExternalGroupBy(None, memory, local_dirs=local_dirs, over_current_rss=True)
        merger.mergeValues(it)
        return merger.items()
    return union.partitionBy(n).mapPartitions(group, True)


def _join(rdd: RDD, other: RDD, num_partitions: int | None, keep_right: bool,
          keep_left: bool) -> RDD:
    def dispatch(key_groups: tuple) -> list:
        k, groups = key_groups
        vbuf: list = []
        wbuf: list = []
        for side, values in groups:
            (wbuf if side else vbuf).extend(values)
        if keep_right and not vbuf:
            vbuf.append(None)
        if keep_left and not wbuf:
            wbuf.append(None)
        return [(k, (v, w)) for v in vbuf for w in wbuf]
    return _cogrouped([rdd, other], num_partitions).flatMap(dispatch, True)


def python_join(rdd: RDD, other: RDD, numPartitions: int | None) -> RDD:  # noqa: N803
    return _join(rdd, other, numPartitions, False, False)


def python_left_outer_join(rdd: RDD, other: RDD,
                           numPartitions: int | None) -> RDD:  # noqa: N803
    return _join(rdd, other, numPartitions, False, True)


def python_right_outer_join(rdd: RDD, other: RDD,
                            numPartitions: int | None) -> RDD:  # noqa: N803
    return _join(rdd, other, numPartitions, True, False)


def python_full_outer_join(rdd: RDD, other: RDD,
                           numPartitions: int | None) -> RDD:  # noqa: N803
    return _join(rdd, other, numPartitions, True, True)


def python_cogroup(rdds: list[RDD], numPartitions: int | None) -> RDD:  # noqa: N803
    """Each key with a ResultIterable of its values in each of `rdds`."""
    n = len(rdds)

    def dispatch(groups: Iterable) -> tuple:
        bufs: list[list[Any]] = [[] for _ in range(n)]
        for side, values in groups:
            bufs[side].extend(values)
        return tuple(ResultIterable(vs) for vs in bufs)
    return _cogrouped(rdds, numPartitions).mapValues(dispatch)
