"""A long-lived task process: receives tasks over a socket, runs them, reports results.

Started by a TaskProcessPool (in the driver for local mode, in an executor otherwise). The
stage's closure arrives once per process and stays cached; each task message then only
carries its partition. User exceptions come back as type, message and traceback text; a
SIGUSR1 from the pool kills the running task (cancellation) without killing the process,
if the slot's kill file lists that task; the process then offers to retire (a fresh one
takes its slot, as PySpark's worker of an interrupted task goes) unless it holds blocks.
"""
from __future__ import annotations

import gc
import logging
import mmap
import os
import pickle
import signal
import socket
import struct
import sys
import time
import traceback
from collections import deque
from typing import Any

from ember import accumulators, broadcast, fs
from ember.deploy.resource_messages import ResourceInformation
from ember.errors import TASK_HANDED_BACK, PySparkRuntimeError, TaskKilledException
from ember.executor.wire import Inbox, read_msg, send_msg, send_msgs
from ember.files import SparkFiles
from ember.rdd_sources import Partition
from ember.shuffle import spilled
from ember.shuffle.base import FetchFailedError
from ember.storage.block_manager import BlockManager
from ember.taskcontext import BarrierTaskContext, TaskContext
from ember.util import after_reply, pickling
from ember.util.files import unlink_quietly
from ember.util.kill_guard import defer_kill, kills_deferred
from ember.util.user_code import escaped_stop_iteration, stop_iteration_error

log = logging.getLogger(__name__)

RESULT, MAP = "result", "map"
_PYTHON_VERSION = "%d.%d" % sys.version_info[:2]
# The cyclic collector's young generation: collected after this many new containers (700
# by default). Records are mostly acyclic tuples, lists and dicts made by the hundred
# thousand, and each young collection that finds them alive brings the full collection
# over everything the process holds (its cached partitions) nearer: a groupByKey of a
# million records spent ~290 ms a process in collections at 700 and ~35 ms at 10,000.
# Garbage cycles wait at most that many allocations longer.
GC_YOUNG_THRESHOLD = 10_000
# results of tasks of one stage are held while the next task of the stage is already here
# (queued short tasks), and sent together: one write, one wake-up of the pool, and on a
# cluster one StatusUpdates to the driver for several tasks; bounded in count and age
HOLD_RESULTS, HOLD_S = 32, 0.002


class TaskEnv:
    """Per-process facts every task needs: identity, dirs, budgets, block manager, fetcher."""

    def __init__(self, conf: dict) -> None:
        self.executor_id: str = conf["executor_id"]
        self.host: str = conf["host"]
        self.address: str = conf.get("address", "")
        # where reducers fetch this process's map output: the executor, or its worker's
        # external shuffle service
        self.shuffle_address: str = conf.get("shuffle_address", self.address)
        self.shuffle_endpoint: str = conf.get("shuffle_endpoint", "Executor")
        self.slot: int = conf["slot"]
        self.local_dir: str = conf["local_dir"]
        self.memory_limit_mb: int = conf["memory_limit_mb"]
        self.cpus: int = conf.get("cpus", 1)
        self.pyspark_memory_mb: int | None = conf.get("pyspark_memory_mb")
        # an executor's pool forwards results undecoded (result_frame); local mode's decodes
        self.raw_results: bool = conf.get("raw_results", False)
        # a task written ahead this long ago is handed back unstarted when reached: it
        # waited behind a long one (spark.ember.scheduler.handBackAfter)
        self.hand_back_s: float = conf["hand_back_s"]
        self.block_manager = BlockManager(conf["block_dir"], conf["storage_budget"])
        fs.configure(conf.get("fs_conf", {}))    # the app's s3a endpoint and keys
        # spark.io.encryption.enabled: the application's key for shuffle and spill files
        self.io_key: bytes | None = bytes.fromhex(conf["io_key"]) if conf.get("io_key") else None
        # how reducers read other executors' map outputs (spark.shuffle.readHostLocalDisk,
        # spark.reducer.maxSizeInFlight / maxReqsInFlight; see ember.shuffle.reader)
        self.read_host_local_disk: bool = conf.get("read_host_local_disk", False)
        self.max_bytes_in_flight: int | None = conf.get("max_bytes_in_flight")
        self.max_reqs_in_flight: int | None = conf.get("max_reqs_in_flight")
        self.remote = None
        self.fetch_remote = None
        if conf.get("driver"):        # an executor of a cluster application
            from ember.executor.remote import RemoteFetcher
            self.remote = RemoteFetcher(conf["driver"], conf.get("rpc_conf", {}),
                                        self.local_dir, conf["files_dir"])
            self.fetch_remote = self.remote.fetch_shuffle
            broadcast._fetcher[0] = self.remote.fetch_broadcast
            SparkFiles._fetch_missing = self.remote.missing_file


_running: list[int | None] = [None]     # the task whose user code runs now
# a running task was killed: the process offers to retire once it has reported the end (as
# PySpark's JVM destroys the Python worker of a task it interrupts), unless it holds blocks
_interrupted = [False]
_KILL_ID = struct.Struct("<q")          # an entry of the kill file, as process_pool writes it


class _Kills:
    """The slot's kill file (see process_pool): the ids of tasks the pool killed, then the
    id of the task this process last reached. The pool may have written the next task
    ahead of the running one, so SIGUSR1 alone does not say which task it meant; and the
    pool, which hears of a task's end only when the results held here are sent, reads the
    last entry before it hands back tasks it thinks wait (process_pool._hand_back)."""

    def __init__(self) -> None:
        self._map: mmap.mmap | None = None
        self._reached_at = 0

    def open(self, path: str) -> None:
        """Mapped shared: the pool's pwrites show in it at once, and a check (every task,
        and every SIGUSR1) costs no system call, nor does saying which task is reached."""
        fd = os.open(path, os.O_RDWR)
        try:
            self._map = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self._reached_at = len(self._map) - _KILL_ID.size

    def reached(self, tid: int) -> None:
        """The task is about to run (or end unstarted) here: the pool hands back only the
        tasks behind it. Said before the task's kill check, while the pool lists the tasks
        it hands back before it looks here: of two sides that each write, then read what
        the other wrote, one sees the other, so a task runs or is handed back, not both."""
        if self._map is not None:
            _KILL_ID.pack_into(self._map, self._reached_at, tid)

    def __contains__(self, tid: int) -> bool:
        """A search for the id's 8 bytes at an 8-byte boundary of the kill entries: 0.36 us
        over 128 entries, where unpacking them all to look took 1.4 us."""
        if self._map is None:
            return False
        key = _KILL_ID.pack(tid)
        end = self._reached_at
        at = self._map.find(key, 0, end)
        while at >= 0:
            if at % 8 == 0:
                return True
            at = self._map.find(key, at + 1, end)
        return False

    def close(self) -> None:
        if self._map is not None:
            self._map.close()
            self._map = None


_kills = _Kills()


def _on_kill(signum, frame):
    tid = _running[0]
    if tid is not None and tid in _kills and not defer_kill(signum):
        _running[0] = None
        raise TaskKilledException()


class _Stage:
    __slots__ = ("kind", "rdd", "func", "accumulators", "map_locations", "profiler")


class _Unloaded:
    """A stage's bytes not loaded yet. The pool sends them once, with the first of the
    stage's tasks this process gets, and that task may end without loading them (handed
    back unstarted) or fail to (a module not importable yet, say): they wait here for the
    next one rather than being lost."""
    __slots__ = ("blob", "meta")

    def __init__(self, blob: bytes, meta: bytes) -> None:
        self.blob, self.meta = blob, meta


def _load_stage(blob: bytes, meta: bytes) -> _Stage:
    """ember.rdd.serialize_stage's blob: the driver's Python version, then the stage."""
    start = blob[0] + 1
    driver_version = blob[1:start].decode(errors="replace")
    if driver_version != _PYTHON_VERSION:
        raise PySparkRuntimeError(errorClass="PYTHON_VERSION_MISMATCH", messageParameters={
            "worker_version": _PYTHON_VERSION, "driver_version": driver_version})
    before = dict(accumulators._accumulator_registry)
    kind, rdd, func = pickle.loads(memoryview(blob)[start:])
    st = _Stage()
    st.kind, st.rdd, st.func = kind, rdd, func
    st.profiler = rdd.__dict__.get("_profiler")      # spark.python.profile (ember.profiler)
    # the copies this blob created (an accumulator reused across jobs gets a new copy)
    st.accumulators = [a for aid, a in accumulators._accumulator_registry.items()
                       if before.get(aid) is not a and a._deserialized]
    st.map_locations = pickle.loads(meta) if meta else {}
    return st


def _compute(stage: _Stage, partition: Partition, ctx: TaskContext, tid: int) -> Any:
    if stage.kind == RESULT:
        return stage.func(ctx, stage.rdd.iterator(partition, ctx))
    return stage.func(ctx, stage.rdd.iterator(partition, ctx), tid)


def run_task(env: TaskEnv, stage: _Stage, task: tuple, tid: int) -> tuple:
    """Run one task; returns the ("done", tid, state, payload) message to send back."""
    if tid in _kills:                   # killed while it waited behind the task before it
        return ("done", tid, "KILLED", "Task killed", {}, {}, [])
    partition, partition_id, attempt, props, stage_id, stage_attempt, task_resources = task
    if partition is None:               # a plain Partition (TaskDescription.encode)
        partition = Partition(partition_id)
    cpus, assigned = task_resources if task_resources is not None else (env.cpus, {})
    # a barrier stage's tasks are told where all of them run (Spark's "addresses" property)
    ctx_class = BarrierTaskContext if "addresses" in props else TaskContext
    ctx = ctx_class._create(stage_id, stage_attempt, partition_id, attempt, tid, props,
                            cpus, env, stage.map_locations)
    if isinstance(ctx, BarrierTaskContext) and _channel[0] is not None:
        ctx._sync = _channel[0].request_to_sync
    if assigned:
        ctx._resources = {n: ResourceInformation(n, list(a)) for n, a in assigned.items()}
    TaskContext._setTaskContext(ctx)
    for acc in stage.accumulators:
        acc._value = acc.accum_param.zero(acc._value)
    spilled.MemoryBytesSpilled = spilled.DiskBytesSpilled = 0
    start = time.perf_counter()
    cpu_start = time.process_time()
    state = "FINISHED"
    try:
        _running[0] = tid
        try:
            if stage.profiler is not None:
                value = stage.profiler.profile(_compute, stage, partition, ctx, tid)
            elif stage.kind == RESULT:          # _compute, inline: the path of every task
                value = stage.func(ctx, stage.rdd.iterator(partition, ctx))
            else:
                value = stage.func(ctx, stage.rdd.iterator(partition, ctx), tid)
        finally:
            _running[0] = None
        if stage.kind == RESULT:
            try:
                value = pickling.dumps(value)
            except Exception as e:
                raise _NotSerializableResult(f"{type(e).__name__}: {e}") from None
        payload: Any = value
    except TaskKilledException:
        state, payload = "KILLED", "Task killed"
        _interrupted[0] = True
    except FetchFailedError as e:
        st = e.status
        state, payload = "FETCH_FAILED", (e.shuffle_id, e.map_index, e.reduce_id,
                                          st.executor_id if st else None, e.message)
    except _NotSerializableResult as e:
        state, payload = "FAILED", ("NotSerializableResult", str(e), "", False)
    except BaseException as e:  # user code: report, never die
        _running[0] = None
        tb = user_traceback(e)
        stop = escaped_stop_iteration(e)
        if stop is not None:       # PySpark's failure, never a StopIteration on the driver
            e = stop_iteration_error(stop)
            tb += ("\nDuring handling of the above exception, another exception occurred:\n\n"
                   f"{type(e).__name__}: {e}\n")
        message = str(e)
        if isinstance(e, MemoryError) and env.pyspark_memory_mb:
            message = memory_limit_message(env.pyspark_memory_mb)
            tb = f"{tb.rstrip()}\n{message}\n"
        state, payload = "FAILED", (type(e).__name__, message, tb, True)
    TaskContext._setTaskContext(None)
    metrics = ctx.metrics
    metrics["executorRunTime"] = int((time.perf_counter() - start) * 1000)
    metrics["executorCpuTime"] = int((time.process_time() - cpu_start) * 1e9)
    if spilled.MemoryBytesSpilled or spilled.DiskBytesSpilled:   # the mergers' and sorters'
        metrics["memoryBytesSpilled"] = (metrics.get("memoryBytesSpilled", 0)
                                         + spilled.MemoryBytesSpilled)
        metrics["diskBytesSpilled"] = (metrics.get("diskBytesSpilled", 0)
                                       + spilled.DiskBytesSpilled)
    updates = {a.aid: a._value for a in stage.accumulators} if state == "FINISHED" else {}
    return ("done", tid, state, payload, updates, metrics,
            env.block_manager.end_task(state == "FINISHED"))


def result_frame(reply: tuple) -> tuple:
    """("done", tid, state, result bytes): the result already in the form the driver
    unpickles (payload, accumulator updates, metrics, block updates), so an executor
    forwards it as it is instead of decoding and re-encoding it for every task."""
    _, tid, state, payload, updates, metrics, blocks = reply
    try:
        data = pickle.dumps((payload, updates, metrics, blocks), protocol=5)
    except Exception as e:  # an accumulator value or result that cannot cross the wire
        state = "FAILED"
        data = pickle.dumps((("NotSerializableResult", str(e), "", False), {}, metrics, []),
                            protocol=5)
    return ("done", tid, state, data)


def limit_address_space(limit_mb: int) -> None:
    """PySpark's worker: cap this process's address space (RLIMIT_AS) at its share of
    spark.executor.pyspark.memory, unless an existing limit is already lower; an allocation
    past it raises MemoryError in the task instead of taking the executor's memory."""
    import resource
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    new = limit_mb << 20
    if soft == resource.RLIM_INFINITY or new < soft:
        try:
            resource.setrlimit(resource.RLIMIT_AS, (new, new))
        except (ValueError, OSError) as e:
            print(f"WARN: Failed to set memory limit: {e}", file=sys.stderr, flush=True)


def memory_limit_message(limit_mb: int) -> str:
    return (f"MemoryError: the task's Python process exceeded its memory limit "
            f"(spark.executor.pyspark.memory: {limit_mb} MiB per task process); increase "
            f"spark.executor.pyspark.memory or use more partitions")


_EMBER_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def user_traceback(e: BaseException) -> str:
    """The traceback without Ember's own frames (the user's code is what matters)."""
    frames = [f for f in traceback.extract_tb(e.__traceback__)
              if not os.path.abspath(f.filename).startswith(_EMBER_DIR + os.sep)]
    if not frames:
        return traceback.format_exc()
    lines = ["Traceback (most recent call last):\n"]
    lines += traceback.format_list(frames)
    lines += traceback.format_exception_only(type(e), e)
    return "".join(lines)


class _NotSerializableResult(Exception):
    pass


def _add_py_files(files_dir: str) -> None:
    """Make files shipped with addPyFile importable (the dir itself and each archive)."""
    import importlib
    entries = [files_dir] + [os.path.join(files_dir, f) for f in sorted(os.listdir(files_dir))
                             if f.endswith((".zip", ".egg", ".whl"))]
    for e in entries:
        if e not in sys.path:
            sys.path.insert(1, e)
    importlib.invalidate_caches()


# pool messages that change what a task finds here (see _PoolChannel._other)
_AFTER_TASKS = frozenset(("forget_stage", "unpersist_rdd", "unpersist_broadcast",
                          "remove_shuffle"))


class _PoolChannel:
    """The running task's line to the driver's BarrierCoordinator: a ("barrier", tid,
    RequestToSync) message to the pool, which forwards it (to the coordinator in local mode,
    through the executor to the driver on a cluster) and answers ("barrier_reply", tid, ok,
    messages or error). Pool messages arriving meanwhile are handled as usual; a task
    written ahead waits in `tasks` for the serve loop."""

    def __init__(self, sock: socket.socket, inbox: Inbox, control: Any) -> None:
        self.sock = sock
        self.inbox = inbox
        self.control = control
        self.stopped = False
        self.tasks: deque[tuple] = deque()
        self.asked_copy: int | None = None      # the last task that asked for a block copy

    def _other(self, msg: tuple) -> None:
        """A message that is not the awaited answer. A task waits in `tasks` for the serve
        loop, and so, behind it, does a message that changes what such a task finds: the
        pool wrote it after that task (a stage forgotten ahead of it left the task
        without its closure)."""
        if msg[0] == "task" or (self.tasks and msg[0] in _AFTER_TASKS):
            self.tasks.append(msg)
        elif not self.control(msg):
            self.stopped = True
            raise TaskKilledException()

    def _answer(self, kind: str, request: tuple) -> tuple:
        """The pool's (kind, *request, ...) answer to this task's request. Each message is
        taken off the inbox and filed in one step a kill does not cut (a task written ahead
        and lost there would never be reported); any other, a late answer to a killed
        earlier task among them, goes where the serve loop sends it (control deletes a late
        block copy)."""
        inbox = self.inbox
        end = 1 + len(request)
        while True:
            inbox.wait_readable()
            with kills_deferred:
                msg = inbox.take()
                if msg is None:
                    continue
                if msg[0] == kind and msg[1:end] == request:
                    return msg
                self._other(msg)

    def _send(self, msg: tuple) -> None:
        """A request of the running task, sent whole even if it is killed meanwhile (a
        frame cut short would garble every later message to the pool)."""
        with kills_deferred:
            send_msg(self.sock, msg)

    def request_to_sync(self, request: Any) -> list[str]:
        from ember.errors import SparkException
        self._send(("barrier", request.taskAttemptId, request))
        msg = self._answer("barrier_reply", (request.taskAttemptId,))
        if msg[2]:
            return list(msg[3])
        raise SparkException(msg[3])

    def fetch_block(self, tid: int, name: str) -> str | None:
        """A copy of memory block `name` from another task process of this executor (the
        pool asks them; the holder writes it between two of its tasks): its path, or None
        when none holds it. The caller deletes the copy once read (a killed task's copies
        are swept by the serve loop)."""
        self.asked_copy = tid
        self._send(("fetch_block", tid, name))
        return self._answer("block_reply", (tid, name))[3]


_channel: list[_PoolChannel | None] = [None]


def report_now(held: int, in_hand: int, held_since: float) -> bool:
    """Whether results held while more tasks of their stage wait here go to the pool now:
    at HOLD_RESULTS or HOLD_S, and as soon as as many have ended as still wait. The pool
    writes more tasks only when it hears of ends, so results held until the tasks in hand
    ran out left this process idle for a whole round trip through the scheduler (a sixth of
    both cores in a 10,000 x 10,000 shuffle)."""
    return (held >= HOLD_RESULTS or held >= in_hand
            or time.perf_counter() - held_since > HOLD_S)


def serve(sock: socket.socket, env: TaskEnv) -> None:
    inbox = Inbox(sock)
    stages: dict[Any, _Stage] = {}
    files = [SparkFiles._root_directory, 0]

    def control(msg: tuple) -> bool:
        """A message other than a task; False when told to stop."""
        op = msg[0]
        if op == "unpersist_rdd":
            env.block_manager.remove_rdd(msg[1])
        elif op == "export_block":          # for a sibling's fetch_block: name, slot, task
            try:
                path = env.block_manager.export_for_sibling(msg[1], msg[3])
            except OSError as e:    # a full disk, say: the sibling computes the block
                log.warning("Could not copy block %s for task %s: %s", msg[1], msg[3], e)
                path = None
            send_msg(sock, ("block_exported", msg[2], msg[3], msg[1], path))
        elif op == "export_blocks":
            env.block_manager.export_to_disk()
            send_msg(sock, ("exported",))
        elif op == "unpersist_broadcast":
            broadcast._broadcast_registry.pop(msg[1], None)
        elif op == "remove_shuffle":
            from ember.shuffle import reader, writer
            writer.close_outputs(msg[1])
            reader.forget_shuffle(msg[1])
        elif op == "block_reply" and msg[3] is not None:   # for a task killed meanwhile
            unlink_quietly(msg[3])
        elif op == "forget_stage":
            for k in [k for k in stages if k[0] == msg[1]]:
                del stages[k]
        elif op == "stop":
            return False
        return True     # also a late "barrier_reply" for a task that was killed meanwhile

    channel = _channel[0] = _PoolChannel(sock, inbox, control)
    after_reply.enable()
    env.block_manager.fetch_from_sibling = channel.fetch_block
    held: list[tuple] = []          # results not sent yet (HOLD_RESULTS)
    held_since = 0.0

    def next_in_hand() -> tuple | None:
        if channel.tasks:
            return channel.tasks[0]
        return inbox.ready[0] if inbox.poll() else None

    def flush() -> None:
        send_msgs(sock, held)
        held.clear()

    try:
        while not channel.stopped:
            if held and next_in_hand() is None:
                flush()                     # nothing more to run now: report what ended
            msg = channel.tasks.popleft() if channel.tasks else inbox.read()
            if msg[0] != "task":
                if not control(msg):
                    return
                continue
            held.append(_run(env, msg, stages, files))
            if _interrupted[0]:
                _interrupted[0] = False
                if channel.asked_copy == msg[1]:
                    env.block_manager.remove_copies_for(msg[1])
                flush()
                after_reply.release()
                if not env.block_manager.memory:
                    send_msg(sock, ("retire",))   # the pool replaces this process if idle
                continue
            if len(held) == 1:
                held_since = time.perf_counter()
            nxt = next_in_hand()
            if nxt is None or nxt[0] != "task" or nxt[2] != msg[2] or report_now(
                    len(held), len(channel.tasks) + len(inbox.ready), held_since):
                flush()
            after_reply.release()       # sent, or held behind the next task
    except (EOFError, OSError):
        return
    finally:
        if held:
            try:
                flush()
            except OSError:
                pass


def _run(env: TaskEnv, msg: tuple, stages: dict, files: list) -> tuple:
    """One ("task", ...) message run: the result message to send. `files`: [files dir,
    its mtime when added .py files were last put on sys.path]."""
    _, tid, key, blob, meta, task_bytes, sent_at = msg
    _kills.reached(tid)
    if blob is not None:    # the pool sends a stage's closure once: kept before anything fails
        stages[key] = _Unloaded(blob, meta)
    if sent_at is not None and time.monotonic() - sent_at > env.hand_back_s:  # CLOCK_MONOTONIC
        reply: tuple = ("done", tid, "KILLED", TASK_HANDED_BACK, {}, {}, [])
        return result_frame(reply) if env.raw_results else reply
    try:
        task = pickle.loads(task_bytes)
        # files added with addFile/addPyFile (named in the job's properties; a stat per
        # task otherwise), before the stage loads: its pickle may name their modules. An
        # executor on another host fetches what it lacks; a sibling process may have
        # fetched or added some since.
        names = task[3].get("spark.ember.files")
        if names:
            if env.remote is not None and env.remote.ensure_files(names.split(",")):
                _add_py_files(env.remote.files_dir)
            if files[0]:
                try:
                    m = os.stat(files[0]).st_mtime_ns
                except OSError:
                    m = files[1]
                if m != files[1]:
                    files[1] = m
                    _add_py_files(files[0])
        stage = stages.get(key)
        if type(stage) is _Unloaded:
            stage = stages[key] = _load_stage(stage.blob, stage.meta)  # until forget_stage
        elif stage is None:
            raise RuntimeError(f"Stage {key} was never sent to this task process")
        reply = run_task(env, stage, task, tid)
    except BaseException as e:  # closure failed to unpickle etc.
        _running[0] = None
        reply = ("done", tid, "FAILED",
                 (type(e).__name__, str(e), traceback.format_exc(), True), {}, {}, [])
    return result_frame(reply) if env.raw_results else reply


def run_in_process(sock: socket.socket) -> None:
    """Task process body: read the environment, say ready, serve tasks until told to stop."""
    signal.signal(signal.SIGUSR1, _on_kill)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    rfile = sock.makefile("rb", buffering=0)
    conf = read_msg(rfile)
    rfile.close()
    _kills.open(conf["kill_file"])
    if conf.get("fault_log"):       # spark.python.worker.faulthandler.enabled
        import faulthandler
        faulthandler.enable(file=open(conf["fault_log"], "w"))  # it keeps the file open
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    env = TaskEnv(conf)
    if env.pyspark_memory_mb:
        limit_address_space(env.pyspark_memory_mb)
    SparkFiles._root_directory = conf.get("files_dir")
    SparkFiles._is_running_on_worker = True
    for p in conf.get("sys_path", []):
        if p not in sys.path:
            sys.path.append(p)
    try:
        os.chdir(conf.get("cwd") or os.getcwd())
    except OSError:
        pass
    send_msg(sock, ("ready", os.getpid()))
    profile_dir = os.environ.get("EMBER_TASK_PROFILE_DIR")
    profiler = None
    if profile_dir:       # benchmarks/profile.py: where a task process spends its time
        import cProfile
        profiler = cProfile.Profile()
        profiler.enable()
        # a worker ends an application by SIGTERM to each executor's whole process tree,
        # which can come before the executor's "stop": leave through the finally below,
        # which writes the profile, rather than die at once
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        serve(sock, env)
    finally:
        if profiler is not None:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)   # the file is written whole
            profiler.disable()
            path = os.path.join(profile_dir, f"task-{os.getpid()}.prof")
            profiler.dump_stats(path + ".tmp")      # complete files only: the reader polls
            os.replace(path + ".tmp", path)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def main() -> None:
    run_in_process(socket.socket(fileno=int(sys.argv[1])))


if __name__ == "__main__":
    main()
