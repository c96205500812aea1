"""The driver's UI process: the application UI (status store, pages, /api/v1, metrics) and
the event log's writer, in a process of their own beside the driver.

Why a process: a job of tiny tasks keeps the driver's one GIL busy, so whatever a listener
computes is taken from the scheduler. Applying a task's two events to the status store costs
about 5 us and formatting its two JSON lines about 7 us; packing the same events into tuples
of plain values and marshalling them costs about 0.5 us each. So the driver's part is
`UiProcess`, a bus listener that marshals the events into frames a writer thread sends to
the UI process's stdin; there (ember.ui.ui_process_main), on another core, the very same
AppStatusStore, SparkUI and `_TaskLines` code runs. A side effect that matters as much:
rendering a big stage page no longer holds the scheduler's GIL. The UI process works at idle
priority, so it takes the cores' idle time rather than time from the driver or its tasks,
and imports the UI only once it is first needed (ui_process_main says when), so a short
application's start does not share its cores with it.

Everything the UI and the log know comes from listener events, so nothing else is shared:
the driver binds the UI's port (its URL goes into the app's registration) and hands the
socket over; task starts and successful task ends travel as tuples (`pack`; a start still
held when its task ends successfully travels inside the end's tuple), every other event as
its event-log dict, which this process encodes as the log's line and applies as the history
server applies a parsed line.

Frames on stdin: a 4-byte little-endian length, then `marshal.dumps` of a list of items,
each an item's own `marshal.dumps(item, 2)`. The first frame holds the settings dict (conf,
UI socket fd and, with TLS, its HTTP redirect socket's fd, whether to log); then items are
an event's JSON-protocol dict, a line (str: the dict's own when marshal cannot take it), a
packed task event (a tuple starting TASK_START, TASK_END or TASK_RAN), `(OPEN_LOG,
EventLog.start's answer)` or `(SYNC,)` (answered with a byte on stdout once the frame is
applied). Lines written before the log is open are held. The process applies (and logs)
what it holds when the driver pauses (ui_process_main); end of input (the driver closed the
pipe, or died) applies the rest, then ends the process and with it the UI's port.
"""
from __future__ import annotations

import collections
import fcntl
import logging
import marshal
import os
import select
import socket
import subprocess
import sys
import threading
from typing import Any, Callable, Iterable

from ember.scheduler import listener as sl
from ember.scheduler.task import SUCCESS, Success, TaskInfo
from ember.ui.ui_frames import HEADER, OPEN_LOG, SYNC, readable
from ember.util.processes import wait_exit

log = logging.getLogger("ember.ui.UiProcess")


TASK_START, TASK_END, TASK_RAN = 0, 1, 2     # packed kinds; TASK_RAN: a start and its end


def pack(e: Any, to_json: Callable[[Any], dict | None], kind: int = TASK_END) -> Any:
    """A task start or successful task end as a tuple of plain values (a successful end as
    `kind`: TASK_RAN when it stands for its start too); anything else as its JSON-protocol
    dict from `to_json` (the UI process encodes it: a stage's or a job's line costs the
    driver ~7 us to encode, its dict ~2 us to marshal), or '' if not logged."""
    t = type(e)
    if t is sl.TaskStart:
        i = e.task_info
        return (TASK_START, e.stage_id, e.stage_attempt, i.task_id, i.index,
                i.attempt_number, i.partition_id, i.launch_time, i.executor_id, i.host,
                i.locality, i.speculative)
    if t is sl.TaskEnd and type(e.reason) is Success:
        i = e.task_info
        return (kind, e.stage_id, e.stage_attempt, i.task_id, i.index, i.attempt_number,
                i.partition_id, i.launch_time, i.executor_id, i.host, i.locality,
                i.speculative, e.task_type, i.finish_time, e.metrics or {})
    d = to_json(e)
    return "" if d is None else d


def unpack(item: tuple) -> list[Any]:
    """The listener events `pack` was given (as far as their JSON lines go): a TASK_RAN
    item is its task's start and end."""
    kind = item[0]
    if kind == TASK_START:
        return [sl.TaskStart(item[1], item[2], TaskInfo(*item[3:12]))]
    info = TaskInfo(*item[3:12])
    info.finish_time, info.successful = item[13], True
    end = sl.TaskEnd(item[1], item[2], item[12], SUCCESS, info, item[14])
    if kind == TASK_END:
        return [end]
    return [sl.TaskStart(item[1], item[2], TaskInfo(*item[3:12])), end]


class UiProcess:
    """The driver's end, a sync listener on the bus (`on_event` appends on the posting
    thread). Starts `python -m ember.ui.ui_process_main` serving the UI on `ui_sock` if
    given (the caller then closes its copy); with `event_log`, `open_log(path)` once the event
    log's file exists. Raises OSError if the process cannot start.

    Why not an async listener on the bus thread: that thread took the scheduler's GIL for
    every event it handed over (a 10,000-task job ran ~10 % slower with a listener that did
    nothing). Here the posting thread marshals each event as it comes and every FRAME_ITEMS
    events makes a frame of them, which it writes at once while the pipe has room (the
    pipe's end is non-blocking); a writer thread waits for room when the UI process is
    behind, without the GIL, and sends BATCH_DELAY after the last frame what is left. (A
    writer thread woken for every frame took the GIL from the busy scheduler thread three
    times a frame: 4-10 % of a 10,000-task job.) Why marshal at once: bytes are not tracked
    by the garbage collector. Holding the events themselves until their frame was cut kept
    ~3 tracked objects per task alive past their post: ~50 % more young collections, the
    survivors promoted and scanned again (a 10,000-task job spent ~10 ms more, 5 % of it,
    collecting). Task starts are the exception: each is held (not packed) until its task
    ends, and a successful end is then packed as TASK_RAN, one tuple for both events, since
    the end's tuple holds all the start's values. That saves packing and marshalling half of
    the events (~30 % of the driver's instructions for the UI), and holds only the tasks
    running at the time. A start is sent on its own when its task fails, before any other
    kind of event (so the order of a stage's events holds) and when a frame is cut (so a
    live page shows running tasks). The pipe is widened to PIPE_BYTES: the UI process reads
    at idle priority, and each refill of a 64 KiB pipe cost the driver a wake-up of a writer
    blocked on it.
    Frames the process has not read wait in the driver, up to MAX_QUEUED_BYTES; past that
    events are dropped with Spark's error."""

    FRAME_ITEMS = 2048
    BATCH_DELAY = 0.05
    PIPE_BYTES = 1 << 20
    MAX_QUEUED_BYTES = 64 << 20

    def __init__(self, conf: Any, ui_sock: socket.socket | None, event_log: bool,
                 redirect_sock: socket.socket | None = None) -> None:
        from ember.ui.event_log import _dumps, event_to_json
        self._dumps = _dumps
        self._to_json = event_to_json
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        fds = tuple(s.fileno() for s in (ui_sock, redirect_sock) if s is not None)
        self._event_log = event_log
        self._pending: collections.deque = collections.deque()   # posted, not yet framed
        self._starts: dict[int, Any] = {}       # task id -> TaskStart held for its end
        self._frames: collections.deque = collections.deque()    # framed; None: end of input
        self._queued_bytes = 0
        self._writing = False
        self._flushing = 0
        self._idle = False
        self._failed = False
        self._closing = False
        self.dropped = 0
        self._cv = threading.Condition()     # frames queued in the order their items came
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "ember.ui.ui_process_main"],
                                     stdin=subprocess.PIPE, env=env, bufsize=0,
                                     stdout=subprocess.PIPE, pass_fds=fds)
        self._fd = self.proc.stdin.fileno()
        os.set_blocking(self._fd, False)
        try:
            fcntl.fcntl(self._fd, fcntl.F_SETPIPE_SZ, self.PIPE_BYTES)
        except OSError:             # above /proc/sys/fs/pipe-max-size: the default size
            pass
        items = conf.getAll() if hasattr(conf, "getAll") else list(dict(conf).items())
        self._enqueue([{"conf": {str(k): str(v) for k, v in items},
                        "ui_fd": fds[0] if fds else None, "event_log": event_log,
                        "redirect_fd": fds[1] if len(fds) > 1 else None}])
        self._writer = threading.Thread(target=self._write_frames, name="ui-process-writer",
                                        daemon=True)
        self._writer.start()

    def on_event(self, e: Any) -> None:
        if self._failed or self._closing:
            return
        pending, starts = self._pending, self._starts
        t = type(e)
        if t is sl.TaskStart:
            starts[e.task_info.task_id] = e
            if self._idle:
                self._wake_writer()
            return
        kind = TASK_END
        if starts:
            if t is sl.TaskEnd:
                start = starts.pop(e.task_info.task_id, None)
                if start is not None:
                    if type(e.reason) is Success:
                        kind = TASK_RAN
                    else:
                        pending.append(marshal.dumps(pack(start, None), 2))
            else:               # nothing else may come before a start posted earlier
                self._release_starts(pending)
        try:
            item = marshal.dumps(pack(e, self._to_json, kind), 2)  # 2: no reference table
        except ValueError:      # a value marshal does not take: the line, encoded here
            if kind == TASK_RAN:
                pending.append(marshal.dumps(pack(start, None), 2))
            item = marshal.dumps(self._dumps(e), 2)
        pending.append(item)
        if len(pending) >= self.FRAME_ITEMS:
            with self._cv:
                self._frame_pending()
                self._write_ready()
        elif self._idle:        # the GIL orders this check after the writer's own
            self._wake_writer()

    def _wake_writer(self) -> None:
        """Wake the writer thread, idle for want of events, once: it clears `_idle` itself
        only when it next runs, which can wait a switch interval (5 ms) for the busy posting
        thread's GIL, and until then every event posted took the lock to notify it again
        (36 to 926 times in a 10,000-task job)."""
        with self._cv:
            self._idle = False
            self._cv.notify()

    def on_events(self, events: Iterable[Any]) -> None:
        for e in events:
            self.on_event(e)

    def _release_starts(self, into: collections.deque | list) -> None:
        """The held task starts, packed onto `into` in the order they came. Any thread: a
        start another thread took is in its items already (dict.pop is atomic)."""
        starts = self._starts
        for task_id in list(starts):
            e = starts.pop(task_id, None)
            if e is not None:
                into.append(marshal.dumps(pack(e, None), 2))

    def _frame_pending(self) -> None:
        """Under the condition's lock: what is pending becomes the next frame."""
        pending = self._pending
        pop = pending.popleft
        items = [pop() for _ in range(len(pending))]
        if self._starts:        # after the items: a start posted later than they were
            self._release_starts(items)
        if not items or self._failed:
            return
        if self._queued_bytes > self.MAX_QUEUED_BYTES:
            self._drop(len(items))
            return
        self._enqueue_marshalled(items)

    def _enqueue(self, items: list) -> None:
        self._enqueue_marshalled([marshal.dumps(i, 2) for i in items])

    def _enqueue_marshalled(self, items: list[bytes]) -> None:
        data = marshal.dumps(items, 2)
        frame = HEADER.pack(len(data)) + data
        self._frames.append(frame)
        self._queued_bytes += len(frame)

    def _drop(self, n: int) -> None:
        self.dropped += n
        if self.dropped == n:
            log.error("Dropping event from queue appStatus. This likely means one of the "
                      "listeners is too slow and cannot keep up with the rate at which tasks "
                      "are being started by the scheduler.")

    def _write_ready(self) -> None:
        """Under the lock, on any thread: write queued frames while the pipe takes them
        without blocking; wake the writer thread for what is left (the process is behind,
        or the input ends)."""
        if self._writing:           # the writer thread waits for room; it writes these
            return
        frames = self._frames
        try:
            while frames and frames[0] is not None:
                frame = frames[0]
                n = os.write(self._fd, frame)
                self._queued_bytes -= n
                if n < len(frame):
                    frames[0] = frame[n:]
                    break
                frames.popleft()
        except BlockingIOError:
            pass
        except OSError as e:        # the process died or was closed
            if not self._closing:
                log.error("The UI process failed (%s); the UI and the event log stop here",
                          e)
            self._failed = True
            self._pending.clear()
            self._starts.clear()
            frames.clear()
        if frames or self._failed or self._flushing:
            self._cv.notify_all()

    def _write_frames(self) -> None:
        """The writer thread: frames in order until end of input or a failed write; then
        the process's stdin is closed."""
        try:
            self._write_until_done()
        finally:
            try:
                self.proc.stdin.close()
            except OSError:
                pass

    def _write_until_done(self) -> None:
        cv, frames = self._cv, self._frames
        room = select.poll()        # not select(): the pipe's fd may be above FD_SETSIZE
        room.register(self._fd, select.POLLOUT)
        while True:
            with cv:
                self._writing = False
                while True:
                    if frames:
                        self._write_ready()
                        if not frames:
                            continue
                        if frames[0] is None:       # end of input: all before it written
                            frames.popleft()
                            cv.notify_all()
                            return
                        break                       # the pipe is full
                    if self._failed:
                        return
                    if self._pending or self._starts:   # let events gather, then send
                        cv.wait(self.BATCH_DELAY)
                        self._frame_pending()
                    else:
                        self._idle = True
                        if not (self._pending or self._starts):
                            cv.wait()
                        self._idle = False
                self._writing = True
            room.poll()

    def _send(self, value: Any) -> None:
        """A control frame, after every event posted before it."""
        with self._cv:
            if self._failed or self._closing:
                return
            self._frame_pending()
            self._enqueue(value)
            self._write_ready()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until every event posted before is written to the process, or dropped with
        it if it failed (the bus's wait_until_empty); False if that took longer than
        `timeout`."""
        with self._cv:
            self._frame_pending()
            self._flushing += 1         # whoever writes the last frame then wakes us
            try:
                self._write_ready()
                return self._cv.wait_for(lambda: self._failed or not (self._frames or
                                                                      self._writing), timeout)
            finally:
                self._flushing -= 1

    def open_log(self, spec: dict[str, Any]) -> None:
        """Write the event log `EventLog.start` created from now on (with the lines held
        so far)."""
        self._send([(OPEN_LOG, spec)])

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until the process has applied and written everything posted before; False if
        it is gone or slower than `timeout`. (The UI then shows every event posted.)"""
        self._send([(SYNC,)])
        if self._failed:
            return False
        fd = self.proc.stdout.fileno()
        return bool(readable([fd], timeout)) and os.read(fd, 1) == b"."

    def close(self, timeout: float = 10.0) -> None:
        """End of input; wait for the process to write everything and exit, or - with no
        event log to finish - end it at once (it may still be starting). Idempotent."""
        with self._cv:
            if not self._closing:
                self._frame_pending()
                self._closing = True
                self._frames.append(None)
                self._cv.notify_all()
        if not self._event_log:
            self.proc.kill()
        self._writer.join(timeout)
        if wait_exit(self.proc, timeout) is None:
            self.proc.kill()
            self.proc.wait()


