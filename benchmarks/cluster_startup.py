"""Time from SparkContext creation to the first (and every) executor registered, against a
real local standalone cluster: the cost a cluster application pays before its first task.

    python -m benchmarks.cluster_startup [--workers 2] [--runs 5] [--conf KEY=VALUE ...]

The daemons and executors run from bytecode caches as an installed package does
(benchmarks/bytecode.py says how, and the output which); one untimed run first fills them
and imports the driver's modules.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

from benchmarks.bytecode import use_installed_bytecode


def measure(url: str, workers: int) -> tuple[float, float]:
    from ember import SparkContext
    t0 = time.perf_counter()
    sc = SparkContext(url, "startup-bench")
    first = all_ready = None
    try:
        while all_ready is None and time.perf_counter() - t0 < 60:
            n = len(sc.runtime.scheduler_backend.executors)
            if n and first is None:
                first = time.perf_counter() - t0
            if n >= workers:
                all_ready = time.perf_counter() - t0
            time.sleep(0.002)
    finally:
        sc.stop()
    return first or float("nan"), all_ready or float("nan")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_startup")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark property for the cluster's daemons (e.g. "
                        "spark.ember.worker.executorZygote=false)")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    bytecode = use_installed_bytecode()
    print(bytecode, file=sys.stderr, flush=True)
    from ember.deploy.local_cluster import LocalCluster
    with LocalCluster(tempfile.mkdtemp(prefix="ember-startup-"), workers=args.workers,
                      cores=2, memory="2g",
                      conf=dict(kv.split("=", 1) for kv in args.conf)) as cluster:
        measure(cluster.url, args.workers)     # untimed warm-up
        time.sleep(0.5)
        firsts, alls = [], []
        for _ in range(args.runs):
            f, a = measure(cluster.url, args.workers)
            firsts.append(f)
            alls.append(a)
            time.sleep(0.5)       # let the master retire the finished application
    result = {"benchmark": "context_to_executors", "workers": args.workers, "runs": args.runs,
              "first_executor_median_s": statistics.median(firsts),
              "all_executors_median_s": statistics.median(alls),
              "first_runs": firsts, "all_runs": alls, "bytecode": bytecode, "conf": args.conf,
              "loadavg": list(os.getloadavg())}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
