"""Framing between a task-process pool and its processes: 4-byte big-endian length + pickle.

Both ends belong to the same user on the same host (the pool spawned the process over a
socketpair), so envelopes are pickled; bytes arriving from the network never come here
without having been authenticated by the RPC layer first.
"""
from __future__ import annotations

import pickle
import select
import socket
import struct
from collections import deque
from typing import Any, BinaryIO

_LEN = struct.Struct(">I")


def send_msg(sock, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=5)
    sock.sendall(_LEN.pack(len(data)) + data if len(data) < 65536 else _LEN.pack(len(data)))
    if len(data) >= 65536:
        sock.sendall(data)


def send_msgs(sock, objs: list) -> None:
    """Several messages in one write: one system call, one wake-up of the reader."""
    frames = []
    for obj in objs:
        data = pickle.dumps(obj, protocol=5)
        frames.append(_LEN.pack(len(data)))
        frames.append(data)
    sock.sendall(b"".join(frames))


def read_msg(f: BinaryIO) -> Any:
    """Read one message from a buffered reader; EOFError when the peer is gone."""
    head = f.read(4)
    if len(head) < 4:
        raise EOFError("task process channel closed")
    (n,) = _LEN.unpack(head)
    data = f.read(n)
    if len(data) < n:
        raise EOFError("task process channel closed mid-message")
    return pickle.loads(data)


class FrameBuffer:
    """Incremental decoder for a non-blocking reader: feed bytes, get whole messages."""

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | memoryview) -> list[Any]:
        buf = self._buf
        if not buf:      # the common case: whole frames only, decoded straight from `data`
            view = memoryview(data)
            out, pos = _decode_frames(view)
            if pos < len(view):
                buf += view[pos:]
            return out
        buf += data
        with memoryview(buf) as view:
            out, pos = _decode_frames(view)
        if pos:
            del buf[:pos]
        return out


def _decode_frames(view: memoryview) -> tuple[list[Any], int]:
    """The whole frames at the start of `view`, and where the first incomplete one starts."""
    out = []
    pos, size = 0, len(view)
    while size - pos >= 4:
        (n,) = _LEN.unpack_from(view, pos)
        if size - pos - 4 < n:
            break
        out.append(pickle.loads(view[pos + 4:pos + 4 + n]))
        pos += 4 + n
    return out, pos


class Inbox:
    """The blocking reader of a task process, which can also ask, without blocking, whether
    another message has already arrived (to decide whether to report a result now).

    It waits in poll(POLLIN), not in a blocking recv: a recv sleeps on the socket's wait
    queue with no filter, so every time the pool reads this process's results (freeing its
    send buffer) the kernel's write-space wake-up would wake the idle process for nothing,
    an extra wake-up (and on a VM an interrupt to a halted vCPU) per reported batch."""

    __slots__ = ("sock", "_frames", "ready", "_eof", "_readable")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._frames = FrameBuffer()
        self.ready: deque = deque()      # whole messages received, not yet read
        self._eof = False
        self._readable = select.poll()
        self._readable.register(sock, select.POLLIN)

    def read(self) -> Any:
        """The next message, waiting for it; EOFError when the peer is gone."""
        while not self.ready:
            self._readable.poll()
            self._fill(0)
        return self.ready.popleft()

    def wait_readable(self) -> None:
        """Until a message is ready or bytes have arrived (then see take)."""
        if not self.ready:
            self._readable.poll()

    def take(self) -> Any:
        """For a running task, inside kills_deferred with what it does with the message:
        the next whole message, reading what has arrived first; None if there is none yet.
        What is read off the socket is framed and kept in the same step a kill does not
        cut (read and poll, used between tasks, are not guarded)."""
        if not self.ready:
            try:
                self._fill(socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                return None
        return self.ready.popleft() if self.ready else None

    def poll(self) -> bool:
        """Take in what has arrived; True if a whole message is ready to read."""
        if not self.ready and not self._eof:
            try:
                self._fill(socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError, EOFError):
                pass
        return bool(self.ready)

    def _fill(self, flags: int) -> None:
        if self._eof:
            raise EOFError("task process channel closed")
        data = self.sock.recv(1 << 16, flags)
        if not data:
            self._eof = True
            raise EOFError("task process channel closed")
        self.ready.extend(self._frames.feed(data))
