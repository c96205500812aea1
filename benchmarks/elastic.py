"""Elastic scheduling on a real local standalone cluster (2 workers x 4 cores):

1. scale: dynamic allocation (1-core executors, minExecutors 1, maxExecutors 8, Spark's
   default 1 s backlog timeouts) under a backlog of sleeping tasks: seconds from job
   submission to 8 registered executors, and from the job's end back to 1 executor
   (executorIdleTimeout, default here 2 s, is part of that time);
2. decommission: 4 one-core executors write a shuffle of --shuffle-mb MB; worker 1 is sent
   SIGPWR (spark.decommission.enabled + spark.storage.decommission.enabled): seconds until
   its executors have migrated their map output and exited, every output on a live
   executor.

    python -m benchmarks.elastic [--runs 3] [--shuffle-mb 500] [--idle-timeout 2]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import threading
import time

EXECUTOR_CONF = {"spark.executor.cores": "1", "spark.executor.memory": "512m"}


def _wait(predicate, timeout: float, what: str) -> float:
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(what)
        time.sleep(0.01)
    return time.perf_counter()


def _sleep_task(it):
    time.sleep(0.5)
    return it


def measure_scaling(url: str, idle_timeout: float) -> tuple[float, float]:
    from ember import SparkConf, SparkContext
    conf = SparkConf().setAll(list(EXECUTOR_CONF.items()) + [
        ("spark.dynamicAllocation.enabled", "true"),
        ("spark.dynamicAllocation.minExecutors", "1"),
        ("spark.dynamicAllocation.maxExecutors", "8"),
        ("spark.dynamicAllocation.executorIdleTimeout", f"{idle_timeout}s"),
        ("spark.shuffle.service.enabled", "true")])
    sc = SparkContext(url, "elastic-bench-scale", conf=conf)
    try:
        execs = sc.runtime.scheduler_backend.executors
        _wait(lambda: len(execs) == 1, 60, "first executor")
        done = threading.Event()
        t0 = time.perf_counter()
        job = threading.Thread(target=lambda: (sc.parallelize(range(160), 160)
                                               .mapPartitions(_sleep_task).count(), done.set()))
        job.start()
        up = _wait(lambda: len(execs) >= 8, 120, "8 executors") - t0
        job.join()
        t1 = time.perf_counter()
        down = _wait(lambda: len(execs) == 1, 120, "back to 1 executor") - t1
        return up, down
    finally:
        sc.stop()


def _payload(i, per_task):
    import random
    rnd = random.Random(i)
    return ((rnd.randrange(1 << 30), rnd.randbytes(1024)) for _ in range(per_task))


def measure_decommission(cluster, shuffle_mb: int) -> dict:
    from ember import SparkConf, SparkContext
    conf = SparkConf().setAll(list(EXECUTOR_CONF.items()) + [
        ("spark.cores.max", "4"), ("spark.decommission.enabled", "true"),
        ("spark.storage.decommission.enabled", "true")])
    sc = SparkContext(cluster.url, "elastic-bench-decommission", conf=conf)
    try:
        backend = sc.runtime.scheduler_backend
        _wait(lambda: len(backend.executors) == 4, 60, "4 executors")
        maps = 16
        per_task = max(1, shuffle_mb * 1024 // maps)    # ~1 KiB records
        pairs = sc.parallelize(range(maps), maps).flatMap(lambda i: _payload(i, per_task))
        shuffled = pairs.partitionBy(8)
        shuffled.foreachPartition(lambda it: None)        # the shuffle is written
        tracker = sc.runtime.map_output_tracker
        sid = max(tracker.shuffle_ids())
        victim_ui = f":{cluster.worker_ui[1]}"
        app = next(a for a in cluster.json("/json")["activeapps"])
        on_victim = {str(e["id"]) for w in _worker_json(cluster, victim_ui)
                     for e in w.get("executors", []) if e.get("appid") == app["id"]}
        statuses = tracker.statuses(sid)
        moved_bytes = sum(st.bytes_written for st in statuses if st.executor_id in on_victim)
        t0 = time.perf_counter()
        os.kill(cluster.workers[1].pid, signal.SIGPWR)
        _wait(lambda: not (set(backend.executors) & on_victim), 600, "drained executors")
        elapsed = time.perf_counter() - t0
        live = set(backend.executors)
        assert all(st is not None and st.executor_id in live for st in tracker.statuses(sid))
        total = sum(st.bytes_written for st in tracker.statuses(sid))
        return {"decommission_s": elapsed, "migrated_mb": moved_bytes / 2 ** 20,
                "shuffle_mb": total / 2 ** 20, "drained_executors": sorted(on_victim)}
    finally:
        sc.stop()


def _worker_json(cluster, ui_suffix: str) -> list[dict]:
    import urllib.request
    for w in cluster.json("/json")["workers"]:
        if w["webuiaddress"].endswith(ui_suffix):
            with urllib.request.urlopen(w["webuiaddress"] + "/json", timeout=10) as r:
                return [json.loads(r.read().decode())]
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.elastic")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--shuffle-mb", type=int, default=500)
    p.add_argument("--idle-timeout", type=float, default=2.0)
    p.add_argument("--only", default="scale,decommission")
    args = p.parse_args(argv)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    from ember.deploy.local_cluster import LocalCluster
    result: dict = {"benchmark": "elastic", "runs": args.runs}
    only = set(args.only.split(","))
    if "scale" in only:
        with LocalCluster(tempfile.mkdtemp(prefix="ember-elastic-"), workers=2, cores=4,
                          memory="6g", conf={"spark.shuffle.service.enabled": "true",
                                             "spark.shuffle.service.port": "0"}) as cluster:
            ups, downs = [], []
            for _ in range(args.runs):
                up, down = measure_scaling(cluster.url, args.idle_timeout)
                ups.append(up)
                downs.append(down)
                time.sleep(0.5)
        result.update({"scale_up_1_to_8_median_s": statistics.median(ups),
                       "scale_down_8_to_1_median_s": statistics.median(downs),
                       "idle_timeout_s": args.idle_timeout, "up_runs": ups,
                       "down_runs": downs})
    if "decommission" in only:
        with LocalCluster(tempfile.mkdtemp(prefix="ember-decom-"), workers=2, cores=2,
                          memory="4g", conf={"spark.decommission.enabled": "true"}) as cluster:
            result["decommission"] = measure_decommission(cluster, args.shuffle_mb)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
