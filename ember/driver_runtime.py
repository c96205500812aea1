"""The driver's runtime: what Spark keeps in SparkEnv and in SparkContext's private fields.

SparkContext (ember.context) is PySpark's API and nothing else; this module wires the
listener bus, status store, UI process and event log, the map output tracker and block
manager master, the DAG and task schedulers, the backend (local task processes or a
standalone cluster) and the application's scratch directories, and tears them down in
order. Backends, RDDs, broadcasts and the UI reach the driver through the public members
here (`sc.runtime`), never through SparkContext's private fields.
"""
from __future__ import annotations

import _signal      # getsignal without signal's enum wrapping (2 us a call)
import getpass
import logging
import os
import pickle
import re
import shutil
import signal
import sys
import tempfile
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Callable

from ember import config, fs, redaction
from ember.call_site import call_site
from ember.conf import SparkConf
from ember.errors import PySparkRuntimeError, SparkException
from ember.scheduler.task_function import SerializedResult, WithoutContext
from ember.storage.block_manager import is_block_file_of
from ember.util.files import unlink_quietly

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from ember.rdd import RDD
    from ember.scheduler.task import TaskLocation

_LOCAL_RE = re.compile(r"local(?:\[\s*(\*|\d+)\s*(?:,\s*(\d+)\s*)?\])?")
# Spark's SparkMasterRegex.LOCAL_CLUSTER_REGEX: local-cluster[workers, coresPerWorker, MiBPerWorker]
_LOCAL_CLUSTER_RE = re.compile(r"local-cluster\[\s*([0-9]+)\s*,\s*([0-9]+)\s*,\s*([0-9]+)\s*]")
# keys a local-cluster's daemons do not inherit from the application's configuration
_NOT_FOR_LOCAL_CLUSTER_DAEMONS = ("spark.master", "spark.app.", "spark.driver.", "spark.submit.",
                                  "spark.authenticate.secret")


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


def parse_local_cluster_master(master: str) -> tuple[int, int, int] | None:
    """(workers, cores per worker, MiB per worker) of local-cluster[N,C,M]; None otherwise."""
    m = _LOCAL_CLUSTER_RE.fullmatch(master)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def spark_user() -> str:
    """Spark's Utils.getCurrentUserName: SPARK_USER, else the login name."""
    return os.environ.get("SPARK_USER") or getpass.getuser()


class DriverRuntime:
    """One application's driver internals, built by start() and released by stop().

    Every member is None until start() sets it, so stop() after a failed start releases
    exactly what was built."""

    def __init__(self, conf: SparkConf) -> None:
        self.conf = conf
        self.stopped = True
        self._stop_lock = threading.Lock()
        self.app_name = ""
        self.master = ""
        self.spark_user = spark_user()
        self.app_id: str | None = None
        self.start_time = int(time.time() * 1000)      # ms, SparkContext.startTime
        self.fork_client: Any = None
        self.local_dir: str | None = None
        self.spill_dirs: list[str] = []
        self.broadcast_dir = ""
        self.files_dir = ""
        self.added_files: dict[str, str] = {}        # name -> the path or URL it came from
        self.added_archives: dict[str, str] = {}     # name -> its path or URL (#fragment)
        self.checkpoint_dir: str | None = None
        # set by SparkContext when its serializer is not the engine's own pickle
        self.data_serializer: Any = None
        # set by SparkContext under spark.python.profile (ember.profiler.ProfilerCollector)
        self.profiler_collector: Any = None
        self.python_worker_memory_mb: int = 0
        self.bus: Any = None
        self.status_store: Any = None
        self.event_log: Any = None
        self.ui_process: Any = None
        self.ui_url: str | None = None
        self.block_manager_master: Any = None
        self.map_output_tracker: Any = None
        self.driver_resources: dict = {}
        self.resource_profile_manager: Any = None
        self.task_scheduler: Any = None
        self.scheduler_backend: Any = None
        self.dag_scheduler: Any = None
        self.event_loop: Any = None
        self.local_cluster: Any = None
        self.progress_bar: Any = None
        self.cleaner: Any = None
        self._stop_context: Callable[[], None] = lambda: None
        # the context's SIGINT handler while installed (see interrupt)
        self.sigint_handler: Callable[..., None] | None = None
        # the handler another library (or the user) put in its place, while a job on the
        # main thread has the context's handler back instead (see run_job)
        self._foreign_sigint: Callable[..., Any] | None = None
        self._interrupted: tuple[int, Any] | None = None   # a Ctrl-C held back: signum, frame
        self._local = threading.local()
        self._next_rdd_id = 0
        self._next_shuffle_id = 0
        self._next_broadcast_id = 0
        self._id_lock = threading.Lock()

    # --- start-up -----------------------------------------------------------------------
    def start_fork_server(self, environment: dict[str, str]) -> None:
        """Local mode's fork server, started first: it imports Ember while the driver does."""
        from ember.executor.batch_scheduling import TASK_POLICY_ENV, task_policy
        from ember.executor.fork_client import ForkServerClient, task_process_env
        env = task_process_env(environment)
        policy = task_policy(config.read(self.conf, "spark.ember.task.batchScheduling"))
        if policy is not None:
            env[TASK_POLICY_ENV] = str(policy)
        self.fork_client = ForkServerClient(env)
        self.fork_client.start()

    def start(self, app_name: str, environment: dict[str, str],
              stop_context: Callable[[], None], system_properties: dict[str, str]) -> None:
        """Directories, bus, UI and event log, trackers, schedulers and backend, in Spark's
        order; then the application's start events. `stop_context` stops the SparkContext
        (a standalone master may end the application)."""
        self.app_name = app_name
        self.master = self.conf.get("spark.master") or ""
        self._stop_context = stop_context
        fs.configure(self.conf)          # s3a endpoint and keys for this driver's paths
        self.python_worker_memory_mb = config.read(self.conf, "spark.python.worker.memory")
        self._create_directories()
        from ember.scheduler.listener import ListenerBus
        from ember.scheduler.map_output_tracker import MapOutputTracker
        from ember.status import StatusStore
        from ember.storage.block_manager_master import BlockManagerMaster
        self.bus = ListenerBus(
            config.read(self.conf, "spark.scheduler.listenerbus.eventqueue.capacity"))
        self.status_store = StatusStore()
        self.bus.add_sync(self.status_store)
        self._start_ui_and_event_log()
        self.block_manager_master = BlockManagerMaster(self.bus)
        self.map_output_tracker = MapOutputTracker()
        self._setup_resources()
        self._create_scheduler(environment)
        if config.read(self.conf, "spark.cleaner.referenceTracking"):
            from ember.context_cleaner import ContextCleaner
            self.cleaner = ContextCleaner(
                self, config.read(self.conf, "spark.cleaner.periodicGC.interval"),
                config.read(self.conf, "spark.cleaner.referenceTracking.cleanCheckpoints"))
            self.cleaner.start()
        self._post_application_start(system_properties)
        self.stopped = False
        if config.read(self.conf, "spark.ui.showConsoleProgress") and sys.stderr.isatty():
            from ember.scheduler.progress import ConsoleProgressBar
            self.progress_bar = ConsoleProgressBar(self.status_store)
            self.progress_bar.start()

    def _create_directories(self) -> None:
        root = self.conf.get("spark.local.dir") or os.environ.get("SPARK_LOCAL_DIRS") \
            or tempfile.gettempdir()
        base = root.split(",")[0]
        os.makedirs(base, exist_ok=True)
        self.local_dir = tempfile.mkdtemp(prefix="ember-", dir=base)
        self.spill_dirs = [os.path.join(self.local_dir, "spill")]
        self.broadcast_dir = os.path.join(self.local_dir, "broadcast")
        self.files_dir = os.path.join(self.local_dir, "userFiles-" + uuid.uuid4().hex[:12])
        for d in (self.spill_dirs[0], self.broadcast_dir, self.files_dir):
            os.makedirs(d, exist_ok=True)

    def _setup_resources(self) -> None:
        """The driver's own custom resources (spark.driver.resource.*, Spark's
        spark.driver.resourcesFile) and the application's resource profiles."""
        from ember.deploy.resources import ResourceError, get_or_discover_all_resources
        from ember.scheduler.resource_profiles import ResourceProfileManager
        conf = dict(self.conf.getAll())
        try:
            self.driver_resources = get_or_discover_all_resources(
                conf, "spark.driver", conf.get("spark.driver.resourcesFile"))
        except ResourceError as e:
            raise SparkException(str(e)) from None
        self.resource_profile_manager = ResourceProfileManager(conf, self.master, self.bus)

    def _create_scheduler(self, environment: dict[str, str]) -> None:
        local = parse_local_master(self.master)
        local_cluster = parse_local_cluster_master(self.master)
        if local is None and local_cluster is None and not self.master.startswith("spark://"):
            raise SparkException(f"Could not parse Master URL: '{self.master}'")
        from ember.rdd import serialize_stage
        from ember.scheduler.dag_scheduler import DAGScheduler
        from ember.scheduler.task_scheduler import TaskSchedulerImpl
        from ember.shuffle.writer import ShuffleWriteFunc
        from ember.util.event_loop import EventLoop
        conf = self.conf
        if local is not None:
            threads, max_failures = local
        else:
            threads, max_failures = 0, config.read(conf, "spark.task.maxFailures")
        from ember.clock import SystemClock
        from ember.errors import IllegalArgumentException
        from ember.scheduler.health_tracker import ExcludeSettings, HealthTracker
        from ember.scheduler.speculation import SpeculationSettings
        from ember.scheduler.task_set_manager import NODE_LOCAL, PROCESS_LOCAL
        from ember.scheduler.heartbeat_receiver import HeartbeatSettings
        try:
            exclude = ExcludeSettings.from_conf(conf)
            self.heartbeat_settings = HeartbeatSettings.from_conf(conf)
        except ValueError as e:
            raise IllegalArgumentException(str(e)) from None
        clock = SystemClock()
        health_tracker = None if exclude is None else HealthTracker(
            exclude, clock, self.bus.post,
            shuffle_service_enabled=config.read(conf, "spark.shuffle.service.enabled"))
        # Spark speculates only on clusters: one local "host" never runs two attempts
        speculation = None if local is not None else SpeculationSettings.from_conf(conf)
        sched = TaskSchedulerImpl(
            max_failures, config.read(conf, "spark.scheduler.mode"),
            conf.get("spark.scheduler.allocation.file"), self.bus, self.block_manager_master,
            config.read(conf, "spark.ember.worker.maxCrashes"),
            {PROCESS_LOCAL: config.read(conf, "spark.locality.wait.process"),
             NODE_LOCAL: config.read(conf, "spark.locality.wait.node")},
            config.read(conf, "spark.barrier.sync.timeout"),
            clock, speculation, health_tracker,
            config.read(conf, "spark.driver.maxResultSize"))
        sched.rp_manager = self.resource_profile_manager
        backend: Any
        if local is not None:
            from ember.executor.pyspark_memory import pyspark_worker_memory_mb
            from ember.scheduler.local_backend import LocalSchedulerBackend
            from ember.scheduler.slot_queues import queue_depth
            from ember.shuffle.crypto import IO_ENCRYPTION, new_key_hex
            storage = config.read(conf, "spark.ember.storage.memory")
            if storage is None:
                mem = config.read(conf, "spark.driver.memory")
                storage = max(32, int((mem - 300) * config.read(conf, "spark.memory.fraction")))
                storage = storage // threads
            dp = config.read(conf, "spark.default.parallelism")
            self.event_loop = EventLoop("dag-scheduler-event-loop")
            backend = LocalSchedulerBackend(
                sched, threads, self.local_dir, self.python_worker_memory_mb, storage << 20,
                self.files_dir, dict(environment),
                config.read(conf, "spark.python.task.killTimeout"),
                dp or None, self.event_loop, self.fork_client,
                fs_conf=fs.hadoop_conf(conf),
                pyspark_memory_mb=pyspark_worker_memory_mb(dict(conf.getAll())),
                # spark.io.encryption.enabled: a key for this application's shuffle files
                io_key=(bytes.fromhex(new_key_hex()) if config.read(conf, IO_ENCRYPTION)
                        else None),
                queue_depth=queue_depth(conf, cluster=False),
                fault_handler=config.read(conf, "spark.python.worker.faulthandler.enabled"),
                hand_back_s=config.read(conf, "spark.ember.scheduler.handBackAfter"))
            from ember.scheduler.local_backend import EXECUTOR_ID
            # Spark's local mode: tasks take their cores and the driver's resources
            sched.register_executor_resources(EXECUTOR_ID, threads, {
                n: list(i.addresses) for n, i in self.driver_resources.items()})
        else:
            from ember.scheduler.standalone_backend import StandaloneSchedulerBackend
            master_url = self.master
            if local_cluster is not None:
                master_url = self._start_local_cluster(*local_cluster)
            backend = StandaloneSchedulerBackend(self, sched, master_url)
            self.event_loop = backend.loop       # the scheduler runs on the RPC loop
        dag = DAGScheduler(sched, self.bus, self.map_output_tracker, self.cache_locations,
                           serialize_stage, ShuffleWriteFunc.for_dependency,
                           config.read(conf, "spark.stage.maxConsecutiveAttempts"),
                           loop=self.event_loop,
                           barrier_check_interval=config.read(
                               conf, "spark.scheduler.barrier.maxConcurrentTasksCheck.interval"),
                           barrier_check_max_failures=config.read(
                               conf,
                               "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures"),
                           dynamic_allocation=local is None and config.read(
                               conf, "spark.dynamicAllocation.enabled"),
                           shuffle_service_enabled=local is None and
                           config.read(conf, "spark.shuffle.service.enabled"),
                           clock=clock, release_blocks=self.release_blocks)
        sched.initialize(backend, dag)
        if health_tracker is not None:
            health_tracker.kill_executors = getattr(backend, "kill_executors", None)
            health_tracker.kill_executors_on_host = getattr(backend, "kill_executors_on_host",
                                                            None)
        self.task_scheduler = sched
        self.scheduler_backend = backend
        self.dag_scheduler = dag
        self.event_loop.on_error = self._on_loop_failure
        self.event_loop.start()
        backend.start()
        sched.start_revive(config.read(conf, "spark.scheduler.revive.interval"))
        sched.start_speculation()
        self.app_id = backend.application_id() if local is None else f"local-{self.start_time}"
        if local is not None:       # Spark's LocalSchedulerBackend announces its executor
            from ember.scheduler.listener import ExecutorAdded
            from ember.scheduler.local_backend import EXECUTOR_ID, HOST
            self.bus.post(ExecutorAdded(EXECUTOR_ID, HOST, threads))

    def _start_local_cluster(self, workers: int, cores: int, memory_mb: int) -> str:
        """Spark's test master: a real master and `workers` workers on 127.0.0.1 as child
        processes of this driver, stopped with it; returns the master's spark:// URL."""
        conf = self.conf
        executor_cores = config.read(conf, "spark.executor.cores", cores)
        task_cpus = config.read(conf, "spark.task.cpus")
        if executor_cores < task_cpus:
            raise SparkException(f"The number of cores per executor (={executor_cores}) has to "
                                 f"be >= the number of cpus per task = {task_cpus}.")
        executor_mb = config.read(conf, "spark.executor.memory")
        if executor_mb > memory_mb:
            raise SparkException("Asked to launch cluster with %d MiB/worker but requested %d "
                                 "MiB/executor" % (memory_mb, executor_mb))
        from ember.deploy.local_cluster import LocalCluster
        from ember.rpc.config import ENV_AUTH_SECRET
        # the daemons get the application's configuration, as Spark's LocalSparkCluster
        # does (so spark.worker.* and authentication apply to them); never the secret on a
        # command line: it goes in their environment
        daemon_conf = {k: v for k, v in conf.getAll()
                       if not k.startswith(_NOT_FOR_LOCAL_CLUSTER_DAEMONS)}
        if config.read(conf, "spark.shuffle.service.enabled"):
            # every worker runs a shuffle service on this one host: on Spark's fixed 7337
            # the second could not bind, so each takes a free port unless one is set
            # (executors learn their worker's from it)
            daemon_conf.setdefault("spark.shuffle.service.port", "0")
        secret = conf.get("spark.authenticate.secret")
        self.local_cluster = LocalCluster(os.path.join(self.local_dir, "local-cluster"),
                                          workers, cores, f"{memory_mb}m", daemon_conf,
                                          {ENV_AUTH_SECRET: secret} if secret else None,
                                          die_with_parent=True)
        self.local_cluster.start(timeout=60)
        return self.local_cluster.url

    def _start_ui_and_event_log(self) -> None:
        """Before the scheduler: the UI's URL goes into the app's registration with a master,
        and the UI and the log must see the first executors register. Spark fails start-up
        when the UI port or the event log directory is unusable; so do we. Both live in the
        driver's UI process (ember.ui.ui_process), fed by the bus."""
        sock = redirect = None
        if config.read(self.conf, "spark.eventLog.enabled"):
            from ember.ui.event_log import EventLog
            self.event_log = EventLog(self.conf)
        if config.read(self.conf, "spark.ui.enabled"):
            from ember.ui.ui_bind import bind_ui
            sock, self.ui_url, redirect = bind_ui(self.conf)
        if self.event_log is not None or sock is not None:
            from ember.ui.ui_process import UiProcess
            try:
                self.ui_process = UiProcess(self.conf, sock, self.event_log is not None,
                                            redirect)
            finally:
                for s in (sock, redirect):
                    if s is not None:
                        s.close()
            self.bus.add_sync(self.ui_process)

    def _post_application_start(self, system_properties: dict[str, str]) -> None:
        from ember.scheduler.listener import ApplicationStart, EnvironmentUpdate
        if self.event_log is not None:
            self.ui_process.open_log(self.event_log.start(self.app_id))
        if self.ui_process is not None:
            self.bus.post(EnvironmentUpdate(self._environment_details(system_properties)))
            self.bus.post(ApplicationStart(self.app_name, self.app_id,
                                           self.start_time / 1000, self.spark_user))

    def _environment_details(self, system_properties: dict[str, str]
                             ) -> dict[str, list[tuple[str, str]]]:
        """The Environment tab's sections; values of keys matching spark.redaction.regex are
        hidden, as Spark's Utils.redact does."""
        props = dict(self.conf.getAll())
        props["spark.app.id"] = self.app_id
        props["spark.app.startTime"] = str(self.start_time)
        return {"JVM Information": [("Python Version", sys.version.split()[0]),
                                    ("Python Executable", sys.executable)],
                "Spark Properties": redaction.redact(self.conf, props.items()),
                "Hadoop Properties": [],
                "System Properties": redaction.redact(
                    self.conf,
                    [("user.name", self.spark_user), ("user.dir", os.getcwd()),
                     ("os.name", sys.platform), ("ember.home", os.path.dirname(__file__))] +
                    list(system_properties.items())),
                "Metrics Properties": [],
                "Classpath Entries": [(p, "System Classpath") for p in sys.path if p]}

    # --- ids and lookups for RDDs, broadcasts and the DAG scheduler ------------------------
    def new_rdd_id(self) -> int:
        with self._id_lock:
            self._next_rdd_id += 1
            return self._next_rdd_id - 1

    def new_shuffle_id(self) -> int:
        with self._id_lock:
            self._next_shuffle_id += 1
            return self._next_shuffle_id - 1

    def new_broadcast_id(self) -> int:
        with self._id_lock:
            self._next_broadcast_id += 1
            return self._next_broadcast_id - 1

    def cache_locations(self, rdd_id: int, partition: int) -> list[TaskLocation]:
        from ember.scheduler.task import TaskLocation
        return [TaskLocation(b.host, b.executor_id, b.slot if b.where == "memory" else None)
                for b in self.block_manager_master.locations(rdd_id, partition)]

    # --- local properties (Spark's SparkContext.localProperties) --------------------------
    def local_properties(self) -> dict[str, str]:
        """This thread's job properties. As in PySpark's (default) pinned-thread mode, a new
        thread starts with none; InheritableThread copies its creator's."""
        props = getattr(self._local, "props", None)
        if props is None:
            props = self._local.props = {}
        return props

    def set_local_properties(self, props: dict[str, str]) -> None:
        self._local.props = props

    # --- jobs ---------------------------------------------------------------------------
    def check_running(self) -> None:
        if self.stopped:
            raise PySparkRuntimeError("Cannot call methods on a stopped SparkContext.",
                                      "SPARK_CONTEXT_STOPPED", {})

    def run_job(self, rdd: RDD, func: Callable, partitions: list[int] | None = None,
                with_context: bool = False) -> list:
        """Run func over partitions of rdd; a list with one result per partition."""
        self.check_running()
        lineage = rdd._lineage()
        for r in lineage:                  # surfaces input errors here, in the caller
            r.partitions()
        if self.profiler_collector is not None:
            self.profiler_collector._profile_job(rdd, lineage)
        if partitions is None:
            partitions = list(range(rdd.getNumPartitions()))
        results: list = [None] * len(partitions)
        ser = self.data_serializer

        def handler(index: int, data: bytes) -> None:
            value = pickle.loads(data)
            results[index] = value if ser is None else ser.loads(value)

        run = func if with_context else WithoutContext(func)
        task_func = run if ser is None else SerializedResult(run, ser)
        props = dict(self.local_properties())
        if self.added_files or self.added_archives:   # executors fetch what they lack;
            props["spark.ember.files"] = ",".join(    # "name/" is a directory
                n + "/" if os.path.isdir(os.path.join(self.files_dir, n)) else n
                for n in (*self.added_files, *self.added_archives))
        # the submission runs on this thread when nothing can interrupt it halfway: a thread
        # other than the main one, or the main one while Ctrl-C goes through interrupt()
        on_caller, foreign = self._sigint_for_job()
        driving = False
        try:
            if foreign is not None:
                self._foreign_sigint = foreign
                _signal.signal(signal.SIGINT, self.sigint_handler)
            # ... and so are the results, by a thread that waits for them anyway
            driving = on_caller and self.event_loop.claim()
            waiter = self.dag_scheduler.submit_job(rdd, task_func, partitions, call_site(),
                                                   handler, props, on_caller)
            try:
                if driving:
                    self.event_loop.drive(lambda: waiter.completed or self._interrupted)
                    self.event_loop.release()
                if self._interrupted:       # Ctrl-C came while this thread ran handlers
                    self.interrupt(*self._interrupted)
                waiter.wait()
            except KeyboardInterrupt:
                waiter.cancel()
                raise
        finally:
            if driving:
                self.event_loop.release()   # (a no-op once released)
            try:
                if self._interrupted:       # held while this thread gave the loop back
                    self.interrupt(*self._interrupted)
            finally:
                if foreign is not None:     # back first: a Ctrl-C from here on is all its own
                    _signal.signal(signal.SIGINT, foreign)
                    self._foreign_sigint = None
        if any(r._checkpoint_requested and r._checkpoint_dir is None or
               (r._local_checkpointed and not r._truncated) for r in lineage):
            rdd._do_checkpoint()
        return results

    def _sigint_for_job(self) -> tuple[bool, Callable[..., Any] | None]:
        """(whether the job runs on the calling thread, the foreign SIGINT handler whose
        place the context's takes for the job). Off the main thread no signal handler runs.
        On it, a Ctrl-C must not raise inside a scheduler handler: under the context's own
        handler it is held back (interrupt); SIG_IGN, SIG_DFL or a handler set from C run
        no Python code. A Python handler installed after the context's (another library's
        SparkContext, asyncio.run) could raise anywhere: the context's handler takes its
        place for the job and hands a Ctrl-C on to it once that is safe, so the foreign
        handler keeps its effect and the job its fast path (the loop thread's hand-offs
        cost a warm job ~0.1 ms)."""
        if threading.current_thread() is not threading.main_thread():
            return True, None
        if self.sigint_handler is None:
            return False, None
        current = _signal.getsignal(signal.SIGINT)
        if current is self.sigint_handler or not callable(current):
            return True, None
        return True, current

    def interrupt(self, signum: int, frame: Any) -> None:
        """Ctrl-C in the main thread (PySpark's SIGINT handler): cancel every job, then
        raise KeyboardInterrupt; in a job where the context's handler took another one's
        place (run_job), that one's effect instead. While that thread is itself
        running a scheduler handler (a job's submission, see EventLoop.run_here) or handles
        its job's results (EventLoop.drive) only once the handler is done (run_job checks),
        so the scheduler is never left halfway through one."""
        if self.event_loop is not None and self.event_loop.holds_interrupts():
            self._interrupted = (signum, frame)
            return
        self._interrupted = None
        if self._foreign_sigint is not None:
            self._foreign_sigint(signum, frame)
            return
        if not self.stopped and self.dag_scheduler is not None:
            self.dag_scheduler.cancel_all_jobs()
        raise KeyboardInterrupt()

    def cache_requested(self, rdd_id: int) -> None:
        """An RDD was persisted in memory: the job that first computes it may start on
        fresh task processes (DAGScheduler._before_cache_build,
        spark.ember.python.worker.freshForCache)."""
        if not self.stopped and config.read(self.conf, "spark.ember.python.worker.freshForCache"):
            self.dag_scheduler.caches_to_build.add(rdd_id)

    def unpersist_rdd(self, rdd_id: int) -> None:
        if self.stopped:
            return
        self.dag_scheduler.caches_to_build.discard(rdd_id)
        from ember.scheduler.listener import UnpersistRDD
        self.release_blocks(rdd_id)
        self.bus.post(UnpersistRDD(rdd_id))
        block_dir = os.path.join(self.local_dir, "blocks")
        if os.path.isdir(block_dir):
            for f in os.listdir(block_dir):
                if is_block_file_of(f, rdd_id):
                    unlink_quietly(os.path.join(block_dir, f))

    def release_blocks(self, rdd_id: int) -> None:
        """Drop an RDD's blocks in the executors and the block manager master: all of it for
        one the user never persisted (a HeldRDD's); unpersist_rdd does more."""
        if self.stopped:
            return
        self.scheduler_backend.unpersist_rdd(rdd_id)
        self.block_manager_master.remove_rdd(rdd_id)

    def unpersist_broadcast(self, bid: int) -> None:
        if not self.stopped:
            self.scheduler_backend.unpersist_broadcast(bid)

    def broadcast_path(self, bid: int) -> str:
        """The driver's file of a broadcast's pickled value."""
        return os.path.join(self.broadcast_dir, f"broadcast_{bid}")

    def remove_broadcast(self, bid: int) -> None:
        """Spark's removeBroadcast(removeFromDriver = true), for a broadcast nothing
        references: the loaded copies everywhere and the driver's file."""
        if self.stopped:
            return
        self.scheduler_backend.unpersist_broadcast(bid)
        unlink_quietly(self.broadcast_path(bid))

    def remove_shuffle(self, shuffle_id: int) -> None:
        """A shuffle nothing can read again (cleanShuffleDependencies, or the context
        cleaner once its ShuffleDependency is unreachable): its MapStatuses, and its files
        with the task processes' descriptors and indexes of them, wherever they are. The
        files its statuses name are removed from here too: those of executors already gone,
        whose worker's shuffle service served them."""
        if self.stopped:
            return
        for path in self.map_output_tracker.output_files(shuffle_id):
            unlink_quietly(path)
        self.map_output_tracker.unregister_shuffle(shuffle_id)
        self.scheduler_backend.remove_shuffle(shuffle_id)

    # --- shutdown -----------------------------------------------------------------------
    def _on_loop_failure(self, handler: Callable[..., Any], error: Exception) -> None:
        """Spark's DAGSchedulerEventProcessLoop.onError: a DAG scheduler handler that raised
        left its jobs' state unknown, so every job is cancelled and the SparkContext stopped
        (from a thread of its own) rather than left to hang. Other handlers' failures stay
        logged only."""
        dag = self.dag_scheduler
        if getattr(handler, "__self__", None) is not dag or self.stopped:
            return
        log.error("DAGSchedulerEventProcessLoop failed; shutting down SparkContext")
        try:
            dag.handle_all_jobs_cancelled()
        except Exception:
            log.exception("DAGScheduler failed to cancel all jobs.")
        threading.Thread(target=self._stop_context, name="stop-spark-context",
                         daemon=True).start()

    def stop_context(self) -> None:
        """Stop the application's SparkContext (its master ended the application)."""
        self._stop_context()

    def mark_stopped(self) -> bool:
        """True for the one caller that moves a running runtime to stopped."""
        with self._stop_lock:
            if self.stopped:
                return False
            self.stopped = True
            return True

    def stop(self) -> None:
        """Release whatever start() built, in Spark's order: jobs fail, the application
        ends on the bus, schedulers and backend stop (executors before a local cluster's
        daemons), then the bus, the UI process, the event log and the directories."""
        self.stopped = True
        if self.cleaner is not None:
            self.cleaner.stop()
        ui_process = self.ui_process
        dag = self.dag_scheduler
        if dag is not None:
            done = threading.Event()
            dag.post(dag.handle_shutdown)
            dag.post(done.set)
            done.wait(10)
        if self.app_id is not None and ui_process is not None:
            from ember.scheduler.listener import ApplicationEnd
            self.bus.post(ApplicationEnd(time.time()))
        if self.progress_bar is not None:
            self.progress_bar.stop()
        if self.task_scheduler is not None:
            self.task_scheduler.stop()
        if self.scheduler_backend is not None:
            self.scheduler_backend.stop()
        elif self.fork_client is not None:
            self.fork_client.stop()        # start failed after the fork server started
        if self.local_cluster is not None:
            self.local_cluster.stop()      # after the backend: executors end first
        if self.event_loop is not None:
            self.event_loop.stop()
        if self.bus is not None:
            self.bus.stop()
        if ui_process is not None:
            ui_process.close()
        if self.event_log is not None:
            self.event_log.finish()
        if self.local_dir:
            shutil.rmtree(self.local_dir, ignore_errors=True)
