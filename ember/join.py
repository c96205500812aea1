"""`pyspark.join`: the joins and cogroup of pair RDDs, as PySpark does them in Python: tag
each side's values, group by key once, then pair each key's values up (an outer side
without partners is paired with None)."""
from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING, Any, Iterable

from ember.resultiterable import ResultIterable

if TYPE_CHECKING:
    from ember.rdd import RDD


def _join(rdd: RDD, other: RDD, num_partitions: int | None, keep_right: bool,
          keep_left: bool) -> RDD:
    def dispatch(key_values: tuple) -> list:
        k, seq = key_values
        vbuf, wbuf = [], []
        for n, v in seq:
            (vbuf if n == 1 else wbuf).append(v)
        if keep_right and not vbuf:
            vbuf.append(None)
        if keep_left and not wbuf:
            wbuf.append(None)
        return [(k, (v, w)) for v in vbuf for w in wbuf]

    # one Python call a record to tag it and one list a key to pair them up: PySpark's
    # mapValues and flatMapValues here are two calls a record, and two generators a pair
    vs = rdd.map(lambda kv: (kv[0], (1, kv[1])), True)
    ws = other.map(lambda kv: (kv[0], (2, kv[1])), True)
    return vs.union(ws).groupByKey(num_partitions).flatMap(dispatch, True)


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
    tagged = [r.map(lambda kv, i=i: (kv[0], (i, kv[1])), True) for i, r in enumerate(rdds)]
    n = len(tagged)

    def dispatch(seq: Iterable) -> tuple:
        bufs: list[list[Any]] = [[] for _ in range(n)]
        for i, v in seq:
            bufs[i].append(v)
        return tuple(ResultIterable(vs) for vs in bufs)
    union = reduce(lambda x, y: x.union(y), tagged)
    return union.groupByKey(numPartitions).mapValues(dispatch)
