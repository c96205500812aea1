"""SparkContext: the driver runtime an application talks to (PySpark's API, no JVM).

Creating one builds the pipeline SparkContext → DAGScheduler → TaskSchedulerImpl → backend
(local task processes, or a standalone cluster) and a scratch directory for shuffle files,
spills, cached blocks, broadcasts and added files, removed again by stop().
"""
from __future__ import annotations

import atexit
import getpass
import logging
import os
import pickle
import re
import shutil
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Callable, Iterable

from typing import TYPE_CHECKING

from ember import __version__, config, fs
from ember.accumulators import (COMPLEX_ACCUMULATOR_PARAM, FLOAT_ACCUMULATOR_PARAM,
                                INT_ACCUMULATOR_PARAM, Accumulator, AccumulatorParam,
                                new_accumulator_id)
from ember.broadcast import Broadcast
from ember.conf import SparkConf
from ember.errors import PySparkRuntimeError, SparkException
from ember.files import SparkFiles

if TYPE_CHECKING:
    from ember.rdd import RDD
    from ember.scheduler.task import TaskLocation
    from ember.status import StatusTracker

# The scheduler, RDD and serialization modules are imported inside SparkContext() right
# after the fork server has been started, so that both processes import in parallel:
# that overlap is most of a cold start.

log = logging.getLogger("ember")

SPARK_VERSION = __version__     # PySpark's sc.version and pyspark.__version__ agree too
# PySpark's DEFAULT_CONFIGS, set on every context's conf when absent
_DEFAULT_CONFIGS = {"spark.serializer.objectStreamReset": 100, "spark.rdd.compress": True,
                    "spark.sql.artifact.isolation.enabled": "false"}
_LOG_LEVELS = {"ALL": logging.NOTSET, "DEBUG": logging.DEBUG, "ERROR": logging.ERROR,
               "FATAL": logging.CRITICAL, "INFO": logging.INFO, "OFF": logging.CRITICAL + 10,
               "TRACE": logging.DEBUG, "WARN": logging.WARNING}
_LOCAL_RE = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*(\d+)\s*)?\])?")
# Spark's SparkMasterRegex.LOCAL_CLUSTER_REGEX: local-cluster[workers, coresPerWorker, MiBPerWorker]
_LOCAL_CLUSTER_RE = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*]")


def _setup_logging() -> None:
    if not logging.getLogger().handlers and not log.handlers:
        h = logging.StreamHandler(sys.stderr)
        h.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s",
                                         "%y/%m/%d %H:%M:%S"))
        log.addHandler(h)
        log.setLevel(logging.WARNING)
        log.propagate = False


def parse_local_master(master: str) -> tuple[int, int] | None:
    """(threads, maxFailures) for local, local[N], local[*], local[N,F]; None otherwise."""
    m = _LOCAL_RE.fullmatch(master.strip())
    if not m:
        return None
    n = m.group(1)
    threads = 1 if n is None else (os.cpu_count() or 1) if n == "*" else int(n)
    failures = int(m.group(2)) if m.group(2) else 1
    if threads < 1:
        raise SparkException(f"Asked to run locally with {threads} threads")
    return threads, failures


_NOT_FOR_LOCAL_CLUSTER_DAEMONS = ("spark.master", "spark.app.", "spark.driver.", "spark.submit.",
                                  "spark.authenticate.secret")


def parse_local_cluster_master(master: str) -> tuple[int, int, int] | None:
    """(workers, cores per worker, MiB per worker) of local-cluster[N,C,M]; None otherwise."""
    m = _LOCAL_CLUSTER_RE.fullmatch(master)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


class SparkContext:
    """Main entry point for Ember functionality (PySpark's pyspark.SparkContext)."""

    _active_spark_context: "SparkContext | None" = None
    _lock = threading.RLock()
    _system_properties: dict[str, str] = {}

    def __init__(self, master: str | None = None, appName: str | None = None,
                 sparkHome: str | None = None, pyFiles: list[str] | None = None,
                 environment: dict[str, str] | None = None, batchSize: int = 0,
                 serializer: Any = None, conf: SparkConf | None = None, gateway: Any = None,
                 jsc: Any = None, profiler_cls: Any = None, udf_profiler_cls: Any = None,
                 memory_profiler_cls: Any = None) -> None:
        _setup_logging()
        self._stopped = True
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
                          serializer, conf)
        except BaseException:
            self._teardown()
            raise

    def _do_init(self, master: str | None, appName: str | None, sparkHome: str | None,
                 pyFiles: list[str] | None, environment: dict[str, str] | None,
                 batchSize: int, serializer: Any, conf: SparkConf | None) -> None:
        self._conf = conf.copy() if conf is not None else SparkConf()
        if master:
            self._conf.setMaster(master)
        if appName:
            self._conf.setAppName(appName)
        if sparkHome:
            self._conf.setSparkHome(sparkHome)
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
            raise PySparkRuntimeError("MASTER_URL_NOT_SET",
                                      "A master URL must be set in your configuration.")
        if not self._conf.contains("spark.app.name"):
            raise PySparkRuntimeError("APPLICATION_NAME_NOT_SET",
                                      "An application name must be set in your configuration.")
        self.environment: dict[str, str] = {
            k[len("spark.executorEnv."):]: v for k, v in self._conf.getAll()
            if k.startswith("spark.executorEnv.")}
        self.environment["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
        self._fork_client = None
        if parse_local_master(self._conf.get("spark.master") or "") is not None:
            # start the fork server first: it imports Ember while this process does too
            from ember.executor.fork_client import ForkServerClient, task_process_env
            self._fork_client = ForkServerClient(task_process_env(self.environment))
            self._fork_client.start()
        from ember.rdd import call_site
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
        self.serializer = (AutoBatchedSerializer(self._unbatched_serializer) if batchSize == 0
                           else BatchedSerializer(self._unbatched_serializer, batchSize))
        # A serializer the engine's own pickling does not already match carries the data:
        # parallelized collections, shuffle blocks and the results tasks return (PySpark
        # ships every record through it; Ember keeps its pickle fast path for pickle).
        self._data_serializer = None if type(self._unbatched_serializer) in (
            PickleSerializer, CloudPickleSerializer) else self._unbatched_serializer
        self.batchSize = batchSize
        self.pythonExec = sys.executable
        self.pythonVer = "%d.%d" % sys.version_info[:2]
        self._start_time = int(time.time() * 1000)
        self._local = threading.local()
        self._next_rdd_id = 0
        self._next_shuffle_id = 0
        self._next_bid = 0
        self._id_lock = threading.Lock()
        self._checkpoint_dir: str | None = None
        fs.configure(self._conf)          # s3a endpoint and keys for this driver's paths
        self._python_worker_memory_mb: int = config.read(self._conf, "spark.python.worker.memory")

        root = self._conf.get("spark.local.dir") or os.environ.get("SPARK_LOCAL_DIRS") \
            or tempfile.gettempdir()
        base = root.split(",")[0]
        os.makedirs(base, exist_ok=True)
        self._local_dir = tempfile.mkdtemp(prefix="ember-", dir=base)
        self._spill_dirs = [os.path.join(self._local_dir, "spill")]
        self._broadcast_dir = os.path.join(self._local_dir, "broadcast")
        self._files_dir = os.path.join(self._local_dir, "userFiles-" + uuid.uuid4().hex[:12])
        for d in (self._spill_dirs[0], self._broadcast_dir, self._files_dir):
            os.makedirs(d, exist_ok=True)
        SparkFiles._root_directory = self._files_dir
        SparkFiles._is_running_on_worker = False
        SparkFiles._sc = self
        self._added_files: dict[str, str] = {}

        from ember.scheduler.listener import ListenerBus
        from ember.scheduler.map_output_tracker import MapOutputTracker
        from ember.status import StatusStore
        from ember.storage.block_manager_master import BlockManagerMaster
        self._bus = ListenerBus(
            config.read(self._conf, "spark.scheduler.listenerbus.eventqueue.capacity"))
        self._status_store = StatusStore()
        self._bus.add_sync(self._status_store)
        self._start_ui_and_event_log()
        self._block_master = BlockManagerMaster(self._bus)
        self._tracker = MapOutputTracker()
        self._setup_resources()
        self._create_scheduler()
        self._post_application_start()
        self._stopped = False
        self._progress_bar = None
        if config.read(self._conf, "spark.ui.showConsoleProgress") and sys.stderr.isatty():
            from ember.scheduler.progress import ConsoleProgressBar
            self._progress_bar = ConsoleProgressBar(self._status_store)
            self._progress_bar.start()
        for path in pyFiles or []:
            self.addPyFile(path)
        for path in (self._conf.get("spark.submit.pyFiles") or "").split(","):
            if path:
                self.addPyFile(path)
        for path in (self._conf.get("spark.files") or "").split(","):
            if path:
                self.addFile(path)
        atexit.register(self._atexit_stop)

    def _setup_resources(self) -> None:
        """The driver's own custom resources (spark.driver.resource.*, Spark's
        spark.driver.resourcesFile) and the application's resource profiles."""
        from ember.deploy.resources import ResourceError, get_or_discover_all_resources
        from ember.scheduler.resource_profiles import ResourceProfileManager
        conf = dict(self._conf.getAll())
        try:
            self._driver_resources = get_or_discover_all_resources(
                conf, "spark.driver", conf.get("spark.driver.resourcesFile"))
        except ResourceError as e:
            raise SparkException(str(e)) from None
        self._resource_profile_manager = ResourceProfileManager(conf, self.master, self._bus)

    def _create_scheduler(self) -> None:
        local = parse_local_master(self.master)
        local_cluster = parse_local_cluster_master(self.master)
        if local is None and local_cluster is None and not self.master.startswith("spark://"):
            raise SparkException(f"Could not parse Master URL: '{self.master}'")
        from ember.scheduler.dag_scheduler import DAGScheduler
        from ember.scheduler.task_scheduler import TaskSchedulerImpl
        from ember.shuffle.writer import ShuffleWriteFunc
        from ember.scheduler.event_loop import EventLoop
        if local is not None:
            threads, max_failures = local
        else:
            threads, max_failures = 0, config.read(self._conf, "spark.task.maxFailures")
        from ember.clock import SystemClock
        from ember.errors import IllegalArgumentException
        from ember.scheduler.health_tracker import ExcludeSettings, HealthTracker
        from ember.scheduler.speculation import SpeculationSettings
        try:
            exclude = ExcludeSettings.from_conf(self._conf)
        except ValueError as e:
            raise IllegalArgumentException(str(e)) from None
        clock = SystemClock()
        health_tracker = None if exclude is None else HealthTracker(
            exclude, clock, self._bus.post,
            shuffle_service_enabled=config.read(self._conf, "spark.shuffle.service.enabled"))
        # Spark speculates only on clusters: one local "host" never runs two attempts
        speculation = None if local is not None else SpeculationSettings.from_conf(self._conf)
        sched = TaskSchedulerImpl(
            max_failures, config.read(self._conf, "spark.scheduler.mode"),
            self._conf.get("spark.scheduler.allocation.file"), self._bus, self._block_master,
            config.read(self._conf, "spark.ember.worker.maxCrashes"),
            config.read(self._conf, "spark.locality.wait"),
            config.read(self._conf, "spark.barrier.sync.timeout"),
            clock, speculation, health_tracker)
        sched.rp_manager = self._resource_profile_manager
        backend: Any
        if local is not None:
            from ember.executor.backend import pyspark_worker_memory_mb
            from ember.scheduler.local_backend import LocalSchedulerBackend
            from ember.shuffle.crypto import IO_ENCRYPTION, new_key_hex
            storage = config.read(self._conf, "spark.ember.storage.memory")
            if storage is None:
                mem = config.read(self._conf, "spark.driver.memory")
                storage = max(32, int((mem - 300) *
                                      config.read(self._conf, "spark.memory.fraction")))
                storage = storage // threads
            dp = self._conf.get("spark.default.parallelism")
            self._loop = EventLoop("dag-scheduler-event-loop")
            backend = LocalSchedulerBackend(
                sched, threads, self._local_dir, self._python_worker_memory_mb, storage << 20,
                self._files_dir, dict(self.environment),
                config.read(self._conf, "spark.python.task.killTimeout"),
                int(dp) if dp else None, self._loop, self._fork_client,
                fs_conf=fs.hadoop_conf(self._conf),
                pyspark_memory_mb=pyspark_worker_memory_mb(dict(self._conf.getAll())),
                # spark.io.encryption.enabled: a key for this application's shuffle files
                io_key=bytes.fromhex(new_key_hex()) if self._conf.get(IO_ENCRYPTION, "false")
                .strip().lower() == "true" else None)
            from ember.scheduler.local_backend import EXECUTOR_ID
            # Spark's local mode: tasks take their cores and the driver's resources
            sched.register_executor_resources(EXECUTOR_ID, threads, {
                n: list(i.addresses) for n, i in self._driver_resources.items()})
        else:
            from ember.scheduler.standalone_backend import StandaloneSchedulerBackend
            master_url = self.master
            if local_cluster is not None:
                master_url = self._start_local_cluster(*local_cluster)
            backend = StandaloneSchedulerBackend(self, sched, master_url)
            self._loop = backend.loop       # the scheduler runs on the RPC loop
        dag = DAGScheduler(sched, self._bus, self._tracker, self._cache_locations,
                           self._serialize_stage, ShuffleWriteFunc.for_dependency,
                           config.read(self._conf, "spark.stage.maxConsecutiveAttempts"),
                           loop=self._loop,
                           barrier_check_interval=config.read(
                               self._conf,
                               "spark.scheduler.barrier.maxConcurrentTasksCheck.interval"),
                           barrier_check_max_failures=config.read(
                               self._conf,
                               "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"),
                           dynamic_allocation=local is None and config.read(
                               self._conf, "spark.dynamicAllocation.enabled"),
                           shuffle_service_enabled=local is None and
                           config.read(self._conf, "spark.shuffle.service.enabled"))
        sched.initialize(backend, dag)
        if health_tracker is not None:
            health_tracker.kill_executors = getattr(backend, "kill_executors", None)
            health_tracker.kill_executors_on_host = getattr(backend, "kill_executors_on_host",
                                                            None)
        self._task_scheduler = sched
        self._backend = backend
        self._dag = dag
        self._loop.start()
        backend.start()
        sched.start_speculation()
        self._app_id = backend.application_id() if local is None else f"local-{self._start_time}"
        if local is not None:       # Spark's LocalSchedulerBackend announces its executor
            from ember.scheduler.listener import ExecutorAdded
            from ember.scheduler.local_backend import EXECUTOR_ID, HOST
            self._bus.post(ExecutorAdded(EXECUTOR_ID, HOST, threads))

    def _start_local_cluster(self, workers: int, cores: int, memory_mb: int) -> str:
        """Spark's test master: a real master and `workers` workers on 127.0.0.1 as child
        processes of this driver, stopped with it; returns the master's spark:// URL."""
        executor_cores = int(self._conf.get("spark.executor.cores") or cores)
        task_cpus = int(self._conf.get("spark.task.cpus") or 1)
        if executor_cores < task_cpus:
            raise SparkException(f"The number of cores per executor (={executor_cores}) has to "
                                 f"be >= the number of cpus per task = {task_cpus}.")
        executor_mb = config.read(self._conf, "spark.executor.memory")
        if executor_mb > memory_mb:
            raise SparkException("Asked to launch cluster with %d MiB/worker but requested %d "
                                 "MiB/executor" % (memory_mb, executor_mb))
        from ember.deploy.local_cluster import LocalCluster
        from ember.rpc.config import ENV_AUTH_SECRET
        # the daemons get the application's configuration, as Spark's LocalSparkCluster
        # does (so spark.worker.* and authentication apply to them); never the secret on a
        # command line: it goes in their environment
        conf = {k: v for k, v in self._conf.getAll()
                if not k.startswith(_NOT_FOR_LOCAL_CLUSTER_DAEMONS)}
        secret = self._conf.get("spark.authenticate.secret")
        self._local_cluster = LocalCluster(os.path.join(self._local_dir, "local-cluster"),
                                           workers, cores, f"{memory_mb}m", conf,
                                           {ENV_AUTH_SECRET: secret} if secret else None,
                                           die_with_parent=True)
        self._local_cluster.start(timeout=60)
        return self._local_cluster.url

    def _start_ui_and_event_log(self) -> None:
        """Before the scheduler: the UI's URL goes into the app's registration with a master,
        and the UI and the log must see the first executors register. Spark fails start-up
        when the UI port or the event log directory is unusable; so do we. Both live in the
        driver's UI process (ember.ui.ui_process), fed by the bus."""
        self._event_log = self._ui_process = self._ui_url = None
        sock = redirect = None
        if config.read(self._conf, "spark.eventLog.enabled"):
            from ember.ui.event_log import EventLog
            self._event_log = EventLog(self._conf)
        if config.read(self._conf, "spark.ui.enabled"):
            from ember.ui.spark_ui import bind_ui
            sock, self._ui_url, redirect = bind_ui(self._conf)
        if self._event_log is not None or sock is not None:
            from ember.ui.ui_process import UiProcess
            try:
                self._ui_process = UiProcess(self._conf, sock, self._event_log is not None,
                                             redirect)
            finally:
                for s in (sock, redirect):
                    if s is not None:
                        s.close()
            self._bus.add(self._ui_process)

    def _post_application_start(self) -> None:
        from ember.scheduler.listener import ApplicationStart, EnvironmentUpdate
        if self._event_log is not None:
            self._ui_process.open_log(self._event_log.start(self._app_id))
        if self._ui_process is not None:
            self._bus.post(EnvironmentUpdate(self._environment_details()))
            self._bus.post(ApplicationStart(self.appName, self._app_id,
                                            self._start_time / 1000, self.sparkUser()))

    def _environment_details(self) -> dict[str, list[tuple[str, str]]]:
        """The Environment tab's sections; values of keys matching spark.redaction.regex are
        hidden, as Spark's Utils.redact does."""
        props = dict(self._conf.getAll())
        props["spark.app.id"] = self._app_id
        props["spark.app.startTime"] = str(self._start_time)
        return {"JVM Information": [("Python Version", sys.version.split()[0]),
                                    ("Python Executable", sys.executable)],
                "Spark Properties": config.redact(self._conf, props.items()),
                "Hadoop Properties": [],
                "System Properties": config.redact(
                    self._conf,
                    [("user.name", self.sparkUser()), ("user.dir", os.getcwd()),
                     ("os.name", sys.platform), ("ember.home", os.path.dirname(__file__))] +
                    list(self._system_properties.items())),
                "Metrics Properties": [],
                "Classpath Entries": [(p, "System Classpath") for p in sys.path if p]}

    # --- internals used by RDDs and the scheduler ---------------------------------------
    def _new_rdd_id(self) -> int:
        with self._id_lock:
            self._next_rdd_id += 1
            return self._next_rdd_id - 1

    def _new_shuffle_id(self) -> int:
        with self._id_lock:
            self._next_shuffle_id += 1
            return self._next_shuffle_id - 1

    def _next_broadcast_id(self) -> int:
        with self._id_lock:
            self._next_bid += 1
            return self._next_bid - 1

    def _cache_locations(self, rdd_id: int, partition: int) -> list[TaskLocation]:
        from ember.scheduler.task import TaskLocation
        return [TaskLocation(b.host, b.executor_id, b.slot if b.where == "memory" else None)
                for b in self._block_master.locations(rdd_id, partition)]

    @staticmethod
    def _serialize_stage(kind: str, rdd: RDD, func: Any) -> bytes:
        from ember.dependency import ShuffleDependency
        from ember.rdd import _pickle_scope
        from ember.serializers import dumps_closure
        ids: set[int] = set()
        stack = [rdd]
        while stack:
            r = stack.pop()
            if r._id in ids:
                continue
            ids.add(r._id)
            stack.extend(d.rdd for d in r.dependencies() if not isinstance(d, ShuffleDependency))
        _pickle_scope.ids = ids
        try:
            return dumps_closure((kind, rdd, func))
        finally:
            _pickle_scope.ids = None

    def _check_running(self) -> None:
        if self._stopped:
            raise PySparkRuntimeError("SPARK_CONTEXT_STOPPED",
                                      "Cannot call methods on a stopped SparkContext.")

    def _run_job(self, rdd: RDD, func: Callable, partitions: list[int] | None = None,
                 with_context: bool = False) -> list:
        """Run func over partitions of rdd; a list with one result per partition."""
        from ember.rdd import call_site
        self._check_running()
        lineage = rdd._lineage()
        for r in lineage:                  # surfaces input errors here, in the caller
            r.partitions()
        if partitions is None:
            partitions = list(range(rdd.getNumPartitions()))
        results: list = [None] * len(partitions)
        ser = self._data_serializer

        def handler(index: int, data: bytes) -> None:
            value = pickle.loads(data)
            results[index] = value if ser is None else ser.loads(value)

        if with_context:
            run = func
        else:
            def run(ctx: Any, it: Iterable) -> Any:
                return func(it)
        if ser is None:
            task_func = run
        else:
            def task_func(ctx: Any, it: Iterable) -> Any:
                return ser.dumps(run(ctx, it))
        props = dict(self._props())
        if self._added_files:      # executors fetch what they lack; "name/" is a directory
            props["spark.ember.files"] = ",".join(
                n + "/" if os.path.isdir(os.path.join(self._files_dir, n)) else n
                for n in self._added_files)
        waiter = self._dag.submit_job(rdd, task_func, partitions, call_site(), handler, props)
        try:
            waiter.wait()
        except KeyboardInterrupt:
            waiter.cancel()
            raise
        if any(r._checkpoint_requested and r._checkpoint_dir is None or
               (r._local_checkpointed and not r._truncated) for r in lineage):
            rdd._do_checkpoint()
        return results

    def _unpersist_rdd(self, rdd_id: int) -> None:
        if self._stopped:
            return
        from ember.scheduler.listener import UnpersistRDD
        self._backend.unpersist_rdd(rdd_id)
        self._block_master.remove_rdd(rdd_id)
        self._bus.post(UnpersistRDD(rdd_id))
        block_dir = os.path.join(self._local_dir, "blocks")
        if os.path.isdir(block_dir):
            for f in os.listdir(block_dir):
                if f.startswith(f"rdd_{rdd_id}_"):
                    try:
                        os.unlink(os.path.join(block_dir, f))
                    except OSError:
                        pass

    def _unpersist_broadcast(self, bid: int) -> None:
        if not self._stopped:
            self._backend.unpersist_broadcast(bid)

    def _remove_shuffle(self, shuffle_id: int) -> None:
        for path in self._tracker.output_files(shuffle_id):
            try:
                os.unlink(path)
            except OSError:
                pass
        self._tracker.unregister_shuffle(shuffle_id)

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

    def stop(self) -> None:
        with SparkContext._lock:
            if self._stopped:
                return
            self._stopped = True
        self._teardown()

    def _teardown(self) -> None:
        ui_process = getattr(self, "_ui_process", None)
        dag = getattr(self, "_dag", None)
        if dag is not None:
            done = threading.Event()
            dag.post(dag.handle_shutdown)
            dag.post(done.set)
            done.wait(10)
        if getattr(self, "_app_id", None) is not None and ui_process is not None:
            from ember.scheduler.listener import ApplicationEnd
            self._bus.post(ApplicationEnd(time.time()))
        if getattr(self, "_progress_bar", None) is not None:
            self._progress_bar.stop()
        if getattr(self, "_task_scheduler", None) is not None:
            self._task_scheduler.stop()
        backend = getattr(self, "_backend", None)
        if backend is not None:
            backend.stop()
        elif getattr(self, "_fork_client", None) is not None:
            self._fork_client.stop()        # init failed after the fork server started
        if getattr(self, "_local_cluster", None) is not None:
            self._local_cluster.stop()      # after the backend: executors end first
        loop = getattr(self, "_loop", None)
        if loop is not None:
            loop.stop()
        bus = getattr(self, "_bus", None)
        if bus is not None:
            bus.stop()
        if ui_process is not None:
            ui_process.close()
        if getattr(self, "_event_log", None) is not None:
            self._event_log.finish()
        local_dir = getattr(self, "_local_dir", None)
        if local_dir:
            shutil.rmtree(local_dir, ignore_errors=True)
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
    def applicationId(self) -> str:
        return self._app_id

    @property
    def uiWebUrl(self) -> str | None:
        return getattr(self, "_ui_url", None)

    @property
    def startTime(self) -> int:
        return self._start_time

    @property
    def defaultParallelism(self) -> int:
        dp = self._conf.get("spark.default.parallelism")
        return int(dp) if dp else self._backend.default_parallelism()

    @property
    def defaultMinPartitions(self) -> int:
        return min(self.defaultParallelism, 2)

    @property
    def resources(self) -> dict:
        """The driver's custom resources: name -> ResourceInformation (PySpark's)."""
        return dict(self._driver_resources)

    @property
    def listFiles(self) -> list[str]:
        return list(self._added_files.values())

    @property
    def listArchives(self) -> list[str]:
        return []

    def getConf(self) -> SparkConf:
        return self._conf.copy()

    def sparkUser(self) -> str:
        return os.environ.get("SPARK_USER") or getpass.getuser()

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
        self._check_running()
        return EmptyRDD(self)

    def range(self, start: int, end: int | None = None, step: int = 1,
              numSlices: int | None = None) -> RDD:
        if end is None:
            end, start = start, 0
        return self.parallelize(range(start, end, step), numSlices)

    def parallelize(self, c: Iterable, numSlices: int | None = None) -> RDD:
        from ember.rdd import ParallelCollectionRDD
        from ember.rdd_sources import slice_collection
        self._check_running()
        n = self.defaultParallelism if numSlices is None else numSlices
        if not isinstance(c, (list, range)):
            c = list(c)
        slices = slice_collection(c, n)
        ser = self._data_serializer
        if ser is None or isinstance(c, range):
            return ParallelCollectionRDD(self, slices)
        return ParallelCollectionRDD(self, [ser.dumps(list(s)) for s in slices], ser)

    def textFile(self, name: str, minPartitions: int | None = None,
                 use_unicode: bool = True) -> RDD:
        from ember.rdd import TextFileRDD
        self._check_running()
        return TextFileRDD(self, name, minPartitions or self.defaultMinPartitions, use_unicode)

    def wholeTextFiles(self, path: str, minPartitions: int | None = None,
                       use_unicode: bool = True) -> RDD:
        from ember.rdd import FileListRDD
        self._check_running()
        return FileListRDD(self, path, minPartitions or self.defaultMinPartitions, "text",
                           use_unicode)

    def binaryFiles(self, path: str, minPartitions: int | None = None) -> RDD:
        from ember.rdd import FileListRDD
        self._check_running()
        return FileListRDD(self, path, minPartitions or self.defaultMinPartitions, "binary")

    def binaryRecords(self, path: str, recordLength: int) -> RDD:
        from ember.rdd import FileListRDD
        self._check_running()
        if recordLength <= 0:
            raise ValueError(f"The record length must be positive, got {recordLength}")
        return FileListRDD(self, path, self.defaultMinPartitions, "records",
                           record_length=recordLength)

    def pickleFile(self, name: str, minPartitions: int | None = None) -> RDD:
        from ember.rdd import FileListRDD
        self._check_running()
        return FileListRDD(self, name, minPartitions or self.defaultMinPartitions, "pickle")

    def union(self, rdds: list[RDD]) -> RDD:
        from ember.rdd import union_of
        self._check_running()
        if not rdds:
            raise ValueError("Union of an empty list of RDDs")
        if len(rdds) == 1:
            return rdds[0]
        return union_of(self, list(rdds))

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("Hadoop input formats are not supported by Ember")

    sequenceFile = newAPIHadoopFile = newAPIHadoopRDD = hadoopFile = hadoopRDD = _unsupported

    # --- shared variables ---------------------------------------------------------------
    def broadcast(self, value: Any) -> Broadcast:
        self._check_running()
        return Broadcast(self, value)

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
        self._check_running()
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
        prev = self._added_files.get(name)
        if prev is not None and prev != "file:" + local:
            raise SparkException(f"File {name} was already registered with a different path "
                                 f"(old path = {prev}, new path = file:{local}")
        dest = os.path.join(self._files_dir, name)
        if os.path.isdir(local):
            shutil.copytree(local, dest, dirs_exist_ok=True)
        else:
            tmp = dest + ".tmp"
            shutil.copyfile(local, tmp)
            os.replace(tmp, dest)
        self._added_files[name] = "file:" + local

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
        prev = self._added_files.get(name)
        if prev is not None and prev != url:
            raise SparkException(f"File {name} was already registered with a different path "
                                 f"(old path = {prev}, new path = {url}")
        dest = os.path.join(self._files_dir, name)
        if is_dir:
            filesystem.get(path.rstrip("/") + "/", dest, recursive=True)
        else:
            tmp = dest + ".tmp"
            filesystem.get_file(path, tmp)
            os.replace(tmp, dest)
        self._added_files[name] = url

    def addPyFile(self, path: str) -> None:
        self.addFile(path)
        name = path.rstrip("/").rsplit("/", 1)[-1]
        dest = os.path.join(self._files_dir, name)
        if name.endswith((".zip", ".egg", ".jar", ".whl")):
            if dest not in sys.path:
                sys.path.insert(1, dest)
        elif self._files_dir not in sys.path:
            sys.path.insert(1, self._files_dir)
        import importlib
        importlib.invalidate_caches()

    def addArchive(self, path: str) -> None:
        raise NotImplementedError("Archives are not supported by Ember; use addFile")

    def setCheckpointDir(self, dirName: str) -> None:
        base = fs.local_path(dirName) if fs.is_local(dirName) else dirName
        d = fs.join(base, str(uuid.uuid4()))
        fs.makedirs(d)
        self._checkpoint_dir = d

    def getCheckpointDir(self) -> str | None:
        return fs.display(self._checkpoint_dir) if self._checkpoint_dir else None

    # --- jobs ---------------------------------------------------------------------------
    def _props(self) -> dict[str, str]:
        """This thread's job properties. As in PySpark's (default) pinned-thread mode, a new
        thread starts with none; InheritableThread copies its creator's."""
        props = getattr(self._local, "props", None)
        if props is None:
            props = self._local.props = {}
        return props

    def setLocalProperty(self, key: str, value: str | None) -> None:
        if value is None:
            self._props().pop(key, None)
        else:
            self._props()[key] = value

    def getLocalProperty(self, key: str) -> str | None:
        return self._props().get(key)

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
        self._dag.cancel_job_group(groupId)

    def cancelJobsWithTag(self, tag: str) -> None:
        self._dag.cancel_jobs_with_tag(tag)

    def cancelAllJobs(self) -> None:
        self._dag.cancel_all_jobs()

    def statusTracker(self) -> StatusTracker:
        from ember.status import StatusTracker
        return StatusTracker(self._status_store)

    def runJob(self, rdd: RDD, partitionFunc: Callable[[Iterable], Iterable],
               partitions: list[int] | None = None, allowLocal: bool = False) -> list:
        parts = self._run_job(rdd, lambda it: list(partitionFunc(it)), partitions)
        return [x for part in parts for x in part]

    def show_profiles(self) -> None:
        raise NotImplementedError("Profilers are not supported by Ember")

    dump_profiles = show_profiles


class InheritableThread(threading.Thread):
    """A thread that starts with its creator's local properties (job group, pool, ...)."""

    def __init__(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        sc = SparkContext._active_spark_context
        props = dict(sc._props()) if sc is not None else {}

        def copy_local_properties(*a: Any, **k: Any) -> Any:
            if sc is not None:
                sc._local.props = dict(props)
            return target(*a, **k)
        super().__init__(target=copy_local_properties, *args, **kwargs)


def inheritable_thread_target(f: Callable[..., Any]) -> Callable[..., Any]:
    sc = SparkContext._active_spark_context
    props = dict(sc._props()) if sc is not None else {}

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        if sc is not None:
            sc._local.props = dict(props)
        return f(*args, **kwargs)
    return wrapped
