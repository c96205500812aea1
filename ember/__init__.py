"""Ember: Apache Spark's Standalone cluster and PySpark's RDD engine, rebuilt in Python.

`import ember as pyspark` gives a PySpark RDD program the names it expects. Names are
resolved lazily so that task processes and CLI commands import only what they use.
"""
from __future__ import annotations

import importlib
from typing import Any

from ember.version import __version__  # noqa: F401  (PySpark's pyspark.__version__)

_EXPORTS = {
    "SparkConf": "ember.conf", "SparkContext": "ember.context",
    "InheritableThread": "ember.context", "inheritable_thread_target": "ember.context",
    "SparkFiles": "ember.files", "RDD": "ember.rdd", "StorageLevel": "ember.storagelevel",
    "Broadcast": "ember.broadcast", "Accumulator": "ember.accumulators",
    "AccumulatorParam": "ember.accumulators", "MarshalSerializer": "ember.serializers",
    "CPickleSerializer": "ember.serializers", "PickleSerializer": "ember.serializers",
    "StatusTracker": "ember.status", "SparkJobInfo": "ember.status",
    "SparkStageInfo": "ember.status", "TaskContext": "ember.taskcontext",
    "BarrierTaskContext": "ember.taskcontext", "BarrierTaskInfo": "ember.taskcontext",
    "RDDBarrier": "ember.rdd", "Row": "ember.sql",
    "SparkSession": "ember.sql", "StatCounter": "ember.statcounter",
    "Profiler": "ember.profiler", "BasicProfiler": "ember.profiler",
    "keyword_only": "ember.util.pyspark_util", "since": "ember.util.pyspark_util",
}

__all__ = list(_EXPORTS)


# subpackages PySpark programs reach as attributes (`pyspark.resource.ResourceProfileBuilder`)
_SUBMODULES = frozenset({"core", "resource", "shuffle"})


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ember.{name}")
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ember' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(list(globals()) + __all__)
