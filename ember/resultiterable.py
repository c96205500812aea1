"""The value container handed to users by ``groupByKey``, ``cogroup`` and friends.

PySpark wraps each group in a ``ResultIterable`` rather than exposing a bare
list or iterator: it is re-iterable, has a length, and (unlike an iterator)
can be pickled, e.g. when a grouped RDD is cached or shuffled again.  Code that
checks ``isinstance(v, ResultIterable)`` or reads ``.data`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Generic, Iterator, Sized, TypeVar

__all__ = ["ResultIterable"]

T = TypeVar("T")


class ResultIterable(Iterable, Generic[T]):
    """A picklable, re-iterable, sized wrapper around ``data`` (usually a list).

    Attributes, as in PySpark: ``data`` (the wrapped collection), ``index`` (0)
    and ``maxindex`` (``len(data)`` at construction time).
    """

    def __init__(self, data: "Sized") -> None:
        self.data = data
        self.index = 0
        self.maxindex = len(data)

    def __iter__(self) -> Iterator[T]:
        return iter(self.data)  # type: ignore[call-overload]

    def __len__(self) -> int:
        return len(self.data)
