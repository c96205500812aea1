"""The worker's executor zygote: a process that has already imported the executor's modules
and forks an executor when the worker asks for one.

Why: a spawned executor spends most of its start (an interpreter plus ~0.1 s of CPU for
the executor's imports, far more when the cores are busy) before it can even register
with its driver; a fork of a warm process costs a few milliseconds. The zygote is started
by the worker (`ExecutorZygote.start`), is single-threaded (so forking it is safe) and
never runs application code itself.

A forked executor gets what a spawned one (`python -m ember.executor.backend ...`) gets: the
environment the runner built (the app's spark.executorEnv.* included), its work directory
as cwd and first sys.path entry, stdin from /dev/null and stdout/stderr appended to the work
directory's files (the runner's open files, passed over the socket), a session and process
group of its own, the app's PYTHONPATH in front of the interpreter's own paths, and the
module run as __main__. What an interpreter fixes at its start cannot change after a fork,
so the worker forks only when every interpreter variable (PYTHON* but PYTHONPATH, LANG,
LC_*) equals the zygote's, and the zygote forks only when every module it has imported
would be found at the same file on the executor's sys.path (an app's PYTHONPATH that shadows
one gets a spawned executor); otherwise the runner spawns as before. A zygote that dies, or
stops answering (then it is killed), is started again when the next executor is asked for,
MAX_RESTARTS times; after that every executor is spawned.

The zygote reports each child's exit status as it happens (waitid WNOWAIT, woken by
SIGCHLD) and reaps the child only when the runner says so, after a kill in progress has
finished: until then the zombie holds the process-group id, as a runner's own child does.
If the zygote dies, the executors it forked run on; their runners then learn of their exit
from a pidfd taken at the fork, without a status.
"""
from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import threading
from typing import Any, Mapping, Optional, Sequence

from ember.util.processes import child_exit_wakeups, wait_exit, wait_request

log = logging.getLogger("ember.deploy.worker.ExecutorZygote")

EXECUTOR_MAIN = "ember.executor.backend"
_MAX_MSG = 1 << 20
MAX_RESTARTS = 3


def _interpreter_env(env: Mapping[str, str]) -> dict[str, str]:
    """The variables a Python interpreter reads once, at its start."""
    return {k: v for k, v in env.items()
            if (k.startswith("PYTHON") and k != "PYTHONPATH") or k == "LANG"
            or k.startswith("LC_")}


class ZygoteChild:
    """An executor the zygote forked, as the runner sees it (the part of subprocess.Popen
    it uses): `pid`, `wait_exited()` (returns once it has exited, still unreaped), `wait()`
    (reaps it; its exit code, negative for a signal as Popen's, None if unknown)."""

    def __init__(self, zygote: "ExecutorZygote", pid: int) -> None:
        self.pid = pid
        self.returncode: Optional[int] = None
        self._zygote = zygote
        self._exited = threading.Event()
        self._known = False          # the zygote reported the status
        self._abandoned = False      # forked after its runner gave up waiting: killed
        self._pidfd: Optional[int] = None
        try:
            self._pidfd = os.pidfd_open(pid)
        except OSError:              # already gone: its exit report follows
            pass

    def _report(self, code: Optional[int]) -> None:
        self.returncode, self._known = code, code is not None
        self._exited.set()
        if self._abandoned:
            self.wait()

    def _orphaned(self) -> None:
        """The zygote died: wait for the process itself (off the reader thread)."""
        if self._exited.is_set():
            return
        if self._pidfd is not None:
            try:
                select.select([self._pidfd], [], [])
            except (OSError, ValueError):
                pass
        self._exited.set()

    def wait_exited(self) -> None:
        self._exited.wait()

    def wait(self) -> Optional[int]:
        self._exited.wait()
        if self._known:
            self._zygote.reap(self.pid)
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        return self.returncode


class ExecutorZygote:
    """The worker's end: `start()`, then `spawn(...)` per executor (None: spawn it yourself),
    `stop()` with the worker."""

    def __init__(self, env: Mapping[str, str], main: str = EXECUTOR_MAIN,
                 answer_timeout: float = 30.0) -> None:
        self.main = main
        self.answer_timeout = answer_timeout
        self.env = dict(env)
        # what apps send by default (the driver's or "0"), so that their executors fit
        self.env.setdefault("PYTHONHASHSEED", "0")
        self._interp = _interpreter_env(self.env)
        self._proc: Optional[subprocess.Popen] = None
        self._sock: Optional[socket.socket] = None
        self._lock = threading.Lock()          # one request at a time
        self._replies: dict[int, Any] = {}
        self._cond = threading.Condition()
        self._children: dict[int, ZygoteChild] = {}
        self._abandoned: set[int] = set()      # requests nobody waits for any more
        self._next = 0
        self.alive = False
        self._stopped = False
        self.restarts = 0

    def start(self) -> "ExecutorZygote":
        if not hasattr(os, "pidfd_open") or not hasattr(os, "waitid"):
            return self              # never used: every executor is spawned
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            # (the main module is not on the command line when it is the executor's: ps
            # and the worker's tests tell executors by theirs)
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "ember.deploy.worker.executor_zygote",
                 str(theirs.fileno())] + ([self.main] if self.main != EXECUTOR_MAIN else []),
                pass_fds=[theirs.fileno()], env=self.env, stdin=subprocess.DEVNULL,
                close_fds=True)
        except OSError as e:
            log.warning("Cannot start the executor zygote (%s); executors are spawned", e)
            ours.close()
            return self
        finally:
            theirs.close()
        self._sock = ours
        self.alive = True
        threading.Thread(target=self._read_loop, args=(ours, self._proc),
                         name="executor-zygote-reader", daemon=True).start()
        return self

    def _restart(self) -> bool:
        """Under the request lock: a zygote that died is replaced, MAX_RESTARTS times in
        the worker's life (one that cannot live costs a few tries, not one per executor).
        The request that follows waits for it to import, as a spawn would."""
        if self.alive:
            return True
        if self._stopped or self._proc is None or self.restarts >= MAX_RESTARTS:
            return False
        self.restarts += 1
        log.warning("Restarting the executor zygote (%d of %d restarts)", self.restarts,
                    MAX_RESTARTS)
        if self._proc.poll() is None:       # its socket closed but it lingers
            self._proc.kill()
        self._proc.wait()
        self._sock.close()
        self.start()
        return self.alive

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc is not None else None

    def fits(self, cmd: Sequence[str], env: Mapping[str, str]) -> bool:
        return (list(cmd[:3]) == [sys.executable, "-m", self.main]
                and _interpreter_env(env) == self._interp)

    def spawn(self, cmd: Sequence[str], env: Mapping[str, str], cwd: str, stdout: int,
              stderr: int) -> Optional[ZygoteChild]:
        """Fork `cmd` (python -m <main> args) there; None when the zygote cannot (gone,
        silent for `answer_timeout` s, or the command or its paths do not fit: see the
        module doc). A zygote that stays silent (stopped, or hung) is killed, so the next
        executor starts a new one instead of waiting out the timeout again."""
        if not self.fits(cmd, env):
            return None
        with self._lock:
            if not self._restart():
                return None
            self._next += 1
            rid = self._next
            try:
                socket.send_fds(self._sock, [pickle.dumps(
                    ("spawn", rid, list(cmd[3:]), dict(env), os.path.abspath(cwd)))],
                    [stdout, stderr])
            except OSError:
                return None
            with self._cond:
                if not self._cond.wait_for(lambda: rid in self._replies or not self.alive,
                                           self.answer_timeout):
                    log.warning("The executor zygote did not answer in %.0f s: killed (the "
                                "next executor starts a new one)", self.answer_timeout)
                    self._abandoned.add(rid)    # what it forks after all is killed at once
                    self._proc.kill()
                    return None
                reply = self._replies.pop(rid, None)
        if reply is None:
            return None
        if reply[0] != "spawned":
            log.info("Executor spawned, not forked: %s", reply[2])
            return None
        return reply[2]

    def reap(self, pid: int) -> None:
        try:
            self._sock.send(pickle.dumps(("reap", pid)))
        except OSError:
            pass

    def _read_loop(self, sock: socket.socket, proc: subprocess.Popen) -> None:
        while True:
            try:
                data = sock.recv(_MAX_MSG)
            except OSError:
                data = b""
            if not data:
                break
            msg = pickle.loads(data)
            with self._cond:
                if msg[0] == "spawned":
                    child = self._children[msg[2]] = ZygoteChild(self, msg[2])
                    if msg[1] in self._abandoned:       # its runner spawned one instead
                        self._abandoned.discard(msg[1])
                        child._abandoned = True
                        try:
                            os.killpg(msg[2], signal.SIGKILL)
                        except (ProcessLookupError, PermissionError):
                            pass
                    else:
                        self._replies[msg[1]] = ("spawned", msg[1], child)
                elif msg[0] == "exited":
                    child = self._children.pop(msg[1], None)
                    if child is not None:
                        child._report(msg[2])
                elif msg[1] in self._abandoned:         # ("refused", rid, reason)
                    self._abandoned.discard(msg[1])
                else:
                    self._replies[msg[1]] = msg
                self._cond.notify_all()
        with self._cond:
            was_alive, self.alive = self.alive, False
            orphans = list(self._children.values())
            self._children.clear()
            self._cond.notify_all()
        if was_alive:
            log.warning("The executor zygote exited (code %s)", proc.poll())
        for child in orphans:
            threading.Thread(target=child._orphaned, daemon=True,
                             name=f"executor {child.pid} watcher").start()

    def stop(self) -> None:
        """End the zygote (the executors it forked are not touched)."""
        self._stopped = True
        self.alive = False
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self._sock.close()
        if self._proc is not None:
            if wait_exit(self._proc, 5) is None:
                self._proc.kill()
                self._proc.wait()


# ------------------------------------------------------------------- the zygote process


def _child_path(pythonpath: str, cwd: str, base: list[str]) -> list[str]:
    """sys.path of `python -m` started in `cwd` with PYTHONPATH=`pythonpath`: the directory,
    the PYTHONPATH entries (made absolute, duplicates dropped, as site.py does), then the
    interpreter's own entries."""
    entries = [cwd] + [os.path.abspath(os.path.join(cwd, p))
                       for p in pythonpath.split(os.pathsep) if p] + base
    return list(dict.fromkeys(entries))


def _shadowed(path: list[str]) -> Optional[str]:
    """The first module this process imported that `path` would find elsewhere, if any."""
    from importlib.machinery import PathFinder
    for name, module in list(sys.modules.items()):
        origin = getattr(getattr(module, "__spec__", None), "origin", None)
        if "." in name or name == "__main__" or not origin or not os.path.isabs(origin):
            continue
        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.origin != origin:
            return name
    return None


def _set_cmdline(argv: list[str]) -> None:
    """Make the process's command line (/proc/<pid>/cmdline: what ps and psutil show) read
    `argv`, as a spawned executor's does, the way setproctitle(3) does it: by rewriting the
    memory the kernel reads it from, the argument strings and the environment strings after
    them, which nothing uses once the environment has been replaced (os.environ's putenv
    copies). What does not fit is cut."""
    import ctypes
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rsplit(b") ", 1)[1].split()
    arg_start, arg_end, env_start, env_end = (int(fields[i]) for i in (45, 46, 47, 48))
    room = (env_end if env_start == arg_end else arg_end) - arg_start
    data = b"\0".join(a.encode() for a in argv) + b"\0"
    if len(data) > arg_end - arg_start:
        # past the argument strings the kernel shows one string, up to its first NUL
        data = b" ".join(a.encode() for a in argv)[:room - 1] + b"\0"
    ctypes.memset(arg_start, 0, room)
    ctypes.memmove(arg_start, data, len(data))


def _run_child(main: str, args: list[str], env: dict[str, str], cwd: str, path: list[str],
               fds: list[int]) -> None:
    """In the forked child: become the executor `python -m main args` would have been."""
    import atexit
    import runpy
    code: Any = 1
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        os.setsid()
        os.chdir(cwd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[1], 2)
        for fd in (null, *fds):
            if fd > 2:
                os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        try:
            _set_cmdline([sys.executable, "-m", main, *args])
        except (OSError, ValueError, IndexError):
            pass                    # ps shows the zygote's command line
        sys.path[:] = path
        sys.argv = [main, *args]
        runpy.run_module(main, run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as e:
        code = e.code
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
    finally:
        # what the interpreter does on its way out, then leave without the zygote's state
        if code is None:
            code = 0
        elif not isinstance(code, int):
            print(code, file=sys.stderr)
            code = 1
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code & 0xFF)


def serve(ctrl: socket.socket, main: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    wake = child_exit_wakeups()
    own = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    base = [p for p in sys.path[1:] if p not in own]
    checked: set[tuple[str, ...]] = set()
    children: dict[int, bool] = {}             # pid -> exit reported
    while True:
        for pid, reported in list(children.items()):
            if reported:
                continue
            try:
                info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                del children[pid]
                continue
            if info is None:
                continue
            code = info.si_status if info.si_code == os.CLD_EXITED else -info.si_status
            children[pid] = True
            try:
                ctrl.send(pickle.dumps(("exited", pid, code)))
            except OSError:
                return
        if not wait_request(ctrl, wake):
            continue
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctrl, _MAX_MSG, 2)
        except OSError:
            return
        if not data:
            return
        msg = pickle.loads(data)
        if msg[0] == "reap":
            if children.pop(msg[1], None) is not None:
                os.waitpid(msg[1], 0)
            continue
        _, rid, args, env, cwd = msg
        path = _child_path(env.get("PYTHONPATH", ""), cwd, base)
        reason = None
        if len(fds) != 2:
            reason = "no log files were passed"
        elif tuple(path) not in checked:
            shadowed = _shadowed(path)
            if shadowed is not None:
                reason = f"the executor's sys.path finds another {shadowed!r}"
            else:
                checked.add(tuple(path))
        if reason is None:
            try:
                pid = os.fork()
            except OSError as e:
                reason = f"fork failed: {e}"
            else:
                if pid == 0:
                    ctrl.close()
                    signal.set_wakeup_fd(-1)
                    for fd in wake:
                        os.close(fd)
                    _run_child(main, args, env, cwd, path, fds)
                children[pid] = False
        for fd in fds:
            os.close(fd)
        reply = ("spawned", rid, pid) if reason is None else ("refused", rid, reason)
        try:
            ctrl.send(pickle.dumps(reply))
        except OSError:
            return


def main() -> None:
    ctrl = socket.socket(fileno=int(sys.argv[1]))
    main_module = sys.argv[2] if len(sys.argv) > 2 else EXECUTOR_MAIN
    import importlib
    importlib.import_module(main_module)        # the executor's modules, once for all
    # ... but not the main module itself: `python -m` runs it as __main__ only
    del sys.modules[main_module]
    package, _, name = main_module.rpartition(".")
    if package and hasattr(sys.modules[package], name):
        delattr(sys.modules[package], name)
    try:
        serve(ctrl, main_module)
    finally:
        os._exit(0)


if __name__ == "__main__":
    main()
