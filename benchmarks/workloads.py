"""The benchmark workloads, each written once per engine kind.

Why: a benchmark is only meaningful if every engine computes the same thing, so each
workload holds its serial program, its PySpark-style RDD program (run unchanged on Ember
and on PySpark) and, where dask.bag can express it, its Dask program side by side, plus
the checksum (`result`) that must agree between them. Sizes are the full-scale ones of
the brief multiplied by `scale`.

The serial programs are what a Python programmer would write for one process (a
Counter over the lines, list.sort by key, a for loop); they are not made slow on purpose. Random
data is seeded per partition so that all engines see the same numbers.
"""
from __future__ import annotations

import heapq
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, ClassVar

from benchmarks import datagen
from benchmarks.engines import Engine, child_env
from benchmarks.kernels import (
    SEED,
    add,
    combine_sort_summaries,
    count_and_sum,
    dask_joined_sum,
    dimension_pairs,
    fact_pairs,
    half,
    joined_sum,
    key_of,
    pi_partition,
    pi_partition_hits,
    random_pairs,
    slice_bounds,
    sorted_run_summary,
    split_words,
    step,
    top_order,
    top_rank,
    word_one,
)

now = time.perf_counter


class Unsupported(Exception):
    """The engine cannot express this workload (recorded, not an error)."""


@dataclass
class Measurement:
    """One run of one workload on one engine."""

    seconds: float  # wall time of the measured part; lower is better
    result: Any  # JSON-able checksum that must agree across engines
    metrics: dict[str, float] = field(default_factory=dict)


def percentile(values: list[float], pct: float) -> float:
    """Nearest-rank percentile (pct in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[rank - 1]


class Workload:
    name: ClassVar[str]
    title: ClassVar[str]
    primary: ClassVar[str] = "seconds"  # key shown in the table ("seconds" or a metric)
    unit: ClassVar[str] = "s"

    def __init__(self, scale: float) -> None:
        self.scale = scale

    def params(self) -> dict[str, Any]:
        return {}

    def prepare(self) -> None:
        """Untimed set-up shared by all engines (e.g. generate the input file)."""

    def run(self, engine: Engine) -> Measurement:
        if engine.kind == "serial":
            return self.serial()
        if engine.kind == "rdd":
            return self.rdd(engine.sc)
        if engine.kind == "dask":
            return self.dask(engine.client)
        if engine.kind == "process":
            return engine.call(self)
        raise ValueError(engine.kind)

    def serial(self) -> Measurement:
        raise NotImplementedError

    def rdd(self, sc: Any) -> Measurement:
        raise NotImplementedError

    def dask(self, client: Any) -> Measurement:
        raise Unsupported(f"no dask version of {self.name}")

    def same_result(self, a: Any, b: Any) -> bool:
        return a == b

    def comparable_time(self, m: dict[str, float]) -> float:
        """Lower-is-better number used for the ratio against serial."""
        return m["seconds"]


# ============================================================================ word count


class WordCount(Workload):
    name = "wordcount"
    title = "word count, top 10 words"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.size_bytes = max(50_000, int(200_000_000 * scale))
        self.partitions = max(2, math.ceil(self.size_bytes / 16_000_000))
        self.path: str = ""

    def params(self) -> dict[str, Any]:
        return {"bytes": self.size_bytes, "partitions": self.partitions, "path": self.path}

    def prepare(self) -> None:
        self.path = str(datagen.zipf_text(self.size_bytes))

    @staticmethod
    def _answer(top: list) -> list:
        return [[word, count] for word, count in top]

    def serial(self) -> Measurement:
        t0 = now()
        counts: Counter[str] = Counter()
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                counts.update(line.split())
        top = heapq.nsmallest(10, counts.items(), key=top_order)
        return Measurement(now() - t0, self._answer(top))

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        top = (
            sc.textFile(self.path, minPartitions=self.partitions)
            .flatMap(split_words)
            .map(word_one)
            .reduceByKey(add)
            .takeOrdered(10, key=top_order)
        )
        return Measurement(now() - t0, self._answer(top))

    def dask(self, client: Any) -> Measurement:
        import dask.bag as db

        t0 = now()
        block = max(1_000_000, self.size_bytes // self.partitions + 1)
        lines = db.read_text(self.path, blocksize=block)
        top = lines.map(split_words).flatten().frequencies().topk(10, key=top_rank).compute()
        top = sorted(top, key=top_order)
        return Measurement(now() - t0, self._answer(top))


# ============================================================================ pi


class Pi(Workload):
    name = "pi"
    title = "Monte Carlo pi"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.partitions = 200 if scale >= 1 else max(2, min(200, round(200 * scale)))
        n = max(self.partitions * 1000, int(20_000_000 * scale))
        self.samples = n - n % self.partitions

    def params(self) -> dict[str, Any]:
        return {"samples": self.samples, "partitions": self.partitions}

    def _measure(self, t0: float, hits: int) -> Measurement:
        seconds = now() - t0
        return Measurement(seconds, hits, {"pi": 4.0 * hits / self.samples})

    def serial(self) -> Measurement:
        t0 = now()
        n, parts = self.samples, self.partitions
        hits = 0
        for index in range(parts):  # same seeds per slice as the distributed version
            lo, hi = slice_bounds(n, parts, index)
            rnd = random.Random(SEED + index).random
            for _ in range(hi - lo):
                x = rnd() * 2 - 1
                y = rnd() * 2 - 1
                if x * x + y * y <= 1:
                    hits += 1
        return self._measure(t0, hits)

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        darts = partial(pi_partition, n=self.samples, parts=self.partitions)
        hits = sc.parallelize(range(self.partitions), self.partitions).flatMap(darts).reduce(add)
        return self._measure(t0, hits)

    def dask(self, client: Any) -> Measurement:
        import dask.bag as db

        t0 = now()
        hits_of = partial(pi_partition_hits, n=self.samples, parts=self.partitions)
        bag = db.from_sequence(range(self.partitions), npartitions=self.partitions)
        hits = bag.map(hits_of).sum().compute()
        return self._measure(t0, int(hits))


# ============================================================================ sort


class SortByKey(Workload):
    name = "sort"
    title = "sortByKey of random int pairs"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.partitions = 8
        n = max(self.partitions * 100, int(4_000_000 * scale))
        self.pairs = n - n % self.partitions

    def params(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "partitions": self.partitions}

    def serial(self) -> Measurement:
        t0 = now()
        pairs: list[tuple[int, int]] = []
        for index in range(self.partitions):
            pairs.extend(random_pairs(index, self.pairs, self.partitions))
        # by key only and stable, as sortByKey orders (the harness baseline); a
        # whole-tuple sorted() reaches each key through its tuple and took ~1.7x as long
        pairs.sort(key=itemgetter(0))
        result = [len(pairs), pairs[0][0], pairs[-1][0], True]
        return Measurement(now() - t0, result)

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        gen = partial(random_pairs, n=self.pairs, parts=self.partitions)
        pairs = sc.parallelize(range(self.partitions), self.partitions).flatMap(gen)
        summaries = pairs.sortByKey().mapPartitionsWithIndex(sorted_run_summary).collect()
        return Measurement(now() - t0, combine_sort_summaries(summaries))

    def dask(self, client: Any) -> Measurement:
        raise Unsupported("dask.bag has no sort (dask.dataframe would need pandas)")


# ============================================================================ join


class Join(Workload):
    """A fact table joined to a dimension table by key: the shuffle of tagged records, the
    grouping by key and the pairing that cogroup, join and subtract share."""

    name = "join"
    title = "join of random int pairs to one row per key"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.partitions = 8
        n = max(self.partitions * 100, int(2_000_000 * scale))
        self.facts = n - n % self.partitions
        self.keys = max(self.partitions, self.facts // 10)

    def params(self) -> dict[str, Any]:
        return {"facts": self.facts, "keys": self.keys, "partitions": self.partitions}

    def serial(self) -> Measurement:
        t0 = now()
        parts = self.partitions
        dims = dict(kv for i in range(parts) for kv in dimension_pairs(i, self.keys, parts))
        count = total = 0
        for i in range(parts):
            for k, v in fact_pairs(i, self.facts, parts, self.keys):
                w = dims.get(k)
                if w is not None:
                    count += 1
                    total += v + w
        return Measurement(now() - t0, [count, total])

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        parts = self.partitions
        seeds = sc.parallelize(range(parts), parts)
        facts = seeds.flatMap(partial(fact_pairs, n=self.facts, parts=parts, keys=self.keys))
        dims = seeds.flatMap(partial(dimension_pairs, keys=self.keys, parts=parts))
        sums = facts.join(dims).map(joined_sum).mapPartitions(count_and_sum).collect()
        return Measurement(now() - t0, [sum(c for c, _ in sums), sum(t for _, t in sums)])

    def dask(self, client: Any) -> Measurement:
        import dask
        import dask.bag as db

        t0 = now()
        parts = self.partitions
        seeds = db.from_sequence(range(parts), npartitions=parts)
        facts = seeds.map(partial(fact_pairs, n=self.facts, parts=parts, keys=self.keys)) \
            .flatten()
        dims = [kv for i in range(parts) for kv in dimension_pairs(i, self.keys, parts)]
        joined = facts.join(dims, on_self=key_of, on_other=key_of)
        values = joined.map(dask_joined_sum).pluck(1)
        count, total = dask.compute(values.count(), values.sum())
        return Measurement(now() - t0, [count, total])


# ============================================================================ partitions


class ManyPartitions(Workload):
    """A shuffle of modest data through many map and reduce partitions: what it costs
    should grow with maps + reducers, not maps x reducers."""

    name = "partitions"
    title = "partitionBy of 100,000 pairs, P maps x P reducers"

    def __init__(self, scale: float, partitions: int | None = None) -> None:
        super().__init__(scale)
        self.partitions = partitions or max(10, min(10_000, round(1000 * scale)))
        self.pairs = 100_000

    def params(self) -> dict[str, Any]:
        return {"pairs": self.pairs, "partitions": self.partitions}

    def serial(self) -> Measurement:
        t0 = now()
        buckets: list[list] = [[] for _ in range(self.partitions)]
        for index in range(self.partitions):
            for kv in random_pairs(index, self.pairs, self.partitions):
                buckets[hash(kv[0]) % self.partitions].append(kv)
        sums = [s for b in buckets for s in count_and_sum(b)]
        return Measurement(now() - t0, [sum(c for c, _ in sums), sum(t for _, t in sums)])

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        gen = partial(random_pairs, n=self.pairs, parts=self.partitions)
        sums = (sc.parallelize(range(self.partitions), self.partitions).flatMap(gen)
                .partitionBy(self.partitions).mapPartitions(count_and_sum).collect())
        return Measurement(now() - t0, [sum(c for c, _ in sums), sum(t for _, t in sums)])


# ============================================================================ tiny tasks


class TinyTasks(Workload):
    name = "tiny_tasks"
    title = "one-record partitions counted"
    primary = "tasks_per_s"
    unit = "tasks/s"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.tasks = max(10, round(2000 * scale))

    def params(self) -> dict[str, Any]:
        return {"tasks": self.tasks}

    def _measure(self, t0: float, count: int) -> Measurement:
        seconds = now() - t0
        return Measurement(seconds, count, {"tasks_per_s": self.tasks / seconds})

    def serial(self) -> Measurement:
        t0 = now()
        partitions = [[i] for i in range(self.tasks)]
        count = sum(len(p) for p in partitions)
        return self._measure(t0, count)

    def rdd(self, sc: Any) -> Measurement:
        t0 = now()
        count = sc.parallelize(range(self.tasks), self.tasks).count()
        return self._measure(t0, count)

    def dask(self, client: Any) -> Measurement:
        import dask.bag as db

        t0 = now()
        count = db.from_sequence(range(self.tasks), npartitions=self.tasks).count().compute()
        return self._measure(t0, int(count))


# ============================================================================ warm latency


class WarmLatency(Workload):
    name = "warm_latency"
    title = "small job on a warm context"
    primary = "median_ms"
    unit = "ms"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.jobs = max(10, round(50 * scale))

    def params(self) -> dict[str, Any]:
        return {"jobs": self.jobs, "records": 100, "partitions": 2}

    def comparable_time(self, m: dict[str, float]) -> float:
        return m["median_ms"]

    def _repeat(self, job) -> Measurement:
        latencies: list[float] = []
        counts = set()
        for _ in range(self.jobs):
            t0 = now()
            counts.add(job())
            latencies.append((now() - t0) * 1000)
        median = statistics.median(latencies)
        metrics = {"median_ms": median, "p95_ms": percentile(latencies, 95)}
        result = counts.pop() if len(counts) == 1 else sorted(counts)
        return Measurement(median / 1000, result, metrics)

    def serial(self) -> Measurement:
        return self._repeat(lambda: sum(len(part) for part in (range(0, 50), range(50, 100))))

    def rdd(self, sc: Any) -> Measurement:
        return self._repeat(lambda: sc.parallelize(range(100), 2).count())

    def dask(self, client: Any) -> Measurement:
        import dask.bag as db

        return self._repeat(lambda: int(db.from_sequence(range(100), npartitions=2).count().compute()))


# ============================================================================ cold start


class ColdStart(Workload):
    name = "cold_start"
    title = "new process: context, count 10, stop"
    timeout = 180.0

    _warm: ClassVar[set[str]] = set()      # engines this process has started once

    def run(self, engine: Engine) -> Measurement:
        if engine.kind == "process":
            return engine.call(self)    # that process makes room for a new application
        if engine.name not in self._warm:
            # untimed: fills the bytecode caches an installed package would already have
            # (see benchmarks/bytecode.py); later runs time the start, not the compiler
            self._warm.add(engine.name)
            self._start(engine)
        return self._start(engine)

    def _start(self, engine: Engine) -> Measurement:
        with tempfile.TemporaryDirectory(prefix="ember-cold-") as tmp:
            script = os.path.join(tmp, "cold_start.py")
            with open(script, "w") as f:
                f.write(engine.cold_start_code())
            t0 = now()
            proc = subprocess.run(
                [sys.executable, script, engine.cold_start_arg()],
                capture_output=True,
                text=True,
                env=child_env(),
                timeout=self.timeout,
                cwd=tmp,
            )
            seconds = now() - t0
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"cold-start process exited {proc.returncode}: " + " | ".join(tail))
        lines = proc.stdout.strip().splitlines()
        return Measurement(seconds, int(lines[-1]) if lines else None)


# ============================================================================ iterative


class IterativeCached(Workload):
    name = "iterative"
    title = "cached floats, 10 map+sum passes"
    primary = "later_s"
    unit = "s/iter"

    def __init__(self, scale: float) -> None:
        super().__init__(scale)
        self.records = max(1000, int(2_000_000 * scale))
        self.partitions = 8
        self.iterations = 10

    def params(self) -> dict[str, Any]:
        return {"records": self.records, "partitions": self.partitions, "iterations": self.iterations}

    def same_result(self, a: Any, b: Any) -> bool:
        # Float sums depend on the summation order (per partition vs one loop).
        return isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9)

    def comparable_time(self, m: dict[str, float]) -> float:
        return m["later_s"]

    def _measure(self, times: list[float], total: float) -> Measurement:
        metrics = {"first_s": times[0], "later_s": statistics.median(times[1:])}
        return Measurement(sum(times), float(total), metrics)

    def serial(self) -> Measurement:
        times: list[float] = []
        t0 = now()
        data = [half(i) for i in range(self.records)]  # "caching": build it once
        total = 0.0
        for _ in range(self.iterations):
            total = sum(map(step, data))             # map + sum with the engines' kernel
            times.append(now() - t0)
            t0 = now()
        return self._measure(times, total)

    def rdd(self, sc: Any) -> Measurement:
        times: list[float] = []
        data = sc.parallelize(range(self.records), self.partitions).map(half).cache()
        try:
            total = 0.0
            for _ in range(self.iterations):
                t0 = now()
                total = data.map(step).sum()
                times.append(now() - t0)
        finally:
            data.unpersist()
        return self._measure(times, total)

    def dask(self, client: Any) -> Measurement:
        import dask.bag as db

        times: list[float] = []
        data = db.range(self.records, npartitions=self.partitions).map(half).persist()
        try:
            total = 0.0
            for _ in range(self.iterations):
                t0 = now()
                total = data.map(step).sum().compute()
                times.append(now() - t0)
        finally:
            del data
        return self._measure(times, total)


WORKLOADS: dict[str, type[Workload]] = {
    cls.name: cls
    for cls in (WordCount, Pi, SortByKey, Join, ManyPartitions, TinyTasks, WarmLatency, ColdStart,
                IterativeCached)
}
