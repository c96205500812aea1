"""Exception types a PySpark user expects, with Spark's messages.

PySpark surfaces most failures as JVM exceptions wrapped by py4j; Ember has no JVM, so these
classes carry the same messages directly and, where it helps, also inherit the natural
Python type (a missing input path is also a FileNotFoundError) so ordinary `except` works.
"""
from __future__ import annotations

import abc
import builtins
import enum
import pickle
import re
import sys
import warnings
from typing import Any


class SparkException(Exception):
    """Base of every engine-side failure (Spark's org.apache.spark.SparkException).

    PySpark raises the failures that come from its JVM (a job that failed, a missing input
    path, an output directory that exists) as py4j's Py4JJavaError, and PySpark code catches
    them by that name. When the program has imported py4j.protocol, Ember's are also
    instances of it (see _as_java_error); Ember itself never imports py4j.
    """

    _java_class = "org.apache.spark.SparkException"   # the JVM class PySpark would name
    _from_jvm = True      # False: PySpark raises this one in Python, never as Py4JJavaError

    def __new__(cls, *args: Any, **kwargs: Any) -> "SparkException":
        return super().__new__(_as_java_error(cls), *args)

    def __init__(self, *args: Any) -> None:
        # a subclass's super().__init__(message) ends here, never in Py4JJavaError's
        Exception.__init__(self, *args)


class _JavaException:
    """What Py4JJavaError.java_exception answers when there is no JVM behind it."""

    def __init__(self, error: BaseException) -> None:
        self._class = type(error)._java_class
        self._message = str(error)

    def getMessage(self) -> str:  # noqa: N802
        return self._message

    def toString(self) -> str:  # noqa: N802
        return f"{self._class}: {self._message}"

    __str__ = toString


_java_error_types: dict[type, type] = {}


def _reduce_as(cls: type, error: BaseException) -> tuple:
    """Pickled as `cls` (loading it makes it a Py4JJavaError again where py4j is loaded)."""
    reduced = cls.__reduce__(error)
    return (cls, *reduced[1:]) if reduced[0] is type(error) else reduced


def _as_java_error(cls: type) -> type:
    """`cls`, or once the program has imported py4j.protocol, `cls` that is also its
    Py4JJavaError, printed, named and pickled as `cls` itself."""
    py4j = sys.modules.get("py4j.protocol")
    if py4j is None or not cls._from_jvm:
        return cls
    combined = _java_error_types.get(cls)
    if combined is None:
        try:
            combined = type(cls.__name__, (cls, py4j.Py4JJavaError), {
                "__module__": cls.__module__, "__qualname__": cls.__qualname__,
                "__str__": cls.__str__, "__init__": cls.__init__,
                "java_exception": property(_JavaException),
                "errmsg": property(lambda self: cls.__str__(self)),
                "__reduce__": lambda self: _reduce_as(cls, self)})
        except TypeError:       # a builtin base whose layout py4j's class conflicts with
            combined = cls
        _java_error_types[cls] = combined
    return combined


class PicklingError(SparkException, pickle.PicklingError):
    """A closure or value could not be serialized for shipping to task processes."""

    _from_jvm = False


class InvalidInputException(SparkException, FileNotFoundError):
    """Input path does not exist (Hadoop's InvalidInputException); raised at action time."""

    _java_class = "org.apache.hadoop.mapred.InvalidInputException"

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)

    def __str__(self) -> str:
        return str(self.args[0])


class FileAlreadyExistsException(SparkException, FileExistsError):
    """Output directory already exists (Hadoop's FileAlreadyExistsException)."""

    _java_class = "org.apache.hadoop.mapred.FileAlreadyExistsException"

    def __init__(self, message: str) -> None:
        Exception.__init__(self, message)

    def __str__(self) -> str:
        return str(self.args[0])


class IllegalArgumentException(SparkException, ValueError):
    """A configuration Spark refuses when the context starts (Java's IllegalArgumentException,
    which PySpark surfaces under this name)."""

    _java_class = "java.lang.IllegalArgumentException"


class TaskKilledException(BaseException):
    """Raised inside a task process when the driver kills the running task (cancellation)."""


# the reason of a queued task its task process handed back unstarted because it waited
# behind a long one (the driver runs it again wherever a slot is free; not a failure)
TASK_HANDED_BACK = "Task waited behind a long-running task; resubmitted"


class JobCancelledException(SparkException):
    """A job ended because it was cancelled (error class SPARK_JOB_CANCELLED)."""


class PythonException(SparkException):
    """A job failed because user code raised in a task process.

    Carries the remote exception's type name, message and traceback text. When the remote
    type is a builtin exception, `remote_class()` builds a subclass that is also an instance
    of that builtin, so `except ValueError` keeps working across the process boundary.
    """

    def __init__(self, message: str, exc_type: str = "", exc_message: str = "",
                 traceback_text: str = "") -> None:
        # not super(): the remote builtin's own __init__ (UnicodeDecodeError's takes five
        # arguments) must not run on the driver's message
        Exception.__init__(self, message)
        self.exc_type = exc_type
        self.exc_message = exc_message
        self.traceback_text = traceback_text

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""

    def __reduce__(self):
        return (_rebuild_python_exception,
                (str(self), self.exc_type, self.exc_message, self.traceback_text))


_combined_types: dict[str, type] = {}


def _rebuild_python_exception(message, exc_type, exc_message, tb):
    return make_python_exception(message, exc_type, exc_message, tb)


def make_python_exception(message: str, exc_type: str, exc_message: str,
                          traceback_text: str) -> PythonException:
    """A PythonException that is also an instance of the remote builtin exception type."""
    cls = _combined_types.get(exc_type)
    if cls is None:
        cls = _combined_types[exc_type] = _combined_type(exc_type)
    # BaseException's __new__: MemoryError's own refuses subclasses
    err = BaseException.__new__(_as_java_error(cls))
    PythonException.__init__(err, message, exc_type, exc_message, traceback_text)
    return err


def _combined_type(exc_type: str) -> type:
    base = getattr(builtins, exc_type, None) or _PYSPARK_ERROR_BASES.get(exc_type)
    if not (isinstance(base, type) and issubclass(base, Exception)
            and base.__module__ == "builtins" and not issubclass(base, OSError)
            and not issubclass(base, StopIteration)):   # a driver loop would swallow it
        return PythonException
    try:
        cls = type(f"PythonException[{exc_type}]", (PythonException, base), {})
        BaseException.__new__(cls)      # ExceptionGroup's own __new__ must run: not one
    except TypeError:                   # of these; nor a layout conflict
        return PythonException
    return cls


class BarrierJobAllocationFailed(SparkException):
    """A job with a barrier stage failed one of Spark's checks at submission."""


class BarrierJobUnsupportedRDDChainException(BarrierJobAllocationFailed):
    def __init__(self) -> None:
        super().__init__(
            "[SPARK-24820][SPARK-24821]: Barrier execution mode does not allow the following "
            "pattern of RDD chain within a barrier stage:\n1. Ancestor RDDs that have different "
            "number of partitions from the resulting RDD (e.g. union()/coalesce()/first()/"
            "take()/PartitionPruningRDD). A workaround for first()/take() can be "
            "barrierRdd.collect().head (scala) or barrierRdd.collect()[0] (python).\n2. An RDD "
            "that depends on multiple barrier RDDs (e.g. barrierRdd1.zip(barrierRdd2)).")


class BarrierJobRunWithDynamicAllocationException(BarrierJobAllocationFailed):
    def __init__(self) -> None:
        super().__init__(
            "[SPARK-24942]: Barrier execution mode does not support dynamic resource "
            "allocation for now. You can disable dynamic resource allocation by setting Spark "
            'conf "spark.dynamicAllocation.enabled" to "false".')


class BarrierJobSlotsNumberCheckFailed(BarrierJobAllocationFailed):
    def __init__(self, required_concurrent_tasks: int, max_concurrent_tasks: int) -> None:
        super().__init__(
            "[SPARK-24819]: Barrier execution mode does not allow run a barrier stage that "
            "requires more slots than the total number of slots in the cluster currently. "
            "Please init a new cluster with more resources(e.g. CPU, GPU) or repartition the "
            "input RDD(s) to reduce the number of slots required to run this barrier stage.")
        self.required_concurrent_tasks = required_concurrent_tasks
        self.max_concurrent_tasks = max_concurrent_tasks


# The error conditions of PySpark's (pyspark/errors/error-conditions.json) that Ember raises,
# in PySpark's words: the lines of a message, <name> for a parameter
_CONDITIONS: dict[str, tuple[str, ...]] = {
    "APPLICATION_NAME_NOT_SET": ("An application name must be set in your configuration.",),
    "CALL_BEFORE_INITIALIZE": ("Not supported to call `<func_name>` before initialize "
                               "<object>.",),
    "CONTEXT_ONLY_VALID_ON_DRIVER": (
        "It appears that you are attempting to reference SparkContext from a broadcast "
        "variable, action, or transformation. SparkContext can only be used on the driver, "
        "not in code that it run on workers. For more information, see SPARK-5063.",),
    "INCORRECT_CONF_FOR_PROFILE": (
        "`spark.python.profile` or `spark.python.profile.memory` configuration",
        " must be set to `true` to enable Python profile."),
    "INVALID_BROADCAST_OPERATION": ("Broadcast can only be <operation> in driver.",),
    "KEY_VALUE_PAIR_REQUIRED": ("Key-value pair or a list of pairs is required.",),
    "MASTER_URL_NOT_SET": ("A master URL must be set in your configuration.",),
    "NOT_IN_BARRIER_STAGE": ("It is not in a barrier stage.",),
    "PIPE_FUNCTION_EXITED": ("Pipe function `<func_name>` exited with error code "
                             "<error_code>.",),
    "PYTHON_HASH_SEED_NOT_SET": ("Randomness of hash of string should be disabled via "
                                 "PYTHONHASHSEED.",),
    "PYTHON_VERSION_MISMATCH": (
        "Python in worker has different version: <worker_version> than that in driver: "
        "<driver_version>, PySpark cannot run with different minor versions.",
        "Please check environment variables PYSPARK_PYTHON and PYSPARK_DRIVER_PYTHON are "
        "correctly set."),
    "RDD_TRANSFORM_ONLY_VALID_ON_DRIVER": (
        "It appears that you are attempting to broadcast an RDD or reference an RDD from an ",
        "action or transformation. RDD transformations and actions can only be invoked by "
        "the ", "driver, not inside of other transformations; for example, ",
        "rdd1.map(lambda x: rdd2.values.count() * x) is invalid because the values ",
        "transformation and count action cannot be performed inside of the rdd1.map ",
        "transformation. For more information, see SPARK-5063."),
    "VALUE_NOT_ACCESSIBLE": ("Value `<value>` cannot be accessed inside tasks.",),
    "STOP_ITERATION_OCCURRED": ("Caught StopIteration thrown from user's code; failing the "
                                "task: <exc>",),
}


def condition_message(error_class: str | None, parameters: dict[str, str] | None) -> str:
    """A condition's message with its parameters filled in; for a condition Ember does not
    word, the parameters themselves."""
    parameters = parameters or {}
    lines = _CONDITIONS.get(error_class or "")
    if lines is None:
        return ", ".join(f"{k}={v}" for k, v in parameters.items())
    return re.sub(r"<([a-zA-Z0-9_-]+)>",
                  lambda m: str(parameters.get(m.group(1), m.group(0))), "\n".join(lines))


class PySparkException(Exception):
    """pyspark.errors.PySparkException: an error PySpark raises in Python, named by an error
    condition and its parameters, with the condition's message unless one is given. Printed
    as "[CONDITION] message"."""

    def __init__(self, message: str | None = None, errorClass: str | None = None,  # noqa: N803
                 messageParameters: dict[str, str] | None = None,  # noqa: N803
                 contexts: list | None = None) -> None:
        if message is None:
            message = condition_message(errorClass, messageParameters)
        Exception.__init__(self, message)       # args: what pickling rebuilds it from
        self._message = message
        self._errorClass = errorClass
        self._messageParameters = messageParameters
        self._contexts = contexts or []

    def getCondition(self) -> str | None:  # noqa: N802
        return self._errorClass

    def getErrorClass(self) -> str | None:  # noqa: N802
        warnings.warn("Deprecated in 4.0.0, use getCondition instead.", FutureWarning)
        return self._errorClass

    def getMessageParameters(self) -> dict[str, str] | None:  # noqa: N802
        return self._messageParameters

    def getSqlState(self) -> None:  # noqa: N802
        """Errors raised in Python have no SQLSTATE."""
        return None

    def getMessage(self) -> str:  # noqa: N802
        return f"[{self._errorClass}] {self._message}"

    def getBreakingChangeInfo(self) -> None:  # noqa: N802
        return None

    def getQueryContext(self) -> list:  # noqa: N802
        return self._contexts

    def __str__(self) -> str:
        return self.getMessage() if self._errorClass is not None else self._message


class _PySparkError(PySparkException, SparkException):
    """PySpark's error classes with a builtin base. Also SparkExceptions, as Ember's errors
    are, but never Py4JJavaErrors: PySpark raises them in Python."""

    _from_jvm = False


class PySparkValueError(_PySparkError, ValueError):
    """ValueError with a PySpark error condition."""


class PySparkRuntimeError(_PySparkError, RuntimeError):
    """RuntimeError with a PySpark error condition (e.g. PYTHON_HASH_SEED_NOT_SET)."""


class PySparkTypeError(_PySparkError, TypeError):
    """TypeError with a PySpark error condition."""


class PySparkImportError(_PySparkError, ImportError):
    """ImportError with a PySpark error condition."""


class PySparkIndexError(_PySparkError, IndexError):
    """IndexError with a PySpark error condition."""


class PySparkAttributeError(_PySparkError, AttributeError):
    """AttributeError with a PySpark error condition."""


class PySparkAssertionError(_PySparkError, AssertionError):
    """AssertionError with a PySpark error condition."""


class PySparkNotImplementedError(_PySparkError, NotImplementedError):
    """NotImplementedError with a PySpark error condition."""


class PySparkPicklingError(_PySparkError, pickle.PicklingError):
    """PicklingError with a PySpark error condition."""


class PySparkKeyError(_PySparkError, KeyError):
    """KeyError with a PySpark error condition."""

    def __str__(self) -> str:       # not KeyError's repr of its argument
        return PySparkException.__str__(self)


class QueryContextType(enum.Enum):
    """Where a SQL error's query context points: SQL text or a DataFrame call."""
    SQL = 0
    DataFrame = 1


class QueryContext(abc.ABC):
    """A SQL error's query context (pyspark.errors.QueryContext)."""

    @abc.abstractmethod
    def contextType(self) -> QueryContextType: ...  # noqa: N802

    @abc.abstractmethod
    def fragment(self) -> str: ...

    @abc.abstractmethod
    def summary(self) -> str: ...


# What PySpark converts from its JVM's SQL engine and streaming. Ember has no SQL, so nothing
# raises these; code written for PySpark that names them in `except` still imports them.
class AnalysisException(PySparkException):
    pass


class ParseException(AnalysisException):
    pass


class TempTableAlreadyExistsException(AnalysisException):
    pass


class SessionNotSameException(PySparkException):
    pass


class ArithmeticException(PySparkException):
    pass


class UnsupportedOperationException(PySparkException):
    pass


class ArrayIndexOutOfBoundsException(PySparkException):
    pass


class DateTimeException(PySparkException):
    pass


class NumberFormatException(PySparkException):
    pass


class StreamingQueryException(PySparkException):
    pass


class QueryExecutionException(PySparkException):
    pass


class UnknownException(PySparkException):
    pass


class SparkRuntimeException(PySparkException):
    pass


class SparkUpgradeException(PySparkException):
    pass


class SparkNoSuchElementException(PySparkException):
    pass


class StreamingPythonRunnerInitializationException(PySparkException):
    pass


class PickleException(PySparkException):
    pass


# A task's PySpark error arrives by name; on the driver it is also its builtin base type.
_PYSPARK_ERROR_BASES = {c.__name__: c.__bases__[1] for c in _PySparkError.__subclasses__()}
