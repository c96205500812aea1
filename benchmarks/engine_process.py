"""The far side of engines.ProcessEngine: one engine in a process of its own.

    python -m benchmarks.engine_process ember spark://host:port
    python -m benchmarks.engine_process dask 2 [SCHEDULER]

Reads pickled prepared workloads from stdin, runs each on the engine (started once, warm)
and writes back `(True, Measurement)` or `(False, exception)`; a None request answers the
engine's version. A cold start runs while the engine's own context is stopped: on a
cluster, its warm context holds every core the new application would need. Ends when stdin
closes.
"""
from __future__ import annotations

import os
import pickle
import sys
from typing import Any


def _run(engine: Any, workload: Any) -> Any:
    if workload is None:
        return engine.version()
    if workload.name != "cold_start":
        return workload.run(engine)
    # a new application on the cluster needs the cores this engine's warm context holds
    engine.stop()
    try:
        return workload.run(engine)
    finally:
        engine.start()


def main(argv: list[str]) -> int:
    from benchmarks.engines import engine_from_args
    engine = engine_from_args(argv)
    inp = sys.stdin.buffer
    # the pipe to the runner is a descriptor of its own: what the engine, its JVM or its
    # worker processes print to descriptor 1 goes to stderr instead of into the replies
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    engine.start()
    try:
        while True:
            try:
                workload = pickle.load(inp)
            except EOFError:
                return 0
            try:
                reply = (True, _run(engine, workload))
            except Exception as exc:     # the runner records it as that run's error
                reply = (False, exc)
            pickle.dump(reply, out)
            out.flush()
    finally:
        engine.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
