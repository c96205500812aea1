"""Cluster deploy mode latency on a real 2-worker local cluster, from the moment
`ember submit --deploy-mode cluster` starts: to the driver RUNNING (the submit client's
"State of <id> is RUNNING" line), to the submit process's exit, and to the application
FINISHED on the master (polled every 10 ms). Two trivial apps: one that only prints, one that
runs a SparkContext with a one-stage job (so it pays for executors too).

    python -m benchmarks.cluster_submit [--runs 10]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

APPS = {
    "print": "print('hello from the cluster')\n",
    "context": ("from ember import SparkContext\n"
                "sc = SparkContext(appName='trivial')\n"
                "print(sc.parallelize(range(100), 2).sum())\n"
                "sc.stop()\n"),
}


def measure(cluster, app: str) -> tuple[float, float, float]:
    from ember.deploy.local_cluster import _env
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ember.cli", "submit", "--master",
                             cluster.url, "--deploy-mode", "cluster", app],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_env())
    running = None
    for line in proc.stderr:
        if running is None and " is RUNNING" in line:
            running = time.perf_counter() - t0
    driver_id = proc.stdout.read().split()[0]
    proc.wait()
    exited = time.perf_counter() - t0
    while True:
        j = cluster.json()
        d = [d for d in j["completeddrivers"] if d["id"] == driver_id]
        if d:
            if d[0]["state"] != "FINISHED":
                raise RuntimeError(f"{driver_id} ended {d[0]['state']}")
            return running or float("nan"), exited, time.perf_counter() - t0
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cluster_submit")
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from ember.deploy.local_cluster import LocalCluster
    tmp = tempfile.mkdtemp(prefix="ember-submit-bench-")
    with LocalCluster(os.path.join(tmp, "cluster"), workers=2, cores=2,
                      memory="4g") as cluster:
        for name, source in APPS.items():
            app = os.path.join(tmp, f"{name}.py")
            with open(app, "w") as f:
                f.write(source)
            measure(cluster, app)             # warm-up: page cache, first imports
            samples = [measure(cluster, app) for _ in range(args.runs)]
            result = {"benchmark": "cluster_submit", "app": name, "runs": args.runs}
            for i, key in enumerate(("to_running_s", "to_submit_exit_s", "to_finished_s")):
                result[key] = round(statistics.median(s[i] for s in samples), 3)
            print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
