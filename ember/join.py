"""`pyspark.join`: the joins and cogroup of pair RDDs, with PySpark's partitions and
answers. PySpark tags each value with its side (a Python call a record) and groups the
tagged union by key, on the map side and again on the reduce side. Here (CoGroupedRDD in
ember.rdd) the union is shuffled untagged and a reduce task reads each side from that
side's range of map outputs, grouping its records by key in a dict of its own (the
groupByKey loop, no Python call a record). A map task groups its records by key first
only when its first records show keys repeated (grouped_where_repeated): grouping records
whose keys seldom repeat within a task costs more than shuffling them."""
from __future__ import annotations

from itertools import chain, islice, repeat
from operator import itemgetter
from typing import TYPE_CHECKING, Any, Callable, Iterable, Iterator

from ember.resultiterable import ResultIterable

if TYPE_CHECKING:
    from ember.rdd import RDD

_NONE = ()          # a side without values for the key (never changed in place)
_SAMPLE = 4096      # records a map task looks at to choose
_REPEATS = 8        # values a key on average, at least, for a map task to group them
_FIRST = itemgetter(0)


def grouped_where_repeated(memory_limit_mb: int, local_dirs: list[str]
                           ) -> Callable[[Iterable], Iterator]:
    """The map side of a cogroup's shuffle. A task whose first _SAMPLE records hold
    _REPEATS values a key or more on average writes a record (k, (GROUPED, values)) a key
    (join on a key with few values, such as a country code: the shuffle then carries each
    key once a task); any other task writes its records as they are."""
    def side(records: Iterable) -> Iterator:
        from ember.shuffle.external import GROUPED, ExternalGroupBy
        rest = iter(records)
        head = list(islice(rest, _SAMPLE))
        if len(head) < _SAMPLE or len(set(map(_FIRST, head))) * _REPEATS > _SAMPLE:
            return chain(head, rest)
        merger = ExternalGroupBy(None, int(memory_limit_mb * 0.9), local_dirs=local_dirs,
                                 over_current_rss=True)
        merger.mergeValues(chain(head, rest))
        return ((k, (GROUPED, values)) for k, values in merger.lists())
    return side


def grouped_by_key(sides: list[Iterator], memory_limit_mb: int,
                   local_dirs: list[str]) -> Iterator[tuple[Any, tuple]]:
    """(key, (values in sides[0], values in sides[1], ...)) for every key of any side, in
    the order a groupByKey of the sides' union meets the keys, each side's values in the
    order it gives them (a map task's group of a key's values in its place). Each side is
    grouped in a merger of its own, all created before any is filled, so together they
    keep to the one budget; once one has spilled, the groups are grouped by key again on
    disk."""
    from ember.shuffle.external import ExternalGroupOfGroups
    mergers = [ExternalGroupOfGroups(None, memory_limit_mb, local_dirs=local_dirs,
                                     over_current_rss=True) for _ in sides]
    for merger, records in zip(mergers, sides):
        merger.mergeValues(records)
    if any(m.spills for m in mergers):
        return _regrouped(mergers, memory_limit_mb, local_dirs)
    dicts = [m.data for m in mergers]
    if len(dicts) == 2:
        first, second = dicts
        keys = first.keys()
        both = zip(keys, zip(first.values(), map(second.get, keys, repeat(_NONE))))
        return chain(both, ((k, (_NONE, ws)) for k, ws in second.items() if k not in first))
    return ((k, tuple(d.get(k, _NONE) for d in dicts))
            for i, d in enumerate(dicts) for k in d
            if not any(k in earlier for earlier in dicts[:i]))


def _regrouped(mergers: list, memory_limit_mb: int, local_dirs: list[str]
               ) -> Iterator[tuple[Any, tuple]]:
    from ember.shuffle.external import ExternalGroupBy
    merger = ExternalGroupBy(None, memory_limit_mb, local_dirs=local_dirs,
                             over_current_rss=True)
    for side, m in enumerate(mergers):
        merger.mergeValues((k, (side, values)) for k, values in m.lists())
    for k, groups in merger.items():
        per_side: list[list] = [[] for _ in mergers]
        for side, values in groups:
            per_side[side].extend(values)
        yield k, tuple(per_side)


def _join(rdd: RDD, other: RDD, num_partitions: int | None, keep_right: bool,
          keep_left: bool) -> RDD:
    def dispatch(key_values: tuple) -> list:
        k, (vs, ws) = key_values
        if keep_right and not vs:
            vs = (None,)
        if keep_left and not ws:
            ws = (None,)
        return [(k, (v, w)) for v in vs for w in ws]
    return rdd._cogroup_by_key([other], num_partitions).flatMap(dispatch, True)


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
    def dispatch(per_side: tuple) -> tuple:
        return tuple(ResultIterable(vs if vs.__class__ is list else list(vs))
                     for vs in per_side)
    return rdds[0]._cogroup_by_key(rdds[1:], numPartitions).mapValues(dispatch)
