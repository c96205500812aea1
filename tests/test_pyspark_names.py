"""Names that code written for PySpark 4 imports and catches, beyond the RDD API itself:
`pyspark.core.*` (PySpark 4's home of the RDD modules), `pyspark.util`'s helpers,
`pyspark.keyword_only`/`since`, py4j's Py4JJavaError around a failed job, and a TaskContext
returned from a task (all found running PySpark 4.1's own doctests against Ember).
"""
from __future__ import annotations

import io
import os
import pickle
import sys
import threading

import pytest

import ember
import ember as pyspark
from ember import InheritableThread, TaskContext, inheritable_thread_target
from ember.errors import PySparkValueError, SparkException

pytestmark = pytest.mark.timeout(60)


def test_pyspark_core_modules_are_embers_own():
    import ember.broadcast
    import ember.context
    import ember.core.context
    import ember.core.rdd
    import ember.files
    import ember.rdd
    import ember.status
    from ember.core.files import SparkFiles
    assert ember.core.rdd is ember.rdd and ember.core.context is ember.context
    assert pyspark.core.broadcast is ember.broadcast and pyspark.core.status is ember.status
    assert SparkFiles is ember.files.SparkFiles


def test_pyspark_util_helpers():
    from ember.util import VersionUtils, _parse_memory, is_remote_only, print_exec
    assert VersionUtils.majorMinorVersion("2.3.0-SNAPSHOT") == (2, 3)
    assert VersionUtils.majorMinorVersion("4.1") == (4, 1)
    with pytest.raises(ValueError, match="could not find the major and minor"):
        VersionUtils.majorMinorVersion("abc")
    assert (_parse_memory("256m"), _parse_memory("2g"), _parse_memory("1t")) == (256, 2048,
                                                                                 1 << 20)
    with pytest.raises(ValueError, match="invalid format: 12"):
        _parse_memory("12")
    assert is_remote_only() is False
    from ember.sql import is_remote
    assert is_remote() is False
    out = io.StringIO()
    try:
        raise KeyError("shown")
    except KeyError:
        print_exec(out)
    assert "KeyError: 'shown'" in out.getvalue()
    with pytest.raises(AttributeError):
        ember.util.no_such_name  # noqa: B018


def test_try_simplify_traceback_drops_embers_leading_frames():
    from ember.util import fail_on_stopiteration, try_simplify_traceback, walk_tb

    def user_code():
        raise KeyError("raised by user code called through Ember")
    try:
        fail_on_stopiteration(user_code)()
    except KeyError as e:
        tb = e.__traceback__
    files = [t.tb_frame.f_code.co_filename for t in walk_tb(tb)]
    assert any("ember/util" in f for f in files)        # the wrapper is in the chain
    simple = try_simplify_traceback(tb.tb_next)        # from Ember's wrapper on
    names = [t.tb_frame.f_code.co_name for t in walk_tb(simple)]
    assert names == ["user_code"]
    from ember.util import _parse_memory
    try:
        _parse_memory("12")
    except ValueError as e:
        assert try_simplify_traceback(e.__traceback__.tb_next) is None   # all Ember's


def test_keyword_only_and_since():
    class Params:
        @pyspark.keyword_only
        def set(self, *, a=1, b=2):
            return self._input_kwargs

    assert Params().set(a=5) == {"a": 5}
    with pytest.raises(TypeError, match="forces keyword arguments"):
        Params().set(5)

    @pyspark.since("3.0")
    def f():
        """Does f."""
    assert f.__doc__.endswith(".. versionadded:: 3.0")


def test_a_failed_job_is_a_py4j_java_error_where_py4j_is_loaded(sc, tmp_path):
    """PySpark raises a failed job, a missing input and an existing output directory as
    Py4JJavaError; code written for it catches that name. Errors PySpark raises in Python
    (its PySpark*Error classes) are not."""
    from py4j.protocol import Py4JJavaError

    def boom(x):
        raise ValueError("bad record")
    with pytest.raises(Py4JJavaError) as info:
        sc.parallelize([1], 1).map(boom).collect()
    err = info.value
    assert isinstance(err, ValueError) and isinstance(err, SparkException)
    assert type(err).__name__ == "PythonException[ValueError]"
    assert str(err).startswith("Job aborted due to stage failure")
    assert err.java_exception.toString().startswith("org.apache.spark.SparkException: Job")
    again = pickle.loads(pickle.dumps(err))
    assert isinstance(again, Py4JJavaError) and str(again) == str(err)
    with pytest.raises(Py4JJavaError) as info:
        sc.textFile(str(tmp_path / "missing")).collect()
    assert isinstance(info.value, FileNotFoundError)
    assert "InvalidInputException: Input path does not exist" in str(
        info.value.java_exception)
    with pytest.raises(Py4JJavaError) as info:
        sc.parallelize([1]).saveAsTextFile(str(tmp_path))
    assert isinstance(info.value, FileExistsError)
    error = SparkException("plain")
    assert isinstance(error, Py4JJavaError) and type(error).__name__ == "SparkException"
    assert pickle.loads(pickle.dumps(error)).args == ("plain",)
    assert not isinstance(PySparkValueError(errorClass="X", messageParameters={}), Py4JJavaError)
    # subclasses whose __init__ calls super().__init__(message) (it must not reach py4j's)
    from ember.errors import BarrierJobUnsupportedRDDChainException
    from ember.rpc.errors import RpcRemoteError
    assert "SPARK-24820" in str(BarrierJobUnsupportedRDDChainException())
    assert str(RpcRemoteError("SparkException", "gone")) == "SparkException: gone"
    assert "py4j.protocol" in sys.modules


def test_a_task_may_return_its_context(sc):
    sc.setLocalProperty("key1", "value")
    try:
        ctx = sc.parallelize([1], 1).map(lambda _: TaskContext.get()).first()
    finally:
        sc.setLocalProperty("key1", None)
    assert isinstance(ctx, TaskContext)
    assert (ctx.partitionId(), ctx.attemptNumber(), ctx.cpus()) == (0, 0, 1)
    assert ctx.getLocalProperty("key1") == "value" and ctx.stageId() >= 0
    assert TaskContext.get() is None            # loading it did not make it the driver's


def test_inheritable_thread_takes_the_properties_its_creator_has_at_start(sc):
    seen = {}

    def read(name):
        seen[name] = sc.getLocalProperty("group")

    sc.setLocalProperty("group", "at-init")
    try:
        thread = InheritableThread(read, args=("thread",))
        sc.setLocalProperty("group", "at-start")
        thread.start()
        thread.join()
        wrapped = inheritable_thread_target(read)
        decorated = inheritable_thread_target(None)(read)
        sc.setLocalProperty("group", "later")
        for target, name in ((wrapped, "target"), (decorated, "decorated")):
            t = threading.Thread(target=target, args=(name,))
            t.start()
            t.join()
    finally:
        sc.setLocalProperty("group", None)
    assert seen == {"thread": "at-start", "target": "at-start", "decorated": "at-start"}
    assert wrapped.__name__ == "read"


def test_pysparks_private_checkpoint_reader_and_reserialize(fresh_sc, tmp_path):
    """PySpark's test_checkpoint_and_restore and test_zip_with_different_serializers."""
    from ember.serializers import BatchedSerializer, CPickleSerializer, MarshalSerializer
    sc = fresh_sc()
    sc.setCheckpointDir(str(tmp_path))
    rdd = sc.parallelize(range(20), 7).map(lambda x: x * 2)
    rdd.checkpoint()
    rdd.count()
    recovered = sc._checkpointFile(rdd.getCheckpointFile(), rdd._jrdd_deserializer)
    assert recovered.getNumPartitions() == 7 and recovered.collect() == rdd.collect()
    a = sc.parallelize(range(5))._reserialize(BatchedSerializer(CPickleSerializer(), 2))
    b = sc.parallelize(range(100, 105))._reserialize(MarshalSerializer())
    assert a.zip(b).collect() == [(i, 100 + i) for i in range(5)]


def test_pyspark_errors_names_and_their_api(sc):
    """pyspark.errors: every name PySpark 4.1 exports; PySparkException's condition,
    parameters and PySpark's message for them; a PySpark error a task raised is its builtin
    type on the driver."""
    import warnings

    from ember import errors
    from ember.errors import PySparkException, PySparkKeyError, PySparkRuntimeError
    names = ["PySparkException", "AnalysisException", "SessionNotSameException",
             "TempTableAlreadyExistsException", "ParseException", "IllegalArgumentException",
             "ArithmeticException", "UnsupportedOperationException",
             "ArrayIndexOutOfBoundsException", "DateTimeException", "NumberFormatException",
             "StreamingQueryException", "QueryExecutionException", "PythonException",
             "UnknownException", "SparkRuntimeException", "SparkUpgradeException",
             "SparkNoSuchElementException", "PySparkTypeError", "PySparkValueError",
             "PySparkImportError", "PySparkIndexError", "PySparkAttributeError",
             "PySparkRuntimeError", "PySparkAssertionError", "PySparkNotImplementedError",
             "PySparkPicklingError", "PySparkKeyError", "QueryContext", "QueryContextType",
             "StreamingPythonRunnerInitializationException", "PickleException"]
    assert [n for n in names if not hasattr(errors, n)] == []
    e = PySparkRuntimeError(errorClass="PIPE_FUNCTION_EXITED",
                            messageParameters={"func_name": "false", "error_code": "1"})
    assert isinstance(e, (PySparkException, RuntimeError))
    assert str(e) == e.getMessage() == (
        "[PIPE_FUNCTION_EXITED] Pipe function `false` exited with error code 1.")
    assert e.getCondition() == "PIPE_FUNCTION_EXITED" and e.getSqlState() is None
    assert e.getMessageParameters() == {"func_name": "false", "error_code": "1"}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert e.getErrorClass() == "PIPE_FUNCTION_EXITED"
    assert caught[0].category is FutureWarning
    copy = pickle.loads(pickle.dumps(e))
    assert (str(copy), copy.getMessageParameters()) == (str(e), e.getMessageParameters())
    assert str(PySparkException("just words")) == "just words"
    assert str(PySparkKeyError(errorClass="K", messageParameters={"k": "v"})) == "[K] k=v"
    with pytest.raises(RuntimeError, match=r"Pipe function `false` exited with error code 1"):
        sc.parallelize([1], 1).pipe("false", checkCode=True).collect()

    def raises(_):
        raise errors.PySparkIndexError(errorClass="INDEX_OUT_OF_RANGE",
                                       messageParameters={"arg_name": "i", "index": "9"})
    with pytest.raises(IndexError, match="INDEX_OUT_OF_RANGE"):
        sc.parallelize([1], 1).map(raises).collect()
    acc = sc.accumulator(0)
    with pytest.raises(RuntimeError, match=r"\[VALUE_NOT_ACCESSIBLE\] Value `Accumulator.value` "
                       "cannot be accessed inside tasks."):
        sc.parallelize([1], 1).foreach(lambda _: acc.value)
    assert sc.parallelize([1, 2], 2).count() == 2


def test_pyspark_testing_utils_run_a_pyspark_style_test_case(fresh_sc):
    """ember.testing.utils is `pyspark.testing.utils` for the RDD API: PySpark's own tests
    subclass its test cases and call check_error, eventually and QuietTest. (fresh_sc: the
    shared context is stopped, as the test case makes its own.)"""
    import unittest

    from ember.errors import PySparkRuntimeError
    from ember.testing.utils import (PySparkErrorTestUtils, QuietTest, ReusedPySparkTestCase,
                                     eventually, read_int, write_int)

    class Case(ReusedPySparkTestCase, PySparkErrorTestUtils):
        @classmethod
        def master(cls):
            return "local[2]"

        def test_count_and_error(self):
            self.assertEqual(self.sc.parallelize(range(10), 3).count(), 10)
            with QuietTest(self.sc), self.assertRaises(PySparkRuntimeError) as pe:
                self.sc.show_profiles()
            self.check_error(exception=pe.exception, errorClass="INCORRECT_CONF_FOR_PROFILE",
                             messageParameters={})
            with self.assertRaises(AssertionError):
                self.check_error(exception=pe.exception, errorClass="OTHER",
                                 messageParameters={})

        def test_eventually(self):
            calls = []

            @eventually(timeout=5, catch_assertions=True)
            def settles():
                calls.append(1)
                assert len(calls) >= 3
            settles()
            self.assertEqual(len(calls), 3)

    result = unittest.TextTestRunner(stream=io.StringIO()).run(
        unittest.defaultTestLoader.loadTestsFromTestCase(Case))
    assert result.wasSuccessful() and result.testsRun == 3, result.failures + result.errors
    assert read_int(write_int(-7)) == -7


def test_loose_version_find_spark_home_and_handle_worker_exception(monkeypatch):
    """pyspark.loose_version, pyspark.find_spark_home and pyspark.util's
    handle_worker_exception, which PySpark's test_util imports."""
    from ember.find_spark_home import _find_spark_home
    from ember.loose_version import LooseVersion
    from ember.util import handle_worker_exception
    v = LooseVersion("1.2.3")
    assert (str(v), repr(v)) == ("1.2.3", "LooseVersion ('1.2.3')")
    assert v == "1.2.3" and v <= LooseVersion("1.2.4") and LooseVersion("1.10") > "1.9"
    assert LooseVersion("2.0.0rc1") < "2.0.1"
    with pytest.raises(TypeError):
        v > 1.1  # noqa: B015
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    assert _find_spark_home() == "/opt/spark"
    monkeypatch.delenv("SPARK_HOME")
    assert os.path.isdir(os.path.join(_find_spark_home(), "ember"))

    def written(hide=None) -> bytes:
        try:
            raise ValueError("test_message")
        except ValueError as e:
            out = io.BytesIO()
            handle_worker_exception(e, out, hide)
            return out.getvalue()
    full = written()
    assert full[:4] == b"\xff\xff\xff\xfe" and int.from_bytes(full[4:8], "big") == len(full) - 8
    assert b"Traceback (most recent call last):" in full and b"ValueError: test_message" in full
    assert written(True)[8:] == b"ValueError: test_message\n"
    monkeypatch.setenv("SPARK_HIDE_TRACEBACK", "1")
    assert b"Traceback" not in written() and b"Traceback" in written(False)


def test_a_stop_iteration_from_an_aggregators_function_is_pysparks_error():
    """pyspark.shuffle used directly (PySpark's test_shuffle): StopIteration from any of the
    three functions is PySpark's RuntimeError, not a StopIteration that ends a loop."""
    from ember.shuffle import Aggregator, ExternalMerger

    def stopit(*args):
        raise StopIteration()
    data = [(x % 2, x) for x in range(100)]
    for agg in (Aggregator(stopit, lambda c, v: c + [v], lambda a, b: a + b),
                Aggregator(lambda v: [v], stopit, lambda a, b: a + b)):
        with pytest.raises(RuntimeError, match="STOP_ITERATION_OCCURRED"):
            ExternalMerger(agg, 20).mergeValues(data)
    merger = ExternalMerger(Aggregator(lambda v: [v], lambda c, v: c + [v], stopit), 20)
    with pytest.raises(RuntimeError, match="STOP_ITERATION_OCCURRED"):
        merger.mergeCombiners([(0, [1]), (0, [2])])


def test_pyspark_join_functions(sc):
    """pyspark.join's functions are what the RDD methods use."""
    from ember.join import (python_cogroup, python_full_outer_join, python_join,
                            python_left_outer_join, python_right_outer_join)
    a = sc.parallelize([(1, "a"), (2, "b")], 2)
    b = sc.parallelize([(2, "x"), (3, "y")], 2)
    assert python_join(a, b, 2).collect() == [(2, ("b", "x"))]
    assert sorted(python_left_outer_join(a, b, None).collect()) == [(1, ("a", None)),
                                                                    (2, ("b", "x"))]
    assert sorted(python_right_outer_join(a, b, 1).collect()) == [(2, ("b", "x")),
                                                                  (3, (None, "y"))]
    assert len(python_full_outer_join(a, b, 3).collect()) == 3
    assert sorted((k, tuple(map(list, v))) for k, v in python_cogroup([a, b], 2).collect()) == [
        (1, (["a"], [])), (2, (["b"], ["x"])), (3, ([], ["y"]))]


def test_pyspark_logger_writes_json_lines_with_the_calls_context():
    """pyspark.logger.PySparkLogger (PySpark 4): JSON lines, keyword arguments as context,
    an exception's class, message and frames."""
    import json
    import logging

    from ember.logger import SPARK_LOG_SCHEMA, PySparkLogger
    logger = PySparkLogger.getLogger("ember-test-json-logger")
    assert isinstance(logger, PySparkLogger) and logger.level == logging.WARN
    assert type(logging.getLogger("ember-test-plain-logger")) is logging.Logger
    logger.setLevel(logging.INFO)
    stream = io.StringIO()
    logger.addHandler(logging.StreamHandler(stream))
    logger.info("an informational message", user="test_user", action="test_action")
    try:
        raise KeyError("k")
    except KeyError:
        logger.exception("failed %s", "here", job=3)
    first, second = (json.loads(line) for line in stream.getvalue().splitlines())
    assert first.pop("ts") and first == {
        "level": "INFO", "logger": "ember-test-json-logger", "msg": "an informational message",
        "context": {"user": "test_user", "action": "test_action"}}
    assert (second["level"], second["msg"], second["context"]) == ("ERROR", "failed here",
                                                                   {"job": 3})
    assert second["exception"]["class"] == "KeyError"
    assert second["exception"]["stacktrace"][-1]["method"] == (
        "test_pyspark_logger_writes_json_lines_with_the_calls_context")
    assert SPARK_LOG_SCHEMA.startswith("ts TIMESTAMP, level STRING")
