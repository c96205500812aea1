"""partitionBy of 100,000 pairs through P maps x P reducers (issue 15, Deliver 3).

Why: a shuffle whose cost grows with maps x reducers makes thousands of partitions
unusable (Spark's transitive_closure.py doubles its partitions every round); with sparse
segments, inline tiny outputs and one file per task process it should grow with
maps + reducers. Runs as a script against whichever tree is on PYTHONPATH, so the same file
times an older tree too:

    PYTHONPATH=/path/to/tree python benchmarks/shuffle_partitions.py 100 1000 10000

Prints one JSON line per P: seconds of the job (context start excluded), P, pairs.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Iterable, Iterator

PAIRS = 100_000


def pairs_of(index: int, per: int) -> Iterator[tuple[int, int]]:
    for j in range(index * per, (index + 1) * per):
        yield (j * 2654435761 % 1_000_003, j)


def count_and_sum(pairs: Iterable[tuple[int, int]]) -> Iterator[tuple[int, int]]:
    """(records, sum of values) of one partition: an answer that ignores record order."""
    count = total = 0
    for _key, value in pairs:
        count += 1
        total += value
    yield (count, total)


def run(partitions: int, master: str) -> dict:
    from ember import SparkConf, SparkContext
    sc = SparkContext(conf=SparkConf().setMaster(master).setAppName(f"partitions-{partitions}")
                      .set("spark.ui.enabled", "false"))
    try:
        per = PAIRS // partitions
        sc.parallelize(range(4), 2).count()      # task processes started: time the shuffle
        t0 = time.perf_counter()
        sums = (sc.parallelize(range(partitions), partitions)
                .flatMap(lambda i: pairs_of(i, per))
                .partitionBy(partitions).mapPartitions(count_and_sum).collect())
        seconds = time.perf_counter() - t0
    finally:
        sc.stop()
    n = per * partitions
    assert (sum(c for c, _ in sums), sum(t for _, t in sums)) == (n, n * (n - 1) // 2)
    return {"workload": "partitions", "partitions": partitions, "pairs": n,
            "seconds": round(seconds, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("partitions", nargs="+", type=int)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args()
    for p in args.partitions:
        print(json.dumps(run(p, args.master)), flush=True)


if __name__ == "__main__":
    main()
