"""The one registry of configuration keys Ember reads: name, type, default and a line of doc.

Spark's `spark.*` names where Spark has the concept. Values arrive as strings (SparkConf,
`--conf`, properties files, environment) and are parsed here, so every reader agrees on what
"512m" or "3s" means and a bad value fails with a message naming the key.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

_MEM_UNITS = {"b": 1 / (1024 * 1024), "k": 1 / 1024, "kb": 1 / 1024, "m": 1, "mb": 1,
              "g": 1024, "gb": 1024, "t": 1024 * 1024, "tb": 1024 * 1024,
              "p": 1024 ** 3, "pb": 1024 ** 3}
_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0,
               "h": 3600.0, "d": 86400.0}


def _size_mb(value: str, default_unit: str) -> float:
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*([a-z]*)", str(value).strip().lower())
    if not m or (m.group(2) and m.group(2) not in _MEM_UNITS):
        raise ValueError(f"Invalid memory string: {value!r} (expected e.g. 512m, 2g)")
    return float(m.group(1)) * _MEM_UNITS[m.group(2) or default_unit]


def parse_memory_mb(value: str | int, default_unit: str = "m") -> int:
    """'512m' -> 512, '2g' -> 2048, '1024' -> 1024 (in default_unit). Raises ValueError."""
    return value if isinstance(value, int) else int(_size_mb(value, default_unit))


def parse_bytes(value: str | int) -> int:
    """'64m' -> 67108864, '1024' -> 1024 (bytes). Raises ValueError."""
    return value if isinstance(value, int) else round(_size_mb(value, "b") * (1 << 20))


def parse_time_seconds(value: str | float, default_unit: str = "s") -> float:
    """'3s' -> 3.0, '200ms' -> 0.2, '60' -> 60 (in default_unit). Raises ValueError."""
    if isinstance(value, (int, float)):
        return float(value) * _TIME_UNITS[default_unit]
    s = str(value).strip().lower()
    m = re.fullmatch(r"(-?\d+(?:\.\d+)?)\s*([a-z]*)", s)
    if not m or (m.group(2) and m.group(2) not in _TIME_UNITS):
        raise ValueError(f"Invalid time string: {value!r} (expected e.g. 3s, 200ms)")
    return float(m.group(1)) * _TIME_UNITS[m.group(2) or default_unit]


def parse_bool(value: str | bool) -> bool:
    if isinstance(value, bool):
        return value
    s = str(value).strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise ValueError(f"Invalid boolean: {value!r}")


@dataclass(frozen=True)
class ConfigEntry:
    key: str
    default: Any
    parse: Callable[[Any], Any]
    doc: str


REGISTRY: dict[str, ConfigEntry] = {}


def _entry(key: str, default: Any, parse: Callable[[Any], Any], doc: str) -> ConfigEntry:
    e = ConfigEntry(key, default, parse, doc)
    REGISTRY[key] = e
    return e


def _int(v: Any) -> int:
    return int(str(v).strip())


def _str(v: Any) -> str:
    return str(v)


def _float(v: Any) -> float:
    return float(str(v).strip())


# --- application / driver runtime -------------------------------------------------------
_entry("spark.app.name", None, _str, "Application name.")
_entry("spark.master", None, _str, "Master URL: local, local[N], local[*], local[N,F], spark://...")
_entry("spark.default.parallelism", None, _int, "Default partitions for parallelize and shuffles.")
_entry("spark.task.maxFailures", 4, _int, "Attempts per task before the job is aborted (cluster).")
_entry("spark.stage.maxConsecutiveAttempts", 4, _int,
       "Consecutive fetch-failure attempts of a stage before it is aborted.")
_entry("spark.scheduler.mode", "FIFO", lambda v: str(v).upper(), "FIFO or FAIR.")
_entry("spark.scheduler.allocation.file", None, _str, "fairscheduler.xml with pool definitions.")
_entry("spark.local.dir", None, _str, "Comma-separated scratch dirs for shuffle and spills.")
_entry("spark.python.worker.memory", 512, parse_memory_mb,
       "Memory per task process for aggregation before spilling to disk (e.g. 512m).")
_entry("spark.executor.memory", 1024, parse_memory_mb, "Memory per executor (MB).")
_entry("spark.driver.memory", 1024, parse_memory_mb, "Driver memory (MB).")
_entry("spark.executor.pyspark.memory", None, parse_memory_mb,
       "Address-space limit (RLIMIT_AS) of the executor's Python task processes, divided "
       "among spark.executor.cores; a task allocating past it fails with MemoryError.")
_entry("spark.memory.fraction", 0.6, _float, "Fraction of (heap - 300MB) for execution+storage.")
_entry("spark.ember.storage.memory", None, parse_memory_mb,
       "Storage memory per task process for cached blocks; default from spark.memory.fraction.")
_entry("spark.ui.showConsoleProgress", True, parse_bool, "Console progress bar on stderr (tty only).")
_entry("spark.ui.enabled", True, parse_bool, "Run the application web UI on the driver.")
_entry("spark.ui.port", 4040, _int, "Port of the application UI; busy ports retry upwards.")
_entry("spark.port.maxRetries", 16, _int, "Successive ports tried when a port is busy.")
_entry("spark.ui.retainedJobs", 1000, _int, "Finished jobs the UI and REST API remember.")
_entry("spark.ui.retainedStages", 1000, _int, "Finished stages the UI and REST API remember.")
_entry("spark.ui.retainedTasks", 100000, _int, "Tasks per stage the UI and REST API remember.")
_entry("spark.ui.retainedDeadExecutors", 100, _int, "Removed executors the UI remembers.")
_entry("spark.eventLog.enabled", False, parse_bool,
       "Write the application's events to spark.eventLog.dir (for the history server).")
_entry("spark.eventLog.dir", "file:/tmp/spark-events", _str,
       "Existing directory (file: URI or path) where event logs are written.")
# Spark 4 turns both on by default; Ember writes plain JSON lines in one file unless asked.
_entry("spark.eventLog.compress", False, parse_bool,
       "Compress the event log (spark.eventLog.compression.codec; Ember writes zstd).")
_entry("spark.eventLog.compression.codec", "zstd", _str,
       "Event log codec; Ember supports zstd (Spark's default) only.")
_entry("spark.eventLog.rolling.enabled", False, parse_bool,
       "Write the event log as Spark's rolling directory eventlog_v2_<appId> of files of at "
       "most spark.eventLog.rolling.maxFileSize.")
_entry("spark.eventLog.rolling.maxFileSize", 128 << 20, parse_bytes,
       "Size (bytes, or with a unit: 64m) at which a rolling event log starts a new file; "
       "at least 10 MiB.")
_entry("spark.scheduler.listenerbus.eventqueue.capacity", 10000, _int,
       "Events that may wait for the UI and event log; more are dropped, with an error.")
_entry("spark.redaction.regex", "(?i)secret|password|token|access[.]?key", _str,
       "Configuration keys (and values) matching this are redacted in the UI and event log.")
_entry("spark.locality.wait", 3.0, parse_time_seconds, "Delay-scheduling wait per locality level.")
_entry("spark.python.task.killTimeout", 2.0, parse_time_seconds,
       "Time a killed task gets to stop before its task process is killed and replaced.")
_entry("spark.ember.worker.maxCrashes", 4, _int,
       "Attempts of a task whose task process dies (even in local mode, where maxFailures is 1).")
_entry("spark.barrier.sync.timeout", 31536000.0, parse_time_seconds,
       "Time the coordinator waits for all tasks of a barrier stage to call barrier() or "
       "allGather() before failing the call in every task.")
_entry("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", 15.0, parse_time_seconds,
       "Wait before checking again that a barrier stage's tasks all fit in the free slots.")
_entry("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", 40, _int,
       "Failed slot checks of a barrier job before it fails with Spark's SPARK-24819 error.")

# --- custom resources, resource profiles, dynamic allocation -----------------------------
_entry("spark.task.cpus", 1, _int, "Cores each task takes from its executor.")
_entry("spark.executor.cores", None, _int,
       "Cores per executor; unset on a standalone cluster: one executor per worker taking "
       "all its free cores.")
_entry("spark.scheduler.resource.profileMergeConflicts", False, parse_bool,
       "Merge (maximum of each request) the different ResourceProfiles of one stage's RDDs "
       "instead of failing the job.")
_entry("spark.starvation.timeout", 15.0, parse_time_seconds,
       "How often a cluster driver warns that submitted tasks found no executor yet.")
_entry("spark.dynamicAllocation.enabled", False, parse_bool,
       "Request executors per resource profile from the standalone master as tasks need them "
       "(required for stage-level profiles with executor requests).")
_entry("spark.dynamicAllocation.minExecutors", 0, _int, "Lower bound of each profile's target.")
_entry("spark.dynamicAllocation.maxExecutors", 2147483647, _int,
       "Upper bound of each profile's executor target.")
_entry("spark.dynamicAllocation.initialExecutors", None, _int,
       "Executors of the default profile asked for before the first stage.")
_entry("spark.executor.instances", None, _int,
       "With dynamic allocation: also a floor of the initial executor target.")
_entry("spark.dynamicAllocation.executorAllocationRatio", 1.0, _float,
       "Fraction of the executors full parallelism would need that is asked for.")
_entry("spark.dynamicAllocation.executorIdleTimeout", 60.0, parse_time_seconds,
       "Idle time after which an executor beyond its profile's target is released.")
_entry("spark.dynamicAllocation.cachedExecutorIdleTimeout", float("inf"), parse_time_seconds,
       "Idle time after which an executor holding cached blocks is released (default: never).")
_entry("spark.dynamicAllocation.schedulerBacklogTimeout", 1.0, parse_time_seconds,
       "Pending tasks backlogged this long make the first executor request.")
_entry("spark.dynamicAllocation.sustainedSchedulerBacklogTimeout", None, parse_time_seconds,
       "Interval of the following (doubling) requests while the backlog lasts (default: "
       "schedulerBacklogTimeout).")
_entry("spark.dynamicAllocation.shuffleTracking.enabled", True, parse_bool,
       "Keep executors holding live shuffle output (without an external shuffle service).")
_entry("spark.dynamicAllocation.shuffleTracking.timeout", float("inf"), parse_time_seconds,
       "Idle time after which an executor holding shuffle output is released anyway.")
_entry("spark.shuffle.service.enabled", False, parse_bool,
       "Executors register their shuffle output with their worker's external shuffle "
       "service, which serves it after they exit.")
_entry("spark.shuffle.service.port", 7337, _int, "Port of the worker's external shuffle service.")
_entry("spark.decommission.enabled", False, parse_bool,
       "Executors of a decommissioned worker drain gracefully instead of being lost.")
_entry("spark.storage.decommission.enabled", False, parse_bool,
       "Decommissioning executors migrate their blocks to other executors.")
_entry("spark.storage.decommission.shuffleBlocks.enabled", True, parse_bool,
       "Migrate shuffle output when decommissioning (needs storage decommission).")
_entry("spark.storage.decommission.rddBlocks.enabled", True, parse_bool,
       "Migrate cached RDD blocks when decommissioning (needs storage decommission).")

_entry("spark.ember.executor.driverLease", 120.0, parse_time_seconds,
       "Ember only (fencing): an executor whose driver has not answered its heartbeat for "
       "this long exits, so no executor of a vanished driver runs on (Spark: after "
       "spark.executor.heartbeat.maxFailures heartbeats, 10 min).")
_entry("spark.ember.appClient.reconnectTimeout", 120.0, parse_time_seconds,
       "How long a driver that lost its master waits for a master (restarted, or a standby "
       "taking over) to take its application back before it ends the application.")

# --- master recovery with ZooKeeper (ember/deploy/master/zookeeper.py) --------------------
_entry("spark.deploy.zookeeper.url", None, _str,
       "ZooKeeper connect string (host:port[,host:port...]) for recoveryMode=ZOOKEEPER.")
_entry("spark.deploy.zookeeper.dir", "/spark", _str,
       "ZooKeeper path of the master's records, leader election and uploaded resources.")
_entry("spark.ember.deploy.zookeeper.sessionTimeout", 3.0, parse_time_seconds,
       "ZooKeeper session timeout: how soon a dead leader's standby takes over (Spark: 60s).")
_entry("spark.ember.deploy.zookeeper.maxBlobSize", 32 << 20, parse_bytes,
       "Largest uploaded app resource kept in ZooKeeper (chunked znodes, SHA-256 checked).")


# --- speculation (Spark's TaskSetManager.checkSpeculatableTasks) --------------------------
_entry("spark.speculation", False, parse_bool,
       "Launch a second attempt of a task running much longer than its stage's others.")
_entry("spark.speculation.interval", 0.1, lambda v: parse_time_seconds(v, "ms"),
       "How often running tasks are checked for speculation.")
_entry("spark.speculation.multiplier", 3.0, _float,
       "A task is speculatable when running longer than this times the median success.")
_entry("spark.speculation.quantile", 0.9, _float,
       "Fraction of a stage's tasks that must succeed before speculation is considered.")
_entry("spark.speculation.minTaskRuntime", 0.1, lambda v: parse_time_seconds(v, "ms"),
       "Minimum run time of a task before it may be speculated.")
_entry("spark.speculation.task.duration.threshold", None,
       lambda v: parse_time_seconds(v, "ms"),
       "Speculate a task running longer than this even before the quantile is reached, when "
       "the stage has no more tasks than one executor's slots.")
_entry("spark.speculation.efficiency.enabled", True, parse_bool,
       "Speculate only inefficient tasks (Ember measures no per-task record rate, so every "
       "task past the threshold counts as inefficient, as Spark treats a task without one).")
_entry("spark.speculation.efficiency.processRateMultiplier", 0.75, _float,
       "Spark's process-rate bound for inefficient tasks (no record rate in Ember).")
_entry("spark.speculation.efficiency.longRunTaskFactor", 2.0, _float,
       "A task running longer than this times the threshold is speculated regardless of rate.")

# --- exclude on failure (Spark's HealthTracker / TaskSetExcludelist) ---------------------
_entry("spark.excludeOnFailure.enabled", False, parse_bool,
       "Stop scheduling on executors and nodes that keep failing tasks.")
_entry("spark.excludeOnFailure.timeout", 3600.0, parse_time_seconds,
       "How long an executor or node stays excluded for the whole application.")
_entry("spark.excludeOnFailure.task.maxTaskAttemptsPerExecutor", 1, _int,
       "Failed attempts of one task on an executor before that task avoids it.")
_entry("spark.excludeOnFailure.task.maxTaskAttemptsPerNode", 2, _int,
       "Failed attempts of one task on a node before that task avoids it.")
_entry("spark.excludeOnFailure.stage.maxFailedTasksPerExecutor", 2, _int,
       "Distinct failed tasks of a stage on an executor before the stage avoids it.")
_entry("spark.excludeOnFailure.stage.maxFailedExecutorsPerNode", 2, _int,
       "Executors of a node excluded for a stage before the stage avoids the node.")
_entry("spark.excludeOnFailure.application.maxFailedTasksPerExecutor", 2, _int,
       "Failed tasks (of successful task sets) on an executor before the app excludes it.")
_entry("spark.excludeOnFailure.application.maxFailedExecutorsPerNode", 2, _int,
       "Excluded executors on a node before the application excludes the node.")
_entry("spark.excludeOnFailure.killExcludedExecutors", False, parse_bool,
       "Kill executors (and all executors of a node) when the application excludes them.")
_entry("spark.excludeOnFailure.application.fetchFailure.enabled", False, parse_bool,
       "Exclude an executor (its node with the shuffle service) at its first fetch failure.")
_entry("spark.scheduler.excludeOnFailure.unschedulableTaskSetTimeout", 120.0,
       parse_time_seconds,
       "Wait for a new executor before aborting a task set no executor may run.")

_entry("spark.ember.deploy.driverAdmission.reserveExecutor", True, parse_bool,
       "Master: launch a cluster-mode driver only where it and one executor of its "
       "application (spark.executor.cores / memory) fit beside the running drivers and "
       "their reservations, so drivers cannot take every core (false: Spark's behaviour).")


def get_entry(key: str) -> ConfigEntry | None:
    return REGISTRY.get(key)


def read(conf: Any, key: str, default: Any = None) -> Any:
    """Typed value of `key` from a SparkConf-like object (with .get), else the registry default."""
    entry = REGISTRY.get(key)
    raw = conf.get(key, None)
    if raw is None:
        if default is not None:
            return default
        return entry.default if entry else None
    if entry is None:
        return raw
    try:
        return entry.parse(raw)
    except (ValueError, TypeError) as e:
        raise ValueError(f"Invalid value for {key}: {raw!r} ({e})") from None

