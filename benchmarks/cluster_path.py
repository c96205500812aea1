"""The cost of a task on the cluster path: tiny tasks and warm job latency on a local
standalone cluster (or local[2]), with the CPU and context switches per task of each kind
of process.

    python -m benchmarks.cluster_path [--workers 2] [--cores 2] [--tasks 4000] [--runs 3] [--local]

Why: on a shared machine tasks/s moves with everybody else's load; the CPU each process
spends per task (driver, executors, task processes) and how often each is woken move much
less, so a change to the driver <-> executor traffic shows there first. Prints one JSON line.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any


def _switches(pid: int) -> int:
    """Voluntary + involuntary context switches of every thread of the process."""
    total = 0
    for path in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(path) as f:
                total += sum(int(line.split()[1]) for line in f if "ctxt_switches" in line)
        except OSError:
            pass
    return total


def _kind(proc: Any) -> str:
    if proc.pid == os.getpid():
        return "driver"
    cmd = " ".join(proc.cmdline())
    if "ember.executor.backend" in cmd:
        return "executors"
    if "ember.executor.forkserver" in cmd:
        return "task processes"      # forked task processes keep their fork server's argv
    return "daemons"


def _snapshot(procs: list) -> dict[int, tuple[str, float, int]]:
    import psutil
    out = {}
    for p in procs:
        try:
            out[p.pid] = (_kind(p), sum(p.cpu_times()[:2]), _switches(p.pid))
        except psutil.Error:
            pass
    return out


def measure(master: str, executors: int, tasks: int, runs: int) -> dict[str, Any]:
    import psutil

    import ember
    sc = ember.SparkContext(master, "cluster-path",
                            conf=ember.SparkConf().set("spark.ui.enabled", "false"))
    try:
        deadline = time.monotonic() + 60
        while len(getattr(sc.runtime.scheduler_backend, "executors", {})) < executors \
                and time.monotonic() < deadline:
            time.sleep(0.005)
        for _ in range(3):
            sc.parallelize(range(400), 400).count()      # task processes started, warm
        me = psutil.Process()
        procs = [me] + me.children(recursive=True)
        jobs = []
        for _ in range(runs):
            before = _snapshot(procs)
            t0 = time.perf_counter()
            sc.parallelize(range(tasks), tasks).count()
            seconds = time.perf_counter() - t0
            after = _snapshot(procs)
            per_kind: dict[str, list[float]] = {}
            for pid, (kind, cpu, switches) in after.items():
                if pid in before and kind != "daemons":
                    acc = per_kind.setdefault(kind, [0.0, 0.0])
                    acc[0] += (cpu - before[pid][1]) * 1e6 / tasks
                    acc[1] += (switches - before[pid][2]) / tasks
            jobs.append((tasks / seconds, per_kind))
        latencies = []
        rdd = sc.parallelize(range(100), 2)
        for _ in range(100):
            t0 = time.perf_counter()
            rdd.count()
            latencies.append(time.perf_counter() - t0)
    finally:
        sc.stop()
    latencies.sort()
    median_job = sorted(jobs, key=lambda j: j[0])[len(jobs) // 2]
    return {"benchmark": "cluster_path", "master": master, "tasks": tasks, "runs": runs,
            "tasks_per_s_median": statistics.median(j[0] for j in jobs),
            "tasks_per_s_runs": [round(j[0]) for j in jobs],
            "cpu_us_per_task": {k: round(v[0]) for k, v in median_job[1].items()},
            "context_switches_per_task": {k: round(v[1], 2) for k, v in median_job[1].items()},
            "warm_latency_ms_median": 1000 * statistics.median(latencies),
            "warm_latency_ms_p95": 1000 * latencies[94],
            "loadavg": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_path",
                                description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=2, help="workers of the cluster")
    p.add_argument("--cores", type=int, default=2, help="cores of each worker")
    p.add_argument("--tasks", type=int, default=4000, help="one-record tasks per job")
    p.add_argument("--runs", type=int, default=3, help="jobs (the median is reported)")
    p.add_argument("--local", action="store_true", help="local[2] instead of a cluster")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    if args.local:
        result = measure("local[2]", 0, args.tasks, args.runs)
    else:
        from ember.deploy.local_cluster import LocalCluster
        with LocalCluster(tempfile.mkdtemp(prefix="ember-cluster-path-"), workers=args.workers,
                          cores=args.cores, memory="2g") as cluster:
            result = measure(cluster.url, args.workers, args.tasks, args.runs)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
