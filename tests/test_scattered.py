"""Cached partitions of plain numbers scattered in memory are kept as arrays
(ember.storage.scattered); everything else, and numbers in order, stays the list it is."""
from __future__ import annotations

import random
import sys
from array import array

import pytest

import ember
from ember.storage.block_manager import BlockManager, estimate_size
from ember.storage import scattered as scattered_module
from ember.storage.scattered import MIN_LEN, in_order, packed

pytestmark = pytest.mark.skipif(sys.implementation.name != "cpython", reason="id is the address")
N = 3 * MIN_LEN


def scattered(values: list) -> list:
    """The same objects shuffled: their addresses no longer follow the list's order."""
    objects = list(values)
    random.Random(7).shuffle(objects)
    return objects


def test_numbers_in_order_stay_a_list(monkeypatch):
    """Fresh numbers usually lie in order, but not in a heap earlier tests left fragmented,
    so their addresses are given here (ascending and descending); one repeated object is
    the real thing."""
    floats = [i / 3 for i in range(N)]
    ints = [i * 1000 for i in range(N)]
    for values in (floats, ints):
        for step in (24, -32):
            address = {id(v): i * step for i, v in enumerate(values)}
            monkeypatch.setattr(scattered_module, "id", lambda o: address[id(o)],
                                raising=False)
            assert in_order(values) and packed(values) is values
            monkeypatch.undo()
    repeated = [1.5] * N
    assert in_order(repeated) and packed(repeated) is repeated


@pytest.mark.parametrize("make, code", [(lambda i: i / 3, "d"), (lambda i: i * 1000, "q")])
def test_scattered_numbers_become_an_array_of_the_same_values(make, code):
    values = scattered([make(i) for i in range(N)])
    assert not in_order(values)
    stored = packed(values)
    assert isinstance(stored, array) and stored.typecode == code
    assert list(stored) == values and all(type(a) is type(b) for a, b in zip(stored, values))


@pytest.mark.parametrize("odd", [True, 2 ** 70, 1.5, "x", None])
def test_a_scattered_list_with_anything_else_stays_a_list(odd):
    values = scattered([i * 1000 for i in range(N)])
    values[N // 3] = odd
    assert packed(values) is values


def test_short_and_other_lists_stay_lists():
    short = scattered([i / 3 for i in range(MIN_LEN - 1)])
    strings = scattered([str(i) for i in range(N)])
    assert packed(short) is short and packed(strings) is strings and packed([]) == []


def test_the_block_manager_keeps_an_array_and_counts_its_own_size(tmp_path):
    bm = BlockManager(str(tmp_path), 1 << 30)
    values = scattered([i / 3 for i in range(N)])
    assert bm._put_memory("rdd_1_0", values, ember.StorageLevel.MEMORY_ONLY)
    stored, size, _ = bm.memory["rdd_1_0"]
    assert isinstance(stored, array) and size == estimate_size(stored) == sys.getsizeof(stored)
    assert bm.export_to_disk() == ["rdd_1_0"]          # written as the floats they are
    from ember.storage.block_manager import read_batches
    assert list(read_batches(str(tmp_path / "rdd_1_0"))) == values


def _scatter_partition(it):
    return scattered(list(it))


def test_a_cached_rdd_of_scattered_floats_reads_the_same_every_time(fresh_sc):
    sc = fresh_sc("local[2]", "scattered",
                  conf=ember.SparkConf().set("spark.ui.enabled", "false"))
    rdd = sc.parallelize(range(N), 2).map(lambda i: i / 3) \
        .mapPartitions(_scatter_partition).cache()
    first = rdd.collect()
    assert sorted(first) == [i / 3 for i in range(N)]
    assert rdd.collect() == first and rdd.map(lambda x: x * 2).collect() == [x * 2 for x in first]
    assert {type(x) for x in rdd.collect()} == {float}
