"""Link cut of a worker host mid-job: how long until the master declares the worker DEAD,
and until the job finishes, for Spark's default timeout and for shorter ones.

A multi-host lab (ember.testing.netns: master, 3 worker hosts, a client host, needs root)
runs a client-mode shuffle job of 24 slow map tasks; 1.5 s after it started, the link of
one worker host goes down. Measured from the cut: `detect` = the master's /json shows that
worker DEAD; `job` = the job's result is written (the tasks of the lost executor ran again
elsewhere). spark.worker.timeout is varied; the master checks every `timeout`, so
detection lies between 1x and 2x the timeout.

    python -m benchmarks.link_cut [--timeouts 60,15,4]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

from ember.testing.lab_apps import SLOW_SHUFFLE
from ember.testing.lab_cluster import LabCluster, write_app
from ember.testing.netns import Lab, unavailable_reason

HOSTS = ["master", "worker1", "worker2", "worker3", "client1"]


def measure(timeout: int, workdir: str) -> dict[str, float]:
    with Lab(workdir, len(HOSTS), names=HOSTS) as lab:
        m, w1, w2, w3, client = lab.hosts
        cluster = LabCluster(lab, m, [w1, w2, w3],
                             conf={"spark.worker.timeout": str(timeout)}).start()
        app = write_app(lab.workdir, "slow.py", SLOW_SHUFFLE)
        out = os.path.join(lab.workdir, "slow.json")
        lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           app, out], "submit.log")
        lab.wait_until(lambda: os.path.exists(out + ".started"), 120, "job started")
        time.sleep(1.5)
        cut = time.monotonic()
        lab.link_down(w3)
        detect = job = None
        deadline = cut + 3 * timeout + 120
        while time.monotonic() < deadline and (detect is None or job is None):
            if job is None and os.path.exists(out):
                job = time.monotonic() - cut
            if detect is None:
                try:
                    if cluster.worker_state(w3) == ["DEAD"]:
                        detect = time.monotonic() - cut
                except OSError:
                    pass
            time.sleep(0.2)
        return {"timeout": timeout, "detect": detect or float("nan"),
                "job": job or float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--timeouts", default="60,15,4",
                   help="spark.worker.timeout values to measure (seconds, comma-separated)")
    args = p.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"link_cut: {reason}")
    print(f"{'worker.timeout':>15} {'detect DEAD (s)':>16} {'job done (s)':>13}")
    for t in [int(x) for x in args.timeouts.split(",") if x.strip()]:
        with tempfile.TemporaryDirectory(prefix="ember-linkcut-") as d:
            r = measure(t, d)
        print(f"{r['timeout']:>15} {r['detect']:>16.1f} {r['job']:>13.1f}", flush=True)


if __name__ == "__main__":
    main()
