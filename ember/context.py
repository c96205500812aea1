"""SparkContext: the entry point an application talks to (PySpark's API, no JVM).

It holds PySpark's API and nothing else: creating one builds an ember.driver_runtime
DriverRuntime (bus, trackers, DAG scheduler -> TaskSchedulerImpl -> backend, and the scratch
directory for shuffle files, spills, cached blocks, broadcasts and added files), reachable
as `sc.runtime`, and stop() tears it down.
"""
from __future__ import annotations

import atexit
import functools
import logging
import os
import pickle
import shutil
import signal
import sys
import threading
import uuid
from typing import TYPE_CHECKING, Any, Callable, Iterable

from ember import config, fs
from ember.accumulators import (COMPLEX_ACCUMULATOR_PARAM, FLOAT_ACCUMULATOR_PARAM,
                                INT_ACCUMULATOR_PARAM, Accumulator, AccumulatorParam,
                                new_accumulator_id)
from ember.broadcast import Broadcast
from ember.conf import SparkConf
from ember.driver_runtime import DriverRuntime, parse_local_master, spark_user
from ember.errors import PySparkRuntimeError, SparkException, condition_message
from ember.files import SparkFiles
from ember.util.files import unlink_quietly
from ember.util.logs import own_logger
from ember.version import SPARK_VERSION

if TYPE_CHECKING:
    from ember.rdd import RDD
    from ember.status import StatusTracker

# The scheduler, RDD and serialization modules are imported inside SparkContext() right
# after the fork server has been started, so that both processes import in parallel:
# that overlap is most of a cold start.

log = logging.getLogger("ember")

# PySpark's DEFAULT_CONFIGS, set on every context's conf when absent
_DEFAULT_CONFIGS = {"spark.serializer.objectStreamReset": 100, "spark.rdd.compress": True,
                    "spark.sql.artifact.isolation.enabled": "false"}
# a parallelized slice pickled to at least this many bytes is written to a file instead of
# travelling in each of its tasks (SparkContext._parallelized)
SLICE_FILE_BYTES = 128 * 1024
_LOG_LEVELS = {"ALL": logging.NOTSET, "DEBUG": logging.DEBUG, "ERROR": logging.ERROR,
               "FATAL": logging.CRITICAL, "INFO": logging.INFO, "OFF": logging.CRITICAL + 10,
               "TRACE": logging.DEBUG, "WARN": logging.WARNING}

def _setup_logging() -> None:
    if not logging.getLogger().handlers:
        own_logger("ember", logging.WARNING)


def _context_off_driver(created: bool = False) -> PySparkRuntimeError:
    """PySpark's error; one created in a task also says it in the words of Spark's own
    check (SPARK-32160), which PySpark's test of it and its 3.x releases use."""
    condition = "CONTEXT_ONLY_VALID_ON_DRIVER"
    message = condition_message(condition, {})
    if created:
        message = "SparkContext should only be created and accessed on the driver. " + message
    return PySparkRuntimeError(message, condition, {})


class SparkContext:
    """Main entry point for Ember functionality (PySpark's pyspark.SparkContext)."""

    _active_spark_context: "SparkContext | None" = None
    _lock = threading.RLock()
    _system_properties: dict[str, str] = {}
    PACKAGE_EXTENSIONS: tuple[str, ...] = (".zip", ".egg", ".jar")   # put on sys.path

    def __init__(self, master: str | None = None, appName: str | None = None,
                 sparkHome: str | None = None, pyFiles: list[str] | None = None,
                 environment: dict[str, str] | None = None, batchSize: int = 0,
                 serializer: Any = None, conf: SparkConf | None = None, gateway: Any = None,
                 jsc: Any = None, profiler_cls: Any = None, udf_profiler_cls: Any = None,
                 memory_profiler_cls: Any = None) -> None:
        if gateway is not None and getattr(getattr(gateway, "gateway_parameters", None),
                                           "auth_token", None) is None:
            raise ValueError("You are trying to pass an insecure Py4j gateway to Spark. This"
                             " is not allowed as it is a security risk.")
        if conf is None or not config.read(conf, "spark.executor.allowSparkContext"):
            from ember.taskcontext import TaskContext
            if TaskContext.get() is not None:     # PySpark's _assert_on_driver
                raise _context_off_driver(created=True)
        _setup_logging()
        with SparkContext._lock:
            active = SparkContext._active_spark_context
            if active is not None:
                raise ValueError(
                    "Cannot run multiple SparkContexts at once; existing SparkContext(app=%s, "
                    "master=%s) created by %s at %s:%s " % (active.appName, active.master,
                                                            *active._created_at))
            SparkContext._active_spark_context = self
        try:
            self._do_init(master, appName, sparkHome, pyFiles, environment, batchSize,
                          serializer, conf, profiler_cls, udf_profiler_cls, memory_profiler_cls)
        except BaseException:
            self._teardown()
            raise

    def _do_init(self, master: str | None, app_name: str | None, spark_home: str | None,
                 py_files: list[str] | None, environment: dict[str, str] | None,
                 batch_size: int, serializer: Any, conf: SparkConf | None,
                 profiler_cls: Any = None, udf_profiler_cls: Any = None,
                 memory_profiler_cls: Any = None) -> None:
        self._conf = conf.copy() if conf is not None else SparkConf()
        if master:
            self._conf.setMaster(master)
        if app_name:
            self._conf.setAppName(app_name)
        if spark_home:
            self._conf.setSparkHome(spark_home)
        for k, v in (environment or {}).items():
            self._conf.setExecutorEnv(k, v)
        if conf is None or conf._load_defaults:
            # what spark-submit hands PySpark as system properties, which "pyspark-shell"
            # and `python app.py` get too
            self._conf.setIfMissing("spark.master", "local[*]")
            self._conf.setIfMissing("spark.app.name", "pyspark-shell")
        for k, v in _DEFAULT_CONFIGS.items():
            self._conf.setIfMissing(k, v)
        if not self._conf.contains("spark.master"):
            raise PySparkRuntimeError(errorClass="MASTER_URL_NOT_SET", messageParameters={})
        if not self._conf.contains("spark.app.name"):
            raise PySparkRuntimeError(errorClass="APPLICATION_NAME_NOT_SET",
                                      messageParameters={})
        config.check_unsupported(self._conf)
        self.environment: dict[str, str] = {
            k[len("spark.executorEnv."):]: v for k, v in self._conf.getAll()
            if k.startswith("spark.executorEnv.")}
        self.environment["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
        self.runtime = DriverRuntime(self._conf)
        if parse_local_master(self._conf.get("spark.master") or "") is not None:
            # start the fork server first: it imports Ember while this process does too
            self.runtime.start_fork_server(self.environment)
        from ember.call_site import call_site
        site = call_site()
        name, _, where = site.partition(" at ")
        file, _, line = where.rpartition(":")
        self._created_at = (name, file, line)
        self.master: str = self._conf.get("spark.master")  # type: ignore[assignment]
        self.appName: str = self._conf.get("spark.app.name")  # type: ignore[assignment]
        self.sparkHome = self._conf.get("spark.home")
        from ember.serializers import (AutoBatchedSerializer, BatchedSerializer,
                                       CloudPickleSerializer, CPickleSerializer,
                                       PickleSerializer)
        self._unbatched_serializer = serializer or CPickleSerializer()
        self.serializer = (AutoBatchedSerializer(self._unbatched_serializer) if batch_size == 0
                           else BatchedSerializer(self._unbatched_serializer, batch_size))
        # A serializer the engine's own pickling does not already match carries the data:
        # parallelized collections, shuffle blocks and the results tasks return (PySpark
        # ships every record through it; Ember keeps its pickle fast path for pickle).
        plain = type(self._unbatched_serializer) in (PickleSerializer, CloudPickleSerializer)
        self.runtime.data_serializer = None if plain and \
            self._unbatched_serializer.allowed_names is None else self._unbatched_serializer
        self.batchSize = batch_size
        self.pythonExec = sys.executable
        self.pythonVer = "%d.%d" % sys.version_info[:2]
        SparkFiles._is_running_on_worker = False
        SparkFiles._sc = self
        self.runtime.start(self.appName, self.environment, self.stop,
                           dict(self._system_properties))
        SparkFiles._root_directory = self.runtime.files_dir
        self._install_interrupt_handler()
        from ember.broadcast import BroadcastPickleRegistry
        self._pickled_broadcast_vars = BroadcastPickleRegistry()
        self.profiler_collector: Any = None
        if config.read(self._conf, "spark.python.profile") or \
                config.read(self._conf, "spark.python.profile.memory"):
            from ember.profiler import BasicProfiler, ProfilerCollector, UDFBasicProfiler
            self.profiler_collector = ProfilerCollector(
                profiler_cls or BasicProfiler, udf_profiler_cls or UDFBasicProfiler,
                memory_profiler_cls, self._conf.get("spark.python.profile.dump"))
            if config.read(self._conf, "spark.python.profile"):
                self.runtime.profiler_collector = self.profiler_collector
        for path in py_files or []:
            self.addPyFile(path)
        for path in (self._conf.get("spark.submit.pyFiles") or "").split(","):
            if path:
                self.addPyFile(path)
        for path in (self._conf.get("spark.files") or "").split(","):
            if path:
                self.addFile(path)
        for path in (self._conf.get("spark.archives") or "").split(","):
            if path:
                self.addArchive(path)
        atexit.register(self._atexit_stop)


    def _install_interrupt_handler(self) -> None:
        """PySpark's: Ctrl-C in the main thread cancels every job and raises
        KeyboardInterrupt (DriverRuntime.interrupt); the handler it replaced comes back at
        stop()."""
        if threading.current_thread() is not threading.main_thread():
            return
        runtime = self.runtime

        def on_sigint(signum: int, frame: Any) -> None:
            runtime.interrupt(signum, frame)
        try:
            self._previous_sigint = signal.signal(signal.SIGINT, on_sigint)
        except ValueError:          # not the main interpreter
            return
        runtime.sigint_handler = on_sigint

    # --- lifecycle ----------------------------------------------------------------------
    @classmethod
    def getOrCreate(cls, conf: SparkConf | None = None) -> "SparkContext":
        with cls._lock:
            if cls._active_spark_context is None:
                SparkContext(conf=conf or SparkConf())
            assert cls._active_spark_context is not None
            return cls._active_spark_context

    def __repr__(self) -> str:
        return "<SparkContext master={master} appName={appName}>".format(
            master=getattr(self, "master", None), appName=getattr(self, "appName", None))

    def __enter__(self) -> "SparkContext":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _atexit_stop(self) -> None:
        try:
            self.stop()
        except Exception:
            pass

    def __reduce__(self) -> tuple:
        """PySpark's refusal (SPARK-5063): a context only works in the driver's process, so a
        closure or broadcast value that holds it cannot be shipped."""
        raise _context_off_driver()

    def stop(self) -> None:
        runtime = getattr(self, "runtime", None)
        if runtime is None or not runtime.mark_stopped():
            return
        self._teardown()

    def _teardown(self) -> None:
        runtime = getattr(self, "runtime", None)
        if runtime is not None:
            runtime.stop()
            previous = getattr(self, "_previous_sigint", None)
            if (previous is not None and runtime.sigint_handler is not None
                    and threading.current_thread() is threading.main_thread()
                    and signal.getsignal(signal.SIGINT) is runtime.sigint_handler):
                signal.signal(signal.SIGINT, previous)
        with SparkContext._lock:
            if SparkContext._active_spark_context is self:
                SparkContext._active_spark_context = None
        if SparkFiles._sc is self:
            SparkFiles._root_directory = None
            SparkFiles._sc = None
        try:
            atexit.unregister(self._atexit_stop)
        except Exception:
            pass

    # --- properties ---------------------------------------------------------------------
    @property
    def version(self) -> str:
        return SPARK_VERSION

    @property
    def _temp_dir(self) -> str | None:
        """PySpark's: the driver's scratch directory (Ember's local dir)."""
        return self.runtime.local_dir

    @property
    def applicationId(self) -> str:
        return self.runtime.app_id

    @property
    def uiWebUrl(self) -> str | None:
        return self.runtime.ui_url

    @property
    def startTime(self) -> int:
        return self.runtime.start_time

    @property
    def defaultParallelism(self) -> int:
        dp = config.read(self._conf, "spark.default.parallelism")
        return dp if dp else self.runtime.scheduler_backend.default_parallelism()

    @property
    def defaultMinPartitions(self) -> int:
        return min(self.defaultParallelism, 2)

    @property
    def resources(self) -> dict:
        """The driver's custom resources: name -> ResourceInformation (PySpark's)."""
        return dict(self.runtime.driver_resources)

    @property
    def listFiles(self) -> list[str]:
        return list(self.runtime.added_files.values())

    @property
    def listArchives(self) -> list[str]:
        return list(self.runtime.added_archives.values())

    def getConf(self) -> SparkConf:
        return self._conf.copy()

    def sparkUser(self) -> str:
        return spark_user()

    def setLogLevel(self, logLevel: str) -> None:
        level = _LOG_LEVELS.get(logLevel.upper())
        if level is None:
            raise ValueError(f"Supplied level {logLevel} did not match one of: "
                             f"{','.join(sorted(_LOG_LEVELS))}")
        log.setLevel(level)

    @classmethod
    def setSystemProperty(cls, key: str, value: str) -> None:
        cls._system_properties[key] = value

    @classmethod
    def getSystemProperty(cls, key: str) -> str | None:
        return cls._system_properties.get(key)

    # --- creating RDDs ------------------------------------------------------------------
    def emptyRDD(self) -> RDD:
        from ember.rdd import EmptyRDD
        self.runtime.check_running()
        return EmptyRDD(self)

    def range(self, start: int, end: int | None = None, step: int = 1,
              numSlices: int | None = None) -> RDD:
        if end is None:
            end, start = start, 0
        return self.parallelize(range(start, end, step), numSlices)

    def parallelize(self, c: Iterable, numSlices: int | None = None) -> RDD:
        from ember.rdd import ParallelCollectionRDD
        from ember.rdd_sources import slice_collection
        from ember.serializers import PickleSerializer, dumps_closure
        self.runtime.check_running()
        n = self.defaultParallelism if numSlices is None else numSlices
        if not isinstance(c, (list, range)):
            c = list(c)
        slices = slice_collection(c, n)
        if isinstance(c, range):
            return ParallelCollectionRDD(self, slices)
        # Each slice is pickled here, once, as PySpark does when it hands the data to its
        # JVM: a job re-pickled every slice into every task before (190 ms of the driver's
        # CPU per job over a million pairs), and a cached partition is not unpickled again.
        ser = self.runtime.data_serializer
        if ser is not None:
            return self._parallelized([ser.dumps(list(s)) for s in slices], ser)

        def pickled(s: list) -> bytes:      # cloudpickle (and its error) only when needed
            try:
                return pickle.dumps(s, pickle.HIGHEST_PROTOCOL)
            except Exception:
                return dumps_closure(s)
        return self._parallelized([pickled(s) for s in slices], PickleSerializer())

    def _parallelized(self, blobs: list[bytes], ser: Any) -> RDD:
        """A slice of at least SLICE_FILE_BYTES goes into a file of its own
        (ember.rdd_sources.SliceFile): inside its tasks it cost every job over a cached
        RDD a copy through the task process's pipe (12 ms of a 14 ms count of a million
        cached pairs)."""
        from ember.rdd import ParallelCollectionRDD
        from ember.rdd_sources import SliceFile
        runtime = self.runtime
        files: list[int] = []
        for i, blob in enumerate(blobs):
            if len(blob) >= SLICE_FILE_BYTES:
                bid = runtime.new_broadcast_id()
                path = runtime.broadcast_path(bid)
                with open(path, "wb") as f:
                    f.write(blob)
                blobs[i] = SliceFile(bid, path)
                files.append(bid)
        rdd = ParallelCollectionRDD(self, blobs, ser)
        if runtime.cleaner is not None:
            for bid in files:
                runtime.cleaner.register_slice_file_for_cleanup(rdd, bid)
        return rdd

    def textFile(self, name: str, minPartitions: int | None = None,
                 use_unicode: bool = True) -> RDD:
        from ember.rdd import TextFileRDD
        self.runtime.check_running()
        return TextFileRDD(self, name, minPartitions or self.defaultMinPartitions, use_unicode)

    def wholeTextFiles(self, path: str, minPartitions: int | None = None,
                       use_unicode: bool = True) -> RDD:
        from ember.rdd import FileListRDD
        self.runtime.check_running()
        return FileListRDD(self, path, minPartitions or self.defaultMinPartitions, "text",
                           use_unicode)

    def binaryFiles(self, path: str, minPartitions: int | None = None) -> RDD:
        from ember.rdd import FileListRDD
        self.runtime.check_running()
        return FileListRDD(self, path, minPartitions or self.defaultMinPartitions, "binary")

    def binaryRecords(self, path: str, recordLength: int) -> RDD:
        from ember.rdd import FileListRDD
        self.runtime.check_running()
        if recordLength <= 0:
            raise ValueError(f"The record length must be positive, got {recordLength}")
        return FileListRDD(self, path, self.defaultMinPartitions, "records",
                           record_length=recordLength)

    def pickleFile(self, name: str, minPartitions: int | None = None) -> RDD:
        from ember.rdd import FileListRDD
        self.runtime.check_running()
        return FileListRDD(self, name, minPartitions or self.defaultMinPartitions, "pickle")

    def _checkpointFile(self, name: str, input_deserializer: Any = None) -> RDD:
        """The records of a checkpoint directory (rdd.getCheckpointFile()), one partition a
        part file, as PySpark's private reader (its deserializer argument is PySpark's)."""
        from ember.rdd import FileListRDD
        self.runtime.check_running()
        return FileListRDD(self, name, 0, "pickle")

    def union(self, rdds: list[RDD]) -> RDD:
        from ember.rdd import union_of
        self.runtime.check_running()
        if not rdds:
            raise ValueError("Union of an empty list of RDDs")
        if len(rdds) == 1:
            return rdds[0]
        return union_of(self, list(rdds))

    # --- Hadoop's input formats (ember.hadoop_io): SequenceFile, Text, KeyValueText ------
    def sequenceFile(self, path: str, keyClass: str | None = None,
                     valueClass: str | None = None, keyConverter: str | None = None,
                     valueConverter: str | None = None, minSplits: int | None = None,
                     batchSize: int = 0) -> RDD:
        """The (key, value) records of SequenceFiles, as the Python values Spark makes of
        their Writables; the classes come from the files (the arguments name them)."""
        return self._hadoop_file(path, "org.apache.hadoop.mapred.SequenceFileInputFormat",
                                 keyConverter, valueConverter, None, minSplits)

    def hadoopFile(self, path: str, inputFormatClass: str, keyClass: str, valueClass: str,
                   keyConverter: str | None = None, valueConverter: str | None = None,
                   conf: dict | None = None, batchSize: int = 0) -> RDD:
        return self._hadoop_file(path, inputFormatClass, keyConverter, valueConverter, conf)

    def newAPIHadoopFile(self, path: str, inputFormatClass: str, keyClass: str,
                         valueClass: str, keyConverter: str | None = None,
                         valueConverter: str | None = None, conf: dict | None = None,
                         batchSize: int = 0) -> RDD:
        return self._hadoop_file(path, inputFormatClass, keyConverter, valueConverter, conf,
                                 new_api=True)

    def hadoopRDD(self, inputFormatClass: str, keyClass: str, valueClass: str,
                  keyConverter: str | None = None, valueConverter: str | None = None,
                  conf: dict | None = None, batchSize: int = 0) -> RDD:
        """hadoopFile with the input path in the Hadoop configuration."""
        from ember.hadoop_io import input_dir
        return self._hadoop_file(input_dir(conf), inputFormatClass, keyConverter,
                                 valueConverter, conf)

    def newAPIHadoopRDD(self, inputFormatClass: str, keyClass: str, valueClass: str,
                        keyConverter: str | None = None, valueConverter: str | None = None,
                        conf: dict | None = None, batchSize: int = 0) -> RDD:
        from ember.hadoop_io import input_dir
        return self._hadoop_file(input_dir(conf), inputFormatClass, keyConverter,
                                 valueConverter, conf, new_api=True)

    def _hadoop_file(self, path: str, input_format: str, key_converter: str | None,
                     value_converter: str | None, conf: dict | None,
                     min_splits: int | None = None, new_api: bool = False) -> RDD:
        from ember import hadoop_io as hio
        from ember.rdd import HadoopFileRDD
        self.runtime.check_running()
        hio.refuse_converters(key_converter, value_converter)
        hio.check_format(input_format, hio.NEW_API if new_api else hio.OLD_API,
                         hio.INPUT_FORMATS, "input")
        return HadoopFileRDD(self, path, min_splits or self.defaultMinPartitions,
                             input_format, conf)

    # --- shared variables ---------------------------------------------------------------
    def broadcast(self, value: Any) -> Broadcast:
        self.runtime.check_running()
        return Broadcast(self, value, self._pickled_broadcast_vars)

    def accumulator(self, value: Any, accum_param: AccumulatorParam | None = None) -> Accumulator:
        if accum_param is None:
            if isinstance(value, bool) or not isinstance(value, (int, float, complex)):
                raise TypeError(f"No default accumulator param for type {type(value)}")
            accum_param = (INT_ACCUMULATOR_PARAM if isinstance(value, int) else
                           FLOAT_ACCUMULATOR_PARAM if isinstance(value, float) else
                           COMPLEX_ACCUMULATOR_PARAM)
        return Accumulator(new_accumulator_id(), value, accum_param)

    # --- files --------------------------------------------------------------------------
    def addFile(self, path: str, recursive: bool = False) -> None:
        self.runtime.check_running()
        if not fs.is_local(path):
            self._add_remote_file(path, recursive)
            return
        local = fs.local_path(path)
        if not os.path.exists(local):
            raise FileNotFoundError(f"File {path} does not exist")
        name = os.path.basename(local.rstrip("/"))
        if os.path.isdir(local) and not recursive:
            raise SparkException(f"Added file file:{local} is a directory and recursive is "
                                 "not turned on.")
        prev = self.runtime.added_files.get(name)
        if prev is not None and prev != "file:" + local:
            raise SparkException(f"File {name} was already registered with a different path "
                                 f"(old path = {prev}, new path = file:{local}")
        dest = os.path.join(self.runtime.files_dir, name)
        if os.path.isdir(local):
            shutil.copytree(local, dest, dirs_exist_ok=True)
        else:
            tmp = dest + ".tmp"
            shutil.copyfile(local, tmp)
            os.replace(tmp, dest)
        self.runtime.added_files[name] = "file:" + local

    def _add_remote_file(self, url: str, recursive: bool) -> None:
        """addFile of a URL: the driver downloads it once into its files dir, from where
        executors fetch it as they fetch local files."""
        filesystem, path = fs.filesystem(url)
        try:
            is_dir = filesystem.info(path).get("type") == "directory"
        except FileNotFoundError:
            raise FileNotFoundError(f"File {url} does not exist") from None
        if is_dir and not recursive:
            raise SparkException(f"Added file {url} is a directory and recursive is not "
                                 "turned on.")
        name = path.rstrip("/").rsplit("/", 1)[-1]
        prev = self.runtime.added_files.get(name)
        if prev is not None and prev != url:
            raise SparkException(f"File {name} was already registered with a different path "
                                 f"(old path = {prev}, new path = {url}")
        dest = os.path.join(self.runtime.files_dir, name)
        if is_dir:
            filesystem.get(path.rstrip("/") + "/", dest, recursive=True)
        else:
            tmp = dest + ".tmp"
            filesystem.get_file(path, tmp)
            os.replace(tmp, dest)
        self.runtime.added_files[name] = url

    def addPyFile(self, path: str) -> None:
        self.addFile(path)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        dest = os.path.join(self.runtime.files_dir, name)
        if name.lower().endswith(self.PACKAGE_EXTENSIONS + (".whl",)):
            if dest not in sys.path:
                sys.path.insert(1, dest)
        elif self.runtime.files_dir not in sys.path:
            sys.path.insert(1, self.runtime.files_dir)
        import importlib
        importlib.invalidate_caches()

    def addArchive(self, path: str) -> None:
        """Spark's: the archive (.zip, .jar, .tar.gz, .tgz, .tar; a local path or a URL) is
        unpacked into the files dir under its name, or the path's #fragment, and reaches
        every executor as that directory: SparkFiles.get(name) is where its contents are.
        The same path added again is ignored."""
        self.runtime.check_running()
        from ember.util.archives import unpack
        uri, _, fragment = path.partition("#")
        local = fs.local_path(uri) if fs.is_local(uri) else None
        key = ("file:" + os.path.abspath(local) if local is not None else uri) + \
            ("#" + fragment if fragment else "")
        name = fragment or uri.rstrip("/").rsplit("/", 1)[-1]
        archives = self.runtime.added_archives
        if key in archives.values():
            log.warning("The path %s has been added already. Overwriting of added paths is "
                        "not supported in the current version.", path)
            return
        prev = archives.get(name) or self.runtime.added_files.get(name)
        if prev is not None:
            raise SparkException(f"Archive {name} was already registered with a different "
                                 f"path (old path = {prev}, new path = {key}")
        dest = os.path.join(self.runtime.files_dir, name)
        if local is None:               # a URL: the driver downloads it once, to unpack it
            filesystem, remote = fs.filesystem(uri)
            local = os.path.join(self.runtime.local_dir, "archive-" + uuid.uuid4().hex + "-" +
                                 remote.rstrip("/").rsplit("/", 1)[-1])
            try:
                filesystem.get_file(remote, local)
                unpack(local, dest)
            except FileNotFoundError:
                raise FileNotFoundError(f"File {uri} does not exist") from None
            finally:
                unlink_quietly(local)
        elif not os.path.isfile(local):
            raise FileNotFoundError(f"File {uri} does not exist")
        else:
            unpack(local, dest)
        archives[name] = key

    def setCheckpointDir(self, dirName: str) -> None:
        base = fs.local_path(dirName) if fs.is_local(dirName) else dirName
        d = fs.join(base, str(uuid.uuid4()))
        fs.makedirs(d)
        self.runtime.checkpoint_dir = d

    def getCheckpointDir(self) -> str | None:
        return fs.display(self.runtime.checkpoint_dir) if self.runtime.checkpoint_dir else None

    # --- jobs ---------------------------------------------------------------------------
    def setLocalProperty(self, key: str, value: str | None) -> None:
        if value is None:
            self.runtime.local_properties().pop(key, None)
        else:
            self.runtime.local_properties()[key] = value

    def getLocalProperty(self, key: str) -> str | None:
        return self.runtime.local_properties().get(key)

    def setJobGroup(self, groupId: str, description: str, interruptOnCancel: bool = False) -> None:
        self.setLocalProperty("spark.jobGroup.id", groupId)
        self.setLocalProperty("spark.job.description", description)
        self.setLocalProperty("spark.job.interruptOnCancel", str(interruptOnCancel).lower())

    def setInterruptOnCancel(self, interruptOnCancel: bool) -> None:
        self.setLocalProperty("spark.job.interruptOnCancel", str(interruptOnCancel).lower())

    def setJobDescription(self, value: str) -> None:
        self.setLocalProperty("spark.job.description", value)

    def _tags(self) -> list[str]:
        tags = self.getLocalProperty("spark.job.tags")
        return [t for t in tags.split(",") if t] if tags else []

    def addJobTag(self, tag: str) -> None:
        if not tag or "," in tag:
            raise ValueError(f"Spark job tag cannot be empty or contain ',': {tag!r}")
        tags = self._tags()
        if tag not in tags:
            tags.append(tag)
        self.setLocalProperty("spark.job.tags", ",".join(tags))

    def removeJobTag(self, tag: str) -> None:
        self.setLocalProperty("spark.job.tags", ",".join(t for t in self._tags() if t != tag) or None)

    def getJobTags(self) -> set[str]:
        return set(self._tags())

    def clearJobTags(self) -> None:
        self.setLocalProperty("spark.job.tags", None)

    def cancelJobGroup(self, groupId: str) -> None:
        self.runtime.dag_scheduler.cancel_job_group(groupId)

    def cancelJobsWithTag(self, tag: str) -> None:
        self.runtime.dag_scheduler.cancel_jobs_with_tag(tag)

    def cancelAllJobs(self) -> None:
        self.runtime.dag_scheduler.cancel_all_jobs()

    def statusTracker(self) -> StatusTracker:
        from ember.status import StatusTracker
        return StatusTracker(self.runtime.status_store)

    def runJob(self, rdd: RDD, partitionFunc: Callable[[Iterable], Iterable],
               partitions: list[int] | None = None, allowLocal: bool = False) -> list:
        parts = self.runtime.run_job(rdd, lambda it: list(partitionFunc(it)), partitions)
        return [x for part in parts for x in part]

    def show_profiles(self) -> None:
        """Print the profiles of spark.python.profile (ember.profiler)."""
        self._profiles().show_profiles()

    def dump_profiles(self, path: str) -> None:
        """Write each profile to `path`/rdd_<id>.pstats."""
        self._profiles().dump_profiles(path)

    def _profiles(self) -> Any:
        if self.profiler_collector is None:
            raise PySparkRuntimeError(errorClass="INCORRECT_CONF_FOR_PROFILE",
                                      messageParameters={})
        return self.profiler_collector


class InheritableThread(threading.Thread):
    """A thread that runs with the local properties (job group, pool, ...) its creator had
    when it called start(), as PySpark's (`session`, PySpark's for Spark Connect's tags, is
    taken and has nothing to carry here)."""

    def __init__(self, target: Callable[..., Any], *args: Any, session: Any = None,
                 **kwargs: Any) -> None:
        self._props: dict[str, str] | None = None

        def copy_local_properties(*a: Any, **k: Any) -> Any:
            sc = SparkContext._active_spark_context
            if sc is not None and self._props is not None:
                sc.runtime.set_local_properties(dict(self._props))
            return target(*a, **k)
        super().__init__(target=copy_local_properties, *args, **kwargs)

    def start(self) -> None:
        sc = SparkContext._active_spark_context
        self._props = dict(sc.runtime.local_properties()) if sc is not None else None
        super().start()


def inheritable_thread_target(f: Any = None) -> Callable[..., Any]:
    """`f` wrapped to run with the local properties of the thread that wrapped it; given a
    SparkSession instead (PySpark's form for Spark Connect), a decorator that does that."""
    if not callable(f):       # None, or the session
        return inheritable_thread_target
    sc = SparkContext._active_spark_context
    props = dict(sc.runtime.local_properties()) if sc is not None else None

    @functools.wraps(f)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if props is not None and SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.runtime.set_local_properties(dict(props))
        return f(*args, **kwargs)
    return wrapped
