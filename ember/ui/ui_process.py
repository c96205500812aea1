"""The driver's UI process: the application UI (status store, pages, /api/v1, metrics) and
the event log's writer, in a process of their own beside the driver.

Why a process: a job of tiny tasks keeps the driver's one GIL busy, so whatever a listener
computes is taken from the scheduler. Applying a task's two events to the status store costs
about 5 us and formatting its two JSON lines about 7 us; packing the same events into tuples
of plain values for `marshal` costs under 1 us. So the driver's part is `UiProcess`, an
asynchronous bus listener that packs each batch and writes it to the UI process's stdin; there
(ember.ui.ui_process_main), on another core, the very same AppStatusStore, SparkUI and `_TaskLines` code runs. A side
effect that matters as much: rendering a big stage page no longer holds the scheduler's GIL.
The thread that applies events runs at idle priority, so it takes the cores' idle time
rather than time from the driver or its tasks; without an event log the process imports the
UI only once it is first needed (ui_process_main says when), so a short application's start
does not share its cores with it.

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
from ember.ui.ui_frames import HEADER, OPEN_LOG, SYNC
from ember.util.processes import wait_exit

log = logging.getLogger("ember.ui.UiProcess")


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
    """The driver's end, an async listener on the bus. Starts `python -m ember.ui.ui_process_main`
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
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "ember.ui.ui_process_main"],
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
                self.proc.stdin.write(HEADER.pack(len(data)) + data)
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
        if wait_exit(self.proc, timeout) is None:
            self.proc.kill()
            self.proc.wait()


