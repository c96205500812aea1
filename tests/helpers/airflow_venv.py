"""Airflow in venvs of its own, built once and kept between test runs.

Why separate venvs: Airflow pins hundreds of packages that must not leak into Ember's
environment, and the checks need two provider lines (the newest and a 4.x one, which poll
and kill differently). The venvs live under `.venv-airflow/` (ignored by git; override with
EMBER_AIRFLOW_VENVS) and are rebuilt only when the pinned versions change. uv builds them:
from a warm uv cache a venv takes 5-30 s, from an empty one (downloads) about 2 minutes.
"""
from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time

from ember.deploy.local_cluster import ROOT

AIRFLOW = "apache-airflow==3.3.2"
PROVIDERS = {"newest": "6.3.4", "4.x": "4.11.3"}


def venvs_root() -> str:
    return os.environ.get("EMBER_AIRFLOW_VENVS", os.path.join(ROOT, ".venv-airflow"))


def airflow_python(provider: str) -> tuple[str, float]:
    """The python of a venv with Airflow and apache-spark provider `provider`, and how many
    seconds building it took now (0.0 when it was cached)."""
    root = venvs_root()
    os.makedirs(root, exist_ok=True)
    venv = os.path.join(root, f"provider-{provider}")
    python = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, "ember-built.json")
    spec = [AIRFLOW, f"apache-airflow-providers-apache-spark=={provider}"]
    with open(os.path.join(root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)    # one builder at a time, others wait and reuse
        try:
            with open(stamp) as f:
                if json.load(f)["spec"] == spec and os.path.exists(python):
                    return python, 0.0
        except (OSError, ValueError, KeyError):
            pass
        shutil.rmtree(venv, ignore_errors=True)
        started = time.monotonic()
        uv = [sys.executable, "-m", "uv"]
        subprocess.run(uv + ["venv", "-q", "--python", sys.executable, venv], check=True,
                       timeout=300)
        subprocess.run(uv + ["pip", "install", "-q", "--python", python, *spec], check=True,
                       timeout=1200)
        seconds = time.monotonic() - started
        with open(stamp, "w") as f:
            json.dump({"spec": spec, "seconds": round(seconds, 1)}, f)
        return python, seconds
