"""Accumulators: add-only variables that tasks update and only the driver reads.

A task process gets a zero-valued copy when the stage's closure is unpickled; its value
after each task travels back with the task result, and the driver merges it only when that
task attempt succeeded, so retried or killed attempts never count twice.
"""
from __future__ import annotations

import logging
import threading
from typing import Any, Generic, TypeVar

from ember.errors import PySparkRuntimeError

T = TypeVar("T")
log = logging.getLogger(__name__)

# aid -> Accumulator; on the driver: every accumulator created; in a task process: the
# deserialized copies.
_accumulator_registry: dict[int, "Accumulator"] = {}
_lock = threading.Lock()
_next_id = [0]


def _deserialize_accumulator(aid: int, zero_value: Any, accum_param: "AccumulatorParam") -> "Accumulator":
    acc = Accumulator(aid, zero_value, accum_param)
    acc._deserialized = True
    _accumulator_registry[aid] = acc
    return acc


class AccumulatorParam(Generic[T]):
    """How to build a zero and add two values of an accumulator's type."""

    def zero(self, value: T) -> T:
        raise NotImplementedError

    def addInPlace(self, value1: T, value2: T) -> T:  # noqa: N802
        raise NotImplementedError


class AddingAccumulatorParam(AccumulatorParam[T]):
    def __init__(self, zero_value: T) -> None:
        self.zero_value = zero_value

    def zero(self, value: T) -> T:
        return self.zero_value

    def addInPlace(self, value1: T, value2: T) -> T:  # noqa: N802
        value1 += value2  # type: ignore[operator]
        return value1


INT_ACCUMULATOR_PARAM = AddingAccumulatorParam(0)
FLOAT_ACCUMULATOR_PARAM = AddingAccumulatorParam(0.0)
COMPLEX_ACCUMULATOR_PARAM = AddingAccumulatorParam(0.0j)


class Accumulator(Generic[T]):
    def __init__(self, aid: int, value: T, accum_param: AccumulatorParam[T]) -> None:
        self.aid = aid
        self.accum_param = accum_param
        self._value = value
        self._deserialized = False
        _accumulator_registry[aid] = self

    def __reduce__(self):
        param = self.accum_param
        return (_deserialize_accumulator, (self.aid, param.zero(self._value), param))

    @property
    def value(self) -> T:
        if self._deserialized:
            raise PySparkRuntimeError(errorClass="VALUE_NOT_ACCESSIBLE",
                                      messageParameters={"value": "Accumulator.value"})
        return self._value

    @value.setter
    def value(self, value: T) -> None:
        if self._deserialized:
            raise PySparkRuntimeError(errorClass="VALUE_NOT_ACCESSIBLE",
                                      messageParameters={"value": "Accumulator.value"})
        self._value = value

    def add(self, term: T) -> None:
        self._value = self.accum_param.addInPlace(self._value, term)

    def __iadd__(self, term: T) -> "Accumulator[T]":
        self.add(term)
        return self

    def __str__(self) -> str:
        return str(self._value)

    def __repr__(self) -> str:
        return f"Accumulator<id={self.aid}, value={self._value}>"

    # driver side -------------------------------------------------------------------------
    def _merge(self, update: T) -> None:
        self._value = self.accum_param.addInPlace(self._value, update)


def new_accumulator_id() -> int:
    with _lock:
        _next_id[0] += 1
        return _next_id[0]


def merge_updates(updates: dict[int, Any], partition: int) -> None:
    """Driver: fold one successful task's accumulator values into the driver copies. As
    Spark's DAGScheduler.updateAccumulators, an accumulator whose merge fails (the user's
    addInPlace) is logged and skipped: the task and its job go on."""
    for aid, value in updates.items():
        acc = _accumulator_registry.get(aid)
        if acc is not None and not acc._deserialized:
            try:
                acc._merge(value)
            except Exception:
                log.exception("Failed to update accumulator %d (%s) for task %d", aid,
                              type(acc.accum_param).__qualname__, partition)
