"""Pickle, else cloudpickle: the one fallback for values that may hold user code.

Why: task results, shuffle batches and stage closures are mostly plain data, which the C
pickler writes several times faster than cloudpickle; only lambdas, local classes and
interactively defined objects need cloudpickle. Trying pickle first and falling back on any
failure keeps the fast path fast and every value serializable, and one helper means the
rule (and the protocol) cannot drift between the places that serialize.
"""
from __future__ import annotations

import pickle
from typing import Any

PROTOCOL = pickle.HIGHEST_PROTOCOL


def dumps(obj: Any, protocol: int = PROTOCOL) -> bytes:
    """`pickle.dumps(obj)`, or `cloudpickle.dumps(obj)` when pickle cannot (a lambda, a
    local class); cloudpickle's error propagates when neither can."""
    try:
        return pickle.dumps(obj, protocol)
    except Exception:
        import cloudpickle
        return cloudpickle.dumps(obj, protocol)


__all__ = ["PROTOCOL", "dumps"]
