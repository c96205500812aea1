"""RDD: PySpark's resilient distributed dataset API over Ember's own engine.

An RDD object is both the user's handle (transformations, actions) and the lineage node the
task processes execute: `partitions()`, `dependencies()` and `compute()` are what the
scheduler and the tasks call. Narrow transformations chain into one MapPartitionsRDD (like
PySpark's PipelinedRDD), so a partition flows through them as one iterator. Shuffles are
`partitionBy` only; aggregations are narrow map-side combines and reduce-side merges around
it, exactly as PySpark builds them, with the same defaults and error messages.
"""
from __future__ import annotations

import bisect
import contextlib
import copy
import functools
import heapq
import itertools
import math
import operator
import os
import random
import shlex
import subprocess
import sys
import threading
from collections import _count_elements, defaultdict, deque  # type: ignore[attr-defined]
from functools import reduce as _reduce
from typing import Any, Callable, Iterable, Iterator

from ember import config, fs
from ember import rdd_sources as src
from ember.call_site import call_site
from ember.dependency import (Dependency, ManyToOneDependency, OneToOneDependency,
                              RangeDependency, ShuffleDependency, stage_rdds)
from ember.errors import PySparkRuntimeError, SparkException
from ember.join import (grouped_by_key, grouped_where_repeated, python_cogroup,
                        python_full_outer_join, python_join, python_left_outer_join,
                        python_right_outer_join)
from ember.output_commit import OutputCommitter, open_output
from ember.partitioner import Partitioner, portable_hash, round_robin_partition
from ember.rdd_sources import Partition
from ember.resultiterable import ResultIterable
from ember.serializers import CPickleSerializer, dumps_closure
from ember.statcounter import StatCounter
from ember.held_partitions import hold_partition
from ember.storage.block_manager import block_name, load_batches, read_batches
from ember.storagelevel import StorageLevel
from ember.util.after_reply import keep_until_reply
from ember.util.compressed import codec_extension
from ember.util.user_code import (consume_whole, fail_on_stopiteration, filter_checked,
                                  flat_map_checked, map_checked, reduce_checked,
                                  stop_iteration_error)

__all__ = ["RDD", "portable_hash", "Partitioner", "BoundedFloat"]

# Which RDDs may be pickled right now (the lineage of the stage being serialized).
_pickle_scope = threading.local()


def serialize_stage(kind: str, rdd: "RDD", func: Any) -> bytes:
    """A stage's (kind, RDD, task function) as its tasks unpickle it: cloudpickled with
    only the RDDs of this stage allowed in (an RDD reached any other way is a user error,
    SPARK-5063; a parent stage's RDD is read through its shuffle, not shipped). The driver's
    Python version (sc.pythonVer, a length byte and its text) goes first, so that a task
    process checks it, as PySpark's worker does, before it unpickles code of another Python."""
    version = str(rdd.ctx.pythonVer).encode()[:255]
    _pickle_scope.ids = {r.id() for r in stage_rdds(rdd)}
    try:
        # a lineage too deep to pickle in one recursion (a thousand cached passes, where
        # PySpark's JVM fails with a StackOverflowError) goes one RDD at a time
        return bytes((len(version),)) + version + dumps_closure((kind, rdd, func), _is_rdd)
    finally:
        _pickle_scope.ids = None
        rdd.ctx._pickled_broadcast_vars.clear()


def _is_rdd(obj: Any) -> bool:
    return isinstance(obj, RDD)


def _rdd_off_driver() -> PySparkRuntimeError:
    return PySparkRuntimeError(errorClass="RDD_TRANSFORM_ONLY_VALID_ON_DRIVER",
                               messageParameters={})


class _OffDriver:
    """An RDD's context in a task process. Why not None: a stage's own RDD can reach its
    tasks inside the user's function too (rdd.map(lambda x: rdd.count())), which pickling
    cannot tell from the lineage; an action there then fails with PySpark's message."""
    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        raise _rdd_off_driver()

    def __reduce__(self) -> str:
        return "_OFF_DRIVER"


_OFF_DRIVER = _OffDriver()


def _identity(x: Any) -> Any:
    return x


class _PartitionFunction:
    """The `(split, iterator)` function map, filter, flatMap and mapPartitions give their
    RDD: `apply(f, iterator)` with the user's f, as an instance of a module-level class, so
    a stage pickles it by reference where a nested function went by value (code object,
    globals, cells) every job. `cached.map(f)`'s stage: 106 -> 37 us to pickle, 35 -> 18 us
    to unpickle in each task process."""
    __slots__ = ("apply", "f")

    def __init__(self, apply: Callable[[Callable, Iterable], Iterable], f: Callable) -> None:
        self.apply, self.f = apply, f

    def __call__(self, _split: int, iterator: Iterable) -> Iterable:
        return self.apply(self.f, iterator)

    def __reduce__(self) -> tuple:
        return _PartitionFunction, (self.apply, self.f)


def _whole_partition(f: Callable[[Iterable], Iterable], iterator: Iterable) -> Iterable:
    return f(iterator)


class _Pipelined:
    """Narrow steps as one (PySpark's pipeline_func), each over the previous one's output.
    A flat tuple, not one step nested in the next: a chain of thousands of maps pickles
    without a level of recursion per step (PySpark's nested closures fail at a few
    hundred)."""
    __slots__ = ("steps",)

    def __init__(self, f: Callable, prev: Callable) -> None:
        before = prev.steps if type(prev) is _Pipelined else (prev,)
        self.steps = before + (f,)

    def __call__(self, split: int, iterator: Iterable) -> Iterable:
        for step in self.steps:
            iterator = step(split, iterator)
        return iterator

    def __reduce__(self) -> tuple:
        return _pipelined_from_steps, (self.steps,)


def _pipelined_from_steps(steps: tuple) -> _Pipelined:
    pipelined = _Pipelined.__new__(_Pipelined)
    pipelined.steps = steps
    return pipelined


class BoundedFloat(float):
    """A float with confidence bounds, the result of the *Approx actions."""

    confidence: float
    low: float
    high: float

    def __new__(cls, mean: float, confidence: float, low: float, high: float) -> "BoundedFloat":
        obj = float.__new__(cls, mean)
        obj.confidence, obj.low, obj.high = confidence, low, high
        return obj


# what a stage's pickle of an RDD leaves out: what only the driver uses (a cached partition
# list, optimizer hints, the resource profile), and these attributes while they hold their
# class default, which an RDD unpickled in a task process then reads (half a warm job's
# stage: 608 -> 272 bytes, ~10 -> ~5 us to unpickle in each task process)
_DRIVER_ONLY = frozenset(("_partitions_cache", "_mapped_from", "_flat_mapped_from",
                          "_resource_profile"))
_DEFAULTED = frozenset(("is_cached", "is_checkpointed", "has_resource_profile",
                        "_checkpoint_requested", "_local_checkpointed", "_truncated",
                        "partitioner", "_name", "_checkpoint_dir", "_storage_level"))


class RDD:
    """A lineage node and the PySpark RDD API on top of it."""

    _lineage_attrs: tuple[str, ...] = ()
    _numbered_lazily = False       # True: the id is taken on first use (PipelinedRDD)
    # the defaults of _DEFAULTED and _DRIVER_ONLY's attributes
    is_cached = is_checkpointed = has_resource_profile = False
    _checkpoint_requested = _local_checkpointed = _truncated = False
    partitioner = _name = _checkpoint_dir = None
    _storage_level = StorageLevel.NONE
    _partitions_cache = _resource_profile = None

    def __init__(self, ctx: Any) -> None:
        self.ctx = ctx
        self._id = None if self._numbered_lazily else ctx.runtime.new_rdd_id()
        self._storage_level = StorageLevel.NONE
        self.is_cached = False
        self.is_checkpointed = False
        self.partitioner: Partitioner | None = None
        self._name: str | None = None
        self._call_site = call_site()
        self._partitions_cache: list | None = None
        self._checkpoint_requested = False
        self._checkpoint_dir: str | None = None      # set once written (reliable)
        self._local_checkpointed = False
        self._truncated = False
        self.has_resource_profile = False
        self._resource_profile: Any = None   # ember.resource.ResourceProfile (withResources)

    # --- engine interface ---------------------------------------------------------------
    def id(self) -> int:
        return self._id

    def partitions(self) -> list[Partition]:
        if self._partitions_cache is None:
            if self._checkpoint_dir is not None:
                files = [f for f in fs.listdir(self._checkpoint_dir) if f.startswith("part-")]
                self._partitions_cache = [Partition(i) for i in range(len(files))]
            else:
                self._partitions_cache = self._get_partitions()
        return self._partitions_cache

    def _get_partitions(self) -> list[Partition]:
        raise NotImplementedError

    def dependencies(self) -> list[Dependency]:
        if self._truncated or self._checkpoint_dir is not None:
            return []
        return self._get_dependencies()

    def _get_dependencies(self) -> list[Dependency]:
        return []

    def compute(self, split: Partition, context: Any) -> Iterator:
        raise NotImplementedError

    def preferred_locations(self, partition: int) -> list[str]:
        return []

    def names_locations(self) -> bool:
        """Whether preferred_locations can return anything but []: only where a subclass
        overrides it. The DAG scheduler then skips asking for each of a stage's partitions."""
        return type(self).preferred_locations is not RDD.preferred_locations

    def iterator(self, split: Partition, context: Any) -> Iterator:
        if self._checkpoint_dir is not None:
            return read_batches(fs.join(self._checkpoint_dir, f"part-{split.index:05d}"))
        if self._storage_level is not StorageLevel.NONE and \
                (self._storage_level.useMemory or self._storage_level.useDisk):
            return context.env.block_manager.get_or_compute(self, split, context)
        return self.compute(split, context)

    def __getstate__(self) -> dict:
        allowed = getattr(_pickle_scope, "ids", None)
        if allowed is None or self._id not in allowed:
            raise _rdd_off_driver()
        cls = type(self)
        state = {k: v for k, v in self.__dict__.items() if k not in _DRIVER_ONLY
                 and (k not in _DEFAULTED or v is not getattr(cls, k))}
        state["ctx"] = _OFF_DRIVER
        if self._truncated or self._checkpoint_dir is not None:
            for attr in self._lineage_attrs:
                state[attr] = None
        return state

    # --- helpers ------------------------------------------------------------------------
    @property
    def context(self) -> Any:
        return self.ctx

    def _memory_limit(self) -> int:
        """spark.python.worker.memory as the context's conf says now (PySpark reads it each
        time an aggregation is built; its tests change it on a running context)."""
        return config.read(self.ctx._conf, "spark.python.worker.memory")

    def _default_reduce_partitions(self) -> int:
        dp = config.read(self.ctx.runtime.conf, "spark.default.parallelism")
        if dp is not None:
            return dp
        return self.getNumPartitions()

    def _is_barrier(self) -> bool:
        """Whether this RDD's stage is a barrier stage: it or a narrow ancestor (within the
        stage) came from RDD.barrier() (Spark's RDD.isBarrier)."""
        return any(getattr(r, "_from_barrier", False) for r in stage_rdds(self))

    def _is_pipelinable(self) -> bool:
        return not (self.is_cached or self._checkpoint_requested or self._local_checkpointed
                    or self._checkpoint_dir is not None or self.has_resource_profile)

    def __repr__(self) -> str:
        return f"{type(self).__name__}[{self._id}] at {self._call_site}"

    # --- metadata -----------------------------------------------------------------------
    def getNumPartitions(self) -> int:
        return len(self.partitions())

    def name(self) -> str | None:
        return self._name

    def setName(self, name: str) -> "RDD":
        self._name = name
        return self

    def toDebugString(self) -> bytes:
        """Spark's lineage tree, walked with a stack of its own (a lineage thousands deep):
        each entry an RDD to print with its parents, or (None, a shuffle's line)."""
        lines: list[str] = []
        stack: list[tuple[Any, str, bool]] = [(self, "", True)]
        while stack:
            rdd, prefix, first = stack.pop()
            if rdd is None:
                lines.append(prefix)
                continue
            level = rdd._storage_level
            cached = ""
            if level.useMemory or level.useDisk:
                cached = f" [{level}]"
            head = f"({rdd.getNumPartitions()}) " if first else ""
            lines.append(f"{prefix}{head}{rdd!r}{cached} []".rstrip())
            below: list[tuple[Any, str, bool]] = []
            for dep in rdd.dependencies():
                if isinstance(dep, ShuffleDependency):
                    below.append((None, f"{prefix} +-({dep.rdd.getNumPartitions()}) "
                                  f"{dep.rdd!r} []", False))
                    below.extend((d2.rdd, prefix + " |  ", False)
                                 for d2 in dep.rdd.dependencies())
                else:
                    below.append((dep.rdd, prefix + " |  ", False))
            stack.extend(reversed(below))
        return "\n".join(lines).encode("utf-8")

    def getStorageLevel(self) -> StorageLevel:
        return self._storage_level

    # --- persistence --------------------------------------------------------------------
    def cache(self) -> "RDD":
        return self.persist(StorageLevel.MEMORY_ONLY)

    def persist(self, storageLevel: StorageLevel = StorageLevel.MEMORY_ONLY) -> "RDD":
        if self._storage_level != StorageLevel.NONE and storageLevel != self._storage_level:
            raise SparkException(
                "Cannot change storage level of an RDD after it was already assigned a level")
        self.id()              # a PipelinedRDD takes its id when persisted, as in PySpark
        if self._storage_level == StorageLevel.NONE:
            self._clean_when_unreachable()
        self.is_cached = True
        self._storage_level = storageLevel
        if storageLevel.useMemory:
            self.ctx.runtime.cache_requested(self._id)
        return self

    def _clean_when_unreachable(self) -> None:
        """Spark's persistRDD: once nothing references this RDD, the context cleaner drops
        its cached blocks."""
        cleaner = self.ctx.runtime.cleaner
        if cleaner is not None:
            cleaner.register_rdd_for_cleanup(self)

    def unpersist(self, blocking: bool = False) -> "RDD":
        self.is_cached = False
        self._storage_level = StorageLevel.NONE
        self.ctx.runtime.unpersist_rdd(self._id)
        return self

    def checkpoint(self) -> None:
        if self.ctx.runtime.checkpoint_dir is None:
            raise SparkException("Checkpoint directory has not been set in the SparkContext")
        self._checkpoint_requested = True
        self.is_checkpointed = True          # PySpark sets this flag at request time

    def isCheckpointed(self) -> bool:
        return self._checkpoint_dir is not None or (self._local_checkpointed and self._truncated)

    def localCheckpoint(self) -> None:
        level = self._storage_level
        if level == StorageLevel.NONE:
            self._clean_when_unreachable()
            self._storage_level = StorageLevel.MEMORY_AND_DISK
        elif not level.useDisk:
            self._storage_level = StorageLevel(True, level.useMemory, level.useOffHeap,
                                               level.deserialized, level.replication)
        self.is_cached = True
        self._local_checkpointed = True

    def isLocallyCheckpointed(self) -> bool:
        return self._local_checkpointed

    def getCheckpointFile(self) -> str | None:
        return fs.display(self._checkpoint_dir) if self._checkpoint_dir else None

    # PySpark's name for how an RDD's records are serialized between processes; Ember
    # pickles records (and picks its wire format per transfer), so every RDD says pickle
    _jrdd_deserializer = CPickleSerializer()

    def _reserialize(self, serializer: Any = None) -> "RDD":
        """PySpark's: the same records under another serializer. An Ember RDD holds Python
        objects and has no serializer of its own to change, so it is this RDD."""
        return self

    def cleanShuffleDependencies(self, blocking: bool = False) -> None:
        for dep in self.dependencies():
            if isinstance(dep, ShuffleDependency):
                self.ctx.runtime.remove_shuffle(dep.shuffle_id)

    def _lineage(self) -> list["RDD"]:
        seen: dict[int, RDD] = {}
        stack: list[RDD] = [self]
        while stack:
            r = stack.pop()
            if r._id in seen:
                continue
            seen[r._id] = r
            stack.extend(d.rdd for d in r.dependencies())
        return list(seen.values())

    def _do_checkpoint(self) -> None:
        """After a job: write requested checkpoints and truncate lineage (Spark's doCheckpoint)."""
        for rdd in self._lineage():
            if rdd._checkpoint_requested and rdd._checkpoint_dir is None:
                rdd._write_checkpoint()
            elif rdd._local_checkpointed and not rdd._truncated:
                n = rdd.getNumPartitions()
                locs = self.ctx.runtime.block_manager_master
                missing = [p for p in range(n) if not locs.locations(rdd._id, p)]
                if missing:
                    self.ctx.runtime.run_job(rdd, _count_iter, missing)
                rdd._truncated = True

    def _write_checkpoint(self) -> None:
        path = fs.join(self.ctx.runtime.checkpoint_dir, f"rdd-{self._id}")
        fs.makedirs(path)

        def write(ctx: Any, it: Iterator) -> None:
            from ember.storage.block_manager import dump_batches, write_batches
            part = fs.join(path, f"part-{ctx.partitionId():05d}")
            if fs.is_local(part):
                write_batches(part, it)
            else:
                with fs.open_file(part, "wb") as f:
                    dump_batches(f, it)

        self._checkpoint_requested = False   # the write job itself must not checkpoint again
        try:
            self.ctx.runtime.run_job(self, write, list(range(self.getNumPartitions())),
                              with_context=True)
        finally:
            self._checkpoint_requested = True
        self._checkpoint_dir = path
        self._partitions_cache = None
        cleaner = self.ctx.runtime.cleaner
        if cleaner is not None:
            cleaner.register_checkpoint_for_cleanup(self, path)
        self.is_checkpointed = True

    # --- narrow transformations ---------------------------------------------------------
    def mapPartitionsWithIndex(self, f: Callable[[int, Iterable], Iterable],
                               preservesPartitioning: bool = False) -> "RDD":
        return MapPartitionsRDD(self, f, preservesPartitioning)

    def mapPartitions(self, f: Callable[[Iterable], Iterable],
                      preservesPartitioning: bool = False) -> "RDD":
        return self.mapPartitionsWithIndex(_PartitionFunction(_whole_partition, f),
                                           preservesPartitioning)

    def mapPartitionsWithSplit(self, f: Callable[[int, Iterable], Iterable],
                               preservesPartitioning: bool = False) -> "RDD":
        import warnings
        warnings.warn("mapPartitionsWithSplit is deprecated; use mapPartitionsWithIndex instead",
                      FutureWarning, stacklevel=2)
        return self.mapPartitionsWithIndex(f, preservesPartitioning)

    def map(self, f: Callable[[Any], Any], preservesPartitioning: bool = False) -> "RDD":
        rdd = self.mapPartitionsWithIndex(_PartitionFunction(map_checked, f),
                                          preservesPartitioning)
        rdd._mapped_from = (self, f)       # lets combineByKey spot the counting idiom
        return rdd

    def flatMap(self, f: Callable[[Any], Iterable], preservesPartitioning: bool = False) -> "RDD":
        rdd = self.mapPartitionsWithIndex(_PartitionFunction(flat_map_checked, f),
                                          preservesPartitioning)
        rdd._flat_mapped_from = (self, f)  # lets combineByKey count each item's keys at once
        return rdd

    def filter(self, f: Callable[[Any], bool]) -> "RDD":
        return self.mapPartitionsWithIndex(_PartitionFunction(filter_checked, f), True)

    def glom(self) -> "RDD":
        def func(_: int, iterator: Iterable) -> Iterable:
            yield list(iterator)
        return self.mapPartitionsWithIndex(func)

    def keyBy(self, f: Callable[[Any], Any]) -> "RDD":
        return self.map(lambda x: (f(x), x))

    # itemgetter, not PySpark's lambda: map() then runs in C, no Python call a record
    def keys(self) -> "RDD":
        return self.map(_FIRST)

    def values(self) -> "RDD":
        return self.map(_SECOND)

    def mapValues(self, f: Callable[[Any], Any]) -> "RDD":
        return self.map(lambda kv: (kv[0], f(kv[1])), True)

    def flatMapValues(self, f: Callable[[Any], Iterable]) -> "RDD":
        def flat(kv: tuple) -> Iterable:
            return zip(itertools.repeat(kv[0]), f(kv[1]))   # C, not a generator step a value
        return self.flatMap(flat, True)

    def pipe(self, command: str, env: dict[str, str] | None = None,
             checkCode: bool = False) -> "RDD":
        if env is None:
            env = {}

        def func(iterator: Iterable) -> Iterator[str]:
            pipe = subprocess.Popen(shlex.split(command), env=env or None,
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE)

            def pipe_objs(out: Any) -> None:
                try:
                    for obj in iterator:
                        s = str(obj).rstrip("\n") + "\n"
                        out.write(s.encode("utf-8"))
                finally:
                    out.close()
            t = threading.Thread(target=pipe_objs, args=[pipe.stdin], daemon=True)
            t.start()

            def check_return_code() -> Iterator:
                pipe.wait()
                if checkCode and pipe.returncode:
                    raise PySparkRuntimeError(
                        errorClass="PIPE_FUNCTION_EXITED",
                        messageParameters={"func_name": str(command),
                                           "error_code": str(pipe.returncode)})
                for i in range(0):
                    yield i
            return (x.rstrip(b"\n").decode("utf-8") for x in
                    itertools.chain(iter(pipe.stdout.readline, b""), check_return_code()))
        return self.mapPartitions(func)

    def sample(self, withReplacement: bool, fraction: float, seed: int | None = None) -> "RDD":
        from ember.rddsampler import RDDSampler
        if not fraction >= 0:
            raise ValueError("Fraction must be nonnegative.")
        return self.mapPartitionsWithIndex(RDDSampler(withReplacement, fraction, seed).func, True)

    def randomSplit(self, weights: list[float], seed: int | None = None) -> list["RDD"]:
        from ember.rddsampler import RDDRangeSampler
        if not all(w >= 0 for w in weights):
            raise ValueError("Weights must be nonnegative")
        s = float(sum(weights))
        if not s > 0:
            raise ValueError("Sum of weights must be positive")
        cweights = [0.0]
        for w in weights:
            cweights.append(cweights[-1] + w / s)
        if seed is None:
            seed = random.randint(0, 2 ** 32 - 1)
        return [self.mapPartitionsWithIndex(RDDRangeSampler(lb, ub, seed).func, True)
                for lb, ub in zip(cweights, cweights[1:])]

    def sampleByKey(self, withReplacement: bool, fractions: dict, seed: int | None = None) -> "RDD":
        from ember.rddsampler import RDDStratifiedSampler
        for fraction in fractions.values():
            assert fraction >= 0.0, "Negative fraction value: %s" % fraction
        return self.mapPartitionsWithIndex(
            RDDStratifiedSampler(withReplacement, fractions, seed).func, True)

    def union(self, other: "RDD") -> "RDD":
        return union_of(self.ctx, [self, other])

    def __add__(self, other: "RDD") -> "RDD":
        if not isinstance(other, RDD):
            raise TypeError(f"unsupported operand type(s) for +: 'RDD' and "
                            f"'{type(other).__name__}'")
        return self.union(other)

    def cartesian(self, other: "RDD") -> "RDD":
        return CartesianRDD(self, other)

    def coalesce(self, numPartitions: int, shuffle: bool = False) -> "RDD":
        if numPartitions <= 0:
            raise ValueError(f"Number of partitions ({numPartitions}) must be positive.")
        if shuffle:
            def distribute(index: int, items: Iterable) -> Iterator:
                start = random.Random(index).randint(0, numPartitions - 1)
                return zip(itertools.count(start + 1), items)
            return ShuffledRDD(self.mapPartitionsWithIndex(distribute), numPartitions,
                               round_robin_partition).values()
        return CoalescedRDD(self, numPartitions)

    def repartition(self, numPartitions: int) -> "RDD":
        return self.coalesce(numPartitions, shuffle=True)

    def zip(self, other: "RDD") -> "RDD":
        if self.getNumPartitions() != other.getNumPartitions():
            raise ValueError("Can only zip with RDD which has the same number of partitions")
        return ZippedRDD(self, other)

    # both pair items with itertools.count in zip: C iterators, no Python step an item
    def zipWithIndex(self) -> "RDD":
        starts = [0]
        source = self
        if self.getNumPartitions() > 1:
            with read_twice(self) as source:
                nums = source.mapPartitions(lambda it: [_count_iter(it)]).collect()
            starts.extend(itertools.accumulate(nums[:-1]))

        def func(k: int, it: Iterable) -> Iterator:
            return zip(it, itertools.count(starts[k]))
        return source.mapPartitionsWithIndex(func)

    def zipWithUniqueId(self) -> "RDD":
        n = self.getNumPartitions()

        def func(k: int, it: Iterable) -> Iterator:
            return zip(it, itertools.count(k, n))
        return self.mapPartitionsWithIndex(func)

    def withResources(self, profile: Any) -> "RDD":
        """Compute this RDD's stage with `profile`'s executor and task requirements
        (PySpark's RDD.withResources; Spark checks here that the master supports it)."""
        self.ctx.runtime.resource_profile_manager.add(profile)
        self.has_resource_profile = True
        self._resource_profile = profile
        return self

    def getResourceProfile(self) -> Any:
        """The profile given to withResources, or None."""
        return self._resource_profile

    def barrier(self) -> "RDDBarrier":
        """Mark the current stage as a barrier stage: all its tasks are launched together
        and may sync with BarrierTaskContext.barrier() / allGather()."""
        return RDDBarrier(self)

    # --- shuffles -----------------------------------------------------------------------
    def partitionBy(self, numPartitions: int | None,
                    partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        num_partitions = (self._default_reduce_partitions() if numPartitions is None
                          else numPartitions)
        partitioner = Partitioner(num_partitions, partitionFunc)
        if self.partitioner == partitioner:
            return self
        rdd = ShuffledRDD(self, num_partitions, partitionFunc)
        rdd.partitioner = partitioner
        return rdd

    def combineByKey(self, createCombiner: Callable, mergeValue: Callable,
                     mergeCombiners: Callable, numPartitions: int | None = None,
                     partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        from ember.shuffle.external import Aggregator, ExternalMerger
        num_partitions = (self._default_reduce_partitions() if numPartitions is None
                          else numPartitions)
        memory = self._memory_limit()
        local_dirs = self.ctx.runtime.spill_dirs
        agg = Aggregator(createCombiner, mergeValue, mergeCombiners)

        def combine_locally(iterator: Iterable) -> Iterator:
            merger = ExternalMerger(agg, int(memory * 0.9), local_dirs=local_dirs,
                                    over_current_rss=True)
            merger.mergeValues(iterator)
            return merger.items()

        counted = _counting_source(self, agg)
        flat = getattr(counted, "_flat_mapped_from", None)
        if flat is not None and counted._is_pipelinable():
            # keys = items.flatMap(f): count what f gives for a run of items at a time
            # (textFile(...).flatMap(str.split): a line's words), no per-key Python step
            items, flat_func = flat

            def count_flat_locally(it: Iterable) -> Iterator:
                merger = ExternalMerger(agg, int(memory * 0.9), local_dirs=local_dirs,
                                        over_current_rss=True)
                merger.mergeKeyCountsOf(flat_func, it)
                return merger.items()
            locally = items.mapPartitions(count_flat_locally)
            locally.partitioner = self.partitioner
        elif counted is not None:
            def count_locally(keys: Iterable) -> Iterator:
                merger = ExternalMerger(agg, int(memory * 0.9), local_dirs=local_dirs,
                                        over_current_rss=True)
                merger.mergeKeyCounts(keys)
                return merger.items()
            locally = counted.mapPartitions(count_locally)
            locally.partitioner = self.partitioner
        else:
            locally = self.mapPartitions(combine_locally, preservesPartitioning=True)
        shuffled = locally.partitionBy(num_partitions, partitionFunc)

        def merge_combiners(iterator: Iterable) -> Iterator:
            merger = ExternalMerger(agg, memory, local_dirs=local_dirs, over_current_rss=True)
            merger.mergeCombiners(iterator)
            return merger.items()

        return shuffled.mapPartitions(merge_combiners, preservesPartitioning=True)

    def reduceByKey(self, func: Callable[[Any, Any], Any], numPartitions: int | None = None,
                    partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        return self.combineByKey(_identity, func, func, numPartitions, partitionFunc)

    def aggregateByKey(self, zeroValue: Any, seqFunc: Callable, combFunc: Callable,
                       numPartitions: int | None = None,
                       partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        return self.combineByKey(_seeded(zeroValue, seqFunc), seqFunc, combFunc,
                                 numPartitions, partitionFunc)

    def foldByKey(self, zeroValue: Any, func: Callable[[Any, Any], Any],
                  numPartitions: int | None = None,
                  partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        return self.combineByKey(_seeded(zeroValue, func), func, func, numPartitions,
                                 partitionFunc)

    def groupByKey(self, numPartitions: int | None = None,
                   partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        from ember.shuffle.external import Aggregator, ExternalGroupBy
        num_partitions = (self._default_reduce_partitions() if numPartitions is None
                          else numPartitions)
        memory = self._memory_limit()
        local_dirs = self.ctx.runtime.spill_dirs

        def create_combiner(x: Any) -> list:
            return [x]

        def merge_value(xs: list, x: Any) -> list:
            xs.append(x)
            return xs

        def merge_combiners(a: list, b: list) -> list:
            a.extend(b)
            return a

        agg = Aggregator(create_combiner, merge_value, merge_combiners)

        def combine(iterator: Iterable) -> Iterator:
            merger = ExternalGroupBy(agg, int(memory * 0.9), local_dirs=local_dirs,
                                     over_current_rss=True)
            merger.mergeValues(iterator)
            return merger.lists()

        shuffled = self.mapPartitions(combine, preservesPartitioning=True) \
            .partitionBy(num_partitions, partitionFunc)

        def group_by_key(it: Iterable) -> Iterator:
            merger = ExternalGroupBy(agg, memory, local_dirs=local_dirs, over_current_rss=True)
            merger.mergeCombiners(it)
            return merger.items()

        return shuffled.mapPartitions(group_by_key, True).mapValues(ResultIterable)

    def groupBy(self, f: Callable[[Any], Any], numPartitions: int | None = None,
                partitionFunc: Callable[[Any], int] = portable_hash) -> "RDD":
        return self.map(lambda x: (f(x), x)).groupByKey(numPartitions, partitionFunc)

    def distinct(self, numPartitions: int | None = None) -> "RDD":
        from ember import set_operations
        return set_operations.distinct(self, numPartitions)

    def intersection(self, other: "RDD") -> "RDD":
        from ember import set_operations
        return set_operations.intersection(self, other)

    def intersectByKey(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        def filter_func(pair: tuple) -> bool:
            _key, (val1, val2) = pair
            return bool(val1) and bool(val2)
        return self.cogroup(other, numPartitions).filter(filter_func) \
            .flatMapValues(lambda x: x[0])

    def subtractByKey(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        def filter_func(pair: tuple) -> bool:
            _key, (val1, val2) = pair
            return bool(val1) and not val2
        return self.cogroup(other, numPartitions).filter(filter_func) \
            .flatMapValues(lambda x: x[0])

    def subtract(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        from ember import set_operations
        return set_operations.subtract(self, other, numPartitions)

    def cogroup(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        return python_cogroup([self, other], numPartitions)

    def _cogroup_by_key(self, others: list["RDD"], num_partitions: int | None) -> "RDD":
        """(key, (values in self, values in each of others)), hash-partitioned: what
        ember.join builds cogroup and the joins on. Without numPartitions, as many
        partitions as PySpark's groupByKey of the RDDs' union (made a pair at a time, a
        pair of co-partitioned RDDs keeping its count) gets."""
        if num_partitions is None:
            num_partitions = config.read(self.ctx.runtime.conf, "spark.default.parallelism")
        if num_partitions is None:
            num_partitions, union_partitioner = self.getNumPartitions(), self.partitioner
            for r in others:
                if union_partitioner is None or r.partitioner != union_partitioner:
                    num_partitions += r.getNumPartitions()
                    union_partitioner = None
        return CoGroupedRDD(self.ctx, [self, *others], num_partitions, self._memory_limit())

    def groupWith(self, other: "RDD", *others: "RDD") -> "RDD":
        return python_cogroup([self, other, *others], None)

    def join(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        return python_join(self, other, numPartitions)

    def leftOuterJoin(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        return python_left_outer_join(self, other, numPartitions)

    def rightOuterJoin(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        return python_right_outer_join(self, other, numPartitions)

    def fullOuterJoin(self, other: "RDD", numPartitions: int | None = None) -> "RDD":
        return python_full_outer_join(self, other, numPartitions)

    def sortByKey(self, ascending: bool = True, numPartitions: int | None = None,
                  keyfunc: Callable[[Any], Any] = _identity) -> "RDD":
        return self._sort_by_key(ascending, numPartitions, keyfunc)

    def _sort_by_key(self, ascending: bool, numPartitions: int | None,  # noqa: N803
                     keyfunc: Callable[[Any], Any], keyed_from: tuple | None = None) -> "RDD":
        """sortByKey; `keyed_from`: (elements, f) when this RDD is elements.keyBy(f), for
        the range bounds' sample (see _range_bounds)."""
        num_partitions = (self._default_reduce_partitions() if numPartitions is None
                          else numPartitions)
        if keyfunc is not _identity:
            keyfunc = fail_on_stopiteration(keyfunc)
        sort_partition = _partition_sorter(self, ascending, keyfunc)
        if num_partitions == 1:
            rdd = self.coalesce(1) if self.getNumPartitions() > 1 else self
            return rdd.mapPartitions(sort_partition, True)
        sampled = self if keyed_from is None else keyed_from[0]
        with read_twice(sampled) as held:
            bounds = self._range_bounds(num_partitions, keyfunc, keyed_from, held)
        if bounds is None:
            return self                  # empty RDD
        keyed = self
        if held is not sampled:          # the records, where the sample pass left them
            keyed = held if keyed_from is None else held.keyBy(keyed_from[1])

        if ascending and keyfunc is _identity:
            range_partitioner: Callable[[Any], int] = functools.partial(bisect.bisect_left,
                                                                         bounds)
        else:
            def range_partitioner(k: Any) -> int:
                p = bisect.bisect_left(bounds, keyfunc(k))
                return p if ascending else num_partitions - 1 - p

        return keyed.partitionBy(num_partitions, range_partitioner) \
            .mapPartitions(sort_partition, True)

    def _range_bounds(self, partitions: int, keyfunc: Callable[[Any], Any],
                      keyed_from: tuple | None = None, sampled: "RDD | None" = None
                      ) -> list | None:
        """Spark's RangePartitioner: one pass that counts each partition and keeps a
        reservoir sample of its keys (20 samples per output partition overall, 3x
        oversampled), a re-sample of partitions the reservoir under-represents, then
        weighted bounds with duplicates skipped.

        With `keyed_from` = (elements, f) (sortBy's keyBy), the pass runs over the elements
        and f keys only the sampled ones: the same sample and bounds, but not every
        element's key and pair computed twice (PySpark's sampling job recomputes the keyBy
        in full).

        `sampled`: what the sample pass reads instead of the sampled RDD (a HeldRDD of it,
        see ember.held_partitions)."""
        sample_size = min(20.0 * partitions, 1e6)
        per_partition = int(math.ceil(3.0 * sample_size / max(self.getNumPartitions(), 1)))
        rdd_id = self._id
        source, key_of = (self, _FIRST) if keyed_from is None else keyed_from
        key_of = fail_on_stopiteration(key_of)

        def sketch(ctx: Any, it: Iterable) -> tuple:
            n, sample = _reservoir(it, per_partition,
                                   random.Random((rdd_id << 16) ^ ctx.partitionId()))
            return n, list(map(key_of, sample))

        sketched = self.ctx.runtime.run_job(sampled or source, sketch, with_context=True)
        total = sum(n for n, _ in sketched)
        if total == 0:
            return None
        fraction = min(sample_size / total, 1.0)
        candidates: list[tuple[Any, float]] = []
        imbalanced = []
        for idx, (n, sample) in enumerate(sketched):
            if fraction * n > per_partition:
                imbalanced.append(idx)
            elif sample:
                weight = n / len(sample)
                candidates.extend((keyfunc(k), weight) for k in sample)
        if imbalanced:
            keys = source.sample(False, fraction, rdd_id + 1).map(key_of)
            weight = 1.0 / fraction
            for part in self.ctx.runtime.run_job(keys, list, imbalanced):
                candidates.extend((keyfunc(k), weight) for k in part)
        candidates.sort(key=lambda c: c[0])
        step = sum(w for _, w in candidates) / partitions
        bounds: list = []
        cum, target = 0.0, step
        for key, weight in candidates:
            if len(bounds) >= partitions - 1:
                break
            cum += weight
            if cum >= target and (not bounds or key > bounds[-1]):
                bounds.append(key)
                target += step
        return bounds

    def sortBy(self, keyfunc: Callable[[Any], Any], ascending: bool = True,
               numPartitions: int | None = None) -> "RDD":
        return self.keyBy(keyfunc)._sort_by_key(ascending, numPartitions, _identity,
                                                (self, keyfunc)).values()

    def repartitionAndSortWithinPartitions(
            self, numPartitions: int | None = None,
            partitionFunc: Callable[[Any], int] = portable_hash, ascending: bool = True,
            keyfunc: Callable[[Any], Any] = _identity) -> "RDD":
        num_partitions = (self._default_reduce_partitions() if numPartitions is None
                          else numPartitions)
        return self.partitionBy(num_partitions, partitionFunc) \
            .mapPartitions(_partition_sorter(self, ascending, keyfunc), True)

    # --- actions ------------------------------------------------------------------------
    def collect(self) -> list:
        out: list = []
        for part in self.ctx.runtime.run_job(self, _collect_partition):
            out.extend(part)
        return out

    def collectWithJobGroup(self, groupId: str, description: str,
                            interruptOnCancel: bool = False) -> list:
        import warnings
        warnings.warn("Deprecated in 3.1, Use pyspark.InheritableThread with the pinned "
                      "thread mode enabled.", FutureWarning)
        self.ctx.setJobGroup(groupId, description, interruptOnCancel)
        return self.collect()

    def toLocalIterator(self, prefetchPartitions: bool = False) -> Iterator:
        """One job per partition, run when the iterator reaches it; with prefetchPartitions
        the job of the next partition runs (on a helper thread, with this thread's job
        properties) while the caller consumes the current one."""
        n = self.getNumPartitions()
        if not prefetchPartitions:
            for p in range(n):
                yield from self.ctx.runtime.run_job(self, list, [p])[0]
            return
        from concurrent.futures import ThreadPoolExecutor
        ctx = self.ctx
        props = dict(ctx.runtime.local_properties())

        def fetch(p: int) -> list:
            ctx.runtime.set_local_properties(dict(props))
            return ctx.runtime.run_job(self, list, [p])[0]

        with ThreadPoolExecutor(1, thread_name_prefix="toLocalIterator-prefetch") as pool:
            pending = pool.submit(fetch, 0) if n else None
            for p in range(n):
                part = pending.result()        # type: ignore[union-attr]
                pending = pool.submit(fetch, p + 1) if p + 1 < n else None
                yield from part

    def foreach(self, f: Callable[[Any], None]) -> None:
        def process(iterator: Iterable) -> None:
            try:
                for x in iterator:       # a for loop ends on its iterator's StopIteration
                    f(x)                 # only: one that gets out came from f
            except StopIteration as exc:
                raise stop_iteration_error(exc)
        self.ctx.runtime.run_job(self, process)

    def foreachPartition(self, f: Callable[[Iterable], None]) -> None:
        def process(iterator: Iterable) -> None:
            r = f(iterator)
            if r is not None:
                try:
                    for _ in r:
                        pass
                except TypeError:
                    pass
        self.ctx.runtime.run_job(self, process)

    def count(self) -> int:
        return sum(self.ctx.runtime.run_job(self, _count_iter))

    def reduce(self, f: Callable[[Any, Any], Any]) -> Any:
        from ember.shuffle.external import _is_add
        adding = _is_add(f)
        user_f = f
        f = fail_on_stopiteration(f)

        def func(iterator: Iterable) -> list:
            it = iter(iterator)
            try:
                initial = next(it)
            except StopIteration:
                return []
            if adding and not isinstance(initial, (str, bytes, bytearray)):
                # C loop, same left-to-right `+`
                return [consume_whole(lambda rest: sum(rest, initial), it)]
            return [consume_whole(lambda rest: reduce_checked(user_f, rest, initial), it)]
        vals = [v for part in self.ctx.runtime.run_job(self, func) for v in part]
        if vals:
            return _reduce(f, vals)
        raise ValueError("Can not reduce() empty RDD")

    def treeReduce(self, f: Callable[[Any, Any], Any], depth: int = 2) -> Any:
        if depth < 1:
            raise ValueError(f"Depth cannot be smaller than 1 but got {depth}.")
        zero_value = None, True

        def op(x: tuple, y: tuple) -> tuple:
            if x[1]:
                return y
            if y[1]:
                return x
            return f(x[0], y[0]), False

        reduced = self.map(lambda x: (x, False)).treeAggregate(zero_value, op, op, depth)
        if reduced[1]:
            raise ValueError("Cannot reduce empty RDD.")
        return reduced[0]

    def fold(self, zeroValue: Any, op: Callable[[Any, Any], Any]) -> Any:
        user_op = op
        op = fail_on_stopiteration(op)

        def func(iterator: Iterable) -> Any:
            zero = copy.deepcopy(zeroValue)
            return consume_whole(lambda rest: reduce_checked(user_op, rest, zero), iterator)
        vals = self.ctx.runtime.run_job(self, func)
        return _reduce(op, vals, zeroValue)

    def aggregate(self, zeroValue: Any, seqOp: Callable, combOp: Callable) -> Any:
        comb_op = fail_on_stopiteration(combOp)

        def func(iterator: Iterable) -> Any:
            zero = copy.deepcopy(zeroValue)
            return consume_whole(lambda rest: reduce_checked(seqOp, rest, zero), iterator)
        vals = self.ctx.runtime.run_job(self, func)
        return _reduce(comb_op, vals, zeroValue)

    def treeAggregate(self, zeroValue: Any, seqOp: Callable, combOp: Callable,
                      depth: int = 2) -> Any:
        if depth < 1:
            raise ValueError(f"Depth cannot be smaller than 1 but got {depth}.")
        if self.getNumPartitions() == 0:
            return zeroValue

        def aggregate_partition(iterator: Iterable) -> Iterator:
            acc = copy.deepcopy(zeroValue)
            for obj in iterator:
                acc = seqOp(acc, obj)
            yield acc

        partial = self.mapPartitions(aggregate_partition)
        num_partitions = partial.getNumPartitions()
        scale = max(int(math.ceil(pow(num_partitions, 1.0 / depth))), 2)
        while num_partitions > scale + num_partitions / scale:
            num_partitions //= scale
            cur = int(num_partitions)

            def map_partition(i: int, iterator: Iterable, cur: int = cur) -> Iterator:
                for obj in iterator:
                    yield i % cur, obj
            partial = partial.mapPartitionsWithIndex(map_partition) \
                .reduceByKey(combOp, cur).values()
        return partial.fold(zeroValue, combOp)

    def max(self, key: Callable[[Any], Any] | None = None) -> Any:
        if key is None:
            return self.reduce(max)
        return self.reduce(lambda a, b: max(a, b, key=key))

    def min(self, key: Callable[[Any], Any] | None = None) -> Any:
        if key is None:
            return self.reduce(min)
        return self.reduce(lambda a, b: min(a, b, key=key))

    def sum(self) -> Any:
        return sum(self.ctx.runtime.run_job(self, _sum_partition), 0)

    def stats(self) -> StatCounter:
        def redfunc(left: StatCounter, right: StatCounter) -> StatCounter:
            return left.mergeStats(right)
        parts = self.ctx.runtime.run_job(self, StatCounter)
        return _reduce(redfunc, parts, StatCounter())

    def mean(self) -> float:
        return self.stats().mean()

    def variance(self) -> float:
        return self.stats().variance()

    def stdev(self) -> float:
        return self.stats().stdev()

    def sampleStdev(self) -> float:
        return self.stats().sampleStdev()

    def sampleVariance(self) -> float:
        return self.stats().sampleVariance()

    def histogram(self, buckets: int | list | tuple) -> tuple[list, list[int]]:
        source = self
        if isinstance(buckets, int):
            if buckets < 1:
                raise ValueError("number of buckets must be >= 1")

            def comparable(x: Any) -> bool:
                if x is None:
                    return False
                if type(x) is float and math.isnan(x):
                    return False
                return True

            def minmax(a: tuple, b: tuple) -> tuple:
                return min(a[0], b[0]), max(a[1], b[1])

            def partition_minmax(it: Iterable) -> Iterator[tuple]:
                """What PySpark's map((x, x)).reduce(minmax) finds in a partition (the
                first of equal minima and maxima), by min() and max() over chunks."""
                found = None
                for chunk in iter(lambda: list(itertools.islice(it, 65536)), []):
                    here = (min(chunk), max(chunk))
                    found = here if found is None else minmax(found, here)
                if found is not None:
                    yield found

            with read_twice(self) as source:      # read again for the counts
                filtered = source.filter(comparable)
                try:
                    minv, maxv = filtered.mapPartitions(partition_minmax).reduce(minmax)
                except TypeError as e:
                    if " empty " in str(e):
                        raise ValueError("can not generate buckets from empty RDD")
                    raise
            if minv == maxv or buckets == 1:
                return [minv, maxv], [filtered.count()]
            try:
                inc = (maxv - minv) / buckets
            except TypeError:
                raise TypeError("Can not generate buckets with non-number in RDD")
            if math.isinf(inc):
                raise ValueError("Can not generate buckets with infinite value")
            inc_int = int(inc)
            inc = inc_int if inc_int * buckets == maxv - minv else (maxv - minv) * 1.0 / buckets
            bucket_list = [i * inc + minv for i in range(buckets)]
            bucket_list.append(maxv)
            even = True
        elif isinstance(buckets, (list, tuple)):
            if len(buckets) < 2:
                raise ValueError("buckets should have more than one value")
            if any(i is None or isinstance(i, float) and math.isnan(i) for i in buckets):
                raise ValueError("can not have None or NaN in buckets")
            if sorted(buckets) != list(buckets):
                raise ValueError("buckets should be sorted")
            if len(set(buckets)) != len(buckets):
                raise ValueError("buckets should not contain duplicated values")
            bucket_list = list(buckets)
            minv, maxv = bucket_list[0], bucket_list[-1]
            even = False
            inc = None
            try:
                steps = [bucket_list[i + 1] - bucket_list[i] for i in range(len(bucket_list) - 1)]
            except TypeError:
                pass
            else:
                if max(steps) - min(steps) < 1e-10:
                    even = True
                    inc = (maxv - minv) / (len(bucket_list) - 1)
        else:
            raise TypeError("buckets should be a list or tuple or number(int or long)")

        def histogram(iterator: Iterable) -> list[int]:
            counters = [0] * len(bucket_list)
            for i in iterator:
                if i is None or (isinstance(i, float) and math.isnan(i)) or i > maxv or i < minv:
                    continue
                t = int((i - minv) / inc) if even else bisect.bisect_right(bucket_list, i) - 1
                counters[t] += 1
            last = counters.pop()
            counters[-1] += last
            return counters

        parts = self.ctx.runtime.run_job(source, histogram)
        counts = [sum(c) for c in zip(*parts)] if parts else [0] * (len(bucket_list) - 1)
        # PySpark hands back the caller's own buckets object (a tuple stays a tuple)
        return (bucket_list if isinstance(buckets, int) else buckets), counts

    def countByValue(self) -> dict:
        def count_partition(iterator: Iterable) -> dict:
            counts: dict = defaultdict(int)
            _count_elements(counts, iterator)
            return counts

        def merge(m1: dict, m2: dict) -> dict:
            for k, v in m2.items():
                m1[k] += v
            return m1
        return _reduce(merge, self.ctx.runtime.run_job(self, count_partition), defaultdict(int))

    def countByKey(self) -> dict:
        return self.keys().countByValue()

    def collectAsMap(self) -> dict:
        return dict(self.collect())

    def reduceByKeyLocally(self, func: Callable[[Any, Any], Any]) -> dict:
        func = fail_on_stopiteration(func)

        def reduce_partition(iterator: Iterable) -> dict:
            m: dict = {}
            for k, v in iterator:
                m[k] = func(m[k], v) if k in m else v
            return m

        def merge(m1: dict, m2: dict) -> dict:
            for k, v in m2.items():
                m1[k] = func(m1[k], v) if k in m1 else v
            return m1
        return _reduce(merge, self.ctx.runtime.run_job(self, reduce_partition), {})

    def lookup(self, key: Any) -> list:
        values = self.filter(lambda kv: kv[0] == key).values()
        if self.partitioner is not None and _driver_hash_agrees(key):
            return self.ctx.runJob(values, lambda x: x, [self.partitioner(key)])
        return values.collect()

    def top(self, num: int, key: Callable[[Any], Any] | None = None) -> list:
        def top_iterator(iterator: Iterable) -> list:
            return heapq.nlargest(num, iterator, key=key)

        def merge(a: list, b: list) -> list:
            return heapq.nlargest(num, a + b, key=key)
        return _reduce(merge, self.ctx.runtime.run_job(self, top_iterator), [])

    def takeOrdered(self, num: int, key: Callable[[Any], Any] | None = None) -> list:
        if num < 0:
            raise ValueError("top N cannot be negative.")
        if num == 0 or self.getNumPartitions() == 0:
            return []

        def merge(a: list, b: list) -> list:
            return heapq.nsmallest(num, a + b, key)
        return _reduce(merge, self.ctx.runtime.run_job(
            self, lambda it: heapq.nsmallest(num, it, key)), [])

    def take(self, num: int) -> list:
        items: list = []
        total_parts = self.getNumPartitions()
        parts_scanned = 0
        while len(items) < num and parts_scanned < total_parts:
            num_parts_to_try = 1
            if parts_scanned > 0:
                if len(items) == 0:
                    num_parts_to_try = parts_scanned * 4
                else:
                    num_parts_to_try = int(1.5 * num * parts_scanned / len(items)) - parts_scanned
                    num_parts_to_try = min(max(num_parts_to_try, 1), parts_scanned * 4)
            left = num - len(items)

            def take_up_to_num_left(iterator: Iterable, left: int = left) -> list:
                return list(itertools.islice(iterator, left))
            p = list(range(parts_scanned, min(parts_scanned + num_parts_to_try, total_parts)))
            for res in self.ctx.runtime.run_job(self, take_up_to_num_left, p):
                items.extend(res)
            parts_scanned += num_parts_to_try
        return items[:num]

    def first(self) -> Any:
        rs = self.take(1)
        if rs:
            return rs[0]
        raise ValueError("RDD is empty")

    def isEmpty(self) -> bool:
        return self.getNumPartitions() == 0 or len(self.take(1)) == 0

    def takeSample(self, withReplacement: bool, num: int, seed: int | None = None) -> list:
        num_st_dev = 10.0
        max_sample_size = sys.maxsize - int(num_st_dev * math.sqrt(sys.maxsize))
        if num < 0:
            raise ValueError("Sample size cannot be negative.")
        if num > max_sample_size:
            raise ValueError(f"Sample size cannot be greater than {max_sample_size}.")
        if num == 0 or self.getNumPartitions() == 0:
            return []
        with read_twice(self) as source:         # read again for the sample
            initial_count = source.count()
        if initial_count == 0:
            return []
        rand = random.Random(seed)
        if (not withReplacement) and num >= initial_count:
            samples = source.collect()
            rand.shuffle(samples)
            return samples
        fraction = _compute_fraction_for_sample_size(num, initial_count, withReplacement)
        samples = source.sample(withReplacement, fraction, seed).collect()
        while len(samples) < num:
            seed = rand.randint(0, sys.maxsize)
            samples = source.sample(withReplacement, fraction, seed).collect()
        rand.shuffle(samples)
        return samples[0:num]

    def countApprox(self, timeout: int, confidence: float = 0.95) -> int:
        return int(self.count())

    def sumApprox(self, timeout: int, confidence: float = 0.95) -> BoundedFloat:
        s = float(self.map(float).sum())
        return BoundedFloat(s, confidence, s, s)

    def meanApprox(self, timeout: int, confidence: float = 0.95) -> BoundedFloat:
        m = float(self.map(float).mean())
        return BoundedFloat(m, confidence, m, m)

    def countApproxDistinct(self, relativeSD: float = 0.05) -> int:
        if relativeSD < 0.000017:
            raise ValueError("relativeSD should be greater than 0.000017")
        from ember.hyperloglog import HyperLogLog
        p = HyperLogLog.precision_for(relativeSD)

        def sketch(iterator: Iterable) -> bytearray:
            h = HyperLogLog(p)
            for x in iterator:
                h.add(portable_hash(x))
            return h.registers

        parts = self.ctx.runtime.run_job(self, sketch)
        return HyperLogLog.merge_estimate(p, parts)

    # --- output -------------------------------------------------------------------------
    def saveAsTextFile(self, path: str, compressionCodecClass: str | None = None) -> None:
        ext = codec_extension(compressionCodecClass)

        def to_line(x: Any) -> bytes:
            if isinstance(x, bytes):
                return x
            return str(x).encode("utf-8")

        def write(ctx: Any, it: Iterator, committer: OutputCommitter) -> str:
            target = committer.attempt_file(ctx, f"part-{ctx.partitionId():05d}{ext}")
            with open_output(target, ext) as f:
                for x in it:
                    f.write(to_line(x))
                    f.write(b"\n")
            return target
        self._save(path, write)

    def saveAsPickleFile(self, path: str, batchSize: int = 10) -> None:
        """PySpark's format (a SequenceFile of pickled batches, ember.hadoop_io), so PySpark
        reads what Ember saves and the other way round."""
        from ember.hadoop_io import write_pickle_file
        size = max(batchSize, 1) if batchSize else 1024

        def write(ctx: Any, it: Iterator, committer: OutputCommitter) -> str:
            target = committer.attempt_file(ctx, f"part-{ctx.partitionId():05d}")
            with open_output(target) as f:
                write_pickle_file(f, it, size)
            return target
        self._save(path, write)

    def _save(self, path: str, write: Callable) -> None:
        """Through Hadoop's commit protocol (ember.output_commit): tasks write attempt
        files, the job moves the counted ones into place and writes _SUCCESS last."""
        committer = OutputCommitter(path)
        committer.setup_job()

        def run(ctx: Any, it: Iterator) -> str:
            return write(ctx, it, committer)
        try:
            attempt_files = self.ctx.runtime.run_job(self, run, with_context=True)
        except BaseException:
            committer.abort_job()
            raise
        committer.commit_job(attempt_files)

    # --- not supported ------------------------------------------------------------------
    def toDF(self, schema: Any = None, sampleRatio: Any = None) -> Any:
        raise NotImplementedError("DataFrames are not part of Ember; use the RDD API")

    # --- Hadoop's output formats (ember.hadoop_io) ---------------------------------------
    def saveAsSequenceFile(self, path: str, compressionCodecClass: str | None = None) -> None:
        self.saveAsHadoopFile(path, "org.apache.hadoop.mapred.SequenceFileOutputFormat",
                              compressionCodecClass=compressionCodecClass)

    def saveAsHadoopFile(self, path: str, outputFormatClass: str, keyClass: str | None = None,
                         valueClass: str | None = None, keyConverter: str | None = None,
                         valueConverter: str | None = None, conf: dict | None = None,
                         compressionCodecClass: str | None = None) -> None:
        self._save_hadoop(path, outputFormatClass, keyClass, valueClass, keyConverter,
                          valueConverter, conf, compressionCodecClass, new_api=False)

    def saveAsNewAPIHadoopFile(self, path: str, outputFormatClass: str,
                               keyClass: str | None = None, valueClass: str | None = None,
                               keyConverter: str | None = None,
                               valueConverter: str | None = None,
                               conf: dict | None = None) -> None:
        self._save_hadoop(path, outputFormatClass, keyClass, valueClass, keyConverter,
                          valueConverter, conf, None, new_api=True)

    def saveAsHadoopDataset(self, conf: dict, keyConverter: str | None = None,
                            valueConverter: str | None = None) -> None:
        self._save_dataset(conf, "mapred.output.format.class", keyConverter, valueConverter,
                           new_api=False)

    def saveAsNewAPIHadoopDataset(self, conf: dict, keyConverter: str | None = None,
                                  valueConverter: str | None = None) -> None:
        self._save_dataset(conf, "mapreduce.job.outputformat.class", keyConverter,
                           valueConverter, new_api=True)

    def _save_dataset(self, conf: dict, format_key: str, key_converter: str | None,
                      value_converter: str | None, new_api: bool) -> None:
        from ember.hadoop_io import conf_value
        path = conf_value(conf, "mapreduce.output.fileoutputformat.outputdir",
                          "mapred.output.dir")
        if path is None:
            raise SparkException("Output directory not set.")
        self._save_hadoop(
            path, conf_value(conf, format_key) or "", conf_value(
                conf, "mapreduce.job.output.key.class", "mapred.output.key.class"),
            conf_value(conf, "mapreduce.job.output.value.class", "mapred.output.value.class"),
            key_converter, value_converter, conf, None, new_api)

    def _save_hadoop(self, path: str, output_format: str, key_class: str | None,
                     value_class: str | None, key_converter: str | None,
                     value_converter: str | None, conf: dict | None, codec: str | None,
                     new_api: bool) -> None:
        """Spark's saveAsHadoopFile for the formats Ember writes: a SequenceFile of the
        Writables Spark makes of the pairs (classes inferred from the first pair unless
        named; BLOCK-compressed when given a codec, as Spark sets it), or TextOutputFormat's
        key TAB value lines."""
        from ember import hadoop_io as hio
        hio.refuse_converters(key_converter, value_converter)
        hio.check_format(output_format, hio.NEW_API if new_api else hio.OLD_API,
                         hio.OUTPUT_FORMATS, "output")
        prefix = "part-r-" if new_api else "part-"
        if codec is None and hio.conf_value(conf, "mapreduce.output.fileoutputformat.compress",
                                            "mapred.output.compress") == "true":
            codec = hio.conf_value(conf, "mapreduce.output.fileoutputformat.compress.codec",
                                   "mapred.output.compression.codec") or hio.DEFAULT_CODEC
            kind = hio.conf_value(conf, "mapreduce.output.fileoutputformat.compress.type",
                                  "mapred.output.compression.type") or "RECORD"
        else:
            kind = "BLOCK"
        if output_format in hio.TEXT_OUTPUT:
            ext = codec_extension(codec)

            def write(ctx: Any, it: Iterator, committer: OutputCommitter) -> str:
                target = committer.attempt_file(ctx, f"{prefix}{ctx.partitionId():05d}{ext}")
                with open_output(target, ext) as f:
                    for record in it:
                        line = hio.text_line(*_pair(record))
                        if line is not None:
                            f.write(line)
                return target
        else:
            if codec is not None:
                hio.codec(codec)               # an unknown codec fails before the job
            if key_class is None or value_class is None:
                first = self.take(1)
                if not first:
                    raise SparkException("empty collection")
                k, v = _pair(first[0])
                key_class = key_class or hio.writable_class(k)
                value_class = value_class or hio.writable_class(v)
            hio.encoder_for(key_class, "key")
            hio.encoder_for(value_class, "value")

            def write(ctx: Any, it: Iterator, committer: OutputCommitter) -> str:
                target = committer.attempt_file(ctx, f"{prefix}{ctx.partitionId():05d}")
                with open_output(target) as f:
                    writer = hio.SequenceFileWriter(f, key_class, value_class, kind, codec)
                    for record in it:
                        writer.append(*_pair(record))
                    writer.close()
                return target
        self._save(path, write)


# --- helpers used inside tasks ------------------------------------------------------------
def _reservoir(it: Iterable, k: int, rnd: random.Random) -> tuple[int, list]:
    """(count, uniform sample of at most k items) of an iterator; which items are taken
    depends on their positions and `rnd` only.

    Reservoir sampling with Li's Algorithm L: random numbers are drawn only for the
    elements that enter the sample, and the ones in between are skipped by islice, so a
    large partition costs little more than iterating it (Spark's sketch draws per element).
    """
    numbered = enumerate(it, 1)
    reservoir = [item for _, item in itertools.islice(numbered, k)]
    n = len(reservoir)
    if n < k or k == 0:
        return n, reservoir
    log, rand = math.log, rnd.random
    w = math.exp(log(rand() or 1e-300) / k)
    while True:
        skip = int(log(rand() or 1e-300) / log(1.0 - w)) if w < 1.0 else 0
        last = deque(itertools.islice(numbered, skip + 1), maxlen=1)
        if not last:
            return n, reservoir
        idx, item = last[0]
        if idx < n + skip + 1:          # ran out while skipping
            return idx, reservoir
        n = idx
        reservoir[rnd.randrange(k)] = item
        w *= math.exp(log(rand() or 1e-300) / k)


def _partition_sorter(rdd: RDD, ascending: bool, keyfunc: Callable[[Any], Any]
                      ) -> Callable[[Iterable], Iterator]:
    """Sort one partition's (k, v) pairs by keyfunc(k), spilling past the memory budget."""
    from ember.shuffle.external import ExternalSorter
    memory = rdd._memory_limit()
    local_dirs = rdd.ctx.runtime.spill_dirs
    key = operator.itemgetter(0) if keyfunc is _identity else (lambda kv: keyfunc(kv[0]))

    def sort_partition(iterator: Iterable) -> Iterator:
        sorter = ExternalSorter(int(memory * 0.9), local_dirs=local_dirs)
        sorter.free_after_reply = True
        return iter(sorter.sorted(iterator, key=key, reverse=not ascending))
    return sort_partition


def _is_pair_with_one(f: Any) -> bool:
    """True for a plain function whose code is exactly `return (arg, 1)` (e.g. the word
    count's `lambda w: (w, 1)`): no side effects, so it can be fused away."""
    import dis
    import types
    if type(f) is not types.FunctionType or f.__closure__ or f.__code__.co_argcount != 1 \
            or f.__code__.co_flags & 0x0C:
        return False
    ops = [(i.opname, i.argval) for i in dis.get_instructions(f)
           if i.opname not in ("RESUME", "NOP", "CACHE")]
    arg = f.__code__.co_varnames[0]
    return (len(ops) == 4 and ops[0] == ("LOAD_FAST", arg) and ops[1][0] == "LOAD_CONST"
            and type(ops[1][1]) is int and ops[1][1] == 1 and ops[2] == ("BUILD_TUPLE", 2)
            and ops[3][0] == "RETURN_VALUE")


def _counting_source(rdd: RDD, agg: Any) -> RDD | None:
    """The RDD of keys when `rdd` is `keys.map(lambda k: (k, 1))` about to be combined with
    (identity, +): the local combine then counts keys in C instead of building pairs."""
    from ember.shuffle.external import _is_add, _is_identity
    mapped = getattr(rdd, "_mapped_from", None)
    if mapped is None or not rdd._is_pipelinable() or not _is_pair_with_one(mapped[1]):
        return None
    if not (_is_identity(agg.createCombiner) and _is_add(agg.mergeValue)):
        return None
    return mapped[0]


# what copy.deepcopy returns as it is (CPython's copy._deepcopy_atomic), by exact type
_ATOMIC_TYPES = frozenset({int, float, bool, complex, str, bytes, type(None)})


def _seeded(zero: Any, func: Callable[[Any, Any], Any]) -> Callable[[Any], Any]:
    """aggregateByKey's and foldByKey's createCombiner, func(a deep copy of zero, v), as
    PySpark's; without the deepcopy call a new key (~30 % of a foldByKey of a million pairs
    over 100,000 keys) where it would return `zero` itself."""
    if type(zero) in _ATOMIC_TYPES:
        return lambda v: func(zero, v)
    return lambda v: func(copy.deepcopy(zero), v)


_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


_EXACT_LENGTH_ITERATORS = (type(iter([])), type(iter(())), type(iter(range(0))))


def _count_iter(it: Iterable) -> int:
    if isinstance(it, (list, tuple)):
        return len(it)
    if type(it) in _EXACT_LENGTH_ITERATORS:       # a cached partition, a parallelized range
        return operator.length_hint(it)
    return consume_whole(_count_all, it)


def _count_all(it: Iterable) -> int:
    d = deque(enumerate(it, 1), maxlen=1)
    return d[0][0] if d else 0


def _sum_partition(it: Iterable) -> Any:
    return consume_whole(sum, it)


def _collect_partition(it: Iterable) -> list:
    return consume_whole(list, it)


def _driver_hash_agrees(key: Any) -> bool:
    """Can the driver compute portable_hash(key) the way task processes do?"""
    if "PYTHONHASHSEED" not in os.environ:
        return False        # portable_hash would refuse to hash on the driver
    # str/bytes hashes agree only if this interpreter itself started with seed 0 (setting
    # the variable after start-up does not change hash()); tasks always hash with "0".
    if not sys.flags.hash_randomization and os.environ["PYTHONHASHSEED"] == "0":
        return True
    return isinstance(key, (int, float, type(None))) or (
        isinstance(key, tuple) and all(_driver_hash_agrees(k) for k in key))


def _compute_fraction_for_sample_size(sample_size_lower_bound: int, total: int,
                                      with_replacement: bool) -> float:
    fraction = float(sample_size_lower_bound) / total
    if with_replacement:
        num_st_dev = 5
        if sample_size_lower_bound < 12:
            num_st_dev = 9
        return fraction + num_st_dev * math.sqrt(fraction / total)
    delta = 0.00005
    gamma = -math.log(delta) / total
    return min(1, fraction + gamma + math.sqrt(gamma * gamma + 2 * gamma * fraction))


def _read_pickle_file(path: str) -> Iterator:
    """A part of a pickle file: PySpark's SequenceFile format, or the plain pickled batches
    Ember wrote before it wrote PySpark's."""
    from ember.hadoop_io import buffered, read_pickle_records
    with src.open_input(path) as f:
        reader = buffered(f)                # peek, not seek: a URL may be a stream
        if reader.peek(3)[:3] == b"SEQ":
            yield from read_pickle_records(reader, path)
        else:
            yield from load_batches(reader)


def _pair(record: Any) -> tuple:
    """A record saved through a Hadoop output format: a (key, value) pair."""
    if isinstance(record, tuple) and len(record) == 2:
        return record
    raise SparkException(f"RDD element of type {type(record).__name__} cannot be used")


# --- RDD kinds ---------------------------------------------------------------------------
class ParallelCollectionRDD(RDD):
    def __init__(self, ctx: Any, slices: list[Any], serializer: Any = None) -> None:
        super().__init__(ctx)
        self._slices = slices
        self._serializer = serializer      # set: each slice is its bytes (SparkContext's)

    def _get_partitions(self) -> list[Partition]:
        return [src.ParallelCollectionPartition(i, s) for i, s in enumerate(self._slices)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        if self._serializer is not None:
            data = split.data
            if type(data) is src.SliceFile:
                data = data.read()
            return iter(self._serializer.loads(data))
        return iter(split.data)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_slices"] = None          # each task carries its own slice
        return state

    def __repr__(self) -> str:
        return f"ParallelCollectionRDD[{self._id}] at {self._call_site}"


class EmptyRDD(RDD):
    def _get_partitions(self) -> list[Partition]:
        return []


class MapPartitionsRDD(RDD):
    """One or more narrow transformations over the parent's partitions, as one function
    (PySpark's PipelinedRDD). As there, it takes an RDD id only when something asks for it
    (id(), a job, caching): `rdd.map(f).filter(g)` is one RDD with one id, and the map
    step that was pipelined away never takes one."""
    _lineage_attrs = ("prev",)
    _numbered_lazily = True

    @property
    def _id(self) -> int:
        rid = self._rdd_id
        if rid is None:
            rid = self._rdd_id = self.ctx.runtime.new_rdd_id()
        return rid

    @_id.setter
    def _id(self, value: int | None) -> None:
        self._rdd_id = value

    def __repr__(self) -> str:
        return f"PythonRDD[{self._id}] at {self._call_site}"

    def __init__(self, prev: RDD, f: Callable[[int, Iterable], Iterable],
                 preservesPartitioning: bool = False, isFromBarrier: bool = False) -> None:
        self._from_barrier = isFromBarrier or getattr(prev, "_from_barrier", False)
        if isinstance(prev, MapPartitionsRDD) and prev._is_pipelinable():
            super().__init__(prev.ctx)
            self.func = _Pipelined(f, prev.func)
            self.prev = prev.prev
            self.preserves_partitioning = prev.preserves_partitioning and preservesPartitioning
        else:
            super().__init__(prev.ctx)
            self.func = f
            self.prev = prev
            self.preserves_partitioning = preservesPartitioning
        self.partitioner = prev.partitioner if self.preserves_partitioning else None

    def partitions(self) -> list[Partition]:
        """The first parent's, kept once asked for (Spark's partitions_); found down a
        chain of cached maps in a loop, not a recursion a level deep per map."""
        if self._partitions_cache is not None or self._checkpoint_dir is not None:
            return super().partitions()
        chain: list[MapPartitionsRDD] = []
        r: RDD = self
        while isinstance(r, MapPartitionsRDD) and r._partitions_cache is None \
                and r._checkpoint_dir is None:
            chain.append(r)
            r = r.prev
        parts = r.partitions()
        for m in chain:
            m._partitions_cache = parts
        return parts

    def _get_dependencies(self) -> list[Dependency]:
        return [OneToOneDependency(self.prev)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        return self.func(split.index, self.prev.iterator(split, context))


class HeldRDD(RDD):
    """`prev`'s partitions, for an operation that reads them twice (see
    ember.held_partitions): held by the tasks of the first job that reads them (while
    `holding`), then taken by later tasks from the task process that holds them."""
    _lineage_attrs = ("prev",)

    def __init__(self, prev: RDD) -> None:
        super().__init__(prev.ctx)
        self.prev = prev
        self.holding = True
        self._clean_when_unreachable()

    @property
    def holds_blocks(self) -> bool:
        """Whether its tasks prefer where its blocks are, and a stage that computed all
        its partitions releases what is left of them (the DAG scheduler asks)."""
        return not self.holding

    def _get_partitions(self) -> list[Partition]:
        return self.prev.partitions()

    def _get_dependencies(self) -> list[Dependency]:
        return [OneToOneDependency(self.prev)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        return self.prev.iterator(split, context)

    def iterator(self, split: Partition, context: Any) -> Iterator:
        env = getattr(context, "env", None)
        if env is None:
            return self.compute(split, context)
        name = block_name(self._id, split.index)
        if self.holding:
            return iter(hold_partition(self.compute(split, context), env, name))
        values = env.block_manager.take(name)
        if values is None:
            return self.compute(split, context)
        keep_until_reply(values)        # freed after the task's result, not when read out
        return iter(values)


def held_for_reread(rdd: RDD) -> RDD:
    """A HeldRDD of `rdd`, for an operation that reads it in a job of its own before the
    job that reads it again (sortByKey's sample, zipWithIndex's counts, histogram's
    minimum and maximum, takeSample's count); `rdd` itself when its partitions are at hand
    anyway (cached, checkpointed, parallelized) or it belongs to a barrier stage."""
    if rdd._storage_level != StorageLevel.NONE or rdd.isCheckpointed() or \
            rdd._local_checkpointed or isinstance(rdd, ParallelCollectionRDD) or \
            getattr(rdd, "_from_barrier", False):
        return rdd
    return HeldRDD(rdd)


@contextlib.contextmanager
def read_twice(rdd: RDD) -> Iterator[RDD]:
    """held_for_reread(rdd) for the first job, run in the with block. After it, later
    tasks take the held partitions; if it fails, nothing will, and what its tasks held is
    dropped there and then rather than when the context cleaner finds the RDD unreachable."""
    held = held_for_reread(rdd)
    try:
        yield held
    except BaseException:
        if isinstance(held, HeldRDD):
            with contextlib.suppress(Exception):    # the cleaner's turn then; not this error
                held.ctx.runtime.release_blocks(held.id())
        raise
    finally:
        if isinstance(held, HeldRDD):
            held.holding = False


class RDDBarrier:
    """Wraps an RDD in a barrier stage, whose tasks are launched together
    (PySpark's pyspark.RDDBarrier, made by RDD.barrier())."""

    def __init__(self, rdd: RDD) -> None:
        self.rdd = rdd

    def mapPartitions(self, f: Callable[[Iterable], Iterable],
                      preservesPartitioning: bool = False) -> RDD:
        return MapPartitionsRDD(self.rdd, _PartitionFunction(_whole_partition, f),
                                preservesPartitioning, isFromBarrier=True)

    def mapPartitionsWithIndex(self, f: Callable[[int, Iterable], Iterable],
                               preservesPartitioning: bool = False) -> RDD:
        return MapPartitionsRDD(self.rdd, f, preservesPartitioning, isFromBarrier=True)

    def __repr__(self) -> str:
        return f"<RDDBarrier of {self.rdd!r}>"


PipelinedRDD = MapPartitionsRDD


class ShuffledRDD(RDD):
    """The reduce side of a shuffle: (k, v) records bucketed by partition_func(k)."""
    _lineage_attrs = ("prev",)

    def __init__(self, prev: RDD, num_partitions: int,
                 partition_func: Callable[[Any], int]) -> None:
        super().__init__(prev.ctx)
        self.prev = prev
        self.num_partitions = num_partitions
        self.partition_func = partition_func
        self.shuffle_id = prev.ctx.runtime.new_shuffle_id()
        self._serializer = prev.ctx.runtime.data_serializer
        self._dep = ShuffleDependency(prev, self.shuffle_id, num_partitions, partition_func,
                                      self._serializer)
        cleaner = prev.ctx.runtime.cleaner
        if cleaner is not None:
            cleaner.register_shuffle_for_cleanup(self._dep)

    def _get_partitions(self) -> list[Partition]:
        return [Partition(i) for i in range(self.num_partitions)]

    def _get_dependencies(self) -> list[Dependency]:
        return [self._dep]

    def compute(self, split: Partition, context: Any) -> Iterator:
        from ember.shuffle.reader import read_partition
        return read_partition(self.shuffle_id, split.index, context, self._serializer)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["prev"] = None          # the map side belongs to another stage
        state["_dep"] = None
        return state


class CoGroupedRDD(RDD):
    """Spark's CoGroupedRDD: partition i of each parent's records, grouped by key into
    (key, (values from the first parent, from the second, ...)). Parents already
    partitioned as the result are read as they are; otherwise, as PySpark's cogroup does
    (and with its stages), all parents go through one shuffle of their union. The union's
    map tasks are the parents' partitions one parent after another, so the reduce side
    reads each parent's records from its range of map outputs: no record needs a tag
    (PySpark tags every value with its side, a Python call a record). What a map task
    writes, and how the reduce side groups: ember.join."""
    _lineage_attrs = ("rdds",)

    def __init__(self, ctx: Any, rdds: list[RDD], num_partitions: int,
                 memory_limit_mb: int) -> None:
        super().__init__(ctx)
        self.rdds = rdds
        self.num_partitions = num_partitions
        self.partitioner = Partitioner(num_partitions, portable_hash)
        self._memory = memory_limit_mb
        self._local_dirs = ctx.runtime.spill_dirs
        self._serializer = ctx.runtime.data_serializer
        self._map_ranges: list[tuple[int, int]] = []     # per parent, with a shuffle
        self._dep: Dependency | None = None
        self._shuffle_id: int | None = None
        if all(r.partitioner == self.partitioner for r in rdds):
            return
        map_sides = [r.mapPartitions(grouped_where_repeated(memory_limit_mb, self._local_dirs))
                     for r in rdds]
        first = 0
        for r in rdds:
            self._map_ranges.append((first, first + r.getNumPartitions()))
            first += r.getNumPartitions()
        self._shuffle_id = ctx.runtime.new_shuffle_id()
        self._dep = ShuffleDependency(UnionRDD(ctx, map_sides), self._shuffle_id,
                                      num_partitions, portable_hash, self._serializer)
        if ctx.runtime.cleaner is not None:
            ctx.runtime.cleaner.register_shuffle_for_cleanup(self._dep)

    def _get_partitions(self) -> list[Partition]:
        if self._dep is not None:
            return [Partition(i) for i in range(self.num_partitions)]
        parents = [r.partitions() for r in self.rdds]
        return [CoalescedPartition(i, [p[i] for p in parents])
                for i in range(self.num_partitions)]

    def _get_dependencies(self) -> list[Dependency]:
        if self._dep is not None:
            return [self._dep]
        return [OneToOneDependency(r) for r in self.rdds]

    def compute(self, split: Partition, context: Any) -> Iterator:
        if self._shuffle_id is not None:
            from ember.shuffle.reader import read_partition
            sides = [read_partition(self._shuffle_id, split.index, context, self._serializer,
                                    maps) for maps in self._map_ranges]
        else:
            sides = [r.iterator(p, context) for r, p in zip(self.rdds, split.parents)]
        return grouped_by_key(sides, self._memory, self._local_dirs)

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        if self._dep is not None:       # the parents belong to the map stage
            state["rdds"] = state["_dep"] = None
        return state


def union_of(ctx: Any, rdds: list[RDD]) -> RDD:
    """Spark's SparkContext.union: partitioner-aware when all parents share a partitioner.
    A parent that is itself a plain union of the same kind (not cached or checkpointed) is
    replaced by its parents, in their order: the same partitions, and `u = u.union(x)` in a
    loop of thousands builds one flat union instead of a lineage thousands deep (where
    PySpark fails at 300 with a StackOverflowError)."""
    first = rdds[0].partitioner
    aware = first is not None and all(r.partitioner == first for r in rdds[1:])
    kind = PartitionerAwareUnionRDD if aware else UnionRDD
    parents: list[RDD] = []
    for r in rdds:
        if type(r) is kind and r._is_pipelinable():
            parents.extend(r.rdds)
        else:
            parents.append(r)
    return kind(ctx, parents)


class PartitionerAwareUnionRDD(RDD):
    """Union of co-partitioned RDDs: partition i reads partition i of every parent."""
    _lineage_attrs = ("rdds",)

    def __init__(self, ctx: Any, rdds: list[RDD]) -> None:
        super().__init__(ctx)
        self.rdds = rdds
        self.partitioner = rdds[0].partitioner

    def _get_partitions(self) -> list[Partition]:
        parents = [r.partitions() for r in self.rdds]
        return [CoalescedPartition(i, [p[i] for p in parents])
                for i in range(len(parents[0]))]

    def _get_dependencies(self) -> list[Dependency]:
        return [OneToOneDependency(r) for r in self.rdds]

    def compute(self, split: Partition, context: Any) -> Iterator:
        for rdd, p in zip(self.rdds, split.parents):
            yield from rdd.iterator(p, context)


class UnionPartition(Partition):
    __slots__ = ("rdd_index", "parent")

    def __init__(self, index: int, rdd_index: int, parent: Partition) -> None:
        super().__init__(index)
        self.rdd_index, self.parent = rdd_index, parent

    def _args(self) -> tuple:
        return (self.index, self.rdd_index, self.parent)


class UnionRDD(RDD):
    _lineage_attrs = ("rdds",)

    def __init__(self, ctx: Any, rdds: list[RDD]) -> None:
        super().__init__(ctx)
        self.rdds = rdds

    def _get_partitions(self) -> list[Partition]:
        parts: list[Partition] = []
        for ri, r in enumerate(self.rdds):
            for p in r.partitions():
                parts.append(UnionPartition(len(parts), ri, p))
        return parts

    def _get_dependencies(self) -> list[Dependency]:
        deps: list[Dependency] = []
        pos = 0
        for r in self.rdds:
            n = r.getNumPartitions()
            deps.append(RangeDependency(r, 0, pos, n))
            pos += n
        return deps

    def compute(self, split: Partition, context: Any) -> Iterator:
        return self.rdds[split.rdd_index].iterator(split.parent, context)


class PairPartition(Partition):
    __slots__ = ("s1", "s2")

    def __init__(self, index: int, s1: Partition, s2: Partition) -> None:
        super().__init__(index)
        self.s1, self.s2 = s1, s2

    def _args(self) -> tuple:
        return (self.index, self.s1, self.s2)


class CartesianRDD(RDD):
    _lineage_attrs = ("rdd1", "rdd2")

    def __init__(self, rdd1: RDD, rdd2: RDD) -> None:
        super().__init__(rdd1.ctx)
        self.rdd1, self.rdd2 = rdd1, rdd2

    def _get_partitions(self) -> list[Partition]:
        p2 = self.rdd2.partitions()
        n2 = len(p2)
        return [PairPartition(i * n2 + j, a, b)
                for i, a in enumerate(self.rdd1.partitions()) for j, b in enumerate(p2)]

    def _get_dependencies(self) -> list[Dependency]:
        n2 = self.rdd2.getNumPartitions() or 1
        return [ManyToOneDependency(self.rdd1, lambda p: [p // n2]),
                ManyToOneDependency(self.rdd2, lambda p: [p % n2])]

    def compute(self, split: Partition, context: Any) -> Iterator:
        right = list(self.rdd2.iterator(split.s2, context))
        for x in self.rdd1.iterator(split.s1, context):
            for y in right:
                yield x, y


class ZippedRDD(RDD):
    _lineage_attrs = ("rdd1", "rdd2")

    def __init__(self, rdd1: RDD, rdd2: RDD) -> None:
        super().__init__(rdd1.ctx)
        self.rdd1, self.rdd2 = rdd1, rdd2

    def _get_partitions(self) -> list[Partition]:
        return [PairPartition(i, a, b) for i, (a, b) in
                enumerate(zip(self.rdd1.partitions(), self.rdd2.partitions()))]

    def _get_dependencies(self) -> list[Dependency]:
        return [OneToOneDependency(self.rdd1), OneToOneDependency(self.rdd2)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        sentinel = object()
        for a, b in itertools.zip_longest(self.rdd1.iterator(split.s1, context),
                                          self.rdd2.iterator(split.s2, context),
                                          fillvalue=sentinel):
            if a is sentinel or b is sentinel:
                raise ValueError("Can only zip RDDs with same number of elements in each "
                                 "partition")
            yield a, b


class CoalescedPartition(Partition):
    __slots__ = ("parents",)

    def __init__(self, index: int, parents: list[Partition]) -> None:
        super().__init__(index)
        self.parents = parents

    def _args(self) -> tuple:
        return (self.index, self.parents)


class CoalescedRDD(RDD):
    _lineage_attrs = ("prev",)

    def __init__(self, prev: RDD, num_partitions: int) -> None:
        super().__init__(prev.ctx)
        self.prev = prev
        self.max_partitions = num_partitions

    def _groups(self) -> list[list[int]]:
        n = self.prev.getNumPartitions()
        k = min(self.max_partitions, n)
        return [list(range(i * n // k, (i + 1) * n // k)) for i in range(k)] if k else []

    def _get_partitions(self) -> list[Partition]:
        parents = self.prev.partitions()
        return [CoalescedPartition(i, [parents[j] for j in g])
                for i, g in enumerate(self._groups())]

    def _get_dependencies(self) -> list[Dependency]:
        groups = self._groups()
        return [ManyToOneDependency(self.prev, lambda p: groups[p])]

    def compute(self, split: Partition, context: Any) -> Iterator:
        for p in split.parents:
            yield from self.prev.iterator(p, context)


class TextFileRDD(RDD):
    def __init__(self, ctx: Any, path: str, min_partitions: int, use_unicode: bool) -> None:
        super().__init__(ctx)
        self.path = path
        self.min_partitions = min_partitions
        self.use_unicode = use_unicode
        self._name = path

    def _get_partitions(self) -> list[Partition]:
        return src.compute_file_splits(src.list_input_files(self.path), self.min_partitions)

    def compute(self, split: Partition, context: Any) -> Iterator:
        return src.read_lines(split, self.use_unicode)

    def __repr__(self) -> str:
        return f"{self.path} TextFileRDD[{self._id}] at {self._call_site}"


class HadoopFileRDD(RDD):
    """A Hadoop InputFormat's records (sequenceFile, hadoopFile, newAPIHadoopRDD, ...), read
    split by split as textFile's lines are (ember.hadoop_io)."""

    def __init__(self, ctx: Any, path: str, min_partitions: int, input_format: str,
                 conf: dict | None) -> None:
        super().__init__(ctx)
        self.path = path
        self.min_partitions = min_partitions
        self.input_format = input_format
        self.conf = dict(conf or {})
        self._name = path

    def _get_partitions(self) -> list[Partition]:
        return src.compute_file_splits(src.list_input_files(self.path), self.min_partitions)

    def compute(self, split: Partition, context: Any) -> Iterator:
        from ember.hadoop_io import read_split
        whole = not src.splittable(split.path)     # a compressed file: its own length
        end = math.inf if whole else split.start + split.length
        with src.open_input(split.path) as f:
            yield from read_split(f, split.start, end, self.input_format, self.conf,
                                  split.path)

    def __repr__(self) -> str:
        return f"{self.path} HadoopRDD[{self._id}] at {self._call_site}"


class FileListRDD(RDD):
    """Whole files per record (wholeTextFiles, binaryFiles, binaryRecords, pickleFile)."""

    def __init__(self, ctx: Any, path: str, min_partitions: int, kind: str,
                 use_unicode: bool = True, record_length: int = 0) -> None:
        super().__init__(ctx)
        self.path = path
        self.min_partitions = min_partitions
        self.kind = kind
        self.use_unicode = use_unicode
        self.record_length = record_length

    def _get_partitions(self) -> list[Partition]:
        files = [f.path for f in src.list_input_files(self.path,
                                                       recursive=self.kind == "pickle")]
        if self.kind == "pickle":
            files = [f for f in files if f.rsplit("/", 1)[-1].startswith("part-")]
        k = max(1, min(self.min_partitions, len(files))) if files else 0
        if self.kind in ("pickle", "records"):
            k = len(files)
        n = len(files)
        return [src.FileListPartition(i, files[i * n // k:(i + 1) * n // k]) for i in range(k)]

    def compute(self, split: Partition, context: Any) -> Iterator:
        for path in split.paths:
            name = ("file:" + path) if fs.is_local(path) else path
            if self.kind == "text":
                data = src.read_whole_file(path)
                yield name, (data.decode("utf-8") if self.use_unicode else data)
            elif self.kind == "binary":
                yield name, src.read_whole_file(path)
            elif self.kind == "records":
                yield from src.read_records(path, self.record_length)
            else:
                yield from _read_pickle_file(path)
