"""Client side of the fork server: start it early, ask it for task processes.

Kept apart from the pool so the driver can start the fork server at the very beginning of
SparkContext() and let it import Ember while the driver imports the rest in parallel.
"""
from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from ember.executor.wire import FrameBuffer
from ember.util.processes import wait_exit

log = logging.getLogger(__name__)

_EMBER_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def task_process_env(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """Environment of task processes: ours, the app's executor env, a fixed hash seed."""
    env = dict(os.environ)
    env.update(extra_env or {})
    env.setdefault("PYTHONHASHSEED", "0")
    paths = [_EMBER_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


class ForkServerClient:
    """Owns the fork server process: asks it for task processes, learns their exit codes.
    A fork server that leaves a request unanswered for `answer_timeout` s (stopped, or
    hung: a fork takes milliseconds) is killed, which ends its pending requests (their
    slots see their processes end) and has the next request start a new one, so the tasks
    waiting for such a slot's process do not wait for ever."""

    def __init__(self, env: dict[str, str], answer_timeout: float = 30.0) -> None:
        self.env = env
        self.answer_timeout = answer_timeout
        self.started = False
        self._proc: subprocess.Popen | None = None
        self._ctrl: socket.socket | None = None
        self._pending: list[tuple[socket.socket, Any, float]] = []   # (socket, slot, asked at)
        self._exit_codes: dict[int, int] = {}
        self._forgotten: set[int] = set()     # processes whose exit code nobody will ask
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def start(self) -> None:
        self.started = True
        parent, child = socket.socketpair()
        self._proc = subprocess.Popen(
            # -P (as for every process Ember starts from the user's working directory): that
            # directory does not go first on sys.path, where an "ember" directory in it would
            # shadow the driver's Ember (PYTHONPATH names that one)
            [sys.executable, "-P", "-m", "ember.executor.forkserver", str(child.fileno())],
            pass_fds=[child.fileno()], env=self.env, stdin=subprocess.DEVNULL, close_fds=True)
        child.close()
        self._ctrl = parent
        self._thread = threading.Thread(target=self._read_loop, args=(parent,),
                                        name="fork-server-reader", daemon=True)
        self._thread.start()

    def fork(self, child: socket.socket, slot: Any) -> None:
        """Ask for a process on `child`. A fork server found gone (killed, or dead at start)
        is started again first; a request it cannot take closes `child`, so the slot sees
        its process end at once (and the pool's bound on quick deaths applies) instead of
        waiting for one that never comes."""
        with self._cond:
            if not self._stopped and self._proc is not None and self._proc.poll() is not None:
                log.warning("fork server exited (code %s); starting it again",
                            self._proc.returncode)
                self._abandon_pending()
                self._close_ctrl()
                self.start()
            request = (child, slot, time.monotonic())
            self._pending.append(request)
            try:
                socket.send_fds(self._ctrl, [b"f"], [child.fileno()])
            except OSError:
                log.error("fork server is gone; cannot start a task process")
                self._pending.remove(request)
                child.close()

    def _abandon_pending(self) -> None:
        """Under the lock: requests the gone server will never answer end their sockets."""
        for child, _slot, _asked in self._pending:
            child.close()
        self._pending.clear()

    def _read_loop(self, ctrl: socket.socket) -> None:
        buf = FrameBuffer()
        check_every = min(1.0, self.answer_timeout / 2)
        while True:
            try:
                if not select.select([ctrl], [], [], check_every)[0]:
                    self._kill_if_silent(ctrl)
                    continue
                data = ctrl.recv(65536)
            except (OSError, ValueError):      # ValueError: closed meanwhile (a restart)
                data = b""
            if not data:
                with self._cond:
                    if ctrl is self._ctrl and not self._stopped:
                        log.error("fork server exited (code %s)",
                                  self._proc.poll() if self._proc else None)
                        self._abandon_pending()
                return
            for msg in buf.feed(data):
                with self._cond:
                    if msg[0] == "forked":
                        child, slot, _asked = self._pending.pop(0)
                        child.close()
                        slot.pid = msg[1]
                    elif msg[0] == "exit":
                        if msg[1] in self._forgotten:
                            self._forgotten.discard(msg[1])
                        else:
                            self._exit_codes[msg[1]] = msg[2]
                    self._cond.notify_all()

    def _kill_if_silent(self, ctrl: socket.socket) -> None:
        with self._cond:
            if (ctrl is self._ctrl and not self._stopped and self._pending and
                    time.monotonic() - self._pending[0][2] > self.answer_timeout):
                log.warning("fork server did not answer in %.0f s: killed (the next task "
                            "process starts a new one)", self.answer_timeout)
                self._proc.kill()

    def forget(self, pid: int) -> None:
        """Nobody will ask for this process's exit code (it was told to stop)."""
        with self._cond:
            if self._exit_codes.pop(pid, None) is None:
                self._forgotten.add(pid)

    def exit_code(self, pid: int, timeout: float = 0.5) -> int | None:
        with self._cond:
            self._cond.wait_for(lambda: pid in self._exit_codes, timeout)
            return self._exit_codes.pop(pid, None)

    def _close_ctrl(self) -> None:
        """Shut down first: that also ends a recv its reader thread may be blocked in."""
        try:
            self._ctrl.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._ctrl.close()

    def stop(self) -> None:
        self._stopped = True
        if self._ctrl is not None:
            self._close_ctrl()
        if self._proc is not None and wait_exit(self._proc, 2) is None:
            self._proc.kill()
            self._proc.wait()
