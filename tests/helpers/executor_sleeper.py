"""A stand-in executor for the worker's tests: starts, writes what it was given, sleeps.

Why it exists: the real executor (`ember.executor.backend`) needs a driver to talk to; the
worker's tests only need a process launched the way an executor is, so they can check the
substituted arguments, the environment, the stdout/stderr files, the state reports and that
killing takes down the whole process tree. Behaviour is chosen by environment variables,
which the test puts in `Command.environment`:

- EMBER_SLEEPER_INFO=<path>: write a JSON file with pid, argv, cwd, child pids and the
  executor environment variables the worker sets (atomically, once children are up);
- EMBER_SLEEPER_CHILDREN=<n>: start n grandchild processes (each with its own child);
- EMBER_SLEEPER_IGNORE_TERM=1: ignore SIGTERM (the worker must escalate to SIGKILL);
- EMBER_SLEEPER_EXIT_AFTER=<seconds> and EMBER_SLEEPER_EXIT_CODE=<n>: exit on its own.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

_GRANDCHILD = ("import subprocess, sys, time\n"
               "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
               "time.sleep(600)\n")


def main(argv: list[str]) -> int:
    if os.environ.get("EMBER_SLEEPER_IGNORE_TERM") == "1":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("sleeper started", " ".join(argv), flush=True)
    print("sleeper stderr line", file=sys.stderr, flush=True)
    children = [subprocess.Popen([sys.executable, "-c", _GRANDCHILD])
                for _ in range(int(os.environ.get("EMBER_SLEEPER_CHILDREN", "0") or 0))]
    info_path = os.environ.get("EMBER_SLEEPER_INFO")
    if info_path:
        time.sleep(0.3 if children else 0)   # let the grandchildren start theirs
        info = {"pid": os.getpid(), "argv": argv, "cwd": os.getcwd(),
                "children": [c.pid for c in children],
                "env": {k: os.environ.get(k) for k in (
                    "SPARK_EXECUTOR_DIRS", "SPARK_LOG_URL_STDOUT", "SPARK_LOG_URL_STDERR",
                    "_SPARK_AUTH_SECRET", "EMBER_SLEEPER_MARK")}}
        tmp = f"{info_path}.tmp"
        with open(tmp, "w") as f:
            json.dump(info, f)
        os.replace(tmp, info_path)
    exit_after = os.environ.get("EMBER_SLEEPER_EXIT_AFTER")
    deadline = time.monotonic() + (float(exit_after) if exit_after else 600.0)
    while time.monotonic() < deadline:
        time.sleep(0.05)
    return int(os.environ.get("EMBER_SLEEPER_EXIT_CODE", "0"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
