"""The linter as part of the suite: ruff's naming and pyflakes rules over `ember/` and `tests/`.

Why a test: snake_case inside and camelCase only on the wire and in PySpark's API is a rule the
code review cannot keep by eye across ~50k lines; pyflakes finds dead imports and variables.
The rules and the per-file exceptions (wire messages, Spark's JSON, PySpark's API) live in
pyproject.toml's `[tool.ruff]`, so an editor's ruff and this test agree.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> str:
    """The venv's ruff (the `test` extra installs it), else one on PATH."""
    beside = Path(sys.executable).with_name("ruff")
    if beside.exists():
        return str(beside)
    found = shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: `pip install -e '.[test]'`")
    return found


def test_ruff_finds_nothing() -> None:
    proc = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", "ember", "tests"],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"ruff findings:\n{proc.stdout}{proc.stderr}"
