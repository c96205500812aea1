"""The event log's writer process: task events become JSON lines off the driver's GIL.

Why a process: a job of tiny tasks keeps the driver's one GIL busy, so whatever the listener
thread computes is taken from the scheduler. Formatting the two JSON lines of a task cost
about 7 us of it (0.07 s of CPU per 10,000 tasks, ~5% of such a job); packing the same
events into tuples of plain values for `marshal` costs under 1 us. So the listener thread
only packs (`pack`), and this process - on another core - formats with the very same
`_TaskLines` code and appends to the log. Other events (a few per stage) are formatted in the
driver and travel as ready lines, so every line is what the in-process writer would write.

Frames on the child's stdin: a 4-byte little-endian length, then `marshal.dumps(list)` whose
items are either a line (str) or a packed task event (tuple). The child flushes after each
frame (the bus sends one every 50 ms at most), so a driver killed outright loses at most the
frame in flight; end of input (the driver closed the pipe, or died) ends the child.
"""
from __future__ import annotations

import marshal
import os
import struct
import subprocess
import sys
from typing import Any, Callable, Iterable

from ember.scheduler import listener as L
from ember.scheduler.task import SUCCESS, Success, TaskInfo

_HEADER = struct.Struct("<I")


def pack(e: Any, encode_line: Callable[[Any], str]) -> Any:
    """A task start or successful task end as a tuple of plain values; anything else as its
    line, formatted here by `encode_line`."""
    t = type(e)
    if t is L.TaskStart:
        i = e.task_info
        return (0, e.stage_id, e.stage_attempt, i.task_id, i.index, i.attempt_number,
                i.partition_id, i.launch_time, i.executor_id, i.host, i.locality,
                i.speculative)
    if t is L.TaskEnd and type(e.reason) is Success:
        i = e.task_info
        return (1, e.stage_id, e.stage_attempt, i.task_id, i.index, i.attempt_number,
                i.partition_id, i.launch_time, i.executor_id, i.host, i.locality,
                i.speculative, e.task_type, i.finish_time, e.metrics or {})
    return encode_line(e)


def unpack(item: tuple) -> Any:
    """The listener event `pack` was given (as far as its JSON line goes)."""
    info = TaskInfo(*item[3:12])
    if item[0] == 0:
        return L.TaskStart(item[1], item[2], info)
    info.finish_time, info.successful = item[13], True
    return L.TaskEnd(item[1], item[2], item[12], SUCCESS, info, item[14])


class WriterProcess:
    """The driver's end: starts `python -m ember.ui.event_log_writer <file>` (which appends
    to `<file>`) and sends it frames. Raises OSError if the process cannot start."""

    def __init__(self, path: str) -> None:
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.proc = subprocess.Popen([sys.executable, "-m", "ember.ui.event_log_writer", path],
                                     stdin=subprocess.PIPE, env=env, bufsize=0,
                                     stdout=subprocess.DEVNULL)

    def send(self, items: list) -> None:
        data = marshal.dumps(items)
        self.proc.stdin.write(_HEADER.pack(len(data)) + data)

    def close(self, timeout: float = 10.0) -> None:
        """End of input; wait for the child to write everything and exit."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _frames(stream: Any) -> Iterable[list]:
    while True:
        head = stream.read(_HEADER.size)
        if len(head) < _HEADER.size:
            return
        (n,) = _HEADER.unpack(head)
        data = stream.read(n)
        if len(data) < n:
            return
        yield marshal.loads(data)


def main(argv: list[str]) -> int:
    from ember.ui.event_log import _TaskLines
    lines = _TaskLines()
    with open(argv[0], "ab", buffering=1 << 16) as f:
        for items in _frames(sys.stdin.buffer):
            f.write("".join([item if type(item) is str else lines.encode(unpack(item))
                             for item in items]).encode())
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
