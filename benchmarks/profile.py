"""Where a workload's time goes: cProfile of the driver and of every task process.

    python -m benchmarks.profile wordcount [--scale 0.05] [--top 25] [--partitions P]

Runs one workload once on local[2] (UI off) with the driver under cProfile and
EMBER_TASK_PROFILE_DIR set, so each task process profiles itself until it stops; prints
the driver's and the task processes' (merged) top functions by own time, the wall time
and the driver's CPU time. Profiling roughly doubles the cost of Python-level calls.
"""
from __future__ import annotations

import argparse
import cProfile
import glob
import io
import os
import pstats
import tempfile
import time


def _top(stats: pstats.Stats, n: int) -> str:
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("tottime").print_stats(n)
    return "\n".join(line for line in out.getvalue().splitlines()
                     if line.strip() and not line.startswith("   Ordered by"))


def main(argv: list[str] | None = None) -> None:
    from benchmarks.workloads import WORKLOADS
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--partitions", type=int, default=0, help="for the partitions workload")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    kwargs = {"partitions": args.partitions} if args.partitions else {}
    wl = WORKLOADS[args.workload](args.scale, **kwargs)
    wl.prepare()
    with tempfile.TemporaryDirectory(prefix="ember-profile-") as tmp:
        os.environ["EMBER_TASK_PROFILE_DIR"] = tmp
        import ember
        sc = ember.SparkContext("local[2]", "profile",
                                conf=ember.SparkConf().set("spark.ui.enabled", "false"))
        driver = cProfile.Profile()
        cpu0, t0 = time.process_time(), time.perf_counter()
        driver.enable()
        wl.rdd(sc)
        driver.disable()
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
        sc.stop()
        deadline = time.time() + 10
        while time.time() < deadline and not glob.glob(os.path.join(tmp, "task-*.prof")):
            time.sleep(0.1)
        time.sleep(0.5)
        files = sorted(glob.glob(os.path.join(tmp, "task-*.prof")))
        tasks = pstats.Stats(*files) if files else None
        print(f"{args.workload} {wl.params()}: wall {wall:.2f} s, driver CPU {cpu:.2f} s, "
              f"task processes' profiled time {tasks.total_tt if tasks else 0:.2f} s")
        print("\n== driver ==")
        print(_top(pstats.Stats(driver), args.top))
        if tasks is not None:
            print(f"\n== {len(files)} task processes, merged ==")
            print(_top(tasks, args.top))


if __name__ == "__main__":
    main()
