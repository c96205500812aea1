"""`pyspark.testing.utils` for the RDD API: the test cases, helpers and checks PySpark's
own RDD and context tests import (ReusedPySparkTestCase, PySparkTestCase, QuietTest,
eventually, check_error, ...), so those tests run against Ember unchanged.

Why here: a program that maps `pyspark` onto `ember` finds `pyspark.testing` as this
package. The DataFrame assertions (assertDataFrameEqual, assertSchemaEqual) need Spark SQL,
which Ember does not have.
"""
from __future__ import annotations

import functools
import importlib.util
import logging
import signal
import struct
import sys
import time
import unittest
from typing import Any, Callable

from ember.conf import SparkConf
from ember.errors import PySparkException
from ember.find_spark_home import _find_spark_home

SPARK_HOME = _find_spark_home()


def have_package(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _requirement(name: str) -> str | None:
    return None if have_package(name) else f"No module named '{name}'"


numpy_requirement_message = _requirement("numpy")
have_numpy = numpy_requirement_message is None
scipy_requirement_message = _requirement("scipy")
have_scipy = scipy_requirement_message is None
pandas_requirement_message = _requirement("pandas")
have_pandas = pandas_requirement_message is None
pyarrow_requirement_message = _requirement("pyarrow")
have_pyarrow = pyarrow_requirement_message is None
connect_requirement_message = "Spark Connect is not part of Ember"
should_test_connect = False


def read_int(b: bytes) -> int:
    return struct.unpack("!i", b)[0]


def write_int(i: int) -> bytes:
    return struct.pack("!i", i)


def timeout(seconds: int) -> Callable[[Callable], Callable]:
    """Fail the decorated function with TimeoutError after `seconds` (SIGALRM: main
    thread only)."""
    def decorator(func: Callable) -> Callable:
        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            def expired(signum: int, frame: Any) -> None:
                raise TimeoutError(f"Function {func.__name__} timed out after {seconds} "
                                   "seconds")
            previous = signal.signal(signal.SIGALRM, expired)
            signal.alarm(seconds)
            try:
                return func(*args, **kwargs)
            finally:
                signal.alarm(0)
                signal.signal(signal.SIGALRM, previous)
        return wrapper
    return decorator


def eventually(timeout: float = 30.0, catch_assertions: bool = False,
               catch_timeout: bool = False) -> Callable[[Callable], Callable]:
    """Call the decorated condition until it returns True or None, for up to `timeout`
    seconds; then raise its last AssertionError/TimeoutError (when caught) or an
    AssertionError naming its last answer."""
    assert timeout > 0

    def decorator(condition: Callable) -> Callable:
        @functools.wraps(condition)
        def wrapper(*args: Any, **kwargs: Any) -> None:
            deadline = time.monotonic() + timeout
            caught = tuple(t for t, on in ((AssertionError, catch_assertions),
                                           (TimeoutError, catch_timeout)) if on)
            last: Any = None
            while time.monotonic() < deadline:
                try:
                    last = condition(*args, **kwargs)
                except caught as e:
                    last = e
                if last is True or last is None:
                    return
                time.sleep(0.01)
            if isinstance(last, (AssertionError, TimeoutError)):
                raise last
            raise AssertionError(f"Test failed due to timeout after {timeout:g} sec, with "
                                 f"last condition returning: {last}")
        return wrapper
    return decorator


class QuietTest:
    """Silence the engine's logging inside the block (PySpark's sets log4j's root logger to
    FATAL)."""

    def __init__(self, sc: Any = None) -> None:
        self._logger = logging.getLogger("ember")

    def __enter__(self) -> "QuietTest":
        self._old_level = self._logger.level
        self._logger.setLevel(logging.CRITICAL)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._logger.setLevel(self._old_level)


class PySparkTestCase(unittest.TestCase):
    """A fresh local[4] context for every test."""

    def setUp(self) -> None:
        from ember.context import SparkContext
        self._old_sys_path = list(sys.path)
        self.sc = SparkContext("local[4]", self.__class__.__name__)

    def tearDown(self) -> None:
        self.sc.stop()
        sys.path = self._old_sys_path


class ReusedPySparkTestCase(unittest.TestCase):
    """One context for all tests of the class: master() and conf() say which."""

    sc: Any

    @classmethod
    def conf(cls) -> SparkConf:
        return SparkConf()

    @classmethod
    def master(cls) -> str:
        return "local[4]"

    @classmethod
    def setUpClass(cls) -> None:
        from ember.context import SparkContext
        cls.sc = SparkContext(cls.master(), cls.__name__, conf=cls.conf())

    @classmethod
    def tearDownClass(cls) -> None:
        cls.sc.stop()

    def test_assert_classic_mode(self) -> None:
        from ember.sql import is_remote
        self.assertFalse(is_remote())

    def quiet(self) -> QuietTest:
        return QuietTest(self.sc)


class ByteArrayOutput:
    """A write-only stream into a bytearray (for serializers' dump_stream)."""

    def __init__(self) -> None:
        self.buffer = bytearray()

    def write(self, b: bytes) -> None:
        self.buffer += b

    def close(self) -> None:
        pass


class PySparkErrorTestUtils:
    """check_error: an error's condition and parameters, as PySpark's tests check them."""

    def check_error(self, exception: PySparkException, errorClass: str,  # noqa: N803
                    messageParameters: dict[str, str] | None = None,  # noqa: N803
                    query_context_type: Any = None, fragment: str | None = None,
                    matchPVals: bool = False) -> None:  # noqa: N803
        case: Any = self
        contexts = exception.getQueryContext() if isinstance(exception, PySparkException) \
            else []
        assert bool(contexts) == (query_context_type is not None), (
            f"`query_context_type` is required when QueryContext exists. QueryContext: "
            f"{contexts}.")
        case.assertIsInstance(exception, PySparkException, "checkError requires "
                              f"'PySparkException', got '{type(exception).__name__}'.")
        case.assertEqual(errorClass, exception.getCondition(),
                         f"Expected error class was '{errorClass}', got "
                         f"'{exception.getCondition()}'.")
        actual = exception.getMessageParameters()
        if matchPVals:
            expected = messageParameters or {}
            case.assertEqual(len(expected), len(actual or {}))
            for key, pattern in expected.items():
                case.assertIn(key, actual)
                case.assertRegex(actual[key], pattern)
        else:
            case.assertEqual(messageParameters, actual, "Expected message parameters was "
                             f"'{messageParameters}', got '{actual}'")
        for context in contexts:
            case.assertEqual(query_context_type, context.contextType())
            if fragment is not None:
                case.assertEqual(fragment, context.fragment())
