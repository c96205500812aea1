"""The one registry of configuration keys Ember reads: name, type, default, a line of doc and
the processes that read it.

Spark's `spark.*` names and defaults where Spark has the concept; `spark.ember.*` for Ember's
own knobs. Values arrive as strings (SparkConf, `--conf`, properties files, environment) and
are parsed here, one parser per type, so every reader agrees on what "512m" or "3s" means and
a bad value fails with a message naming the key. `docs/configuration.md` is generated from
this module (`python -m ember.config --markdown`), and tests/test_config_registry.py fails
when code reads a `spark.` key that is not declared here.

Some keys Spark defines promise a safety property Ember does not implement (SASL
encryption, servlet filters on the UI, client-certificate TLS...). They are declared
`unsupported`: set to anything but Spark's default, `check_unsupported` stops the daemon,
SparkContext or submit at start with one line naming the key, instead of silently running
without the protection the user asked for.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from ember.util.units import MiB, duration_to_string, parse_duration, parse_size

# The processes that read keys (the "Read by" column of docs/configuration.md).
MASTER, WORKER, DRIVER, EXECUTOR = "master", "worker", "driver", "executor"
HISTORY, SUBMIT, REST, SHUFFLE_SERVICE = "history", "submit", "rest", "shuffle-service"
JOB = "job (local property)"
RPC = (MASTER, WORKER, DRIVER, EXECUTOR)     # every process with an RpcEnv


# ---------------------------------------------------------------------------------------------
# One parser per type
# ---------------------------------------------------------------------------------------------

def parse_memory_mb(value: str | int, default_unit: str = "m") -> int:
    """'512m' -> 512, '2g' -> 2048, '1024' -> 1024 (in default_unit). Raises ValueError."""
    if isinstance(value, int):
        return value
    try:
        return int(parse_size(value, default_unit, fractions=True, signed=True,
                              spaces=True) / MiB)
    except ValueError:
        raise ValueError(f"Invalid memory string: {value!r} (expected e.g. 512m, 2g)") from None


def parse_bytes(value: str | int) -> int:
    """'64m' -> 67108864, '1024' -> 1024 (bytes). Raises ValueError."""
    if isinstance(value, int):
        return value
    try:
        return parse_size(value, "b", fractions=True, signed=True, spaces=True)
    except ValueError:
        raise ValueError(f"Invalid memory string: {value!r} (expected e.g. 512m, 2g)") from None


def parse_time_seconds(value: str | float, default_unit: str = "s") -> float:
    """'3s' -> 3.0, '200ms' -> 0.2, '60' -> 60 (in default_unit). Raises ValueError."""
    try:
        return parse_duration(value, default_unit)
    except ValueError:
        raise ValueError(f"Invalid time string: {value!r} (expected e.g. 3s, 200ms)") from None


def parse_bool(value: str | bool) -> bool:
    """true/false (also 1/0, yes/no), any case. "" is not a boolean (as in Spark)."""
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"Invalid boolean: {value!r}")


def parse_int(value: Any) -> int:
    return int(str(value).strip())


def parse_float(value: Any) -> float:
    return float(str(value).strip())


def parse_list(value: Any) -> list[str]:
    """Comma-separated names; blanks dropped."""
    return [v.strip() for v in str(value).split(",") if v.strip()]


@dataclass(frozen=True)
class ConfType:
    """A value type: its name in the reference page, its one parser and what a bad value's
    error says it should be."""
    name: str
    parse: Callable[[Any], Any]
    expected: str


BOOL = ConfType("boolean", parse_bool, "boolean")
INT = ConfType("int", parse_int, "int")
FLOAT = ConfType("double", parse_float, "double")
STRING = ConfType("string", str, "a string")
UPPER = ConfType("string", lambda v: str(v).strip().upper(), "a string")
LIST = ConfType("list", parse_list, "a comma-separated list")
SIZE_MB = ConfType("size (bare number: MiB)", parse_memory_mb, "a size like 512m or 2g")
SIZE_BYTES = ConfType("size (bare number: bytes)", parse_bytes, "a size like 64m or 512k")
SECONDS = ConfType("duration (bare number: s)", parse_time_seconds,
                   "a duration like 120s, 500ms or 2min")
MILLIS = ConfType("duration (bare number: ms)", lambda v: parse_time_seconds(v, "ms"),
                  "a duration like 10s or 500ms")
PREFIX = ConfType("prefix", str, "a string")


@dataclass(frozen=True)
class ConfigEntry:
    """One key. `unsupported` marks a Spark key Ember does not implement whose non-default
    value a user relies on for safety; `prefix` a family of keys (`spark.executorEnv.*`);
    `fallback` the key whose value an unset one takes (Spark's fallbackConf: every timeout
    follows spark.network.timeout unless set itself)."""
    key: str
    default: Any
    type: ConfType
    doc: str
    read_by: tuple[str, ...] = ()
    unsupported: bool = False
    prefix: bool = False
    fallback: str | None = None

    def parse_value(self, raw: Any) -> Any:
        """`raw` parsed; ValueError in Spark's words: "<key> should be int, but was 'x'"."""
        try:
            return self.type.parse(raw)
        except (ValueError, TypeError):
            raise ValueError(f"{self.key} should be {self.type.expected}, but was "
                             f"{raw!r}") from None

    def read(self, conf: Mapping[str, Any] | Any, default: Any = None) -> Any:
        """The typed value in `conf` (a dict or SparkConf), else `default`, else the
        fallback key's value, else the registry's default."""
        raw = conf.get(self.key, None)
        if raw is None:
            if default is None and self.fallback is not None:
                return REGISTRY[self.fallback].read(conf)
            return self.default if default is None else default
        return self.parse_value(raw)


REGISTRY: dict[str, ConfigEntry] = {}
PREFIXES: dict[str, ConfigEntry] = {}
_readers: tuple[str, ...] = ()


def _section(*read_by: str) -> None:
    """The processes reading the entries declared next (unless an entry names its own)."""
    global _readers
    _readers = read_by


def _entry(key: str, default: Any, conf_type: ConfType, doc: str, *,
           by: Iterable[str] | None = None, unsupported: bool = False,
           fallback: str | None = None) -> ConfigEntry:
    if key in REGISTRY:
        raise ValueError(f"{key} is declared twice")
    if fallback is not None and fallback not in REGISTRY:
        raise ValueError(f"{key} falls back to {fallback}, which is not declared before it")
    e = ConfigEntry(key, default, conf_type, doc, tuple(by) if by is not None else _readers,
                    unsupported, fallback=fallback)
    REGISTRY[key] = e
    return e


def _prefix(prefix: str, doc: str, *, by: Iterable[str] | None = None) -> ConfigEntry:
    e = ConfigEntry(prefix, None, PREFIX, doc, tuple(by) if by is not None else _readers,
                    prefix=True)
    PREFIXES[prefix] = e
    return e


# ---------------------------------------------------------------------------------------------
# The keys
# ---------------------------------------------------------------------------------------------

# --- application / driver runtime -------------------------------------------------------
_section(DRIVER)
_entry("spark.app.name", None, STRING, "Application name.", by=(DRIVER, SUBMIT, MASTER))
_entry("spark.master", None, STRING, "Master URL: local, local[N], local[*], local[N,F], spark://...",
       by=(DRIVER, SUBMIT))
_entry("spark.default.parallelism", None, INT, "Default partitions for parallelize and shuffles.")
_entry("spark.task.maxFailures", 4, INT, "Attempts per task before the job is aborted (cluster).")
_entry("spark.stage.maxConsecutiveAttempts", 4, INT,
       "Consecutive fetch-failure attempts of a stage before it is aborted.")
_entry("spark.scheduler.mode", "FIFO", UPPER, "FIFO or FAIR.")
_entry("spark.scheduler.allocation.file", None, STRING, "fairscheduler.xml with pool definitions.")
_entry("spark.local.dir", None, STRING, "Comma-separated scratch dirs for shuffle and spills.",
       by=(DRIVER, EXECUTOR, WORKER))
_entry("spark.python.worker.memory", 512, SIZE_MB,
       "Memory per task process for aggregation before spilling to disk (e.g. 512m).",
       by=(DRIVER, EXECUTOR))
_entry("spark.executor.memory", 1024, SIZE_MB, "Memory per executor (MB).",
       by=(DRIVER, SUBMIT, MASTER, REST))
_entry("spark.driver.memory", 1024, SIZE_MB, "Driver memory (MB).", by=(SUBMIT, REST, WORKER))
_entry("spark.executor.allowSparkContext", False, BOOL,
       "Let code in a task create a SparkContext (PySpark refuses it otherwise).",
       by=(DRIVER,))
_entry("spark.python.worker.faulthandler.enabled", False, BOOL,
       "A task process that crashes (a segfault, say) has Python's faulthandler write where "
       "it was, and the task's error carries it.", by=(DRIVER, EXECUTOR))
_entry("spark.ember.python.worker.freshForCache", True, BOOL,
       "Ember only: before a job that first fills an RDD's memory cache starts while no "
       "other job runs, idle task processes that have spent 0.5 s of CPU and hold no block "
       "in memory are replaced by fresh ones, so the cached objects lie in fresh memory "
       "rather than scattered where an earlier job freed millions of objects (a pass over "
       "them then reads memory in order). False: task processes live as long as their "
       "executor.", by=(DRIVER,))
_entry("spark.python.profile", False, BOOL,
       "Profile the Python code of each stage's tasks with cProfile; sc.show_profiles() "
       "prints the profiles (also at exit).", by=(DRIVER,))
_entry("spark.python.profile.dump", None, STRING,
       "With spark.python.profile: at exit, write the profiles to this directory "
       "(rdd_<id>.pstats) instead of printing them.", by=(DRIVER,))
_entry("spark.python.profile.memory", False, BOOL,
       "PySpark's memory profiler of Python UDFs; Ember has no UDFs, so it only enables "
       "sc.show_profiles().", by=(DRIVER,))
_entry("spark.driver.maxResultSize", 1 << 30, SIZE_BYTES,
       "Limit of the serialized results of one action's tasks together; an action past it is "
       "aborted. 0: no limit.", by=(DRIVER,))
_entry("spark.executor.pyspark.memory", None, SIZE_MB,
       "Address-space limit (RLIMIT_AS) of the executor's Python task processes, divided "
       "among spark.executor.cores; a task allocating past it fails with MemoryError.",
       by=(DRIVER, EXECUTOR))
_entry("spark.memory.fraction", 0.6, FLOAT, "Fraction of (heap - 300MB) for execution+storage.",
       by=(DRIVER, EXECUTOR))
_entry("spark.ember.storage.memory", None, SIZE_MB,
       "Storage memory per task process for cached blocks; default from spark.memory.fraction.",
       by=(DRIVER, EXECUTOR))
_entry("spark.cleaner.referenceTracking", True, BOOL,
       "Clean up a shuffle's outputs, a persisted RDD's cached blocks and a broadcast once "
       "the driver no longer references the ShuffleDependency, RDD or Broadcast (Spark's "
       "ContextCleaner).",
       by=(DRIVER,))
_entry("spark.cleaner.referenceTracking.cleanCheckpoints", False, BOOL,
       "Also delete a reliably checkpointed RDD's files once the driver no longer "
       "references the RDD.", by=(DRIVER,))
_entry("spark.cleaner.periodicGC.interval", 1800.0, SECONDS,
       "How often the context cleaner runs a full garbage collection, so objects held only "
       "by reference cycles are found and cleaned.", by=(DRIVER,))
_entry("spark.ui.showConsoleProgress", True, BOOL, "Console progress bar on stderr (tty only).")
_entry("spark.ui.enabled", True, BOOL, "Run the application web UI on the driver.")
_entry("spark.ui.port", 4040, INT, "Port of the application UI; busy ports retry upwards.")
_entry("spark.port.maxRetries", 16, INT, "Successive ports tried when a port is busy.", by=RPC)
_entry("spark.ui.retainedJobs", 1000, INT, "Finished jobs the UI and REST API remember.")
_entry("spark.ui.retainedStages", 1000, INT, "Finished stages the UI and REST API remember.")
_entry("spark.ui.retainedTasks", 100000, INT, "Tasks per stage the UI and REST API remember.")
_entry("spark.ui.retainedDeadExecutors", 100, INT, "Removed executors the UI remembers.")
_entry("spark.eventLog.enabled", False, BOOL,
       "Write the application's events to spark.eventLog.dir (for the history server).")
_entry("spark.eventLog.dir", "file:/tmp/spark-events", STRING,
       "Existing directory (file: URI or path) where event logs are written.")
# Spark 4 turns both on by default; Ember writes plain JSON lines in one file unless asked.
_entry("spark.eventLog.compress", False, BOOL,
       "Compress the event log (spark.eventLog.compression.codec; Ember writes zstd).")
_entry("spark.eventLog.compression.codec", "zstd", STRING,
       "Event log codec; Ember supports zstd (Spark's default) only.")
_entry("spark.eventLog.rolling.enabled", False, BOOL,
       "Write the event log as Spark's rolling directory eventlog_v2_<appId> of files of at "
       "most spark.eventLog.rolling.maxFileSize.")
_entry("spark.eventLog.rolling.maxFileSize", 128 << 20, SIZE_BYTES,
       "Size (bytes, or with a unit: 64m) at which a rolling event log starts a new file; "
       "at least 10 MiB.")
_entry("spark.scheduler.listenerbus.eventqueue.capacity", 10000, INT,
       "Events that may wait for an asynchronous bus listener; more are dropped, with an "
       "error. (The UI and event log's feed is synchronous: it keeps up to 64 MiB of packed "
       "events for its process.)")
_entry("spark.redaction.regex", "(?i)secret|password|token|access[.]?key", STRING,
       "Configuration keys (and values) matching this are redacted in the UI and event log.",
       by=(DRIVER, MASTER, WORKER, HISTORY, SUBMIT))
_entry("spark.locality.wait", 3.0, SECONDS, "Delay-scheduling wait per locality level.")
_entry("spark.locality.wait.process", None, SECONDS,
       "Delay-scheduling wait for a task process that holds the partition's cached block "
       "(or, on a cluster, its executor) before a task goes to a node-local slot.",
       fallback="spark.locality.wait")
_entry("spark.locality.wait.node", None, SECONDS,
       "Delay-scheduling wait for a node-local slot (the executor or host holding the "
       "task's input) before it goes anywhere.", fallback="spark.locality.wait")
_entry("spark.locality.wait.rack", None, SECONDS,
       "Accepted for Spark's configurations; Ember knows no racks, so there is no "
       "rack-local level to wait at.", fallback="spark.locality.wait")
_entry("spark.scheduler.revive.interval", 1.0, SECONDS,
       "How often tasks waiting to launch are offered the free slots again when nothing "
       "else does (a task held back by delay scheduling launches once its wait is over).")
_entry("spark.python.task.killTimeout", 2.0, SECONDS,
       "Time a killed task gets to stop before its task process is killed and replaced.",
       by=(DRIVER, EXECUTOR))
_entry("spark.ember.worker.maxCrashes", 4, INT,
       "Attempts of a task whose task process dies (even in local mode, where maxFailures is 1).")
_entry("spark.barrier.sync.timeout", 31536000.0, SECONDS,
       "Time the coordinator waits for all tasks of a barrier stage to call barrier() or "
       "allGather() before failing the call in every task.")
_entry("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", 15.0, SECONDS,
       "Wait before checking again that a barrier stage's tasks all fit in the free slots.")
_entry("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", 40, INT,
       "Failed slot checks of a barrier job before it fails with Spark's SPARK-24819 error.")

# --- custom resources, resource profiles, dynamic allocation -----------------------------
_section(DRIVER)
_entry("spark.task.cpus", 1, INT, "Cores each task takes from its executor.")
_entry("spark.executor.cores", None, INT,
       "Cores per executor; unset on a standalone cluster: one executor per worker taking "
       "all its free cores.",
       by=(DRIVER, SUBMIT, MASTER, REST))
_entry("spark.scheduler.resource.profileMergeConflicts", False, BOOL,
       "Merge (maximum of each request) the different ResourceProfiles of one stage's RDDs "
       "instead of failing the job.")
_entry("spark.testing.resourceProfileManager", False, BOOL,
       "Under test (SPARK_TESTING in the environment, or spark.testing set), apply the "
       "resource-profile support check anyway (Spark's internal key; the check is skipped "
       "under test otherwise, as in Spark).")
_entry("spark.starvation.timeout", 15.0, SECONDS,
       "How often a cluster driver warns that submitted tasks found no executor yet.")
_entry("spark.dynamicAllocation.enabled", False, BOOL,
       "Request executors per resource profile from the standalone master as tasks need them "
       "(required for stage-level profiles with executor requests).")
_entry("spark.dynamicAllocation.minExecutors", 0, INT, "Lower bound of each profile's target.")
_entry("spark.dynamicAllocation.maxExecutors", 2147483647, INT,
       "Upper bound of each profile's executor target.")
_entry("spark.dynamicAllocation.initialExecutors", None, INT,
       "Executors of the default profile asked for before the first stage.")
_entry("spark.executor.instances", None, INT,
       "With dynamic allocation: also a floor of the initial executor target.")
_entry("spark.dynamicAllocation.executorAllocationRatio", 1.0, FLOAT,
       "Fraction of the executors full parallelism would need that is asked for.")
_entry("spark.dynamicAllocation.executorIdleTimeout", 60.0, SECONDS,
       "Idle time after which an executor beyond its profile's target is released.")
_entry("spark.dynamicAllocation.cachedExecutorIdleTimeout", float("inf"), SECONDS,
       "Idle time after which an executor holding cached blocks is released (default: never).")
_entry("spark.dynamicAllocation.schedulerBacklogTimeout", 1.0, SECONDS,
       "Pending tasks backlogged this long make the first executor request.")
_entry("spark.dynamicAllocation.sustainedSchedulerBacklogTimeout", None, SECONDS,
       "Interval of the following (doubling) requests while the backlog lasts.",
       fallback="spark.dynamicAllocation.schedulerBacklogTimeout")
_entry("spark.dynamicAllocation.shuffleTracking.enabled", True, BOOL,
       "Keep executors holding live shuffle output (without an external shuffle service).")
_entry("spark.dynamicAllocation.shuffleTracking.timeout", float("inf"), SECONDS,
       "Idle time after which an executor holding shuffle output is released anyway.")
_entry("spark.shuffle.service.enabled", False, BOOL,
       "Executors register their shuffle output with their worker's external shuffle "
       "service, which serves it after they exit.",
       by=(DRIVER, EXECUTOR, WORKER))
_entry("spark.shuffle.service.port", 7337, INT, "Port of the worker's external shuffle service.",
       by=(DRIVER, EXECUTOR, WORKER))
_entry("spark.decommission.enabled", False, BOOL,
       "Executors of a decommissioned worker drain gracefully instead of being lost.",
       by=(DRIVER, EXECUTOR, WORKER))
_entry("spark.storage.decommission.enabled", False, BOOL,
       "Decommissioning executors migrate their blocks to other executors.",
       by=(DRIVER, EXECUTOR))
_entry("spark.storage.decommission.shuffleBlocks.enabled", True, BOOL,
       "Migrate shuffle output when decommissioning (needs storage decommission).",
       by=(DRIVER, EXECUTOR))
_entry("spark.storage.decommission.rddBlocks.enabled", True, BOOL,
       "Migrate cached RDD blocks when decommissioning (needs storage decommission).",
       by=(DRIVER, EXECUTOR))
_entry("spark.storage.decommission.maxReplicationFailuresPerBlock", 3, INT,
       "Failed uploads of one block (to peers that accept blocks) before a decommissioning "
       "executor gives it up; it is then recomputed where it is needed.",
       by=(DRIVER, EXECUTOR))

_entry("spark.ember.executor.driverLease", 120.0, SECONDS,
       "Ember only (fencing): an executor whose driver has not answered its heartbeat for "
       "this long exits, so no executor of a vanished driver runs on (Spark: after "
       "spark.executor.heartbeat.maxFailures heartbeats, 10 min).",
       by=(EXECUTOR,))
_entry("spark.ember.executor.batchScheduling", True, BOOL,
       "Ember only: an executor's own threads run as SCHED_BATCH (Linux), so its wake-ups "
       "(a LaunchTask, a task's result) never preempt the driver or a task on that CPU; "
       "its task processes follow spark.ember.task.batchScheduling. Only an executor "
       "started as SCHED_OTHER switches.", by=(EXECUTOR,))
_entry("spark.ember.task.batchScheduling", True, BOOL,
       "Ember only: task processes (local mode's and executors') run as SCHED_BATCH "
       "(Linux): the same share of the CPU, but a task process woken to start a task does "
       "not preempt the driver or executor that sent it, which would otherwise wait "
       "beside a long task while the other task processes' results wait for it. Only "
       "where the driver or executor is SCHED_OTHER (or switched from it).",
       by=(DRIVER, EXECUTOR))
_entry("spark.ember.appClient.reconnectTimeout", 120.0, SECONDS,
       "How long a driver that lost its master waits for a master (restarted, or a standby "
       "taking over) to take its application back before it ends the application.")

# --- master recovery with ZooKeeper (ember/deploy/master/zookeeper.py) --------------------
_section(MASTER)
_entry("spark.deploy.zookeeper.url", None, STRING,
       "ZooKeeper connect string (host:port[,host:port...]) for recoveryMode=ZOOKEEPER.")
_entry("spark.deploy.zookeeper.dir", "/spark", STRING,
       "ZooKeeper path of the master's records, leader election and uploaded resources.")
_entry("spark.ember.deploy.zookeeper.sessionTimeout", 3.0, SECONDS,
       "ZooKeeper session timeout: how soon a dead leader's standby takes over (Spark: 60s).")
_entry("spark.ember.deploy.zookeeper.maxBlobSize", 32 << 20, SIZE_BYTES,
       "Largest uploaded app resource kept in ZooKeeper (chunked znodes, SHA-256 checked).")


# --- speculation (Spark's TaskSetManager.checkSpeculatableTasks) --------------------------
_section(DRIVER)
_entry("spark.speculation", False, BOOL,
       "Launch a second attempt of a task running much longer than its stage's others.")
_entry("spark.speculation.interval", 0.1, MILLIS,
       "How often running tasks are checked for speculation.")
_entry("spark.speculation.multiplier", 3.0, FLOAT,
       "A task is speculatable when running longer than this times the median success.")
_entry("spark.speculation.quantile", 0.9, FLOAT,
       "Fraction of a stage's tasks that must succeed before speculation is considered.")
_entry("spark.speculation.minTaskRuntime", 0.1, MILLIS,
       "Minimum run time of a task before it may be speculated.")
_entry("spark.speculation.task.duration.threshold", None,
       MILLIS,
       "Speculate a task running longer than this even before the quantile is reached, when "
       "the stage has no more tasks than one executor's slots.")
_entry("spark.speculation.efficiency.enabled", True, BOOL,
       "Speculate only inefficient tasks (Ember measures no per-task record rate, so every "
       "task past the threshold counts as inefficient, as Spark treats a task without one).")
_entry("spark.speculation.efficiency.processRateMultiplier", 0.75, FLOAT,
       "Spark's process-rate bound for inefficient tasks (no record rate in Ember).")
_entry("spark.speculation.efficiency.longRunTaskFactor", 2.0, FLOAT,
       "A task running longer than this times the threshold is speculated regardless of rate.")

# --- exclude on failure (Spark's HealthTracker / TaskSetExcludelist) ---------------------
_section(DRIVER)
_entry("spark.excludeOnFailure.enabled", False, BOOL,
       "Stop scheduling on executors and nodes that keep failing tasks.")
_entry("spark.excludeOnFailure.timeout", 3600.0, SECONDS,
       "How long an executor or node stays excluded for the whole application.")
_entry("spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor", 1, INT,
       "Failed attempts of one task on an executor before that task avoids it.")
_entry("spark.excludeOnFailure.task.maxTaskAttemptsPerNode", 2, INT,
       "Failed attempts of one task on a node before that task avoids it.")
_entry("spark.excludeOnFailure.stage.maxFailedTasksPerExecutor", 2, INT,
       "Distinct failed tasks of a stage on an executor before the stage avoids it.")
_entry("spark.excludeOnFailure.stage.maxFailedExecutorsPerNode", 2, INT,
       "Executors of a node excluded for a stage before the stage avoids the node.")
_entry("spark.excludeOnFailure.application.maxFailedTasksPerExecutor", 2, INT,
       "Failed tasks (of successful task sets) on an executor before the app excludes it.")
_entry("spark.excludeOnFailure.application.maxFailedExecutorsPerNode", 2, INT,
       "Excluded executors on a node before the application excludes the node.")
_entry("spark.excludeOnFailure.killExcludedExecutors", False, BOOL,
       "Kill executors (and all executors of a node) when the application excludes them.")
_entry("spark.excludeOnFailure.application.fetchFailure.enabled", False, BOOL,
       "Exclude an executor (its node with the shuffle service) at its first fetch failure.")
_entry("spark.scheduler.excludeOnFailure.unschedulableTaskSetTimeout", 120.0,
       SECONDS,
       "Wait for a new executor before aborting a task set no executor may run.")

_entry("spark.ember.deploy.driverAdmission.reserveExecutor", True, BOOL,
       "Launch a cluster-mode driver only where it and one executor of its "
       "application (spark.executor.cores / memory) fit beside the running drivers and "
       "their reservations, so drivers cannot take every core (false: Spark's behaviour).",
       by=(MASTER,))



# --- submission and the application's identity -------------------------------------------
_section(DRIVER)
_entry("spark.app.id", None, STRING, "The application id the cluster manager gave (set by Ember).")
_entry("spark.app.startTime", None, INT, "Start time of the application, ms (set by Ember).")
_entry("spark.home", None, STRING, "Spark home directory of the application.")
_entry("spark.user", None, STRING, "User running the application: an owner in every ACL.",
       by=(DRIVER, MASTER, WORKER, HISTORY))
_entry("spark.submit.deployMode", "client", STRING,
       "client (driver in the submitting process) or cluster (driver on a worker).",
       by=(SUBMIT, DRIVER))
_entry("spark.submit.pyFiles", "", LIST,
       "Comma-separated .py/.zip/.egg files put on the PYTHONPATH of the driver and executors.",
       by=(SUBMIT, DRIVER, WORKER))
_entry("spark.files", "", LIST,
       "Comma-separated files shipped to every executor's working directory.",
       by=(SUBMIT, DRIVER, WORKER))
_entry("spark.archives", "", LIST,
       "Comma-separated archives (.zip, .jar, .tar.gz, .tgz, .tar; name#alias for another "
       "directory name) unpacked for the driver and every executor (SparkContext.addArchive).",
       by=(SUBMIT, DRIVER, WORKER))
_entry("spark.ember.files", None, LIST,
       "Ember only, set by the driver: the shipped files an executor's tasks fetch.",
       by=(EXECUTOR,))
_entry("spark.standalone.submit.waitAppCompletion", False, BOOL,
       "In cluster mode, `submit` waits until the driver finishes.", by=(SUBMIT,))
_entry("spark.cores.max", None, INT,
       "Most cores the application takes across the cluster (default spark.deploy.defaultCores).",
       by=(DRIVER, SUBMIT, REST))
_entry("spark.driver.cores", 1, INT, "Cores of a cluster-mode driver.", by=(SUBMIT, REST))
_entry("spark.driver.supervise", False, BOOL,
       "Restart a cluster-mode driver that exits with a non-zero code.", by=(SUBMIT, REST))
_entry("spark.driver.supervise.maxRetries", 10, INT,
       "Restarts of a supervised driver within spark.driver.supervise.window before the "
       "worker gives up (Spark restarts forever).", by=(WORKER,))
_entry("spark.driver.supervise.window", 3600.0, SECONDS,
       "Window in which spark.driver.supervise.maxRetries restarts are counted.", by=(WORKER,))
_entry("spark.driver.memoryOverhead", None, SIZE_MB,
       "Memory beyond spark.driver.memory a client-mode driver may use before it is limited.",
       by=(SUBMIT,))
_entry("spark.executor.memoryOverhead", None, SIZE_MB,
       "Executor memory beyond spark.executor.memory (part of the default resource profile).")
_entry("spark.memory.offHeap.enabled", False, BOOL,
       "Count spark.memory.offHeap.size in the default resource profile.")
_entry("spark.memory.offHeap.size", 0, SIZE_MB, "Off-heap memory of an executor.")
_entry("spark.driver.host", None, STRING,
       "Address executors and the master reach the driver at (default: this host).",
       by=(DRIVER, WORKER))
_entry("spark.driver.bindAddress", None, STRING,
       "Address the driver's RPC and UI bind to (default: spark.driver.host).")
_entry("spark.driver.port", 0, INT, "Port of the driver's RpcEnv (0: any free port).")
_entry("spark.driver.resourcesFile", None, STRING,
       "JSON file of the resources (GPUs...) allocated to the driver.", by=(DRIVER, WORKER))
_entry("spark.driver.defaultJavaOptions", None, STRING,
       "JVM options of the driver; in REST submissions, where Ember reads spark.* -D options.",
       by=(REST,))
_entry("spark.driver.extraJavaOptions", None, STRING,
       "JVM options of the driver; in REST submissions, where Ember reads spark.* -D options.",
       by=(REST,))
_entry("spark.driver.extraClassPath", None, STRING,
       "Class path entries of a REST-submitted driver (kept in its description).", by=(REST,))
_entry("spark.driver.extraLibraryPath", None, STRING,
       "Library path entries of a REST-submitted driver (kept in its description).",
       by=(REST,))
_entry("spark.serializer.objectStreamReset", 100, INT,
       "PySpark's SparkContext default (listed for compatibility; Ember pickles).")
_entry("spark.rdd.compress", True, BOOL,
       "PySpark's SparkContext default (listed for compatibility).")
_entry("spark.sql.artifact.isolation.enabled", False, BOOL,
       "PySpark's SparkContext default (listed for compatibility).")
_entry("spark.scheduler.minRegisteredResourcesRatio", 0.0, FLOAT,
       "Fraction of the requested cores that must register before the first job runs.")
_entry("spark.scheduler.maxRegisteredResourcesWaitingTime", 30.0, SECONDS,
       "Longest wait for spark.scheduler.minRegisteredResourcesRatio before jobs run anyway.")
_entry("spark.shuffle.registration.maxAttempts", 3, INT,
       "Attempts of an executor to register with the external shuffle service.",
       by=(EXECUTOR,))
_entry("spark.shuffle.readHostLocalDisk", True, BOOL,
       "Reducers read the map output files of other executors on their host from disk "
       "instead of fetching them over RPC.", by=(EXECUTOR,))
_entry("spark.reducer.maxSizeInFlight", 48, SIZE_MB,
       "Bytes of remote shuffle fetch requests a reducer has in flight at once (each request "
       "about a fifth of it).", by=(EXECUTOR,))
_entry("spark.reducer.maxReqsInFlight", 2 ** 31 - 1, INT,
       "Remote shuffle fetch requests a reducer has in flight at once.", by=(EXECUTOR,))
_prefix("spark.executorEnv.", "spark.executorEnv.<NAME>: environment variable NAME of every "
        "executor.", by=(DRIVER, EXECUTOR))
_prefix("spark.driver.resource.", "spark.driver.resource.<name>.{amount,discoveryScript,"
        "vendor}: custom resources of the driver.", by=(DRIVER, WORKER, SUBMIT))
_prefix("spark.executor.resource.", "spark.executor.resource.<name>.{amount,discoveryScript,"
        "vendor}: custom resources of each executor.", by=(DRIVER, EXECUTOR))
_prefix("spark.task.resource.", "spark.task.resource.<name>.amount: custom resources each "
        "task takes.")
_prefix("spark.stage.maxConsecutiveAttempts.", "Never read: the prefix of Spark's "
        "per-stage attempt keys that Ember declines with a message.")
_prefix("spark.hadoop.", "spark.hadoop.<key>: Hadoop configuration; Ember reads the "
        "spark.hadoop.fs.s3a.* keys of its S3 client.", by=(DRIVER, EXECUTOR, HISTORY))

# --- job (local properties set through SparkContext, not configuration) -----------------
_section(JOB)
_entry("spark.job.description", None, STRING, "Description of the jobs a thread submits.")
_entry("spark.jobGroup.id", None, STRING, "Job group of the jobs a thread submits.")
_entry("spark.job.interruptOnCancel", False, BOOL,
       "Interrupt the tasks of a cancelled job group.")
_entry("spark.job.tags", "", LIST, "Tags of the jobs a thread submits (cancelJobsWithTag).")
_entry("spark.scheduler.pool", "default", STRING, "FAIR scheduler pool of a thread's jobs.")
_entry("spark.ember.scheduler.queueShortTasks", True, BOOL,
       "Ember only: once a task set's tasks finish in under 5 ms, each busy task slot of an "
       "executor (or of local mode) is given more of them (spark.ember.scheduler.queueDepth), "
       "which its task process starts as soon as its current task ends (no round trip to the "
       "driver in between) and whose results it reports together. Never for barrier stages, "
       "tasks needing more than one core or custom resources, or with speculation.", by=(DRIVER,))
_entry("spark.ember.scheduler.queueDepth", None, INT,
       "Ember only: how many short tasks may wait behind each busy task slot when "
       "spark.ember.scheduler.queueShortTasks is on (1 to 63; unset: 31 in local mode, 63 on "
       "a cluster, where a task process's results take longer to come back as new tasks); "
       "fewer for longer tasks, so the tasks waiting on a slot are expected to take under "
       "5 ms in all.", by=(DRIVER,))
_entry("spark.ember.scheduler.handBackAfter", 0.05, MILLIS,
       "Ember only: a task waiting behind a busy slot (spark.ember.scheduler.queueShortTasks) "
       "is handed back unstarted once the slot's running task has run this long (as far as "
       "the pool has heard) and its process has not reached it, or once it has waited this "
       "long itself: it ends KILLED (not counted as a failure) and the "
       "driver runs it on a free slot. Never on local[1], whose one slot is the one it "
       "waits for.", by=(DRIVER, EXECUTOR))

# --- networking and RPC ---------------------------------------------------------------------
_section(*RPC)
_entry("spark.network.timeout", 120.0, SECONDS,
       "Default timeout for all network interactions: spark.rpc.askTimeout, "
       "spark.storage.blockManagerHeartbeatTimeoutMs and spark.shuffle.io.connectionTimeout "
       "take it when unset.",
       by=(*RPC, SUBMIT, REST))
_entry("spark.rpc.askTimeout", None, SECONDS, "Default timeout of an RPC ask.",
       by=(*RPC, SUBMIT, REST), fallback="spark.network.timeout")
_entry("spark.executor.heartbeatInterval", 10.0, MILLIS,
       "How often an executor tells the driver it is alive (less than spark.network.timeout, "
       "as Spark requires).", by=(DRIVER, EXECUTOR))
_entry("spark.storage.blockManagerHeartbeatTimeoutMs", None, MILLIS,
       "The driver removes (and the master replaces) an executor it has not heard a "
       "heartbeat from for this long: a stopped or hung executor process, whose connection "
       "stays open, no longer holds its tasks forever.", by=(DRIVER,),
       fallback="spark.network.timeout")
_entry("spark.shuffle.io.connectionTimeout", None, SECONDS,
       "How long a reducer waits for another executor or shuffle service to answer a fetch "
       "of map output before the fetch fails (a FetchFailed: the map stage runs again).",
       by=(EXECUTOR,), fallback="spark.network.timeout")
_entry("spark.network.timeoutInterval", 60.0, MILLIS,
       "How often the driver looks for executors whose heartbeats stopped (at most "
       "spark.network.timeout, as Spark requires).", by=(DRIVER,))
_entry("spark.rpc.message.maxSize", 128, FLOAT,
       "Largest RPC message, in MiB (at most 2047).")
_entry("spark.rpc.connect.timeout", 10.0, SECONDS, "Timeout of opening an RPC connection.")
_entry("spark.ember.rpc.inprocess", False, BOOL,
       "Ember only: deliver RPC messages between envs of one process without sockets.")
_entry("spark.ember.rpc.executorThreads", 8, INT,
       "Ember only: threads running RPC handlers that block.")
_entry("spark.ember.rpc.handshakeTimeout", 5.0, SECONDS,
       "Ember only: time a new connection has to complete its authentication handshake.")
_entry("spark.ember.rpc.maxPendingConnections", 64, INT,
       "Ember only: connections that may be mid-handshake at once; more are refused.")
_entry("spark.ember.rpc.inboundBufferBudget", 1024, FLOAT,
       "Ember only: MiB of partly received frames an env buffers over all connections.")
_entry("spark.ember.rpc.stalledFrameTimeout", 30.0, SECONDS,
       "Ember only: a connection whose frame stops arriving for this long is closed.")
_prefix("spark.rpc.", "The spark.rpc.* keys, passed on to executors and cluster-mode drivers.")
_prefix("spark.port.", "The spark.port.* keys, passed on to executors and drivers.")

# --- security ---------------------------------------------------------------------------------
_section(*RPC, HISTORY, SUBMIT, REST)
_entry("spark.authenticate", False, BOOL,
       "Authenticate every RPC connection (and the HTTP servers) with a shared secret.")
_entry("spark.authenticate.secret", None, STRING, "The shared secret (redacted everywhere).")
_entry("spark.authenticate.secret.file", None, STRING,
       "File holding the shared secret (default ~/.ember/secret when it exists).")
_entry("spark.network.crypto.enabled", False, BOOL,
       "Encrypt RPC traffic (AES-GCM, keys from the authentication handshake; needs "
       "spark.authenticate).")
_prefix("spark.network.crypto.", "The spark.network.crypto.* keys, passed on to executors.")
_entry("spark.ember.network.insecure.allowUnauthenticated", False, BOOL,
       "Ember only: accept connections from other users without spark.authenticate "
       "(default: only the daemon's own user, checked by the kernel).")
_prefix("spark.ember.network.", "The spark.ember.network.* keys, passed on to executors.")
_prefix("spark.ember.rpc.", "The spark.ember.rpc.* keys, passed on to executors.")
_entry("spark.io.encryption.enabled", False, BOOL,
       "Encrypt shuffle and spill files (AES-GCM, a key per application).",
       by=(DRIVER, EXECUTOR, WORKER))
_entry("spark.ember.io.encryption.secret", None, STRING,
       "Ember only, set by the driver: the application's I/O encryption key (redacted).",
       by=(EXECUTOR,))
_entry("spark.acls.enable", False, BOOL, "Check the UI view/modify ACLs.",
       by=(DRIVER, MASTER, WORKER, HISTORY))
_section(DRIVER, MASTER, WORKER, HISTORY)
_entry("spark.admin.acls", None, LIST, "Users who may view and modify everything.")
_entry("spark.admin.acls.groups", None, LIST, "Groups who may view and modify everything.")
_entry("spark.ui.view.acls", None, LIST, "Users who may view the UI.")
_entry("spark.ui.view.acls.groups", None, LIST, "Groups who may view the UI.")
_entry("spark.modify.acls", None, LIST, "Users who may kill jobs, stages and applications.")
_entry("spark.modify.acls.groups", None, LIST, "Groups who may kill.")
_entry("spark.ember.ui.token.maxLifetime", 86400.0, SECONDS,
       "Ember only: lifetime of a UI login token.")
_entry("spark.ember.ui.allowedHosts", None, LIST,
       "Ember only: Host headers the HTTP servers accept besides their own addresses.")
_entry("spark.ember.ui.headerTimeout", 10.0, SECONDS,
       "Ember only: time a client has to send a request's headers.")
_entry("spark.ember.ui.idleTimeout", 60.0, SECONDS,
       "Ember only: an idle HTTP connection is closed after this.")
_entry("spark.ember.ui.maxConnections", 256, INT,
       "Ember only: HTTP connections a server holds at once.")
_prefix("spark.ssl.", "spark.ssl.<name> and spark.ssl.<namespace>.<name> (namespaces "
        "standalone, ui, historyServer): enabled, port, certChain/certFile, privateKey/keyFile, "
        "keyStore (PEM), keyPassword, trustStore (PEM), protocol.")

# --- unsupported safety keys: a non-default value stops the process at start --------------
_section(*RPC, HISTORY, SUBMIT)
_entry("spark.authenticate.enableSaslEncryption", False, BOOL,
       "Spark's SASL encryption is not implemented; use spark.network.crypto.enabled.",
       unsupported=True)
_entry("spark.network.sasl.serverAlwaysEncrypt", False, BOOL,
       "SASL is not implemented, so a server cannot insist on SASL encryption; use "
       "spark.network.crypto.enabled.", unsupported=True)
_entry("spark.ssl.rpc.enabled", False, BOOL,
       "TLS for RPC is not implemented; RPC is encrypted with spark.network.crypto.enabled.",
       unsupported=True)
_entry("spark.ssl.needClientAuth", False, BOOL,
       "Client-certificate authentication of the HTTPS servers is not implemented.",
       unsupported=True)
_entry("spark.ssl.enabledAlgorithms", None, STRING,
       "Restricting the TLS cipher suites is not implemented.", unsupported=True)
_entry("spark.ui.filters", None, STRING,
       "Servlet filters (authentication in front of the UIs) are not implemented; use "
       "spark.authenticate and the ACLs.", unsupported=True)
_entry("spark.ui.strictTransportSecurity", None, STRING,
       "The HSTS header is not implemented.", unsupported=True)
_entry("spark.redaction.string.regex", None, STRING,
       "Redaction of matching text in the UI's strings is not implemented (spark.redaction.regex "
       "is).", unsupported=True)
_entry("spark.user.groups.mapping", "org.apache.spark.security.ShellBasedGroupsMappingProvider",
       STRING, "Only the operating system's groups are used for group ACLs.", unsupported=True)

# --- standalone master ------------------------------------------------------------------------
_section(MASTER)
_entry("spark.worker.timeout", 60.0, SECONDS,
       "Seconds without a heartbeat before the master drops a worker; the worker sends a "
       "heartbeat every timeout/4.", by=(MASTER, WORKER))
_entry("spark.deploy.retainedApplications", 200, INT, "Finished applications the UI keeps.")
_entry("spark.deploy.retainedDrivers", 200, INT, "Finished drivers the UI keeps.")
_entry("spark.deploy.maxDrivers", 2147483647, INT, "Drivers the master runs at once.")
_entry("spark.dead.worker.persistence", 15, INT,
       "Worker timeouts a dead worker stays visible in the UI.")
_entry("spark.deploy.recoveryMode", "NONE", STRING,
       "NONE, FILESYSTEM or ZOOKEEPER: where the master keeps its state for recovery.")
_entry("spark.deploy.recoveryDirectory", "", STRING,
       "Directory of the master's state with recoveryMode=FILESYSTEM.")
_entry("spark.deploy.recoveryTimeout", None, SECONDS,
       "Time a recovering master waits for workers and apps.", by=(MASTER,),
       fallback="spark.worker.timeout")
_entry("spark.deploy.maxExecutorRetries", 10, INT,
       "Consecutive executor failures before an application without executors is removed.")
_entry("spark.deploy.spreadOutDrivers", True, BOOL, "Spread drivers over workers.")
_entry("spark.deploy.spreadOut", True, BOOL, "Legacy name of spark.deploy.spreadOutApps.")
_entry("spark.deploy.spreadOutApps", None, BOOL,
       "Spread an application's executors over workers (else consolidate).",
       fallback="spark.deploy.spreadOut")
_entry("spark.deploy.workerSelectionPolicy", "CORES_FREE_DESC", STRING,
       "Order in which workers are offered executors (CORES_FREE_ASC/DESC, MEMORY_FREE_ASC/DESC,"
       " WORKER_ID).")
_entry("spark.deploy.defaultCores", 2147483647, INT,
       "Cores of an application that does not set spark.cores.max.")
_entry("spark.deploy.appIdPattern", "app-%s-%04d", STRING, "Application id pattern.")
_entry("spark.deploy.driverIdPattern", "driver-%s-%04d", STRING, "Driver id pattern.")
_entry("spark.deploy.appNumberModulo", None, INT,
       "Wrap application numbers modulo this (at least 1000).")
_entry("spark.master.useAppNameAsAppId.enabled", False, BOOL,
       "Use the application name as its id (when it is a valid id).")
_entry("spark.master.useDriverIdAsAppName.enabled", False, BOOL,
       "Name cluster-mode applications after their driver id.")
_entry("spark.master.ui.port", 8080, INT, "Port of the master's web UI.")
_entry("spark.master.ui.title", None, STRING, "Title of the master's web UI.")
_entry("spark.master.ui.historyServerUrl", None, STRING,
       "History server the master's UI links finished applications to.")
_entry("spark.master.historyServerUrl", None, STRING,
       "Legacy name of spark.master.ui.historyServerUrl.")
_entry("spark.ui.killEnabled", True, BOOL, "The master's UI may kill applications and drivers.")
_entry("spark.master.rest.enabled", True, BOOL,
       "Run the REST submission gateway (Spark 4.1's default). `submit` uses REST only when "
       "the client's configuration sets it true (SparkSubmit's default there is false).",
       by=(MASTER, SUBMIT))
_entry("spark.master.rest.port", 6066, INT, "Port of the REST submission gateway.",
       by=(MASTER, SUBMIT))
_entry("spark.master.rest.host", None, STRING,
       "Address of the REST gateway (default the master's).")
_entry("spark.master.rest.filters", None, LIST,
       "Filters of the REST gateway; org.apache.spark.ui.JWSFilter is supported.")
_prefix("spark.org.apache.spark.ui.JWSFilter.param.",
        "spark.org.apache.spark.ui.JWSFilter.param.secretKey: the JWSFilter's HMAC key.")
_entry("spark.master.rest.allowUnauthenticated", False, BOOL,
       "Ember only: run the REST gateway without authentication.")
_entry("spark.ember.rest.placeholderEnvAllowList", "SPARK_HOME,JAVA_HOME", LIST,
       "Ember only: environment variables {{NAME}} placeholders of REST submissions may name.")
_entry("spark.ember.submit.maxUploadSize", 100 * MiB, SIZE_BYTES,
       "Ember only: largest application resource the master keeps (default 100m).")
_entry("spark.ember.submit.maxTotalUploadSize", 1024 * MiB, SIZE_BYTES,
       "Ember only: what all uploaded resources together may hold (default 1g).")

# --- standalone worker ------------------------------------------------------------------------
_section(WORKER)
_entry("spark.ember.worker.masterLease", None, SECONDS,
       "Ember only (driver fencing, SPARK-19900): a worker that no master has answered for "
       "this many seconds kills the drivers it runs, and a master relaunches a lost worker's "
       "supervised driver only after it (plus 2 s). Set the same value on masters and "
       "workers.", by=(MASTER, WORKER), fallback="spark.worker.timeout")
_entry("spark.worker.initialRegistrationRetries", 6, INT,
       "Registration retries at the short (INITIAL, 5-15 s) interval.")
_entry("spark.worker.maxRegistrationRetries", 16, INT,
       "Total registration retries before 'All masters are unresponsive! Giving up.' (exit 1).")
_entry("spark.ember.worker.registrationIntervalScale", 1.0, FLOAT,
       "Ember only: multiplies the INITIAL/PROLONGED registration intervals (tests use 0.01).")
_entry("spark.worker.preferConfiguredMasterAddress", False, BOOL,
       "Re-register with the configured master address rather than the one the master reported.")
_entry("spark.worker.cleanup.enabled", True, BOOL,
       "Periodically delete the work dirs of stopped applications.")
_entry("spark.worker.cleanup.interval", 1800.0, SECONDS, "Seconds between work-dir cleanups.")
_entry("spark.worker.cleanup.appDataTtl", 604800.0, SECONDS,
       "A stopped app's work dir is deleted only if nothing in it changed within this TTL.")
_entry("spark.worker.ui.port", None, INT, "Worker web UI port; overrides --webui-port.")
_entry("spark.worker.ui.retainedExecutors", 1000, INT, "Finished executors kept for the UI.")
_entry("spark.worker.ui.retainedDrivers", 1000, INT, "Finished drivers kept for the UI.")
_entry("spark.worker.idPattern", "worker-%s-%s-%d", STRING,
       "Worker id pattern, formatted with (yyyyMMddHHmmss, host, port).")
_entry("spark.worker.executorStateSync.maxAttempts", 5, INT,
       "Failed ExecutorStateChanged asks to the master before the worker exits.")
_entry("spark.ember.worker.executorTerminateTimeout", 10.0, SECONDS,
       "Ember only: grace period between SIGTERM and SIGKILL when killing an executor's "
       "process tree (Spark hard-codes 10 s).")
_entry("spark.ember.worker.executorZygote", True, BOOL,
       "Ember only: the worker forks executors from a process that has already imported "
       "them (ember.deploy.worker.executor_zygote) instead of spawning each one; executors "
       "that do not fit it are spawned either way.")
_entry("spark.worker.driverTerminateTimeout", 10.0, MILLIS,
       "Grace period between SIGTERM and SIGKILL when killing a driver.")
_entry("spark.worker.decommission.signal", "PWR", STRING,
       "Signal that makes a worker decommission itself.")
_entry("spark.worker.resourcesFile", None, STRING,
       "JSON file of the resources (GPUs...) the worker offers.")
_prefix("spark.worker.resource.", "spark.worker.resource.<name>.{amount,discoveryScript}: "
        "custom resources the worker offers.")

# --- history server -----------------------------------------------------------------------
_section(HISTORY)
_entry("spark.history.fs.logDirectory", "file:/tmp/spark-events", STRING,
       "Directory of the event logs the history server shows.")
_entry("spark.history.ui.port", 18080, INT, "Port of the history server.")
_entry("spark.history.ui.host", None, STRING,
       "Address of the history server (default SPARK_LOCAL_IP, else 127.0.0.1).")
_entry("spark.history.ui.acls.enable", False, BOOL,
       "Check each application's view ACLs in the history server.")
_entry("spark.history.ui.admin.acls", None, LIST,
       "Users who may view every application in the history server.")
_entry("spark.history.ui.admin.acls.groups", None, LIST,
       "Groups who may view every application in the history server.")


# ---------------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------------

def declared(key: str) -> bool:
    """Whether `key` is a declared key or belongs to a declared prefix family."""
    return key in REGISTRY or any(key.startswith(p) for p in PREFIXES)


def read(conf: Mapping[str, Any] | Any, key: str, default: Any = None) -> Any:
    """Typed value of the declared `key` from a dict or SparkConf, else `default`, else the
    registry's default. KeyError for an undeclared key: declare it above first."""
    return REGISTRY[key].read(conf, default)


def source_key(conf: Mapping[str, Any] | Any, key: str) -> str:
    """The key whose value `read(conf, key)` returns: `key`, or the fallback it follows while
    unset (what an error about that value should name)."""
    entry = REGISTRY[key]
    while conf.get(entry.key, None) is None and entry.fallback is not None:
        entry = REGISTRY[entry.fallback]
    return entry.key


def check_unsupported(conf: Mapping[str, Any] | Any) -> None:
    """Fail fast on a safety key Ember does not implement, set to a non-default value (also
    spark.ssl.<namespace>.<name> forms of the spark.ssl.* ones). ValueError, one line."""
    items = conf.items() if hasattr(conf, "items") else conf.getAll()
    for key, raw in items:
        entry = REGISTRY.get(key)
        if entry is None and key.startswith("spark.ssl.") and key.count(".") == 3:
            entry = REGISTRY.get("spark.ssl." + key.split(".")[3])   # spark.ssl.<ns>.<name>
        if entry is None or not entry.unsupported or raw is None:
            continue
        try:
            value = entry.parse_value(raw)
        except ValueError:
            value = raw
        if value != entry.default:
            raise ValueError(f"{key}={raw} is not supported by Ember: {entry.doc} (remove the "
                             "setting, or set it to Spark's default)")


# ---------------------------------------------------------------------------------------------
# The reference page (docs/configuration.md)
# ---------------------------------------------------------------------------------------------

def _format_default(e: ConfigEntry) -> str:
    d = e.default
    if e.fallback is not None:
        return f"(value of {e.fallback})"
    if e.prefix or d is None or d == "":
        return "(none)"
    if isinstance(d, bool):
        return str(d).lower()
    if e.type is SIZE_MB:
        return f"{d}m"
    if e.type is SIZE_BYTES:
        return f"{d // MiB}m" if d % MiB == 0 else str(d)
    if e.type in (SECONDS, MILLIS):
        return "(never)" if d == float("inf") else duration_to_string(d)
    return str(d)


def markdown() -> str:
    """Spark's configuration page for Ember: every key, its default, meaning and readers."""
    out = ["# Ember configuration", "",
           "Generated from `ember/config.py` by `python -m ember.config --markdown > "
           "docs/configuration.md`; do not edit by hand (tests/test_config_registry.py checks "
           "that this page is current).", "",
           "Keys are Spark's names with Spark's defaults where Spark has the concept; "
           "`spark.ember.*` keys are Ember's own. Sizes take Spark's suffixes (b, k, m, g, t, "
           "p); durations take us, ms, s, m/min, h, d; a bare number counts in the unit the "
           "Type column names.", "",
           "| Key | Default | Type | Meaning | Read by |", "|---|---|---|---|---|"]
    for e in sorted(REGISTRY.values(), key=lambda e: e.key):
        if not e.unsupported:
            out.append(_row(e))
    out += ["", "## Key families", "", "| Prefix | Meaning | Read by |", "|---|---|---|"]
    for e in sorted(PREFIXES.values(), key=lambda e: e.key):
        out.append(f"| `{e.key}*` | {_cell(e.doc)} | {', '.join(e.read_by)} |")
    out += ["", "## Spark keys Ember refuses", "",
            "Spark defines these for safety, and Ember does not implement them. Set to anything "
            "but Spark's default, they stop the master, worker, history server, SparkContext or "
            "`submit` at start with one line naming the key, rather than run without the "
            "protection asked for. The spark.ssl.* ones are refused in their "
            "spark.ssl.&lt;namespace&gt;.* forms too.", "",
            "| Key | Spark's default | Why |", "|---|---|---|"]
    for e in sorted(REGISTRY.values(), key=lambda e: e.key):
        if e.unsupported:
            out.append(f"| `{e.key}` | {_cell(_format_default(e))} | {_cell(e.doc)} |")
    return "\n".join(out) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _row(e: ConfigEntry) -> str:
    return (f"| `{e.key}` | {_cell(_format_default(e))} | {e.type.name} | {_cell(e.doc)} | "
            f"{', '.join(e.read_by)} |")

if __name__ == "__main__":
    if sys.argv[1:] != ["--markdown"]:
        sys.exit("usage: python -m ember.config --markdown > docs/configuration.md")
    sys.stdout.write(markdown())
