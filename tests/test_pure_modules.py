"""Tests for Ember's engine-independent modules: statcounter, rddsampler,
resultiterable, storagelevel, sql.row and serializers."""

import copy
import io
import math
import os
import pickle
import random
import statistics
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable

import pytest

from ember.errors import PicklingError, SparkException
from ember.rddsampler import RDDRangeSampler, RDDSampler, RDDSamplerBase, RDDStratifiedSampler
from ember.resultiterable import ResultIterable
from ember.serializers import (
    AutoBatchedSerializer,
    BatchedSerializer,
    CloudPickleSerializer,
    CompressedSerializer,
    CPickleSerializer,
    MarshalSerializer,
    NoOpSerializer,
    PickleSerializer,
    SpecialLengths,
    TruncatedFrameError,
    UTF8Deserializer,
    dumps_closure,
    read_frames,
    read_int,
    write_frame,
    write_int,
)
from ember.sql.row import Row
from ember.statcounter import StatCounter
from ember.storagelevel import StorageLevel

import ember

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(ember.__file__)))


def _run_python(code, **kwargs):
    """Run a fresh interpreter that can import ember (whether or not it is installed)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_REPO_ROOT, env.get("PYTHONPATH")) if p)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          check=True, timeout=60, **kwargs)

# ----------------------------------------------------------------------------- StatCounter

DATA = [3.5, -1.25, 7.0, 2.0, 2.0, 10.5, -4.0, 0.125, 8.0, 1.0, 6.5]


def test_statcounter_matches_statistics_module():
    s = StatCounter(DATA)
    assert s.count() == len(DATA)
    assert s.mean() == pytest.approx(statistics.fmean(DATA), rel=1e-12)
    assert s.sum() == pytest.approx(math.fsum(DATA), rel=1e-12)
    assert s.variance() == pytest.approx(statistics.pvariance(DATA), rel=1e-12)
    assert s.sampleVariance() == pytest.approx(statistics.variance(DATA), rel=1e-12)
    assert s.stdev() == pytest.approx(statistics.pstdev(DATA), rel=1e-12)
    assert s.sampleStdev() == pytest.approx(statistics.stdev(DATA), rel=1e-12)
    assert s.min() == -4.0 and s.max() == 10.5


def test_statcounter_merge_stats_equals_single_pass():
    rng = random.Random(7)
    values = [rng.gauss(100, 15) for _ in range(1000)]
    # Uneven partitions exercise all three mean-combination branches.
    cuts = [0, 3, 40, 41, 500, 1000]
    parts = [StatCounter(values[a:b]) for a, b in zip(cuts, cuts[1:])]
    total = StatCounter()
    for p in parts:
        total.mergeStats(p)
    whole = StatCounter(values)
    assert total.count() == whole.count() == 1000
    assert total.mean() == pytest.approx(statistics.fmean(values), rel=1e-12)
    assert total.variance() == pytest.approx(statistics.pvariance(values), rel=1e-9)
    assert total.sampleStdev() == pytest.approx(statistics.stdev(values), rel=1e-9)
    assert total.min() == min(values) and total.max() == max(values)


def test_statcounter_merge_self_and_empty():
    s = StatCounter([1.0, 2.0, 3.0])
    s.mergeStats(s)
    assert s.count() == 6 and s.mean() == 2.0
    assert s.variance() == pytest.approx(statistics.pvariance([1, 2, 3, 1, 2, 3]))
    e = StatCounter()
    e.mergeStats(StatCounter([5.0]))
    assert (e.count(), e.mean(), e.min(), e.max()) == (1, 5.0, 5.0, 5.0)
    before = s.asDict()
    s.mergeStats(StatCounter())
    assert s.asDict() == before
    with pytest.raises(TypeError):
        s.mergeStats([1, 2])


def test_statcounter_empty_and_single():
    e = StatCounter()
    assert e.count() == 0 and e.mean() == 0.0 and e.sum() == 0.0
    assert e.min() == float("inf") and e.max() == float("-inf")
    assert math.isnan(e.variance()) and math.isnan(e.stdev())
    assert math.isnan(e.sampleVariance())
    one = StatCounter([4.0])
    assert one.variance() == 0.0 and math.isnan(one.sampleStdev())


def test_statcounter_repr_asdict_copy_and_ints():
    s = StatCounter([1, 2, 3])
    # max/min are floats, as with numpy.maximum in PySpark.
    assert repr(s) == "(count: 3, mean: 2.0, stdev: 0.816496580927726, max: 3.0, min: 1.0)"
    s4 = StatCounter([1.0, 2.0, 3.0, 4.0])
    d = s4.asDict()
    assert d["count"] == 4 and d["sum"] == 10.0 and d["mean"] == 2.5
    # PySpark quirk: sample=False reports the *sample* stdev/variance.
    assert d["stdev"] == pytest.approx(1.2909944487358056)
    assert d["variance"] == pytest.approx(1.6666666666666667)
    assert s4.asDict(sample=True)["variance"] == pytest.approx(1.25)
    c = s4.copy()
    c.merge(100.0)
    assert s4.count() == 4 and c.count() == 5
    assert s4.merge(5.0) is s4
    assert pickle.loads(pickle.dumps(s4)).asDict() == s4.asDict()


def test_statcounter_nan_is_sticky():
    s = StatCounter([1.0, float("nan"), 2.0])
    assert math.isnan(s.max()) and math.isnan(s.min()) and math.isnan(s.mean())


def test_statcounter_of_values_is_merge_by_merge_to_the_bit():
    """StatCounter(values) keeps the arithmetic of one merge() a value (its own loop for
    plain ints and floats), so stats() gives PySpark's bits; other values (a bool, a
    float subclass) hand the rest of the values to merge()."""
    class Money(float):
        pass
    rnd = random.Random(7)
    for values in ([rnd.uniform(-1e9, 1e9) for _ in range(2000)], list(range(-50, 3000)),
                   [1, 2.5, float("nan"), 4], [float("inf"), 3, float("-inf")],
                   [2**70, 1, 0.5], [1.5, 2, True, 4.5, Money(6.0), 7]):
        one_by_one = StatCounter()
        for v in values:
            one_by_one.merge(v)
        at_once = StatCounter(values)
        assert repr((at_once.n, at_once.mu, at_once.m2, at_once.maxValue, at_once.minValue)) \
            == repr((one_by_one.n, one_by_one.mu, one_by_one.m2, one_by_one.maxValue,
                     one_by_one.minValue))
    with pytest.raises(TypeError):      # as merge(None) does, never skipped
        StatCounter([1.0, None, 2.0])


# ----------------------------------------------------------------------------- samplers


def _pyspark_bernoulli(seed, split, items, fraction):
    rng = random.Random(seed ^ split)
    for _ in range(10):
        rng.randint(0, 1)
    return [x for x in items if rng.random() < fraction]


def test_sampler_matches_pyspark_draw_sequence():
    items = list(range(500))
    for split in (0, 1, 5):
        got = list(RDDSampler(False, 0.3, 42).func(split, iter(items)))
        assert got == _pyspark_bernoulli(42, split, items, 0.3)


def test_sampler_deterministic_by_seed_and_split():
    items = list(range(2000))
    a = list(RDDSampler(False, 0.5, 1).func(0, iter(items)))
    b = list(RDDSampler(False, 0.5, 1).func(0, iter(items)))
    c = list(RDDSampler(False, 0.5, 2).func(0, iter(items)))
    d = list(RDDSampler(False, 0.5, 1).func(1, iter(items)))
    assert a == b and a != c and a != d
    assert 850 < len(a) < 1150
    # A sampler without seed fixes one at construction: re-running a partition repeats it.
    s = RDDSampler(True, 0.5)
    assert list(s.func(3, iter(items))) == list(s.func(3, iter(items)))


def test_sampler_edge_fractions():
    items = list(range(100))
    assert list(RDDSampler(False, 0.0, 3).func(0, items)) == []
    assert list(RDDSampler(False, 1.0, 3).func(0, items)) == items
    assert list(RDDSampler(True, 0.0, 3).func(0, items)) == []


def test_sampler_with_replacement_poisson():
    items = list(range(4000))
    out = list(RDDSampler(True, 2.0, 11).func(0, iter(items)))
    assert 7400 < len(out) < 8600  # mean 2 per element
    assert out == sorted(out)  # repeats stay adjacent, order preserved
    big = list(RDDSampler(True, 25.0, 5).func(0, iter(range(400))))  # log-domain branch
    assert 9400 < len(big) < 10600


def test_base_api_and_poisson_mean():
    base = RDDSamplerBase(False, 9)
    base.initRandomGenerator(2)
    draws = [base.getPoissonSample(3.0) for _ in range(3000)]
    assert 2.8 < statistics.fmean(draws) < 3.2
    assert 0.0 <= base.getUniformSample() < 1.0
    with pytest.raises(NotImplementedError):
        list(base.func(0, iter([1])))


def test_range_sampler_splits_are_disjoint_and_complete():
    items = list(range(1000))
    bounds = [0.0, 0.2, 0.5, 1.0]
    for split in (0, 3):
        pieces = [list(RDDRangeSampler(lo, hi, 77).func(split, iter(items)))
                  for lo, hi in zip(bounds, bounds[1:])]
        assert sorted(x for p in pieces for x in p) == items
        assert 120 < len(pieces[0]) < 280


def test_stratified_sampler():
    pairs = [("a", i) for i in range(1000)] + [("b", i) for i in range(1000)]
    fr = {"a": 0.1, "b": 0.9}
    out = list(RDDStratifiedSampler(False, fr, 5).func(0, iter(pairs)))
    assert out == list(RDDStratifiedSampler(False, fr, 5).func(0, iter(pairs)))
    na = sum(1 for k, _ in out if k == "a")
    nb = sum(1 for k, _ in out if k == "b")
    assert 50 < na < 150 and 850 < nb < 950
    rep = list(RDDStratifiedSampler(True, {"a": 2.0, "b": 0.0}, 5).func(0, iter(pairs)))
    assert all(k == "a" for k, _ in rep) and 1800 < len(rep) < 2200
    with pytest.raises(KeyError):
        list(RDDStratifiedSampler(False, {"a": 0.5}, 1).func(0, iter([("zzz", 1)])))


def test_sampler_is_thread_safe_and_picklable():
    s = RDDSampler(False, 0.5, 123)
    expected = {i: list(s.func(i, iter(range(3000)))) for i in range(4)}
    results = {}

    def run(i):
        results[i] = list(s.func(i, iter(range(3000))))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == expected
    s2 = pickle.loads(pickle.dumps(s))
    assert list(s2.func(1, iter(range(3000)))) == expected[1]


def test_rddsampler_does_not_import_numpy():
    code = "import sys, ember.rddsampler, ember.statcounter; print('numpy' in sys.modules)"
    out = _run_python(code, text=True)
    assert out.stdout.strip() == "False"


# ----------------------------------------------------------------------------- ResultIterable


def test_result_iterable():
    r = ResultIterable([1, 2, 3])
    assert isinstance(r, Iterable)
    assert len(r) == 3 and list(r) == [1, 2, 3] and list(r) == [1, 2, 3]
    assert r.data == [1, 2, 3] and r.index == 0 and r.maxindex == 3
    r2 = pickle.loads(pickle.dumps(r))
    assert isinstance(r2, ResultIterable) and list(r2) == [1, 2, 3]
    assert sorted(ResultIterable((3, 1, 2))) == [1, 2, 3]


class Grouped(ResultIterable):
    def __init__(self, data, tag):
        super().__init__(data)
        self.tag = tag


def test_result_iterable_pickles_its_whole_state():
    r = ResultIterable([1, 2, 3])
    r.index = 1
    for copied in (pickle.loads(pickle.dumps(r)), copy.deepcopy(r), copy.copy(r)):
        assert type(copied) is ResultIterable and vars(copied) == vars(r)
    r.extra = "kept"                          # an attribute of its own
    assert vars(pickle.loads(pickle.dumps(r))) == vars(r)
    g = pickle.loads(pickle.dumps(Grouped([4], "t")))
    assert type(g) is Grouped and g.tag == "t" and list(g) == [4]


# ----------------------------------------------------------------------------- StorageLevel


def test_storage_level_constants():
    def flags(level):
        return (level.useDisk, level.useMemory, level.useOffHeap, level.deserialized,
                level.replication)

    assert flags(StorageLevel.NONE) == (False, False, False, False, 1)
    assert flags(StorageLevel.DISK_ONLY) == (True, False, False, False, 1)
    assert flags(StorageLevel.DISK_ONLY_2) == (True, False, False, False, 2)
    assert flags(StorageLevel.DISK_ONLY_3) == (True, False, False, False, 3)
    assert flags(StorageLevel.MEMORY_ONLY) == (False, True, False, False, 1)
    assert flags(StorageLevel.MEMORY_ONLY_2) == (False, True, False, False, 2)
    assert flags(StorageLevel.MEMORY_AND_DISK) == (True, True, False, False, 1)
    assert flags(StorageLevel.MEMORY_AND_DISK_2) == (True, True, False, False, 2)
    assert flags(StorageLevel.OFF_HEAP) == (True, True, True, False, 1)
    assert flags(StorageLevel.MEMORY_AND_DISK_DESER) == (True, True, False, True, 1)


def test_storage_level_repr_str_eq():
    assert repr(StorageLevel.MEMORY_ONLY) == "StorageLevel(False, True, False, False, 1)"
    assert str(StorageLevel.MEMORY_ONLY) == "Memory Serialized 1x Replicated"
    assert str(StorageLevel.MEMORY_AND_DISK_DESER) == "Disk Memory Deserialized 1x Replicated"
    assert str(StorageLevel.OFF_HEAP) == "Disk Memory OffHeap Serialized 1x Replicated"
    assert str(StorageLevel.DISK_ONLY_2) == "Disk Serialized 2x Replicated"
    assert str(StorageLevel.NONE) == "Serialized 1x Replicated"
    assert StorageLevel(True, True, False, False) == StorageLevel.MEMORY_AND_DISK
    assert StorageLevel.MEMORY_AND_DISK != StorageLevel.MEMORY_AND_DISK_2
    assert StorageLevel.MEMORY_ONLY != "MEMORY_ONLY"
    assert len({StorageLevel(False, True, False, False), StorageLevel.MEMORY_ONLY}) == 1
    assert pickle.loads(pickle.dumps(StorageLevel.DISK_ONLY_3)) == StorageLevel.DISK_ONLY_3


# ----------------------------------------------------------------------------- Row


def test_row_keywords_and_access():
    r = Row(name="Alice", age=11)
    assert repr(r) == "Row(name='Alice', age=11)"
    assert r == ("Alice", 11) and isinstance(r, tuple)
    assert r[0] == "Alice" and r[-1] == 11 and r[0:1] == ("Alice",)
    assert r.name == "Alice" and r["age"] == 11
    assert "name" in r and "Alice" not in r and "wrong" not in r
    assert Row(b=1, a=2).__fields__ == ["b", "a"]  # order preserved, not sorted
    with pytest.raises(AttributeError) as ei:
        r.missing
    assert ei.value.args == ("missing",)
    with pytest.raises(ValueError):
        r["missing"]
    with pytest.raises(RuntimeError, match="Row is read-only"):
        r.age = 12
    with pytest.raises(ValueError):
        Row(1, a=2)
    assert hash(r) == hash(("Alice", 11))
    assert Row("Alice", 11) == Row(name="Alice", age=11)


def test_row_factory():
    person = Row("name", "age")
    assert repr(person) == "<Row('name', 'age')>"
    assert "name" in person and "x" not in person
    p = person("Alice", 11)
    assert repr(p) == "Row(name='Alice', age=11)"
    assert p.age == 11 and p["name"] == "Alice"
    assert p.asDict() == {"name": "Alice", "age": 11}
    with pytest.raises(ValueError):
        person(1, 2, 3)
    with pytest.raises(TypeError):
        person.asDict()
    with pytest.raises(AttributeError):
        person.name


def test_row_as_dict_recursive():
    row = Row(key=1, value=Row(name="a", age=2), items=[Row(x=1)], m={"k": Row(y=2)})
    assert row.asDict() == {"key": 1, "value": Row(name="a", age=2), "items": [Row(x=1)],
                            "m": {"k": Row(y=2)}}
    assert row.asDict(True) == {"key": 1, "value": {"name": "a", "age": 2},
                                "items": [{"x": 1}], "m": {"k": {"y": 2}}}


def test_row_pickle_roundtrip_in_process():
    person = Row("name", "age")
    for obj in [Row(a=1, b=[1, 2]), person, person("Bob", 3), Row(), Row(1, 2)]:
        for proto in (2, 5):
            back = pickle.loads(pickle.dumps(obj, proto))
            assert type(back) is Row and back == obj and repr(back) == repr(obj)
    back = pickle.loads(pickle.dumps(person("Bob", 3)))
    assert back.name == "Bob" and back["age"] == 3


def test_row_pickle_across_processes():
    payload = pickle.dumps([Row(name="Alice", age=11), Row("a", "b")("x", Row(z=1))])
    code = (
        "import pickle, sys\n"
        "rows = pickle.loads(sys.stdin.buffer.read())\n"
        "print(repr(rows), rows[0].name, rows[1].b.z)\n"
        "sys.stdout.flush()\n"
        "sys.stdout.buffer.write(pickle.dumps(rows))\n"
    )
    out = _run_python(code, input=payload)
    first_line, _, rest = out.stdout.partition(b"\n")
    assert first_line.decode() == (
        "[Row(name='Alice', age=11), Row(a='x', b=Row(z=1))] Alice 1")
    back = pickle.loads(rest)
    assert back[1].b.z == 1 and repr(back[0]) == "Row(name='Alice', age=11)"


# ----------------------------------------------------------------------------- serializers

VALUES = [1, "two", 3.0, None, (4, 5), {"six": [7]}, b"\x00bytes", Row(a=1)]


@pytest.mark.parametrize("ser", [CPickleSerializer(), CloudPickleSerializer(),
                                 CompressedSerializer(CPickleSerializer())])
def test_framed_roundtrip(ser):
    for v in VALUES:
        assert ser.loads(ser.dumps(v)) == v
    buf = io.BytesIO()
    ser.dump_stream(iter(VALUES), buf)
    buf.seek(0)
    assert list(ser.load_stream(buf)) == VALUES


def test_pickle_serializer_alias_and_protocol():
    # PySpark 4: CPickleSerializer is the cloudpickle one, PickleSerializer plain pickle
    assert CPickleSerializer is CloudPickleSerializer
    assert PickleSerializer is not CPickleSerializer
    for ser in (PickleSerializer(), CPickleSerializer()):
        assert ser.dumps([1, 2])[:2] == b"\x80\x05"  # protocol 5


def test_marshal_and_noop_and_utf8():
    m = MarshalSerializer()
    vals = [1, "x", [1.5, None], {"a": (1, 2)}]
    buf = io.BytesIO()
    m.dump_stream(vals, buf)
    buf.seek(0)
    assert list(m.load_stream(buf)) == vals
    n = NoOpSerializer()
    buf = io.BytesIO()
    n.dump_stream([b"a", b"", b"ccc"], buf)
    assert buf.getvalue() == b"\x00\x00\x00\x01a\x00\x00\x00\x00\x00\x00\x00\x03ccc"
    buf.seek(0)
    assert list(n.load_stream(buf)) == [b"a", b"", b"ccc"]
    u = UTF8Deserializer()
    buf = io.BytesIO()
    u.dump_stream(["héllo", "wörld"], buf)
    buf.seek(0)
    assert list(u.load_stream(buf)) == ["héllo", "wörld"]


def test_cloudpickle_serializer_handles_closures():
    k = 10
    ser = CloudPickleSerializer()
    f = ser.loads(ser.dumps(lambda x: x + k))
    assert f(1) == 11
    assert ser.loads(dumps_closure(lambda: k))() == 10


def test_dumps_closure_by_reference_follows_the_module_as_cloudpickle(monkeypatch):
    """A module-level function pickles by reference, and keeps doing so from the cache of
    such decisions; once its name is rebound, or its module registered to pickle by value,
    it travels by value, as cloudpickle decides on every dump."""
    import types

    import cloudpickle
    mod = types.ModuleType("ember_closure_cache_probe")
    exec("def f(x):\n    return x + 1\n", mod.__dict__)
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    f = mod.f
    for _ in range(2):                       # the second dump comes from the cache
        blob = dumps_closure(f)
        assert pickle.loads(blob) is f and blob == cloudpickle.dumps(f, protocol=5)
    mod.f = lambda x: x - 1                  # rebound: f is no longer the module's f
    copy = pickle.loads(dumps_closure(f))
    assert copy is not f and copy(1) == 2
    mod.f = f
    assert pickle.loads(dumps_closure(f)) is f
    cloudpickle.register_pickle_by_value(mod)
    try:
        copy = pickle.loads(dumps_closure(f))
        assert copy is not f and copy(1) == 2
    finally:
        cloudpickle.unregister_pickle_by_value(mod)
    assert pickle.loads(dumps_closure(f)) is f


def test_frames_over_bytesio():
    buf = io.BytesIO()
    write_frame(buf, b"hello")
    write_frame(buf, b"")
    write_frame(buf, b"x" * 100000)
    raw = buf.getvalue()
    assert raw[:9] == struct.pack("!i", 5) + b"hello"
    buf.seek(0)
    assert list(read_frames(buf)) == [b"hello", b"", b"x" * 100000]
    # Special lengths: NULL yields None, END_OF_DATA_SECTION stops.
    buf = io.BytesIO()
    write_frame(buf, b"a")
    write_int(SpecialLengths.NULL, buf)
    write_int(SpecialLengths.END_OF_DATA_SECTION, buf)
    write_frame(buf, b"after")
    buf.seek(0)
    assert list(read_frames(buf)) == [b"a", None]
    assert list(read_frames(buf)) == [b"after"]
    with pytest.raises(EOFError):
        read_int(io.BytesIO(b""))
    assert read_int(io.BytesIO(struct.pack("!i", -4))) == SpecialLengths.END_OF_STREAM


def test_chunked_stream_frames_what_it_is_given_in_fixed_sizes():
    """PySpark's serializers.ChunkedStream: full frames as the buffer fills, the rest at
    close, then the length -1 (what its JVM reader, DechunkedInputStream, expects)."""
    from ember.serializers import ChunkedStream

    class Sink(io.BytesIO):
        def close(self):
            self.final = self.getvalue()
            super().close()
    for data_length in (1, 10, 100, 10000):
        for size in (1, 2, 5, 8192):
            data = bytes(random.Random(data_length).getrandbits(8) for _ in range(data_length))
            sink = Sink()
            out = ChunkedStream(sink, size)
            out.write(data[:3])
            out.write(data[3:])
            out.close()
            assert out.closed
            stream, frames = io.BytesIO(sink.final), []
            while (n := read_int(stream)) != -1:
                frames.append(stream.read(n))
            assert b"".join(frames) == data and stream.read() == b""
            assert all(len(f) == size for f in frames[:-1]) and 0 < len(frames[-1]) <= size


def test_restricted_unpickler_and_flattened_values_as_pysparks():
    import collections
    import pickle

    from ember.cloudpickle import dumps, loads
    from ember.serializers import (CloudPickleSerializer, CPickleSerializer,
                                   FlattenedValuesSerializer, PickleSerializer)
    for cls in (CPickleSerializer, PickleSerializer, CloudPickleSerializer):
        ser = cls(allowed_names=[("collections", "deque")])
        assert ser.loads(ser.dumps(collections.deque([1, 2]))) == collections.deque([1, 2])
        assert ser.loads(ser.dumps({"plain": [1.5, b"x", None]})) == {"plain": [1.5, b"x", None]}
        with pytest.raises(pickle.UnpicklingError, match="collections.defaultdict"):
            ser.loads(ser.dumps(collections.defaultdict(int)))
        hash(ser)
    assert loads(dumps(collections.namedtuple("P", "x y")))(1, 3) == (1, 3)

    class OwnInit(PickleSerializer):     # a subclass that never calls PickleSerializer's
        def __init__(self):
            self.tag = "mine"
    assert OwnInit().loads(OwnInit().dumps([1])) == [1]

    ser = FlattenedValuesSerializer(PickleSerializer(), 3)
    buf = io.BytesIO()
    ser.dump_stream([("a", list(range(7))), ("b", [])], buf)
    buf.seek(0)
    assert list(ser.load_stream(buf)) == [("a", [0, 1, 2]), ("a", [3, 4, 5]), ("a", [6])]
    assert repr(ser) == "FlattenedValuesSerializer(PickleSerializer(), 3)"


def test_truncated_frames_raise():
    with pytest.raises(TruncatedFrameError):
        list(read_frames(io.BytesIO(struct.pack("!i", 10) + b"abc")))
    with pytest.raises(TruncatedFrameError):
        list(read_frames(io.BytesIO(b"\x00\x00")))
    with pytest.raises(ValueError):
        list(read_frames(io.BytesIO(struct.pack("!i", -7))))


class _Trickle(io.RawIOBase):
    """A raw stream returning at most 3 bytes per read, like a slow socket."""

    def __init__(self, data):
        self._buf = io.BytesIO(data)

    def readable(self):
        return True

    def read(self, n=-1):
        return self._buf.read(min(n, 3) if n >= 0 else 3)


def test_frames_survive_short_reads():
    buf = io.BytesIO()
    BatchedSerializer(CPickleSerializer(), 2).dump_stream(range(11), buf)
    out = list(BatchedSerializer(CPickleSerializer(), 2).load_stream(_Trickle(buf.getvalue())))
    assert out == list(range(11))


def _count_frames(raw):
    return len(list(read_frames(io.BytesIO(raw))))


def test_batched_serializer():
    ser = BatchedSerializer(CPickleSerializer(), 3)
    buf = io.BytesIO()
    ser.dump_stream(iter(range(10)), buf)
    raw = buf.getvalue()
    assert _count_frames(raw) == 4
    frames = list(read_frames(io.BytesIO(raw)))
    assert pickle.loads(frames[0]) == [0, 1, 2] and pickle.loads(frames[-1]) == [9]
    assert list(ser.load_stream(io.BytesIO(raw))) == list(range(10))
    assert list(ser._load_stream_without_unbatching(io.BytesIO(raw)))[1] == [3, 4, 5]
    # Lists are sliced, generators islice'd: same frames.
    buf2 = io.BytesIO()
    ser.dump_stream(list(range(10)), buf2)
    assert buf2.getvalue() == raw
    # Unlimited: one frame, even for an empty iterator.
    unl = BatchedSerializer(CPickleSerializer())
    assert unl.batchSize == BatchedSerializer.UNLIMITED_BATCH_SIZE
    b = io.BytesIO()
    unl.dump_stream(iter([]), b)
    assert _count_frames(b.getvalue()) == 1
    assert list(unl.load_stream(io.BytesIO(b.getvalue()))) == []
    assert unl.loads(unl.dumps({"a": 1})) == {"a": 1}


def test_auto_batched_serializer_adapts():
    ser = AutoBatchedSerializer(CPickleSerializer())
    buf = io.BytesIO()
    ser.dump_stream(iter(range(100000)), buf)
    raw = buf.getvalue()
    frames = list(read_frames(io.BytesIO(raw)))
    sizes = [len(pickle.loads(f)) for f in frames]
    assert sizes[:5] == [1, 2, 4, 8, 16]
    assert sum(sizes) == 100000 and len(frames) < 30
    assert list(ser.load_stream(io.BytesIO(raw))) == list(range(100000))
    # Medium objects: growth stops once a frame reaches bestSize (64 KiB).
    buf = io.BytesIO()
    ser.dump_stream([bytes([i]) * 50000 for i in range(7)], buf)
    assert [len(pickle.loads(f)) for f in read_frames(io.BytesIO(buf.getvalue()))] == [1, 2, 2, 2]
    # Small objects then big ones: the batch halves while frames exceed 10 x bestSize.
    data = list(range(127)) + [bytes([i % 256, i // 256]) * 10000 for i in range(400)]
    buf = io.BytesIO()
    ser.dump_stream(data, buf)
    frames = list(read_frames(io.BytesIO(buf.getvalue())))
    counts = [len(pickle.loads(f)) for f in frames]
    assert counts[:10] == [1, 2, 4, 8, 16, 32, 64, 128, 64, 32]
    assert list(ser.load_stream(io.BytesIO(buf.getvalue()))) == data


def test_serializer_eq_hash_repr():
    assert CPickleSerializer() == CPickleSerializer()
    assert CPickleSerializer() != MarshalSerializer()
    assert BatchedSerializer(CPickleSerializer(), 10) == BatchedSerializer(CPickleSerializer(), 10)
    assert BatchedSerializer(CPickleSerializer(), 10) != BatchedSerializer(CPickleSerializer(), 5)
    assert repr(BatchedSerializer(CPickleSerializer(), 10)) == \
        "BatchedSerializer(CloudPickleSerializer(), 10)"   # PySpark's alias
    assert repr(AutoBatchedSerializer(CPickleSerializer())) == \
        "AutoBatchedSerializer(CloudPickleSerializer())"
    assert len({AutoBatchedSerializer(CPickleSerializer()),
                AutoBatchedSerializer(CPickleSerializer())}) == 1


def _make_locked_lambda():
    lock = threading.Lock()
    return lambda x: (lock, x)


class _Holder:
    def __init__(self):
        self.value = 1
        self.lock = threading.RLock()


def test_dumps_closure_error_names_the_lock():
    f = _make_locked_lambda()
    with pytest.raises(PicklingError) as ei:
        dumps_closure(f)
    err = ei.value
    assert isinstance(err, pickle.PicklingError) and isinstance(err, SparkException)
    msg = str(err)
    assert msg.startswith("Could not serialize object: TypeError: cannot pickle '_thread.lock'")
    assert "(failed while pickling closure variable 'lock' of function <lambda>)" in msg
    assert isinstance(err.__cause__, TypeError)
    assert err.failed_path == ["closure variable 'lock' of function <lambda>"]


def test_dumps_closure_error_nested_path():
    holder = _Holder()

    def uses_holder(x):
        return holder.value + x

    with pytest.raises(PicklingError) as ei:
        CloudPickleSerializer().dumps(uses_holder)
    msg = str(ei.value)
    assert "'_thread.RLock'" in msg
    assert ("attribute 'lock' of _Holder object, reached via closure variable 'holder' "
            "of function uses_holder") in msg
    # A bare unpicklable object: PySpark's message, no path.
    with pytest.raises(PicklingError) as ei:
        dumps_closure(threading.Lock())
    assert str(ei.value) == "Could not serialize object: TypeError: cannot pickle '_thread.lock' object"
