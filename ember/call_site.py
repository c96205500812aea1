"""Spark's short call site ("method at file:line") of the user code that made an RDD or ran
an action.

A module of its own that imports nothing of ours: every RDD and every job takes one, and the
driver's runtime and context read it on each job without a function-level import.
"""
from __future__ import annotations

import os
import sys

_EMBER_DIR = os.path.dirname(os.path.abspath(__file__))

_in_ember: dict[str, bool] = {}      # code file name -> whether it is Ember's own


def call_site() -> str:
    """'method at file:line' for the innermost user frame. Each file's verdict is
    remembered (an iterative job makes RDDs in a loop, and abspath per frame was most of
    their cost)."""
    f = sys._getframe(1)
    name = "<unknown>"
    while f is not None:
        fname = f.f_code.co_filename
        ours = _in_ember.get(fname)
        if ours is None:
            ours = _in_ember[fname] = \
                os.path.dirname(os.path.abspath(fname)).startswith(_EMBER_DIR)
        if ours:
            if not f.f_code.co_name.startswith("_"):
                name = f.f_code.co_name
            f = f.f_back
            continue
        return f"{name} at {fname}:{f.f_lineno}"
    return name
