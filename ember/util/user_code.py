"""Guards around user functions (PySpark's pyspark.util counterparts).

A StopIteration raised by a user function inside `map(f, it)`, `filter(f, it)` or any loop
that consumes an iterator looks exactly like the end of the input: the partition would be cut
short and the job would "succeed" with lost records. PySpark turns it into a task failure
(STOP_ITERATION_OCCURRED); so does Ember, checking on the hot paths (map, filter,
flatMap) that a stopped map had run out of input instead of wrapping every call.
"""
from __future__ import annotations

import os
import sysconfig
import types
from functools import reduce as _reduce
from itertools import chain
from typing import Any, Callable, Iterable, Iterator

from ember.errors import PySparkRuntimeError

_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_STDLIB_DIR = os.path.abspath(sysconfig.get_paths()["stdlib"]) + os.sep
_SITE_DIRS = tuple({os.path.abspath(sysconfig.get_paths()[k]) + os.sep
                    for k in ("purelib", "platlib")})


def stop_iteration_error(exc: StopIteration) -> PySparkRuntimeError:
    """PySpark's error for a StopIteration that escaped user code."""
    return PySparkRuntimeError(errorClass="STOP_ITERATION_OCCURRED",
                               messageParameters={"exc": str(exc)})


def fail_on_stopiteration(f: Callable) -> Callable:
    """`f`, raising PySpark's RuntimeError instead of letting a StopIteration escape.
    Builtins (max, operator.add, ...) are user code's arguments, not user code: they stay
    unwrapped, and C-fast."""
    if isinstance(f, types.BuiltinFunctionType):
        return f

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return f(*args, **kwargs)
        except StopIteration as exc:
            raise stop_iteration_error(exc)
    return wrapper


def reduce_checked(f: Callable[[Any, Any], Any], iterator: Iterable, initial: Any) -> Any:
    """`functools.reduce(f, iterator, initial)`: the C loop calls the user's f itself, no
    wrapper call per record. A StopIteration can only leave reduce from f (the iterator's
    own end is how the loop stops), so catching it around the loop keeps PySpark's error,
    with the exception's text."""
    try:
        return _reduce(f, iterator, initial)
    except StopIteration as exc:
        raise stop_iteration_error(exc)


class _SourceEnd:
    """Chained after a map's input: its __next__ runs only once the input is exhausted."""
    __slots__ = ("reached",)

    def __init__(self) -> None:
        self.reached = False

    def __iter__(self) -> "_SourceEnd":
        return self

    def __next__(self) -> Any:
        self.reached = True
        raise StopIteration

    def ran_out(self) -> bool:
        return self.reached


_SEQUENCE_ITERATORS = (type(iter([])), type(iter(())))


class _SequenceEnd:
    """Whether a list's or tuple's own iterator ran out, with nothing chained after it (a
    cached partition is a list: its records then reach the user's function one C call
    closer). Such an iterator lets go of its sequence when a next() finds it exhausted, so
    __reduce__ shows an empty one; one that a StopIteration from the user's function
    stopped still holds it, even on the last record (CPython 3.11 to 3.13 alike, which
    tests/test_parity_bugs.py checks)."""
    __slots__ = ("source",)

    def __init__(self, source: Iterator) -> None:
        self.source = source

    def ran_out(self) -> bool:
        return not self.source.__reduce__()[1][0]


def _watched(iterator: Iterable) -> tuple[Iterator, Any]:
    """The input to feed the user's function, and what tells whether it ran out."""
    if type(iterator) in _SEQUENCE_ITERATORS:
        return iterator, _SequenceEnd(iterator)
    end = _SourceEnd()
    return chain(iterator, end), end


class _OutputMayEndOnlyAfterInput:
    """Chained after a map's output (or, for flatMap, the last of its iterables): reached
    when the map stopped; unless its input had run out, a StopIteration from the user's
    function stopped it."""
    __slots__ = ("end",)

    def __init__(self, end: Any) -> None:
        self.end = end

    def __iter__(self) -> "_OutputMayEndOnlyAfterInput":
        return self

    def __next__(self) -> Any:
        if not self.end.ran_out():
            raise stop_iteration_error(StopIteration())
        raise StopIteration


def map_checked(f: Callable[[Any], Any], iterator: Iterable) -> Iterator:
    """`map(f, iterator)` that fails instead of ending early when f raises StopIteration.
    All C iterators per record (a generator or a wrapper call per record costs 7-10x
    more); the price is that the StopIteration's own text is not in the message."""
    source, end = _watched(iterator)
    return _checked(map(f, source), end)


def filter_checked(f: Callable[[Any], Any], iterator: Iterable) -> Iterator:
    """`filter(f, iterator)`, failing like map_checked."""
    source, end = _watched(iterator)
    return _checked(filter(f, source), end)


def flat_map_checked(f: Callable[[Any], Iterable], iterator: Iterable) -> Iterator:
    """`chain.from_iterable(map(f, iterator))`, failing like map_checked. The check is the
    last of the iterables, not a chain around the output: each output record then costs
    one C call less."""
    source, end = _watched(iterator)
    return chain.from_iterable(chain(map(f, source), (_OutputMayEndOnlyAfterInput(end),)))


class _Checked(chain):
    """What map_checked and filter_checked return: their output followed by the end check,
    iterating as the plain chain it is. `unchecked` is the same map or filter without the
    check, for consume_whole: a record read from the chain is gone from it too. (Not for
    flatMap: its chain would keep the rest of a record's items to itself.)"""
    __slots__ = ("unchecked", "end")


def _checked(output: Iterator, end: Any) -> _Checked:
    out = _Checked(output, _OutputMayEndOnlyAfterInput(end))
    out.unchecked, out.end = output, end
    return out


def consume_whole(consume: Callable[[Iterator], Any], iterator: Iterator) -> Any:
    """`consume(iterator)` for a consumer that reads its input to the end unless it raises
    (sum, list, a count): a map's or filter's checked output is read without the
    chain around it, whose step per record is 8 % of a cheap map's time (`x * 1.0001 + 1`
    over a cached list), and its end is checked once after."""
    if type(iterator) is not _Checked:
        return consume(iterator)
    out = consume(iterator.unchecked)
    if not iterator.end.ran_out():
        raise stop_iteration_error(StopIteration())
    return out


def escaped_stop_iteration(e: BaseException) -> StopIteration | None:
    """The user's StopIteration behind a task's failure, if that is what failed it: raised
    straight out of the task, or turned into "generator raised StopIteration" (PEP 479) by
    one of Ember's or the standard library's generators. A user's own generator keeps
    Python's RuntimeError, as in PySpark."""
    if isinstance(e, StopIteration):
        return e
    if not (isinstance(e, RuntimeError) and isinstance(e.__cause__, StopIteration)
            and str(e) == "generator raised StopIteration"):
        return None
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    where = os.path.abspath(tb.tb_frame.f_code.co_filename) if tb is not None else ""
    ours = where.startswith(_EMBER_DIR) or (where.startswith(_STDLIB_DIR)
                                            and not where.startswith(_SITE_DIRS))
    return e.__cause__ if ours else None
