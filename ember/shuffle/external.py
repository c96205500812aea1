"""Memory-bounded aggregation, grouping and sorting that spill to disk.

Used inside task processes by the shuffle: map-side combine, reduce-side
aggregation (``reduceByKey``/``combineByKey``/``groupByKey``) and
``sortByKey``.  The budget is ``spark.python.worker.memory`` (MB, default
512) and is measured as the *resident set size* of the whole process, read
from ``/proc/self/statm`` every few thousand records.

How it works
------------
``ExternalMerger`` merges ``(k, v)`` pairs into one dict.  When the RSS goes
over the budget, the dict is split by a seeded hash of the key into
``partitions`` sub-partitions, each written to its own spill file, and all
later records are merged into per-sub-partition dicts that are spilled the
same way.  ``items()`` then spills what is left and merges the spill files
back one sub-partition at a time (each roughly ``1/partitions`` of the data).
If one sub-partition still does not fit it is re-partitioned recursively by
the next base-``partitions`` digit of the key's (seeded) hash, so a skewed
sub-partition splits again (see ``ExternalMerger._partition``).

RSS rarely drops after Python frees objects (the allocator keeps its arenas),
so after a spill the soft limit becomes ``max(budget, 1.05 * RSS)``: the next
spill happens as soon as memory *grows* by 5% again, never later.

The per-record loops are generated once per (strategy, create, merge)
combination from a small source template (see ``_make_loop``), so that
common aggregators (identity ``createCombiner``, ``operator.add``, list
append/extend for ``groupByKey``) run without any per-record Python call.
"""

from __future__ import annotations

import gc
import heapq
import operator
import os
import pickle
import random
import shutil
import tempfile
import types
from functools import partial
from itertools import islice
from typing import Any, Callable, Iterable, Iterator, Sequence

from ember.shuffle import spilled as _spilled
from ember.util import pickling
from ember.util.after_reply import keep_until_reply
from ember.util.files import unlink_quietly
from ember.util.kill_guard import kills_deferred
from ember.util.user_code import flat_map_checked, stop_iteration_error

__all__ = [
    "get_used_memory",
    "Aggregator",
    "SimpleAggregator",
    "BatchedPickleSerializer",
    "Merger",
    "ExternalMerger",
    "ExternalGroupBy",
    "ExternalSorter",
    "GroupByKey",
    "ExternalList",
    "ExternalListOfList",
]

# --------------------------------------------------------------------------
# memory measurement
# --------------------------------------------------------------------------

try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):  # pragma: no cover - non-POSIX
    _PAGE_SIZE = 4096

# An fd on /proc/self/statm is bound to the process that opened it ("self"
# is resolved at open time), so it is re-opened after a fork.
_statm_fd = -1
_statm_pid = -1
_psutil_proc: Any = None


def _fallback_rss() -> int:
    """RSS in bytes without /proc: psutil, else peak RSS from getrusage."""
    global _psutil_proc
    try:
        import psutil

        if _psutil_proc is None or _psutil_proc.pid != os.getpid():
            _psutil_proc = psutil.Process(os.getpid())
        return int(_psutil_proc.memory_info().rss)
    except Exception:
        pass
    try:
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # bytes on macOS, KiB elsewhere
        return int(peak) if sys.platform == "darwin" else int(peak) << 10
    except Exception:  # pragma: no cover
        return 0


def _rss_bytes() -> int:
    """Resident set size of this process in bytes (about 2 us on Linux)."""
    global _statm_fd, _statm_pid
    pid = os.getpid()
    if pid != _statm_pid:
        with kills_deferred:    # a closed descriptor is never left kept (it may be reused)
            if _statm_fd >= 0:
                try:
                    os.close(_statm_fd)
                except OSError:
                    pass
            try:
                _statm_fd = os.open("/proc/self/statm",
                                    os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
            except OSError:
                _statm_fd = -1
            _statm_pid = pid
    if _statm_fd >= 0:
        try:
            return int(os.pread(_statm_fd, 128, 0).split()[1]) * _PAGE_SIZE
        except (OSError, ValueError, IndexError):
            pass
    return _fallback_rss()


def get_used_memory() -> int:
    """Return the RSS of this process in MB.

    Reads ``/proc/self/statm``; falls back to psutil, then to the peak RSS
    reported by ``resource.getrusage``.
    """
    return _rss_bytes() >> 20


# --------------------------------------------------------------------------
# aggregator and spill serializer
# --------------------------------------------------------------------------


class Aggregator:
    """The three functions of ``combineByKey``.

    Why: the merger needs to know how to start a combiner from one value,
    fold a value into a combiner (map side) and fold two combiners together
    (reduce side and when re-merging spill files).
    """

    def __init__(
        self,
        createCombiner: Callable[[Any], Any],
        mergeValue: Callable[[Any, Any], Any],
        mergeCombiners: Callable[[Any, Any], Any],
    ) -> None:
        self.createCombiner = createCombiner
        self.mergeValue = mergeValue
        self.mergeCombiners = mergeCombiners

    def __repr__(self) -> str:
        return "Aggregator(%r, %r, %r)" % (self.createCombiner, self.mergeValue, self.mergeCombiners)


def _identity(x: Any) -> Any:
    return x


class SimpleAggregator(Aggregator):
    """PySpark's: a combiner that is a value of the same kind, one function merging both."""

    def __init__(self, combiner: Callable[[Any, Any], Any]) -> None:
        super().__init__(_identity, combiner, combiner)


class Merger:
    """PySpark's base of the mergers: merge values or combiners, then read the items."""

    def __init__(self, aggregator: Aggregator) -> None:
        self.agg = aggregator

    def mergeValues(self, iterator: Iterable[tuple]) -> None:
        raise NotImplementedError

    def mergeCombiners(self, iterator: Iterable[tuple]) -> None:
        raise NotImplementedError

    def items(self) -> Iterator[tuple]:
        raise NotImplementedError


class ExternalList:
    """PySpark's list that keeps at most LIMIT items in memory: past that it moves them to
    a file of its own (already unlinked) and reads them back first when iterated. It
    pickles with what it spilled (a grouped RDD's values are cached and shuffled)."""

    LIMIT = 10240

    def __init__(self, values: list) -> None:
        self.values = values
        self.count = len(values)
        self._file: Any = None

    def __len__(self) -> int:
        return self.count

    def append(self, value: Any) -> None:
        self.values.append(value)
        self.count += 1
        if len(self.values) >= self.LIMIT:
            self._spill()

    def __iter__(self) -> Iterator[Any]:
        if self._file is not None:
            self._file.flush()
            # a description of its own: reading must not move where appends write
            with open(f"/proc/self/fd/{self._file.fileno()}", "rb") as f:
                yield from BatchedPickleSerializer().load_stream(f)
        yield from self.values

    def _spilled(self) -> bytes:
        self._file.flush()
        return os.pread(self._file.fileno(), self._file.tell(), 0)

    def _open_file(self) -> None:
        dirs = _default_local_dirs()
        d = os.path.join(dirs[id(self) % len(dirs)], "objects")
        os.makedirs(d, exist_ok=True)
        fd, path = tempfile.mkstemp(dir=d)
        os.unlink(path)
        self._file = os.fdopen(fd, "w+b", 65536)

    def _spill(self) -> None:
        if self._file is None:
            self._open_file()
        before = get_used_memory()
        start = self._file.tell()
        BatchedPickleSerializer().dump_stream(self.values, self._file)
        self.values = []
        _spilled.DiskBytesSpilled += self._file.tell() - start
        _spilled.MemoryBytesSpilled += max(before - get_used_memory(), 0) << 20

    def __getstate__(self) -> tuple:
        return self.values, self.count, self._spilled() if self._file is not None else b""

    def __setstate__(self, state: tuple) -> None:
        self.values, self.count, spilled = state
        self._file = None
        if spilled:
            self._open_file()
            self._file.write(spilled)

    def __del__(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class ExternalListOfList(ExternalList):
    """An ExternalList of lists, sized and iterated as their values one after another (the
    values of one key once a groupByKey has spilled, as in PySpark)."""

    def __init__(self, values: list) -> None:
        super().__init__(values)
        self.count = sum(len(v) for v in values)

    def append(self, value: Any) -> None:
        super().append(value)
        self.count += len(value) - 1

    def __iter__(self) -> Iterator[Any]:
        for values in super().__iter__():
            yield from values


class GroupByKey:
    """PySpark's: (k, values-list) pairs sorted by key, grouped into (k, ExternalListOfList)."""

    def __init__(self, iterator: Iterable[tuple]) -> None:
        self.iterator = iterator

    def __iter__(self) -> Iterator[tuple]:
        key: Any = None
        values: ExternalListOfList | None = None
        for k, v in self.iterator:
            if values is not None and k == key:
                values.append(v)
            else:
                if values is not None:
                    yield key, values
                key, values = k, ExternalListOfList([v])
        if values is not None:
            yield key, values


def _default_local_dirs() -> list[str]:
    """PySpark's: the directories of SPARK_LOCAL_DIRS, in an order of this instance's own
    (so that mergers spread their first spills), else the temporary directory."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    random.shuffle(dirs)
    return dirs or [tempfile.gettempdir()]


class BatchedPickleSerializer:
    """Default spill-file format: length-framed pickled lists of records.

    Why: spill files are written and read by the same process, so plain
    ``pickle`` (C speed) suffices; batches are sized adaptively to ~64 KB so a
    reader holds only one small batch per open file (important when many
    sorted runs are merged at once), and frames are self-delimiting so
    streams can be concatenated.  Objects plain pickle refuses (lambdas,
    local classes) fall back to cloudpickle.
    """

    def __init__(self, best_size: int = 1 << 16) -> None:
        self.best_size = best_size

    def dump_stream(self, iterator: Iterable[Any], stream: Any) -> None:
        it = iter(iterator)
        write = stream.write
        dumps = pickling.dumps
        best = self.best_size
        n = 16
        while True:
            items = list(islice(it, n))
            if not items:
                return
            data = dumps(items, pickle.HIGHEST_PROTOCOL)
            size = len(data)
            write(size.to_bytes(8, "little"))
            write(data)
            if size < best:
                n *= 2
            elif size > best * 8 and n > 1:
                n //= 2

    def load_stream(self, stream: Any) -> Iterator[Any]:
        read = stream.read
        loads = pickle.loads
        while True:
            header = read(8)
            if not header:
                return
            if len(header) != 8:
                raise EOFError("truncated spill file")
            size = int.from_bytes(header, "little")
            data = read(size)
            if len(data) != size:
                raise EOFError("truncated spill file")
            yield from loads(data)

    def __repr__(self) -> str:
        return "BatchedPickleSerializer(%d)" % self.best_size


# --------------------------------------------------------------------------
# generated per-record loops
# --------------------------------------------------------------------------

_MISSING: Any = object()
_HASH_SEED = 0x2545F491

# A "loop" merges one chunk (an islice) of (k, v) pairs into dict ``d`` and
# returns how many keys were new, or -1 when the chunk was empty (input
# exhausted).  Two strategies:
#   try: ``d[k]`` under try/except -- zero-cost when the key exists (3.11),
#        ~0.5 us per miss; best when nearly all records hit existing keys.
#   get: ``k in d`` then ``d[k]`` -- no exception; best for many new keys.
# The driver picks per chunk from the miss rate of the previous chunk.
_LOOP_HEAD = """
def {name}(d, it, creator, comb, _missing=_MISSING):
    misses = 0
    k = _missing
"""
_LOOP_TRY = """
    for k, v in it:
        try:
            old = d[k]
        except KeyError:
            {create}
            misses += 1
        else:
            {merge}
    return -1 if k is _missing else misses
"""
_LOOP_GET = """
    for k, v in it:
        if k in d:
            old = d[k]
            {merge}
        else:
            {create}
            misses += 1
    return -1 if k is _missing else misses
"""
# After the first spill records are routed to one of ``nparts`` dicts (see
# ExternalMerger._partition for the hash).
_LOOP_PART = """
def {name}(pdata, nparts, seed, scale, it, creator, comb, _missing=_MISSING):
    k = _missing
    for k, v in it:
        d = pdata[hash((k, seed)) // scale % nparts]
        if k in d:
            old = d[k]
            {merge}
        else:
            {create}
    return -1 if k is _missing else 0
"""

# statement templates: ``create`` stores a new combiner, ``merge`` folds v in
_CREATE_CALL = "d[k] = creator(v)"
_CREATE_IDENTITY = "d[k] = v"
_CREATE_LIST = "d[k] = [v]"
_CREATE_OWN_LIST = "d[k] = v if v.__class__ is list else list(v)"
_MERGE_CALL = "d[k] = comb(old, v)"
_MERGE_ADD = "d[k] = old + v"
_MERGE_APPEND = "old.append(v)"
_MERGE_EXTEND = "old.extend(v)"
# a value that is a map task's list of the key's values, or one value (ExternalGroupOfGroups)
_CREATE_GROUP_OR_LIST = ("d[k] = v[1] if v.__class__ is tuple and len(v) == 2 "
                         "and v[0] is GROUPED else [v]")
_MERGE_GROUP_OR_APPEND = ("old.extend(v[1]) if v.__class__ is tuple and len(v) == 2 "
                          "and v[0] is GROUPED else old.append(v)")


class GROUPED:
    """Marks a record (k, (GROUPED, [v, ...])) whose values a map task grouped by key
    before its shuffle (ember.join). A class: it pickles as a reference to itself, once
    per batch, and unpickles as the same object."""


_loop_cache: dict[tuple[str, str, str], Callable[..., int]] = {}


def _make_loop(kind: str, create: str, merge: str) -> Callable[..., int]:
    """Compile (once) a loop of ``kind`` ('try', 'get' or 'part')."""
    cache_key = (kind, create, merge)
    fn = _loop_cache.get(cache_key)
    if fn is None:
        name = "_merge_%s_loop" % kind
        if kind == "part":
            src = _LOOP_PART.format(name=name, create=create, merge=merge)
        else:
            body = _LOOP_TRY if kind == "try" else _LOOP_GET
            src = _LOOP_HEAD.format(name=name) + body.format(create=create, merge=merge)
        ns: dict[str, Any] = {"_MISSING": _MISSING, "GROUPED": GROUPED}
        exec(compile(src, "<ember.shuffle.external:%s>" % name, "exec"), ns)
        fn = _loop_cache[cache_key] = ns[name]
    return fn


def _loops(create: str, merge: str) -> tuple[Callable[..., int], Callable[..., int], Callable[..., int]]:
    return (_make_loop("try", create, merge), _make_loop("get", create, merge),
            _make_loop("part", create, merge))


_IDENTITY_CODE = (lambda x: x).__code__.co_code
_ADD_CODE = (lambda a, b: a + b).__code__.co_code


def _same_code(f: Any, co_code: bytes, nargs: int) -> bool:
    if type(f) is not types.FunctionType:  # not bound methods, partials, ...
        return False
    code = f.__code__
    return (
        code.co_code == co_code
        and code.co_argcount == nargs
        and code.co_kwonlyargcount == 0
        and not code.co_flags & 0x0C  # no *args / **kwargs
    )


def _is_identity(f: Any) -> bool:
    """True if ``f`` is a plain Python function whose body is ``return arg``."""
    return _same_code(f, _IDENTITY_CODE, 1)


def _is_add(f: Any) -> bool:
    """True for ``operator.add`` or a function compiled to ``return a + b``.

    Bytecode only uses the two arguments (no globals or closures), so such a
    function is exactly ``a + b`` and may be inlined into the loop.
    """
    return f is operator.add or _same_code(f, _ADD_CODE, 2)


try:
    from collections import _count_elements  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - other Pythons
    _count_elements = None


def _drain(d: dict) -> Iterator[tuple]:
    """Yield and remove the items of ``d`` so they are freed as consumed."""
    popitem = d.popitem
    while d:
        yield popitem()


def _next_limit(base: int) -> int:
    """Soft limit in bytes: the budget, or 5% above the current RSS."""
    return max(base, int(_rss_bytes() * 1.05))


# --------------------------------------------------------------------------
# ExternalMerger
# --------------------------------------------------------------------------


class ExternalMerger(Merger):
    """Hash aggregation of (k, v) pairs that spills to disk over a budget.

    Why: ``combineByKey`` must keep one combiner per distinct key; with more
    keys than fit in the worker's memory budget the task would be killed.
    The merger keeps RSS near ``memory_limit`` by spilling hash
    sub-partitions to ``local_dirs`` and merging them back one by one.

    Counters ``spills``, ``memory_bytes_spilled`` (estimated from RSS growth
    between spills) and ``disk_bytes_spilled`` are reported as task metrics.
    Set ``spill_every`` (records) to force spilling in tests: it then also
    acts as a record budget when spilled sub-partitions are merged back.

    As PySpark's, a merger spills once the process is over ``memory_limit``.
    The engine's own mergers pass ``over_current_rss``: they start with the
    limit a spill leaves, max(budget, 1.05 x RSS now), because they run in
    long-lived task processes whose RSS stays above what they use (allocator
    arenas, cached partitions) and would otherwise spill a handful of records
    at every task's first check.
    """

    #: maximum depth of recursive re-partitioning (59**3 sub-partitions)
    MAX_DEPTH = 3
    #: the memory-check interval grows up to ``batch * MAX_BATCH_FACTOR``
    MAX_BATCH_FACTOR = 16

    def __init__(
        self,
        aggregator: Aggregator,
        memory_limit: int = 512,
        serializer: Any = None,
        local_dirs: list[str] | None = None,
        scale: int = 1,
        partitions: int = 59,
        batch: int = 1000,
        *,
        over_current_rss: bool = False,
    ) -> None:
        self.agg = aggregator
        self.memory_limit = memory_limit
        self.serializer = serializer if serializer is not None else BatchedPickleSerializer()
        self.local_dirs = list(local_dirs) if local_dirs else _default_local_dirs()
        self.scale = scale
        self.partitions = max(1, int(partitions))
        self.batch = max(1, int(batch))
        self.data: dict = {}
        self.pdata: list[dict] | None = None  # per sub-partition dicts after a spill
        self.spills = 0
        self.memory_bytes_spilled = 0
        self.disk_bytes_spilled = 0
        self.spill_every = 0  # test hook, see class docstring
        self._seed = _HASH_SEED
        self._depth = 0
        s = self.scale
        while s > 1 and s % self.partitions == 0:
            s //= self.partitions
            self._depth += 1
        self._pid = os.getpid()
        self._roots: list[str] = []  # unique spill directories, created lazily
        self._files: list[list[str]] = [[] for _ in range(self.partitions)]
        self._base_limit = int(memory_limit * (1 << 20))
        self.over_current_rss = over_current_rss
        self._limit = _next_limit(self._base_limit) if over_current_rss else self._base_limit
        self._last_rss = self._rss_floor = _rss_bytes()
        self._chunk = self.batch
        self._since_spill = 0
        self._use_try = False
        self._setup_loops()

    # -- loop selection ---------------------------------------------------
    def _setup_loops(self) -> None:
        agg = self.agg
        create = _CREATE_IDENTITY if _is_identity(agg.createCombiner) else _CREATE_CALL
        merge = _MERGE_ADD if _is_add(agg.mergeValue) else _MERGE_CALL
        self._value_loops = _loops(create, merge)
        self._value_fns = (agg.createCombiner, agg.mergeValue)
        merge = _MERGE_ADD if _is_add(agg.mergeCombiners) else _MERGE_CALL
        self._comb_loops = _loops(_CREATE_IDENTITY, merge)
        self._comb_fns = (None, agg.mergeCombiners)

    # -- public merging API -------------------------------------------------
    def mergeValues(self, iterator: Iterable[tuple]) -> None:
        """Merge (k, v) pairs using createCombiner / mergeValue."""
        creator, comb = self._value_fns
        self._drive(iterator, self._value_loops, creator, comb)

    def mergeKeyCounts(self, keys: Iterable) -> None:
        """Same as ``mergeValues((k, 1) for k in keys)`` when createCombiner is the identity
        and mergeValue is ``+`` — counted by CPython's C counter while nothing has spilled
        (``d[k] = d.get(k, 0) + 1`` is exactly ``1`` for a new key, ``old + 1`` otherwise)."""
        it = iter(keys)
        count = _count_elements
        while True:
            if self.pdata is not None or count is None:
                creator, comb = self._value_fns
                self._drive(((k, 1) for k in it), self._value_loops, creator, comb)
                return
            first = next(it, _MISSING)        # the end of input, without building lists
            if first is _MISSING:
                return
            data = self.data
            data[first] = data.get(first, 0) + 1
            n = self._chunk
            count(data, islice(it, n - 1))
            self._since_spill += n
            self._check_memory()

    def mergeKeyCountsOf(self, f: Callable[[Any], Iterable], items: Iterable) -> None:
        """``mergeKeyCounts`` of the keys ``items.flatMap(f)`` gives (a line's words), with
        the memory checked between runs of items instead of through an islice over every
        key. A run is sized from the new keys the last one added, so that about ``_chunk``
        new keys (what fills memory) come between two checks, however many keys an item
        has."""
        it = iter(items)
        count = _count_elements
        run = 64
        while True:
            if self.pdata is not None or count is None:
                self.mergeKeyCounts(flat_map_checked(f, it))
                return
            chunk = list(islice(it, run))
            if not chunk:
                return
            data = self.data
            before = len(data)
            count(data, flat_map_checked(f, chunk))
            grown = len(data) - before
            self._since_spill += len(chunk)
            self._check_memory()
            run = max(1, min(self._chunk, self._chunk * len(chunk) // grown if grown
                             else len(chunk) * 2))

    def mergeCombiners(self, iterator: Iterable[tuple]) -> None:
        """Merge (k, combiner) pairs using mergeCombiners."""
        creator, comb = self._comb_fns
        self._drive(iterator, self._comb_loops, creator, comb)

    def _drive(self, iterator: Iterable[tuple], loops: tuple, creator: Any, comb: Any) -> None:
        """Merge `iterator` with `loops`. A StopIteration out of the loops can only be the
        user's functions' (the input's own end stops the loops), so it becomes PySpark's
        error here, once, instead of a wrapper around every call (as PySpark's Aggregator
        wraps them)."""
        try:
            self._drive_chunks(iterator, loops, creator, comb)
        except StopIteration as exc:
            raise stop_iteration_error(exc) from exc

    def _drive_chunks(self, iterator: Iterable[tuple], loops: tuple, creator: Any,
                      comb: Any) -> None:
        try_loop, get_loop, part_loop = loops
        it = iter(iterator)
        while True:
            n = self._chunk
            pdata = self.pdata
            if pdata is None:
                if self._use_try:
                    misses = try_loop(self.data, islice(it, n), creator, comb)
                    if misses * 25 > n:  # >4% new keys: exceptions cost more
                        self._use_try = False
                else:
                    misses = get_loop(self.data, islice(it, n), creator, comb)
                    if 0 <= misses * 50 < n:  # <2% new keys
                        self._use_try = True
                if misses < 0:
                    return
            elif part_loop(pdata, self.partitions, self._seed, self.scale, islice(it, n), creator, comb) < 0:
                return
            self._since_spill += n
            self._check_memory()

    def _check_memory(self) -> None:
        """Called every ``_chunk`` records: spill or adapt the interval."""
        rss = _rss_bytes()
        limit = self._limit
        every = self.spill_every
        if rss >= limit or (every and self._since_spill >= every):
            self._spill(rss)
            return
        # Check again after about half of the remaining headroom is used up,
        # at the growth rate of the last interval.
        n = self._chunk
        grow = rss - self._last_rss
        self._last_rss = rss
        n = n * 2 if grow <= 0 else (limit - rss) * n // (2 * grow)
        n = min(max(n, self.batch), self.batch * self.MAX_BATCH_FACTOR)
        if every:
            n = max(1, min(n, every - self._since_spill))
        self._chunk = n

    # -- spilling -----------------------------------------------------------
    def _ensure_roots(self) -> None:
        if not self._roots:
            tag = "ember-%s-%d-%d-" % (type(self).__name__.lower(), os.getpid(), id(self))
            for d in self.local_dirs:
                os.makedirs(d, exist_ok=True)
                self._roots.append(tempfile.mkdtemp(prefix=tag, dir=d))

    def _spill_items(self, items: Iterator[tuple]) -> Iterator[tuple]:
        """Hook: records actually written for a sub-partition."""
        return items

    def _write(self, index: int, items: Iterator[tuple]) -> None:
        root = self._roots[self.spills % len(self._roots)]
        path = os.path.join(root, "%d.%d" % (index, self.spills))
        with open(path, "wb") as f:
            self.serializer.dump_stream(self._spill_items(items), f)
            written = f.tell()
        self.disk_bytes_spilled += written
        _spilled.DiskBytesSpilled += written
        self._files[index].append(path)

    def _spill(self, rss_before: int | None = None) -> None:
        """Write all in-memory combiners to one file per sub-partition."""
        if rss_before is None:
            rss_before = _rss_bytes()
        self._ensure_roots()
        nparts = self.partitions
        if self.pdata is None:
            # First spill: bucket the keys (8 bytes each), then write and
            # drop each bucket's combiners so memory is released as we go.
            data = self.data
            seed = self._seed
            scale = self.scale
            buckets: list[list] = [[] for _ in range(nparts)]
            appends = [b.append for b in buckets]
            for k in data:
                appends[hash((k, seed)) // scale % nparts](k)
            del appends
            pop = data.pop
            for i in range(nparts):
                keys = buckets[i]
                buckets[i] = None  # type: ignore[call-overload]
                if keys:
                    self._write(i, ((k, pop(k)) for k in keys))
                del keys
            self.data = {}
            self.pdata = [{} for _ in range(nparts)]
        else:
            pdata = self.pdata
            for i in range(nparts):
                if pdata[i]:
                    self._write(i, iter(pdata[i].items()))
                    pdata[i] = {}
        self.spills += 1
        gc.collect()
        rss = _rss_bytes()
        freed = max(rss_before - self._rss_floor, 0)
        self.memory_bytes_spilled += freed
        _spilled.MemoryBytesSpilled += freed
        self._rss_floor = self._last_rss = rss
        self._limit = max(self._base_limit, int(rss * 1.05))
        self._chunk = min(self.batch, self.spill_every) if self.spill_every else self.batch
        self._since_spill = 0

    # -- reading back -------------------------------------------------------
    def items(self) -> Iterator[tuple]:
        """Iterate over the merged (k, combiner) pairs.

        Without spills this is just the dict's items.  Otherwise the rest is
        spilled and each sub-partition is merged and yielded in turn; spill
        files are removed as they are consumed and ``cleanup()`` runs when
        the iterator is exhausted or closed.
        """
        if not self.spills:
            return iter(self.data.items())
        return self._external_items()

    def _external_items(self) -> Iterator[tuple]:
        try:
            if any(self.pdata or ()):
                self._spill()
            self.pdata = None
            self.data = {}
            for i in range(self.partitions):
                files = self._files[i]
                if files:
                    yield from self._merge_partition(files)
                    for p in files:
                        unlink_quietly(p)
                    self._files[i] = []
        finally:
            self.cleanup()

    def _merge_partition(self, files: Sequence[str]) -> Iterator[tuple]:
        """Merge one sub-partition's spill files; recurse if it is too big."""
        d: dict = {}
        get_loop = self._comb_loops[1]
        comb = self._comb_fns[1]
        load = self.serializer.load_stream
        limit = _next_limit(self._base_limit)
        can_recurse = self._depth < self.MAX_DEPTH
        every = self.spill_every
        n = min(self.batch, every) if every else self.batch
        loaded = 0
        for j, path in enumerate(files):
            with open(path, "rb") as f:
                stream = iter(load(f))
                while get_loop(d, islice(stream, n), None, comb) >= 0:
                    loaded += n
                    if can_recurse and len(d) > 1 and (
                        _rss_bytes() > limit or (every and loaded >= every)
                    ):
                        yield from self._recursive_items(d, stream, files[j + 1:])
                        return
        yield from d.items()

    def _recursive_items(self, d: dict, stream: Iterator[tuple], rest: Sequence[str]) -> Iterator[tuple]:
        """Re-partition an oversized sub-partition at the next hash level."""
        self._ensure_roots()
        sub = self._new_sub_merger()
        try:
            sub.mergeCombiners(_drain(d))
            sub.mergeCombiners(stream)
            load = self.serializer.load_stream
            for path in rest:
                with open(path, "rb") as f:
                    sub.mergeCombiners(load(f))
                unlink_quietly(path)
            yield from sub.items()
        finally:
            sub.cleanup()
            self.spills += sub.spills
            self.memory_bytes_spilled += sub.memory_bytes_spilled
            self.disk_bytes_spilled += sub.disk_bytes_spilled

    def _partition(self, key: Any) -> int:
        """Sub-partition of ``key`` at this merger's recursion level.

        Level d uses base-``partitions`` digit d of one well-mixed hash
        (``hash((key, seed))`` -- mixing in a seed keeps it independent of
        the shuffle partitioner's ``hash(key) % n``), so the keys of one
        sub-partition spread evenly over the next level.  (Seeding the tuple
        differently per level does not work: ``hash((k, s1)) % 59`` and
        ``hash((k, s2)) % 59`` are strongly correlated.)  The per-record
        loops inline this expression.
        """
        return hash((key, self._seed)) // self.scale % self.partitions

    def _new_sub_merger(self) -> "ExternalMerger":
        sub = type(self)(
            self.agg,
            self.memory_limit,
            self.serializer,
            [self._roots[self.spills % len(self._roots)]],
            self.scale * self.partitions,
            self.partitions,
            self.batch,
            over_current_rss=self.over_current_rss,
        )
        sub._depth = self._depth + 1
        sub.spill_every = self.spill_every
        return sub

    @property
    def localdirs(self) -> list[str]:     # PySpark's name
        return self.local_dirs

    # -- cleanup --------------------------------------------------------------
    def cleanup(self) -> None:
        """Remove all spill files and directories of this merger."""
        if os.getpid() != self._pid:  # a forked copy must not touch the parent's files
            return
        roots, self._roots = self._roots, []
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)
        self._files = [[] for _ in range(self.partitions)]

    _cleanup = cleanup      # PySpark's name

    def __del__(self) -> None:
        try:
            if self._roots:
                self.cleanup()
        except Exception:
            pass


# --------------------------------------------------------------------------
# ExternalGroupBy
# --------------------------------------------------------------------------


def _new_list(v: Any) -> list:
    return [v]


def _append(lst: list, v: Any) -> list:
    lst.append(v)
    return lst


def _extend(lst: list, other: Iterable[Any]) -> list:
    lst.extend(other)
    return lst


class ExternalGroupBy(ExternalMerger):
    """``groupByKey`` merger: combiners are lists of values.

    Why: grouping cannot shrink data, so it is the operation most likely to
    exceed memory, and one hot key can own a huge list.  Values are appended
    / extended in place (never ``a + b`` copies), spilled lists are written
    in chunks of ``LIST_CHUNK`` values (pickling a huge list whole would need
    a second copy of it as bytes), and a sub-partition holding a single key
    is not re-partitioned.  So each key's values are held in memory at most
    once; the yielded combiners are plain lists.

    The aggregator argument is optional and, if given, its functions are
    ignored: list semantics are always used (so this class can be used on
    both the map and reduce sides of ``groupByKey``).
    """

    LIST_CHUNK = 1024

    def __init__(
        self,
        aggregator: Aggregator | None = None,
        memory_limit: int = 512,
        serializer: Any = None,
        local_dirs: list[str] | None = None,
        scale: int = 1,
        partitions: int = 59,
        batch: int = 1000,
        *,
        over_current_rss: bool = False,
    ) -> None:
        if aggregator is None:
            aggregator = Aggregator(_new_list, _append, _extend)
        super().__init__(aggregator, memory_limit, serializer, local_dirs, scale, partitions, batch,
                         over_current_rss=over_current_rss)

    def _setup_loops(self) -> None:
        self._value_loops = _loops(_CREATE_LIST, _MERGE_APPEND)
        self._value_fns = (None, None)
        self._comb_loops = _loops(_CREATE_OWN_LIST, _MERGE_EXTEND)
        self._comb_fns = (None, None)

    def items(self) -> Iterator[tuple]:
        """As PySpark's: once it has spilled, each key's values come as an
        ExternalListOfList (here of the one list merged back in memory)."""
        if not self.spills:
            return iter(self.data.items())
        return ((k, ExternalListOfList([values])) for k, values in self._external_items())

    def lists(self) -> Iterator[tuple]:
        """(k, list) pairs, spilled or not: what a map side writes to the shuffle."""
        return super().items()

    def _spill_items(self, items: Iterator[tuple]) -> Iterator[tuple]:
        chunk = self.LIST_CHUNK
        for k, values in items:
            if len(values) <= chunk:
                yield k, values
            else:
                for i in range(0, len(values), chunk):
                    yield k, values[i:i + chunk]


class ExternalGroupOfGroups(ExternalGroupBy):
    """groupByKey of records that are (k, v), or (k, (GROUPED, values)) from a map task
    that grouped its records by key first: a key's values in one list either way, in the
    order the records give them. A marked list is taken as it is (it was just unpickled)."""

    def _setup_loops(self) -> None:
        super()._setup_loops()
        self._value_loops = _loops(_CREATE_GROUP_OR_LIST, _MERGE_GROUP_OR_APPEND)


# --------------------------------------------------------------------------
# ExternalSorter
# --------------------------------------------------------------------------


#: ints this small are one CPython digit, which list.sort compares in C already
_ONE_DIGIT = 1 << 30
#: ints no larger in magnitude convert to floats exactly
_FLOAT_EXACT = 1 << 53
_INT_ONLY = {int}


def sort_list(records: list, key: Callable[[Any], Any] | None = None,
              reverse: bool = False) -> None:
    """records.sort(key=key, reverse=reverse), faster where the keys are ints past 2**30.

    Why: CPython's sort compares floats and one-digit ints (below 2**30) in C, but larger
    ints through their rich comparison, about 1.7x slower (random 40-bit keys, 250,000
    records). Ints below 2**53 in magnitude convert to floats exactly and in the same
    order, so sorting by the floats gives the same list (the sort is stable, and equal
    floats are equal ints). Taken only when a key of the first, middle or last record is
    such an int, and only for keys that are the records or an itemgetter of them (no user
    function is called twice); the floats reach list.sort through a key that hands them
    out in list order, the order CPython computes keys in."""
    n = len(records)
    if n < 64 or not (key is None or key.__class__ is operator.itemgetter):
        records.sort(key=key, reverse=reverse)
        return
    probe = (lambda r: r) if key is None else key
    for i in (0, n // 2, n - 1):
        k = probe(records[i])
        if k.__class__ is int and _ONE_DIGIT <= abs(k) <= _FLOAT_EXACT:
            break
    else:
        records.sort(key=key, reverse=reverse)
        return
    keys = records if key is None else list(map(key, records))
    if set(map(type, keys)) == _INT_ONLY and -_FLOAT_EXACT <= min(keys) \
            and max(keys) <= _FLOAT_EXACT:
        records.sort(key=partial(next, iter(list(map(float, keys)))), reverse=reverse)
    elif key is None:
        records.sort(reverse=reverse)
    else:
        records.sort(key=partial(next, iter(keys)), reverse=reverse)


class ExternalSorter:
    """Sort an iterator of any size within a memory budget.

    Why: ``sortByKey`` must order a whole partition.  Records are collected
    into an in-memory run until the RSS passes ``memory_limit`` (MB); the run
    is then sorted and spilled, and the runs are finally combined with
    ``heapq.merge``.  Runs are merged in input order, so the result equals
    ``sorted(iterable, key=key, reverse=reverse)`` including stability.
    """

    #: more runs than this are pre-merged so few files are open at once
    MAX_MERGE_WIDTH = 64
    #: the memory-check interval grows up to ``batch * MAX_BATCH_FACTOR``
    MAX_BATCH_FACTOR = 16

    def __init__(self, memory_limit: int, serializer: Any = None, local_dirs: list[str] | None = None,
                 batch: int = 1000) -> None:
        self.memory_limit = memory_limit
        self.serializer = serializer if serializer is not None else BatchedPickleSerializer()
        self.local_dirs = list(local_dirs) if local_dirs else _default_local_dirs()
        self.batch = max(1, int(batch))
        self.spills = 0
        self.memory_bytes_spilled = 0
        self.disk_bytes_spilled = 0
        self.spill_every = 0  # test hook: spill a run every this many records
        # the task's one sort (sortByKey's): its list is freed after the task's result is
        # sent (ember.util.after_reply); not for sorts a task may run many of
        self.free_after_reply = False
        self._pid = os.getpid()
        self._roots: list[str] = []
        self._nfiles = 0

    def _ensure_roots(self) -> None:
        if not self._roots:
            tag = "ember-sort-%d-%d-" % (os.getpid(), id(self))
            for d in self.local_dirs:
                os.makedirs(d, exist_ok=True)
                self._roots.append(tempfile.mkdtemp(prefix=tag, dir=d))

    def _next_limit(self) -> float:
        """The soft limit in MB (PySpark's hook): the budget, or 5% above the current RSS."""
        return _next_limit(int(self.memory_limit * (1 << 20))) / (1 << 20)

    def _write_run(self, records: Iterable[Any]) -> str:
        self._ensure_roots()
        n = self._nfiles
        self._nfiles += 1
        path = os.path.join(self._roots[n % len(self._roots)], "run.%d" % n)
        with open(path, "wb") as f:
            self.serializer.dump_stream(records, f)
            written = f.tell()
        self.disk_bytes_spilled += written
        _spilled.DiskBytesSpilled += written
        return path

    def _read_run(self, path: str) -> Iterator[Any]:
        with open(path, "rb") as f:
            yield from self.serializer.load_stream(f)

    def sorted(self, iterator: Iterable[Any], key: Callable[[Any], Any] | None = None,
               reverse: bool = False) -> Iterator[Any]:
        """Return an iterator over the records of ``iterator`` in sorted order.

        The input is consumed when this is called; the merge of spilled runs
        is lazy, and spill files are removed when the result is exhausted or
        closed (or by ``cleanup()``).
        """
        it = iter(iterator)
        limit = int(self._next_limit() * (1 << 20))
        floor = last = _rss_bytes()
        every = self.spill_every
        batch = min(self.batch, every) if every else self.batch
        n = batch
        chunk: list = []
        runs: list[str] = []
        since = 0
        extend = chunk.extend
        while True:
            before = len(chunk)
            extend(islice(it, n))
            if len(chunk) == before:
                break
            since += len(chunk) - before
            rss = _rss_bytes()
            if rss > limit or (every and since >= every):
                sort_list(chunk, key, reverse)
                runs.append(self._write_run(chunk))
                chunk = []
                extend = chunk.extend
                self.spills += 1
                gc.collect()
                freed = max(rss - floor, 0)
                self.memory_bytes_spilled += freed
                _spilled.MemoryBytesSpilled += freed
                floor = last = _rss_bytes()
                limit = int(self._next_limit() * (1 << 20))
                n = batch
                since = 0
                continue
            grow = rss - last
            last = rss
            n = n * 2 if grow <= 0 else (limit - rss) * n // (2 * grow)
            n = min(max(n, batch), batch * self.MAX_BATCH_FACTOR)
            if every:
                n = max(1, min(n, every - since))
        sort_list(chunk, key, reverse)
        if not runs:
            if self.free_after_reply:
                keep_until_reply(chunk)
            return iter(chunk)
        return self._merge_runs(runs, chunk, key, reverse)

    def _merge_runs(self, runs: list[str], last: list, key: Any, reverse: bool) -> Iterator[Any]:
        try:
            width = max(2, self.MAX_MERGE_WIDTH)
            while len(runs) + 1 > width:
                group, runs = runs[:width], runs[width:]
                merged = heapq.merge(*[self._read_run(p) for p in group], key=key, reverse=reverse)
                runs.insert(0, self._write_run(merged))
                for p in group:
                    unlink_quietly(p)
            streams = [self._read_run(p) for p in runs]
            streams.append(iter(last))
            del last
            yield from heapq.merge(*streams, key=key, reverse=reverse)
        finally:
            # only this call's runs: another sorted() result may still be open
            for p in runs:
                unlink_quietly(p)
            self._remove_empty_roots()

    def _remove_empty_roots(self) -> None:
        if os.getpid() != self._pid:
            return
        kept = []
        for r in self._roots:
            try:
                os.rmdir(r)
            except OSError:
                kept.append(r)
        self._roots = kept

    def cleanup(self) -> None:
        """Remove all spill files and directories of this sorter."""
        if os.getpid() != self._pid:
            return
        roots, self._roots = self._roots, []
        for r in roots:
            shutil.rmtree(r, ignore_errors=True)

    def __del__(self) -> None:
        try:
            if self._roots:
                self.cleanup()
        except Exception:
            pass
