"""Hadoop's file formats and pickle files, Ember against PySpark (round thirty-two).

Why: Ember writes and reads SequenceFiles and PySpark's pickle files in Python
(ember.hadoop_io) where PySpark hands them to Hadoop's Java code; this says what that
costs. One engine per run, local[2], the context started before timing:

    python -m benchmarks.hadoop_files ember --pairs 400000 --runs 5
    python -m benchmarks.hadoop_files pyspark --pairs 400000 --runs 5

Prints one JSON line: the median seconds of each step over the runs (a step writes to a
fresh directory, then reads back and counts), the pairs, and the engine.
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("engine", choices=["ember", "pyspark"])
    parser.add_argument("--pairs", type=int, default=400_000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    if args.engine == "ember":
        from ember import SparkContext
    else:
        from pyspark import SparkContext
    sc = SparkContext("local[2]", "hadoop-files")
    sc.setLogLevel("ERROR")
    n = args.pairs
    rdd = sc.parallelize(range(n), 2).map(lambda i: (i, f"value-{i:012d}")).cache()
    rdd.count()
    codec = "org.apache.hadoop.io.compress.DefaultCodec"
    steps: dict[str, list[float]] = {}
    for run in range(args.runs):
        base = tempfile.mkdtemp(prefix="hadoop-files-")
        for name, action in (
                ("saveAsSequenceFile", lambda: rdd.saveAsSequenceFile(f"{base}/seq")),
                ("sequenceFile.count", lambda: sc.sequenceFile(f"{base}/seq").count()),
                ("saveAsSequenceFile(DefaultCodec)",
                 lambda: rdd.saveAsSequenceFile(f"{base}/block", codec)),
                ("sequenceFile(DefaultCodec).count",
                 lambda: sc.sequenceFile(f"{base}/block").count()),
                ("saveAsPickleFile", lambda: rdd.saveAsPickleFile(f"{base}/pickle")),
                ("pickleFile.count", lambda: sc.pickleFile(f"{base}/pickle").count())):
            start = time.perf_counter()
            action()
            steps.setdefault(name, []).append(time.perf_counter() - start)
        shutil.rmtree(base)
    sc.stop()
    print(json.dumps({"engine": args.engine, "pairs": n, "runs": args.runs,
                      **{k: round(statistics.median(v), 4) for k, v in steps.items()}}))


if __name__ == "__main__":
    main()
