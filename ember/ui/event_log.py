"""Event logs: Spark's JSON-lines record of an application's listener events.

An app's log is `<spark.eventLog.dir>/<appId>.inprogress` while it runs, renamed to `<appId>`
at stop (`EventLog`), one JSON object per line with Spark's JsonProtocol names, so Spark's own
history server can read Ember's logs and ours can read Spark's. The driver formats the few
events per stage itself (`_dumps`); task lines, most of a log, are formatted from packed
tuples by the driver's UI process (`_TaskLines`, ember.ui.ui_process), which appends and
flushes every bus batch, so a crashed app loses at most the last 50 ms.

`replay(path)` turns a log back into the listener events the live app posted, so the
history server rebuilds an AppStatusStore by feeding them to `on_event`; it tolerates what a
crash leaves behind (a truncated last line, no ApplicationEnd). `list_event_logs(dir)` finds
the logs in a directory. Both also read what Spark 4 writes by default - a rolling directory
`eventlog_v2_<appId>` of zstd-compressed `events_<n>_<appId>.zstd` files - so Ember's history
server shows Spark's applications too (tests/test_spark_interop.py checks both directions
against Spark's own history server).
"""
from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import shutil
import stat
import tempfile
from dataclasses import dataclass
from typing import Any, Iterator, Mapping

from ember import config, fs
from ember.version import SPARK_VERSION
from ember.scheduler import listener as sl
from ember.scheduler.task import (ExceptionFailure, ExecutorLostFailure, FetchFailed, Success,
                                  TaskEndReason, TaskInfo, TaskKilled, TaskProcessCrashed)
from ember.storagelevel import StorageLevel

log = logging.getLogger("ember.ui.EventLoggingListener")

IN_PROGRESS = ".inprogress"
# Spark's BlockManagerId requires a positive port (its history server fails to load a log
# with port 0); Ember's block stores are task processes with no port of their own, so every
# block manager in a log carries this placeholder.
BLOCK_MANAGER_PORT = 1
# Spark's rolling event logs (spark.eventLog.rolling.enabled, on by default since Spark 4).
_ROLLED_DIR = "eventlog_v2_"
_ROLLED_EVENTS = re.compile(r"events_(\d+)_.+")
_CODECS = ("zstd", "lz4", "lzf", "snappy")


def resolve_log_dir(uri: str) -> str:
    """spark.eventLog.dir (`file:/p`, `file:///p` or a plain path) -> an absolute local path;
    a URL (`s3a://bucket/events`, ...) is returned as it is. Raises like Spark when it is not
    an existing directory (Spark never creates it); an object store's prefix with nothing
    under it yet counts as one (object stores have no directories)."""
    if not fs.is_local(uri):
        filesystem, path = fs.filesystem(uri)
        if not filesystem.isdir(path) and filesystem.exists(path):
            raise NotADirectoryError(f"Log directory {uri} is not a directory.")
        return uri.rstrip("/")
    path = uri
    if uri.startswith("file:"):
        path = re.sub(r"^file:(//(localhost)?)?", "", uri)
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"File file:{path} does not exist. Create the event log directory or point "
            f"spark.eventLog.dir at an existing one (spark.eventLog.dir={uri})")
    if not os.path.isdir(path):
        raise NotADirectoryError(f"Log directory file:{path} is not a directory.")
    return path


def log_name(app_id: str, attempt_id: str | None = None) -> str:
    """Spark's EventLogFileWriter.nameForAppAndAttempt (sanitizeDirName of each part)."""
    def sanitize(s: str) -> str:
        return re.sub(r"[.${}'\"]", "_", re.sub(r"[ :/]", "-", s)).lower()
    return sanitize(app_id) + (f"_{sanitize(attempt_id)}" if attempt_id else "")


# --- events -> JSON (Spark's JsonProtocol names) --------------------------------------------
def _ms(t: float | None) -> int | None:
    return None if t is None else round(t * 1000)


def _level_json(level: Any) -> dict[str, Any]:
    level = level or StorageLevel.NONE
    return {"Use Disk": level.useDisk, "Use Memory": level.useMemory,
            "Use Off Heap": level.useOffHeap, "Deserialized": level.deserialized,
            "Replication": level.replication}


def _stage_info_json(s: sl.StageInfo, submitted_only: bool = False) -> dict[str, Any]:
    d: dict[str, Any] = {
        "Stage ID": s.stage_id, "Stage Attempt ID": s.attempt_id, "Stage Name": s.name,
        "Number of Tasks": s.num_tasks,
        "RDD Info": [{"RDD ID": r.rdd_id, "Name": r.name, "Callsite": r.callsite,
                      "Parent IDs": r.parent_ids, "Storage Level": _level_json(r.storage_level),
                      "Barrier": r.barrier, "DeterministicLevel": "DETERMINATE",
                      "Number of Partitions": r.num_partitions,
                      "Number of Cached Partitions": 0, "Memory Size": 0, "Disk Size": 0}
                     for r in s.rdd_infos],
        "Parent IDs": s.parent_ids, "Details": s.details}
    if s.submission_time is not None:
        d["Submission Time"] = _ms(s.submission_time)
    if not submitted_only:      # the live object may already be finished: not at submission
        if s.completion_time is not None:
            d["Completion Time"] = _ms(s.completion_time)
        if s.failure_reason is not None:
            d["Failure Reason"] = s.failure_reason
    d.update({"Accumulables": [], "Resource Profile Id": s.resource_profile_id,
              "Shuffle Push Enabled": False,
              "Shuffle Push Mergers Count": 0})
    return d


def _task_info_json(i: Any, finished: bool) -> dict[str, Any]:
    return {"Task ID": i.task_id, "Index": i.index, "Attempt": i.attempt_number,
            "Partition ID": i.partition_id, "Launch Time": _ms(i.launch_time),
            "Executor ID": i.executor_id, "Host": i.host, "Locality": i.locality,
            "Speculative": i.speculative, "Getting Result Time": 0,
            "Finish Time": _ms(i.finish_time) if finished else 0,
            "Failed": i.failed if finished else False,
            "Killed": i.killed if finished else False, "Accumulables": []}


def _metrics_json(m: Mapping[str, int]) -> dict[str, Any]:
    g = m.get
    return {"Executor Deserialize Time": 0, "Executor Deserialize CPU Time": 0,
            "Executor Run Time": g("executorRunTime", 0),
            "Executor CPU Time": g("executorCpuTime", 0), "Peak Execution Memory": 0,
            "Result Size": g("resultSize", 0), "JVM GC Time": 0,
            "Result Serialization Time": 0, "Memory Bytes Spilled": g("memoryBytesSpilled", 0),
            "Disk Bytes Spilled": g("diskBytesSpilled", 0),
            "Shuffle Read Metrics": {"Remote Blocks Fetched": 0, "Local Blocks Fetched": 0,
                                     "Fetch Wait Time": 0,
                                     "Remote Bytes Read": g("shuffleRemoteBytesRead", 0),
                                     "Remote Bytes Read To Disk": 0,
                                     "Local Bytes Read": g("shuffleLocalBytesRead", 0),
                                     "Total Records Read": 0},
            "Shuffle Write Metrics": {"Shuffle Bytes Written": g("shuffleBytesWritten", 0),
                                      "Shuffle Write Time": 0,
                                      "Shuffle Records Written": g("shuffleRecordsWritten", 0)},
            "Input Metrics": {"Bytes Read": 0, "Records Read": 0},
            "Output Metrics": {"Bytes Written": 0, "Records Written": 0},
            "Updated Blocks": []}


def _reason_json(r: Any) -> dict[str, Any]:
    if isinstance(r, Success):
        return {"Reason": "Success"}
    # Spark shows an ExceptionFailure's "Full Stack Trace" as the task's error: it gets the
    # same text as the live UI's.
    if isinstance(r, ExceptionFailure):
        return {"Reason": "ExceptionFailure", "Class Name": r.exc_type, "Description": r.message,
                "Stack Trace": [], "Full Stack Trace": r.to_error_string(),
                "Accumulator Updates": []}
    if isinstance(r, TaskProcessCrashed):   # no Spark counterpart: an exception of the task
        return {"Reason": "ExceptionFailure", "Class Name": "org.apache.spark.SparkException",
                "Description": r.message, "Stack Trace": [],
                "Full Stack Trace": r.to_error_string(), "Accumulator Updates": []}
    if isinstance(r, FetchFailed):
        d: dict[str, Any] = {"Reason": "FetchFailed"}
        if r.executor_id is not None:
            d["Block Manager Address"] = {"Executor ID": r.executor_id, "Host": "",
                                          "Port": BLOCK_MANAGER_PORT}
        d.update({"Shuffle ID": r.shuffle_id, "Map ID": r.map_index, "Map Index": r.map_index,
                  "Reduce ID": r.reduce_id, "Message": r.message})
        return d
    if isinstance(r, TaskKilled):
        return {"Reason": "TaskKilled", "Kill Reason": r.reason, "Accumulator Updates": []}
    if isinstance(r, ExecutorLostFailure):
        return {"Reason": "ExecutorLostFailure", "Executor ID": r.executor_id,
                "Exit Caused By App": r.exit_caused_by_app, "Loss Reason": r.reason}
    return {"Reason": "UnknownReason"}


def event_to_json(e: Any) -> dict[str, Any] | None:
    """One listener event as Spark's JsonProtocol object; None for events not logged."""
    t = type(e)
    if t is sl.TaskEnd:
        return {"Event": "SparkListenerTaskEnd", "Stage ID": e.stage_id,
                "Stage Attempt ID": e.stage_attempt, "Task Type": e.task_type,
                "Task End Reason": _reason_json(e.reason),
                "Task Info": _task_info_json(e.task_info, True),
                "Task Executor Metrics": {}, "Task Metrics": _metrics_json(e.metrics or {})}
    if t is sl.TaskStart:
        return {"Event": "SparkListenerTaskStart", "Stage ID": e.stage_id,
                "Stage Attempt ID": e.stage_attempt,
                "Task Info": _task_info_json(e.task_info, False)}
    if t is sl.StageSubmitted:
        return {"Event": "SparkListenerStageSubmitted",
                "Stage Info": _stage_info_json(e.stage_info, submitted_only=True),
                "Properties": dict(e.properties)}
    if t is sl.StageCompleted:
        return {"Event": "SparkListenerStageCompleted",
                "Stage Info": _stage_info_json(e.stage_info)}
    if t is sl.JobStart:
        return {"Event": "SparkListenerJobStart", "Job ID": e.job_id,
                "Submission Time": _ms(e.time),
                "Stage Infos": [_stage_info_json(s) for s in e.stage_infos],
                "Stage IDs": [s.stage_id for s in e.stage_infos],
                "Properties": dict(e.properties)}
    if t is sl.JobEnd:
        result: dict[str, Any] = {"Result": "JobSucceeded"} if e.succeeded else {
            "Result": "JobFailed", "Exception": {"Message": e.error, "Stack Trace": []}}
        return {"Event": "SparkListenerJobEnd", "Job ID": e.job_id,
                "Completion Time": _ms(e.time), "Job Result": result}
    if t is sl.ExecutorAdded:
        return {"Event": "SparkListenerExecutorAdded", "Timestamp": _ms(e.time),
                "Executor ID": e.executor_id,
                "Executor Info": {"Host": e.host, "Total Cores": e.cores,
                                  "Log Urls": dict(e.log_urls), "Attributes": {},
                                  "Resources": {n: {"name": n, "addresses": list(a)}
                                                for n, a in e.resources.items()},
                                  "Resource Profile Id": e.resource_profile_id}}
    if t is sl.ExecutorRemoved:
        return {"Event": "SparkListenerExecutorRemoved", "Timestamp": _ms(e.time),
                "Executor ID": e.executor_id, "Removed Reason": e.reason}
    if t is sl.BlockUpdated:
        return {"Event": "SparkListenerBlockUpdated", "Block Updated Info": {
            "Block Manager ID": {"Executor ID": e.executor_id, "Host": e.host,
                                 "Port": BLOCK_MANAGER_PORT},
            "Block ID": e.block_name, "Storage Level": _level_json(e.storage_level),
            "Memory Size": e.mem_size, "Disk Size": e.disk_size}}
    if t is sl.UnpersistRDD:
        return {"Event": "SparkListenerUnpersistRDD", "RDD ID": e.rdd_id}
    if t is sl.ResourceProfileAdded:
        return {"Event": "SparkListenerResourceProfileAdded",
                "Resource Profile Id": e.resource_profile_id,
                "Executor Resource Requests": {
                    n: {"Resource Name": n, "Amount": a, "Discovery Script": s, "Vendor": v}
                    for n, (a, s, v) in e.executor_resources.items()},
                "Task Resource Requests": {n: {"Resource Name": n, "Amount": a}
                                           for n, a in e.task_resources.items()}}
    if t is sl.EnvironmentUpdate:
        d = {"Event": "SparkListenerEnvironmentUpdate"}
        for section in ("JVM Information", "Spark Properties", "Hadoop Properties",
                        "System Properties", "Metrics Properties", "Classpath Entries"):
            d[section] = dict(e.details.get(section, []))
        return d
    if t is sl.ApplicationStart:
        d = {"Event": "SparkListenerApplicationStart", "App Name": e.app_name,
             "App ID": e.app_id, "Timestamp": _ms(e.time), "User": e.user}
        if e.attempt_id is not None:
            d["App Attempt ID"] = e.attempt_id
        return d
    if t is sl.ApplicationEnd:
        return {"Event": "SparkListenerApplicationEnd", "Timestamp": _ms(e.time)}
    if t is sl.LogStart:
        return {"Event": "SparkListenerLogStart", "Spark Version": e.spark_version}
    fields = _JACKSON_EVENTS.get(t)
    if fields is not None:       # Spark writes these with Jackson: class name, camelCase
        d = {"Event": _SCHEDULER_PKG + _JACKSON_NAMES[t]}
        for attr, key in fields:
            v = getattr(e, attr)
            d[key] = _ms(v) if attr == "time" else v
        return d
    return None


# Events Spark serializes with Jackson (no JsonProtocol case): "Event" is the class's full
# name and the fields are the case class's own names.
_SCHEDULER_PKG = "org.apache.spark.scheduler."
_JACKSON_NAMES = {
    sl.SpeculativeTaskSubmitted: "SparkListenerSpeculativeTaskSubmitted",
    sl.ExecutorExcluded: "SparkListenerExecutorExcluded",
    sl.ExecutorUnexcluded: "SparkListenerExecutorUnexcluded",
    sl.NodeExcluded: "SparkListenerNodeExcluded",
    sl.NodeUnexcluded: "SparkListenerNodeUnexcluded",
    sl.ExecutorExcludedForStage: "SparkListenerExecutorExcludedForStage",
    sl.NodeExcludedForStage: "SparkListenerNodeExcludedForStage"}
_JACKSON_EVENTS = {
    sl.SpeculativeTaskSubmitted: (("stage_id", "stageId"), ("stage_attempt_id", "stageAttemptId"),
                                 ("task_index", "taskIndex"), ("partition_id", "partitionId")),
    sl.ExecutorExcluded: (("time", "time"), ("executor_id", "executorId"),
                         ("task_failures", "taskFailures")),
    sl.ExecutorUnexcluded: (("time", "time"), ("executor_id", "executorId")),
    sl.NodeExcluded: (("time", "time"), ("host_id", "hostId"),
                     ("executor_failures", "executorFailures")),
    sl.NodeUnexcluded: (("time", "time"), ("host_id", "hostId")),
    sl.ExecutorExcludedForStage: (("time", "time"), ("executor_id", "executorId"),
                                 ("task_failures", "taskFailures"), ("stage_id", "stageId"),
                                 ("stage_attempt_id", "stageAttemptId")),
    sl.NodeExcludedForStage: (("time", "time"), ("host_id", "hostId"),
                             ("executor_failures", "executorFailures"),
                             ("stage_id", "stageId"), ("stage_attempt_id", "stageAttemptId"))}
_JACKSON_BY_NAME = {_SCHEDULER_PKG + n: t for t, n in _JACKSON_NAMES.items()}


_ENCODER = json.JSONEncoder(separators=(",", ":"))


def json_line(d: dict) -> str:
    """An event's JSON-protocol dict (event_to_json) as its log line."""
    return _ENCODER.encode(d) + "\n"


def _dumps(e: Any) -> str:
    """One event as a log line ('' for events not logged)."""
    d = event_to_json(e)
    return "" if d is None else json_line(d)


_js = json.encoder.encode_basestring_ascii     # type: ignore[attr-defined]
_BOOL = ("false", "true")
_METRICS_HEAD = (',"Failed":false,"Killed":false,"Accumulables":[]},"Task Executor Metrics":{},'
                 '"Task Metrics":{"Executor Deserialize Time":0,'
                 '"Executor Deserialize CPU Time":0,"Executor Run Time":')
_METRICS_TAIL = (',"Peak Execution Memory":0,"Result Size":%d,"JVM GC Time":0,'
                 '"Result Serialization Time":0,"Memory Bytes Spilled":%d,'
                 '"Disk Bytes Spilled":%d,"Shuffle Read Metrics":{"Remote Blocks Fetched":0,'
                 '"Local Blocks Fetched":0,"Fetch Wait Time":0,"Remote Bytes Read":%d,'
                 '"Remote Bytes Read To Disk":0,"Local Bytes Read":%d,"Total Records Read":0},'
                 '"Shuffle Write Metrics":{"Shuffle Bytes Written":%d,"Shuffle Write Time":0,'
                 '"Shuffle Records Written":%d},"Input Metrics":{"Bytes Read":0,'
                 '"Records Read":0},"Output Metrics":{"Bytes Written":0,"Records Written":0},'
                 '"Updated Blocks":[]}}\n')
_ZERO_TAIL = _METRICS_TAIL % (0, 0, 0, 0, 0, 0, 0)
_TIME_KEYS = frozenset({"executorRunTime", "executorCpuTime"})


def _ids(i: Any) -> str:
    return (f'{i.task_id},"Index":{i.index},"Attempt":{i.attempt_number},'
            f'"Partition ID":{i.partition_id},"Launch Time":{round(i.launch_time * 1000)}')


class _TaskLines:
    """TaskStart and successful TaskEnd lines, byte-identical to event_to_json's, built
    from cached per-(stage, executor) pieces: turning ints into text is most of the cost of
    a line, so only the numbers that change from task to task are formatted. Two lines per
    task are most of a log; everything else goes through event_to_json."""

    def __init__(self) -> None:
        self._pieces: dict[tuple, tuple[str, str, str, str]] = {}
        self._running: dict[int, str] = {}     # task id -> its ids and launch time, as text

    def _cached(self, stage: int, attempt: int, task_type: str, i: Any
                ) -> tuple[str, str, str, str]:
        key = (stage, attempt, task_type, i.executor_id, i.host, i.locality, i.speculative)
        pieces = self._pieces.get(key)
        if pieces is None:
            if len(self._pieces) > 4096:
                self._pieces.clear()
            where = (f',"Executor ID":{_js(i.executor_id)},"Host":{_js(i.host)},'
                     f'"Locality":{_js(i.locality)},"Speculative":{_BOOL[i.speculative]},'
                     f'"Getting Result Time":0,"Finish Time":')
            stage_ids = f'"Stage ID":{stage},"Stage Attempt ID":{attempt},'
            pieces = self._pieces[key] = (
                '{"Event":"SparkListenerTaskStart",' + stage_ids + '"Task Info":{"Task ID":',
                where + '0,"Failed":false,"Killed":false,"Accumulables":[]}}\n',
                '{"Event":"SparkListenerTaskEnd",' + stage_ids +
                f'"Task Type":{_js(task_type)},"Task End Reason":{{"Reason":"Success"}},'
                '"Task Info":{"Task ID":', where)
        return pieces

    def encode(self, e: Any) -> str:
        t = type(e)
        if t is sl.TaskStart:
            i = e.task_info
            head, tail, _, _ = self._cached(e.stage_id, e.stage_attempt, "", i)
            ids = self._running[i.task_id] = _ids(i)
            return f"{head}{ids}{tail}"
        if t is sl.TaskEnd:
            i = e.task_info
            ids = self._running.pop(i.task_id, None)
            if type(e.reason) is Success:
                m = e.metrics or {}
                _, _, head, where = self._cached(e.stage_id, e.stage_attempt, e.task_type, i)
                g = m.get
                rest = _ZERO_TAIL if m.keys() <= _TIME_KEYS else _METRICS_TAIL % (
                    g("resultSize", 0), g("memoryBytesSpilled", 0), g("diskBytesSpilled", 0),
                    g("shuffleRemoteBytesRead", 0), g("shuffleLocalBytesRead", 0),
                    g("shuffleBytesWritten", 0), g("shuffleRecordsWritten", 0))
                return (f'{head}{ids or _ids(i)}{where}{round(i.finish_time * 1000)}'
                        f'{_METRICS_HEAD}{g("executorRunTime", 0)},"Executor CPU Time":'
                        f'{g("executorCpuTime", 0)}{rest}')
        return _dumps(e)


# --- the file ---------------------------------------------------------------------------
class EventLog:
    """The driver's side of an event log: checks spark.eventLog.* up front, creates the log
    once the app id is known (`start`) and marks it complete when the app stops (`finish`).
    The lines are written by the UI process (ember.ui.ui_process) with `EventLogWriter`.

    Layouts, named as Spark names them: one file `<appId>[.zstd].inprogress`, renamed to
    `<appId>[.zstd]`; or, with spark.eventLog.rolling.enabled, a directory
    `eventlog_v2_<appId>` of `events_<n>_<appId>[.zstd]` files and an `appstatus_<appId>`
    file that loses its `.inprogress` at the end."""

    def __init__(self, conf: Any) -> None:
        self.log_dir = resolve_log_dir(config.read(conf, "spark.eventLog.dir"))
        self.remote = not fs.is_local(self.log_dir)
        if not self.remote and not os.access(self.log_dir, os.W_OK | os.X_OK):
            raise PermissionError(f"Cannot write event logs to {self.log_dir}: permission "
                                  "denied (spark.eventLog.dir)")
        self.codec: str | None = None
        if config.read(conf, "spark.eventLog.compress"):
            self.codec = config.read(conf, "spark.eventLog.compression.codec").lower()
            if self.codec != "zstd":
                raise ValueError(f"spark.eventLog.compression.codec={self.codec} is not "
                                 "supported: Ember compresses event logs with zstd only")
        self.rolling = config.read(conf, "spark.eventLog.rolling.enabled")
        self.max_file_size = config.read(conf, "spark.eventLog.rolling.maxFileSize")
        if self.rolling and self.max_file_size < 10 << 20:
            raise ValueError("Max file size of event log should be configured to be at least "
                             "10 MiB (spark.eventLog.rolling.maxFileSize)")
        self._done: tuple[str, str] | None = None     # (in-progress name, final name)
        self._spool = ""                               # a remote log's local copy

    def start(self, app_id: str, attempt_id: str | None = None) -> dict[str, Any]:
        """Create the log with its LogStart line; returns what `EventLogWriter` needs to go
        on writing it. Raises if a log of this app already exists (Spark's 'Target log file
        already exists').

        An object store has no append, so a log there is written to a local spool and
        uploaded when the app stops (as Spark's S3A output stream does): meanwhile the store
        holds the `.inprogress` object with the LogStart line, and a crashed driver leaves
        just that, which the history server lists as incomplete."""
        name = log_name(app_id, attempt_id)
        suffix = f".{self.codec}" if self.codec else ""
        final = (_ROLLED_DIR if self.rolling else "") + name + ("" if self.rolling else suffix)
        if self.remote:
            target = fs.join(self.log_dir, final)
            filesystem, path = fs.filesystem(target)
            if filesystem.exists(path) or filesystem.exists(path + IN_PROGRESS):
                raise FileExistsError(f"Target log file already exists ({target})")
            self._spool = tempfile.mkdtemp(prefix="ember-eventlog-")
            local_dir = self._spool
        else:
            local_dir = self.log_dir
        target = os.path.join(local_dir, final)
        if os.path.exists(target) or os.path.exists(target + IN_PROGRESS):
            raise FileExistsError(f"Target log file already exists ({target})")
        spec: dict[str, Any] = {"codec": self.codec, "rolling": None}
        if self.rolling:
            os.mkdir(target)
            status = os.path.join(target, f"appstatus_{name}")
            open(status + IN_PROGRESS, "xb").close()
            self._done = (status + IN_PROGRESS, status)
            spec["rolling"] = {"dir": target, "name": name, "max_size": self.max_file_size}
            spec["path"] = os.path.join(target, f"events_1_{name}{suffix}")
        else:
            self._done = (target + IN_PROGRESS, target)
            spec["path"] = target + IN_PROGRESS
        writer = EventLogWriter(spec)
        writer.write(_dumps(sl.LogStart(SPARK_VERSION)).encode())
        writer.close()
        if self.remote:
            self._upload(final, in_progress=True)
            log.info("Logging events to %s (uploaded when the application stops)",
                     fs.join(self.log_dir, final))
        else:
            log.info("Logging events to file:%s", spec["path"])
        return spec

    def finish(self) -> None:
        """Mark the log complete, once everything is written (a remote log: upload it)."""
        if self._done is not None and os.path.exists(self._done[0]):
            os.replace(*self._done)
            if self.remote:
                final = os.path.basename(os.path.dirname(self._done[1]) if self.rolling
                                         else self._done[1])
                try:
                    self._upload(final, in_progress=False)
                except Exception as e:     # stopping the app must not fail on it
                    log.error("Cannot upload the event log to %s (%s: %s); it is kept in %s",
                              fs.join(self.log_dir, final), type(e).__name__, e, self._spool)
                    return
                shutil.rmtree(self._spool, ignore_errors=True)

    def _upload(self, final: str, in_progress: bool) -> None:
        """Copy the spool's log to the store: at start as `<final>.inprogress` (a rolling
        log: its directory with the in-progress status file), at the end complete, then
        drop the in-progress object."""
        filesystem, path = fs.filesystem(fs.join(self.log_dir, final))
        local = os.path.join(self._spool, final)
        if not self.rolling:
            if in_progress:
                filesystem.put_file(local + IN_PROGRESS, path + IN_PROGRESS)
            else:
                filesystem.put_file(local, path)
                filesystem.rm_file(path + IN_PROGRESS)
            return
        names = sorted(os.listdir(local))
        for n in names:      # event files first, the status file that completes it last
            if not n.startswith("appstatus_"):
                filesystem.put_file(os.path.join(local, n), f"{path}/{n}")
        for n in names:
            if n.startswith("appstatus_"):
                filesystem.put_file(os.path.join(local, n), f"{path}/{n}")
        if not in_progress:
            with contextlib.suppress(FileNotFoundError):
                status = next(n for n in names if n.startswith("appstatus_"))
                filesystem.rm_file(f"{path}/{status}{IN_PROGRESS}")


class EventLogWriter:
    """Appends to the log `EventLog.start` described: each `write` (one bus batch) becomes
    one zstd frame when compressed, so a reader - or a crash - cuts at most the last batch;
    a rolling log moves on to the next `events_<n>` file once the current one holds
    max_size bytes of text. Raises OSError when the file cannot be written."""

    def __init__(self, spec: Mapping[str, Any]) -> None:
        self.path = spec["path"]
        self._rolling = spec.get("rolling")
        self._index = 1
        self._size = 0
        self._suffix = f".{spec['codec']}" if spec.get("codec") else ""
        self._compressor: Any = None
        if spec.get("codec"):
            import zstandard
            self._compressor = zstandard.ZstdCompressor()
        self._file = open(self.path, "ab")

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._file.write(self._compressor.compress(data) if self._compressor else data)
        self._file.flush()
        self._size += len(data)
        if self._rolling and self._size >= self._rolling["max_size"]:
            self._file.close()
            self._index += 1
            self._size = 0
            self.path = os.path.join(
                self._rolling["dir"], f"events_{self._index}_{self._rolling['name']}"
                + self._suffix)
            self._file = open(self.path, "ab")

    def close(self) -> None:
        self._file.close()


# --- JSON -> events (replay) ----------------------------------------------------------------
def _s(ms_value: Any) -> float | None:
    return None if ms_value is None else ms_value / 1000


def _level(d: Mapping[str, Any] | None) -> StorageLevel:
    if not d:
        return StorageLevel.NONE
    return StorageLevel(d.get("Use Disk", False), d.get("Use Memory", False),
                        d.get("Use Off Heap", False), d.get("Deserialized", False),
                        d.get("Replication", 1))


def _stage_info(d: Mapping[str, Any]) -> sl.StageInfo:
    return sl.StageInfo(
        d["Stage ID"], d.get("Stage Attempt ID", 0), d.get("Stage Name", ""),
        d.get("Number of Tasks", 0), details=d.get("Details", ""),
        submission_time=_s(d.get("Submission Time")),
        completion_time=_s(d.get("Completion Time")), failure_reason=d.get("Failure Reason"),
        parent_ids=list(d.get("Parent IDs", [])),
        resource_profile_id=d.get("Resource Profile Id", 0),
        rdd_infos=[sl.RDDInfo(r["RDD ID"], r.get("Name", ""), r.get("Number of Partitions", 0),
                             _level(r.get("Storage Level")), r.get("Callsite", ""),
                             list(r.get("Parent IDs", [])), bool(r.get("Barrier", False)))
                   for r in d.get("RDD Info", [])])


def _task_info(d: Mapping[str, Any]) -> TaskInfo:
    info = TaskInfo(d["Task ID"], d.get("Index", 0), d.get("Attempt", 0),
                    d.get("Partition ID", d.get("Index", 0)), _s(d.get("Launch Time", 0)) or 0.0,
                    d.get("Executor ID", ""), d.get("Host", ""), d.get("Locality", "ANY"),
                    d.get("Speculative", False))
    info.finish_time = _s(d.get("Finish Time", 0)) or 0.0
    info.failed = d.get("Failed", False)
    info.killed = d.get("Killed", False)
    info.successful = bool(info.finish_time) and not info.failed and not info.killed
    return info


class _UnknownReason(TaskEndReason):
    def to_error_string(self) -> str:
        return "UnknownReason"


@dataclass
class _LoggedException(TaskEndReason):
    """A logged ExceptionFailure: its error is the full stack trace, else "class: message"
    (Spark's ExceptionFailure.toErrorString)."""
    class_name: str
    description: str
    full_stack_trace: str

    def to_error_string(self) -> str:
        return self.full_stack_trace or f"{self.class_name}: {self.description}"


def _reason(d: Mapping[str, Any]) -> TaskEndReason:
    kind = d.get("Reason")
    if kind == "Success":
        return Success()
    if kind == "ExceptionFailure":
        return _LoggedException(d.get("Class Name", ""), d.get("Description", ""),
                                d.get("Full Stack Trace", "") or "")
    if kind == "FetchFailed":
        bm = d.get("Block Manager Address") or {}
        return FetchFailed(d.get("Shuffle ID", 0), d.get("Map Index", d.get("Map ID", 0)),
                           d.get("Reduce ID", 0), bm.get("Executor ID"), d.get("Message", ""))
    if kind == "TaskKilled":
        return TaskKilled(d.get("Kill Reason", "unknown reason"))
    if kind == "ExecutorLostFailure":
        return ExecutorLostFailure(d.get("Executor ID", ""), d.get("Exit Caused By App", True),
                                   d.get("Loss Reason", ""))
    return _UnknownReason()


_METRIC_KEYS = (("executorRunTime", (), "Executor Run Time"),
                ("executorCpuTime", (), "Executor CPU Time"),
                ("resultSize", (), "Result Size"),
                ("memoryBytesSpilled", (), "Memory Bytes Spilled"),
                ("diskBytesSpilled", (), "Disk Bytes Spilled"),
                ("shuffleRemoteBytesRead", ("Shuffle Read Metrics",), "Remote Bytes Read"),
                ("shuffleLocalBytesRead", ("Shuffle Read Metrics",), "Local Bytes Read"),
                ("shuffleBytesWritten", ("Shuffle Write Metrics",), "Shuffle Bytes Written"),
                ("shuffleRecordsWritten", ("Shuffle Write Metrics",), "Shuffle Records Written"))


def _metrics(d: Mapping[str, Any] | None) -> dict[str, int]:
    out: dict[str, int] = {}
    for key, path, name in _METRIC_KEYS:
        node: Any = d or {}
        for p in path:
            node = node.get(p) or {}
        if node.get(name):
            out[key] = node[name]
    return out


def json_to_event(d: Mapping[str, Any]) -> Any:
    """One JsonProtocol object -> the listener event; None for events Ember does not use."""
    kind = d.get("Event")
    if kind == "SparkListenerTaskEnd":
        return sl.TaskEnd(d["Stage ID"], d.get("Stage Attempt ID", 0), d.get("Task Type", ""),
                         _reason(d.get("Task End Reason") or {}), _task_info(d["Task Info"]),
                         _metrics(d.get("Task Metrics")))
    if kind == "SparkListenerTaskStart":
        return sl.TaskStart(d["Stage ID"], d.get("Stage Attempt ID", 0),
                           _task_info(d["Task Info"]))
    if kind == "SparkListenerStageSubmitted":
        return sl.StageSubmitted(_stage_info(d["Stage Info"]), dict(d.get("Properties") or {}))
    if kind == "SparkListenerStageCompleted":
        return sl.StageCompleted(_stage_info(d["Stage Info"]))
    if kind == "SparkListenerJobStart":
        infos = [_stage_info(s) for s in d.get("Stage Infos", [])]
        return sl.JobStart(d["Job ID"], _s(d.get("Submission Time", 0)) or 0.0, infos,
                          dict(d.get("Properties") or {}))
    if kind == "SparkListenerJobEnd":
        result = d.get("Job Result") or {}
        ok = result.get("Result") == "JobSucceeded"
        return sl.JobEnd(d["Job ID"], _s(d.get("Completion Time", 0)) or 0.0, ok,
                        "" if ok else (result.get("Exception") or {}).get("Message", ""))
    if kind == "SparkListenerExecutorAdded":
        info = d.get("Executor Info") or {}
        return sl.ExecutorAdded(d["Executor ID"], info.get("Host", ""),
                               info.get("Total Cores", 0), _s(d.get("Timestamp", 0)) or 0.0,
                               dict(info.get("Log Urls") or {}),
                               {n: list(r.get("addresses", [])) for n, r in
                                (info.get("Resources") or {}).items()},
                               info.get("Resource Profile Id", 0))
    if kind == "SparkListenerExecutorRemoved":
        return sl.ExecutorRemoved(d["Executor ID"], d.get("Removed Reason", ""),
                                 _s(d.get("Timestamp", 0)) or 0.0)
    if kind == "SparkListenerBlockUpdated":
        b = d.get("Block Updated Info") or {}
        bm = b.get("Block Manager ID") or {}
        return sl.BlockUpdated(bm.get("Executor ID", ""), bm.get("Host", ""),
                              b.get("Block ID", ""), _level(b.get("Storage Level")),
                              b.get("Memory Size", 0), b.get("Disk Size", 0))
    if kind == "SparkListenerUnpersistRDD":
        return sl.UnpersistRDD(d["RDD ID"])
    if kind == "SparkListenerResourceProfileAdded":
        return sl.ResourceProfileAdded(
            d.get("Resource Profile Id", 0),
            {n: (r.get("Amount", 0), r.get("Discovery Script", ""), r.get("Vendor", ""))
             for n, r in (d.get("Executor Resource Requests") or {}).items()},
            {n: r.get("Amount", 0.0) for n, r in (d.get("Task Resource Requests") or {}).items()})
    if kind == "SparkListenerEnvironmentUpdate":
        return sl.EnvironmentUpdate({k: [(str(a), str(b)) for a, b in v.items()]
                                    for k, v in d.items() if isinstance(v, dict)})
    if kind == "SparkListenerApplicationStart":
        return sl.ApplicationStart(d.get("App Name", ""), d.get("App ID", ""),
                                  _s(d.get("Timestamp", 0)) or 0.0, d.get("User", ""),
                                  d.get("App Attempt ID"))
    if kind == "SparkListenerApplicationEnd":
        return sl.ApplicationEnd(_s(d.get("Timestamp", 0)) or 0.0)
    if kind == "SparkListenerLogStart":
        return sl.LogStart(d.get("Spark Version", ""))
    t = _JACKSON_BY_NAME.get(kind)
    if t is not None:
        return t(*[(_s(d.get(key)) or 0.0) if attr == "time" else d.get(key)
                   for attr, key in _JACKSON_EVENTS[t]])
    return None


def replay(path: str) -> Iterator[Any]:
    """The events of an event log (file: URI or path; a single file, or Spark's rolling
    directory `eventlog_v2_<appId>`), in order. A last line cut short by a crash is skipped; a
    malformed line elsewhere raises ValueError naming it."""
    if path.startswith("file:"):
        path = re.sub(r"^file:(//(localhost)?)?", "", path)
    files = _rolled_files(path) if is_log_dir(path) else [path]
    prev: tuple[str, int, bytes] | None = None
    for name in files:
        with _open_log(name) as f:
            for n, line in _lines(name, f):
                if prev is not None:
                    yield from _parse(*prev, last=False)
                prev = (name, n, line)
    if prev is not None:
        yield from _parse(*prev, last=True)


def is_log_dir(path: str) -> bool:
    """Is an event log (path or URL) Spark's rolling directory rather than one file?"""
    if fs.is_local(path):
        return os.path.isdir(path)
    filesystem, p = fs.filesystem(path)
    return filesystem.isdir(p)


def _rolled_files(directory: str) -> list[str]:
    """The event files of a rolling log, by index (`events_<index>_<appId>[.<codec>]`)."""
    found = []
    for name in fs.listdir(directory):
        m = _ROLLED_EVENTS.match(name)
        if m and is_regular_file(fs.join(directory, name)):
            found.append((int(m.group(1)), fs.join(directory, name)))
    return [p for _, p in sorted(found)]


def _open_log(path: str) -> Any:
    """A binary stream of the log's text: plain, or zstd (Spark 4's default codec)."""
    codec = _codec(path)
    f = open_regular(path)
    if codec is None:
        return f
    if codec != "zstd":
        f.close()
        raise ValueError(f"Cannot read {path}: event logs compressed with {codec} are not "
                         "supported (Ember reads uncompressed and zstd logs; Spark writes zstd "
                         "with spark.eventLog.compression.codec=zstd, its default)")
    import zstandard
    return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(
        f, read_across_frames=True, closefd=True))


def is_regular_file(path: str) -> bool:
    """A regular file itself, not a symbolic link (to one) nor anything else. An object
    store's entry (s3a:, hdfs: ...) has no links and counts as one."""
    if not fs.is_local(path):
        return True
    try:
        return stat.S_ISREG(os.lstat(fs.local_path(path)).st_mode)
    except OSError:
        return False


def open_regular(path: str) -> Any:
    """`open(path, "rb")` for a regular file only: a symbolic link (O_NOFOLLOW) or a FIFO,
    device or directory is refused with OSError, so a log directory cannot be made to serve
    /etc/passwd or block on a pipe. A remote log (s3a:, hdfs: ...) opens through fsspec."""
    if not fs.is_local(path):
        return fs.open_file(path, "rb")
    path = fs.local_path(path)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _lines(path: str, f: Any) -> Iterator[tuple[int, bytes]]:
    """Numbered lines; a compressed log cut short by a crash ends at its last whole frame."""
    n = 0
    try:
        for n, line in enumerate(f, 1):
            yield n, line
    except Exception as e:      # zstandard.ZstdError: a frame cut short
        if type(e).__name__ != "ZstdError":
            raise
        log.info("Ignoring the truncated end of %s after line %d", path, n)


def _codec(name: str) -> str | None:
    base = name[:-len(IN_PROGRESS)] if name.endswith(IN_PROGRESS) else name
    ext = base.rsplit(".", 1)[-1] if "." in os.path.basename(base) else ""
    return ext if ext in _CODECS else None


def _parse(path: str, n: int, line: bytes, last: bool) -> Iterator[Any]:
    if not line.strip():
        return
    try:
        d = json.loads(line)
    except ValueError:
        if last:
            log.info("Ignoring the truncated last line %d of %s", n, path)
            return
        raise ValueError(f"{path}:{n}: malformed event log line") from None
    event = json_to_event(d)
    if event is not None:
        yield event


@dataclass(frozen=True)
class EventLogInfo:
    path: str
    app_id: str          # the file name without .inprogress (the app id, sanitized)
    in_progress: bool
    size: int
    modified: float      # epoch seconds


def list_event_logs(log_dir: str) -> list[EventLogInfo]:
    """The event logs in a directory (file: URI or path), newest first: single files
    (`<appId>[.<codec>][.inprogress]`) and Spark's rolling directories (`eventlog_v2_<appId>`,
    complete once their `appstatus_<appId>` file has no `.inprogress`); hidden files are
    skipped, and so are symbolic links: the history server serves what is in the directory,
    never a file a link elsewhere points at."""
    root = resolve_log_dir(log_dir)
    if not fs.is_local(root):
        return _list_remote_logs(root)
    out = []
    with os.scandir(root) as it:
        for entry in it:
            if entry.name.startswith("."):
                continue
            if entry.is_dir(follow_symlinks=False) and entry.name.startswith(_ROLLED_DIR):
                info = _rolled_info(entry)
                if info is not None:
                    out.append(info)
                continue
            if not entry.is_file(follow_symlinks=False):
                continue
            st = entry.stat(follow_symlinks=False)
            done = not entry.name.endswith(IN_PROGRESS)
            app_id = entry.name if done else entry.name[:-len(IN_PROGRESS)]
            if _codec(app_id):
                app_id = app_id.rsplit(".", 1)[0]
            out.append(EventLogInfo(entry.path, app_id, not done, st.st_size, st.st_mtime))
    out.sort(key=lambda i: i.modified, reverse=True)
    return out


def _rolled_info(entry: os.DirEntry) -> EventLogInfo | None:
    try:
        names = os.listdir(entry.path)
        files = [st for n in names if _ROLLED_EVENTS.match(n)
                 and stat.S_ISREG((st := os.lstat(os.path.join(entry.path, n))).st_mode)]
    except OSError:
        return None
    if not files:
        return None
    done = any(n.startswith("appstatus_") and not n.endswith(IN_PROGRESS) for n in names)
    return EventLogInfo(entry.path, entry.name[len(_ROLLED_DIR):], not done,
                        sum(f.st_size for f in files), max(f.st_mtime for f in files))


def _list_remote_logs(root: str) -> list[EventLogInfo]:
    """list_event_logs for a URL: one listing of the directory (and one per rolling log)."""
    filesystem, path = fs.filesystem(root)
    out = []
    for e in filesystem.ls(path, detail=True):
        name = e["name"].rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(".") or not name:
            continue
        url = fs.join(root, name)
        if e.get("type") == "directory":
            if name.startswith(_ROLLED_DIR):
                entries = {x["name"].rstrip("/").rsplit("/", 1)[-1]: x
                           for x in filesystem.ls(e["name"], detail=True)}
                events = [x for n, x in entries.items() if _ROLLED_EVENTS.match(n)]
                if events:
                    done = any(n.startswith("appstatus_") and not n.endswith(IN_PROGRESS)
                               for n in entries)
                    out.append(EventLogInfo(url, name[len(_ROLLED_DIR):], not done,
                                            sum(int(x.get("size") or 0) for x in events),
                                            max(_mtime(filesystem, x) for x in events)))
            continue
        done = not name.endswith(IN_PROGRESS)
        app_id = name if done else name[:-len(IN_PROGRESS)]
        if _codec(app_id):
            app_id = app_id.rsplit(".", 1)[0]
        out.append(EventLogInfo(url, app_id, not done, int(e.get("size") or 0),
                                _mtime(filesystem, e)))
    out.sort(key=lambda i: i.modified, reverse=True)
    return out


def _mtime(filesystem: Any, entry: Mapping[str, Any]) -> float:
    """A listing entry's modification time in epoch seconds (S3's LastModified, else the
    backend's `modified`)."""
    stamp = entry.get("LastModified") or entry.get("mtime")
    if stamp is None:
        try:
            stamp = filesystem.modified(entry["name"])
        except (NotImplementedError, OSError):
            return 0.0
    return stamp if isinstance(stamp, (int, float)) else stamp.timestamp()
