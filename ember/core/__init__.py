"""PySpark 4's `pyspark.core` package: where PySpark now keeps the RDD API's modules.

Programs written for PySpark 4 import `pyspark.core.rdd`, `pyspark.core.context`, ...; each
module here is the Ember module of the same role under that name (the same module object,
so `ember.core.rdd.RDD is ember.rdd.RDD`), as PySpark keeps its old names as aliases the
other way round.
"""
from __future__ import annotations

import importlib
from types import ModuleType

_MODULES = frozenset({"rdd", "context", "broadcast", "files", "status"})


def __getattr__(name: str) -> ModuleType:
    """`pyspark.core.rdd` works after a bare `import pyspark`, as in PySpark."""
    if name in _MODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
