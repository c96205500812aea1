"""PySpark's RDD profiler (pyspark.profiler), for `spark.python.profile=true`.

As in PySpark, each profiled RDD gets a profiler on the driver whose accumulator carries a
pstats.Stats back from every task that computed it; `sc.show_profiles()` prints them and
`sc.dump_profiles(path)` writes `rdd_<id>.pstats`, and one of the two runs at exit
(`spark.python.profile.dump` picks the second). PySpark profiles each PythonRDD; an Ember
stage is one pipelined function over its input, so the profiled RDDs are the ones a stage
ends in: an action's RDD and each shuffle's map side, and the profile covers the whole task
(the input read, the user's functions and the shuffle write or the result).
"""
from __future__ import annotations

import atexit
import cProfile
import os
import pstats
import threading
from typing import Any, Callable

from ember.accumulators import AccumulatorParam
from ember.dependency import ShuffleDependency

try:
    import memory_profiler  # noqa: F401
    has_memory_profiler = True
except Exception:
    has_memory_profiler = False


class ProfilerCollector:
    """Keeps the driver's profilers, one per profiled RDD, and makes new ones."""

    def __init__(self, profiler_cls: type["Profiler"], udf_profiler_cls: type["Profiler"] | None,
                 memory_profiler_cls: type["Profiler"] | None,
                 dump_path: str | None = None) -> None:
        self.profiler_cls = profiler_cls
        self.udf_profiler_cls = udf_profiler_cls
        self.memory_profiler_cls = memory_profiler_cls
        self.profile_dump_path = dump_path
        self.profilers: list[list[Any]] = []
        self._lock = threading.Lock()

    def new_profiler(self, ctx: Any) -> "Profiler":
        return self.profiler_cls(ctx)

    def add_profiler(self, id: int, profiler: "Profiler") -> None:
        """Track `profiler` for RDD `id`; the first one registers the exit report."""
        if not self.profilers:
            if self.profile_dump_path:
                atexit.register(self.dump_profiles, self.profile_dump_path)
            else:
                atexit.register(self.show_profiles)
        self.profilers.append([id, profiler, False])

    def dump_profiles(self, path: str) -> None:
        for id, profiler, _ in self.profilers:
            profiler.dump(id, path)
        self.profilers = []

    def show_profiles(self) -> None:
        """Print each profile not printed yet."""
        for entry in self.profilers:
            id, profiler, showed = entry
            if not showed and profiler:
                profiler.show(id)
                entry[2] = True

    def _profile_job(self, rdd: Any, lineage: list[Any]) -> None:
        """Before a job: give the RDDs its stages end in a profiler, once each. The tasks
        find it in the pickled RDD (`_profiler`) and run under it."""
        ends = [rdd] + [d.rdd for r in lineage for d in r.dependencies()
                        if isinstance(d, ShuffleDependency)]
        with self._lock:
            for r in ends:
                if getattr(r, "_profiler", None) is None:
                    profiler = r._profiler = self.new_profiler(r.ctx)
                    self.add_profiler(r.id(), profiler)


class Profiler:
    """A custom profiler defines profile (run and measure a function on the executor),
    stats, show and dump (on the driver); the class is SparkContext's profiler_cls."""

    def __init__(self, ctx: Any) -> None:
        pass

    def profile(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def stats(self) -> Any:
        raise NotImplementedError

    def show(self, id: int) -> None:
        raise NotImplementedError

    def dump(self, id: int, path: str) -> None:
        raise NotImplementedError


class PStatsParam(AccumulatorParam):
    """Merges the pstats.Stats of the tasks; None is no profile yet."""

    @staticmethod
    def zero(value: pstats.Stats | None) -> None:
        return None

    @staticmethod
    def addInPlace(value1: pstats.Stats | None,  # noqa: N802
                   value2: pstats.Stats | None) -> pstats.Stats | None:
        if value1 is None:
            return value2
        if value2 is not None:     # a task that computed this RDD only as another's input
            value1.add(value2)
        return value1


class BasicProfiler(Profiler):
    """The default profiler: cProfile in the task, an accumulator to the driver."""

    _kind = "RDD"

    def __init__(self, ctx: Any) -> None:
        super().__init__(ctx)
        self._accumulator = ctx.accumulator(None, PStatsParam)

    def profile(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        pr = cProfile.Profile()
        ret = pr.runcall(func, *args, **kwargs)
        st = pstats.Stats(pr)
        st.stream = None  # type: ignore[attr-defined]  # a file object does not pickle
        st.strip_dirs()
        self._accumulator.add(st)
        return ret

    def stats(self) -> pstats.Stats:
        return self._accumulator.value

    def show(self, id: int) -> None:
        stats = self.stats()
        if stats:
            print("=" * 60)
            print("Profile of %s<id=%d>" % (self._kind, id))
            print("=" * 60)
            stats.sort_stats("time", "cumulative").print_stats()

    def dump(self, id: int, path: str) -> None:
        os.makedirs(path, exist_ok=True)
        stats = self.stats()
        if stats:
            stats.dump_stats(os.path.join(path, "%s_%d.pstats" % (self._kind.lower(), id)))


class UDFBasicProfiler(BasicProfiler):
    """PySpark's profiler for Python UDFs (SparkContext's udf_profiler_cls)."""

    _kind = "UDF"
