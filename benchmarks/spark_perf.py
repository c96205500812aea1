"""spark-perf's PySpark core tests (databricks/spark-perf, pyspark-tests/core_tests.py),
Ember against PySpark (round thirty-five).

Why: they are the benchmark Spark's developers ran PySpark's RDD API with, so they say how
Ember does on someone else's choice of work. The tests and their options are spark-perf's
(config.py.template): cached key-value data of `num-records` pairs from `unique-keys` keys
and `unique-values` values, as strings padded to 10 characters or as ints, over
`num-partitions` partitions and `reduce-tasks` reducers, a test's own scale (2 for the int
aggregation, 0.1 and 0.2 for the sorts) times --scale on the options spark-perf scales.
spark-perf's cluster default is scale 1 (200 M records, 400 partitions); --scale 0.005
(1 M records, 2 partitions, 2 reducers) fits this 2-core machine. Changed from spark-perf:
Python 3 (`//` where it divided with `/`), no pause between trials (3 s there), and the
scheduler test's task count is an option (5,000 there: PySpark runs ~15 tasks/s here).

    python -m benchmarks.spark_perf [--engines ember,pyspark] [--scale 0.005]
        [--trials 5] [--rounds 2] [--num-tasks 1000] [--tests AggregateByKey,...]

Each engine runs in a process of its own (local[2], UI off), builds its inputs, runs each
test once to warm up and then --trials times; rounds alternate the engines. Prints each
test's median per engine and round, the ratio PySpark / Ember, and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Any, Callable

# test -> its scale in spark-perf's config.py.template
TESTS = {"SchedulerThroughputTest": 1.0, "AggregateByKey": 1.0, "AggregateByKeyInt": 2.0,
         "AggregateByKeyNaive": 1.0, "SortByKey": 0.1, "SortByKeyInt": 0.2, "Count": 1.0,
         "CountWithFilter": 1.0, "BroadcastWithBytes": 1.0, "BroadcastWithSet": 1.0}
# spark-perf's SPARK_KEY_VAL_TEST_OPTS and BROADCAST_TEST_OPTS at scale 1 (scaled: True)
OPTIONS = {"num-partitions": (400, True), "reduce-tasks": (400, True),
           "num-records": (200_000_000, True), "unique-keys": (20_000, True),
           "unique-values": (1_000_000, True), "key-length": (10, False),
           "value-length": (10, False), "random-seed": (5, False),
           "broadcast-size": (200 << 20, True)}


def options_for(test: str, scale: float) -> dict[str, int]:
    s = TESTS[test] * scale
    return {k: max(1, int(v * s)) if scaled else v for k, (v, scaled) in OPTIONS.items()}


def _int_data(sc: Any, o: dict[str, int]) -> Any:
    records, parts, seed = o["num-records"], o["num-partitions"], o["random-seed"]
    keys, values = o["unique-keys"], o["unique-values"]

    def gen(index: int) -> Any:
        ran = random.Random(hash(str(seed ^ index)))
        for _ in range(records // parts):
            yield ran.randint(0, keys), ran.randint(0, values)
    return sc.parallelize(range(parts), parts).flatMap(gen)


def _kv_data(sc: Any, storage_level: Any, o: dict[str, int], strings: bool) -> Any:
    rdd = _int_data(sc, o)
    if strings:
        keyfmt, valuefmt = f"%0{o['key-length']}d", f"%0{o['value-length']}d"
        rdd = rdd.map(lambda kv: (keyfmt % kv[0], valuefmt % kv[1]))
    rdd = rdd.persist(storage_level)
    rdd.count()
    return rdd


def _test(sc: Any, storage_level: Any, name: str, o: dict[str, int],
          num_tasks: int) -> tuple[Callable[[], Any], Any]:
    """The test's runTest and its cached input (None for the tests without one), the input
    built first (spark-perf's createInputData)."""
    rt = o["reduce-tasks"]
    if name == "SchedulerThroughputTest":
        return (lambda: sc.parallelize(range(num_tasks), num_tasks).count()), None
    if name.startswith("Broadcast"):
        n = o["broadcast-size"]
        if name == "BroadcastWithBytes":
            block = os.urandom(min(n, 1 << 20))
            data: Any = block * (n >> 20) if n > (1 << 20) else block
        else:
            data = set(range(n // 32))

        def run() -> None:
            size = len(data)
            b = sc.broadcast(data)
            rdd = sc.parallelize(range(o["num-partitions"]), 100)
            assert rdd.filter(lambda x: len(b.value) == size).count() == o["num-partitions"]
            b.unpersist()
        return run, None
    rdd = _kv_data(sc, storage_level, o, strings=not name.endswith("Int"))
    return {
        "AggregateByKey": lambda: rdd.map(lambda kv: (kv[0], int(kv[1])))
        .reduceByKey(lambda x, y: x + y, rt).count(),
        "AggregateByKeyInt": lambda: rdd.reduceByKey(lambda x, y: x + y, rt).count(),
        "AggregateByKeyNaive": lambda: rdd.map(lambda kv: (kv[0], int(kv[1])))
        .groupByKey(rt).mapValues(sum).count(),
        "SortByKey": lambda: rdd.sortByKey(numPartitions=rt).count(),
        "SortByKeyInt": lambda: rdd.sortByKey(numPartitions=rt).count(),
        "Count": lambda: rdd.count(),
        "CountWithFilter": lambda: rdd.filter(lambda kv: int(kv[1]) % 2).count(),
    }[name], rdd


def child(args: argparse.Namespace) -> None:
    """One engine: each test's trial times, as one JSON line."""
    if args.child == "ember":
        from ember import SparkConf, SparkContext, StorageLevel
    else:
        from pyspark import SparkConf, SparkContext, StorageLevel
    sc = SparkContext("local[2]", "spark-perf", conf=SparkConf().set("spark.ui.enabled",
                                                                     "false"))
    sc.setLogLevel("ERROR")
    times: dict[str, list[float]] = {}
    try:
        for name in args.tests.split(","):
            run, data = _test(sc, StorageLevel.MEMORY_ONLY, name,
                              options_for(name, args.scale), args.num_tasks)
            run()                                   # warm-up
            for _ in range(args.trials):
                start = time.perf_counter()
                run()
                times.setdefault(name, []).append(time.perf_counter() - start)
            if data is not None:                    # spark-perf runs a test a process
                data.unpersist()
    finally:
        sc.stop()
    print(json.dumps(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engines", default="ember,pyspark")
    parser.add_argument("--scale", type=float, default=0.005)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--num-tasks", type=int, default=1000)
    parser.add_argument("--tests", default=",".join(TESTS))
    parser.add_argument("--child", choices=["ember", "pyspark"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    unknown = set(args.tests.split(",")) - set(TESTS)
    if unknown:
        parser.error(f"unknown tests: {', '.join(sorted(unknown))}")
    if args.child:
        child(args)
        return
    engines = args.engines.split(",")
    medians: dict[str, dict[str, list[float]]] = {e: {} for e in engines}
    for _round in range(args.rounds):
        for engine in engines:
            cmd = [sys.executable, "-m", "benchmarks.spark_perf", "--child", engine,
                   "--scale", str(args.scale), "--trials", str(args.trials),
                   "--num-tasks", str(args.num_tasks), "--tests", args.tests]
            out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, text=True).stdout
            for name, times in json.loads(out.strip().splitlines()[-1]).items():
                medians[engine].setdefault(name, []).append(statistics.median(times))
    print(f"spark-perf core tests, scale {args.scale}, {args.trials} trials, medians (s) by "
          f"round")
    for name in args.tests.split(","):
        cells = ["  ".join(f"{m:.3f}" for m in medians[e][name]) for e in engines]
        line = f"{name:24s} " + " | ".join(f"{e} {c}" for e, c in zip(engines, cells))
        if "ember" in medians and "pyspark" in medians:
            ratios = [p / e for p, e in zip(medians["pyspark"][name], medians["ember"][name])]
            line += " | pyspark/ember " + "  ".join(f"{r:.1f}x" for r in ratios)
        print(line)
    print(json.dumps({"scale": args.scale, "trials": args.trials, "medians": medians}))


if __name__ == "__main__":
    main()
