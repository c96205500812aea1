"""Lineages thousands of RDDs long: loops that union, map or cache a pass at a time.
PySpark fails each of these (nested closures past a few hundred maps, the JVM's
StackOverflowError past a few hundred unions or a thousand cached passes; Ember fails
those at about 320)."""

import pickle

import pytest

from ember.errors import PicklingError
from ember.rdd import UnionRDD
from ember.serializers import dumps_node_by_node


class Node:
    def __init__(self, parent, payload=None):
        self.parent, self.payload = parent, payload


def _is_node(obj):
    return isinstance(obj, Node)


def test_a_chain_too_deep_for_one_pickle_goes_node_by_node():
    shared = ["shared"]
    node = None
    for i in range(5000):
        node = Node(node, shared if i % 2 else i)
    with pytest.raises(RecursionError):
        pickle.dumps(node)
    back = pickle.loads(dumps_node_by_node(("top", node), _is_node))
    assert back[0] == "top"
    walked, n = [], back[1]
    while n is not None:
        walked.append(n.payload)
        n = n.parent
    assert len(walked) == 5000 and walked[-1] == 0 and walked[-2] == ["shared"]
    # what two nodes shared is one object after loading too
    assert walked[0] is walked[2]


def test_node_by_node_keeps_a_diamond_one_object_and_refuses_a_cycle():
    base = Node(None, "base")
    left, right = Node(base, "left"), Node(base, "right")
    top = Node(left, right)
    back = pickle.loads(dumps_node_by_node(top, _is_node))
    assert back.parent.parent is back.payload.parent
    a = Node(None)
    b = Node(a)
    a.payload = b
    with pytest.raises(PicklingError, match="refers back to itself"):
        dumps_node_by_node(b, _is_node)


def test_three_thousand_maps_pipelined_into_one_stage(sc):
    rdd = sc.parallelize([1, 2, 3], 2)
    for _ in range(3000):
        rdd = rdd.map(lambda x: x + 1)
    assert rdd.collect() == [3001, 3002, 3003]


def test_a_union_in_a_loop_stays_one_flat_union(sc):
    u = sc.parallelize([0], 1)
    for i in range(1, 3000):
        u = u.union(sc.parallelize([i], 1))
    assert type(u) is UnionRDD and len(u.rdds) == 3000
    assert u.getNumPartitions() == 3000
    assert u.collect() == list(range(3000))


def test_a_cached_union_is_kept_as_a_parent(sc):
    a, b, c = (sc.parallelize([i], 1) for i in range(3))
    ab = a.union(b).cache()
    abc = ab.union(c)
    assert abc.rdds == [ab, c]
    assert abc.collect() == [0, 1, 2]
    ab.unpersist()


def test_co_partitioned_unions_in_a_loop_stay_flat(sc):
    base = sc.parallelize([(i, i) for i in range(8)], 2).partitionBy(2)
    u = base
    for i in range(400):
        u = u.union(base.mapValues(lambda v, i=i: v + i))
    assert u.getNumPartitions() == 2 and len(u.rdds) == 401
    assert u.count() == 8 * 401


def test_four_hundred_cached_passes_each_unpersisting_the_last(sc):
    # past about 320 passes the lineage no longer pickles in one recursion
    acc = sc.accumulator(0)

    def counted(x):
        acc.add(1)
        return x + 1

    rdd = sc.parallelize(range(10), 2).cache()
    rdd.count()
    for _ in range(400):
        new = rdd.map(counted).cache()
        new.count()
        rdd.unpersist()
        rdd = new
    assert rdd.sum() == sum(range(400, 410)) and acc.value == 4000
    # two RDDs of one stage with one accumulator: it stays one object in the task
    last = rdd.map(counted).cache()
    assert last.map(counted).sum() == sum(range(402, 412)) and acc.value == 4020
    last.unpersist()
    rdd.unpersist()


def test_one_job_of_five_hundred_shuffles_in_a_row(sc):
    # the DAG scheduler submits 500 parent stages with a stack of its own, not a recursion
    rdd = sc.parallelize([(i, 1) for i in range(6)], 2)
    for _ in range(500):
        rdd = rdd.map(lambda kv: (kv[0], kv[1] + 1)).reduceByKey(lambda a, b: a + b, 2)
    assert sorted(rdd.collect()) == [(i, 501) for i in range(6)]


def test_six_hundred_cached_zips_each_task_partition_nested_that_deep(sc):
    # each task's partition holds its parents' partitions, six hundred levels of them
    rdd = sc.parallelize(range(4), 2)
    for i in range(600):
        rdd = rdd.zip(rdd.map(lambda x: 1)).map(lambda kv: kv[0] + kv[1]).cache()
        if i % 100 == 99:
            rdd.count()
    assert rdd.collect() == [600, 601, 602, 603]


def test_the_lineage_of_twelve_hundred_cached_maps_prints(sc):
    rdd = sc.parallelize([1], 1)
    for _ in range(1200):
        rdd = rdd.map(lambda x: x).cache()
    lines = rdd.toDebugString().decode().splitlines()
    assert len(lines) == 1201 and lines[0].startswith("(1) PythonRDD")
    assert lines[-1].startswith(" |  " * 1200 + "ParallelCollectionRDD")
