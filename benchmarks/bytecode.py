"""Bytecode caches for the benchmarks' processes, the way an installed package has them.

Why: pip compiles a package's .pyc files when it installs it, so an installed Ember starts
from them. An environment with PYTHONDONTWRITEBYTECODE=1 (this project's development
machines set it) makes every new process compile Ember's modules again: ~0.7 s added to a
~0.25 s cold start, and to every executor's start. Timing that would measure the compiler,
not the product. So when writing bytecode is switched off, the benchmark compiles Ember
once into a cache prefix under its data directory and runs itself and its children with
that prefix and without PYTHONDONTWRITEBYTECODE (Python writes the standard library's and
the dependencies' caches there on the untimed warm-up runs). Where writing bytecode is
allowed, the interpreter's own caches are used as they are. Either way the benchmark
prints which it used.
"""
from __future__ import annotations

import compileall
import os
import sys
from pathlib import Path

from benchmarks.datagen import DATA_DIR

PYCACHE_DIR = DATA_DIR / "pycache"
_EMBER = Path(__file__).resolve().parent.parent / "ember"


def use_installed_bytecode() -> str:
    """Set this process and the children it starts from now on up to run from bytecode
    caches; returns one line saying which caches they use."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX") or sys.pycache_prefix
    if not os.environ.get("PYTHONDONTWRITEBYTECODE") and not sys.dont_write_bytecode:
        return ("bytecode caches: the interpreter's own "
                f"({prefix or '__pycache__ directories beside the sources'})")
    prefix = prefix or str(PYCACHE_DIR)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = prefix
    compileall.compile_dir(str(_EMBER), quiet=1)
    return (f"bytecode caches: Ember compiled into {prefix} (PYTHONDONTWRITEBYTECODE was "
            "set; the timed processes run without it, as an installed package does)")
