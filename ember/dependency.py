"""How an RDD depends on its parents: narrow (pipelined in one stage) or shuffle (a cut)."""
from __future__ import annotations

from typing import Any, Callable


class Dependency:
    def __init__(self, rdd: Any) -> None:
        self.rdd = rdd


class NarrowDependency(Dependency):
    def get_parents(self, partition_id: int) -> list[int]:
        raise NotImplementedError


class OneToOneDependency(NarrowDependency):
    def get_parents(self, partition_id: int) -> list[int]:
        return [partition_id]


class RangeDependency(NarrowDependency):
    """Child partitions [out_start, out_start+length) are parent partitions from in_start."""

    def __init__(self, rdd: Any, in_start: int, out_start: int, length: int) -> None:
        super().__init__(rdd)
        self.in_start, self.out_start, self.length = in_start, out_start, length

    def get_parents(self, partition_id: int) -> list[int]:
        if self.out_start <= partition_id < self.out_start + self.length:
            return [partition_id - self.out_start + self.in_start]
        return []


class ManyToOneDependency(NarrowDependency):
    """Each child partition reads a list of parent partitions (coalesce, cartesian, zip)."""

    def __init__(self, rdd: Any, parents_of: Callable[[int], list[int]]) -> None:
        super().__init__(rdd)
        self._parents_of = parents_of

    def get_parents(self, partition_id: int) -> list[int]:
        return self._parents_of(partition_id)


class ShuffleDependency(Dependency):
    """The map side `rdd` is bucketed into `num_partitions` by `partition_func(key)`."""

    def __init__(self, rdd: Any, shuffle_id: int, num_partitions: int,
                 partition_func: Callable[[Any], int], serializer: Any = None) -> None:
        super().__init__(rdd)
        self.shuffle_id = shuffle_id
        self.num_partitions = num_partitions
        self.partition_func = partition_func
        self.serializer = serializer       # SparkContext(serializer=...), None for pickle


def stage_rdds(rdd: Any) -> list[Any]:
    """`rdd` and its ancestors within its stage (through narrow dependencies only), each
    once, depth first: the one walk behind every per-stage question (its shuffle parents,
    its RDD infos, its barrier and resource-profile checks). A list, built at once: a warm
    job asks about a stage a dozen times."""
    seen: set[int] = set()
    out: list[Any] = []
    stack = [rdd]
    while stack:
        r = stack.pop()
        rid = r.id()
        if rid in seen:
            continue
        seen.add(rid)
        out.append(r)
        stack.extend(d.rdd for d in r.dependencies() if not isinstance(d, ShuffleDependency))
    return out
