"""A fixed number of long-lived task processes ("slots"), fed one task at a time each.

Used by the local backend in the driver and by every executor. One reader thread
multiplexes all slots' sockets; when a process dies (os._exit, segfault, OOM kill) its
running task is reported lost and a fresh process takes the slot, so the scheduler can
retry instead of hanging. Stage closures are sent to a slot only the first time it sees
the stage.

Short tasks queued behind a slot's running one (see launch_all) are written to the process at
once, so each starts the moment the one before it ends, without a round trip through this
loop. Several tasks can then be in one process, so a kill names its task: the pool writes
the task id into the slot's kill file before it sends SIGUSR1, and the process stops (or
never starts) only a task listed there. Tasks still waiting when the slot's running task
has run spark.ember.scheduler.handBackAfter are handed back (_watch_queues), but for those
its process has reached: a long task holds none of them.
"""
from __future__ import annotations

import functools
import logging
import math
import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
import time
from collections import deque
from typing import Any, Callable

from ember import config
from ember.errors import TASK_HANDED_BACK
from ember.executor.fork_client import ForkServerClient, task_process_env
from ember.executor.wire import FrameBuffer, send_msg, send_msgs
from ember.util.files import unlink_quietly
from ember.util.processes import wait_gone
from ember.util.event_loop import EventLoop

log = logging.getLogger(__name__)

# on_task_end(slot, tid, state, payload, accum_updates, metrics, block_updates), or with
# raw_results: on_task_end(slot, tid, state, pickled (payload, accum_updates, metrics,
# block_updates)) - what an executor forwards to the driver without decoding it
TaskEndCallback = Callable[..., None]
# on_barrier(slot, tid, RequestToSync, respond(ok, messages or error text)): a barrier task's
# barrier()/allGather() call, to be answered exactly once, maybe later and from any thread
BarrierCallback = Callable[[int, int, Any, Callable[[bool, Any], None]], None]


# tasks written ahead to a busy process wait in its socket, up to this many bytes per slot:
# the rest wait here, so a write to a process that is not reading never blocks the loop
SEND_AHEAD_BYTES = 64 << 10
# tasks that may wait behind a slot's running one (the driver's
# spark.ember.scheduler.queueDepth is at most this)
MAX_WAITING = 63
# the kill file: the last KILL_SLOTS task ids killed in a slot; -1 is no task. A process
# holds at most 1 + MAX_WAITING tasks, and for a moment as many handed-back ones it skips
# (_hand_back), so older entries no longer matter. After them, at REACHED_AT, the process
# writes the id of the task it last reached (task_process._Kills.reached)
KILL_SLOTS = 2 * (1 + MAX_WAITING)
_KILL_ID = struct.Struct("<q")
REACHED_AT = KILL_SLOTS * _KILL_ID.size
# recycle_idle replaces idle processes that have spent this much CPU
RECYCLE_AFTER_CPU_S = 0.5
# the most of a crashed process's faulthandler output that goes into its task's error
FAULT_REPORT_CHARS = 64 << 10


class _Waiting:
    """A launch waiting behind its slot's running task."""
    __slots__ = ("launch", "size", "sent", "seq")

    def __init__(self, launch: tuple) -> None:
        self.launch = launch          # (tid, stage key, blob, meta, task bytes)
        self.size = 0                 # bytes it takes in the process's socket, once sent
        self.sent = False             # already written to the process
        self.seq = 0                  # its place among the tasks written ahead, once sent

    @property
    def tid(self) -> int:
        return self.launch[0]


class _Slot:
    __slots__ = ("index", "sock", "buf", "tid", "since", "waiting", "abandoned", "seen",
                 "forgotten", "kills", "kill_count", "kill_fd", "pid", "started_at",
                 "quick_deaths", "dead", "sent_ahead")

    def __init__(self, index: int) -> None:
        self.index = index
        self.sock: socket.socket | None = None
        self.buf = FrameBuffer()
        self.tid: int | None = None
        self.since = 0.0                           # when `tid` started, as seen from here
        self.waiting: deque[_Waiting] = deque()   # to run when `tid` ends, in order
        # handed back after they were written to the process: their ends are not reported
        # again (task id -> its launch)
        self.abandoned: dict[int, _Waiting] = {}
        self.sent_ahead = 0                        # tasks written ahead so far (their seq)
        self.seen: set = set()
        self.forgotten: list[int] = []     # stages to drop, told with the next task
        self.kills: deque[int] = deque(maxlen=KILL_SLOTS)   # what the kill file lists
        self.kill_count = 0
        self.kill_fd = -1
        self.pid = 0
        self.started_at = 0.0
        self.quick_deaths = 0
        self.dead = False


def raw_end_without_result(reason: Any) -> bytes:
    """A task's end with no result frame from its process, as an executor forwards a task
    process's pickled result to the driver: (reason, accumulator updates, metrics, blocks)."""
    return pickle.dumps((reason, {}, {}, []), protocol=5)


class TaskProcessPool:
    def __init__(self, num_slots: int, env_conf: dict, on_task_end: TaskEndCallback,
                 extra_env: dict[str, str] | None = None, kill_timeout: float = 2.0,
                 on_slot_restarted: Callable[[int], None] | None = None,
                 loop: EventLoop | None = None,
                 forks: ForkServerClient | None = None,
                 on_barrier: BarrierCallback | None = None,
                 raw_results: bool = False, hand_back_s: float | None = None) -> None:
        self.num_slots = num_slots
        # at least 1 ms: the watch over waiting tasks wakes every hand_back_s / 2; math.inf:
        # nothing is handed back (no watch)
        self.hand_back_s = max(0.001, config.read({}, "spark.ember.scheduler.handBackAfter")
                               if hand_back_s is None else hand_back_s)
        self.raw_results = raw_results
        self.on_barrier = on_barrier
        self.env_conf = env_conf
        self.on_task_end = on_task_end
        self.on_slot_restarted = on_slot_restarted
        self.extra_env = extra_env or {}
        self.kill_timeout = kill_timeout
        self.slots = [_Slot(i) for i in range(num_slots)]
        self._own_loop = loop is None
        self.loop = loop or EventLoop("task-process-pool")
        self._lock = threading.RLock()
        self._watch = threading.Condition(self._lock)
        self._watch_idle = False
        self._stopped = False
        self._forks = forks or ForkServerClient(task_process_env(self.extra_env))
        self._exported = threading.Condition()
        self._exports = 0
        # one receive buffer for every slot (all reads happen on the loop's thread): a
        # fresh 1 MB bytes per recv() is an mmap + munmap each time, which costs more
        # than the rest of a tiny task's handling in this process
        self._scratch = bytearray(1 << 20)
        # every process's socket, for take_arrived: fd -> slot
        self._arrivals = select.poll()
        self._slot_of_fd: dict[int, _Slot] = {}
        # (requesting slot, its task id, block) -> answers still to come. By task: a task
        # killed while it waited (handed back, say) leaves its request behind, and the next
        # task of the slot may ask for the same block before the holder answered the first
        self._block_requests: dict[tuple[int, int, str], int] = {}

    # lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        """Start the slots' processes; if that fails (a full disk cannot take the kill
        files), what did start is stopped before the error goes up."""
        try:
            if not self._forks.started:
                self._forks.start()
            if self._own_loop:
                self.loop.start()
            for slot in self.slots:
                slot.kill_fd = os.open(self._kill_file(slot),
                                       os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
                os.write(slot.kill_fd, _KILL_ID.pack(-1) * (KILL_SLOTS + 1))
                self._spawn(slot)
        except BaseException:
            self.stop()
            raise
        if self.hand_back_s != math.inf:
            threading.Thread(target=self._watch_queues, name="task-queue-watch",
                             daemon=True).start()

    def _kill_file(self, slot: _Slot) -> str:
        return os.path.join(self.env_conf["local_dir"], f"task-slot-{slot.index}.kills")

    def _fault_log(self, slot: _Slot) -> str | None:
        """Where the slot's process has faulthandler write (its fresh process truncates it),
        with spark.python.worker.faulthandler.enabled."""
        if not self.env_conf.get("fault_handler"):
            return None
        return os.path.join(self.env_conf["local_dir"], f"task-slot-{slot.index}.fault")

    def _crash_report(self, slot: _Slot) -> str:
        """What the slot's dead process's faulthandler wrote (Spark puts it in the task's
        error), or ''."""
        path = self._fault_log(slot)
        if path is None:
            return ""
        try:
            with open(path, errors="replace") as f:
                return f.read(FAULT_REPORT_CHARS).strip()
        except OSError:
            return ""

    def _spawn(self, slot: _Slot) -> None:
        """Give the slot a fresh process; the socket is usable at once (messages queue up)."""
        parent, child = socket.socketpair()
        conf = dict(self.env_conf, slot=slot.index, raw_results=self.raw_results,
                    kill_file=self._kill_file(slot), fault_log=self._fault_log(slot),
                    hand_back_s=self.hand_back_s,
                    sys_path=[p for p in sys.path if p and os.path.isdir(p)])
        send_msg(parent, conf)
        slot.sock, slot.pid = parent, 0
        slot.buf = FrameBuffer()
        slot.seen = set()
        slot.forgotten = []
        slot.tid = None
        slot.abandoned = {}
        slot.started_at = time.monotonic()
        os.pwrite(slot.kill_fd, _KILL_ID.pack(-1), REACHED_AT)  # not the last process's
        self.loop.register(parent, functools.partial(self._on_readable, slot, parent))
        self._arrivals.register(parent, select.POLLIN)
        self._slot_of_fd[parent.fileno()] = slot
        self._forks.fork(child, slot)

    def _unwatch(self, sock: socket.socket) -> None:
        """Stop watching a slot's socket, before it is closed (its number may be reused);
        harmless on one already closed."""
        self.loop.unregister(sock)
        if self._slot_of_fd.pop(sock.fileno(), None) is not None:
            self._arrivals.unregister(sock)

    def stop(self) -> None:
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._watch.notify()
            for slot in self.slots:
                if slot.sock is not None:
                    self._unwatch(slot.sock)
                    try:
                        send_msg(slot.sock, ("stop",))
                        # a process blocked sending a result nobody reads now gets EPIPE
                        # and ends, instead of waiting out the SIGKILL below; an idle one
                        # still reads the "stop" first
                        slot.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
        pids = wait_gone([s.pid for s in self.slots if s.pid], 2.0)
        for p in pids:
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
        self._forks.stop()
        for slot in self.slots:
            if slot.sock is not None:      # unwatched above, under the lock
                slot.sock.close()
            if slot.kill_fd >= 0:
                os.close(slot.kill_fd)
                unlink_quietly(self._kill_file(slot))
        if self._own_loop:
            self.loop.stop()

    # tasks -------------------------------------------------------------------------------
    def free_slots(self) -> list[int]:
        return [s.index for s in self.slots if s.tid is None and not s.dead]

    def launch_all(self, launches: list[tuple]) -> None:
        """Launches (slot, task id, stage key, closure, metadata, task bytes) of one offer
        round. A task for an idle process is written at once (it waits for nothing else);
        the tasks written ahead to a busy one go together at the end of the round, so a
        round that queues many short tasks costs one system call and one wake-up per
        process, not per task."""
        lost = []
        with self._lock:
            for launch in launches:
                if not self._launch(*launch):
                    lost.append(launch)
            for slot in self.slots:     # once per slot, not once per queued task
                self._send_ahead(slot)
        for index, tid, *_ in lost:
            slot = self.slots[index]
            self.loop.post(self._end_without_result, slot, tid, "LOST",
                           f"Task process slot {index} is busy with task {slot.tid} and "
                           f"{len(slot.waiting)} more wait for it")

    def _launch(self, index: int, tid: int, stage_key: Any, blob: bytes, meta: bytes,
                task_bytes: bytes) -> bool:
        """Under launch_all: run the task in the slot's process, or after the ones it holds
        (up to MAX_WAITING may wait per slot: the driver queues short tasks so a slot's next
        task needs no round trip to it; they are written to the process with the round's
        other writes while they fit in SEND_AHEAD_BYTES). False for one more: the caller
        reports it lost, so the driver runs it elsewhere. On a slot given up (its process
        kept dying at start) the task fails at once: the driver tracks slots itself and
        would otherwise wait for it for ever; a failure also keeps that task off this
        executor while another can take it."""
        slot = self.slots[index]
        if slot.dead:
            self.loop.post(self._end_without_result, slot, tid, "FAILED", (
                "SparkException", f"Task process slot {index} of this executor was "
                "given up: its Python process kept dying at start", "", True))
            return True
        if slot.tid is None:
            self._send_task(slot, tid, stage_key, blob, meta, task_bytes)
            return True
        if len(slot.waiting) >= MAX_WAITING:
            return False
        slot.waiting.append(_Waiting((tid, stage_key, blob, meta, task_bytes)))
        if self._watch_idle:
            self._watch.notify()
        return True

    def _send_ahead(self, slot: _Slot) -> None:
        """Under the lock: write waiting tasks to the busy process, in order, while they fit
        in SEND_AHEAD_BYTES (with what was handed back but is still in its socket), all in
        one write."""
        if not slot.waiting or slot.waiting[-1].sent:
            return      # the written ones are a prefix (written in order): none left
        budget = SEND_AHEAD_BYTES - sum(w.size for w in slot.abandoned.values())
        msgs: list[tuple] = []
        for w in slot.waiting:
            if not w.sent:      # its closure goes along if the process lacks it so far
                _tid, key, blob, meta, task_bytes = w.launch
                w.size = len(task_bytes) + (0 if key in slot.seen
                                            else len(blob) + len(meta or b""))
            budget -= w.size
            if budget < 0:
                break
            if not w.sent:
                w.sent, w.seq = True, slot.sent_ahead
                slot.sent_ahead += 1
                msgs += self._task_msgs(slot, *w.launch, queued=True)
        self._write(slot, msgs)

    def _send_task(self, slot: _Slot, tid: int, stage_key: Any, blob: bytes, meta: bytes,
                   task_bytes: bytes) -> None:
        """Under the lock, the slot idle: written at once."""
        slot.tid = tid
        slot.since = time.monotonic()
        self._write(slot, self._task_msgs(slot, tid, stage_key, blob, meta, task_bytes))

    @staticmethod
    def _task_msgs(slot: _Slot, tid: int, stage_key: Any, blob: bytes, meta: bytes,
                   task_bytes: bytes, queued: bool = False) -> list[tuple]:
        """The task's message, after the stages the process is to forget. Queued (written
        ahead to a busy process): with the time it was sent, so the process can tell a task
        held up by a long one (TaskEnv.hand_back_s)."""
        first = stage_key not in slot.seen
        if first:
            slot.seen.add(stage_key)
        msgs = [("forget_stage", s) for s in slot.forgotten]
        slot.forgotten = []
        msgs.append(("task", tid, stage_key, blob if first else None,
                     meta if first else None, task_bytes,
                     time.monotonic() if queued else None))
        return msgs

    @staticmethod
    def _write(slot: _Slot, msgs: list[tuple]) -> None:
        if msgs:
            try:
                send_msgs(slot.sock, msgs)
            except OSError:
                pass  # the reader thread sees the death and reports the tasks lost

    def kill(self, index: int, tid: int) -> None:
        """Stop the task: listed in the kill file and SIGUSR1 now, SIGKILL of the process if
        it has not stopped in time (also covers a process still being forked, which cannot
        be signalled yet). A task still waiting in the pool is dropped and reported killed
        at once; one written ahead to its process ends there, unstarted, when its turn
        comes (or stops, if it started meanwhile)."""
        with self._lock:
            slot = self.slots[index]
            waiting = next((w for w in slot.waiting if w.tid == tid), None)
            if waiting is not None and not waiting.sent:
                slot.waiting.remove(waiting)
                # reported from the loop, as every end: never inside the caller's kill
                self.loop.post(self._end_without_result, slot, tid, "KILLED", "Task killed")
                return
            if (slot.tid != tid and waiting is None) or tid in slot.kills:
                return
            self._list_killed(slot, tid)
            self._signal(slot)
        t = threading.Timer(self.kill_timeout, self._force_kill, (index, tid))
        t.daemon = True
        t.start()

    def _list_killed(self, slot: _Slot, tid: int) -> int:
        """Under the lock: one aligned 8-byte write per kill, so a reader never sees half
        an id; where it went."""
        at = _KILL_ID.size * (slot.kill_count % KILL_SLOTS)
        os.pwrite(slot.kill_fd, _KILL_ID.pack(tid), at)
        slot.kill_count += 1
        slot.kills.append(tid)
        return at

    @staticmethod
    def _signal(slot: _Slot) -> None:
        """SIGUSR1: the process stops its running task if the kill file lists it."""
        if slot.pid:
            try:
                os.kill(slot.pid, signal.SIGUSR1)
            except OSError:
                pass

    def _watch_queues(self) -> None:
        """While tasks wait behind busy slots: every hand_back_s / 2, hand back those
        behind a task that has run longer than hand_back_s."""
        with self._watch:
            while not self._stopped:
                if not any(s.waiting for s in self.slots):
                    self._watch_idle = True
                    self._watch.wait()
                    self._watch_idle = False
                    continue
                self._watch.wait(self.hand_back_s / 2)
                now = time.monotonic()
                for slot in self.slots:
                    if slot.waiting and not self._stopped \
                            and now - slot.since > self.hand_back_s:
                        self._hand_back(slot)

    def _hand_back(self, slot: _Slot) -> None:
        """Under the lock: every task waiting behind the one the process last reached ends
        KILLED (TASK_HANDED_BACK) now, for the driver to run elsewhere. Those already
        written to the process are listed in its kill file, which ends them unstarted, and
        their ends from the process are not reported. Why the pool asks the process: it
        counts a task running until it reads its end, and a process holds the ends of short
        tasks while it runs the next ones (task_process.report_now), so the tasks it counts
        waiting may have run already, or be running; handed back, they would run twice.
        The pool looks again after listing them, and keeps a task the process reached in
        between, its entry taken back: the process says it reached a task before it checks
        the kill file (task_process._Kills.reached), so the one task it could have started
        unseen by the first look is seen by the second."""
        waiting = list(slot.waiting)
        kept = self._reached_in(slot, waiting)
        if kept == len(waiting):
            return
        listed: dict[int, int] = {}     # task id -> its kill file entry
        for w in waiting[kept:]:
            if w.sent:
                listed[w.tid] = self._list_killed(slot, w.tid)
        keep = max(kept, self._reached_in(slot, waiting))
        for w in waiting[kept:keep]:        # started since the first look: running, kept
            if w.tid in listed:
                os.pwrite(slot.kill_fd, _KILL_ID.pack(-1), listed.pop(w.tid))
                slot.kills.remove(w.tid)
        back = waiting[keep:]
        for w in back:
            if w.tid in listed:
                slot.abandoned[w.tid] = w
            self.loop.post(self._end_without_result, slot, w.tid, "KILLED", TASK_HANDED_BACK)
            slot.waiting.pop()
        if back:
            log.info("Handed back %d task(s) waiting behind task %d; no task has ended here "
                     "for %.0f ms", len(back), waiting[keep - 1].tid if keep else slot.tid,
                     (time.monotonic() - slot.since) * 1000)
        if listed:
            self._signal(slot)

    @staticmethod
    def _reached_in(slot: _Slot, waiting: list[_Waiting]) -> int:
        """How many of the waiting tasks the process has reached: up to the one its kill
        file's last entry names; those written before it when that is one handed back
        earlier (which it reached to end unstarted: the tasks it passed on the way, run
        since, their ends held, must not be handed back and run again); else none."""
        reached = _KILL_ID.unpack(os.pread(slot.kill_fd, _KILL_ID.size, REACHED_AT))[0]
        at = next((i + 1 for i, w in enumerate(waiting) if w.tid == reached), 0)
        handed = slot.abandoned.get(reached)
        if at or handed is None:
            return at
        return sum(1 for w in waiting if w.sent and w.seq < handed.seq)

    def _force_kill(self, index: int, tid: int) -> None:
        with self._lock:
            slot = self.slots[index]
            if slot.tid == tid and slot.pid and not self._stopped:
                log.warning("Task %d did not stop after being killed; killing its task "
                            "process %d", tid, slot.pid)
                try:
                    os.kill(slot.pid, signal.SIGKILL)
                except OSError:
                    pass

    def broadcast(self, msg: tuple) -> None:
        with self._lock:
            for slot in self.slots:
                if slot.sock is not None and not slot.dead:
                    try:
                        send_msg(slot.sock, msg)
                    except OSError:
                        pass

    def recycle_idle(self, keep: set[int]) -> list[int]:
        """Give a fresh process to each idle slot whose process has spent RECYCLE_AFTER_CPU_S
        of CPU and that is not in `keep` (it holds memory blocks); returns those slots.
        Why: after a job that freed millions of objects, CPython's allocator hands out new
        ones scattered over its pools, and a cache filled there is slower to read on every
        pass (round 38 in the README); a fresh process allocates in order."""
        recycled = []
        with self._lock:
            for slot in self.slots:
                if (slot.index not in keep and self._replaceable(slot)
                        and _cpu_seconds(slot.pid) >= RECYCLE_AFTER_CPU_S):
                    self._replace(slot)
                    recycled.append(slot.index)
        return recycled

    def _replaceable(self, slot: _Slot) -> bool:
        """Under the lock: may the slot's process be stopped now? Not while it runs or holds
        a task, nor while a block request awaits answers (it may owe one)."""
        return not (self._stopped or self._block_requests or slot.tid is not None
                    or slot.waiting or slot.abandoned or slot.dead or not slot.pid
                    or slot.sock is None)

    def _replace(self, slot: _Slot) -> None:
        """Under the lock: stop the slot's idle process and give the slot a fresh one."""
        old, pid = slot.sock, slot.pid
        self._unwatch(old)
        try:
            send_msg(old, ("stop",))
        except OSError:
            pass
        old.close()
        self._forks.forget(pid)
        self._spawn(slot)

    def _on_retire(self, slot: _Slot, sock: socket.socket) -> None:
        """A process whose running task was killed, and that holds no memory block, offers
        to go: a fresh one takes the slot if nothing was sent to it since (PySpark's JVM
        destroys the Python worker of a task it interrupts; user state the interrupted code
        left half made goes with it)."""
        with self._lock:
            if sock is slot.sock and self._replaceable(slot):
                self._replace(slot)

    def export_blocks(self, timeout: float = 120.0) -> bool:
        """Every task process writes its in-memory cached blocks to the block dir (for a
        decommissioning executor's migration); True once all have answered. Call off the
        pool's loop, with no task running."""
        with self._lock:
            live = sum(1 for s in self.slots if s.sock is not None and not s.dead)
        with self._exported:
            self._exports = 0
        self.broadcast(("export_blocks",))
        with self._exported:
            return self._exported.wait_for(lambda: self._exports >= live, timeout)

    def forget_stage(self, stage_id: int) -> None:
        """Each process drops the stage's closure when its next task arrives, told in the
        same write: a message now would wake every idle process (at a job's end, between
        its last task and the caller getting the result)."""
        with self._lock:
            for slot in self.slots:
                if any(k[0] == stage_id for k in slot.seen):
                    slot.seen = {k for k in slot.seen if k[0] != stage_id}
                    slot.forgotten.append(stage_id)

    # reader (runs on the event loop) -----------------------------------------------------
    def take_arrived(self) -> None:
        """Read, without waiting, what any process has sent by now. For a caller about to
        report task ends (the executor's StatusUpdates): a result that came in after the
        loop's wait returned goes in the same message as the ones read in this turn, so
        tasks that end together cost the driver one wake-up and one read, not one each."""
        for fd, _events in self._arrivals.poll(0):
            slot = self._slot_of_fd.get(fd)
            if slot is not None:
                self._on_readable(slot, slot.sock)

    def _on_readable(self, slot: _Slot, sock: socket.socket) -> None:
        if sock is not slot.sock:
            return
        scratch = self._scratch
        try:    # not waiting: take_arrived may have read what made the loop call this
            n = sock.recv_into(scratch, 0, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return
        except OSError:
            n = 0
        if not n:
            self._on_death(slot, sock)
            return
        with memoryview(scratch) as view:
            msgs = slot.buf.feed(view[:n])
        for msg in msgs:
            if msg[0] == "done":
                self._on_done(slot, msg)
            elif msg[0] == "exported":
                with self._exported:
                    self._exports += 1
                    self._exported.notify_all()
            elif msg[0] == "barrier":
                self._on_barrier(slot, msg[1], msg[2])
            elif msg[0] == "retire":
                self._on_retire(slot, sock)
            elif msg[0] == "fetch_block":
                self._on_fetch_block(slot, msg[1], msg[2])
            elif msg[0] == "block_exported":
                self._on_block_exported(msg[1], msg[2], msg[3], msg[4])

    def _on_fetch_block(self, slot: _Slot, tid: int, name: str) -> None:
        """A task wants a memory block another slot holds: every other live slot is asked
        to export it (each answers between two tasks, into a file named for the task); the
        first copy, or None once all said no, is the answer."""
        with self._lock:
            others = [s for s in self.slots
                      if s is not slot and s.sock is not None and not s.dead]
            if not others:
                self._reply_block(slot.index, tid, name, None)
                return
            key = (slot.index, tid, name)
            self._block_requests[key] = len(others)
            for other in others:
                try:
                    send_msg(other.sock, ("export_block", name, slot.index, tid))
                except OSError:
                    self._block_requests[key] -= 1

    def _on_block_exported(self, requester: int, tid: int, name: str, path: str | None
                           ) -> None:
        with self._lock:
            key = (requester, tid, name)
            left = self._block_requests.get(key)
            if left is None:            # answered already: a late copy is not needed
                if path is not None:
                    unlink_quietly(path)
                return
            if path is None and left > 1:
                self._block_requests[key] = left - 1
                return
            del self._block_requests[key]
            self._reply_block(requester, tid, name, path)

    def _reply_block(self, index: int, tid: int, name: str, path: str | None) -> None:
        slot = self.slots[index]
        # the asking task may run while this pool still counts the one before it running
        # (a process reports the results of queued tasks together)
        if slot.sock is not None and (slot.tid == tid or any(w.tid == tid and w.sent
                                                              for w in slot.waiting)):
            try:
                send_msg(slot.sock, ("block_reply", tid, name, path))
                return
            except OSError:
                pass
        if path is not None:
            unlink_quietly(path)

    def _on_barrier(self, slot: _Slot, tid: int, request: Any) -> None:
        sock = slot.sock

        def respond(ok: bool, value: Any) -> None:
            with self._lock:
                if slot.sock is sock and slot.tid == tid:
                    try:
                        send_msg(sock, ("barrier_reply", tid, ok, value))
                    except OSError:
                        pass
        if slot.tid != tid or getattr(request, "taskAttemptId", None) != tid:
            respond(False, f"Task {tid} is not the task running in this task process")
        elif self.on_barrier is None:
            respond(False, "Barrier execution is not available here")
        else:
            try:
                self.on_barrier(slot.index, tid, request, respond)
            except Exception as e:
                log.exception("barrier request of task %d failed", tid)
                respond(False, f"{type(e).__name__}: {e}")

    def _on_done(self, slot: _Slot, msg: tuple) -> None:
        tid = msg[1]
        with self._lock:
            if slot.abandoned.pop(tid, None) is not None:
                return                  # reported when it was handed back
            if slot.tid == tid:
                slot.tid = None
                if slot.waiting:        # the next one started before this end was read
                    nxt = slot.waiting.popleft()
                    if nxt.sent:
                        slot.tid = nxt.tid
                        slot.since = time.monotonic()
                    else:
                        self._send_task(slot, *nxt.launch)
                    self._send_ahead(slot)
            slot.quick_deaths = 0
        try:
            self.on_task_end(slot.index, *msg[1:])
        except Exception:
            log.exception("task end handler failed for task %d", tid)

    def _end_without_result(self, slot: _Slot, tid: int, state: str, reason: Any) -> None:
        """A task that ended with its process (killed, crashed): no result frame exists."""
        if self.raw_results:
            self.on_task_end(slot.index, tid, state, raw_end_without_result(reason))
        else:
            self.on_task_end(slot.index, tid, state, reason, {}, {}, [])

    def _on_death(self, slot: _Slot, sock: socket.socket) -> None:
        with self._lock:
            if sock is not slot.sock:       # a process _replace stopped
                return
            self._unwatch(slot.sock)
            slot.sock.close()
            if self._stopped:
                return
            for requester, tid, name in list(self._block_requests):
                # its own request ends with it; others' lose the answer it owed them
                del self._block_requests[requester, tid, name]
                if requester != slot.index:
                    self._reply_block(requester, tid, name, None)
            code = self._forks.exit_code(slot.pid, timeout=0.2)
            crash_report = self._crash_report(slot)     # before a fresh process truncates it
            tid = slot.tid
            slot.tid = None
            lived = time.monotonic() - slot.started_at
            slot.quick_deaths = slot.quick_deaths + 1 if lived < 1.0 and tid is None else 0
            waiting = [w.launch for w in slot.waiting]
            slot.waiting.clear()
            if slot.quick_deaths >= 5:
                slot.dead = True
                log.error("Task process slot %d keeps dying at start (exit code %s); "
                          "giving it up", slot.index, code)
            else:
                self._spawn(slot)
                # they never ran: the fresh process runs them (or ends those its kill file
                # lists)
                self.launch_all([(slot.index, *launch) for launch in waiting])
                waiting = []
        if tid is not None:
            if tid in slot.kills:
                self._end_without_result(slot, tid, "KILLED", "Task killed")
            else:
                reason = (f"Python worker exited unexpectedly (crashed): exit code {code}"
                          + (f" (signal {-code})" if code is not None and code < 0 else "")
                          + (f"\n{crash_report}" if crash_report else ""))
                self._end_without_result(slot, tid, "LOST", reason)
        for launch in waiting:
            if launch[0] in slot.kills:
                self._end_without_result(slot, launch[0], "KILLED", "Task killed")
            else:
                self._end_without_result(slot, launch[0], "LOST",
                                         f"Task process slot {slot.index} was given up")
        if self.on_slot_restarted is not None:
            self.on_slot_restarted(slot.index)


def _cpu_seconds(pid: int) -> float:
    """User + system CPU a process has spent (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
