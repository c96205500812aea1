"""The standalone Worker: registers with the master(s), runs executors and cluster-mode
drivers, reports their states.

This is Spark's `deploy/worker/Worker.scala` (reference §4.1, §4.2, §4.4, §4.6) as an
RpcEndpoint named "Worker" in the RpcEnv "sparkWorker". Every decision lives in the sans-I/O
`ember.deploy.worker.state.WorkerState` (tested without processes); the endpoint here is its
thin shell, like the master's `Master._feed/_execute`: it turns RPC messages, runner reports
and timer ticks into events, stamps them with the clocks, and carries the returned
instructions out in order (send, ask, reply, log, arm or cancel a timer, start or kill an
`ExecutorRunner` / `DriverRunner`, delete directories, exit). It runs on the env's loop, one
event at a time (no locks, nothing blocking); the runners' threads report back through
``RpcEnv.call_soon``. The shell keeps only I/O handles: the runners, the application scratch
dirs it created, the timers and the pending state-change asks.

``WorkerDaemon`` is the process around the endpoint (RpcEnv, web UI, work dir, orderly stop);
``ember.deploy.worker.cli`` parses the command line into ``WorkerSettings`` and runs one.

Deliberate deviations from Spark:
- the heartbeat and work-dir-cleanup timers are started once, on the first registration
  (Spark schedules a new heartbeat timer on every RegisteredWorker);
- ApplicationFinished also kills the application's executors still running here (Spark relies
  on the master's KillExecutor arriving first; if it was lost they would leak);
- a failed ExecutorStateChanged ask is retried by re-sending only the state change, instead of
  re-entering the whole handler (which would log the executor as unknown the second time);
- ExecutorStateChanged / WorkerDecommissionSigReceived are only accepted from inside this
  process: a remote peer cannot declare our executors finished (DriverStateChanged from a
  DriverRunner never arrives as a message: runners report through call_soon);
- Ember additions for cluster mode without a shared file system: a DriverRunner fetches
  `ember-upload://` resources from the active master (a blocking ask made on the runner's
  thread), and the ask RequestDriverLog serves a driver's stdout/stderr to the master;
- a LaunchDriver for a driver already running here is ignored (Spark would start a second
  runner and lose track of the first);
- fencing: every instruction from a master carries its leadership epoch, and one from an
  older epoch than the newest seen is refused (`EpochFence`), so a deposed master can
  neither launch nor kill anything here;
- driver fencing (SPARK-19900): heartbeats are asks, and the master's answer renews a lease
  (`spark.ember.worker.masterLease`); when no master has answered for longer than it, the
  worker kills its drivers (SIGKILL) and reports that once re-registered, while the master
  relaunches a lost worker's supervised driver only after the lease, so no driver ever runs
  twice at once;
- on MasterChanged the worker first re-sends the final states of the drivers that ended
  here (a report sent while the master was down is lost), then answers
  WorkerSchedulerStateResponse, so a recovered master never declares a driver that finished
  during the failover lost (and never relaunches it).
"""
from __future__ import annotations

import concurrent.futures
import logging
import os
import random
import shutil
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from ember import config
from ember.deploy.instructions import (
    LOG_LEVELS, Ask, AskAnswered, CancelTimer, CleanupApplication, CleanupWorkDir,
    ConnectToMaster, Disconnected, Exit, Instruction, KillDriverRunner, KillExecutorRunner,
    LaunchDriverRunner, LaunchExecutorRunner, Log, MasterRefResolved, Reply, ReplyFailure,
    RunnerLaunchFailed, ScheduleTimer, Send, SendAsk, ServeDriverLog,
)
from ember.deploy.messages import (
    AppResourceData, DriverLogResponse, DriverStateChanged, ExecutorState, ExecutorStateChanged,
    FetchAppResource, ResourceInformation, WorkerStateResponse,
)
from ember.deploy.resources import ResourceError, get_or_discover_all_resources
from ember.deploy.worker.config import WorkerConf, local_root_dirs
from ember.deploy.worker.driver_runner import DriverRunner
from ember.deploy.worker.executor_runner import ExecutorRunner
from ember.deploy.worker.executor_zygote import ExecutorZygote
from ember.deploy.log_files import log_dir, read_slice
from ember.deploy.worker.shuffle_service import ExternalShuffleService
from ember.deploy.worker.state import (
    ASK_MESSAGES, ENDPOINT_NAME, FUZZ_MULTIPLIER_INTERVAL_LOWER_BOUND, DriverRunnerReport,
    ExecutorRunnerReport, KillAll, Received, RetryAction, Started, Stopping, WorkerState,
    registration_intervals, registration_timeline, reregister_action, trim_finished,
)
from ember.errors import SparkException
from ember.rpc import Cancellable, RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv
from ember.rpc.errors import RpcRemoteError, UnsupportedMessageError
from ember.rpc.security import app_credential

log = logging.getLogger("ember.deploy.worker.Worker")

__all__ = ["Worker", "WorkerDaemon", "WorkerSettings", "WorkerStartError", "ENDPOINT_NAME",
           "SYSTEM_NAME", "generate_worker_id", "registration_fuzz", "registration_intervals",
           "RetryAction", "reregister_action", "registration_timeline",
           "parse_standalone_master_urls", "trim_finished",
           "stale_app_dirs", "driver_log_path", "read_log_chunk"]

SYSTEM_NAME = "sparkWorker"
MASTER_ENDPOINT_NAME = "Master"


# ---------------------------------------------------------------------------------------------
# Helpers that read the clock, randomness or the file system (the shell's side)
# ---------------------------------------------------------------------------------------------

def generate_worker_id(host: str, port: int, now: Optional[float] = None,
                       pattern: str = "worker-%s-%s-%d") -> str:
    """``worker-<yyyyMMddHHmmss>-<host>-<port>`` in local time (spark.worker.idPattern)."""
    stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(time.time() if now is None else now))
    return pattern % (stamp, host, port)


def registration_fuzz(rng: Optional[random.Random] = None) -> float:
    """Spark's REGISTRATION_RETRY_FUZZ_MULTIPLIER: uniform in [0.5, 1.5), fixed per process,
    so a cluster of workers restarted together does not retry in lock-step."""
    r = rng if rng is not None else random.Random(uuid.uuid4().int)
    return r.random() + FUZZ_MULTIPLIER_INTERVAL_LOWER_BOUND


def parse_standalone_master_urls(url: str) -> list[RpcAddress]:
    """Spark's Utils.parseStandaloneMasterUrls: ``spark://h1:p1,h2:p2`` -> one address per
    master. ValueError("Invalid master URL: ...") for anything else."""
    if not isinstance(url, str) or not url.startswith("spark://"):
        raise ValueError(f"Invalid master URL: {url}")
    parts = url[len("spark://"):].split(",")
    return [RpcAddress.from_spark_url("spark://" + p) for p in parts]


def _contains_new_files(path: str, cutoff: float) -> bool:
    """Spark's Utils.doesDirectoryContainAnyNewFiles: any entry below `path` (not `path`
    itself) modified after `cutoff` (epoch seconds)."""
    with os.scandir(path) as it:
        entries = list(it)
    for e in entries:
        try:
            if e.stat(follow_symlinks=False).st_mtime > cutoff:
                return True
            if e.is_dir(follow_symlinks=False) and _contains_new_files(e.path, cutoff):
                return True
        except FileNotFoundError:
            continue
    return False


def stale_app_dirs(work_dir: str, active_ids: Iterable[str], ttl: float,
                   now: Optional[float] = None) -> list[str]:
    """The WorkDirCleanup choice: sub-directories of `work_dir` not named after a running
    app/driver and with nothing modified within `ttl` seconds. OSError("ERROR: Failed to
    list files in <dir>") if the work dir cannot be listed."""
    active = set(active_ids)
    cutoff = (time.time() if now is None else now) - ttl
    try:
        with os.scandir(work_dir) as it:
            entries = list(it)
    except OSError:
        raise OSError(f"ERROR: Failed to list files in {work_dir}") from None
    out = []
    for e in entries:
        try:
            if (e.is_dir(follow_symlinks=False) and e.name not in active
                    and not _contains_new_files(e.path, cutoff)):
                out.append(e.path)
        except OSError:
            continue
    return sorted(out)


def driver_log_path(work_dir: str, driver_id: str, log_type: str, known: bool
                    ) -> tuple[Optional[str], str]:
    """(path of a driver's log file, "") or (None, why not) for RequestDriverLog: the
    work dir confinement of log_files.log_dir. A driver not known to this worker is only
    served if its dir exists (its runner was trimmed, or the worker restarted)."""
    if log_type not in ("stdout", "stderr"):
        return None, f"Log type must be one of stdout, stderr (got {log_type!r})"
    d = log_dir(work_dir, [driver_id])
    if d is None:
        return None, f"Invalid driver id {driver_id!r}"
    if not known and not os.path.isdir(d):
        return None, f"Unknown driver {driver_id} on this worker"
    return d + log_type, ""


def read_log_chunk(path: str, offset: int, max_bytes: int) -> tuple[bytes, int, int]:
    """log_files.read_slice, except that a missing file reads as empty (a driver that has
    not written yet)."""
    try:
        return read_slice(path, offset, max_bytes)
    except FileNotFoundError:
        return b"", 0, 0


def _delete_dirs(dirs: Sequence[str]) -> None:
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# The endpoint: the I/O shell around WorkerState
# ---------------------------------------------------------------------------------------------

class Worker(RpcEndpoint):
    """Spark's Worker endpoint. State is only touched on the RpcEnv's loop thread."""

    app_messages = ()   # an application's connection may not talk to the worker at all

    def __init__(self, *, host: str, port: int, cores: int, memory: int,
                 master_addresses: Sequence[RpcAddress], work_dir: str, web_ui_url: str,
                 conf: Mapping[str, str], worker_conf: Optional[WorkerConf] = None,
                 on_exit: Optional[Callable[[int], None]] = None,
                 fuzz: Optional[float] = None, auth_secret: Optional[str] = None,
                 worker_id: Optional[str] = None,
                 resources: Optional[Mapping[str, ResourceInformation]] = None,
                 shuffle_service: Optional[ExternalShuffleService] = None,
                 zygote: Optional[ExecutorZygote] = None) -> None:
        self.conf = dict(conf)
        self.wconf = worker_conf if worker_conf is not None else WorkerConf.from_conf(conf)
        self.work_dir = os.path.abspath(work_dir)
        self.web_ui_url = web_ui_url
        self.shuffle_service = shuffle_service
        self.zygote = zygote
        self._on_exit = on_exit
        self._auth_secret = auth_secret
        self.state = WorkerState(
            worker_id=worker_id or generate_worker_id(host, port, pattern=self.wconf.id_pattern),
            host=host, port=port, cores=cores, memory=memory,
            master_addresses=master_addresses, work_dir=self.work_dir, web_ui_url=web_ui_url,
            worker_conf=self.wconf, fuzz=registration_fuzz() if fuzz is None else fuzz,
            resources=resources)
        # I/O handles only; what they mean is the state's bookkeeping
        self.executor_runners: dict[str, ExecutorRunner] = {}
        self.driver_runners: dict[str, DriverRunner] = {}
        self.app_directories: dict[str, list[str]] = {}
        self.pending_syncs: set[concurrent.futures.Future] = set()
        self._timers: dict[str, Cancellable] = {}
        self._one_shot_timers: list[Cancellable] = []

    # -- views of the state (read on the loop) -----------------------------------------------

    @property
    def worker_id(self) -> str:
        return self.state.worker_id

    @property
    def host(self) -> str:
        return self.state.host

    @property
    def master(self) -> Any:
        return self.state.master

    @property
    def registered(self) -> bool:
        return self.state.registered

    @property
    def connected(self) -> bool:
        return self.state.connected

    @property
    def decommissioned(self) -> bool:
        return self.state.decommissioned

    @property
    def active_master_url(self) -> str:
        return self.state.active_master_url

    @property
    def active_master_web_ui_url(self) -> str:
        return self.state.active_master_web_ui_url

    @property
    def executors(self) -> Mapping[str, Any]:
        return self.state.executors

    @property
    def drivers(self) -> Mapping[str, Any]:
        return self.state.drivers

    @property
    def fence(self) -> Any:
        return self.state.fence

    @property
    def worker_url(self) -> str:
        """``spark://Worker@host:port`` (RpcEndpointAddress.toString)."""
        return f"spark://{ENDPOINT_NAME}@{self.rpc_env.address.host_port}"

    def state_response(self) -> WorkerStateResponse:
        """Spark's WorkerStateResponse (the web UI's and /json's view)."""
        return self.state.state_response()

    # -- RpcEndpoint: events in --------------------------------------------------------------

    def on_start(self) -> None:
        self._feed(Started(self.self_ref))

    def on_stop(self) -> None:
        self._feed(Stopping())
        for timer in [*self._timers.values(), *self._one_shot_timers]:
            timer.cancel()
        self._timers.clear()
        self._one_shot_timers.clear()

    def on_disconnected(self, remote: RpcAddress) -> None:
        self._feed(Disconnected(remote))

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self._feed(Received(msg, sender, self.rpc_env.current_sender()))

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if not isinstance(msg, ASK_MESSAGES):
            error = UnsupportedMessageError(msg, context.sender_address)
            log.warning("Refusing an ask: %s", error)
            context.send_failure(error)
            return
        self._feed(Ask(context, msg))

    def kill_all(self, state: ExecutorState = ExecutorState.KILLED,
                 message: Optional[str] = None
                 ) -> tuple[list[ExecutorRunner], list[DriverRunner]]:
        """Ask every executor (final `state`, `message`) and driver to die (non-blocking);
        returns the runners so a caller off the loop can join them."""
        self._feed(KillAll(state, message))
        return list(self.executor_runners.values()), list(self.driver_runners.values())

    def _report_from_executor(self, m: ExecutorStateChanged) -> None:
        """Called on a runner thread: hop onto the loop (the one writer of our state)."""
        self.rpc_env.call_soon(self._on_executor_report, m)

    def _on_executor_report(self, m: ExecutorStateChanged) -> None:
        if m.state.isFinished():
            self.executor_runners.pop(f"{m.appId}/{m.execId}", None)
        self._feed(ExecutorRunnerReport(m))

    def _report_from_driver(self, m: DriverStateChanged) -> None:
        """Called on a runner thread: hop onto the loop (the one writer of our state)."""
        self.rpc_env.call_soon(self._on_driver_report, m)

    def _on_driver_report(self, m: DriverStateChanged) -> None:
        self.driver_runners.pop(m.driverId, None)
        self._feed(DriverRunnerReport(m))

    def _fetch_app_resource(self, url: str) -> AppResourceData:
        """For DriverRunner threads (never the loop: it blocks): an `ember-upload://` URL's
        bytes from the active master."""
        master = self.state.master
        if master is None:
            raise ConnectionError("the connection to the master has not yet been established")
        return master.ask_sync(FetchAppResource(url), timeout=self.wconf.ask_timeout)

    # -- feeding the state machine -----------------------------------------------------------

    def _feed(self, event: Any) -> None:
        """One event in, its instructions out. Never raises: the state answers a handler
        that raises with a log line (and an ask's failure) only; an instruction that fails
        is logged and the rest still run."""
        try:
            instructions = self.state.handle(event, time.monotonic(), int(time.time() * 1000))
        except Exception as e:
            log.error("Error while handling %s: %r", type(event).__name__, e, exc_info=True)
            if isinstance(event, Ask):
                event.request.send_failure(SparkException(f"{type(e).__name__}: {e}"))
            return
        for ins in instructions:
            try:
                self._execute(ins)
            except Exception as e:
                log.error("Error while carrying out %s: %r", type(ins).__name__, e,
                          exc_info=True)
                if isinstance(ins, (Reply, ReplyFailure)):
                    ins.request.send_failure(SparkException(f"{type(e).__name__}: {e}"))

    def _execute(self, ins: Instruction) -> None:
        if isinstance(ins, Log):
            log.log(LOG_LEVELS.get(ins.level, logging.INFO), "%s", ins.text)
        elif isinstance(ins, Send):
            ins.target.send(ins.message)
        elif isinstance(ins, SendAsk):
            self._ask(ins)
        elif isinstance(ins, Reply):
            ins.request.reply(ins.message)
        elif isinstance(ins, ReplyFailure):
            # the asker sees ins.error_type, whatever the exception class on this side
            ins.request.send_failure(RpcRemoteError(ins.error_type, ins.error))
        elif isinstance(ins, ScheduleTimer):
            self._schedule_timer(ins)
        elif isinstance(ins, CancelTimer):
            timer = self._timers.pop(ins.key, None)
            if timer is not None:
                timer.cancel()
        elif isinstance(ins, ConnectToMaster):
            self._connect_to_master(ins)
        elif isinstance(ins, LaunchExecutorRunner):
            self._launch_executor(ins)
        elif isinstance(ins, KillExecutorRunner):
            runner = self.executor_runners.get(ins.full_id)
            if runner is not None:
                runner.kill(ins.state, ins.message)
        elif isinstance(ins, LaunchDriverRunner):
            self._launch_driver(ins)
        elif isinstance(ins, KillDriverRunner):
            driver = self.driver_runners.get(ins.driver_id)
            if driver is not None:
                driver.kill(fence=ins.fence)
        elif isinstance(ins, CleanupApplication):
            self._cleanup_application(ins.app_id)
        elif isinstance(ins, CleanupWorkDir):
            self._clean_work_dir(ins)
        elif isinstance(ins, ServeDriverLog):
            self._serve_driver_log(ins)
        elif isinstance(ins, Exit):
            if self._on_exit is not None:
                self._on_exit(ins.code)
        else:
            log.error("Unknown instruction from the worker state: %r", ins)

    def _schedule_timer(self, ins: ScheduleTimer) -> None:
        env = self.rpc_env
        delay = max(0, ins.delay_ms) / 1000.0
        if ins.period_ms:
            timer = env.schedule_periodic(delay, ins.period_ms / 1000.0, self._feed, ins.message)
        else:
            timer = env.schedule(delay, self._feed, ins.message)
        if ins.key is None:
            self._one_shot_timers = [t for t in self._one_shot_timers if not t.cancelled]
            self._one_shot_timers.append(timer)
            return
        old = self._timers.pop(ins.key, None)
        if old is not None:
            old.cancel()
        self._timers[ins.key] = timer

    def _ask(self, ins: SendAsk) -> None:
        fut = ins.target.ask(ins.message, timeout=ins.timeout)
        tracked = isinstance(ins.message, ExecutorStateChanged)
        if tracked:   # the daemon's stop waits for the final state changes to be sent
            self.pending_syncs.add(fut)

        def answered(f: concurrent.futures.Future) -> None:
            if tracked:
                self.pending_syncs.discard(f)
            if f.cancelled():
                error: Optional[BaseException] = concurrent.futures.CancelledError()
            else:
                error = f.exception()
            self._feed(AskAnswered(ins.tag, None if error is not None else f.result(), error))
        fut.add_done_callback(lambda f: self.rpc_env.call_soon(answered, f))

    def _connect_to_master(self, ins: ConnectToMaster) -> None:
        """Spark's setupEndpointRef without a blocking thread: verify that "Master" exists
        at the address; the state then sends RegisterWorker."""
        fut = self.rpc_env.setup_endpoint_ref_async(ins.address, MASTER_ENDPOINT_NAME,
                                                    self.wconf.ask_timeout)

        def resolved(f: concurrent.futures.Future) -> None:
            error = f.exception()
            self._feed(MasterRefResolved(ins.address, ins.generation,
                                         None if error is not None else f.result(), error))
        fut.add_done_callback(lambda f: self.rpc_env.call_soon(resolved, f))

    def _app_credential(self, scope: str) -> Optional[str]:
        """What a driver or executor of application `scope` gets instead of the cluster
        secret: a credential derived for that application only."""
        if not self._auth_secret:
            return None
        return app_credential(self._auth_secret.encode("utf-8"), scope)

    # -- executors ---------------------------------------------------------------------------

    def _app_local_dirs(self, app_id: str) -> list[str]:
        """The app's scratch dirs (``executor-<uuid>``, mode 700, one per local root), made
        on its first executor here and reused by the later ones."""
        dirs = self.app_directories.get(app_id)
        if dirs is not None:
            return dirs
        roots = local_root_dirs(self.conf)
        dirs = []
        for root in roots:
            try:
                os.makedirs(root, exist_ok=True)
                d = os.path.join(os.path.abspath(root), f"executor-{uuid.uuid4()}")
                os.mkdir(d, 0o700)
                os.chmod(d, 0o700)
                dirs.append(d)
            except OSError as e:
                log.warning("Failed to create directory %s: %s. Ignoring this directory.",
                            root, e)
        if not dirs:
            raise OSError(f"No subfolder can be created in {','.join(roots)}.")
        self.app_directories[app_id] = dirs
        return dirs

    def _executor_dir(self, app_id: str, exec_id: int) -> str:
        d = os.path.abspath(os.path.join(self.work_dir, app_id, str(exec_id)))
        if (not app_id or app_id in (".", "..") or "/" in app_id or "\\" in app_id
                or os.path.dirname(os.path.dirname(d)) != self.work_dir):
            raise OSError(f"Failed to create directory {d} (invalid application id "
                          f"{app_id!r})")
        try:
            os.makedirs(d, exist_ok=True)
        except OSError as e:
            raise OSError(f"Failed to create directory {d}: {e.strerror or e}") from None
        return d

    def _launch_executor(self, ins: LaunchExecutorRunner) -> None:
        full_id = f"{ins.app_id}/{ins.exec_id}"
        runner: Optional[ExecutorRunner] = None
        try:
            runner = ExecutorRunner(
                ins.app_id, ins.exec_id, ins.app_desc, ins.cores, ins.memory,
                worker_id=self.state.worker_id, host=self.state.host,
                worker_url=self.worker_url, web_ui_url=self.web_ui_url,
                executor_dir=self._executor_dir(ins.app_id, ins.exec_id),
                app_local_dirs=self._app_local_dirs(ins.app_id),
                report=self._report_from_executor,
                auth_secret=self._app_credential(ins.scope), rp_id=ins.rp_id,
                resources=ins.resources,
                terminate_timeout=self.wconf.executor_terminate_timeout,
                shuffle_service_port=self.shuffle_service.bound_port
                if self.shuffle_service is not None else None, zygote=self.zygote)
            self.executor_runners[full_id] = runner
            runner.start()
        except Exception as e:
            if self.executor_runners.pop(full_id, None) is not None:
                runner.kill()
            self._feed(RunnerLaunchFailed(f"{type(e).__name__}: {e}", full_id=full_id))

    def _cleanup_application(self, app_id: str) -> None:
        if self.shuffle_service is not None:
            self.shuffle_service.application_removed(app_id)
        dirs = self.app_directories.pop(app_id, None)
        if dirs:
            log.info("Cleaning up local directories for application %s", app_id)
            try:
                self.rpc_env.run_in_executor(_delete_dirs, dirs)
            except Exception:
                _delete_dirs(dirs)

    # -- drivers -----------------------------------------------------------------------------

    def _launch_driver(self, ins: LaunchDriverRunner) -> None:
        try:
            runner = DriverRunner(
                ins.driver_id, ins.desc, work_dir=self.work_dir, worker_url=self.worker_url,
                host=self.state.host, web_ui_url=self.web_ui_url,
                report=self._report_from_driver, fetch_upload=self._fetch_app_resource,
                worker_conf=self.conf, auth_secret=self._app_credential(ins.driver_id),
                attempt=ins.attempt, resources=ins.resources)
            self.driver_runners[ins.driver_id] = runner
            runner.start()
        except Exception as e:
            self.driver_runners.pop(ins.driver_id, None)
            self._feed(RunnerLaunchFailed(f"{type(e).__name__}: {e}", driver_id=ins.driver_id))

    def _serve_driver_log(self, ins: ServeDriverLog) -> None:
        m, context = ins.message, ins.request
        path, error = driver_log_path(self.work_dir, m.driverId, m.logType, ins.known)
        if path is None:
            context.reply(DriverLogResponse(False, message=error))
            return

        def read() -> None:   # file I/O: off the loop
            try:
                data, start, total = read_log_chunk(path, m.offset, m.maxBytes)
                context.reply(DriverLogResponse(True, data, start, start + len(data), total))
            except OSError as e:
                context.reply(DriverLogResponse(False, message=f"Cannot read {path}: {e}"))
        self.rpc_env.run_in_executor(read)

    # -- work dir cleanup (§4.6) -------------------------------------------------------------

    def _clean_work_dir(self, ins: CleanupWorkDir) -> None:
        work_dir = self.work_dir

        def clean() -> None:
            try:
                for d in stale_app_dirs(work_dir, ins.active, ins.ttl_s):
                    log.info("Removing directory: %s", d)
                    shutil.rmtree(d, ignore_errors=True)
            except OSError as e:
                log.error("App dir cleanup failed: %s", e)
        try:
            self.rpc_env.run_in_executor(clean)
        except Exception as e:
            log.error("App dir cleanup failed: %s", e)


# ---------------------------------------------------------------------------------------------
# The daemon around the endpoint
# ---------------------------------------------------------------------------------------------

class WorkerStartError(Exception):
    """The worker cannot start (work dir, port, configuration): a one-line message."""


@dataclass
class WorkerSettings:
    """Everything a worker process is started with (WorkerArguments + resolved conf)."""
    host: str
    port: int
    cores: int
    memory: int                       # MB
    masters: list[RpcAddress]
    work_dir: str
    web_ui_port: int = 8081
    conf: dict[str, str] = field(default_factory=dict)
    public_address: Optional[str] = None   # SPARK_PUBLIC_DNS
    ui_bind_host: Optional[str] = None     # SPARK_LOCAL_IP, else all interfaces

    @property
    def master_url(self) -> str:
        return "spark://" + ",".join(a.host_port for a in self.masters)


class WorkerDaemon:
    """A running worker: RpcEnv "sparkWorker", the "Worker" endpoint and the web UI.

    ``start()`` brings it up (raising WorkerStartError with a one-line reason),
    ``wait()`` blocks until the worker exits on its own (registration gave up, ...) or
    ``request_stop`` was called (signal-safe), and ``stop()`` kills every executor - and
    waits for their process trees to be gone - before shutting the env and UI down.
    """

    def __init__(self, settings: WorkerSettings) -> None:
        self.settings = settings
        self.wconf = WorkerConf.from_conf(settings.conf)
        self.env: Optional[RpcEnv] = None
        self.worker: Optional[Worker] = None
        self.ui: Any = None
        self.shuffle_service: Optional[ExternalShuffleService] = None
        self.zygote: Optional[ExecutorZygote] = None
        self._exited = threading.Event()
        self._exit_code: Optional[int] = None
        self._stop_requested: Optional[int] = None   # set from signal handlers: no locks
        self._stopped = False

    # -- start -------------------------------------------------------------------------------

    def start(self) -> "WorkerDaemon":
        s = self.settings
        work_dir = os.path.abspath(s.work_dir)
        # Work, driver, executor and log directories 0700, files 0600: logs and executor
        # directories hold application data and environments. Launched drivers and
        # executors inherit the umask (they run as the daemon's user anyway).
        os.umask(0o077)
        try:
            os.makedirs(work_dir, exist_ok=True)
            if not os.access(work_dir, os.W_OK | os.X_OK):
                raise PermissionError(f"{work_dir} is not writable")
        except OSError as e:
            raise WorkerStartError(f"Failed to create work directory {work_dir}: "
                                   f"{e.strerror or e}") from None
        try:
            resources = get_or_discover_all_resources(
                s.conf, "spark.worker", s.conf.get("spark.worker.resourcesFile"))
        except ResourceError as e:
            raise WorkerStartError(f"Failed to setup worker resources: {e}") from None
        if resources:
            log.info("Custom resources for spark.worker: %s", ", ".join(
                f"{n}: [{', '.join(i.addresses)}]" for n, i in resources.items()))
        else:
            log.info("No custom resources configured for spark.worker.")
        auth_secret: Optional[str] = None
        if config.read(s.conf, "spark.shuffle.service.enabled"):
            self.shuffle_service = ExternalShuffleService(s.host, s.conf)
            try:
                self.shuffle_service.start()
            except (OSError, ValueError) as e:
                self.shuffle_service = None
                raise WorkerStartError(str(e)) from None
        if self.wconf.executor_zygote:   # first: it imports while the worker starts
            self.zygote = ExecutorZygote(os.environ).start()
        try:
            from ember.rpc.config import RpcConf
            rpc_conf = RpcConf.from_conf(s.conf)
            if rpc_conf.authenticate and rpc_conf.secret:
                auth_secret = rpc_conf.secret.decode("utf-8")
            self.env = RpcEnv.create(SYSTEM_NAME, s.host, s.port, s.conf)
        except (ValueError, OSError) as e:
            if self.zygote is not None:
                self.zygote.stop()
            raise WorkerStartError(str(e)) from None
        try:
            from ember.deploy.worker.http import WorkerWebUI
            ui_port = self.wconf.ui_port if self.wconf.ui_port is not None else s.web_ui_port
            public = s.public_address or os.environ.get("SPARK_PUBLIC_DNS") or s.host
            bind_host = s.host or s.ui_bind_host or os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"
            self.ui = WorkerWebUI(self.env.endpoint_ref(self.env.address, ENDPOINT_NAME),
                                  work_dir, bind_host, ui_port, public_host=public,
                                  max_retries=self.wconf.port_max_retries,
                                  ask_timeout=min(self.wconf.ask_timeout, 30.0),
                                  conf=s.conf)
            self.ui.start()
            address = self.env.address
            self.worker = Worker(
                host=address.host, port=address.port, cores=s.cores, memory=s.memory,
                master_addresses=s.masters, work_dir=work_dir, web_ui_url=self.ui.url,
                conf=s.conf, worker_conf=self.wconf, on_exit=self._on_worker_exit,
                auth_secret=auth_secret, resources=resources,
                shuffle_service=self.shuffle_service, zygote=self.zygote)
            self.env.admit_app_scopes(any_scope=True)   # its drivers' and executors'
            self.env.setup_endpoint(ENDPOINT_NAME, self.worker)
        except Exception as e:
            if self.ui is not None:
                self.ui.stop()
            if self.shuffle_service is not None:
                self.shuffle_service.stop()
            if self.zygote is not None:
                self.zygote.stop()
            self.env.shutdown()
            if isinstance(e, (OSError, ValueError)):
                raise WorkerStartError(str(e)) from None
            raise
        return self

    @property
    def worker_url(self) -> str:
        assert self.env is not None
        return f"spark://{ENDPOINT_NAME}@{self.env.address.host_port}"

    # -- waiting and stopping ----------------------------------------------------------------

    def _on_worker_exit(self, code: int) -> None:
        if self._exit_code is None:
            self._exit_code = code
        self._exited.set()

    def request_stop(self, code: int = 0) -> None:
        """Ask ``wait()`` to return `code`. Safe in a signal handler (takes no lock)."""
        if self._stop_requested is None:
            self._stop_requested = code

    def wait(self, timeout: Optional[float] = None) -> Optional[int]:
        """Block until the worker wants to exit; its exit code (None on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._stop_requested is not None:
                return self._stop_requested
            if self._exited.is_set():
                return self._exit_code
            if deadline is not None and time.monotonic() >= deadline:
                return None
            self._exited.wait(0.1)

    def run_on_loop(self, fn: Callable[[], Any], timeout: float = 10.0) -> Any:
        """Run fn on the env's loop (where the Worker's state lives) and return its result."""
        assert self.env is not None
        out: concurrent.futures.Future = concurrent.futures.Future()

        def run() -> None:
            try:
                out.set_result(fn())
            except BaseException as e:   # noqa: BLE001 - handed to the caller
                out.set_exception(e)
        self.env.call_soon(run)
        return out.result(timeout)

    def stop(self, sync_grace: float = 2.0) -> None:
        """Kill all executors (FAILED "Worker shutting down", like Spark's shutdown hook)
        and drivers (KILLED), wait for their process trees to be gone, give their final
        state changes a moment to reach the master, then stop the web UI and the RpcEnv and
        delete app scratch dirs. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        worker, env = self.worker, self.env
        runners: list[ExecutorRunner] = []
        drivers: list[DriverRunner] = []
        if worker is not None and env is not None:
            try:
                runners, drivers = self.run_on_loop(
                    lambda: worker.kill_all(ExecutorState.FAILED, "Worker shutting down"))
            except Exception:
                runners = list(worker.executor_runners.values())
                drivers = list(worker.driver_runners.values())
                for r in runners:
                    r.kill(ExecutorState.FAILED, "Worker shutting down")
                for d in drivers:
                    d.kill()
            wait_for = max([worker.wconf.executor_terminate_timeout]
                           + [d.terminate_timeout for d in drivers]) + 15.0
            deadline = time.monotonic() + wait_for
            for r in [*runners, *drivers]:
                r.join(max(0.1, deadline - time.monotonic()))
            try:
                # the runners' reports were queued before they finished: once this runs,
                # every final ExecutorStateChanged ask has been sent
                pending = self.run_on_loop(lambda: list(worker.pending_syncs), timeout=5.0)
                concurrent.futures.wait(pending, timeout=sync_grace)
            except Exception:
                pass
        if self.ui is not None:
            self.ui.stop()
        if self.shuffle_service is not None:
            self.shuffle_service.stop()
        if self.zygote is not None:
            self.zygote.stop()
        if env is not None:
            env.shutdown()
            env.await_termination(10)
        if worker is not None:
            _delete_dirs([d for dirs in worker.app_directories.values() for d in dirs])
            worker.app_directories.clear()
        self._exited.set()
