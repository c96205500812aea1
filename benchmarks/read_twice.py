"""Operations that read their input in two jobs, over an input that is costly to make
(round thirty-six).

Why: sortByKey/sortBy sample before they shuffle, zipWithIndex counts before it zips,
histogram(n) finds the minimum and maximum before it counts, takeSample counts before it
samples. Spark computes an uncached input in both jobs; Ember's first job holds what fits
for the second (ember/held_partitions.py). The input here is a text file of
`key,user,number` lines parsed in the job, as a user's would be; comparing two trees means
running this module from each, alternating.

    python -m benchmarks.read_twice [--lines 1000000] [--partitions 8] [--runs 5]
        [--master local[2]]

Prints each operation's median wall time and one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from typing import Any, Callable

DATA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".data")


def text_file(lines: int) -> str:
    """`lines` lines of `40-bit key,user,number`, written once per size."""
    path = os.path.join(DATA_DIR, f"read-twice-{lines}.txt")
    if not os.path.exists(path):
        os.makedirs(DATA_DIR, exist_ok=True)
        rnd = random.Random(5)
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            for _ in range(lines):
                f.write(f"{rnd.getrandbits(40)},user{rnd.randrange(10 ** 7):07d},"
                        f"{rnd.randrange(1000)}\n")
        os.replace(tmp, path)
    return path


def parse(line: str) -> tuple[int, tuple[str, int]]:
    key, user, number = line.split(",")
    return int(key), (user, int(number))


def operations(sc: Any, path: str, partitions: int) -> dict[str, Callable[[], Any]]:
    def parsed() -> Any:
        return sc.textFile(path, partitions).map(parse)
    return {
        "sortByKey": lambda: parsed().sortByKey().map(lambda kv: kv[1][1]).sum(),
        "sortBy": lambda: parsed().sortBy(lambda kv: kv[1][0]).map(lambda kv: kv[1][1]).sum(),
        "zipWithIndex": lambda: parsed().zipWithIndex().map(lambda r: r[1]).sum(),
        "histogram": lambda: parsed().map(lambda kv: kv[1][1]).histogram(10)[1],
        "takeSample": lambda: len(parsed().takeSample(False, 100, 1)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--master", default="local[2]")
    args = ap.parse_args(argv)
    import ember
    path = text_file(args.lines)
    sc = ember.SparkContext(args.master, "read-twice",
                            conf=ember.SparkConf().set("spark.ui.enabled", "false"))
    medians: dict[str, float] = {}
    try:
        for name, op in operations(sc, path, args.partitions).items():
            op()                                    # warm-up
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                op()
                times.append(time.perf_counter() - t0)
            medians[name] = statistics.median(times)
            print(f"{name:14s} {medians[name]:.3f} s  (runs: "
                  f"{', '.join(f'{t:.3f}' for t in times)})", flush=True)
    finally:
        sc.stop()
    print(json.dumps({"benchmark": "read_twice", "master": args.master, "lines": args.lines,
                      "partitions": args.partitions, "runs": args.runs, "medians": medians}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
