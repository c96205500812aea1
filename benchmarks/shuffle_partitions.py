"""partitionBy of 100,000 pairs through P maps x P reducers (issue 15, Deliver 3).

Why: a shuffle whose cost grows with maps x reducers makes thousands of partitions
unusable (Spark's transitive_closure.py doubles its partitions every round); with sparse
segments, inline tiny outputs and one file per task process it should grow with
maps + reducers. Runs as a script against whichever tree is on PYTHONPATH, so the same file
times an older tree too:

    PYTHONPATH=/path/to/tree python benchmarks/shuffle_partitions.py 100 1000 10000
    PYTHONPATH=... python benchmarks/shuffle_partitions.py --mb 100 100 10000   # 100 MB

With --mb every value is a distinct bytes object, sized so that the pairs total about that
many MB: the same data then goes through P x P for every P, so the times compare how the
shuffle scales with partitions rather than with data. Prints one JSON line per P: seconds
of the job (context start excluded), P, pairs, MB.
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Iterable, Iterator

PAIRS = 100_000


def pairs_of(index: int, per: int, pad: int = 0) -> Iterator[tuple[int, object]]:
    for j in range(index * per, (index + 1) * per):
        key = j * 2654435761 % 1_000_003
        yield (key, j) if not pad else (key, j.to_bytes(8, "little") * pad)


def count_and_sum(pairs: Iterable[tuple[int, object]]) -> Iterator[tuple[int, int]]:
    """(records, sum of values) of one partition: an answer that ignores record order (a
    padded value counts as the number it repeats)."""
    count = total = 0
    for _key, value in pairs:
        count += 1
        total += value if isinstance(value, int) else int.from_bytes(value[:8], "little")
    yield (count, total)


def run(partitions: int, master: str, mb: int = 0) -> dict:
    from ember import SparkConf, SparkContext
    sc = SparkContext(conf=SparkConf().setMaster(master).setAppName(f"partitions-{partitions}")
                      .set("spark.ui.enabled", "false"))
    try:
        sc.parallelize(range(4), 2).count()      # task processes started: time the shuffle
        t0 = time.perf_counter()
        n, pad = shuffle(sc, partitions, mb)
        seconds = time.perf_counter() - t0
    finally:
        sc.stop()
    return {"workload": "partitions", "partitions": partitions, "pairs": n,
            "mb": round(n * pad * 8 / (1 << 20), 1), "seconds": round(seconds, 3)}


def shuffle(sc: object, partitions: int, mb: int = 0) -> tuple[int, int]:
    """The job: PAIRS pairs through partitions x partitions, the answer checked; returns
    (pairs, 8-byte repeats per value). Also what benchmarks.instructions --shuffle runs."""
    per = PAIRS // partitions
    pad = (mb << 20) // (PAIRS * 8)         # 8-byte repeats per value
    sums = (sc.parallelize(range(partitions), partitions)
            .flatMap(lambda i: pairs_of(i, per, pad))
            .partitionBy(partitions).mapPartitions(count_and_sum).collect())
    n = per * partitions
    assert (sum(c for c, _ in sums), sum(t for _, t in sums)) == (n, n * (n - 1) // 2)
    return n, pad


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("partitions", nargs="+", type=int)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--mb", type=int, default=0,
                    help="pad the values so that the pairs total about this many MB")
    args = ap.parse_args()
    for p in args.partitions:
        print(json.dumps(run(p, args.master, args.mb)), flush=True)


if __name__ == "__main__":
    main()
