"""The driver's UI process: the application UI (status store, pages, /api/v1, metrics) and
the event log's writer, in a process of their own beside the driver.

Why a process: a job of tiny tasks keeps the driver's one GIL busy, so whatever a listener
computes is taken from the scheduler. Applying a task's two events to the status store costs
about 5 us and formatting its two JSON lines about 7 us; packing the same events into tuples
of plain values for `marshal` costs under 1 us. So the driver's part is `UiProcess`, an
asynchronous bus listener that packs each batch and writes it to this process's stdin; here,
on another core, the very same AppStatusStore, SparkUI and `_TaskLines` code runs. A side
effect that matters as much: rendering a big stage page no longer holds the scheduler's GIL.
The thread that applies events runs at idle priority (`_idle_priority`), so it takes the
cores' idle time rather than time from the driver or its tasks.

Everything the UI and the log know comes from listener events, so nothing else is shared:
the driver binds the UI's port (its URL goes into the app's registration) and hands the
socket over; task starts and successful task ends travel as tuples (`pack`), every other
event as its event-log line, which this process parses back (the history server's way).

Frames on stdin: a 4-byte little-endian length, then `marshal.dumps(value)`. The first frame
is the settings dict (conf, UI socket fd and, with TLS, its HTTP redirect socket's fd,
whether to log); then lists of items: a line (str),
a packed task event (tuple starting 0 or 1), `(OPEN_LOG, EventLog.start's answer)` or
`(SYNC,)` (answered with
a byte on stdout once the frame is applied). Lines written before the log is open are
held. The log is flushed after each frame (the bus sends one every 50 ms at most), so a
driver killed outright loses at most the frame in flight; end of input (the driver closed the
pipe, or died) ends the process and with it the UI's port.
"""
from __future__ import annotations

import json
import logging
import marshal
import os
import select
import socket
import struct
import subprocess
import sys
import threading
from typing import Any, Callable, Iterable

from ember.scheduler import listener as sl
from ember.scheduler.task import SUCCESS, Success, TaskInfo
from ember.util.logs import configure_logging

log = logging.getLogger("ember.ui.UiProcess")

_HEADER = struct.Struct("<I")
OPEN_LOG, SYNC = 2, 3


def pack(e: Any, encode_line: Callable[[Any], str]) -> Any:
    """A task start or successful task end as a tuple of plain values; anything else as its
    line, formatted here by `encode_line`."""
    t = type(e)
    if t is sl.TaskStart:
        i = e.task_info
        return (0, e.stage_id, e.stage_attempt, i.task_id, i.index, i.attempt_number,
                i.partition_id, i.launch_time, i.executor_id, i.host, i.locality,
                i.speculative)
    if t is sl.TaskEnd and type(e.reason) is Success:
        i = e.task_info
        return (1, e.stage_id, e.stage_attempt, i.task_id, i.index, i.attempt_number,
                i.partition_id, i.launch_time, i.executor_id, i.host, i.locality,
                i.speculative, e.task_type, i.finish_time, e.metrics or {})
    return encode_line(e)


def unpack(item: tuple) -> Any:
    """The listener event `pack` was given (as far as its JSON line goes)."""
    info = TaskInfo(*item[3:12])
    if item[0] == 0:
        return sl.TaskStart(item[1], item[2], info)
    info.finish_time, info.successful = item[13], True
    return sl.TaskEnd(item[1], item[2], item[12], SUCCESS, info, item[14])


class UiProcess:
    """The driver's end, an async listener on the bus. Starts `python -m ember.ui.ui_process`
    serving the UI on `ui_sock` if given (the caller then closes its copy); with `event_log`,
    `open_log(path)` once the event log's file exists. Raises OSError if the process cannot
    start."""

    def __init__(self, conf: Any, ui_sock: socket.socket | None, event_log: bool,
                 redirect_sock: socket.socket | None = None) -> None:
        from ember.ui.event_log import _dumps
        self._dumps = _dumps
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        fds = tuple(s.fileno() for s in (ui_sock, redirect_sock) if s is not None)
        self._lock = threading.Lock()
        self._event_log = event_log
        self.proc = subprocess.Popen([sys.executable, "-m", "ember.ui.ui_process"],
                                     stdin=subprocess.PIPE, env=env, bufsize=0,
                                     stdout=subprocess.PIPE, pass_fds=fds)
        items = conf.getAll() if hasattr(conf, "getAll") else list(dict(conf).items())
        self._send({"conf": {str(k): str(v) for k, v in items},
                    "ui_fd": fds[0] if fds else None, "event_log": event_log,
                    "redirect_fd": fds[1] if len(fds) > 1 else None})

    def _send(self, value: Any) -> None:
        data = marshal.dumps(value)
        with self._lock:
            if self.proc.stdin.closed:
                return
            try:
                self.proc.stdin.write(_HEADER.pack(len(data)) + data)
            except (OSError, ValueError) as e:      # the process died or was closed
                log.error("The UI process failed (%s); the UI and the event log stop "
                          "here", e)
                self.proc.stdin.close()

    def open_log(self, spec: dict[str, Any]) -> None:
        """Write the event log `EventLog.start` created from now on (with the lines held
        so far)."""
        self._send([(OPEN_LOG, spec)])

    def on_events(self, events: Iterable[Any]) -> None:
        dumps = self._dumps
        self._send([pack(e, dumps) for e in events])

    def sync(self, timeout: float = 10.0) -> bool:
        """Wait until the process has applied and written everything sent before; False if
        it is gone or slower than `timeout`. (After the bus's wait_until_empty: the UI then
        shows every event posted.)"""
        self._send([(SYNC,)])
        fd = self.proc.stdout.fileno()
        ready, _, _ = select.select([fd], [], [], timeout)
        return bool(ready) and os.read(fd, 1) == b"."

    def close(self, timeout: float = 10.0) -> None:
        """End of input; wait for the process to write everything and exit, or - with no
        event log to finish - end it at once (it may still be starting). Idempotent."""
        with self._lock:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        if not self._event_log:
            self.proc.kill()
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _frames(stream: Any) -> Iterable[Any]:
    while True:
        head = stream.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (n,) = _HEADER.unpack(head)
        data = stream.read(n)
        if len(data) < n:
            return
        yield marshal.loads(data)


def _idle_priority() -> None:
    """Make the calling thread take only CPU time nobody else wants (SCHED_IDLE). Why not
    `nice`: a nice process still delays the driver and task processes when they wake up,
    and a job of tiny tasks is a chain of such wake-ups; SCHED_IDLE yields at once. Only
    the thread that applies events gets it: threads serving pages keep normal priority."""
    try:
        os.sched_setscheduler(threading.get_native_id(), os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        pass


def main() -> int:
    from ember.ui.event_log import EventLogWriter, _TaskLines, json_to_event
    frames = _frames(sys.stdin.buffer)
    settings = next(frames, None)
    if settings is None:
        return 0
    conf, ui_fd, logging_on = settings["conf"], settings["ui_fd"], settings["event_log"]
    store = None
    if ui_fd is not None:
        from ember.ui.spark_ui import SparkUI
        from ember.ui.status_store import AppStatusStore
        store = AppStatusStore(conf)
        redirect_fd = settings.get("redirect_fd")
        SparkUI(store, socket.socket(fileno=ui_fd), conf,
                socket.socket(fileno=redirect_fd) if redirect_fd is not None else None).start()
    _idle_priority()
    lines = _TaskLines()
    writer: Any = None
    held: list[str] = []
    synced = 0
    for items in frames:
        text: list[str] = []
        events: list[Any] = []
        for item in items:
            if type(item) is str:
                if logging_on:
                    text.append(item)
                if store is not None and item:
                    try:
                        events.append(json_to_event(json.loads(item)))
                    except (ValueError, KeyError, TypeError) as e:
                        log.error("Cannot apply %.200r to the UI: %s", item, e)
            elif item[0] == SYNC:
                synced += 1
            elif item[0] == OPEN_LOG:
                text, held = held + text, []
                try:
                    writer = EventLogWriter(item[1])
                except OSError as e:
                    log.error("Cannot open the event log %s: %s", item[1].get("path"), e)
                    logging_on = False
            else:
                e = unpack(item)
                events.append(e)
                if logging_on:
                    text.append(lines.encode(e))
        if store is not None:
            store.on_events([e for e in events if e is not None])
        if writer is not None:
            try:
                writer.write("".join(text).encode())
            except OSError as e:    # disk full, say: the UI goes on without the log
                log.error("Cannot write the event log %s: %s; it ends here", writer.path, e)
                writer, logging_on = None, False
        elif logging_on:
            held.extend(text)
        if synced:
            os.write(1, b"." * synced)
            synced = 0
    if writer is not None:
        writer.close()
    return 0


if __name__ == "__main__":
    configure_logging(logging.WARNING)
    os._exit(main())      # the UI's server threads end with the process, at once
