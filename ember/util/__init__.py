"""Ember's bottom layer: helpers every other package may import.

Nothing here imports from Ember's higher layers (deploy, scheduler, executor, rpc, ui),
so that any module can use one size parser, one logging setup or one guard around user
functions without creating an import cycle.
"""
from __future__ import annotations

import importlib
from typing import Any

# `import ember as pyspark` makes this package pyspark.util too: PySpark's names, loaded on
# first use from where Ember keeps them (the threads that inherit local properties live with
# the SparkContext, a layer above, and are looked up by name, never imported here)
_PYSPARK_NAMES = {
    "print_exec": "ember.util.pyspark_util", "VersionUtils": "ember.util.pyspark_util",
    "walk_tb": "ember.util.pyspark_util", "try_simplify_traceback": "ember.util.pyspark_util",
    "_parse_memory": "ember.util.pyspark_util", "is_remote_only": "ember.util.pyspark_util",
    "handle_worker_exception": "ember.util.pyspark_util",
    "fail_on_stopiteration": "ember.util.user_code",
    "InheritableThread": "ember.context", "inheritable_thread_target": "ember.context",
}


def __getattr__(name: str) -> Any:
    module = _PYSPARK_NAMES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
