"""Small pure functions that run inside tasks, shared by every engine.

Why a separate module: the functions shipped to executors must be identical for Ember,
PySpark, Dask and the serial baseline (so the answers can be compared), and they must
unpickle on executors that cannot import this checkout (a `spark://` cluster's workers).
The runner registers this module with cloudpickle *by value*, so keep it free of heavy
imports and of state: only the standard library.
"""
from __future__ import annotations

import random
from typing import Iterable, Iterator

SEED = 20240601


# ----------------------------------------------------------------------------- word count


def split_words(line: str) -> list[str]:
    return line.split()


def word_one(word: str) -> tuple[str, int]:
    return (word, 1)


def add(a: int, b: int) -> int:
    return a + b


def top_order(word_count: tuple[str, int]) -> tuple[int, str]:
    """Order for "top words": highest count first, ties broken by the word itself."""
    return (-word_count[1], word_count[0])


def top_rank(word_count: tuple[str, int]) -> tuple[int, tuple[int, ...]]:
    """Key whose *largest* values are the smallest top_order() (for dask's topk)."""
    return (word_count[1], tuple(-ord(c) for c in word_count[0]) + (0,))


# ----------------------------------------------------------------------------- pi


def slice_bounds(n: int, parts: int, index: int) -> tuple[int, int]:
    """Half-open range of items that partition `index` of `parts` owns out of `n`."""
    return (index * n) // parts, ((index + 1) * n) // parts


def darts(index: int, samples: Iterable[int]) -> Iterator[int]:
    """One 0/1 per sample: did a random point of [-1, 1]^2 land in the unit circle?

    Seeded by the partition index, so every engine draws the same points.
    """
    rnd = random.Random(SEED + index).random
    for _ in samples:
        x = rnd() * 2 - 1
        y = rnd() * 2 - 1
        yield 1 if x * x + y * y <= 1 else 0


def pi_partition(index: int, n: int, parts: int) -> Iterator[int]:
    lo, hi = slice_bounds(n, parts, index)
    return darts(index, range(lo, hi))


def pi_partition_hits(index: int, n: int, parts: int) -> int:
    return sum(pi_partition(index, n, parts))


# ----------------------------------------------------------------------------- sort


def random_pairs(index: int, n: int, parts: int) -> Iterator[tuple[int, int]]:
    """(random 40-bit key, global index) pairs of partition `index`, seeded by the index."""
    lo, hi = slice_bounds(n, parts, index)
    bits = random.Random(SEED * 31 + index).getrandbits
    for i in range(lo, hi):
        yield (bits(40), i)


def sorted_run_summary(index: int, pairs: Iterable[tuple[int, int]]) -> Iterator[tuple]:
    """(partition, count, first key, last key, keys non-decreasing?) of one sorted partition."""
    count = 0
    first = last = None
    ordered = True
    for key, _value in pairs:
        if count == 0:
            first = key
        elif key < last:
            ordered = False
        last = key
        count += 1
    if count:
        yield (index, count, first, last, ordered)


def combine_sort_summaries(summaries: Iterable[tuple]) -> list:
    """[count, first key, last key, globally sorted?] from per-partition summaries."""
    parts = sorted(summaries)
    total = sum(p[1] for p in parts)
    ordered = all(p[4] for p in parts) and all(
        a[3] <= b[2] for a, b in zip(parts, parts[1:])
    )
    if not parts:
        return [0, None, None, True]
    return [total, parts[0][2], parts[-1][3], ordered]


# ----------------------------------------------------------------------------- iterative


def half(i: int) -> float:
    return i * 0.5


def step(x: float) -> float:
    return x * 1.0001 + 1


# ----------------------------------------------------------------------------- partitions


def fact_pairs(index: int, n: int, parts: int, keys: int) -> Iterator[tuple[int, int]]:
    """(key below `keys`, global index) pairs of partition `index`: a join's large side,
    each key about n / keys times."""
    lo, hi = slice_bounds(n, parts, index)
    below = random.Random(SEED * 37 + index).randrange
    for i in range(lo, hi):
        yield (below(keys), i)


def dimension_pairs(index: int, keys: int, parts: int) -> Iterator[tuple[int, int]]:
    """(key, key % 1000) for partition `index`'s share of the keys: a join's small side,
    one row a key."""
    lo, hi = slice_bounds(keys, parts, index)
    for k in range(lo, hi):
        yield (k, k % 1000)


def joined_sum(kv: tuple[int, tuple[int, int]]) -> tuple[int, int]:
    """(key, (left, right)) of a join -> (key, left + right)."""
    left, right = kv[1]
    return (kv[0], left + right)


def dask_joined_sum(other_self: tuple) -> tuple[int, int]:
    """((key, right), (key, left)) of dask.bag's join -> (key, left + right)."""
    (_, right), (key, left) = other_self
    return (key, left + right)


def key_of(pair: tuple) -> object:
    return pair[0]


def count_and_sum(pairs: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(records, sum of values) of one partition: an answer that ignores record order."""
    count = total = 0
    for _key, value in pairs:
        count += 1
        total += value
    yield (count, total)
