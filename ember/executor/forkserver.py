"""Fork server: one warm, single-threaded process that forks task processes on demand.

Spawning a fresh interpreter per task process costs an interpreter start plus Ember's
imports (hundreds of ms on a small machine); forking from a process that has already
imported them costs a few ms. The server never starts threads, so fork is safe, and it
reaps its children and reports their exit codes to the pool as they exit (SIGCHLD wakes it).
"""
from __future__ import annotations

import os
import signal
import socket
import sys

# Preloaded so forked task processes start warm.
import cloudpickle  # noqa: F401

import ember.rdd  # noqa: F401
import ember.shuffle.external  # noqa: F401
import ember.shuffle.reader  # noqa: F401
import ember.shuffle.writer  # noqa: F401
from ember.executor import task_process
from ember.executor.batch_scheduling import apply_task_policy
from ember.executor.wire import send_msg
from ember.util.processes import child_exit_wakeups, wait_request


def _child(conn: socket.socket, ctrl: socket.socket, wake: tuple[int, int]) -> None:
    ctrl.close()
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in wake:
        os.close(fd)
    task_process.run_in_process(conn)


def serve(ctrl: socket.socket) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a child inherits this until task_process installs its handler: the pool may signal a
    # process the moment it hears its pid (a kill, a hand-back), and SIGUSR1's default
    # would end it as a crash (its task lost, counted a failure). Ignored, nothing is lost:
    # the signal only says "read the kill file", which the process does before each task
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    # a child's exit writes to this pipe (SIGCHLD's wakeup fd), so the loop below sleeps
    # until there is a request or a child to reap, and reports an exit at once
    wake = child_exit_wakeups()
    while True:
        # reap finished children and tell the pool how they ended
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            try:
                send_msg(ctrl, ("exit", pid, os.waitstatus_to_exitcode(status)))
            except OSError:
                return
        if not wait_request(ctrl, wake):
            continue
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ctrl, 16, 1)
        except OSError:
            return
        if not msg:
            return
        if not fds:
            continue
        conn = socket.socket(fileno=fds[0])
        pid = os.fork()
        if pid == 0:
            try:
                _child(conn, ctrl, wake)
            finally:
                os._exit(0)
        conn.close()
        try:
            send_msg(ctrl, ("forked", pid))
        except OSError:
            return


def main() -> None:
    apply_task_policy()
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    ctrl.setblocking(True)
    try:
        serve(ctrl)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
