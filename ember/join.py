"""`pyspark.join`: the joins and cogroup of pair RDDs, as PySpark does them in Python: tag
each side's values, group by key once, then pair each key's values up (an outer side
without partners is paired with None)."""
from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from ember.resultiterable import ResultIterable

if TYPE_CHECKING:
    from ember.rdd import RDD


def _join(rdd: RDD, other: RDD, num_partitions: int | None, keep_right: bool,
          keep_left: bool) -> RDD:
    def dispatch(seq: Iterable) -> Iterator:
        vbuf, wbuf = [], []
        for n, v in seq:
            (vbuf if n == 1 else wbuf).append(v)
        if keep_right and not vbuf:
            vbuf.append(None)
        if keep_left and not wbuf:
            wbuf.append(None)
        return ((v, w) for v in vbuf for w in wbuf)

    vs = rdd.mapValues(lambda v: (1, v))
    ws = other.mapValues(lambda v: (2, v))
    return vs.union(ws).groupByKey(num_partitions).flatMapValues(lambda x: dispatch(iter(x)))


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
    tagged = [r.mapValues(lambda v, i=i: (i, v)) for i, r in enumerate(rdds)]
    n = len(tagged)

    def dispatch(seq: Iterable) -> tuple:
        bufs: list[list[Any]] = [[] for _ in range(n)]
        for i, v in seq:
            bufs[i].append(v)
        return tuple(ResultIterable(vs) for vs in bufs)
    union = reduce(lambda x, y: x.union(y), tagged)
    return union.groupByKey(numPartitions).mapValues(dispatch)
