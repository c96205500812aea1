"""The helpers of PySpark's `pyspark.util` that programs and tests written for PySpark import.

`import ember as pyspark` maps `pyspark.util` onto `ember.util`, whose package resolves these
names from here on first use (ember.util.__getattr__), so the bottom layer's import stays as
light as before. Ember has no JVM: what PySpark's module does with py4j sockets is not here.
"""
from __future__ import annotations

import functools
import os
import re
import sys
import traceback
from types import TracebackType
from typing import IO, Any, Callable, Iterator, TextIO, TypeVar

from ember.util.user_code import _EMBER_DIR
from ember.util.user_code import fail_on_stopiteration  # noqa: F401  (pyspark.util's name)

_F = TypeVar("_F", bound=Callable[..., Any])


def print_exec(stream: TextIO) -> None:
    """Print the exception being handled, with its traceback, to `stream`."""
    traceback.print_exception(*sys.exc_info(), file=stream)


class VersionUtils:
    """Spark version strings taken apart."""

    @staticmethod
    def majorMinorVersion(sparkVersion: str) -> tuple[int, int]:  # noqa: N802, N803
        """(major, minor) of a version such as "2.3.0-SNAPSHOT" -> (2, 3)."""
        match = re.match(r"(\d+)\.(\d+)(\..*)?$", sparkVersion)
        if match is None:
            raise ValueError(
                f"Spark tried to parse '{sparkVersion}' as a Spark version string, but it "
                "could not find the major and minor version numbers.")
        return int(match.group(1)), int(match.group(2))


def walk_tb(tb: TracebackType | None) -> Iterator[TracebackType]:
    """Each entry of a traceback chain, outermost first."""
    while tb is not None:
        yield tb
        tb = tb.tb_next


def try_simplify_traceback(tb: TracebackType) -> TracebackType | None:
    """`tb` without its leading entries from Ember's own source: from the first entry in
    another file on, every entry is kept (user code called back into Ember stays visible)."""
    entries = list(walk_tb(tb))
    start = next((i for i, entry in enumerate(entries)
                  if not entry.tb_frame.f_code.co_filename.startswith(_EMBER_DIR)), None)
    if start is None:
        return None
    simplified = None
    for entry in reversed(entries[start:]):
        simplified = TracebackType(simplified, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return simplified


def _parse_memory(s: str) -> int:
    """A JVM memory string ("512m", "2g", "1t", "1024k") in whole MiB."""
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}
    unit = s[-1:].lower()
    if unit not in units:
        raise ValueError("invalid format: " + s)
    return int(float(s[:-1]) * units[unit])


def is_remote_only() -> bool:
    """False: Ember is the classic (RDD) API, never a Spark Connect client alone."""
    return False


def keyword_only(func: _F) -> _F:
    """PySpark's decorator for methods called with keyword arguments only: it stores them in
    `self._input_kwargs` and refuses positional ones."""
    @functools.wraps(func)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError(f"Method {func.__name__} forces keyword arguments.")
        self._input_kwargs = kwargs
        return func(self, **kwargs)
    return wrapper  # type: ignore[return-value]


def since(version: str | float) -> Callable[[_F], _F]:
    """PySpark's decorator that notes in a docstring the version a function came in."""
    def deco(f: _F) -> _F:
        doc = f.__doc__ or ""
        indents = re.findall(r"\n( +)", doc)
        indent = " " * (min(len(m) for m in indents) if indents else 0)
        f.__doc__ = f"{doc.rstrip()}\n\n{indent}.. versionadded:: {version}"
        return f
    return deco


def handle_worker_exception(e: BaseException, outfile: IO[bytes],
                            hide_traceback: bool | None = None) -> None:
    """Write a failed task's error as PySpark's worker does: PYTHON_EXCEPTION_THROWN (-2),
    then the UTF-8 traceback with its length. Only the exception's line with
    `hide_traceback` (default: SPARK_HIDE_TRACEBACK is set); with SPARK_SIMPLIFIED_TRACEBACK
    set, the traceback without Ember's frames. Call it while `e` is being handled."""
    from ember.serializers import SpecialLengths, write_int, write_with_length
    if hide_traceback is None:
        hide_traceback = bool(os.environ.get("SPARK_HIDE_TRACEBACK"))
    if hide_traceback:
        text = "".join(traceback.format_exception_only(type(e), e))
    else:
        tb = try_simplify_traceback(sys.exc_info()[2]) \
            if os.environ.get("SPARK_SIMPLIFIED_TRACEBACK") else None
        text = "".join(traceback.format_exception(type(e), e, tb or e.__traceback__,
                                                  chain=tb is None))
    try:
        write_int(SpecialLengths.PYTHON_EXCEPTION_THROWN, outfile)
        write_with_length(text.encode("utf-8"), outfile)
    except OSError:             # the reader closed the stream
        pass
