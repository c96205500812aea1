"""Failover time with spark.deploy.recoveryMode=ZOOKEEPER and the timeouts Ember ships:
from kill -9 of the leading master to (a) a standby ALIVE and (b) a cluster-mode submission,
made through the list of master URLs right after the kill, RUNNING on a worker. Three
masters, one worker, a real ZooKeeper (Debian's package, the test suite's LocalZooKeeper:
tickTime 250 ms).

    python -m benchmarks.zookeeper_failover [--runs 10]

Each run kills the current leader, measures, then restarts the killed master as a standby,
so every run starts from three masters. Also measured: the recovery store's cost on the
submit path, one driver record written by the leader (a fenced ZooKeeper transaction), as
the median of 300 writes.
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

APP = "import time\nprint('failover probe', flush=True)\ntime.sleep(1)\n"


def _driver_state(cluster, i: int, driver_id: str):
    try:
        j = cluster.master_json(i)
    except (OSError, ValueError):
        return None
    for d in j.get("activedrivers", []) + j.get("completeddrivers", []):
        if d["id"] == driver_id:
            return d["state"]
    return None


def one_run(cluster, app: str) -> tuple[float, float]:
    from ember.deploy.local_cluster import _env
    old = cluster.wait_for_leader(60)
    others = [i for i in range(cluster.n_masters) if i != old]
    t0 = time.monotonic()
    cluster.kill_master(old)
    # Submitted at once through the list of URLs: the client asks again while every
    # master answers as not alive, until the new leader takes it.
    submit = subprocess.Popen(
        [sys.executable, "-m", "ember.cli", "submit", "--master", cluster.url,
         "--deploy-mode", "cluster", app], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=_env())
    alive_at = None
    while alive_at is None and time.monotonic() - t0 < 120:
        if any(cluster.status(i) == "ALIVE" for i in others):
            alive_at = time.monotonic() - t0
        else:
            time.sleep(0.02)
    out, err = submit.communicate(timeout=120)
    if submit.returncode != 0:
        raise RuntimeError(f"submission after failover failed: {err}")
    driver_id = out.split()[0]
    leader = cluster.wait_for_leader(60, exclude=(old,))
    running_at = None
    while running_at is None and time.monotonic() - t0 < 120:
        if _driver_state(cluster, leader, driver_id) in ("RUNNING", "FINISHED"):
            running_at = time.monotonic() - t0
        else:
            time.sleep(0.02)
    cluster.start_master(old)
    cluster.wait_master_status(old, ("STANDBY",), 60)
    deadline = time.monotonic() + 60
    while _driver_state(cluster, leader, driver_id) not in ("FINISHED", "FAILED", "ERROR") \
            and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive_at or float("nan"), running_at or float("nan")


def record_write_ms(zk_url: str, writes: int = 300) -> tuple[float, float]:
    """(median, p95) ms of one `persist` of a driver-sized record by an elected leader."""
    import threading
    from ember.deploy.master.persistence import create_recovery
    engine, agent = create_recovery({"spark.deploy.recoveryMode": "ZOOKEEPER",
                                     "spark.deploy.zookeeper.url": zk_url,
                                     "spark.deploy.zookeeper.dir": "/write-cost"},
                                    master_url="spark://bench:7077")
    elected = threading.Event()
    agent.start(lambda epoch: elected.set(), lambda: None)
    try:
        if not elected.wait(60):
            raise RuntimeError("the benchmark's agent was not elected")
        record = {"id": "driver-20261201000000-0001", "state": "SUBMITTED", "supervise": False,
                  "desc": {"cores": 1, "memory": 1024, "command": ["python", "app.py"] * 10,
                           "properties": {f"spark.key{i}": "v" * 24 for i in range(30)}}}
        times = []
        for i in range(writes):
            t = time.perf_counter()
            engine.persist(f"driver_bench-{i}", record)
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        return statistics.median(times), times[int(len(times) * 0.95)]
    finally:
        agent.stop()
        engine.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.zookeeper_failover")
    p.add_argument("--runs", type=int, default=10)
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from ember.deploy.local_ha_cluster import LocalHACluster
    from ember.deploy.local_zookeeper import LocalZooKeeper
    work = tempfile.mkdtemp(prefix="ember-zk-failover-")
    os.makedirs(os.path.join(work, "zk"))
    app = os.path.join(work, "probe.py")
    with open(app, "w") as f:
        f.write(APP)
    alive, running = [], []
    with LocalZooKeeper(os.path.join(work, "zk")) as zk:
        cluster = LocalHACluster(os.path.join(work, "cluster"), zk.url, masters=3, workers=1,
                                 cores=4)
        try:
            cluster.start()
            for n in range(args.runs):
                a, r = one_run(cluster, app)
                alive.append(a)
                running.append(r)
                print(f"run {n + 1}: ALIVE after {a:.2f} s, submission RUNNING after {r:.2f} s",
                      file=sys.stderr)
        finally:
            cluster.stop()
        write_median, write_p95 = record_write_ms(zk.url)
    result = {"benchmark": "zookeeper_failover", "runs": args.runs,
              "record_write_median_ms": write_median, "record_write_p95_ms": write_p95,
              "to_alive_median_s": statistics.median(alive), "to_alive_max_s": max(alive),
              "to_running_median_s": statistics.median(running),
              "to_running_max_s": max(running), "to_alive_runs": alive,
              "to_running_runs": running}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
