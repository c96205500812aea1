"""A straggler job with and without speculation, on a real 2-host local cluster (workers on
127.0.0.1 and 127.0.0.2, 4 cores each, one 1-core executor per core, so 8 executors).

The job: 40 tasks of BASE seconds (a sleep, so the shared machine's CPU noise matters
little), 10x slower on one executor of the second host (chosen by executor id: a task reads
it from its working directory <work>/<app>/<executor id>). Reported: medians of --runs of
the job without a straggler, with the straggler and spark.speculation=true, and with the
straggler and speculation off (Spark's defaults otherwise: multiplier 3, quantile 0.9).

    python -m benchmarks.speculation [--runs 3] [--base 0.2]
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

TASKS = 40


def _job(sc, slow: str, base: float) -> float:
    def work(it):
        time.sleep(base * (10 if os.path.basename(os.getcwd()) == slow else 1))
        return [sum(it)]

    t0 = time.perf_counter()
    sc.parallelize(range(TASKS * 10), TASKS).mapPartitions(work).collect()
    return time.perf_counter() - t0


def _context(cluster, speculation: bool):
    from ember import SparkConf, SparkContext
    conf = (SparkConf().setMaster(cluster.url).setAppName(f"speculation-{speculation}")
            .set("spark.executor.cores", "1").set("spark.executor.memory", "256m")
            .set("spark.ui.enabled", "false").set("spark.speculation", str(speculation).lower()))
    sc = SparkContext(conf=conf)
    deadline = time.monotonic() + 120
    while len(sc.runtime.scheduler_backend.executors) < 8:
        if time.monotonic() > deadline:
            raise RuntimeError("executors did not register")
        time.sleep(0.1)
    return sc


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.speculation")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--base", type=float, default=0.2, help="seconds per normal task")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from ember.deploy.local_cluster import LocalCluster
    tmp = tempfile.mkdtemp(prefix="ember-speculation-bench-")
    results: dict[str, list[float]] = {"no straggler": [], "straggler, speculation on": [],
                                       "straggler, speculation off": []}
    cluster = LocalCluster(os.path.join(tmp, "cluster"), workers=2, cores=4, memory="2g",
                           worker_hosts=["127.0.0.1", "127.0.0.2"])
    with cluster:
        for speculation in (True, False):
            sc = _context(cluster, speculation)
            try:
                slow = sorted(e.executor_id for e in sc.runtime.scheduler_backend.executors.values()
                              if e.host == "127.0.0.2")[0]
                _job(sc, "none", args.base)                   # warm-up
                for _ in range(args.runs):
                    if speculation:
                        results["no straggler"].append(_job(sc, "none", args.base))
                    key = f"straggler, speculation {'on' if speculation else 'off'}"
                    results[key].append(_job(sc, slow, args.base))
            finally:
                sc.stop()
    base = statistics.median(results["no straggler"])
    print(f"{TASKS} tasks of {args.base:g} s, one of 8 executors 10x slower, "
          f"median of {args.runs}:")
    for name, times in results.items():
        med = statistics.median(times)
        print(f"  {name:28s} {med:6.2f} s  ({med / base:.2f}x)  runs: "
              + ", ".join(f"{t:.2f}" for t in times))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
