"""Conformance tests for the RDD API (reference §8.2), derived from PySpark's documented
behaviour: the docstring examples of python/pyspark/core/rdd.py (and the RDD-related ones
of core/context.py), plus PySpark's own test_rdd.py cases for histogram and friends.

Every example keeps PySpark's expected output; only `sc` comes from the shared fixture
(local[2]). Examples whose output depends on the number of partitions pass numSlices
explicitly, as the docstrings do.
"""
from __future__ import annotations

import glob
import gzip
import operator
import os
import pickle
import sys
import threading
from fileinput import hook_compressed, input as finput
from operator import add

import pytest

import ember as pyspark
from ember import StorageLevel
from ember.errors import SparkException
from ember.resultiterable import ResultIterable

pytestmark = pytest.mark.timeout(60)


def _sorted_groups(pairs):
    return sorted((k, sorted(v)) for k, v in pairs)


# --------------------------------------------------------------------------- basics


def test_context_property_and_id(sc):
    rdd = sc.range(5)
    assert rdd.context is sc
    assert isinstance(rdd.id(), int)
    assert rdd.id() != sc.range(5).id()


def test_name_and_set_name(sc):
    rdd = sc.range(5)
    assert rdd.name() is None
    rdd2 = sc.parallelize([1, 2])
    assert rdd2.setName("I am an RDD") is rdd2
    assert rdd2.name() == "I am an RDD"


def test_get_num_partitions(sc):
    assert sc.parallelize([1, 2, 3, 4], 2).getNumPartitions() == 2
    assert sc.range(5, numSlices=1).getNumPartitions() == 1
    assert sc.range(5, numSlices=10).getNumPartitions() == 10


def test_to_debug_string_is_bytes(sc):
    s = sc.range(5).map(lambda x: x).toDebugString()
    assert isinstance(s, bytes)
    assert b"ParallelCollectionRDD" in s


def test_collect(sc):
    assert sc.range(5).collect() == [0, 1, 2, 3, 4]
    assert sc.parallelize(["x", "y", "z"]).collect() == ["x", "y", "z"]


# --------------------------------------------------------------------------- narrow transformations


def test_map(sc):
    rdd = sc.parallelize(["b", "a", "c"])
    assert sorted(rdd.map(lambda x: (x, 1)).collect()) == [("a", 1), ("b", 1), ("c", 1)]


def test_flat_map(sc):
    rdd = sc.parallelize([2, 3, 4])
    assert sorted(rdd.flatMap(lambda x: range(1, x)).collect()) == [1, 1, 1, 2, 2, 3]
    assert sorted(rdd.flatMap(lambda x: [(x, x), (x, x)]).collect()) == [
        (2, 2), (2, 2), (3, 3), (3, 3), (4, 4), (4, 4)]


def test_map_partitions(sc):
    rdd = sc.parallelize([1, 2, 3, 4], 2)

    def f(iterator):
        yield sum(iterator)
    assert rdd.mapPartitions(f).collect() == [3, 7]


def test_map_partitions_with_index(sc):
    rdd = sc.parallelize([1, 2, 3, 4], 4)

    def f(split_index, iterator):
        yield split_index
    assert rdd.mapPartitionsWithIndex(f).sum() == 6
    assert sc.parallelize(range(6), 3).mapPartitionsWithIndex(
        lambda i, it: [(i, list(it))]).collect() == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])]


def test_map_partitions_with_split_is_deprecated(sc):
    rdd = sc.parallelize([1, 2, 3, 4], 4)

    def f(split_index, iterator):
        yield split_index
    with pytest.warns(FutureWarning):
        mapped = rdd.mapPartitionsWithSplit(f)
    assert mapped.sum() == 6


def test_filter(sc):
    assert sc.parallelize([1, 2, 3, 4, 5]).filter(lambda x: x % 2 == 0).collect() == [2, 4]


def test_pipelined_maps_and_reduces(sc):
    rdd = sc.parallelize([1, 2, 3, 4])
    assert rdd.map(lambda x: 2 * x).cache().map(lambda x: 2 * x).collect() == [4, 8, 12, 16]
    assert rdd.map(lambda x: 2 * x).map(lambda x: 2 * x).collect() == [4, 8, 12, 16]
    assert rdd.map(lambda x: 2 * x).reduce(add) == 20
    assert rdd.flatMap(lambda x: [x, x]).reduce(add) == 20


def test_glom_and_parallelize_slicing(sc):
    assert sorted(sc.parallelize([1, 2, 3, 4], 2).glom().collect()) == [[1, 2], [3, 4]]
    assert sc.parallelize([0, 2, 3, 4, 6], 5).glom().collect() == [[0], [2], [3], [4], [6]]
    assert sc.parallelize(range(0, 6, 2), 5).glom().collect() == [[], [0], [], [2], [4]]
    assert sc.parallelize(["a", "b", "c"], 2).glom().collect() == [["a"], ["b", "c"]]
    assert sc.parallelize([1, 2, 3, 4, 5], 3).glom().collect() == [[1], [2, 3], [4, 5]]


def test_parallelize_generator(sc):
    assert sc.parallelize((2 for _ in range(10))).map(lambda x: 1).cache().reduce(add) == 10


def test_parallelize_pickles_the_collection_once_as_pyspark(sc):
    """The slices are pickled when parallelize is called (PySpark hands them to its JVM
    then): later changes to the records do not reach the RDD, every job reads the same
    data, and what cannot be pickled fails there, with PySpark's PicklingError."""
    from ember.errors import PicklingError
    records = [[1], [2], [3]]
    rdd = sc.parallelize(records, 2)
    records[0].append(99)
    assert rdd.collect() == [[1], [2], [3]] == rdd.collect()
    assert sc.parallelize([lambda: 5]).map(lambda f: f()).collect() == [5]
    with pytest.raises(PicklingError, match="Could not serialize object: TypeError: "
                                            "cannot pickle '_thread.lock' object"):
        sc.parallelize([1, threading.Lock()])


def test_range(sc):
    assert sc.range(5).collect() == [0, 1, 2, 3, 4]
    assert sc.range(2, 4).collect() == [2, 3]
    assert sc.range(1, 7, 2).collect() == [1, 3, 5]
    assert sc.range(5, 0, -1).collect() == [5, 4, 3, 2, 1]
    assert sc.range(0, 5, -1).collect() == []


def test_coalesce(sc):
    assert sc.parallelize([1, 2, 3, 4, 5], 3).coalesce(1).glom().collect() == [[1, 2, 3, 4, 5]]
    # Spark's DefaultPartitionCoalescer without locality: contiguous ranges of parents
    assert sc.parallelize(range(10), 5).coalesce(2).glom().collect() == [
        [0, 1, 2, 3], [4, 5, 6, 7, 8, 9]]
    # coalesce without shuffle never increases the partition count
    assert sc.parallelize(range(4), 2).coalesce(5).getNumPartitions() == 2
    grown = sc.parallelize(range(4), 2).coalesce(5, shuffle=True)
    assert grown.getNumPartitions() == 5
    assert sorted(grown.collect()) == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="must be positive"):
        sc.parallelize([1]).coalesce(0)


def test_repartition(sc):
    rdd = sc.parallelize([1, 2, 3, 4, 5, 6, 7], 4)
    assert sorted(rdd.glom().collect()) == [[1], [2, 3], [4, 5], [6, 7]]
    assert len(rdd.repartition(2).glom().collect()) == 2
    assert len(rdd.repartition(10).glom().collect()) == 10
    assert sorted(rdd.repartition(3).collect()) == [1, 2, 3, 4, 5, 6, 7]
    # Spark's round robin: record i of input partition j goes to (start + 1 + i) % n, from
    # start = random.Random(j).randint(0, n - 1)
    import random
    data = sc.parallelize(list(range(100)) + [None, (1, "a"), "b"], 3)
    expected: list[list] = [[] for _ in range(4)]
    for j, part in enumerate(data.glom().collect()):
        start = random.Random(j).randint(0, 3)
        for i, x in enumerate(part):
            expected[(start + 1 + i) % 4].append(x)
    assert [sorted(p, key=repr) for p in data.repartition(4).glom().collect()] == \
        [sorted(p, key=repr) for p in expected]


def test_distinct(sc):
    assert sorted(sc.parallelize([1, 1, 2, 3]).distinct().collect()) == [1, 2, 3]
    d = sc.parallelize([1, 1, 2, 3, 3, 3], 2).distinct(3)
    assert d.getNumPartitions() == 3
    assert sorted(d.collect()) == [1, 2, 3]


def test_union_and_add(sc):
    rdd = sc.parallelize([1, 1, 2, 3])
    assert rdd.union(rdd).collect() == [1, 1, 2, 3, 1, 1, 2, 3]
    assert (rdd + rdd).collect() == [1, 1, 2, 3, 1, 1, 2, 3]
    with pytest.raises(TypeError):
        rdd + [1]


def test_context_union(sc, tmp_path):
    with open(tmp_path / "union-text.txt", "w") as f:
        f.write("Hello")
    text_rdd = sc.textFile(str(tmp_path))
    parallelized = sc.parallelize(["World!"])
    assert sorted(sc.union([text_rdd, parallelized]).collect()) == ["Hello", "World!"]


def test_union_of_copartitioned_rdds_keeps_partitioner(sc):
    p = sc.parallelize([(1, 1), (2, 2), (3, 3)], 3).partitionBy(2)
    u = p.union(sc.parallelize([(4, 4)], 1).partitionBy(2))
    assert u.getNumPartitions() == 2
    assert u.partitioner == p.partitioner


def test_intersection(sc):
    rdd1 = sc.parallelize([1, 10, 2, 3, 4, 5])
    rdd2 = sc.parallelize([1, 6, 2, 3, 7, 8])
    assert sorted(rdd1.intersection(rdd2).collect()) == [1, 2, 3]
    # no duplicates in the output even if the inputs had them
    assert sorted(sc.parallelize([1, 1, 2]).intersection(sc.parallelize([1, 1])).collect()) == [1]


def test_set_operations_keep_pysparks_partitions_and_elements(sc):
    """distinct, intersection and subtract count elements instead of grouping tags (as
    PySpark's cogroup does): the same partition counts, and of equal elements of different
    types (1, 1.0, True) the first one met, as a grouping keeps it."""
    a = sc.parallelize([1, 1.0, True, 2, 2, 3, None, None, "x"], 3)
    b = sc.parallelize([2, 2, None, "y"], 2)
    assert a.distinct().getNumPartitions() == 3
    assert sorted(map(repr, a.distinct().collect())) == ["'x'", "1", "2", "3", "None"]
    assert a.intersection(b).getNumPartitions() == 5
    assert sorted(map(repr, a.intersection(b).collect())) == ["2", "None"]
    assert a.subtract(b).getNumPartitions() == 5
    assert a.subtract(b, 4).getNumPartitions() == 4
    assert sorted(map(repr, a.subtract(b).collect())) == ["'x'", "1", "1", "1", "3"]
    assert [type(x) for x in a.subtract(b).collect() if x == 1] == [int] * 3
    copartitioned = a.map(lambda x: (x, 0)).partitionBy(2).keys()
    assert copartitioned.intersection(copartitioned).getNumPartitions() == 4
    assert sc.parallelize([], 2).intersection(b).collect() == []
    assert sorted(b.subtract(sc.parallelize([], 2)).collect(), key=repr) == ["y", 2, 2, None]
    with pytest.raises(Exception, match="unhashable type"):
        sc.parallelize([[1]]).distinct().collect()


def test_set_operations_over_a_spilling_budget(sc):
    """Counts that spill (spark.python.worker.memory 1m) give the same answers as Python's
    own sets and counters."""
    import random
    from collections import Counter
    rng = random.Random(7)
    left = [str(rng.randrange(30_000)) for _ in range(120_000)]
    right = [str(rng.randrange(20_000, 50_000)) for _ in range(60_000)]
    old = sc._conf.get("spark.python.worker.memory")
    sc._conf.set("spark.python.worker.memory", "1m")
    try:
        a, b = sc.parallelize(left, 4), sc.parallelize(right, 3)
        assert sorted(a.distinct().collect()) == sorted(set(left))
        assert sorted(a.intersection(b).collect()) == sorted(set(left) & set(right))
        counts, other = Counter(left), set(right)
        assert Counter(a.subtract(b).collect()) == \
            Counter({k: c for k, c in counts.items() if k not in other})
    finally:
        sc._conf.set("spark.python.worker.memory", old or "512m")


def test_cartesian(sc):
    rdd = sc.parallelize([1, 2])
    assert sorted(rdd.cartesian(rdd).collect()) == [(1, 1), (1, 2), (2, 1), (2, 2)]
    c = sc.parallelize([1, 2, 3], 3).cartesian(sc.parallelize(["a", "b"], 2))
    assert c.getNumPartitions() == 6
    assert c.count() == 6


def test_group_by(sc):
    rdd = sc.parallelize([1, 1, 2, 3, 5, 8])
    result = rdd.groupBy(lambda x: x % 2).collect()
    assert sorted([(x, sorted(y)) for (x, y) in result]) == [(0, [2, 8]), (1, [1, 1, 3, 5])]


def test_pipe(sc):
    assert sc.parallelize(["1", "2", "", "3"]).pipe("cat").collect() == ["1", "2", "", "3"]
    assert sc.parallelize([1, 2, 3], 1).pipe("wc -l").map(lambda s: int(s.strip())).collect() \
        == [3]


def test_pipe_env(sc):
    out = sc.parallelize(["x"], 1).pipe("sh -c 'echo $EMBER_PIPE_VAR'",
                                        env={"EMBER_PIPE_VAR": "hello"}).collect()
    assert out == ["hello"]


def test_pipe_check_code(sc):
    rdd = sc.parallelize(["1"], 1).pipe("sh -c 'cat; exit 3'", checkCode=True)
    with pytest.raises(Exception) as ei:
        rdd.collect()
    assert "exited with error code 3" in str(ei.value) or "PIPE_FUNCTION_EXITED" in str(ei.value)
    # without checkCode the exit status is ignored
    assert sc.parallelize(["1"], 1).pipe("sh -c 'cat; exit 3'").collect() == ["1"]
    assert sc.parallelize([1, 2]).count() == 2


def test_key_by_keys_values(sc):
    rdd1 = sc.parallelize(range(0, 3)).keyBy(lambda x: x * x)
    rdd2 = sc.parallelize(zip(range(0, 5), range(0, 5)))
    assert [(x, list(map(list, y))) for x, y in sorted(rdd1.cogroup(rdd2).collect())] == [
        (0, [[0], [0]]), (1, [[1], [1]]), (2, [[], [2]]), (3, [[], [3]]), (4, [[2], [4]])]
    assert sc.parallelize([(1, 2), (3, 4)]).keys().collect() == [1, 3]
    assert sc.parallelize([(1, 2), (3, 4)]).values().collect() == [2, 4]


def test_map_values_and_flat_map_values(sc):
    rdd = sc.parallelize([("a", ["apple", "banana", "lemon"]), ("b", ["grapes"])])
    assert rdd.mapValues(len).collect() == [("a", 3), ("b", 1)]
    rdd = sc.parallelize([("a", ["x", "y", "z"]), ("b", ["p", "r"])])
    assert rdd.flatMapValues(lambda x: x).collect() == [
        ("a", "x"), ("a", "y"), ("a", "z"), ("b", "p"), ("b", "r")]


def test_zip(sc):
    rdd1 = sc.parallelize(range(0, 5))
    rdd2 = sc.parallelize(range(1000, 1005))
    assert rdd1.zip(rdd2).collect() == [(0, 1000), (1, 1001), (2, 1002), (3, 1003), (4, 1004)]


def test_zip_partition_count_mismatch(sc):
    with pytest.raises(ValueError, match="Can only zip with RDD which has the same number of "
                                         "partitions"):
        sc.parallelize(range(4), 2).zip(sc.parallelize(range(4), 3))
    assert sc.parallelize([1, 2]).count() == 2


def test_zip_element_count_mismatch(sc):
    z = sc.parallelize(range(4), 2).zip(sc.parallelize(range(6), 2))
    with pytest.raises(Exception, match="same number of elements in each partition"):
        z.collect()
    assert sc.parallelize([1, 2]).count() == 2


def test_zip_with_index(sc):
    assert sc.parallelize(["a", "b", "c", "d"], 3).zipWithIndex().collect() == [
        ("a", 0), ("b", 1), ("c", 2), ("d", 3)]
    assert sc.parallelize(range(7), 3).zipWithIndex().map(lambda t: t[1]).collect() == \
        list(range(7))
    assert sc.parallelize(["only"], 1).zipWithIndex().collect() == [("only", 0)]


def test_zip_with_unique_id(sc):
    assert sc.parallelize(["a", "b", "c", "d", "e"], 3).zipWithUniqueId().collect() == [
        ("a", 0), ("b", 1), ("c", 4), ("d", 2), ("e", 5)]


# --------------------------------------------------------------------------- sampling


def test_sample(sc):
    rdd = sc.parallelize(range(100), 4)
    assert 6 <= rdd.sample(False, 0.1, 81).count() <= 14
    assert rdd.sample(False, 0.3, 7).collect() == rdd.sample(False, 0.3, 7).collect()
    assert rdd.sample(True, 0.5, 7).collect() == rdd.sample(True, 0.5, 7).collect()
    assert set(rdd.sample(False, 0.5, 3).collect()) <= set(range(100))
    assert rdd.sample(False, 0.0, 1).collect() == []
    assert sorted(rdd.sample(False, 1.0, 1).collect()) == list(range(100))
    with pytest.raises(ValueError, match="Fraction must be nonnegative"):
        rdd.sample(False, -0.1)


def test_random_split(sc):
    rdd = sc.parallelize(range(500), 1)
    rdd1, rdd2 = rdd.randomSplit([2, 3], 17)
    assert len(rdd1.collect() + rdd2.collect()) == 500
    assert 150 < rdd1.count() < 250
    assert 250 < rdd2.count() < 350
    assert sorted(rdd1.collect() + rdd2.collect()) == list(range(500))
    assert not set(rdd1.collect()) & set(rdd2.collect())
    a, b = rdd.randomSplit([2, 3], 17)
    assert a.collect() == rdd1.collect() and b.collect() == rdd2.collect()
    with pytest.raises(ValueError, match="Weights must be nonnegative"):
        rdd.randomSplit([-1, 2])
    with pytest.raises(ValueError, match="Sum of weights must be positive"):
        rdd.randomSplit([0, 0])


def test_take_sample(sc):
    rdd = sc.parallelize(range(0, 10))
    assert len(rdd.takeSample(True, 20, 1)) == 20
    assert len(rdd.takeSample(False, 5, 2)) == 5
    assert len(rdd.takeSample(False, 15, 3)) == 10
    assert sorted(rdd.takeSample(False, 15, 3)) == list(range(10))
    assert rdd.takeSample(False, 5, 2) == rdd.takeSample(False, 5, 2)
    assert len(set(rdd.takeSample(False, 5, 2))) == 5
    assert rdd.takeSample(False, 0) == []
    assert sc.parallelize([]).takeSample(False, 3, 1) == []
    with pytest.raises(ValueError, match="Sample size cannot be negative"):
        rdd.takeSample(False, -1)


def test_take_sample_too_large(sc):
    with pytest.raises(ValueError, match="Sample size cannot be greater than"):
        sc.range(0, 10).takeSample(False, sys.maxsize)


def test_sample_by_key(sc):
    fractions = {"a": 0.2, "b": 0.1}
    rdd = sc.parallelize(fractions.keys()).cartesian(sc.parallelize(range(0, 1000)))
    sample = dict(rdd.sampleByKey(False, fractions, 2).groupByKey().collect())
    assert 100 < len(sample["a"]) < 300 and 50 < len(sample["b"]) < 150
    assert max(sample["a"]) <= 999 and min(sample["a"]) >= 0
    assert max(sample["b"]) <= 999 and min(sample["b"]) >= 0
    again = dict(rdd.sampleByKey(False, fractions, 2).groupByKey().collect())
    assert sorted(again["a"]) == sorted(sample["a"])


# --------------------------------------------------------------------------- shuffles


def test_partition_by(sc):
    pairs = sc.parallelize([1, 2, 3, 4, 2, 4, 1]).map(lambda x: (x, x))
    sets = pairs.partitionBy(2).glom().collect()
    assert len(set(sets[0]).intersection(set(sets[1]))) == 0
    # bucket = portable_hash(k) % numPartitions; small ints hash to themselves
    assert sorted(sets[0]) == [(2, 2), (2, 2), (4, 4), (4, 4)]
    assert sorted(sets[1]) == [(1, 1), (1, 1), (3, 3)]
    custom = pairs.partitionBy(3, lambda k: 0).glom().collect()
    assert len(custom[0]) == 7 and custom[1] == [] and custom[2] == []


def test_partitioner_semantics(sc):
    pairs = sc.parallelize([1, 2, 3, 4, 2, 4, 1]).map(lambda x: (x, x))
    assert pairs.partitioner is None
    p = pairs.partitionBy(2)
    # Partitioner equality = same numPartitions and the same partitionFunc (portable_hash)
    assert p.partitioner is not None
    assert p.partitioner == pairs.partitionBy(2).partitioner
    assert p.partitioner != pairs.partitionBy(3).partitioner
    assert p.partitioner.numPartitions == 2
    assert p.partitioner(3) == 1
    # an already partitioned RDD is returned as is
    assert p.partitionBy(2) is p
    # narrow ops that keep keys keep the partitioner; map does not
    assert p.mapValues(lambda v: v + 1).partitioner == p.partitioner
    assert p.flatMapValues(lambda v: [v]).partitioner == p.partitioner
    assert p.filter(lambda kv: True).partitioner == p.partitioner
    assert p.map(lambda kv: kv).partitioner is None
    assert p.map(lambda kv: kv, preservesPartitioning=True).partitioner == p.partitioner
    assert p.reduceByKey(add).partitioner == p.partitioner


def test_reduce_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 1)])
    assert sorted(rdd.reduceByKey(add).collect()) == [("a", 2), ("b", 1)]
    r = sc.parallelize([(i % 3, 1) for i in range(30)], 4).reduceByKey(add, 5)
    assert r.getNumPartitions() == 5
    assert sorted(r.collect()) == [(0, 10), (1, 10), (2, 10)]


def test_reduce_by_key_default_partitions_follow_parent(sc):
    # without spark.default.parallelism the parent's partition count is used
    assert sc.parallelize([(1, 1)], 3).reduceByKey(add).getNumPartitions() == 3
    assert sc.parallelize([(1, 1)], 3).groupByKey().getNumPartitions() == 3


def test_reduce_by_key_locally(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 1)])
    assert sorted(rdd.reduceByKeyLocally(add).items()) == [("a", 2), ("b", 1)]


def test_combine_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 2)])

    def to_list(a):
        return [a]

    def append(a, b):
        a.append(b)
        return a

    def extend(a, b):
        a.extend(b)
        return a
    assert sorted(rdd.combineByKey(to_list, append, extend).collect()) == [
        ("a", [1, 2]), ("b", [1])]


def test_aggregate_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 2)])

    def seq(x, y):
        return (x[0] + y, x[1] + 1)

    def comb(x, y):
        return (x[0] + y[0], x[1] + y[1])
    assert sorted(rdd.aggregateByKey((0, 0), seq, comb).collect()) == [
        ("a", (3, 2)), ("b", (1, 1))]
    # the zero value is copied, never shared between keys
    def append(acc, v):
        acc.append(v)
        return acc
    lists = sc.parallelize([("a", 1), ("b", 2), ("a", 3)], 2).aggregateByKey(
        [], append, lambda a, b: a + b)
    assert sorted((k, sorted(v)) for k, v in lists.collect()) == [("a", [1, 3]), ("b", [2])]


def test_fold_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 1)])
    assert sorted(rdd.foldByKey(0, add).collect()) == [("a", 2), ("b", 1)]


def test_group_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 1)])
    assert sorted(rdd.groupByKey().mapValues(len).collect()) == [("a", 2), ("b", 1)]
    assert sorted(rdd.groupByKey().mapValues(list).collect()) == [("a", [1, 1]), ("b", [1])]
    grouped = rdd.groupByKey().collect()
    assert all(isinstance(v, ResultIterable) for _, v in grouped)


def test_sort_by_key(sc):
    tmp = [("a", 1), ("b", 2), ("1", 3), ("d", 4), ("2", 5)]
    assert sc.parallelize(tmp).sortByKey().first() == ("1", 3)
    assert sc.parallelize(tmp).sortByKey(True, 1).collect() == [
        ("1", 3), ("2", 5), ("a", 1), ("b", 2), ("d", 4)]
    assert sc.parallelize(tmp).sortByKey(True, 2).collect() == [
        ("1", 3), ("2", 5), ("a", 1), ("b", 2), ("d", 4)]
    tmp2 = [("Mary", 1), ("had", 2), ("a", 3), ("little", 4), ("lamb", 5)]
    tmp2.extend([("whose", 6), ("fleece", 7), ("was", 8), ("white", 9)])
    assert sc.parallelize(tmp2).sortByKey(True, 3, keyfunc=lambda k: k.lower()).collect() == [
        ("a", 3), ("fleece", 7), ("had", 2), ("lamb", 5), ("little", 4), ("Mary", 1),
        ("was", 8), ("white", 9), ("whose", 6)]


def test_sort_by_key_descending_and_partitions(sc):
    tmp = [("a", 1), ("b", 2), ("1", 3), ("d", 4), ("2", 5)]
    assert sc.parallelize(tmp).sortByKey(False).collect() == [
        ("d", 4), ("b", 2), ("a", 1), ("2", 5), ("1", 3)]
    assert sc.parallelize(tmp).sortByKey(False, 1).collect() == [
        ("d", 4), ("b", 2), ("a", 1), ("2", 5), ("1", 3)]
    data = [(i * 37 % 101, i) for i in range(101)]
    asc = sc.parallelize(data, 4).sortByKey(True, 3)
    assert asc.getNumPartitions() == 3
    assert [k for k, _ in asc.collect()] == list(range(101))
    desc = sc.parallelize(data, 4).sortByKey(ascending=False, numPartitions=3)
    assert [k for k, _ in desc.collect()] == list(range(100, -1, -1))
    # every partition holds a contiguous, sorted key range
    parts = desc.glom().collect()
    assert [k for part in parts for k, _ in part] == list(range(100, -1, -1))
    neg = sc.parallelize(data, 4).sortByKey(False, 3, keyfunc=lambda k: -k)
    assert [k for k, _ in neg.collect()] == list(range(101))


def test_sort_by_key_empty(sc):
    assert sc.parallelize([], 2).sortByKey().collect() == []


def test_sort_by(sc):
    tmp = [("a", 1), ("b", 2), ("1", 3), ("d", 4), ("2", 5)]
    assert sc.parallelize(tmp).sortBy(lambda x: x[0]).collect() == [
        ("1", 3), ("2", 5), ("a", 1), ("b", 2), ("d", 4)]
    assert sc.parallelize(tmp).sortBy(lambda x: x[1]).collect() == [
        ("a", 1), ("b", 2), ("1", 3), ("d", 4), ("2", 5)]
    assert sc.parallelize(tmp).sortBy(lambda x: x[1], ascending=False).collect() == [
        ("2", 5), ("d", 4), ("1", 3), ("b", 2), ("a", 1)]
    s = sc.parallelize(range(50), 4).sortBy(lambda x: -x, True, 3)
    assert s.getNumPartitions() == 3
    assert s.collect() == list(range(49, -1, -1))


def test_sort_by_samples_the_elements_and_keys_only_the_sample(sc):
    """sortBy's range bounds come from a sample of the elements that only then are keyed
    (in the task): the same bounds as sampling the keyBy'd pairs, also when a partition
    the reservoir under-represents is sampled again, and f runs on each element once
    (for the shuffle) plus once for each sampled one."""
    import random
    from ember.rdd import _identity
    rng = random.Random(3)
    even = sc.parallelize([rng.random() for _ in range(20_000)], 4)
    skewed = sc.union([sc.parallelize(range(30_000), 1), sc.parallelize(range(50), 3)])
    def negated(x):
        return x if isinstance(x, str) else -x
    for rdd, n in ((even, 7), (skewed, 5), (sc.parallelize(["b", "a"], 2), 3)):
        keyed = rdd.keyBy(negated)
        assert keyed._range_bounds(n, _identity, (rdd, negated)) == \
            keyed._range_bounds(n, _identity)
    calls = sc.accumulator(0)

    def key(x):
        calls.add(1)
        return -x
    assert even.sortBy(key, numPartitions=7).collect() == sorted(even.collect(), reverse=True)
    assert 20_000 < calls.value < 20_000 + 7 * 20 * 3 + 100


def test_repartition_and_sort_within_partitions(sc):
    rdd = sc.parallelize([(0, 5), (3, 8), (2, 6), (0, 8), (3, 8), (1, 3)])
    rdd2 = rdd.repartitionAndSortWithinPartitions(2, lambda x: x % 2, True)
    assert rdd2.glom().collect() == [[(0, 5), (0, 8), (2, 6)], [(1, 3), (3, 8), (3, 8)]]
    rdd3 = rdd.repartitionAndSortWithinPartitions(2, lambda x: x % 2, False)
    assert [[k for k, _ in p] for p in rdd3.glom().collect()] == [[2, 0, 0], [3, 3, 1]]


def test_join(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4)])
    rdd2 = sc.parallelize([("a", 2), ("a", 3)])
    assert sorted(rdd1.join(rdd2).collect()) == [("a", (1, 2)), ("a", (1, 3))]
    j = rdd1.join(rdd2, 3)
    assert j.getNumPartitions() == 3


def test_left_outer_join(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4)])
    rdd2 = sc.parallelize([("a", 2)])
    assert sorted(rdd1.leftOuterJoin(rdd2).collect()) == [("a", (1, 2)), ("b", (4, None))]


def test_right_outer_join(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4)])
    rdd2 = sc.parallelize([("a", 2)])
    assert sorted(rdd2.rightOuterJoin(rdd1).collect()) == [("a", (2, 1)), ("b", (None, 4))]


def test_full_outer_join(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4)])
    rdd2 = sc.parallelize([("a", 2), ("c", 8)])
    assert sorted(rdd1.fullOuterJoin(rdd2).collect()) == [
        ("a", (1, 2)), ("b", (4, None)), ("c", (None, 8))]


def test_cogroup(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4)])
    rdd2 = sc.parallelize([("a", 2)])
    assert [(x, tuple(map(list, y))) for x, y in sorted(list(rdd1.cogroup(rdd2).collect()))] \
        == [("a", ([1], [2])), ("b", ([4], []))]
    assert rdd1.cogroup(rdd2, 4).getNumPartitions() == 4


def test_group_with(sc):
    rdd1 = sc.parallelize([("a", 5), ("b", 6)])
    rdd2 = sc.parallelize([("a", 1), ("b", 4)])
    rdd3 = sc.parallelize([("a", 2)])
    rdd4 = sc.parallelize([("b", 42)])
    assert [(x, tuple(map(list, y))) for x, y in
            sorted(list(rdd1.groupWith(rdd2, rdd3, rdd4).collect()))] == [
        ("a", ([5], [1], [2], [])), ("b", ([6], [4], [], [42]))]
    assert [(x, tuple(map(list, y))) for x, y in sorted(rdd1.groupWith(rdd3).collect())] == [
        ("a", ([5], [2])), ("b", ([6], []))]


def test_joins_shuffle_the_sides_once_and_group_each_side_by_key(sc):
    """join and cogroup shuffle their sides' union once (co-partitioned sides not at all,
    PySpark's stages either way) and group each side by key on the reduce side: each
    side's values keep the order a groupByKey of the union meets them, and spilled groups
    give the same answers."""
    from ember.dependency import ShuffleDependency, stage_rdds
    left = sc.parallelize([(k % 3, i) for i, k in enumerate(range(12))], 3)
    right = sc.parallelize([(0, "x"), (1, "y"), (0, "z")], 2)
    assert [(k, tuple(map(list, vs))) for k, vs in sorted(left.cogroup(right).collect())] == [
        (0, ([0, 3, 6, 9], ["x", "z"])), (1, ([1, 4, 7, 10], ["y"])), (2, ([2, 5, 8, 11], []))]
    assert sorted(left.join(right).collect()) == sorted(
        (k, (v, w)) for k, v in left.collect() for k2, w in right.collect() if k == k2)
    assert left.join(right).getNumPartitions() == 5
    a, b = left.partitionBy(4), right.partitionBy(4)
    joined = a.join(b)
    shuffles = [d for r in stage_rdds(joined) for d in r.dependencies()
                if isinstance(d, ShuffleDependency)]
    assert joined.getNumPartitions() == 4 and len(shuffles) == 2   # a's and b's own
    assert sorted(joined.collect()) == sorted(left.join(right).collect())
    plain = left.join(right)
    assert len([d for r in stage_rdds(plain) for d in r.dependencies()
                if isinstance(d, ShuffleDependency)]) == 1
    one_side = left.partitionBy(5).join(right, 5)          # as PySpark: both shuffled
    assert len([d for r in stage_rdds(one_side) for d in r.dependencies()
                if isinstance(d, ShuffleDependency)]) == 1
    assert sorted(one_side.collect()) == sorted(plain.collect())
    assert a.groupWith(b, sc.parallelize([(2, True)], 3)).getNumPartitions() == 4 + 3
    c = sc.parallelize([(2, True)])
    assert [(k, tuple(map(list, vs))) for k, vs in sorted(left.groupWith(right, c).collect())] \
        == [(0, ([0, 3, 6, 9], ["x", "z"], [])), (1, ([1, 4, 7, 10], ["y"], [])),
            (2, ([2, 5, 8, 11], [], [True]))]
    old = sc._conf.get("spark.python.worker.memory")
    sc._conf.set("spark.python.worker.memory", "1m")
    try:
        big = sc.parallelize([(i % 5000, i) for i in range(100_000)], 4)
        small = sc.parallelize([(k, -k) for k in range(0, 6000, 2)], 3)
        assert big.join(small).map(lambda kv: kv[1][0] + kv[1][1]).sum() == sum(
            i - i % 5000 for i in range(100_000) if i % 2 == 0)
        assert big.leftOuterJoin(small).filter(lambda kv: kv[1][1] is None).count() == 50_000
        assert small.fullOuterJoin(big).count() == 100_000 + 500
    finally:
        sc._conf.set("spark.python.worker.memory", old or "512m")


def test_joins_group_a_map_tasks_repeated_keys_before_the_shuffle(sc):
    """A map task whose keys repeat writes a key's values as one record, one whose keys do
    not writes its records as they are; the reduce side takes either, in order, also when it
    spills, and a value that is itself a tuple is never taken for such a record."""
    many = [(i % 7, (i, ())) for i in range(30_000)]          # 7 keys: grouped
    unique = [(i, ("x", i)) for i in range(30_000)]           # unique keys: as they are
    dims = [(k, -k) for k in range(7)] + [(1, ())]
    expected_many = sorted(repr((k, (v, w))) for k, v in many for k2, w in dims if k == k2)
    joined = sc.parallelize(many, 3).join(sc.parallelize(dims, 2)).collect()
    assert sorted(map(repr, joined)) == expected_many
    groups = sc.parallelize(many, 3).cogroup(sc.parallelize(unique, 2)).collect()
    assert [list(vs[0]) for k, vs in sorted(groups) if k == 3] == \
        [[v for k, v in many if k == 3]]              # map order, then record order
    assert all(list(vs[1]) == [("x", k)] for k, vs in groups if k >= 7)
    old = sc._conf.get("spark.python.worker.memory")
    sc._conf.set("spark.python.worker.memory", "1m")
    try:
        big = sc.parallelize([(i % 3, i) for i in range(200_000)], 4)
        cogrouped = big.cogroup(sc.parallelize([(0, "a"), (2, "b")], 1)).collect()
        assert sorted((k, list(vs[0]), list(vs[1])) for k, vs in cogrouped) == [
            (k, [i for i in range(200_000) if i % 3 == k], w)
            for k, w in ((0, ["a"]), (1, []), (2, ["b"]))]
    finally:
        sc._conf.set("spark.python.worker.memory", old or "512m")


def test_subtract_by_key(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4), ("b", 5), ("a", 2)])
    rdd2 = sc.parallelize([("a", 3), ("c", None)])
    assert sorted(rdd1.subtractByKey(rdd2).collect()) == [("b", 4), ("b", 5)]


def test_subtract(sc):
    rdd1 = sc.parallelize([("a", 1), ("b", 4), ("b", 5), ("a", 3)])
    rdd2 = sc.parallelize([("a", 3), ("c", None)])
    assert sorted(rdd1.subtract(rdd2).collect()) == [("a", 1), ("b", 4), ("b", 5)]
    assert sorted(sc.parallelize([1, 1, 2, 3]).subtract(sc.parallelize([2]), 3).collect()) == \
        [1, 1, 3]


# --------------------------------------------------------------------------- actions


def test_reduce(sc):
    assert sc.parallelize([1, 2, 3, 4, 5]).reduce(add) == 15
    with pytest.raises(ValueError, match=r"Can not reduce\(\) empty RDD"):
        sc.parallelize([]).reduce(add)
    assert sc.parallelize([1, 2]).count() == 2


def test_tree_reduce(sc):
    rdd = sc.parallelize([-5, -4, -3, -2, -1, 1, 2, 3, 4], 10)
    for depth in (1, 2, 3, 5, 10):
        assert rdd.treeReduce(add, depth) == -5
    assert rdd.treeReduce(add) == -5
    with pytest.raises(ValueError, match="Depth cannot be smaller than 1 but got 0"):
        rdd.treeReduce(add, 0)
    with pytest.raises(ValueError, match="Cannot reduce empty RDD"):
        sc.parallelize([], 3).treeReduce(add)


def test_fold(sc):
    assert sc.parallelize([1, 2, 3, 4, 5]).fold(0, add) == 15
    assert sc.parallelize([], 2).fold(0, add) == 0
    # the zero value is used once per partition plus once for the final merge
    assert sc.parallelize([1, 2, 3], 3).fold(1, add) == 1 + 3 + 6


def test_aggregate(sc):
    def seq(x, y):
        return (x[0] + y, x[1] + 1)

    def comb(x, y):
        return (x[0] + y[0], x[1] + y[1])
    assert sc.parallelize([1, 2, 3, 4]).aggregate((0, 0), seq, comb) == (10, 4)
    assert sc.parallelize([]).aggregate((0, 0), seq, comb) == (0, 0)


def test_tree_aggregate(sc):
    rdd = sc.parallelize([-5, -4, -3, -2, -1, 1, 2, 3, 4], 10)
    assert rdd.treeAggregate(0, add, add) == -5
    for depth in (1, 2, 3, 5, 10):
        assert rdd.treeAggregate(0, add, add, depth) == -5
    assert sc.emptyRDD().treeAggregate(0, add, add) == 0
    big = sc.parallelize(range(100), 20)
    for depth in (1, 2, 3):
        assert big.treeAggregate((0, 0), lambda a, x: (a[0] + x, a[1] + 1),
                                 lambda a, b: (a[0] + b[0], a[1] + b[1]), depth) == (4950, 100)
    with pytest.raises(ValueError, match="Depth cannot be smaller than 1 but got 0"):
        rdd.treeAggregate(0, add, add, 0)


def test_max_min(sc):
    rdd = sc.parallelize([1.0, 5.0, 43.0, 10.0])
    assert rdd.max() == 43.0
    assert rdd.max(key=str) == 5.0
    rdd = sc.parallelize([2.0, 5.0, 43.0, 10.0])
    assert rdd.min() == 2.0
    assert rdd.min(key=str) == 10.0


def test_sum_count_mean_variance(sc):
    assert sc.parallelize([1.0, 2.0, 3.0]).sum() == 6.0
    assert sc.parallelize([]).sum() == 0
    assert sc.parallelize([2, 3, 4]).count() == 3
    assert sc.parallelize([1, 2, 3]).mean() == 2.0
    assert sc.parallelize([1, 2, 3]).variance() == pytest.approx(0.6666666666)
    assert sc.parallelize([1, 2, 3]).stdev() == pytest.approx(0.8164965809)
    assert sc.parallelize([1, 2, 3]).sampleStdev() == 1.0
    assert sc.parallelize([1, 2, 3]).sampleVariance() == 1.0


def test_stats(sc):
    st = sc.parallelize([1, 2, 3, 4, 5, 6], 3).stats()
    assert st.count() == 6
    assert st.mean() == 3.5
    assert st.sum() == 21
    assert st.max() == 6
    assert st.min() == 1
    assert st.variance() == pytest.approx(35 / 12)
    assert st.sampleVariance() == pytest.approx(3.5)
    assert st.stdev() == pytest.approx((35 / 12) ** 0.5)
    assert "count: 6" in repr(st) and "mean: 3.5" in repr(st)


def test_histogram_documented(sc):
    rdd = sc.parallelize(range(51))
    assert rdd.histogram(2) == ([0, 25, 50], [25, 26])
    assert rdd.histogram([0, 5, 25, 50]) == ([0, 5, 25, 50], [5, 20, 26])
    assert rdd.histogram([0, 15, 30, 45, 60]) == ([0, 15, 30, 45, 60], [15, 15, 15, 6])
    rdd = sc.parallelize(["ab", "ac", "b", "bd", "ef"])
    assert rdd.histogram(("a", "b", "c")) == (("a", "b", "c"), [2, 2])


def test_histogram_buckets_list(sc):
    empty = sc.parallelize([])
    assert empty.histogram([0, 10])[1] == [0]
    assert empty.histogram([0, 4, 10])[1] == [0, 0]
    out = sc.parallelize([10.01, -0.01])
    assert out.histogram([0, 10])[1] == [0]
    assert out.histogram((0, 4, 10))[1] == [0, 0]
    assert out.histogram([0, 5, 10])[1] == [0, 0]
    rng = sc.parallelize(range(1, 5))
    assert rng.histogram([0, 10])[1] == [4]
    assert rng.histogram([0, 4, 10])[1] == [3, 1]
    assert rng.histogram([1, 4])[1] == [4]
    two = sc.parallelize([1, 2, 3, 5, 6])
    assert two.histogram([0, 5, 10])[1] == [3, 2]          # even
    assert two.histogram([0, 5, 11])[1] == [3, 2]          # uneven
    nones = sc.parallelize([1, 2, 3, 5, 6, None, float("nan")])
    assert nones.histogram([0, 5, 10])[1] == [3, 2]
    mixed = sc.parallelize([-0.01, 0.0, 1, 2, 3, 5, 6, 11.0, 11.01])
    assert mixed.histogram([0, 5, 11])[1] == [4, 3]
    four = sc.parallelize([-0.01, 0.0, 1, 2, 3, 5, 6, 11.01, 12.0, 199.0, 200.0, 200.1,
                           None, float("nan")])
    assert four.histogram([0.0, 5.0, 11.0, 12.0, 200.0])[1] == [4, 2, 1, 3]
    inf = sc.parallelize([10.01, -0.01, float("nan"), float("inf")])
    assert inf.histogram([float("-inf"), 0, float("inf")])[1] == [1, 2]
    strs = sc.parallelize(["ab", "ac", "b", "bd", "ef"], 2)
    assert strs.histogram(["a", "b", "c"])[1] == [2, 2]


def test_histogram_bucket_count(sc):
    assert sc.parallelize(range(1, 5)).histogram(1) == ([1, 4], [4])
    assert sc.parallelize([1]).histogram(1) == ([1, 1], [1])
    assert sc.parallelize([1] * 4).histogram(1) == ([1, 1], [4])
    assert sc.parallelize(range(1, 5)).histogram(2) == ([1, 2.5, 4], [2, 2])
    buckets, counts = sc.parallelize([1, 2]).histogram(5)
    assert buckets == pytest.approx([1.0, 1.2, 1.4, 1.6, 1.8, 2.0])
    assert counts == [1, 0, 0, 0, 1]
    assert sc.parallelize(["ab", "ac", "b", "bd", "ef"], 2).histogram(1) == (["ab", "ef"], [5])


def test_histogram_errors(sc):
    rdd = sc.parallelize([10.01, -0.01, float("nan"), float("inf")])
    with pytest.raises(ValueError, match="buckets should have more than one value"):
        rdd.histogram([])
    with pytest.raises(ValueError, match="buckets should have more than one value"):
        rdd.histogram([1])
    with pytest.raises(ValueError, match="number of buckets must be >= 1"):
        rdd.histogram(0)
    with pytest.raises(TypeError, match="buckets should be a list or tuple or number"):
        rdd.histogram({})
    with pytest.raises(ValueError, match="can not have None or NaN in buckets"):
        rdd.histogram([0, None, 2])
    with pytest.raises(ValueError, match="buckets should be sorted"):
        rdd.histogram([3, 1, 2])
    with pytest.raises(ValueError, match="buckets should not contain duplicated values"):
        rdd.histogram([1, 1, 2])
    with pytest.raises(ValueError, match="infinite value"):
        sc.parallelize([1, float("inf")]).histogram(2)
    with pytest.raises(ValueError):
        sc.parallelize([float("nan")]).histogram(2)
    with pytest.raises(ValueError):
        sc.parallelize([]).histogram(1)
    with pytest.raises(TypeError, match="non-number"):
        sc.parallelize(["ab", "ac", "b", "bd", "ef"], 2).histogram(2)
    assert sc.parallelize([1, 2]).count() == 2


def test_count_by_value(sc):
    assert sorted(sc.parallelize([1, 2, 1, 2, 2], 2).countByValue().items()) == [(1, 2), (2, 3)]


def test_count_by_key(sc):
    rdd = sc.parallelize([("a", 1), ("b", 1), ("a", 1)])
    assert sorted(rdd.countByKey().items()) == [("a", 2), ("b", 1)]


def test_collect_as_map(sc):
    m = sc.parallelize([(1, 2), (3, 4)]).collectAsMap()
    assert m[1] == 2 and m[3] == 4
    assert isinstance(m, dict)


def test_lookup(sc):
    l = range(1000)
    rdd = sc.parallelize(zip(l, l), 10)
    assert rdd.lookup(42) == [42]
    sorted_rdd = rdd.sortByKey()
    assert sorted_rdd.partitioner is not None
    assert sorted_rdd.lookup(42) == [42]
    assert sorted_rdd.lookup(1024) == []
    rdd2 = sc.parallelize([(("a", "b"), "c")]).groupByKey()
    assert list(rdd2.lookup(("a", "b"))[0]) == ["c"]


def test_lookup_with_hash_partitioner_and_string_keys(sc):
    rdd = sc.parallelize([(str(i), i) for i in range(100)], 4).partitionBy(4)
    assert rdd.partitioner is not None
    assert rdd.lookup("42") == [42]
    assert rdd.lookup("nope") == []
    grouped = sc.parallelize([(("x", i % 5), i) for i in range(50)], 3).groupByKey(4)
    assert sorted(grouped.lookup(("x", 3))[0]) == [3, 8, 13, 18, 23, 28, 33, 38, 43, 48]


def test_top(sc):
    assert sc.parallelize([10, 4, 2, 12, 3]).top(1) == [12]
    assert sc.parallelize([2, 3, 4, 5, 6], 2).top(2) == [6, 5]
    assert sc.parallelize([10, 4, 2, 12, 3]).top(3, key=str) == [4, 3, 2]


def test_take_ordered(sc):
    assert sc.parallelize([10, 1, 2, 9, 3, 4, 5, 6, 7]).takeOrdered(6) == [1, 2, 3, 4, 5, 6]
    assert sc.parallelize([10, 1, 2, 9, 3, 4, 5, 6, 7], 2).takeOrdered(6, key=lambda x: -x) == \
        [10, 9, 7, 6, 5, 4]
    assert sc.emptyRDD().takeOrdered(3) == []
    with pytest.raises(ValueError, match="top N cannot be negative"):
        sc.parallelize([1]).takeOrdered(-1)


def test_take(sc):
    assert sc.parallelize([2, 3, 4, 5, 6]).cache().take(2) == [2, 3]
    assert sc.parallelize([2, 3, 4, 5, 6]).take(10) == [2, 3, 4, 5, 6]
    assert sc.parallelize(range(100), 100).filter(lambda x: x > 90).take(3) == [91, 92, 93]
    assert sc.parallelize([1, 2], 2).take(0) == []


def test_first(sc):
    assert sc.parallelize([2, 3, 4]).first() == 2
    with pytest.raises(ValueError, match="RDD is empty"):
        sc.parallelize([]).first()
    assert sc.parallelize([1, 2]).count() == 2


def test_empty_rdds(sc):
    for empty in (sc.parallelize([]), sc.parallelize([], 3), sc.emptyRDD()):
        assert empty.take(3) == []
        assert empty.isEmpty()
        assert empty.count() == 0
        assert empty.collect() == []
        with pytest.raises(ValueError, match="RDD is empty"):
            empty.first()
    assert sc.emptyRDD().getNumPartitions() == 0
    assert not sc.parallelize([1]).isEmpty()
    # an RDD can be empty while having partitions
    assert sc.parallelize(range(10), 3).filter(lambda x: x > 100).isEmpty()


def test_count_approx_family(sc):
    rdd = sc.parallelize(range(1000), 10)
    assert rdd.countApprox(1000, 1.0) == 1000
    r = sum(range(1000))
    assert abs(rdd.sumApprox(1000) - r) / r < 0.05
    m = sum(range(1000)) / 1000.0
    assert abs(rdd.meanApprox(1000) - m) / m < 0.05


def test_count_approx_distinct(sc):
    n = sc.parallelize(range(1000)).map(str).countApproxDistinct()
    assert 900 < n < 1100
    n = sc.parallelize([i % 20 for i in range(1000)]).countApproxDistinct()
    assert 16 < n < 24
    n = sc.parallelize(range(10000), 4).countApproxDistinct(0.01)
    assert 9500 < n < 10500
    with pytest.raises(ValueError, match="relativeSD should be greater than 0.000017"):
        sc.parallelize([1]).countApproxDistinct(0.00000001)


def test_to_local_iterator(sc):
    rdd = sc.parallelize(range(10))
    assert [x for x in rdd.toLocalIterator()] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    assert list(sc.parallelize(range(10), 4).toLocalIterator(prefetchPartitions=True)) == \
        list(range(10))
    assert list(sc.emptyRDD().toLocalIterator()) == []


def test_foreach_with_accumulator(sc):
    acc = sc.accumulator(0)

    def f(x):
        acc.add(x)
    sc.parallelize([1, 2, 3, 4, 5], 3).foreach(f)
    assert acc.value == 15
    assert sc.parallelize([1, 2, 3, 4, 5]).foreach(lambda x: None) is None


def test_foreach_partition(sc):
    acc = sc.accumulator(0)

    def f(iterator):
        for x in iterator:
            acc.add(1)
    assert sc.parallelize([1, 2, 3, 4, 5], 2).foreachPartition(f) is None
    assert acc.value == 5

    acc2 = sc.accumulator(0)

    def gen(iterator):          # generators are consumed too (historical behaviour)
        for x in iterator:
            acc2.add(10)
            yield x
    sc.parallelize([1, 2], 2).foreachPartition(gen)
    assert acc2.value == 20


def test_collect_with_job_group(sc):
    with pytest.warns(FutureWarning):
        assert sc.parallelize([1, 2, 3]).collectWithJobGroup("g-collect", "desc") == [1, 2, 3]
    sc.setLocalProperty("spark.jobGroup.id", None)
    sc.setLocalProperty("spark.job.description", None)
    sc.setLocalProperty("spark.job.interruptOnCancel", None)


# --------------------------------------------------------------------------- files


def test_save_as_text_file(sc, tmp_path):
    path1 = str(tmp_path / "text_file1")
    sc.parallelize(range(10)).saveAsTextFile(path1)
    assert "".join(sorted(finput(glob.glob(path1 + "/part-0000*")))) == \
        "0\n1\n2\n3\n4\n5\n6\n7\n8\n9\n"
    assert os.path.exists(os.path.join(path1, "_SUCCESS"))
    path2 = str(tmp_path / "text2_file2")
    sc.parallelize(["", "foo", "", "bar", ""]).saveAsTextFile(path2)
    assert "".join(sorted(finput(glob.glob(path2 + "/part-0000*")))) == "\n\n\nbar\nfoo\n"


def test_save_as_text_file_round_trip(sc, tmp_path):
    path1 = str(tmp_path / "text1")
    path2 = str(tmp_path / "text2")
    sc.parallelize(["x", "y", "z"]).saveAsTextFile(path1)
    sc.parallelize(["aa", "bb", "cc"]).saveAsTextFile(path2)
    assert sorted(sc.textFile(path1, 3).collect()) == ["x", "y", "z"]
    assert sorted(sc.textFile(path2, 4).collect()) == ["aa", "bb", "cc"]
    assert sorted(sc.textFile("{},{}".format(path1, path2), 5).collect()) == [
        "aa", "bb", "cc", "x", "y", "z"]
    # non-string elements are written with str()
    path3 = str(tmp_path / "text3")
    sc.parallelize([(1, "a"), 2.5, None], 2).saveAsTextFile(path3)
    assert sorted(sc.textFile(path3).collect()) == sorted(["(1, 'a')", "2.5", "None"])
    assert sc.textFile(path1, use_unicode=False).collect()[0] in (b"x", b"y", b"z")


def test_save_as_text_file_gzip(sc, tmp_path):
    path3 = str(tmp_path / "text3")
    codec = "org.apache.hadoop.io.compress.GzipCodec"
    sc.parallelize(["foo", "bar"]).saveAsTextFile(path3, codec)
    parts = glob.glob(path3 + "/part*.gz")
    assert parts
    result = sorted(finput(parts, openhook=hook_compressed))
    assert "".join([r.decode("utf-8") if isinstance(r, bytes) else r for r in result]) == \
        "bar\nfoo\n"
    for p in parts:
        with gzip.open(p) as f:
            f.read()
    assert sorted(sc.textFile(path3).collect()) == ["bar", "foo"]


def test_save_as_text_file_deflate_and_bzip2(sc, tmp_path):
    """Hadoop's DefaultCodec writes zlib streams named .deflate (BZip2Codec: .bz2); a file
    cut short fails its job rather than pass for a shorter one."""
    import bz2
    import zlib
    lines = [f"line {i}" for i in range(20000)]
    for codec, ext, decompress in (("DefaultCodec", ".deflate", zlib.decompress),
                                   ("BZip2Codec", ".bz2", bz2.decompress)):
        path = str(tmp_path / codec)
        sc.parallelize(lines, 2).saveAsTextFile(path, "org.apache.hadoop.io.compress." + codec)
        parts = sorted(glob.glob(path + "/part-*"))
        assert [os.path.basename(p) for p in parts] == [f"part-0000{i}{ext}" for i in (0, 1)]
        text = b"".join(decompress(open(p, "rb").read()) for p in parts).decode()
        assert text.splitlines() == lines
        assert sc.textFile(path, 8).collect() == lines
    whole = (tmp_path / "DefaultCodec" / "part-00000.deflate").read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / "part-00000.deflate").write_bytes(whole[:len(whole) // 2])
    with pytest.raises(Exception, match="Unexpected end of input stream"):
        sc.textFile(str(tmp_path / "cut")).count()
    assert sc.textFile(str(tmp_path / "DefaultCodec")).count() == len(lines)
    with pytest.raises(ValueError, match="Compression codec .*Lz4Codec not found"):
        sc.parallelize(lines).saveAsTextFile(str(tmp_path / "lz4"),
                                             "org.apache.hadoop.io.compress.Lz4Codec")


def test_save_as_text_file_existing_dir(sc, tmp_path):
    path = str(tmp_path / "out")
    sc.parallelize([1]).saveAsTextFile(path)
    with pytest.raises(Exception, match="already exists"):
        sc.parallelize([2]).saveAsTextFile(path)
    assert sc.textFile(path).collect() == ["1"]


def test_pickle_file(sc, tmp_path):
    path = str(tmp_path / "pickle_file")
    sc.parallelize(range(10)).saveAsPickleFile(path, 3)
    assert sorted(sc.pickleFile(path, 3).collect()) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    path2 = str(tmp_path / "pickled2")
    sc.parallelize(range(-10, -5)).saveAsPickleFile(path2, 3)
    assert sorted(sc.pickleFile(path2, 4).collect()) == [-10, -9, -8, -7, -6]
    assert sorted(sc.pickleFile("{},{}".format(path, path2), 5).collect()) == [
        -10, -9, -8, -7, -6, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    path3 = str(tmp_path / "objects")
    objs = [{"a": 1}, (1, [2, 3]), "s", None, 1.5]
    sc.parallelize(objs, 2).saveAsPickleFile(path3)
    assert sc.pickleFile(path3).collect() == objs


def test_text_file_missing_path_raises_at_action(sc, tmp_path):
    missing = str(tmp_path / "does-not-exist")
    rdd = sc.textFile(missing)          # defining the RDD does not fail
    with pytest.raises(Exception) as ei:
        rdd.collect()
    assert "Input path does not exist" in str(ei.value)
    assert sc.parallelize([1, 2, 3]).count() == 3


def test_whole_text_files(sc, tmp_path):
    with open(tmp_path / "1.txt", "w") as f:
        f.write("123")
    with open(tmp_path / "2.txt", "w") as f:
        f.write("xyz")
    collected = sorted(sc.wholeTextFiles(str(tmp_path)).collect())
    assert [v for _, v in collected] == ["123", "xyz"]
    assert collected[0][0].endswith("/1.txt") and collected[1][0].endswith("/2.txt")
    assert collected[0][0].startswith("file:")


def test_binary_files(sc, tmp_path):
    with open(tmp_path / "1.bin", "wb") as f1:
        f1.write(b"binary data I")
    with open(tmp_path / "2.bin", "wb") as f2:
        f2.write(b"binary data II")
    collected = sorted(sc.binaryFiles(str(tmp_path)).collect())
    assert [v for _, v in collected] == [b"binary data I", b"binary data II"]
    assert collected[0][0].endswith("/1.bin") and collected[1][0].endswith("/2.bin")


def test_binary_records(sc, tmp_path):
    with open(tmp_path / "1.bin", "w") as f:
        for i in range(3):
            f.write("%04d" % i)
    with open(tmp_path / "2.bin", "w") as f:
        for i in [-1, -2, -10]:
            f.write("%04d" % i)
    assert sorted(sc.binaryRecords(str(tmp_path), 4).collect()) == [
        b"-001", b"-002", b"-010", b"0000", b"0001", b"0002"]


# --------------------------------------------------------------------------- persistence


def test_cache(sc):
    rdd = sc.range(5)
    rdd2 = rdd.cache()
    assert rdd2 is rdd
    assert str(rdd.getStorageLevel()) == "Memory Serialized 1x Replicated"
    assert rdd.collect() == [0, 1, 2, 3, 4]
    assert rdd.collect() == [0, 1, 2, 3, 4]
    rdd.unpersist()


def test_persist_unpersist_storage_level(sc):
    rdd = sc.parallelize(["b", "a", "c"])
    assert rdd.getStorageLevel() == StorageLevel(False, False, False, False, 1)
    assert repr(sc.parallelize([1, 2]).getStorageLevel()) == \
        "StorageLevel(False, False, False, False, 1)"
    assert str(sc.parallelize([1, 2]).getStorageLevel()) == "Serialized 1x Replicated"
    assert rdd.persist().is_cached
    assert str(rdd.getStorageLevel()) == "Memory Serialized 1x Replicated"
    assert rdd.unpersist() is rdd
    assert not rdd.is_cached

    rdd2 = sc.range(5)
    rdd2.persist(StorageLevel.MEMORY_AND_DISK)
    assert rdd2.is_cached
    assert str(rdd2.getStorageLevel()) == "Disk Memory Serialized 1x Replicated"
    assert rdd2.count() == 5
    with pytest.raises(Exception):          # can not override an existing storage level
        rdd2.persist(StorageLevel.MEMORY_ONLY_2)
    rdd2.unpersist()
    assert not rdd2.is_cached
    rdd2.persist(StorageLevel.MEMORY_ONLY_2)
    assert str(rdd2.getStorageLevel()) == "Memory Serialized 2x Replicated"
    assert rdd2.is_cached
    assert rdd2.collect() == [0, 1, 2, 3, 4]
    rdd2.unpersist()
    rdd3 = sc.range(5)
    assert not rdd3.is_cached
    rdd3.unpersist()                        # unpersisting a non-cached RDD is fine
    assert not rdd3.is_cached


def test_persist_disk_only_recomputes_correctly(sc):
    rdd = sc.parallelize(range(20), 4).map(lambda x: x * 2).persist(StorageLevel.DISK_ONLY)
    assert rdd.sum() == 380
    assert rdd.map(lambda x: x + 1).sum() == 400
    rdd.unpersist()


def test_checkpoint(sc, tmp_path):
    sc.setCheckpointDir(str(tmp_path / "ckpt"))
    rdd = sc.range(5)
    assert rdd.is_checkpointed is False
    assert rdd.getCheckpointFile() is None
    rdd.checkpoint()
    assert rdd.is_checkpointed is True
    assert rdd.getCheckpointFile() is None
    assert not rdd.isCheckpointed()
    assert rdd.count() == 5
    assert rdd.is_checkpointed is True
    assert rdd.isCheckpointed()
    assert rdd.getCheckpointFile() is not None


def test_checkpoint_files_and_restore(sc, tmp_path):
    ckpt = str(tmp_path / "ckpt2")
    sc.setCheckpointDir(ckpt)
    flat = sc.parallelize([1, 2, 3, 4]).flatMap(lambda x: range(1, x + 1))
    assert not flat.isCheckpointed()
    assert flat.getCheckpointFile() is None
    assert sc.getCheckpointDir() is not None
    flat.checkpoint()
    result = flat.collect()
    assert flat.isCheckpointed()
    assert flat.collect() == result
    assert "file:" + ckpt == os.path.dirname(os.path.dirname(flat.getCheckpointFile()))
    assert sc.getCheckpointDir() == os.path.dirname(flat.getCheckpointFile())
    assert flat.map(lambda x: x * 10).sum() == sum(result) * 10


def test_local_checkpoint(sc):
    flat = sc.parallelize([1, 2, 3, 4]).flatMap(lambda x: range(1, x + 1))
    assert not flat.isCheckpointed()
    assert not flat.isLocallyCheckpointed()
    flat.localCheckpoint()
    assert flat.isLocallyCheckpointed()
    result = flat.collect()
    assert flat.isCheckpointed()
    assert flat.isLocallyCheckpointed()
    assert flat.collect() == result


def test_clean_shuffle_dependencies(sc):
    rdd = sc.parallelize([(1, 1), (1, 2)], 2).reduceByKey(add)
    assert rdd.collect() == [(1, 3)]
    rdd.cleanShuffleDependencies()
    assert sc.parallelize([1, 2]).count() == 2


# --------------------------------------------------------------------------- failures


def test_task_failure_surfaces_and_context_survives(sc):
    with pytest.raises(Exception) as ei:
        sc.parallelize([1, 2], 2).map(lambda x: 1 / 0).collect()
    assert "ZeroDivisionError" in str(ei.value)
    assert sc.parallelize([1, 2, 3]).map(lambda x: x + 1).collect() == [2, 3, 4]


def test_unpicklable_closure(sc):
    lock = threading.Lock()
    with pytest.raises(Exception) as ei:
        sc.parallelize([1, 2]).map(lambda x: (x, lock)).collect()
    msg = str(ei.value)
    assert "lock" in msg                      # names the object that could not be pickled
    assert "pickle" in msg or "serializ" in msg
    assert sc.parallelize([1, 2, 3]).count() == 3


def test_unpicklable_closure_path_names_the_variable(sc):
    lock = threading.Lock()
    with pytest.raises(Exception) as ei:
        sc.parallelize([1, 2]).map(lambda x: (x, lock)).collect()
    assert "closure variable 'lock'" in str(ei.value)


def test_rdd_inside_closure_is_spark_5063(sc):
    rdd2 = sc.parallelize([1, 2])
    with pytest.raises(Exception) as ei:
        sc.parallelize([1, 2]).map(lambda x: rdd2.count() * x).collect()
    assert "SPARK-5063" in str(ei.value)
    assert sc.parallelize([1, 2, 3]).count() == 3


def test_an_rdd_used_in_its_own_closure_or_the_context_in_any_is_spark_5063(sc):
    """The stage's own RDD ships with its lineage, so the error comes from the task; the
    context never ships (PySpark's CONTEXT_ONLY_VALID_ON_DRIVER, while pickling)."""
    rdd = sc.parallelize([1, 2], 2)
    with pytest.raises(SparkException, match="(?s)RDD_TRANSFORM_ONLY_VALID_ON_DRIVER.*SPARK-5063"):
        rdd.map(lambda x: rdd.count()).collect()
    with pytest.raises(pickle.PicklingError, match="CONTEXT_ONLY_VALID_ON_DRIVER.*SPARK-5063"):
        rdd.map(lambda x: sc.defaultParallelism).collect()
    assert rdd.count() == 2


def test_rdds_are_rdd_instances(sc):
    assert isinstance(sc.parallelize([1]), pyspark.RDD)
    assert isinstance(sc.parallelize([1]).map(lambda x: x), pyspark.RDD)
    assert isinstance(sc.parallelize([(1, 1)]).reduceByKey(operator.add), pyspark.RDD)
    assert isinstance(sc.emptyRDD(), pyspark.RDD)


def test_a_shipped_rdd_leaves_out_defaults_and_reads_them_back(sc):
    """A stage's pickle leaves out what holds its class default and what only the driver
    uses; the RDD a task unpickles reads the defaults, and what was set comes along."""
    import pickle

    from ember.rdd import serialize_stage
    from ember.storagelevel import StorageLevel
    plain = sc.parallelize(range(4), 2)
    plain.partitions()
    blob = serialize_stage("result", plain, len)
    for name in (b"is_cached", b"_storage_level", b"_partitions_cache", b"partitioner"):
        assert name not in blob
    _kind, shipped, _func = pickle.loads(blob[1 + blob[0]:])
    assert (shipped.is_cached, shipped.partitioner, shipped._name) == (False, None, None)
    assert shipped._storage_level == StorageLevel.NONE and shipped._partitions_cache is None
    kept = sc.parallelize([(1, 2)], 2).partitionBy(2).setName("named").cache()
    _kind, shipped, _func = pickle.loads(serialize_stage("result", kept, len)[1 + blob[0]:])
    assert shipped.is_cached and shipped.name() == "named"
    assert shipped._storage_level == StorageLevel.MEMORY_ONLY
    assert shipped.partitioner == kept.partitioner and shipped._partitions_cache is None
    assert kept.count() == 1 and plain.sum() == 6


def test_narrow_steps_pickle_by_reference_and_still_pipeline(sc):
    """map, filter, flatMap and mapPartitions hand their RDD instances of module-level
    classes: a stage of builtins-only steps pickles no code object (a nested function would
    go by value every job), and the pipelined steps compute what they did."""
    import pickle

    from ember.rdd import serialize_stage
    rdd = sc.parallelize(range(-5, 5), 2).map(abs).filter(bool).flatMap(range) \
        .mapPartitions(sorted)
    blob = serialize_stage("result", rdd, len)
    assert b"CodeType" not in blob and b"_make_function" not in blob
    assert blob[1:1 + blob[0]] == sc.pythonVer.encode()      # the version, then the pickle
    _kind, shipped, _func = pickle.loads(blob[1 + blob[0]:])
    assert type(shipped.func).__module__ == "ember.rdd"
    assert rdd.collect() == sorted(x for n in range(-5, 0) for x in range(abs(n))) + \
        sorted(x for n in range(0, 5) for x in range(n))
