"""Key → partition functions: PySpark's portable_hash and Partitioner.

portable_hash must give the same bucket for the same key in every process of every host,
which for str/bytes requires PYTHONHASHSEED to be set identically everywhere (PySpark's
PYTHON_HASH_SEED_NOT_SET check); Ember sets it to "0" for every process it spawns.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable

from ember.errors import PySparkRuntimeError


def portable_hash(x: Any) -> int:
    """Hash that is stable across processes (tuples hashed CPython-2.7 style, None -> 0)."""
    if "PYTHONHASHSEED" not in os.environ:
        raise PySparkRuntimeError(errorClass="PYTHON_HASH_SEED_NOT_SET", messageParameters={})
    if x is None:
        return 0
    if isinstance(x, tuple):
        h = 0x345678
        for i in x:
            h ^= portable_hash(i)
            h *= 1000003
            h &= sys.maxsize
        h ^= len(x)
        if h == -1:
            h = -2
        return int(h)
    return hash(x)


def round_robin_partition(k: int) -> int:
    """coalesce(shuffle=True)'s partitioner: its keys are a map task's running count from a
    random start, so record i goes to (start + i) % n, as in Spark. The shuffle writer
    takes these keys as they are (hash(k) == k for a count that small)."""
    return k


class Partitioner:
    """numPartitions plus a key function; equal partitioners mean co-partitioned RDDs."""

    def __init__(self, numPartitions: int, partitionFunc: Callable[[Any], int]) -> None:  # noqa: N803
        self.numPartitions = numPartitions
        self.partitionFunc = partitionFunc

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Partitioner) and self.numPartitions == other.numPartitions
                and self.partitionFunc == other.partitionFunc)

    def __hash__(self) -> int:
        return hash((self.numPartitions, id(self.partitionFunc)))

    def __call__(self, k: Any) -> int:
        return self.partitionFunc(k) % self.numPartitions
