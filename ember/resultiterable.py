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

    def __reduce_ex__(self, protocol: int) -> tuple:
        # a grouped RDD shuffled again (a join's cached side) pickles one a key: the
        # default path copies __dict__ and calls copyreg (~20 % more time either way)
        if self.__class__ is ResultIterable and len(self.__dict__) == 3:
            return _restore, (self.data, self.index, self.maxindex)
        return super().__reduce_ex__(protocol)


def _restore(data: "Sized", index: int, maxindex: int) -> ResultIterable:
    r = ResultIterable.__new__(ResultIterable)
    r.data, r.index, r.maxindex = data, index, maxindex
    return r
