"""How close a pass over a cached RDD comes to what this machine can do in parallel at all:
the iterative workload's later pass (map + sum over cached floats) in one plain process,
in two plain processes over half the records each, and on Ember, interleaved pass by pass.

    python -m benchmarks.iterative_parallel [--records 2000000] [--rounds 5] [--master local[2]]

Why: the iterative target compares Ember's pass with (serial pass / 2), which assumes the
two cores double plain Python's speed. For this kernel (a pointer walk over 2 M float
objects) the VM's speed is not steady: the same pass in one pinned process takes 19 ms per
250,000 floats in one second and 36 ms a few seconds later, with nothing else running, so
a serial or two-process figure taken a few seconds before Ember's says little about it.
The plain processes therefore stay up for the whole run, holding their data as the cache
does, and each round runs serial, two plain processes and Ember one pass each, back to
back, PASSES times; a round's ratios are the medians of those neighbouring passes. Prints
a line per round and one JSON line (medians of the rounds' ratios).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time
from typing import Any

from benchmarks.kernels import half, step

PASSES = 5      # passes of each kind per round, interleaved


def _plain_worker(records: int, conn: Any) -> None:
    """Hold `records` floats (built once, as the cache is) and time one pass per request."""
    data = [half(i) for i in range(records)]
    conn.send("ready")
    while conn.recv() == "pass":
        t0 = time.perf_counter()
        sum(map(step, data))
        conn.send(time.perf_counter() - t0)


class PlainProcesses:
    """`processes` plain processes over `records // processes` records each; pass() starts
    one pass in all at once and returns when the slowest ends."""

    def __init__(self, records: int, processes: int) -> None:
        ctx = mp.get_context("spawn")      # not fork: this process runs Ember's threads
        self.conns, self.procs = [], []
        for _ in range(processes):
            ours, theirs = ctx.Pipe()
            proc = ctx.Process(target=_plain_worker, args=(records // processes, theirs))
            proc.start()
            self.conns.append(ours)
            self.procs.append(proc)
        for conn in self.conns:
            if not conn.poll(300) or conn.recv() != "ready":
                raise RuntimeError("a plain worker did not start")

    def pass_s(self) -> float:
        t0 = time.perf_counter()
        for conn in self.conns:
            conn.send("pass")
        for conn in self.conns:
            if not conn.poll(300):
                raise RuntimeError("a plain worker did not answer")
            conn.recv()
        return time.perf_counter() - t0

    def close(self) -> None:
        for conn in self.conns:
            conn.send("stop")
        for proc in self.procs:
            proc.join(30)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.iterative_parallel",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--records", type=int, default=2_000_000)
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--master", default="local[2]")
    args = p.parse_args(argv)

    import ember
    serial_proc = PlainProcesses(args.records, 1)
    two_procs = PlainProcesses(args.records, 2)
    sc = ember.SparkContext(args.master, "iterative-parallel",
                            conf=ember.SparkConf().set("spark.ui.enabled", "false"))
    rows = []
    try:
        data = sc.parallelize(range(args.records), args.partitions).map(half).cache()
        data.count()

        def ember_pass() -> float:
            t0 = time.perf_counter()
            data.map(step).sum()
            return time.perf_counter() - t0
        for r in range(args.rounds):
            passes = [(serial_proc.pass_s(), two_procs.pass_s(), ember_pass())
                      for _ in range(PASSES)]
            serial, plain2, engine = (statistics.median(col) for col in zip(*passes))
            rows.append({"serial_s": serial, "plain_2proc_s": plain2, "ember_s": engine,
                         "plain_vs_half_serial": statistics.median(
                             b / (a / 2) for a, b, _ in passes),
                         "ember_vs_half_serial": statistics.median(
                             c / (a / 2) for a, _, c in passes),
                         "ember_vs_plain_2proc": statistics.median(
                             c / b for _, b, c in passes)})
            print(f"round {r + 1}: serial {serial * 1e3:.1f} ms, two plain processes "
                  f"{plain2 * 1e3:.1f} ms, ember {engine * 1e3:.1f} ms | ember / (serial/2) "
                  f"{rows[-1]['ember_vs_half_serial']:.2f}, two plain / (serial/2) "
                  f"{rows[-1]['plain_vs_half_serial']:.2f}, ember / two plain "
                  f"{rows[-1]['ember_vs_plain_2proc']:.2f}", flush=True)
    finally:
        sc.stop()
        serial_proc.close()
        two_procs.close()
    result = {"benchmark": "iterative_parallel", "master": args.master,
              "records": args.records, "partitions": args.partitions, "rounds": args.rounds,
              "loadavg": os.getloadavg()[0]}
    for key in rows[0]:
        result[f"{key}_median"] = round(statistics.median(r[key] for r in rows), 4)
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
