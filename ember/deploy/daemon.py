"""Spark's `sbin/spark-daemon.sh` for Python daemons: start/stop/status with pid and log files.

Why not a shell script: Ember is installed with pip and must run wherever Python does, and
the daemons are Python modules; doing it here also lets start-up wait for a real readiness
line in the log instead of a fixed sleep. The files and messages are Spark's, renamed:

- log `$SPARK_LOG_DIR/ember-$SPARK_IDENT_STRING-<command>-<instance>-<hostname>.out`
  (`EMBER_LOG_DIR` wins over `SPARK_LOG_DIR`; default `<cwd>/logs`), rotated at start to
  `.1`..`.N` (N = `SPARK_LOG_MAX_FILES`, default 5), then appended to;
- pid `$SPARK_PID_DIR/ember-$SPARK_IDENT_STRING-<command>-<instance>.pid` (`EMBER_PID_DIR`
  wins; default `/tmp`); ident defaults to `$USER`;
- start: refuses when the pid file names a live Ember process ("<command> running as process
  <pid>.  Stop it first.", exit 1); prints "starting <command>, logging to <log>"; runs
  `python -m <module> <args>` detached (new session, stdin /dev/null, stdout+stderr to the
  log, niceness `SPARK_NICENESS`); then watches it for a few seconds: if it dies, prints
  "failed to launch: ..." with the last 10 log lines and exits 1. `SPARK_NO_DAEMONIZE` runs
  the daemon in the foreground instead (own stdio, no pid file: Spark's behaviour);
- the daemon is told its log file in `EMBER_DAEMON_LOG_FILE`, so its web UI can serve it
  (Spark's `/logPage/?self&logType=out`): several daemons may share one log dir, so
  "the first .out file there" (Spark's guess) could be another daemon's log;
- stop: "stopping <command>" + SIGTERM, SIGKILL after a timeout, or "no <command> to stop";
- status: 0 running, 1 stale pid file, 2 not running (Spark's exit codes).

A pid is only trusted when that process is still an Ember daemon (its command line names
the module), the way Spark checks for a `java` process: a recycled pid never gets killed.
"""
from __future__ import annotations

import getpass
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from typing import Optional, Sequence

from ember.util.files import unlink_quietly

DEFAULT_MODULE = "ember.cli"
DAEMON_LOG_FILE_ENV = "EMBER_DAEMON_LOG_FILE"
START_WAIT_SECONDS = 3.0
STOP_TIMEOUT_SECONDS = 10.0


# ---------------------------------------------------------------------------------------------
# Logging for daemons (the layout and set-up: ember.util.logs)
# ---------------------------------------------------------------------------------------------

def log_daemon_start(logger: logging.Logger) -> None:
    """Spark's Utils.initDaemon line: which process this is, for matching logs to pids."""
    logger.info("Started daemon with process name: %d@%s", os.getpid(), socket.gethostname())


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def _ident() -> str:
    ident = os.environ.get("SPARK_IDENT_STRING")
    if ident:
        return ident
    try:
        return os.environ.get("USER") or getpass.getuser()
    except Exception:
        return str(os.getuid())


def log_dir() -> str:
    """EMBER_LOG_DIR, else SPARK_LOG_DIR, else ./logs (absolute)."""
    d = os.environ.get("EMBER_LOG_DIR") or os.environ.get("SPARK_LOG_DIR")
    return os.path.abspath(d or os.path.join(os.getcwd(), "logs"))


def pid_dir() -> str:
    """EMBER_PID_DIR, else SPARK_PID_DIR, else /tmp."""
    return os.path.abspath(os.environ.get("EMBER_PID_DIR") or os.environ.get("SPARK_PID_DIR")
                           or "/tmp")


def log_file(command: str, instance: int) -> str:
    return os.path.join(log_dir(), f"ember-{_ident()}-{command}-{instance}-"
                                   f"{socket.gethostname()}.out")


def own_log_file() -> Optional[str]:
    """The file this process's output goes to, for its web UI's own-log page: the path in
    EMBER_DAEMON_LOG_FILE (set by `start_daemon`) when that is a regular file, else - on
    Linux - the target of /proc/self/fd/1 when stdout is a regular file (a daemon started by
    hand with `> file`), else None (a terminal, a pipe, /dev/null...)."""
    path = os.environ.get(DAEMON_LOG_FILE_ENV)
    if path and os.path.isfile(path):
        return os.path.abspath(path)
    try:
        target = os.readlink("/proc/self/fd/1")
    except OSError:
        return None
    # "pipe:[123]", "socket:[..]" are not paths; a deleted file reads "<path> (deleted)"
    if os.path.isabs(target) and os.path.isfile(target):
        return target
    return None


def pid_file(command: str, instance: int) -> str:
    return os.path.join(pid_dir(), f"ember-{_ident()}-{command}-{instance}.pid")


def rotate_log(path: str) -> None:
    """Spark's spark_rotate_log: log -> log.1 -> ... -> log.N (N = SPARK_LOG_MAX_FILES)."""
    raw = os.environ.get("SPARK_LOG_MAX_FILES", "5").strip() or "5"
    try:
        num = int(raw)
        if num < 1:
            raise ValueError
    except ValueError:
        raise ValueError(f"SPARK_LOG_MAX_FILES must be a positive number, but got {raw}") \
            from None
    if not os.path.isfile(path):
        return
    while num > 1:
        prev = num - 1
        if os.path.isfile(f"{path}.{prev}"):
            os.replace(f"{path}.{prev}", f"{path}.{num}")
        num = prev
    os.replace(path, f"{path}.{num}")


def _read_pid(path: str) -> Optional[int]:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def daemon_signature(module: str = DEFAULT_MODULE, argv: Sequence[str] = ()) -> str:
    """What the daemon's command line contains: `-m <module> [<sub-command>]`, e.g.
    `-m ember.cli master`; used to recognise the process behind a pid file."""
    sub = [argv[0]] if argv and module == DEFAULT_MODULE else []
    return " ".join(["-m", module, *sub])


def _is_our_process(pid: int, signature: Optional[str] = None) -> bool:
    """Is `pid` alive and an Ember daemon whose command line contains `signature` (not a
    recycled pid of something else)?"""
    if pid <= 0:
        return False
    try:
        import psutil
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        cmdline = " ".join(p.cmdline())
    except Exception:  # no such process, access denied, psutil missing
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return signature is None   # alive but unverifiable: trust it only without a check
    return (signature or "ember") in cmdline


def _tail(path: str, n: int = 10) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 64 * 1024))
            data = f.read()
    except OSError:
        return []
    return data.decode("utf-8", "replace").splitlines()[-n:]


# ---------------------------------------------------------------------------------------------
# start / stop / status
# ---------------------------------------------------------------------------------------------

def start_daemon(command: str, instance: int, argv: Sequence[str], *,
                 module: str = DEFAULT_MODULE, ready_marker: Optional[str] = None,
                 wait_seconds: float = START_WAIT_SECONDS) -> int:
    """Run `python -m <module> <argv>` as a background daemon (spark-daemon.sh start).

    Returns the exit code for the CLI: 0 started, 1 refused or failed to launch. The child is
    watched for up to `wait_seconds`; when `ready_marker` is given, its appearance in the new
    log output ends the wait early (the daemon said it is up)."""
    pid_path = pid_file(command, instance)
    log_path = log_file(command, instance)
    signature = daemon_signature(module, argv)
    try:
        os.makedirs(pid_dir(), exist_ok=True)
        old = _read_pid(pid_path)
        if old is not None and _is_our_process(old, signature):
            print(f"{command} running as process {old}.  Stop it first.")
            return 1
        os.makedirs(log_dir(), exist_ok=True)
        rotate_log(log_path)
    except (OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(f"starting {command}, logging to {log_path}")
    sys.stdout.flush()
    cmd = [sys.executable, "-P", "-m", module, *argv]
    niceness = os.environ.get("SPARK_NICENESS", "").strip()
    if niceness and niceness != "0":
        cmd = ["nice", "-n", niceness, *cmd]
    env = {k: v for k, v in os.environ.items() if k != DAEMON_LOG_FILE_ENV}
    if "SPARK_NO_DAEMONIZE" in os.environ:
        # Foreground with the caller's stdio and no pid file, like Spark: for supervisors
        # (systemd, containers) that want to own the process and its output.
        try:
            return subprocess.call(cmd, env=env)
        except KeyboardInterrupt:
            return 130
    try:
        with open(log_path, "ab") as log_out, open(os.devnull, "rb") as devnull:
            start_offset = log_out.tell()
            env[DAEMON_LOG_FILE_ENV] = os.path.abspath(log_path)
            proc = subprocess.Popen(cmd, stdin=devnull, stdout=log_out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, env=env)
    except OSError as e:
        print(f"failed to launch: {' '.join(cmd)}\n  {e}")
        return 1
    tmp = f"{pid_path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w", encoding="ascii") as f:
            f.write(f"{proc.pid}\n")
        os.replace(tmp, pid_path)
    except OSError as e:   # without a pid file it could never be stopped: do not leave it
        proc.kill()
        proc.wait()
        print(f"Error: cannot write the pid file {pid_path}: {e.strerror or e}", file=sys.stderr)
        return 1

    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        if ready_marker is not None and _log_has(log_path, start_offset, ready_marker):
            return 0
        time.sleep(0.05)
    if proc.poll() is None:
        return 0
    print(f"failed to launch: {' '.join(cmd)}")
    for line in _tail(log_path, 10):
        print(f"  {line}")
    print(f"full log in {log_path}")
    try:
        if _read_pid(pid_path) == proc.pid:
            os.unlink(pid_path)
    except OSError:
        pass
    return 1


def _log_has(path: str, offset: int, marker: str) -> bool:
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            return marker.encode() in f.read()
    except OSError:
        return False


def stop_daemon(command: str, instance: int, *, signature: Optional[str] = None,
                timeout: Optional[float] = None) -> int:
    """spark-daemon.sh stop: SIGTERM the daemon named by the pid file, SIGKILL it if it is
    still alive after `timeout` seconds (env EMBER_STOP_TIMEOUT, default 10). Always 0, as
    Spark's script; prints "stopping <command>" or "no <command> to stop". `signature`
    (see `daemon_signature`) must appear in the process's command line, else the pid is
    considered stale."""
    pid_path = pid_file(command, instance)
    pid = _read_pid(pid_path)
    if pid is None or not _is_our_process(pid, signature):
        print(f"no {command} to stop")
        if pid is not None:
            unlink_quietly(pid_path)   # stale
        return 0
    print(f"stopping {command}")
    sys.stdout.flush()
    if timeout is None:
        try:
            timeout = float(os.environ.get("EMBER_STOP_TIMEOUT", STOP_TIMEOUT_SECONDS))
        except ValueError:
            timeout = STOP_TIMEOUT_SECONDS
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        unlink_quietly(pid_path)
        return 0
    if not _wait_gone(pid, timeout):
        print(f"{command} did not stop within {timeout:g} s; killing it")
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, 5.0)
    unlink_quietly(pid_path)
    return 0


def decommission_daemon(command: str, instance: int, *, signature: Optional[str] = None,
                        block_until_exit: bool = False) -> int:
    """spark-daemon.sh decommission: SIGPWR to the daemon named by the pid file ("decommissioning
    <command>", or "no <command> to decommission"); always 0, as Spark's script. With
    `block_until_exit`, wait until that process has exited."""
    pid_path = pid_file(command, instance)
    pid = _read_pid(pid_path)
    if pid is None or not _is_our_process(pid, signature):
        print(f"no {command} to decommission")
        return 0
    print(f"decommissioning {command}")
    sys.stdout.flush()
    try:
        os.kill(pid, signal.SIGPWR)
    except ProcessLookupError:
        return 0
    if block_until_exit:
        while not _wait_gone(pid, 3600.0):
            pass
    return 0


def daemon_status(command: str, instance: int, *, signature: Optional[str] = None) -> int:
    """spark-daemon.sh status: 0 running, 1 pid file present but not running, 2 not running."""
    pid_path = pid_file(command, instance)
    if not os.path.exists(pid_path):
        print(f"{command} not running.")
        return 2
    pid = _read_pid(pid_path)
    if pid is not None and _is_our_process(pid, signature):
        print(f"{command} is running.")
        return 0
    print(f"{pid_path} file is present but {command} not running")
    return 1


def _wait_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if not _alive(pid):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # our own child that exited is a zombie until reaped
        import psutil
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:
        return True


__all__ = ["start_daemon", "stop_daemon", "decommission_daemon", "daemon_status", "daemon_signature",
           "log_daemon_start", "log_file", "pid_file", "log_dir",
           "pid_dir", "rotate_log", "own_log_file", "DAEMON_LOG_FILE_ENV"]
