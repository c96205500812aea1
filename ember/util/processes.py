"""Waiting for a child process to exit without polling, and whether a process runs.

Why: `subprocess.Popen.wait(timeout)` naps in growing steps (up to 50 ms) between checks,
so a stop that waits for a helper process that exits in 2 ms can take 10 ms or more. A
pidfd (Linux 5.3+) becomes readable the moment the process exits; where there is none the
plain wait is used.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import time


def wait_exit(proc: subprocess.Popen, timeout: float) -> int | None:
    """proc's exit status once it has exited (it is reaped), or None after `timeout`
    seconds with it still running."""
    if proc.returncode is not None:
        return proc.returncode
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):       # no pidfd here, or the child is already reaped
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
    try:
        ready, _, _ = select.select([fd], [], [], timeout)
    finally:
        os.close(fd)
    return proc.wait() if ready else proc.poll()


def pid_alive(pid: int) -> bool:
    """Whether pid is running (a zombie, exited but not yet reaped, is not)."""
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][:1] != "Z"
    except OSError:
        return True


def wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait until none of `pids` runs (children or not: a pidfd becomes readable when its
    process exits); those still running after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    fds: dict[int, int] = {}
    try:
        for pid in pids:
            try:
                fds[os.pidfd_open(pid)] = pid
            except ProcessLookupError:
                pass                                # already gone
            except (AttributeError, OSError):       # no pidfd here: look every 10 ms
                while pid_alive(pid) and time.monotonic() < deadline:
                    time.sleep(0.01)
        while fds:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            ready, _, _ = select.select(list(fds), [], [], left)
            for fd in ready:
                os.close(fd)
                del fds[fd]
        return [pid for pid in fds.values() if pid_alive(pid)]
    finally:
        for fd in fds:
            os.close(fd)


def child_exit_wakeups() -> tuple[int, int]:
    """A non-blocking pipe that SIGCHLD writes to (signal.set_wakeup_fd), so a fork
    server's loop sleeps in select() until a request or a child's exit, instead of polling
    for exits. A forked child closes both ends and calls signal.set_wakeup_fd(-1)."""
    wake = os.pipe()
    for fd in wake:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake[1])
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    return wake


def wait_request(ctrl: socket.socket, wake: tuple[int, int]) -> bool:
    """Sleep until `ctrl` is readable or a child exited (the wake-up pipe is drained);
    True when `ctrl` is readable."""
    ready, _, _ = select.select([ctrl, wake[0]], [], [])
    if wake[0] in ready:
        try:
            while os.read(wake[0], 512):
                pass
        except BlockingIOError:
            pass
    return ctrl in ready
