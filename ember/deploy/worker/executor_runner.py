"""ExecutorRunner: starts one executor process for the worker and watches it (Spark §4.3).

Why a thread per runner (not the RpcEnv's executor pool): a runner waits for its process for
the executor's whole life, and the env's pool is small and shared; a long wait there would
starve every other piece of blocking work. The runner thread never touches worker state: it
reports each state change through ``report`` (the worker hops it onto its loop with
``RpcEnv.call_soon``), so the Worker endpoint stays the one writer of its state.

The command is Ember's Python version of Spark's: ``[sys.executable, "-m", mainClass, *args]``
with Spark's whole-argument placeholders substituted; stdout and stderr go straight to
``<execDir>/stdout`` and ``<execDir>/stderr`` (stderr opens with Spark's
``Spark Executor Command: ...`` header), so no pump threads are needed and the output survives
the worker. The process runs in its own session: a Ctrl-C meant for a foreground worker does
not hit its executors, and the worker can kill the executor's whole process group.

Killing (KillExecutor, ApplicationFinished, worker stop, interpreter exit) takes down the whole
process tree - the executor and every descendant psutil finds, plus anything left in its
process group - with SIGTERM, then SIGKILL after a grace period (Spark's 10 s
EXECUTOR_TERMINATE_TIMEOUT_MS; ``spark.ember.worker.executorTerminateTimeout`` in tests). On
Linux the runner waits for the executor with ``waitid(WNOWAIT)`` and reaps it only after the
kill is complete, so the process-group id cannot be reused by an unrelated process while it is
being signalled.
"""
from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
import weakref
from typing import Any, Callable, Mapping, Optional, Sequence

import psutil

from ember.deploy.messages import (DEFAULT_RESOURCE_PROFILE_ID, ApplicationDescription,
                                   Command, ExecutorDescription, ExecutorRunnerSummary,
                                   ExecutorState, ExecutorStateChanged, ResourceInformation)
from ember.deploy.resources import write_resources_file
from ember.deploy.worker.executor_zygote import ExecutorZygote, ZygoteChild
from ember.deploy.worker.memory_watchdog import (MemoryWatchdog, exceeded_message,
                                                  memory_limit_mb)

log = logging.getLogger("ember.deploy.worker.ExecutorRunner")

__all__ = ["ExecutorRunner", "substitute_variables", "build_command", "command_header",
           "build_environment", "keep_host_env", "HOST_ENV", "terminate_process_tree",
           "kill_all_runners"]

HEADER_RULE = "=" * 40
_MAIN_CLASS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
_SECOND_WAIT = 10.0   # Spark waits this long again after destroyForcibly


def substitute_variables(arguments: Sequence[str], *, worker_url: str, exec_id: int,
                         host: str, cores: int, app_id: str,
                         rp_id: int = DEFAULT_RESOURCE_PROFILE_ID) -> list[str]:
    """Spark's ExecutorRunner.substituteVariables: each argument that is exactly a
    placeholder is replaced; anything else (including a placeholder inside a longer
    argument) is kept as is, so user arguments can never be rewritten by accident."""
    values = {
        "{{WORKER_URL}}": worker_url,
        "{{EXECUTOR_ID}}": str(exec_id),
        "{{HOSTNAME}}": host,
        "{{CORES}}": str(cores),
        "{{APP_ID}}": app_id,
        "{{RESOURCE_PROFILE_ID}}": str(rp_id),
    }
    return [values.get(a, a) for a in arguments]


def build_command(command: Command, arguments: Sequence[str],
                  python: Optional[str] = None) -> list[str]:
    """``[python, "-m", mainClass, *arguments]``: Ember's executors are Python modules.

    mainClass must be a dotted module name; anything else (an option such as ``-c``, a path)
    is refused so an application description cannot smuggle interpreter options in."""
    main = command.mainClass
    if not isinstance(main, str) or not _MAIN_CLASS_RE.match(main):
        raise ValueError(f"Invalid executor main class {main!r}: expected a dotted Python "
                         "module name such as ember.executor.backend")
    return [python or sys.executable, "-m", main, *[str(a) for a in arguments]]


def command_header(cmd: Sequence[str]) -> str:
    """The first lines of the executor's stderr file, as Spark writes them."""
    formatted = '"' + '" "'.join(cmd) + '"'
    return f"Spark Executor Command: {formatted}\n{HEADER_RULE}\n\n"


HOST_ENV = ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME", "SPARK_PUBLIC_DNS")


def keep_host_env(env: dict[str, str], base_env: Mapping[str, str]) -> None:
    """Variables that name a host are the worker's, whatever a submitted Command carries:
    a child bound to another host's address cannot start (or advertises a peer's)."""
    for key in HOST_ENV:
        if key in base_env:
            env[key] = str(base_env[key])
        else:
            env.pop(key, None)


def build_environment(base_env: Mapping[str, str], command_env: Mapping[str, str], *,
                      executor_dirs: Sequence[str], stdout_url: str, stderr_url: str,
                      auth_secret: Optional[str] = None,
                      shuffle_service_port: Optional[int] = None) -> dict[str, str]:
    """The executor's environment: the worker's own, then the application's
    (Command.environment), then what the worker decides (Spark's ExecutorRunner):
    SPARK_EXECUTOR_DIRS (os.pathsep-joined scratch dirs), the log URLs, and the RPC secret
    as _SPARK_AUTH_SECRET when authentication is on (never on a command line, where `ps`
    would show it). Without auth, an inherited _SPARK_AUTH_SECRET is removed.
    SPARK_SHUFFLE_SERVICE_PORT: the port of this worker's external shuffle service, so an
    executor registers with its own worker's service even when the application's
    spark.shuffle.service.port differs."""
    env = {str(k): str(v) for k, v in base_env.items()}
    env.update({str(k): str(v) for k, v in command_env.items()})
    keep_host_env(env, base_env)
    env["SPARK_EXECUTOR_DIRS"] = os.pathsep.join(executor_dirs)
    env["SPARK_LOG_URL_STDOUT"] = stdout_url
    env["SPARK_LOG_URL_STDERR"] = stderr_url
    if auth_secret:
        env["_SPARK_AUTH_SECRET"] = auth_secret
    else:
        env.pop("_SPARK_AUTH_SECRET", None)
    if shuffle_service_port is not None:
        env["SPARK_SHUFFLE_SERVICE_PORT"] = str(shuffle_service_port)
    return env


def _signal_all(procs: list[psutil.Process], pgid: Optional[int], sig: int) -> None:
    for p in procs:
        try:
            p.send_signal(sig)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    if pgid is not None and hasattr(os, "killpg"):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _gone(p: psutil.Process) -> bool:
    """Exited - a zombie counts: its parent (init, for the re-parented) may be slow to reap."""
    try:
        return p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        return False


def wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Poll until every process of `procs` exited (zombies included); those still alive.
    psutil.wait_procs would wait for zombies of other parents to be reaped, which a
    container's init may never do promptly."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    alive = [p for p in procs if not _gone(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.1)
        alive = [p for p in alive if not _gone(p)]
    return alive


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def wait_and_reap(proc: "subprocess.Popen | ZygoteChild",
                  leader_gone: Callable[[], None]) -> Optional[int]:
    """Wait for `proc` (a process-group leader) to exit, call `leader_gone` (which finishes a
    kill in progress), kill leftovers of its group, then reap it: until it is reaped its pid -
    the group id - stays reserved, so nothing unrelated is signalled. Returns the exit code,
    128+N for a process killed by signal N (as a shell reports it); None only for an
    executor whose zygote died before it (its status is lost)."""
    if isinstance(proc, ZygoteChild):       # the zygote holds the zombie until told
        proc.wait_exited()
        leader_gone()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        status = proc.wait()
        return status if status is None or status >= 0 else 128 - status
    can_peek = hasattr(os, "waitid") and os.name == "posix"
    while can_peek:
        try:
            os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            can_peek = False   # already reaped (should not happen)
    if not can_peek:
        proc.wait()
    leader_gone()
    if can_peek:
        try:
            os.killpg(proc.pid, signal.SIGKILL)   # orphans left in the group
        except (ProcessLookupError, PermissionError):
            pass
    code = proc.wait()
    return code if code >= 0 else 128 - code


class GroupKiller:
    """How a runner ends the process group it started (executors and drivers alike): a kill
    terminates the tree (SIGTERM, SIGKILL after `terminate_timeout`) on a thread of its own,
    so it returns at once on the worker's loop, unless the leader has already exited; `wait`
    lets a kill in progress finish before the group's leftovers are killed and the leader
    reaped (wait_and_reap). `label` names the process in the warning about orphans."""

    def __init__(self, label: str, terminate_timeout: float) -> None:
        self.label = label
        self.terminate_timeout = terminate_timeout
        self._lock = threading.Lock()
        self._killer: Optional[threading.Thread] = None
        self._leader_exited = threading.Event()

    def reset(self) -> None:
        """A new process replaces the one that exited (a supervised driver's relaunch)."""
        with self._lock:
            self._leader_exited = threading.Event()
            self._killer = None

    def kill(self, proc: subprocess.Popen) -> None:
        with self._lock:
            if self._leader_exited.is_set():
                return
            self._killer = threading.Thread(target=self.kill_tree, args=(proc.pid,),
                                            name=f"Killer for {self.label}", daemon=True)
            self._killer.start()

    def kill_tree(self, pid: int) -> None:
        """Terminate the tree now, in the calling thread."""
        ok = terminate_process_tree(pid, self.terminate_timeout,
                                    leader_exited=self._leader_exited.wait,
                                    pgid=pid if os.name == "posix" else None)
        if not ok:
            log.warning("Failed to terminate process tree of %s (pid %d). This process will "
                        "likely be orphaned.", self.label, pid)

    def wait(self, proc: "subprocess.Popen | ZygoteChild") -> Optional[int]:
        return wait_and_reap(proc, self._leader_gone)

    def _leader_gone(self) -> None:
        with self._lock:
            self._leader_exited.set()
            killer = self._killer
        if killer is not None:
            killer.join()


def terminate_process_tree(pid: int, timeout: float, *,
                           leader_exited: Optional[Callable[[float], bool]] = None,
                           pgid: Optional[int] = None) -> bool:
    """SIGTERM the process `pid`, all its descendants and (if given) its process group;
    wait up to `timeout` s; SIGKILL whatever is left and wait up to 10 s more. True when
    everything is gone.

    `leader_exited(t)` waits up to t s for `pid` itself to exit and says whether it did; the
    runner passes one because `pid` is its child (waiting on it through psutil would reap
    it, racing the runner's own wait). Without it, `pid` is waited for like the others.
    The descendants are listed before any signal: once a parent dies its children are
    re-parented and can no longer be found from `pid`."""
    descendants = _descendants(pid)
    try:
        leader: Optional[psutil.Process] = psutil.Process(pid)
    except psutil.NoSuchProcess:
        leader = None

    def wait(procs: list[psutil.Process], t: float) -> tuple[list[psutil.Process], bool]:
        """-> (descendants still alive, leader still alive)."""
        deadline = time.monotonic() + t
        others = [p for p in procs if p != leader] if leader_exited is not None else procs
        alive = wait_gone(others, t)
        leader_alive = False
        if leader is not None and leader_exited is not None and leader in procs:
            leader_alive = not leader_exited(max(0.0, deadline - time.monotonic()))
        elif leader is not None and leader in alive:
            alive.remove(leader)
            leader_alive = True
        return list(alive), leader_alive

    everyone = ([leader] if leader is not None else []) + descendants
    _signal_all(everyone, pgid, signal.SIGTERM)
    alive, leader_alive = wait(everyone, timeout)
    # forked during the grace period, or ignoring SIGTERM: SIGKILL (the group too, which
    # also catches members that were re-parented before they could be listed)
    extra = [p for p in _descendants(pid) if p not in descendants]
    survivors = alive + extra + ([leader] if leader_alive and leader is not None else [])
    _signal_all(survivors, pgid, signal.SIGKILL)
    if not survivors:
        return True
    alive, leader_alive = wait(survivors, _SECOND_WAIT)
    return not alive and not leader_alive


# Every runner whose process may still be alive, so nothing outlives the worker's interpreter.
_LIVE: "weakref.WeakSet[ExecutorRunner]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def kill_all_runners(state: ExecutorState = ExecutorState.FAILED,
                     message: str = "Worker shutting down",
                     timeout: Optional[float] = None) -> None:
    """Kill every live runner of this process and wait for them (the shutdown hook)."""
    with _LIVE_LOCK:
        runners = list(_LIVE)
    for r in runners:
        r.kill(state, message)
    for r in runners:
        r.join(timeout if timeout is not None else r.terminate_timeout + _SECOND_WAIT + 5)


atexit.register(kill_all_runners)


class ExecutorRunner:
    """One executor process of one application on this worker (Spark's ExecutorRunner).

    ``start()`` returns at once; the runner thread creates the process and reports
    ``ExecutorStateChanged`` through `report`: RUNNING once the process started, then exactly
    one final state - EXITED ("Command exited with code <n>"), KILLED (after ``kill()``),
    or FAILED ("Error running executor: <e>", or the message given to ``kill``).
    """

    def __init__(self, app_id: str, exec_id: int, app_desc: ApplicationDescription,
                 cores: int, memory: int, *, worker_id: str, host: str, worker_url: str,
                 web_ui_url: str, executor_dir: str, app_local_dirs: Sequence[str],
                 report: Callable[[ExecutorStateChanged], None],
                 auth_secret: Optional[str] = None, rp_id: int = DEFAULT_RESOURCE_PROFILE_ID,
                 resources: Optional[dict[str, ResourceInformation]] = None,
                 terminate_timeout: float = 10.0,
                 base_env: Optional[Mapping[str, str]] = None,
                 shuffle_service_port: Optional[int] = None,
                 zygote: Optional[ExecutorZygote] = None) -> None:
        self.app_id = app_id
        self.exec_id = exec_id
        self.app_desc = app_desc
        self.cores = cores
        self.memory = memory
        self.rp_id = rp_id
        self.resources = dict(resources or {})
        self.worker_id = worker_id
        self.host = host
        self.worker_url = worker_url
        self.web_ui_url = web_ui_url
        self.executor_dir = executor_dir
        self.app_local_dirs = list(app_local_dirs)
        self.terminate_timeout = terminate_timeout
        self.state = ExecutorState.LAUNCHING
        self._report = report
        self._auth_secret = auth_secret
        self._base_env = base_env
        self._shuffle_service_port = shuffle_service_port
        self._zygote = zygote
        self._lock = threading.Lock()
        self._process: "subprocess.Popen | ZygoteChild | None" = None
        self._kill_requested = False
        self._kill_state = ExecutorState.KILLED
        self._kill_message: Optional[str] = None
        self._group = GroupKiller(f"executor {self.full_id}", terminate_timeout)
        self._thread: Optional[threading.Thread] = None
        self._done = threading.Event()

    # -- views ------------------------------------------------------------------------------

    @property
    def full_id(self) -> str:  # noqa: N802 - Spark's name
        return f"{self.app_id}/{self.exec_id}"

    @property
    def pid(self) -> Optional[int]:
        p = self._process
        return p.pid if p is not None else None

    def description(self) -> ExecutorDescription:
        return ExecutorDescription(self.app_id, self.exec_id, self.rp_id, self.cores, self.memory,
                                   self.state)

    def summary(self) -> ExecutorRunnerSummary:
        return ExecutorRunnerSummary(self.app_id, self.exec_id, self.app_desc, self.cores,
                                     self.memory, dict(self.resources), self.state, self.rp_id)

    def log_url(self, log_type: str) -> str:
        return (f"{self.web_ui_url}/logPage/?appId={self.app_id}&executorId={self.exec_id}"
                f"&logType={log_type}")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the runner thread (the process is created there)."""
        with _LIVE_LOCK:
            _LIVE.add(self)
        self._thread = threading.Thread(target=self._fetch_and_run,
                                        name=f"ExecutorRunner for {self.full_id}", daemon=True)
        self._thread.start()

    def kill(self, state: ExecutorState = ExecutorState.KILLED,
             message: Optional[str] = None) -> None:
        """Ask for the process tree to be terminated; returns at once (safe on the loop).

        The final state reported is `state` (KILLED for KillExecutor, FAILED with "Worker
        shutting down" when the worker stops). A second call does nothing."""
        with self._lock:
            if self._kill_requested or self._done.is_set():
                return
            self._kill_requested = True
            self._kill_state = state
            self._kill_message = message
            if self.state in (ExecutorState.LAUNCHING, ExecutorState.RUNNING):
                self.state = state
            if self._process is not None:   # else not started: the runner thread checks
                log.info("Killing process!")
                self._group.kill(self._process)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait until the runner has reported its final state; True if it has."""
        return self._done.wait(timeout)

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    # -- the runner thread -----------------------------------------------------------------

    def _emit(self, state: ExecutorState, message: Optional[str],
              exit_status: Optional[int]) -> None:
        try:
            self._report(ExecutorStateChanged(self.app_id, self.exec_id, state, message,
                                              exit_status))
        except Exception:
            log.exception("Cannot report %s of executor %s", state, self.full_id)

    def _memory_watchdog(self, pid: int) -> MemoryWatchdog:
        """spark.executor.memory (+ memoryOverhead) enforced on the executor process."""
        profile = self.app_desc.defaultProfile
        overhead = (profile.executorResources.get("memoryOverhead")
                    if self.rp_id == profile.id else None)
        limit = memory_limit_mb(self.memory, int(overhead.amount) if overhead else None)

        def exceeded(rss_mb: int) -> None:
            message = exceeded_message(f"Executor {self.full_id}", rss_mb, limit,
                                       "spark.executor.memory")
            log.warning("%s", message)
            self.kill(ExecutorState.FAILED, message)
        return MemoryWatchdog(pid, limit, exceeded).start()

    def _build(self) -> tuple[list[str], dict[str, str]]:
        args = substitute_variables(
            self.app_desc.command.arguments, worker_url=self.worker_url, exec_id=self.exec_id,
            host=self.host, cores=self.cores, app_id=self.app_id, rp_id=self.rp_id)
        if self.resources:   # Spark: the assigned addresses reach the executor in a file
            os.makedirs(self.executor_dir, exist_ok=True)
            args += ["--resourcesFile", write_resources_file(
                self.executor_dir, "spark.executor", self.resources)]
        cmd = build_command(self.app_desc.command, args)
        env = build_environment(
            os.environ if self._base_env is None else self._base_env,
            self.app_desc.command.environment, executor_dirs=self.app_local_dirs,
            stdout_url=self.log_url("stdout"), stderr_url=self.log_url("stderr"),
            auth_secret=self._auth_secret, shuffle_service_port=self._shuffle_service_port)
        return cmd, env

    def _start_process(self, cmd: list[str], env: dict[str, str], out: Any,
                       err: Any) -> "subprocess.Popen | ZygoteChild | None":
        """The executor process, None if a kill came first. Forked by the worker's zygote
        when it can (ember.deploy.worker.executor_zygote), else spawned: either way in its
        own session, in the executor directory, with stdout/stderr appended to its files.
        The zygote is asked outside the lock (kill() runs on the worker's loop and must not
        wait for it); a kill that came meanwhile is carried out on the fork at once."""
        child = None
        if self._zygote is not None and not self._kill_requested:
            child = self._zygote.spawn(cmd, env, self.executor_dir, out.fileno(), err.fileno())
        with self._lock:
            if child is not None:
                self._process = child
                if self._kill_requested:
                    log.info("Killing process!")
                    self._group.kill(child)
                return child
            if self._kill_requested:
                return None
            self._process = subprocess.Popen(
                cmd, cwd=self.executor_dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                stderr=err, close_fds=True, start_new_session=(os.name == "posix"))
            return self._process

    def _fetch_and_run(self) -> None:
        final: tuple[ExecutorState, Optional[str], Optional[int]]
        proc: "subprocess.Popen | ZygoteChild | None" = None
        try:
            cmd, env = self._build()
            log.info("Launch command: %s", " ".join(f'"{c}"' for c in cmd))
            os.makedirs(self.executor_dir, exist_ok=True)
            out_path = os.path.join(self.executor_dir, "stdout")
            err_path = os.path.join(self.executor_dir, "stderr")
            with open(out_path, "ab") as out, open(err_path, "ab") as err:
                err.write(command_header(cmd).encode("utf-8"))
                err.flush()
                proc = self._start_process(cmd, env, out, err)
            if proc is None:   # killed before it started
                final = (self._kill_state, self._kill_message, None)
            else:
                with self._lock:
                    if not self._kill_requested:
                        self.state = ExecutorState.RUNNING
                if self.state == ExecutorState.RUNNING:
                    self._emit(ExecutorState.RUNNING, None, None)
                watchdog = self._memory_watchdog(proc.pid)
                try:
                    code = self._group.wait(proc)
                finally:
                    watchdog.stop()
                with self._lock:
                    killed = self._kill_requested
                if killed:
                    log.info("Runner thread for executor %s interrupted", self.full_id)
                    final = (self._kill_state, self._kill_message, code)
                elif code is None:
                    final = (ExecutorState.EXITED, "Command exited with an unknown code (the "
                             "worker's executor zygote that forked it had died)", None)
                else:
                    final = (ExecutorState.EXITED, f"Command exited with code {code}", code)
        except Exception as e:
            log.error("Error running executor %s: %s", self.full_id, e,
                      exc_info=not isinstance(e, (OSError, ValueError)))
            code = None
            if proc is not None:
                try:
                    log.info("Killing process!")
                    self._group.kill_tree(proc.pid)
                    code = self._group.wait(proc)
                except Exception:
                    log.debug("cleanup after a failed launch", exc_info=True)
            with self._lock:
                killed = self._kill_requested
            final = ((self._kill_state, self._kill_message, code) if killed else
                     (ExecutorState.FAILED, f"Error running executor: {e}", code))
        self.state = final[0]
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._done.set()
        self._emit(*final)

