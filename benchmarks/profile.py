"""Where a workload's time goes: cProfile of the driver, its scheduler loop, the executors
and every task process.

    python -m benchmarks.profile wordcount [--scale 0.05] [--top 25] [--partitions P]
    python -m benchmarks.profile tiny_tasks --cluster 2      # a spark:// cluster of 2 workers

Runs one workload once (after one untimed warm-up run, so imports and process start-up are
not what is measured) on local[2], or on a local standalone cluster with --cluster, UI
off. Profiled are: the driver's main thread (the user program: the job's set-up and the
wait for it), the driver's scheduler loop thread (DAG scheduler, task scheduler, backend:
on a cluster also the RPC I/O), every executor's RPC loop (EMBER_EXECUTOR_PROFILE_DIR) and
every task process (EMBER_TASK_PROFILE_DIR). Prints each side's top functions by own time,
the wall time and the CPU seconds of each kind of process. Profiling roughly doubles the
cost of Python-level calls, so the shares matter, not the totals.
"""
from __future__ import annotations

import argparse
import cProfile
import glob
import io
import os
import pstats
import tempfile
import threading
import time
from typing import Any


def _top(stats: pstats.Stats, n: int) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("tottime").print_stats(n)
    return "\n".join(line for line in out.getvalue().splitlines()
                     if line.strip() and not line.startswith("   Ordered by"))


def _on_loop(sc: Any, fn: Any) -> None:
    """Run fn on the driver's scheduler loop thread and wait for it."""
    done = threading.Event()

    def run() -> None:
        try:
            fn()
        finally:
            done.set()
    sc.runtime.event_loop.post(run)
    done.wait(30)


def _wait_for_files(pattern: str, expected: int, timeout: float = 15.0) -> list[str]:
    """Processes write their profile when they exit, a moment after the context stops."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(glob.glob(pattern)) < expected:
        time.sleep(0.1)
    time.sleep(0.3)
    return sorted(glob.glob(pattern))


def _merged(files: list[str]) -> pstats.Stats | None:
    return pstats.Stats(*files) if files else None


def main(argv: list[str] | None = None) -> None:
    from benchmarks.workloads import WORKLOADS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--partitions", type=int, default=0, help="for the partitions workload")
    p.add_argument("--cluster", type=int, default=0, metavar="WORKERS",
                   help="run on a local standalone cluster of this many 2-core workers")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    kwargs = {"partitions": args.partitions} if args.partitions else {}
    wl = WORKLOADS[args.workload](args.scale, **kwargs)
    wl.prepare()
    with tempfile.TemporaryDirectory(prefix="ember-profile-") as tmp:
        os.environ["EMBER_TASK_PROFILE_DIR"] = tmp
        os.environ["EMBER_EXECUTOR_PROFILE_DIR"] = tmp
        cluster = None
        master = "local[2]"
        if args.cluster:
            from ember.deploy.local_cluster import LocalCluster
            cluster = LocalCluster(os.path.join(tmp, "cluster"), workers=args.cluster,
                                   cores=2, memory="2g").start()
            master = cluster.url
        try:
            _profile(args, wl, master, tmp)
        finally:
            if cluster is not None:
                cluster.stop()


def _profile(args: argparse.Namespace, wl: Any, master: str, tmp: str) -> None:
    import ember
    import psutil
    sc = ember.SparkContext(master, "profile",
                            conf=ember.SparkConf().set("spark.ui.enabled", "false"))
    deadline = time.monotonic() + 60
    while args.cluster and len(sc.runtime.scheduler_backend.executors) < args.cluster \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    wl.rdd(sc)                              # warm-up: imports, task processes, first stage
    me = psutil.Process()
    others = {c.pid: c for c in me.children(recursive=True)}
    cpu0 = {pid: sum(c.cpu_times()[:2]) for pid, c in others.items()}
    main_prof, loop_prof = cProfile.Profile(), cProfile.Profile()
    _on_loop(sc, loop_prof.enable)
    driver_cpu0, t0 = sum(me.cpu_times()[:2]), time.perf_counter()
    main_prof.enable()
    wl.rdd(sc)
    main_prof.disable()
    wall, driver_cpu = time.perf_counter() - t0, sum(me.cpu_times()[:2]) - driver_cpu0
    _on_loop(sc, loop_prof.disable)
    cpu: dict[str, float] = {}
    for pid, c in others.items():
        try:
            used = sum(c.cpu_times()[:2]) - cpu0[pid]
            cmd = " ".join(c.cmdline())
        except psutil.Error:
            continue
        kind = ("executors" if "ember.executor.backend" in cmd else
                "task processes" if "task_process" in cmd or "forkserver" in cmd else
                "master and workers")
        cpu[kind] = cpu.get(kind, 0.0) + used
    sc.stop()
    executors = _wait_for_files(os.path.join(tmp, "executor-*.prof"), args.cluster)
    tasks = _wait_for_files(os.path.join(tmp, "task-*.prof"), 1)
    print(f"{args.workload} {wl.params()} on {master}: wall {wall:.2f} s; CPU seconds: "
          f"driver {driver_cpu:.2f}" + "".join(f", {k} {v:.2f}" for k, v in sorted(cpu.items()))
          + " (task processes forked by a fork server are counted with their parent)")
    sections = [("driver main thread (the user program)", pstats.Stats(main_prof)),
                ("driver scheduler loop", pstats.Stats(loop_prof)),
                (f"{len(executors)} executors' RPC loops, merged", _merged(executors)),
                (f"{len(tasks)} task processes, merged (warm-up included)", _merged(tasks))]
    for title, stats in sections:
        if stats is not None and stats.total_calls:
            print(f"\n== {title}: {stats.total_tt:.2f} s profiled ==")
            print(_top(stats, args.top))


if __name__ == "__main__":
    main()
