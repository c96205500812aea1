"""Chaos run (by hand, needs root): random faults against a steady stream of jobs on a
multi-host lab, then a tally that must show no wrong result, no driver run twice at once
and no leaked process.

Hosts (ember.testing.netns): master, worker1-3, client1-2. The master runs with FILESYSTEM
recovery and spark.worker.timeout=4 (the lease defaults to it). Two job streams run side by
side from the client hosts: client-mode wordcount/sortByKey jobs checked against local mode,
and supervised cluster-mode drivers that write start/beat/stop timestamps (two copies alive
at the same instant = a duplicated run). Every few seconds one fault from the list is
injected and later healed: link down of a worker host, a one-way cut (in or out), SIGSTOP
of a worker host, of one executor or of the master (SIGCONT later), kill -9 of an executor,
of a worker (restarted), of the master (restarted with recovery), and a worker disk that
fills up (freed later). Client jobs run with spark.network.timeout=8s, so a stopped
executor is replaced mid-job.

    python -m benchmarks.chaos [--minutes 10] [--seed N] [--keep DIR]

Tally: ok / failed with a clear error / wrong result (must be 0) / duplicated driver runs
(must be 0) / leaked processes (must be 0).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import os
import random
import signal
import tempfile
import threading
import time
from typing import Any, Callable

import psutil

from ember.testing.lab_apps import (TOKEN, WORDCOUNT, local_expected, overlap_seconds, runs,
                                    words_file)
from ember.testing.lab_cluster import FINAL_DRIVER_STATES, LabCluster, write_app
from ember.testing.netns import Lab, leftovers, unavailable_reason

HOSTS = ["master", "worker1", "worker2", "worker3", "client1", "client2"]
TIMEOUT = 4


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:     # killed meanwhile (a stopped executor the master replaced)
        pass


def say(text: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {text}", flush=True)


class Chaos:
    def __init__(self, workdir: str, minutes: float, seed: int,
                 keep_dir: str | None = None) -> None:
        self.lab = Lab(workdir, len(HOSTS), names=HOSTS)
        self.keep_dir = keep_dir
        self.minutes = minutes
        self.rng = random.Random(seed)
        self.tally = {"ok": 0, "failed": 0, "wrong": 0, "duplicated": 0, "leaked": 0}
        self.errors: dict[str, int] = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.drivers: list[tuple[str, str]] = []      # (driver id, token)

    def count(self, key: str, error: str = "") -> None:
        with self.lock:
            self.tally[key] += 1
            if error:
                self.errors[error] = self.errors.get(error, 0) + 1

    # ------------------------------------------------------------------ jobs
    def client_jobs(self, host: Any) -> None:
        lab, n = self.lab, 0
        while not self.stop.is_set():
            n += 1
            out = os.path.join(lab.workdir, f"wc-{host.name}-{n}.json")
            try:
                # two executors of one core each, so both streams and the drivers fit
                r = self.cluster.submit(host, self.wc_app, out, self.text, deploy_mode="client",
                                        conf={"spark.task.maxFailures": "8",
                                              "spark.cores.max": "2",
                                              "spark.executor.cores": "1",
                                              # a stopped executor is replaced mid-job
                                              "spark.network.timeout": "8s",
                                              "spark.network.timeoutInterval": "1s",
                                              "spark.executor.heartbeatInterval": "1s"},
                                        env={"LAB_EXECUTORS": "2"}, timeout=240)
            except TimeoutError:
                self.count("failed", "client job ran over 240 s (killed)")
                say(f"job {host.name}#{n}: FAILED (ran over 240 s)")
                continue
            if r.returncode != 0:
                reason = _first_cause(r.stderr or r.stdout) or f"exit {r.returncode}"
                self.count("failed", reason)
                if self.keep_dir:
                    with open(os.path.join(self.keep_dir, f"{host.name}-{n}.log"), "w") as f:
                        f.write(f"{r.stdout or ''}\n{r.stderr or ''}")
                say(f"job {host.name}#{n}: FAILED: {reason}")
                continue
            import json
            with open(out) as f:
                got = json.load(f)
            if got["counts"] == self.expected["counts"] and \
                    got["sorted"] == self.expected["sorted"]:
                self.count("ok")
                say(f"job {host.name}#{n}: ok")
            else:
                self.count("wrong")
                say(f"job {host.name}#{n}: WRONG RESULT")

    def cluster_drivers(self, host: Any) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            token = f"d{host.name}-{n}"
            try:
                driver_id = self.cluster.submit_cluster(
                    host, self.token_app, self.runs_dir, token, "6", extra=["--supervise"],
                    timeout=120)
            except (RuntimeError, TimeoutError) as e:
                reason = str(e).strip().splitlines()[-1][:160] if str(e).strip() else "?"
                self.count("failed", f"submit: {reason}")
                say(f"driver {token}: submit FAILED: {reason}")
                self.stop.wait(2)
                continue
            say(f"driver {token}: submitted as {driver_id}")
            with self.lock:
                self.drivers.append((driver_id, token))
            self.stop.wait(3)

    # ------------------------------------------------------------------ faults
    def worker_hosts(self) -> list[Any]:
        return [self.lab.host(f"worker{i}") for i in (1, 2, 3)]

    def faults(self) -> list[tuple[str, Callable[[], Callable[[], None]]]]:
        lab, c = self.lab, self.cluster

        def link_down() -> Callable[[], None]:
            h = self.rng.choice(self.worker_hosts())
            lab.link_down(h)
            say(f"FAULT link down {h.name}")
            return lambda: (lab.link_up(h), say(f"heal  link up {h.name}"))

        def one_way() -> Callable[[], None]:
            h = self.rng.choice(self.worker_hosts())
            if self.rng.random() < 0.5:
                lab.cut_outgoing(h)
                say(f"FAULT one-way cut: {h.name} cannot send")
            else:
                lab.cut_incoming(h)
                say(f"FAULT one-way cut: {h.name} cannot receive")
            return lambda: (lab.heal(h), say(f"heal  {h.name} link whole again"))

        def pause() -> Callable[[], None]:
            h = self.rng.choice(self.worker_hosts())
            lab.pause(h)
            say(f"FAULT SIGSTOP every process of {h.name}")
            return lambda: (lab.resume(h), say(f"heal  SIGCONT {h.name}"))

        def kill_executor() -> Callable[[], None]:
            procs = [p for h in self.worker_hosts() for p in lab.processes(h)
                     if "ember.executor.backend" in _cmd(p)]
            if procs:
                p = self.rng.choice(procs)
                lab.kill9(p.pid)
                say(f"FAULT kill -9 executor pid {p.pid}")
            else:
                say("FAULT kill -9 executor: none running")
            return lambda: None

        def stop_executor() -> Callable[[], None]:
            procs = [p for h in self.worker_hosts() for p in lab.processes(h)
                     if "ember.executor.backend" in _cmd(p)]
            if not procs:
                say("FAULT SIGSTOP executor: none running")
                return lambda: None
            p = self.rng.choice(procs)
            os.kill(p.pid, signal.SIGSTOP)
            say(f"FAULT SIGSTOP executor pid {p.pid}")
            return lambda: (_signal(p.pid, signal.SIGCONT),
                            say(f"heal  SIGCONT executor pid {p.pid}"))

        def stop_master() -> Callable[[], None]:
            pid = c.master.pid
            os.kill(pid, signal.SIGSTOP)
            say("FAULT SIGSTOP master")
            return lambda: (_signal(pid, signal.SIGCONT), say("heal  SIGCONT master"))

        def kill_worker() -> Callable[[], None]:
            h = self.rng.choice(self.worker_hosts())
            lab.kill9(c.workers[h.name].pid)
            say(f"FAULT kill -9 worker on {h.name}")

            def heal() -> None:
                c.start_worker(h)
                say(f"heal  worker restarted on {h.name}")
            return heal

        def kill_master() -> Callable[[], None]:
            lab.kill9(c.master.pid)
            say("FAULT kill -9 master")

            def heal() -> None:
                c.master.wait(10)
                c.start_master()
                say("heal  master restarted (FILESYSTEM recovery)")
            return heal

        def full_disk() -> Callable[[], None]:
            filler = lab.fill(self.disk)
            say("FAULT worker3's disk is full")
            return lambda: (os.remove(filler), say("heal  worker3's disk freed"))

        return [("link_down", link_down), ("one_way", one_way), ("pause", pause),
                ("kill_executor", kill_executor), ("stop_executor", stop_executor),
                ("kill_worker", kill_worker), ("kill_master", kill_master),
                ("stop_master", stop_master), ("full_disk", full_disk)]

    def inject(self, until: float) -> None:
        faults = self.faults()
        while time.monotonic() < until:
            self.stop.wait(self.rng.uniform(4, 8))
            if time.monotonic() >= until:
                break
            name, fault = self.rng.choice(faults)
            heal = fault()
            time.sleep(self.rng.uniform(3, 12))
            heal()

    # ------------------------------------------------------------------ run
    def run(self) -> dict[str, int]:
        lab = self.lab
        with lab:
            m, w1, w2, w3, c1, c2 = lab.hosts
            self.disk = lab.small_disk("w3disk", "16m")
            recovery = os.path.join(lab.workdir, "recovery")
            self.cluster = LabCluster(
                lab, m, [w1, w2, w3], cores=2, work_dirs={"worker3": self.disk},
                conf={"spark.worker.timeout": str(TIMEOUT),
                      "spark.deploy.recoveryMode": "FILESYSTEM",
                      "spark.deploy.recoveryDirectory": recovery}).start()
            self.wc_app = write_app(lab.workdir, "wc.py", WORDCOUNT)
            self.token_app = write_app(lab.workdir, "runs_app.py", TOKEN)
            self.runs_dir = os.path.join(lab.workdir, "runs")
            os.makedirs(self.runs_dir)
            self.text = words_file(os.path.join(lab.workdir, "words.txt"))
            self.expected = local_expected(self.text)
            say(f"lab {lab.prefix}: master, 3 workers, 2 clients; chaos for {self.minutes} min")
            pool = concurrent.futures.ThreadPoolExecutor(3)
            streams = [pool.submit(self.client_jobs, c1), pool.submit(self.client_jobs, c2),
                       pool.submit(self.cluster_drivers, c1)]
            try:
                self.inject(time.monotonic() + self.minutes * 60)
            finally:
                self.stop.set()
                for h in self.worker_hosts():
                    lab.heal(h)
                    lab.resume(h)
                for s in streams:
                    s.result()
            self.settle()
        left = leftovers(lab.prefix)
        self.tally["leaked"] += len(left)
        return self.tally

    def settle(self) -> None:
        """Let every submitted driver end, then judge them and look for leftovers."""
        c, lab = self.cluster, self.lab
        if c.master.poll() is not None:
            c.start_master()
        for h in self.worker_hosts():
            if c.workers[h.name].poll() is not None:
                c.start_worker(h)
        ids = {d for d, _ in self.drivers}
        try:
            c.wait_for(lambda j: all((c.driver(d, j) or {}).get("state") in FINAL_DRIVER_STATES
                                     for d in ids), 180, "every driver final")
        except TimeoutError as e:
            say(f"drivers still not final: {str(e).splitlines()[0]}")
        j = c.json()
        for driver_id, token in self.drivers:
            state = (c.driver(driver_id, j) or {}).get("state", "LOST")
            copies = runs(self.runs_dir, token)
            dup = any(overlap_seconds(a, b) > 0 for i, a in enumerate(copies)
                      for b in copies[i + 1:])
            if dup:
                self.count("duplicated")
                say(f"driver {token}: TWO COPIES AT ONCE {copies}")
            if state == "FINISHED" and copies:
                self.count("ok")
            else:
                self.count("failed", f"driver {state}")
                say(f"driver {token} ({driver_id}): {state}, {len(copies)} run(s)")
        # no app is running now: anything but the daemons on a worker host is leaked (a
        # worker's executor zygote is the worker's; its forked executors are not)
        time.sleep(TIMEOUT)
        for h in self.worker_hosts():
            procs = lab.processes(h)
            workers = {p.pid for p in procs if "ember.cli worker" in _cmd(p)}
            for p in procs:
                if p.pid not in workers and not (
                        "executor_zygote" in _cmd(p) and _ppid(p) in workers):
                    self.count("leaked")
                    say(f"LEAKED on {h.name}: pid {p.pid} {_cmd(p)[:120]}")


def _first_cause(output: str) -> str:
    """Why a job failed: the first ERROR log line (the cause, e.g. "Master removed our
    application") and the last line (the exception), or whichever there is."""
    lines = [x.strip() for x in output.splitlines() if x.strip()]
    errors = [x for x in lines if " ERROR " in x]
    last = lines[-1][:200] if lines else ""
    if errors and errors[0] != lines[-1]:
        return f"{errors[0][:200]} ... {last}"
    return last


def _ppid(p: psutil.Process) -> int | None:
    try:
        return p.ppid()
    except psutil.Error:
        return None


def _cmd(p: psutil.Process) -> str:
    try:
        return " ".join(p.cmdline())
    except psutil.Error:
        return ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--keep", metavar="DIR",
                    help="write each failed client job's output to DIR/<host>-<n>.log")
    args = ap.parse_args()
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"chaos: {reason}")
    say(f"seed {args.seed}")
    with tempfile.TemporaryDirectory(prefix="ember-chaos-") as d:
        if args.keep:
            os.makedirs(args.keep, exist_ok=True)
        chaos = Chaos(d, args.minutes, args.seed, args.keep)
        t = chaos.run()
    print(f"\nTALLY ok={t['ok']} failed-with-clear-error={t['failed']} "
          f"wrong-result={t['wrong']} duplicated-driver-runs={t['duplicated']} "
          f"leaked-processes={t['leaked']}")
    for reason, n in sorted(chaos.errors.items(), key=lambda kv: -kv[1]):
        print(f"  {n:4d} x {reason}")
    if t["wrong"] or t["duplicated"] or t["leaked"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
