"""Issue 13's PySpark-parity API details, checked through the public API (and, where the
pinned pyspark package runs without a JVM, against PySpark's own classes): SparkContext()
defaults, SparkConf values, versions, pipelining ids, toLocalIterator prefetching, stats()
over numpy arrays, the serializer classes and SparkContext(serializer=), Broadcast."""
from __future__ import annotations

import io
import marshal
import os
import pickle
import threading

import numpy as np
import pyspark
import pytest
from pyspark import serializers as pyspark_serializers
from pyspark.statcounter import StatCounter as PySparkStatCounter

import ember
from ember import SparkConf, SparkContext
from ember.broadcast import Broadcast
from ember.errors import PySparkRuntimeError
from ember.serializers import (AutoBatchedSerializer, AutoSerializer, BatchedSerializer,
                               CartesianDeserializer, CloudPickleSerializer, CPickleSerializer,
                               MarshalSerializer, PairDeserializer, PickleSerializer)

pytestmark = pytest.mark.timeout(120)


# --- SparkContext() and SparkConf ----------------------------------------------------------

def test_spark_context_without_master_or_name_defaults_like_spark_submit(fresh_sc):
    sc = fresh_sc(None, None)
    assert sc.master == "local[*]" and sc.appName == "pyspark-shell"
    assert sc.getConf().get("spark.master") == "local[*]"
    assert sc.defaultParallelism == os.cpu_count()
    assert sc.parallelize(range(5)).sum() == 10
    sc.stop()
    sc = fresh_sc(None, None, conf=SparkConf().setMaster("local[1]").setAppName("mine"))
    assert (sc.master, sc.appName) == ("local[1]", "mine")      # conf wins over defaults
    sc.stop()
    sc = fresh_sc(None, None, conf=SparkConf().setAppName("only-name"))
    assert (sc.master, sc.appName) == ("local[*]", "only-name")


def test_spark_context_gets_pysparks_default_configs(fresh_sc):
    sc = fresh_sc("local[1]", "defaults")
    conf = sc.getConf()
    assert conf.get("spark.rdd.compress") == "True"
    assert conf.get("spark.serializer.objectStreamReset") == "100"
    sc.stop()
    sc = fresh_sc("local[1]", "defaults", conf=SparkConf().set("spark.rdd.compress", False))
    assert sc.getConf().get("spark.rdd.compress") == "False"


def test_spark_conf_set_stores_str_of_the_value():
    conf = SparkConf(loadDefaults=False).set("k.bool", True).set("k.int", 3) \
        .set("k.false", False).set("k.float", 0.5)
    assert conf.get("k.bool") == "True" and conf.get("k.false") == "False"
    assert conf.get("k.int") == "3" and conf.get("k.float") == "0.5"
    assert conf.setIfMissing("k.new", True).get("k.new") == "True"


def test_version_is_the_pyspark_version_it_implements(sc):
    assert sc.version == ember.__version__ == pyspark.__version__ == "4.1.1"


# --- pipelining ------------------------------------------------------------------------------

def test_map_filter_is_one_pipelined_rdd_with_the_next_id(sc):
    rdd = sc.parallelize(range(10), 3)
    first = rdd.id()
    assert first == rdd.id()
    piped = rdd.map(str).filter(bool)
    assert piped.id() == first + 1 and piped.id() == piped.id()
    assert piped.getNumPartitions() == 3
    lines = piped.toDebugString().decode().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"(3) PythonRDD[{first + 1}] at filter at ")
    assert f"ParallelCollectionRDD[{first}]" in lines[1]
    assert piped.collect() == [str(i) for i in range(10)]


def test_caching_breaks_the_pipeline_and_the_cache_is_used(sc):
    calls = sc.accumulator(0)

    def counted(x):
        calls.add(1)
        return x + 1
    base = sc.parallelize(range(6), 2)
    through = base.map(counted)
    pipelined_before = through.map(lambda x: x * 10)     # built before cache(): pipelined
    through.cache()
    after = through.map(lambda x: x * 2).filter(lambda x: x > 2)
    assert through.count() == 6 and calls.value == 6
    assert after.collect() == [4, 6, 8, 10, 12] and calls.value == 6      # read from cache
    debug = after.toDebugString().decode()
    assert debug.count("PythonRDD[") == 2 and "Memory" in debug
    assert f"PythonRDD[{through.id()}]" in debug
    assert pipelined_before.collect() == [10, 20, 30, 40, 50, 60]
    assert calls.value == 12          # pipelined through `counted`, not through the cache
    assert "PythonRDD[" + str(through.id()) + "]" not in pipelined_before.toDebugString().decode()
    through.unpersist()


# --- toLocalIterator(prefetchPartitions=True) ----------------------------------------------

def _marking(directory: str):
    def mark(index, it):
        with open(os.path.join(directory, f"part-{index}"), "w"):
            pass
        return it
    return mark


def _wait_for(predicate, timeout: float = 60.0) -> bool:
    import time
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_to_local_iterator_prefetches_the_next_partition(sc, tmp_path):
    pre, lazy = tmp_path / "pre", tmp_path / "lazy"
    pre.mkdir()
    lazy.mkdir()
    rdd = sc.parallelize(range(6), 3)
    sc.setJobGroup("prefetching", "toLocalIterator prefetch")
    try:
        it = rdd.mapPartitionsWithIndex(_marking(str(pre))).toLocalIterator(
            prefetchPartitions=True)
        assert [next(it), next(it)] == [0, 1]             # all of partition 0 consumed
        # partition 1 is computed while the caller still holds partition 0's last record
        assert _wait_for(lambda: (pre / "part-1").exists())
        assert list(it) == [2, 3, 4, 5]
        jobs = sc.statusTracker().getJobIdsForGroup("prefetching")
        assert len(jobs) == 3          # the prefetching thread ran them in the caller's group
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    it = rdd.mapPartitionsWithIndex(_marking(str(lazy))).toLocalIterator()
    assert [next(it), next(it)] == [0, 1]
    assert sorted(os.listdir(lazy)) == ["part-0"]       # without prefetch: on demand only
    assert list(it) == [2, 3, 4, 5]


def test_to_local_iterator_prefetch_reports_task_failures(sc):
    def fail(x):
        if x == 3:
            raise ValueError("local iterator error")
        return x
    it = sc.parallelize(range(6), 3).map(fail).toLocalIterator(prefetchPartitions=True)
    with pytest.raises(Exception, match="local iterator error"):
        list(it)
    assert list(sc.parallelize([], 2).toLocalIterator(prefetchPartitions=True)) == []


# --- stats() over numpy arrays ----------------------------------------------------------------

def test_stats_over_numpy_arrays_match_pyspark(sc):
    rng = np.random.default_rng(7)
    vectors = [rng.normal(size=3) for _ in range(50)]
    rdd = sc.parallelize(vectors, 4)
    ours = rdd.stats()
    theirs = PySparkStatCounter(vectors[:20]).mergeStats(PySparkStatCounter(vectors[20:]))
    for name in ("mean", "sum", "max", "min", "variance", "sampleVariance", "stdev",
                 "sampleStdev"):
        np.testing.assert_allclose(getattr(ours, name)(), getattr(theirs, name)(), rtol=1e-12)
    assert ours.count() == 50
    np.testing.assert_allclose(rdd.mean(), np.mean(vectors, axis=0), rtol=1e-12)
    np.testing.assert_allclose(rdd.variance(), np.var(vectors, axis=0), rtol=1e-12)
    np.testing.assert_allclose(rdd.stdev(), np.std(vectors, axis=0), rtol=1e-12)
    np.testing.assert_allclose(rdd.sampleStdev(), np.std(vectors, axis=0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(rdd.sum(), np.sum(vectors, axis=0), rtol=1e-12)
    assert str(ours).startswith("(count: 50, mean: [")
    # plain numbers keep their exact PySpark results
    assert repr(sc.parallelize([1.0, 2.0, 3.0]).stats()) == repr(PySparkStatCounter([1.0, 2.0, 3.0]))


# --- serializers -----------------------------------------------------------------------------

class _Point:
    def __init__(self, x):
        self.x = x

    def __eq__(self, other):
        return isinstance(other, _Point) and other.x == self.x


def _roundtrip_stream(ser, values):
    buf = io.BytesIO()
    ser.dump_stream(iter(values), buf)
    return list(ser.load_stream(io.BytesIO(buf.getvalue()))), buf.getvalue()


@pytest.mark.parametrize("ser", [PickleSerializer(), CloudPickleSerializer(), CPickleSerializer(),
                                 MarshalSerializer(), AutoSerializer(),
                                 BatchedSerializer(PickleSerializer(), 3),
                                 AutoBatchedSerializer(MarshalSerializer())])
def test_serializers_round_trip_and_frame_like_pyspark(ser):
    values = [1, "two", 3.5, None, (4, 5), {"k": [6]}, b"\x00raw"] * 5
    back, raw = _roundtrip_stream(ser, values)
    assert back == values
    if not isinstance(ser, BatchedSerializer):
        assert ser.loads(ser.dumps({"a": (1, 2)})) == {"a": (1, 2)}
    # the same bytes are readable by PySpark's class of the same name
    theirs = {"PickleSerializer": lambda: pyspark_serializers.PickleSerializer(),
              "CloudPickleSerializer": lambda: pyspark_serializers.CloudPickleSerializer(),
              "MarshalSerializer": lambda: pyspark_serializers.MarshalSerializer(),
              "BatchedSerializer": lambda: pyspark_serializers.BatchedSerializer(
                  pyspark_serializers.PickleSerializer(), 3),
              "AutoBatchedSerializer": lambda: pyspark_serializers.AutoBatchedSerializer(
                  pyspark_serializers.MarshalSerializer())}.get(type(ser).__name__)
    if theirs is not None:
        assert list(theirs().load_stream(io.BytesIO(raw))) == values


def test_serializer_names_and_defaults_are_pysparks():
    assert CPickleSerializer is CloudPickleSerializer and PickleSerializer is not CPickleSerializer
    assert repr(AutoBatchedSerializer(CPickleSerializer())) == \
        "AutoBatchedSerializer(CloudPickleSerializer())"
    assert ember.CPickleSerializer is CPickleSerializer
    assert ember.MarshalSerializer is MarshalSerializer
    with pytest.raises(ValueError, match="unmarshallable"):
        MarshalSerializer().dumps(_Point(1))
    with pytest.raises((pickle.PicklingError, AttributeError)):    # plain pickle, as PySpark's
        PickleSerializer().dumps(lambda: 1)
    assert CloudPickleSerializer().loads(CloudPickleSerializer().dumps(lambda: 7))() == 7


def test_auto_serializer_uses_marshal_until_it_cannot():
    ser = AutoSerializer()
    first = ser.dumps([1, 2])
    assert first[:1] == b"M" and marshal.loads(first[1:]) == [1, 2]
    odd = ser.dumps(_Point(3))
    assert odd[:1] == b"P" and ser.loads(odd) == _Point(3)
    later = ser.dumps([1, 2])                   # once pickle, always pickle
    assert later[:1] == b"P" and ser.loads(later) == [1, 2] and ser.loads(first) == [1, 2]
    with pytest.raises(ValueError, match="invalid serialization type"):
        ser.loads(b"Xgarbage")


def _two_sided_stream(keys, vals, key_ser, val_ser) -> io.BytesIO:
    """Batches of keys and of values, interleaved, as the zip and cartesian streams are."""
    kb, vb = io.BytesIO(), io.BytesIO()
    key_ser.dump_stream(keys, kb)
    val_ser.dump_stream(vals, vb)
    from ember.serializers import read_frames, write_frame
    out = io.BytesIO()
    for k, v in zip(read_frames(io.BytesIO(kb.getvalue())), read_frames(io.BytesIO(vb.getvalue()))):
        write_frame(out, k)
        write_frame(out, v)
    out.seek(0)
    return out


def test_pair_and_cartesian_deserializers():
    ks, vs = BatchedSerializer(PickleSerializer(), 2), BatchedSerializer(MarshalSerializer(), 2)
    stream = _two_sided_stream(["a", "b", "c", "d"], [1, 2, 3, 4], ks, vs)
    assert list(PairDeserializer(ks, vs).load_stream(stream)) == \
        [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
    stream = _two_sided_stream(["a", "b", "c", "d"], [1, 2, 3, 4], ks, vs)
    assert list(CartesianDeserializer(ks, vs).load_stream(stream)) == \
        [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("c", 3), ("c", 4), ("d", 3), ("d", 4)]
    uneven = _two_sided_stream(["a", "b", "c"], [1, 2, 3],
                               BatchedSerializer(PickleSerializer(), 3), vs)
    with pytest.raises(ValueError, match=r"different number of items in batches: \(3, 2\)"):
        list(PairDeserializer(BatchedSerializer(PickleSerializer(), 3), vs).load_stream(uneven))
    assert repr(PairDeserializer(ks, vs)) == \
        "PairDeserializer(BatchedSerializer(PickleSerializer(), 2), " \
        "BatchedSerializer(MarshalSerializer(), 2))"


def test_spark_context_serializer_carries_the_data(fresh_sc):
    sc = fresh_sc("local[2]", "marshal", conf=None)
    assert sc.serializer == AutoBatchedSerializer(CPickleSerializer())
    sc.stop()
    sc = SparkContext("local[2]", "marshal", serializer=MarshalSerializer(), batchSize=5)
    try:
        assert sc.serializer == BatchedSerializer(MarshalSerializer(), 5)
        data = [1, "x", (2, 3.5), {"k": [None]}]
        assert sc.parallelize(data, 2).collect() == data
        assert sc.parallelize(range(10), 3).map(lambda x: (x % 3, x)) \
            .reduceByKey(lambda a, b: a + b).collectAsMap() == {0: 18, 1: 12, 2: 15}
        with pytest.raises(ValueError, match="unmarshallable object"):
            sc.parallelize([_Point(1)])                  # serialized on the driver, as PySpark
        with pytest.raises(ValueError, match="unmarshallable object"):
            sc.parallelize([1], 1).map(_Point).collect()      # results go through marshal
        with pytest.raises(ValueError, match="unmarshallable object"):     # and shuffles
            sc.parallelize([1, 2], 2).map(lambda x: (x, _Point(x))).groupByKey() \
                .mapValues(len).collect()
    finally:
        sc.stop()


# --- Broadcast ---------------------------------------------------------------------------------

def test_broadcast_constructor_forms(sc, tmp_path):
    b = sc.broadcast({"a": 1})
    assert b.value == {"a": 1}
    assert sc.parallelize([1, 2], 2).map(lambda x: b.value["a"] + x).collect() == [2, 3]
    path = tmp_path / "value.pickle"
    path.write_bytes(pickle.dumps([1, 2, 3]))
    from_path = Broadcast(path=str(path))
    assert from_path.value == [1, 2, 3]
    with open(path, "rb") as f:
        assert Broadcast(sock_file=f).value == [1, 2, 3]
    with pytest.raises(AssertionError):
        Broadcast()
    for op, name in ((from_path.unpersist, "unpersisted"), (from_path.destroy, "destroyed")):
        with pytest.raises(PySparkRuntimeError, match=f"Broadcast can only be {name} in driver"):
            op()
    with pytest.raises(PySparkRuntimeError, match=r"^\[INVALID_BROADCAST_OPERATION\] "
                       "Broadcast can only be serialized in driver.$"):
        pickle.dumps(from_path)
    b.destroy()


def test_broadcast_of_an_unpicklable_value(sc, capsys):
    before = set(os.listdir(sc.runtime.broadcast_dir))
    with pytest.raises(pickle.PicklingError,
                       match="^Could not serialize broadcast: TypeError: cannot pickle "
                             "'_thread.lock' object$"):
        sc.broadcast(threading.Lock())
    assert "Traceback" in capsys.readouterr().err      # PySpark prints it too
    assert set(os.listdir(sc.runtime.broadcast_dir)) == before  # nothing half-written is left
    assert sc.broadcast([1]).value == [1]
