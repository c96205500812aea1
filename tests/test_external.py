"""Tests for ember.shuffle.external (spilling merger, group-by and sorter)."""

from __future__ import annotations

import operator
import os
import random
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:  # works whether or not ember is pip-installed
    sys.path.insert(0, ROOT)

from ember.shuffle import external  # noqa: E402
from ember.shuffle.external import (  # noqa: E402
    Aggregator,
    BatchedPickleSerializer,
    ExternalGroupBy,
    ExternalList,
    ExternalListOfList,
    ExternalMerger,
    ExternalSorter,
    get_used_memory,
)


def _pairs(n: int = 60_000, nkeys: int = 5_000, seed: int = 1) -> list[tuple]:
    rnd = random.Random(seed)
    return [(rnd.randrange(nkeys), rnd.randrange(1000)) for _ in range(n)]


def _str_pairs(n: int = 60_000, nkeys: int = 5_000, seed: int = 2) -> list[tuple]:
    rnd = random.Random(seed)
    return [("k%d" % rnd.randrange(nkeys), "v%d" % rnd.randrange(1000)) for _ in range(n)]


def _reduce(pairs, func):
    out: dict = {}
    for k, v in pairs:
        out[k] = func(out[k], v) if k in out else v
    return out


def _group(pairs):
    out: dict = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


def _assert_clean(path) -> None:
    assert os.listdir(path) == []


AGGREGATORS = {
    "operator.add": lambda: Aggregator(lambda x: x, operator.add, operator.add),
    "lambda-add": lambda: Aggregator(lambda x: x, lambda a, b: a + b, lambda a, b: a + b),
    "generic": lambda: Aggregator(lambda x: x, lambda a, b: max(a, b), lambda a, b: max(a, b)),
}
EXPECTED_FUNCS = {"operator.add": operator.add, "lambda-add": operator.add, "generic": max}


def _merger(agg, tmp_path, spill_every=0, **kw):
    m = ExternalMerger(agg, local_dirs=[str(tmp_path)], **kw)
    m.spill_every = spill_every
    return m


# ---------------------------------------------------------------- memory


def test_get_used_memory_plausible():
    rss = get_used_memory()
    assert 5 <= rss < 10_000
    import resource

    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
    assert rss <= peak_mb + 1


def test_get_used_memory_after_fork_reads_child():
    external._rss_bytes()  # open the statm fd in the parent
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: allocate ~150 MB and report its own RSS
        try:
            os.close(r)
            blob = bytearray(150 << 20)
            blob[::4096] = b"x" * len(blob[::4096])
            os.write(w, str(get_used_memory()).encode())
        finally:
            os._exit(0)
    os.close(w)
    child_rss = int(os.read(r, 64))
    os.close(r)
    os.waitpid(pid, 0)
    assert child_rss >= get_used_memory() + 100


# ---------------------------------------------------------------- merger


@pytest.mark.parametrize("name", list(AGGREGATORS))
@pytest.mark.parametrize("spill_every", [0, 7_000])
def test_merge_values_matches_dict(tmp_path, name, spill_every):
    pairs = _pairs()
    m = _merger(AGGREGATORS[name](), tmp_path, spill_every, batch=500)
    m.mergeValues(iter(pairs))
    got = dict(m.items())
    assert got == _reduce(pairs, EXPECTED_FUNCS[name])
    if spill_every:
        assert m.spills > 0 and m.disk_bytes_spilled > 0
    else:
        assert m.spills == 0
    _assert_clean(tmp_path)


def test_merge_values_string_keys_and_non_identity_combiner(tmp_path):
    pairs = _str_pairs()
    # combineByKey computing (count, set of values)
    agg = Aggregator(
        lambda v: (1, {v}),
        lambda c, v: (c[0] + 1, c[1] | {v}),
        lambda a, b: (a[0] + b[0], a[1] | b[1]),
    )
    expected: dict = {}
    for k, v in pairs:
        c, s = expected.get(k, (0, set()))
        expected[k] = (c + 1, s | {v})
    for spill_every in (0, 5_000):
        m = _merger(agg, tmp_path, spill_every, batch=250)
        m.mergeValues(pairs)
        assert dict(m.items()) == expected
        assert (m.spills > 0) == bool(spill_every)
        _assert_clean(tmp_path)


@pytest.mark.parametrize("spill_every", [0, 15_000])
def test_merge_key_counts_of_a_flat_map_matches_counter(tmp_path, spill_every):
    """mergeKeyCountsOf(f, items) counts the keys of items.flatMap(f) (the word count's
    words of lines), lines with few and with many new keys alike, spilling or not."""
    from collections import Counter
    rnd = random.Random(11)
    lines = [" ".join("w%d" % rnd.randrange(50 if i % 7 else 100_000)
                      for _ in range(1 + i % 40)) for i in range(20_000)]
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, spill_every,
                batch=200)
    m.mergeKeyCountsOf(str.split, iter(lines))
    assert dict(m.items()) == Counter(w for line in lines for w in line.split())
    assert (m.spills > 0) == bool(spill_every)
    _assert_clean(tmp_path)


@pytest.mark.parametrize("spill_every", [0, 4_000])
def test_merge_combiners_matches_dict(tmp_path, spill_every):
    pairs = _pairs(seed=5)
    # combiners produced by several "map tasks", merged on the reduce side
    maps = [pairs[i::3] for i in range(3)]
    combined = [list(_reduce(p, operator.add).items()) for p in maps]
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, spill_every, batch=300)
    for c in combined:
        m.mergeCombiners(iter(c))
    assert dict(m.items()) == _reduce(pairs, operator.add)
    _assert_clean(tmp_path)


def test_merge_with_real_tiny_memory_limit(tmp_path):
    """memory_limit=1 MB: spills driven by the real RSS measurement."""

    def pairs():  # fresh objects, so the merger's memory really grows
        rnd = random.Random(3)
        for _ in range(200_000):
            k = rnd.randrange(150_000)
            yield "key-%07d" % k, "%06d" % rnd.randrange(10**6) + "x" * (k % 97)

    expected = _reduce(pairs(), max)
    m = _merger(Aggregator(lambda x: x, max, max), tmp_path, memory_limit=1, batch=1000)
    m.mergeValues(pairs())
    got = dict(m.items())
    assert got == expected
    assert m.spills > 0
    assert m.disk_bytes_spilled > 0
    _assert_clean(tmp_path)


def test_empty_and_repeated_calls(tmp_path):
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, 100, batch=10)
    m.mergeValues(iter([]))
    assert list(m.items()) == []
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, 500, batch=50)
    data = _pairs(3000, 300)
    for i in range(0, 3000, 250):
        m.mergeValues(data[i:i + 250])
    assert dict(m.items()) == _reduce(data, operator.add)
    _assert_clean(tmp_path)


def test_recursive_merge_resplits_skewed_partition(tmp_path):
    """All keys hash to the same level-0 sub-partition; recursion re-splits them."""
    agg = Aggregator(lambda x: x, operator.add, operator.add)
    level0 = ExternalMerger(agg)
    level1 = ExternalMerger(agg, scale=59)
    level2 = ExternalMerger(agg, scale=59 * 59)
    assert (level1._depth, level2._depth) == (1, 2)
    keys = [k for k in range(400_000) if level0._partition(k) == 0][:3000]
    assert len(keys) == 3000
    # the next levels spread those keys evenly over the sub-partitions
    counts = [0] * 59
    for k in keys:
        counts[level1._partition(k)] += 1
    assert min(counts) > 0 and max(counts) < 3 * len(keys) / 59
    assert len({level2._partition(k) for k in keys if level1._partition(k) == 0}) > 20
    # ... and are independent of a hash(k) % n shuffle partitioner
    assert len({level0._partition(k) for k in range(0, 100_000, 59)}) == 59
    pairs = [(k, 1) for k in keys] * 4
    random.Random(0).shuffle(pairs)
    m = _merger(agg, tmp_path, 2_000, batch=100)
    m.mergeValues(pairs)
    used_before_items = [p for p in m._files if p]
    assert len(used_before_items) == 1  # everything landed in one sub-partition
    assert dict(m.items()) == {k: 4 for k in keys}
    _assert_clean(tmp_path)


def test_items_partial_consumption_then_close_cleans(tmp_path):
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, 3_000, batch=200)
    m.mergeValues(_pairs())
    it = m.items()
    for _ in range(10):
        next(it)
    assert os.listdir(tmp_path) != []
    it.close()
    _assert_clean(tmp_path)


def test_explicit_cleanup_and_spill_dir_naming(tmp_path):
    m = _merger(Aggregator(lambda x: x, operator.add, operator.add), tmp_path, 3_000, batch=200)
    m.mergeValues(_pairs())
    (root,) = os.listdir(tmp_path)
    assert str(os.getpid()) in root
    m.cleanup()
    _assert_clean(tmp_path)


def test_multiple_local_dirs(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = ExternalMerger(Aggregator(lambda x: x, operator.add, operator.add),
                       local_dirs=[str(d) for d in dirs], batch=200)
    m.spill_every = 15_000
    pairs = _pairs()
    m.mergeValues(pairs)
    assert m.spills >= 2
    assert all(any(os.scandir(os.path.join(d, os.listdir(d)[0]))) for d in dirs)
    assert dict(m.items()) == _reduce(pairs, operator.add)
    assert os.listdir(dirs[0]) == [] and os.listdir(dirs[1]) == []


class _FramedSerializer:
    """An engine-style serializer: one pickle per record, length-framed."""

    def __init__(self):
        self.dumped = 0

    def dump_stream(self, iterator, stream):
        import pickle

        for obj in iterator:
            data = pickle.dumps(obj)
            stream.write(len(data).to_bytes(4, "big"))
            stream.write(data)
            self.dumped += 1

    def load_stream(self, stream):
        import pickle

        while True:
            h = stream.read(4)
            if not h:
                return
            yield pickle.loads(stream.read(int.from_bytes(h, "big")))


def test_custom_serializer(tmp_path):
    ser = _FramedSerializer()
    m = ExternalMerger(Aggregator(lambda x: x, operator.add, operator.add), serializer=ser,
                       local_dirs=[str(tmp_path)], batch=300)
    m.spill_every = 5_000
    pairs = _pairs()
    m.mergeValues(pairs)
    assert dict(m.items()) == _reduce(pairs, operator.add)
    assert ser.dumped > 0
    _assert_clean(tmp_path)


def test_batched_pickle_serializer_roundtrip_and_cloudpickle_fallback(tmp_path):
    import io

    ser = BatchedPickleSerializer(best_size=256)
    objs = [(i, "x" * (i % 50), [i] * (i % 7)) for i in range(5000)] + [(1, lambda: 42)]
    buf = io.BytesIO()
    ser.dump_stream(iter(objs), buf)
    ser.dump_stream(iter(objs[:10]), buf)  # streams concatenate
    buf.seek(0)
    out = list(ser.load_stream(buf))
    assert out[:5000] == objs[:5000] and out[5000][1]() == 42 and out[5001:] == objs[:10]


# ---------------------------------------------------------------- group-by


@pytest.mark.parametrize("spill_every", [0, 6_000])
def test_group_by_values(tmp_path, spill_every):
    pairs = _str_pairs(seed=7)
    g = ExternalGroupBy(memory_limit=512, local_dirs=[str(tmp_path)], batch=300)
    g.spill_every = spill_every
    g.mergeValues(iter(pairs))
    got = dict(g.items())
    # values keep their input order within a key, also across spills
    assert {k: list(v) for k, v in got.items()} == _group(pairs)
    # as PySpark's: plain lists, or once spilled an ExternalListOfList of each key's values
    kind = ExternalListOfList if spill_every else list
    assert all(type(v) is kind for v in got.values())
    assert (g.spills > 0) == bool(spill_every)
    _assert_clean(tmp_path)


def test_group_by_lists_are_plain_after_spills(tmp_path):
    """What a map side writes to the shuffle: lists, spilled or not."""
    pairs = _str_pairs(seed=8)
    g = ExternalGroupBy(memory_limit=512, local_dirs=[str(tmp_path)], batch=300)
    g.spill_every = 6000
    g.mergeValues(iter(pairs))
    got = dict(g.lists())
    assert g.spills > 0 and got == _group(pairs)
    assert all(type(v) is list for v in got.values())


def _with_groups(pairs, every=3):
    """`pairs` with each run of a key divisible by `every` sent as one marked group, as a
    map task that grouped its records writes them."""
    import itertools
    out = []
    for k, run in itertools.groupby(pairs, key=operator.itemgetter(0)):
        values = [v for _, v in run]
        if k % every == 0:
            out.append((k, (external.GROUPED, values)))
        else:
            out.extend((k, v) for v in values)
    return out


@pytest.mark.parametrize("spill_every", [0, 6_000])
def test_group_of_groups_takes_values_and_marked_groups_in_order(tmp_path, spill_every):
    from ember.shuffle.external import ExternalGroupOfGroups
    pairs = sorted(_pairs(seed=9), key=operator.itemgetter(0))      # runs of a key
    pairs += [(1, ()), (2, (1, 2)), (3, (external.GROUPED,)), (4, ("x", [5]))]
    g = ExternalGroupOfGroups(memory_limit=512, local_dirs=[str(tmp_path)], batch=300)
    g.spill_every = spill_every
    g.mergeValues(iter(_with_groups(pairs)))
    assert {k: list(v) for k, v in g.items()} == _group(pairs)     # tuples stay values
    assert (g.spills > 0) == bool(spill_every)
    _assert_clean(tmp_path)


@pytest.mark.parametrize("spill_every", [0, 8_000])
def test_grouped_by_key_pairs_each_sides_values(tmp_path, monkeypatch, spill_every):
    """A cogroup partition: every key of any side once, in the order the sides meet them,
    with each side's values (an empty tuple for none), spilled or not."""
    from ember import join
    from ember.shuffle.external import ExternalGroupOfGroups
    monkeypatch.setattr(ExternalGroupOfGroups, "__init__", _forced(spill_every))
    real, regrouped = join._regrouped, []

    def counted(*args):
        regrouped.append(args)
        return real(*args)
    monkeypatch.setattr(join, "_regrouped", counted)
    sides = [_pairs(n=20_000, nkeys=3_000, seed=s) for s in (10, 11, 12)]
    sides[1] = [(k + 2_000, v) for k, v in sides[1]]            # keys only in one side
    for n in (2, 3):
        got = list(join.grouped_by_key([iter(_with_groups(p)) for p in sides[:n]], 512,
                                       [str(tmp_path)]))
        keys = [k for k, _ in got]
        assert len(keys) == len(set(keys))
        groups = [_group(p) for p in sides[:n]]
        assert {k: [list(vs) for vs in per_side] for k, per_side in got} == {
            k: [g.get(k, []) for g in groups] for g0 in groups for k in g0}
        if not spill_every:   # the order a groupByKey of the union meets the keys
            assert keys == list(dict.fromkeys(k for p in sides[:n] for k, _ in p))
    assert len(regrouped) == (2 if spill_every else 0)
    _assert_clean(tmp_path)


def test_a_cogroup_map_task_groups_only_repeated_keys(tmp_path):
    """Grouped when the first records hold 8 values a key or more on average; otherwise,
    and for a partition shorter than the sample, the records as they are."""
    from ember.join import grouped_where_repeated
    side = grouped_where_repeated(512, [str(tmp_path)])
    repeated = [(i % 500, i) for i in range(10_000)]
    out = list(side(iter(repeated)))
    assert len(out) == 500 and all(v[0] is external.GROUPED for _, v in out)
    assert {k: v[1] for k, v in out} == _group(repeated)
    for records in ([(i % 600, i) for i in range(10_000)], repeated[:4000]):
        assert list(side(iter(records))) == records


def _forced(spill_every):
    init = external.ExternalGroupBy.__init__

    def forced_init(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.spill_every = spill_every
    return forced_init


def test_external_list_spills_past_its_limit_and_pickles_what_it_spilled(tmp_path,
                                                                          monkeypatch):
    import pickle

    from ember.shuffle import spilled
    monkeypatch.setenv("SPARK_LOCAL_DIRS", str(tmp_path))
    before = spilled.DiskBytesSpilled
    lst = ExternalList(list(range(100)))
    lst.append(10)
    for i in range(20240):
        lst.append(i)
    assert len(lst) == 20341 and lst._file is not None and spilled.DiskBytesSpilled > before
    assert os.listdir(tmp_path / "objects") == []           # its file is already unlinked
    expected = list(range(100)) + [10] + list(range(20240))
    it = iter(lst)
    head = [next(it) for _ in range(5)]
    lst.append(-1)                          # appending while iterating writes at the end
    assert head + list(it) == expected + [-1] and list(lst) == expected + [-1]
    again = pickle.loads(pickle.dumps(lst))
    assert len(again) == 20342 and list(again) == expected + [-1]
    nested = ExternalListOfList([[i, i] for i in range(100)])
    nested.append(range(10))
    assert len(nested) == 210 and list(nested)[-10:] == list(range(10))


def test_group_by_key_values_are_an_external_list_once_spilled(fresh_sc):
    """PySpark's test_external_group_by_key: spark.python.worker.memory set on a running
    context holds for the next groupByKey, whose spilled values come as ExternalListOfList."""
    sc = fresh_sc()
    sc._conf.set("spark.python.worker.memory", "1m")
    n = 2000001          # PySpark's: enough that free heap a task process kept cannot hold it
    grouped = sc.parallelize(range(n)).map(lambda x: (x % 3, x)).groupByKey().cache()
    assert grouped.count() == 3
    one = grouped.filter(lambda kv: kv[0] == 1)
    assert one.values().map(lambda x: (len(x), len(list(x)))).collect() == [(n // 3, n // 3)]
    result = one.collect()[0][1]
    assert isinstance(result.data, ExternalListOfList) and len(result) == n // 3
    assert sorted(result)[:3] == [1, 4, 7]


class _RecordingSerializer(BatchedPickleSerializer):
    def __init__(self):
        super().__init__()
        self.max_list = 0

    def dump_stream(self, iterator, stream):
        def watch(it):
            for k, v in it:
                self.max_list = max(self.max_list, len(v))
                yield k, v

        super().dump_stream(watch(iterator), stream)


def test_group_by_huge_key_spills_in_chunks(tmp_path):
    rnd = random.Random(4)
    pairs = [("hot", i) for i in range(120_000)] + [("k%d" % rnd.randrange(2000), -i) for i in range(20_000)]
    rnd.shuffle(pairs)
    ser = _RecordingSerializer()
    g = ExternalGroupBy(memory_limit=512, serializer=ser, local_dirs=[str(tmp_path)], batch=500)
    g.spill_every = 30_000
    g.mergeValues(pairs)
    got = dict(g.lists())
    assert got == _group(pairs)
    assert g.spills > 0
    assert 0 < ser.max_list <= ExternalGroupBy.LIST_CHUNK
    _assert_clean(tmp_path)


# ---------------------------------------------------------------- sorter


def _sorter(tmp_path, spill_every=0, **kw):
    s = ExternalSorter(512, local_dirs=[str(tmp_path)], **kw)
    s.spill_every = spill_every
    return s


@pytest.mark.parametrize("spill_every", [0, 15_000])
@pytest.mark.parametrize("reverse", [False, True])
def test_sort_stable_with_key_and_reverse(tmp_path, spill_every, reverse):
    rnd = random.Random(8)
    # many duplicate keys; the sequence number exposes stability
    records = [(rnd.randrange(500), i) for i in range(40_000)]
    key = operator.itemgetter(0)
    s = _sorter(tmp_path, spill_every, batch=500)
    got = list(s.sorted(iter(records), key=key, reverse=reverse))
    assert got == sorted(records, key=key, reverse=reverse)
    assert (s.spills > 0) == bool(spill_every)
    _assert_clean(tmp_path)


@pytest.mark.parametrize("spill_every", [0, 8_000])
def test_sort_plain_values(tmp_path, spill_every):
    rnd = random.Random(9)
    values = ["%05d" % rnd.randrange(3000) for _ in range(25_000)]
    s = _sorter(tmp_path, spill_every, batch=250)
    assert list(s.sorted(values)) == sorted(values)
    s = _sorter(tmp_path, spill_every, batch=250)
    assert list(s.sorted(values, reverse=True)) == sorted(values, reverse=True)
    s = _sorter(tmp_path, spill_every, batch=250)
    assert list(s.sorted(iter([]))) == []
    _assert_clean(tmp_path)


def test_sort_premerges_many_runs(tmp_path):
    rnd = random.Random(10)
    records = [(rnd.randrange(100), i) for i in range(12_000)]
    key = operator.itemgetter(0)
    s = _sorter(tmp_path, 150, batch=50)
    s.MAX_MERGE_WIDTH = 8
    got = list(s.sorted(records, key=key, reverse=True))
    assert s.spills >= 70
    assert s._nfiles > s.spills  # runs were pre-merged into new run files
    assert got == sorted(records, key=key, reverse=True)
    _assert_clean(tmp_path)


def test_sort_real_tiny_memory_limit(tmp_path):
    def records():  # fresh objects, so memory really grows while sorting
        rnd = random.Random(12)
        for i in range(200_000):
            yield "%08d" % rnd.randrange(10**8), "y" * (i % 80)

    s = ExternalSorter(1, local_dirs=[str(tmp_path)])
    it = s.sorted(records(), key=operator.itemgetter(0))
    assert s.spills > 0
    assert list(it) == sorted(records(), key=operator.itemgetter(0))
    _assert_clean(tmp_path)


def test_sort_partial_consumption_cleanup(tmp_path):
    s = _sorter(tmp_path, 1_000, batch=100)
    it = s.sorted(range(10_000, 0, -1))
    assert [next(it) for _ in range(3)] == [1, 2, 3]
    it.close()
    _assert_clean(tmp_path)


# ---------------------------------------------------------------- RSS bound

_RSS_SCRIPT = textwrap.dedent(
    """
    import gc, os, resource, sys
    sys.path.insert(0, {root!r})
    from ember.shuffle.external import Aggregator, ExternalMerger, ExternalGroupBy, ExternalSorter

    LIMIT = {limit}
    KIND = {kind!r}
    N = {nkeys}

    def peak_kb():
        # VmHWM: peak RSS of this process image.  (ru_maxrss is not used: it
        # starts out at the forking parent's RSS.)
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    baseline_kb = peak_kb()

    def records():
        # each key twice, far apart; ~250 bytes of Python objects per key
        for rep in range(2):
            for i in range(N):
                k = (i * 7919) % N
                yield "key-%010d" % k, ("%08d" % (k + rep)) * 12

    if KIND == "merge":
        m = ExternalMerger(Aggregator(lambda x: x, max, max), LIMIT, local_dirs=[{tmp!r}])
        m.mergeValues(records())
        n = total = 0
        for k, v in m.items():
            n += 1
            total += int(v[:8])
        assert n == N, n
        assert total == sum(range(1, N + 1)), total
    elif KIND == "group":
        m = ExternalGroupBy(memory_limit=LIMIT, local_dirs=[{tmp!r}])
        m.mergeValues(records())
        n = 0
        for k, vs in m.items():
            n += 1
            assert len(vs) == 2
        assert n == N, n
    else:
        m = ExternalSorter(LIMIT, local_dirs=[{tmp!r}])
        prev = None
        n = 0
        for k, v in m.sorted(records()):
            assert prev is None or prev <= k
            prev = k
            n += 1
        assert n == 2 * N, n
    print(baseline_kb, peak_kb(), m.spills, m.disk_bytes_spilled)
    """
)


@pytest.mark.timeout(180)
def test_rss_bounded_with_5x_data(tmp_path):
    """~200 MB of records through a 40 MB budget: peak RSS stays near the budget.

    The three kinds run as concurrent subprocesses to keep wall time low.
    """
    limit = 40
    nkeys = 800_000  # ~200 MB of str objects if it all stayed in memory
    procs = {}
    for kind in ("merge", "group", "sort"):
        d = tmp_path / kind
        d.mkdir()
        script = _RSS_SCRIPT.format(root=ROOT, limit=limit, kind=kind, nkeys=nkeys, tmp=str(d))
        procs[kind] = (d, subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, text=True))
    for kind, (d, proc) in procs.items():
        out, err = proc.communicate(timeout=170)
        assert proc.returncode == 0, err
        baseline_kb, peak_kb, spills, disk = map(int, out.split())
        peak_mb = peak_kb / 1024
        print("kind=%s baseline=%.1f MB peak=%.1f MB spills=%d disk=%.1f MB"
              % (kind, baseline_kb / 1024, peak_mb, spills, disk / 2**20))
        assert spills > 0
        assert disk > 3 * limit * 2**20  # data really was several times the budget
        assert peak_mb < 2.5 * limit + baseline_kb / 1024
        _assert_clean(d)


def test_sorter_reused_for_two_open_results(tmp_path):
    s = _sorter(tmp_path, 500, batch=100)
    a = s.sorted(range(5000, 0, -1))
    b = s.sorted(range(3000))
    assert list(a) == list(range(1, 5001))
    assert list(b) == list(range(3000))
    _assert_clean(tmp_path)


@pytest.mark.parametrize("spill_every", [0, 8_000])
def test_inlined_add_keeps_operand_order(tmp_path, spill_every):
    pairs = [("k%d" % (i % 50), chr(97 + i % 26)) for i in range(10_000)]
    for func in (lambda a, b: a + b, lambda a, b: b + a, operator.add):
        m = _merger(Aggregator(lambda x: x, func, func), tmp_path, spill_every, batch=100)
        m.mergeValues(pairs)
        assert dict(m.items()) == _reduce(pairs, func)
    _assert_clean(tmp_path)


def test_user_key_error_is_not_taken_for_a_missing_key(tmp_path):
    def bad(a, b):
        if b == 7:
            raise KeyError("from user code")
        return a + b

    pairs = [(i % 3, 1) for i in range(20_000)] + [(1, 7)]
    m = _merger(Aggregator(lambda x: x, bad, bad), tmp_path, batch=100)
    with pytest.raises(KeyError, match="from user code"):
        m.mergeValues(pairs)
    assert m._use_try  # the try/except loop was the one running


# --------------------------------------------------------------------------
# PySpark's pyspark.shuffle
# --------------------------------------------------------------------------


def test_the_package_names_pysparks_shuffle_api_and_a_users_merger_spills_over_budget(
        tmp_path, monkeypatch):
    """`import ember as pyspark; pyspark.shuffle.X` as PySpark's tests use it: a merger
    the user builds spills as soon as the process is over its budget (the engine's own
    start above the RSS they find), in SPARK_LOCAL_DIRS, and the spilled bytes count in
    DiskBytesSpilled; SimpleAggregator, Merger and GroupByKey are PySpark's."""
    import pickle

    import ember
    from ember import shuffle
    assert ember.shuffle is shuffle and shuffle.ExternalMerger is ExternalMerger
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    monkeypatch.setenv("SPARK_LOCAL_DIRS", ",".join(dirs))
    before = shuffle.DiskBytesSpilled
    over = max(1, get_used_memory() // 2)            # the process is over this budget
    data = [(i, i) for i in range(4096)]
    m = ExternalMerger(shuffle.SimpleAggregator(operator.add), over)
    assert sorted(m.localdirs) == dirs
    m.mergeValues(data)
    assert m.spills >= 1 and shuffle.DiskBytesSpilled > before
    assert sorted(m.items()) == data
    engine = ExternalMerger(shuffle.SimpleAggregator(operator.add), over,
                            over_current_rss=True)
    engine.mergeValues(data)
    assert engine.spills == 0

    with pytest.raises(NotImplementedError):
        shuffle.Merger(shuffle.SimpleAggregator(operator.add)).items()
    groups = list(shuffle.GroupByKey(iter([(1, [0]), (2, [0]), (2, [1]), (3, [0, 1, 2])])))
    assert [(k, list(vs), len(vs)) for k, vs in groups] == [
        (1, [0], 1), (2, [0, 1], 2), (3, [0, 1, 2], 3)]
    assert [list(vs) for _, vs in pickle.loads(pickle.dumps(groups))] == [[0], [0, 1],
                                                                           [0, 1, 2]]


def test_a_sorter_asks_its_next_limit_in_mb_as_pysparks_does():
    class EverySpill(ExternalSorter):
        def _next_limit(self):
            return self.memory_limit

    from ember import shuffle
    lst = list(range(3000))
    random.Random(3).shuffle(lst)
    before = shuffle.DiskBytesSpilled
    sorter = EverySpill(1, batch=100)
    assert list(sorter.sorted(lst, reverse=True)) == sorted(lst, reverse=True)
    assert sorter.spills >= 2 and shuffle.DiskBytesSpilled > before


def test_a_tasks_merger_spills_are_its_metrics(fresh_sc):
    """As PySpark's worker: the bytes the task's mergers spilled (ember.shuffle's counters,
    reset for each task) are its memoryBytesSpilled and diskBytesSpilled."""
    from ember import SparkConf
    from ember.scheduler import listener as sl
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.python.worker.memory", "1m"))
    spilled, memory = [], []

    class Rec:
        def on_event(self, e):
            if isinstance(e, sl.TaskEnd):
                spilled.append(e.metrics.get("diskBytesSpilled", 0))
                memory.append(e.metrics.get("memoryBytesSpilled", 0))

    sc.runtime.bus.add_sync(Rec())
    pairs = sc.parallelize(range(200_000), 2).map(lambda x: (x % 50_000, x))
    assert pairs.groupByKey(2).mapValues(len).values().sum() == 200_000
    assert len(spilled) == 4 and all(n > 0 for n in spilled)
    spilled.clear()
    assert sc.parallelize(range(10), 2).map(lambda x: (x, x)).reduceByKey(operator.add) \
        .count() == 10
    assert spilled == [0, 0, 0, 0]

    def counted(x):                  # PySpark's test_worker_metrics_include_spills
        from ember import shuffle
        shuffle.MemoryBytesSpilled += 7
        shuffle.DiskBytesSpilled += 9
        return x
    spilled.clear()
    assert sc.parallelize([1, 2], 1).map(counted).collect() == [1, 2]
    assert spilled == [18] and memory[-1] == 14


class _Backwards(int):
    """An int that orders the other way: sort_list must not compare it as a float."""

    def __lt__(self, other):
        return int(self) > int(other)


@pytest.mark.parametrize("reverse", [False, True])
def test_sort_list_orders_as_list_sort_does(reverse):
    """sort_list compares big ints as floats only where that cannot change the result:
    ties keep their order, ints past 2**53 (which would round to equal floats), mixed
    types and int subclasses with their own order sort as list.sort sorts them."""
    rnd = random.Random(7)
    big = [(rnd.getrandbits(40) - (1 << 39), i) for i in range(3000)]
    ties = [(rnd.choice([1 << 35, 1 << 36, -(1 << 40)]), i) for i in range(3000)]
    past_exact = [((1 << 60) + rnd.randrange(8), i) for i in range(3000)]
    mixed = [(rnd.choice([1 << 40, 2.5, 7]), i) for i in range(3000)]
    backwards = [(_Backwards(rnd.getrandbits(40)), i) for i in range(3000)]
    small = [(rnd.randrange(100), i) for i in range(3000)]
    strings = [(str(rnd.getrandbits(40)), i) for i in range(3000)]
    by_key = operator.itemgetter(0)

    def probed(records):          # a 40-bit int where sort_list looks first
        records = list(records)
        for i in (0, len(records) // 2, len(records) - 1):
            records[i] = (1 << 40, records[i][1])
        return records
    for records in (big, ties, past_exact, mixed, backwards, small, strings,
                    probed(past_exact), probed(mixed), probed(backwards)):
        expected = sorted(records, key=by_key, reverse=reverse)
        got = list(records)
        external.sort_list(got, by_key, reverse)
        assert got == expected
        assert [r[1] for r in got] == [r[1] for r in expected]    # stable, as list.sort
    plain = [k for k, _ in big] + [1 << 35] * 10
    got = list(plain)
    external.sort_list(got, None, reverse)
    assert got == sorted(plain, reverse=reverse)
    calls = []

    def user_key(kv):
        calls.append(kv)
        return kv[0]
    got = list(big)
    external.sort_list(got, user_key, reverse)       # a user's key: called once a record
    assert got == sorted(big, key=by_key, reverse=reverse) and len(calls) == len(big)
