"""The standalone Worker: registers with the master(s), runs executors and cluster-mode
drivers, reports their states.

This is Spark's `deploy/worker/Worker.scala` (reference §4.1, §4.2, §4.4, §4.6) as an
RpcEndpoint named "Worker" in the RpcEnv "sparkWorker". Its handlers run one at a time on the
env's loop (no locks, nothing blocking); processes are started and watched by `ExecutorRunner`
and `DriverRunner` threads that report back through ``RpcEnv.call_soon``. The decisions that
have a right answer independent of I/O - the worker id, the registration retry schedule, the
trimming of finished executors, which work dirs are stale, which driver log may be read - are
small pure functions below, tested directly.

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
import enum
import logging
import os
import random
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from ember import config
from ember.deploy.messages import (
    AppResourceData, ApplicationFinished, DecommissionWorker, DriverLogResponse, DriverState,
    DriverStateChanged, ExecutorState, ExecutorStateChanged, FetchAppResource, Heartbeat,
    HeartbeatResponse,
    KillDriver, KillExecutor, LaunchDriver, LaunchExecutor, MasterChanged, MasterInStandby,
    ReconnectWorker, RegisteredWorker, RegisterWorker, RegisterWorkerFailed, RequestDriverLog,
    RequestWorkerState, ResourceInformation, WorkerDecommissioning, WorkerDecommissionSigReceived,
    WorkerDriverStateResponse, WorkerExecutorStateResponse, WorkerLatestState,
    WorkerSchedulerStateResponse, WorkerStateResponse,
)
from ember.deploy.fencing import EpochFence, MasterLease
from ember.deploy.resources import ResourceError, get_or_discover_all_resources
from ember.deploy.worker.config import WorkerConf, local_root_dirs
from ember.deploy.worker.driver_runner import DriverRunner
from ember.deploy.worker.executor_runner import ExecutorRunner
from ember.deploy.log_files import log_dir, read_slice
from ember.deploy.worker.shuffle_service import ExternalShuffleService
from ember.util.units import megabytes_to_string
from ember.rpc.security import SCOPE_ENV, app_credential
from ember.rpc import (Cancellable, RpcAddress, RpcCallContext, RpcEndpoint, RpcEndpointRef,
                       RpcEnv, RpcTimeoutError)

log = logging.getLogger("ember.deploy.worker.Worker")

__all__ = ["Worker", "WorkerDaemon", "WorkerSettings", "WorkerStartError", "ENDPOINT_NAME",
           "SYSTEM_NAME", "generate_worker_id", "registration_fuzz", "registration_intervals",
           "RetryAction", "reregister_action", "registration_timeline",
           "parse_standalone_master_urls", "megabytes_to_string", "trim_finished",
           "stale_app_dirs", "driver_log_path", "read_log_chunk"]

SYSTEM_NAME = "sparkWorker"
ENDPOINT_NAME = "Worker"

# Start or stop work: only from the current master's connection (Deliver 2 of issue 11).
MASTER_ONLY_MESSAGES: tuple[type, ...] = (LaunchExecutor, KillExecutor, LaunchDriver,
                                          KillDriver, ApplicationFinished, DecommissionWorker)
MASTER_ENDPOINT_NAME = "Master"
RESEND_SLACK_S = 10.0   # driver reports this long before a lost connection may be lost too
# What only the active master may tell a worker: refused from an older leadership epoch.
_FENCED_MESSAGES = (RegisteredWorker, ReconnectWorker, MasterChanged, LaunchExecutor,
                    KillExecutor, ApplicationFinished, LaunchDriver, KillDriver,
                    DecommissionWorker)

# Spark's Worker companion constants (§4.2)
FUZZ_MULTIPLIER_INTERVAL_LOWER_BOUND = 0.500
INITIAL_INTERVAL_BASE = 10   # seconds, times FUZZ, rounded
PROLONGED_INTERVAL_BASE = 60


# ---------------------------------------------------------------------------------------------
# Pure helpers
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


def _java_round(x: float) -> int:
    """Scala's math.round: half up (Python's round() is half-to-even)."""
    import math
    return int(math.floor(x + 0.5))


def registration_intervals(fuzz: float, scale: float = 1.0) -> tuple[float, float]:
    """(INITIAL, PROLONGED) retry intervals in seconds: round(10*fuzz), round(60*fuzz)
    (5-15 s and 30-90 s), multiplied by spark.ember.worker.registrationIntervalScale."""
    return (_java_round(INITIAL_INTERVAL_BASE * fuzz) * scale,
            _java_round(PROLONGED_INTERVAL_BASE * fuzz) * scale)


class RetryAction(enum.Enum):
    """What one tick of the registration retry timer does (Worker.reregisterWithMaster)."""
    CANCEL = "cancel"                       # registered meanwhile: stop the timer
    RETRY = "retry"                         # try again, keep the interval
    RETRY_AND_PROLONG = "retry_and_prolong" # try again, then switch to PROLONGED
    GIVE_UP = "give_up"                     # "All masters are unresponsive! Giving up."


def reregister_action(attempt: int, registered: bool, initial_retries: int = 6,
                      max_retries: int = 16) -> RetryAction:
    """The decision of retry tick number `attempt` (1-based, counted since the last
    registration round began): retries 1..max_retries happen, the one numbered
    initial_retries switches the timer to the prolonged interval, the next tick gives up."""
    if registered:
        return RetryAction.CANCEL
    if attempt > max_retries:
        return RetryAction.GIVE_UP
    if attempt == initial_retries:
        return RetryAction.RETRY_AND_PROLONG
    return RetryAction.RETRY


def registration_timeline(initial: float, prolonged: float, initial_retries: int = 6,
                          max_retries: int = 16) -> tuple[list[float], float]:
    """For a worker that never reaches a master: the times (s after start) of the retries,
    and the time it gives up. With Spark's defaults at FUZZ=1: retries at 10..60 then every
    60 s up to 660, give-up at 720 (= 6 x INITIAL + 11 x PROLONGED)."""
    t, period, retries, attempt = 0.0, initial, [], 0
    while True:
        t += period
        attempt += 1
        action = reregister_action(attempt, False, initial_retries, max_retries)
        if action is RetryAction.GIVE_UP:
            return retries, t
        retries.append(t)
        if action is RetryAction.RETRY_AND_PROLONG:
            period = prolonged


def parse_standalone_master_urls(url: str) -> list[RpcAddress]:
    """Spark's Utils.parseStandaloneMasterUrls: ``spark://h1:p1,h2:p2`` -> one address per
    master. ValueError("Invalid master URL: ...") for anything else."""
    if not isinstance(url, str) or not url.startswith("spark://"):
        raise ValueError(f"Invalid master URL: {url}")
    parts = url[len("spark://"):].split(",")
    return [RpcAddress.from_spark_url("spark://" + p) for p in parts]


def trim_finished(finished: "OrderedDict[str, Any]", retained: int) -> None:
    """Spark's trimFinishedExecutorsIfNecessary: past `retained`, drop the oldest
    max(n/10, 1) entries at once (so trimming is not paid on every executor exit)."""
    if len(finished) > retained:
        for _ in range(max(len(finished) // 10, 1)):
            finished.popitem(last=False)


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
# The endpoint
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
                 shuffle_service: Optional[ExternalShuffleService] = None) -> None:
        self.host = host
        self.shuffle_service = shuffle_service
        self.port = port
        self.cores = cores
        self.memory = memory
        self.master_addresses = list(master_addresses)
        self.work_dir = os.path.abspath(work_dir)
        self.web_ui_url = web_ui_url
        self.conf = dict(conf)
        self.wconf = worker_conf if worker_conf is not None else WorkerConf.from_conf(conf)
        self._on_exit = on_exit
        self._auth_secret = auth_secret
        self.worker_id = worker_id or generate_worker_id(host, port,
                                                         pattern=self.wconf.id_pattern)
        self.fuzz = registration_fuzz() if fuzz is None else fuzz
        self.initial_interval, self.prolonged_interval = registration_intervals(
            self.fuzz, self.wconf.registration_interval_scale)

        self.master: Optional[RpcEndpointRef] = None
        self.master_address_to_connect: Optional[RpcAddress] = None
        self.active_master_url = ""
        self.active_master_web_ui_url = ""
        self.registered = False
        self.connected = False
        self.last_heartbeat_ms = 0   # epoch ms of the last heartbeat sent while connected
        self.decommissioned = False
        self.stopped = False
        self.exit_code: Optional[int] = None

        self.executors: dict[str, ExecutorRunner] = {}
        self.finished_executors: OrderedDict[str, ExecutorRunner] = OrderedDict()
        self.finished_apps: set[str] = set()
        self.drivers: dict[str, DriverRunner] = {}
        self.finished_drivers: OrderedDict[str, DriverRunner] = OrderedDict()
        self.app_directories: dict[str, list[str]] = {}
        self.fence = EpochFence()
        # Driver fencing (SPARK-19900): drivers die here before a master relaunches them.
        self.lease = MasterLease(self.wconf.master_lease)
        self._lease_timer: Optional[Cancellable] = None
        self.lease_killed: set[str] = set()
        # Final states of drivers that ended here (monotonic time, report), and since when a
        # report may have been lost (the master's connection dropped): re-sent on reconnect.
        self.driver_final_states: OrderedDict[str, tuple[float, DriverStateChanged]] = \
            OrderedDict()
        self._resend_since: Optional[float] = None
        self.cores_used = 0
        self.memory_used = 0
        # custom resources (spark.worker.resource.*): all addresses, and those in use
        self.resources: dict[str, ResourceInformation] = dict(resources or {})
        self.resources_used: dict[str, list[str]] = {n: [] for n in self.resources}

        self._connection_attempt_count = 0
        self._registration_generation = 0   # bumping it cancels in-flight attempts
        self._retry_timer: Optional[Cancellable] = None
        self._heartbeat_timer: Optional[Cancellable] = None
        self._cleanup_timer: Optional[Cancellable] = None
        self._sync_failures: dict[str, int] = {}
        self.pending_syncs: set[concurrent.futures.Future] = set()

    # -- properties --------------------------------------------------------------------------

    @property
    def worker_url(self) -> str:
        """``spark://Worker@host:port`` (RpcEndpointAddress.toString)."""
        return f"spark://{ENDPOINT_NAME}@{self.rpc_env.address.host_port}"

    @property
    def cores_free(self) -> int:
        return self.cores - self.cores_used

    @property
    def memory_free(self) -> int:
        return self.memory - self.memory_used

    # -- lifecycle ---------------------------------------------------------------------------

    def on_start(self) -> None:
        log.info("Starting Spark worker %s:%d with %d cores, %s RAM", self.host, self.port,
                 self.cores, megabytes_to_string(self.memory))
        log.info("Worker id %s, work dir %s, web UI at %s", self.worker_id, self.work_dir,
                 self.web_ui_url)
        self._register_with_master()

    def on_stop(self) -> None:
        self.stopped = True
        self._cancel_last_registration_retry()
        for t in (self._heartbeat_timer, self._cleanup_timer):
            if t is not None:
                t.cancel()
        self.kill_all_executors(ExecutorState.KILLED, None)
        self.kill_all_drivers()

    def _exit(self, code: int) -> None:
        """Spark's System.exit: stop trying and let the daemon shut the process down."""
        if self.exit_code is None:
            self.exit_code = code
        self._cancel_last_registration_retry()
        if self._on_exit is not None:
            self._on_exit(code)

    # -- registration (§4.2) -----------------------------------------------------------------

    def _register_with_master(self) -> None:
        if self._retry_timer is not None:
            log.info("Not spawning another attempt to register with the master, since there "
                     "is an attempt scheduled already.")
            return
        if self.stopped:
            return
        self.registered = False
        self._try_register_all_masters()
        self._connection_attempt_count = 0
        self._retry_timer = self.rpc_env.schedule_periodic(
            self.initial_interval, self.initial_interval, self._reregister_with_master)

    def _try_register_all_masters(self) -> None:
        self._registration_generation += 1
        for address in self.master_addresses:
            self._send_register(address, self._registration_generation)

    def _send_register(self, address: RpcAddress, generation: int) -> None:
        """Spark's setupEndpointRef + sendRegisterMessageToMaster, without a blocking
        thread: verify that "Master" exists at `address`, then send RegisterWorker."""
        log.info("Connecting to master %s...", address.host_port)
        fut = self.rpc_env.setup_endpoint_ref_async(address, MASTER_ENDPOINT_NAME,
                                                    self.wconf.ask_timeout)
        fut.add_done_callback(
            lambda f: self.rpc_env.call_soon(self._on_master_ref, f, address, generation))

    def _on_master_ref(self, f: concurrent.futures.Future, address: RpcAddress,
                       generation: int) -> None:
        if generation != self._registration_generation or self.stopped:
            return   # cancelled: registered meanwhile, or a newer round started
        exc = f.exception()
        if exc is not None:
            log.warning("Failed to connect to master %s: %s", address.host_port, exc)
            return
        master: RpcEndpointRef = f.result()
        master.send(RegisterWorker(self.worker_id, self.host, self.port, self.self_ref,
                                   self.cores, self.memory, self.web_ui_url, address,
                                   dict(self.resources)))

    def _cancel_last_registration_retry(self) -> None:
        self._registration_generation += 1
        if self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = None

    def _reregister_with_master(self) -> None:
        self._connection_attempt_count += 1
        n = self._connection_attempt_count
        action = reregister_action(n, self.registered, self.wconf.initial_registration_retries,
                                   self.wconf.max_registration_retries)
        if action is RetryAction.CANCEL:
            self._cancel_last_registration_retry()
            return
        if action is RetryAction.GIVE_UP:
            log.error("All masters are unresponsive! Giving up.")
            self._exit(1)
            return
        log.info("Retrying connection to master (attempt # %d)", n)
        if self.master is not None:
            # Registered before and lost the connection: only that master (SPARK-4592).
            self._registration_generation += 1
            address = (self.master_address_to_connect
                       if self.wconf.prefer_configured_master_address
                       and self.master_address_to_connect is not None
                       else self.master.address)
            self._send_register(address, self._registration_generation)
        else:
            self._try_register_all_masters()
        if action is RetryAction.RETRY_AND_PROLONG and self._retry_timer is not None:
            self._retry_timer.cancel()
            self._retry_timer = self.rpc_env.schedule_periodic(
                self.prolonged_interval, self.prolonged_interval, self._reregister_with_master)

    def _change_master(self, master: RpcEndpointRef, ui_url: str,
                       master_address: RpcAddress) -> None:
        self.active_master_url = master.address.to_spark_url()
        self.active_master_web_ui_url = ui_url
        self.master_address_to_connect = master_address
        self.master = master
        self.connected = True
        self._cancel_last_registration_retry()

    def _on_registered(self, m: RegisteredWorker) -> None:
        url = (m.masterAddress.to_spark_url() if self.wconf.prefer_configured_master_address
               else m.master.address.to_spark_url())
        if m.duplicate:
            log.warning("Duplicate registration at master %s", url)
        log.info("Successfully registered with master %s", url)
        self.registered = True
        self.lease.renew(time.monotonic())
        self._change_master(m.master, m.masterWebUiUrl, m.masterAddress)
        self._resend_driver_final_states(m.master)
        if self._heartbeat_timer is None:
            self._heartbeat_timer = self.rpc_env.schedule_periodic(
                0.0, self.wconf.heartbeat_interval, self._send_heartbeat)
        if self._lease_timer is None:
            every = self.lease.check_interval
            self._lease_timer = self.rpc_env.schedule_periodic(every, every, self._check_lease)
        if self.wconf.cleanup_enabled and self._cleanup_timer is None:
            log.info("Worker cleanup enabled; old application directories will be deleted "
                     "in: %s", self.work_dir)
            self._cleanup_timer = self.rpc_env.schedule_periodic(
                self.wconf.cleanup_interval, self.wconf.cleanup_interval,
                self._work_dir_cleanup)
        m.master.send(WorkerLatestState(
            self.worker_id, [r.description() for r in self.executors.values()],
            list(self.drivers)))

    def _resend_driver_final_states(self, master: RpcEndpointRef) -> None:
        """Reports of drivers that ended since the connection to the master dropped (a few
        seconds of slack for reports sent just before the drop was noticed) may be lost:
        send them again, before anything that lets the master conclude a driver is gone."""
        since = self._resend_since
        self._resend_since = None
        if since is None:
            return
        for ended, report in self.driver_final_states.values():
            if ended >= since:
                log.info("Re-sending the final state %s of driver %s", report.state,
                         report.driverId)
                master.send(report)

    def _send_heartbeat(self) -> None:
        """Heartbeats go out while the connection to the master is up (a lost connection
        clears `connected` and stops them, so the metrics' heartbeat age then grows). Ember
        sends them as asks: the master's answer renews the lease from the moment the
        heartbeat was sent (a cut link or a frozen master leaves it unanswered)."""
        if self.connected and self.master is not None:
            sent = time.monotonic()
            master = self.master
            fut = master.ask(Heartbeat(self.worker_id, self.self_ref),
                             timeout=self.lease.lease_s)
            fut.add_done_callback(
                lambda f: self.rpc_env.call_soon(self._on_heartbeat_answer, f, sent, master))
            self.last_heartbeat_ms = int(time.time() * 1000)

    def _on_heartbeat_answer(self, f: concurrent.futures.Future, sent: float,
                             master: RpcEndpointRef) -> None:
        """Renew the lease only on the answer of the master this worker still follows, at
        an epoch no older than the newest seen (i12a's fence): a deposed leader that has not
        noticed yet must not keep this worker's drivers alive."""
        if f.cancelled() or f.exception() is not None or master is not self.master:
            return
        answer = f.result()
        if not isinstance(answer, HeartbeatResponse) or not answer.renewed:
            return
        if answer.epoch and answer.epoch < self.fence.newest:
            log.warning("Not renewing the master lease from a master at epoch %d: a master at "
                        "epoch %d has taken over", answer.epoch, self.fence.newest)
            return
        self.lease.renew(sent)

    def _check_lease(self) -> None:
        """Kill every driver here once no master answered for longer than the lease: a
        master that lost this worker relaunches its supervised drivers after that lease, so
        two copies never run at once. Reported (re-sent final states) on re-registration."""
        now = time.monotonic()
        if self.stopped or not self.lease.expired(now):
            return
        for driver_id, runner in list(self.drivers.items()):
            if driver_id in self.lease_killed:
                continue
            log.warning("No master has answered for %.1f s (spark.ember.worker.masterLease="
                        "%.1f s): killing driver %s, which a master may relaunch elsewhere",
                        self.lease.silent_for(now), self.lease.lease_s, driver_id)
            self.lease_killed.add(driver_id)
            if self._resend_since is None:
                self._resend_since = now
            runner.kill(fence=True)

    def _send_to_master(self, msg: Any) -> None:
        if self.master is not None:
            self.master.send(msg)
        else:
            log.warning("Dropping %s because the connection to master has not yet been "
                        "established", msg)

    def on_disconnected(self, remote: RpcAddress) -> None:
        if self.stopped:
            return
        if ((self.master is not None and self.master.address == remote)
                or self.master_address_to_connect == remote):
            log.info("%s Disassociated !", remote)
            log.error("Connection to master failed! Waiting for master to reconnect...")
            self.connected = False
            if self._resend_since is None:
                self._resend_since = time.monotonic() - RESEND_SLACK_S
            self._register_with_master()

    # -- messages ----------------------------------------------------------------------------

    def _app_credential(self, scope: str) -> Optional[str]:
        """What a driver or executor of application `scope` gets instead of the cluster
        secret: a credential derived for that application only."""
        if not self._auth_secret:
            return None
        return app_credential(self._auth_secret.encode("utf-8"), scope)

    def _from_current_master(self, msg: Any, sender: RpcAddress) -> bool:
        """Trust by channel: work is started or stopped only by the master this worker is
        registered with, on its own connection (never on a message's masterUrl field)."""
        peer = self.rpc_env.current_sender()
        if peer is not None and peer.local:
            return True     # this process itself
        if (peer is not None and peer.scope is None and self.master is not None
                and (peer.address == self.master.address
                     or peer.address == self.master_address_to_connect)):
            return True
        log.warning("Refusing %s from %s: only the current master (%s) may send it",
                    type(msg).__name__, sender,
                    self.master.address if self.master is not None else "none yet")
        return False

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        if self.stopped:
            return
        # authorization before the fence: a refused sender must not advance the epoch
        if isinstance(msg, MASTER_ONLY_MESSAGES) and not self._from_current_master(msg, sender):
            return
        if isinstance(msg, _FENCED_MESSAGES):
            refusal = self.fence.refusal(msg)
            if refusal is not None:
                log.warning("%s", refusal)
                return
        if isinstance(msg, RegisteredWorker):
            self._on_registered(msg)
        elif isinstance(msg, RegisterWorkerFailed):
            if not self.registered:
                log.error("Worker registration failed: %s", msg.message)
                self._exit(1)
        elif isinstance(msg, MasterInStandby):
            pass   # Master not yet ready.
        elif isinstance(msg, ReconnectWorker):
            log.info("Master with url %s requested this worker to reconnect.", msg.masterUrl)
            self._register_with_master()
        elif isinstance(msg, MasterChanged):
            self._on_master_changed(msg)
        elif isinstance(msg, LaunchExecutor):
            self._on_launch_executor(msg)
        elif isinstance(msg, KillExecutor):
            self._on_kill_executor(msg)
        elif isinstance(msg, ApplicationFinished):
            self._on_application_finished(msg.id)
        elif isinstance(msg, LaunchDriver):
            self._on_launch_driver(msg)
        elif isinstance(msg, KillDriver):
            self._on_kill_driver(msg.driverId)
        elif isinstance(msg, DecommissionWorker):
            self._decommission_self()
        elif isinstance(msg, WorkerDecommissionSigReceived) and sender == self.rpc_env.address:
            self._decommission_self()
            self._send_to_master(WorkerDecommissioning(self.worker_id, self.self_ref))
        else:
            log.warning("Ignoring unexpected message %s from %s", type(msg).__name__, sender)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, RequestWorkerState):
            context.reply(self.state_response())
        elif isinstance(msg, RequestDriverLog):
            self._on_request_driver_log(msg, context)
        else:
            context.send_failure(ValueError(f"Unsupported message {type(msg).__name__}"))

    def state_response(self) -> WorkerStateResponse:
        """Spark's WorkerStateResponse (the web UI's and /json's view)."""
        return WorkerStateResponse(
            self.host, self.port, self.worker_id,
            [r.summary() for r in self.executors.values()],
            [r.summary() for r in self.finished_executors.values()],
            [r.summary() for r in self.drivers.values()],
            [r.summary() for r in self.finished_drivers.values()], self.active_master_url,
            self.cores, self.memory, self.cores_used, self.memory_used,
            self.active_master_web_ui_url, dict(self.resources), self._resources_used_info(),
            self.registered, self.last_heartbeat_ms)

    def _resources_used_info(self) -> dict[str, ResourceInformation]:
        return {n: ResourceInformation(n, list(a)) for n, a in self.resources_used.items()}

    def _acquire_resources(self, allocated: Mapping[str, ResourceInformation]) -> None:
        """Mark the addresses the master assigned to an executor or driver as in use."""
        for name, info in (allocated or {}).items():
            used = self.resources_used.setdefault(name, [])
            used.extend(a for a in info.addresses if a not in used)

    def _release_resources(self, allocated: Mapping[str, ResourceInformation]) -> None:
        for name, info in (allocated or {}).items():
            used = self.resources_used.get(name, [])
            for a in info.addresses:
                if a in used:
                    used.remove(a)

    def _on_master_changed(self, m: MasterChanged) -> None:
        log.info("Master has changed, new master is at %s", m.master.address.to_spark_url())
        self._change_master(m.master, m.masterWebUiUrl, m.master.address)
        self.registered = True
        self._resend_driver_final_states(m.master)
        executors = [WorkerExecutorStateResponse(r.description(), dict(r.resources))
                     for r in self.executors.values()]
        drivers = [WorkerDriverStateResponse(r.driver_id, dict(r.resources))
                   for r in self.drivers.values()]
        m.master.send(WorkerSchedulerStateResponse(self.worker_id, executors, drivers))

    def _decommission_self(self) -> None:
        if self.wconf.decommission_enabled and not self.decommissioned:
            self.decommissioned = True
            log.info("Decommission worker %s.", self.worker_id)
        elif self.decommissioned:
            log.warning("Worker %s already started decommissioning.", self.worker_id)
        else:
            log.warning("Receive decommission request, but decommission feature is disabled.")

    # -- executors (§4.3) --------------------------------------------------------------------

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

    def _on_launch_executor(self, m: LaunchExecutor) -> None:
        if m.masterUrl != self.active_master_url:
            log.warning("Invalid Master (%s) attempted to launch executor.", m.masterUrl)
            return
        if self.decommissioned:
            log.warning("Asked to launch an executor while decommissioned. Not launching "
                        "executor.")
            return
        full_id = f"{m.appId}/{m.execId}"
        if full_id in self.executors:
            log.warning("Asked to launch executor %s, which is already running here", full_id)
            return
        try:
            log.info("Asked to launch executor %s for %s", full_id, m.appDesc.name)
            executor_dir = self._executor_dir(m.appId, m.execId)
            app_dirs = self._app_local_dirs(m.appId)
            runner = ExecutorRunner(
                m.appId, m.execId, m.appDesc, m.cores, m.memory, worker_id=self.worker_id,
                host=self.host, worker_url=self.worker_url, web_ui_url=self.web_ui_url,
                executor_dir=executor_dir, app_local_dirs=app_dirs,
                report=self._report_from_runner,
                auth_secret=self._app_credential(
                    m.appDesc.command.environment.get(SCOPE_ENV) or m.appId),
                rp_id=m.rpId, resources=m.resources,
                terminate_timeout=self.wconf.executor_terminate_timeout,
                shuffle_service_port=self.shuffle_service.bound_port
                if self.shuffle_service is not None else None)
            self.executors[full_id] = runner
            runner.start()
            self.cores_used += m.cores
            self.memory_used += m.memory
            self._acquire_resources(m.resources)
        except Exception as e:
            log.error("Failed to launch executor %s for %s: %s", full_id, m.appDesc.name, e)
            runner_ = self.executors.pop(full_id, None)
            if runner_ is not None:
                runner_.kill()
            self._sync_executor_state_with_master(ExecutorStateChanged(
                m.appId, m.execId, ExecutorState.FAILED, f"{type(e).__name__}: {e}", None))

    def _report_from_runner(self, m: ExecutorStateChanged) -> None:
        """Called on a runner thread: hop onto the loop (the one writer of our state)."""
        self.rpc_env.call_soon(self._handle_executor_state_changed, m)

    def _handle_executor_state_changed(self, m: ExecutorStateChanged) -> None:
        self._sync_executor_state_with_master(m)
        if not m.state.isFinished():
            return
        full_id = f"{m.appId}/{m.execId}"
        extra = (f" message {m.message}" if m.message is not None else "") + (
            f" exitStatus {m.exitStatus}" if m.exitStatus is not None else "")
        runner = self.executors.pop(full_id, None)
        if runner is not None:
            log.info("Executor %s finished with state %s%s", full_id, m.state, extra)
            self.finished_executors[full_id] = runner
            trim_finished(self.finished_executors, self.wconf.retained_executors)
            self.cores_used -= runner.cores
            self.memory_used -= runner.memory
            self._release_resources(runner.resources)
        else:
            log.info("Unknown Executor %s finished with state %s%s", full_id, m.state, extra)
        self._maybe_cleanup_application(m.appId)

    def _sync_executor_state_with_master(self, m: ExecutorStateChanged) -> None:
        """ExecutorStateChanged is an ask (SPARK-34245): a lost state would leak the
        executor on the master. Retry up to spark.worker.executorStateSync.maxAttempts,
        waiting askTimeout between non-timeout failures, then exit(1)."""
        master = self.master
        if master is None:
            log.warning("Dropping %s because the connection to master has not yet been "
                        "established", m)
            return
        full_id = f"{m.appId}/{m.execId}"
        fut = master.ask(m)
        self.pending_syncs.add(fut)

        def done(f: concurrent.futures.Future) -> None:
            self.pending_syncs.discard(f)
            exc = f.exception()
            if exc is None:
                self._sync_failures.pop(full_id, None)
                return
            if self.stopped:
                return
            failures = self._sync_failures.get(full_id, 0) + 1
            max_attempts = self.wconf.executor_state_sync_max_attempts
            if failures < max_attempts:
                log.error("Failed to send %s to Master %s, will retry (%d/%d): %s", m, master,
                          failures, max_attempts, exc)
                self._sync_failures[full_id] = failures
                delay = 0.0 if isinstance(exc, RpcTimeoutError) else self.wconf.ask_timeout
                self.rpc_env.schedule(delay, self._sync_executor_state_with_master, m)
            else:
                log.error("Failed to send %s to Master %s for %d times. Giving up.", m,
                          master, max_attempts)
                self._exit(1)
        fut.add_done_callback(lambda f: self.rpc_env.call_soon(done, f))

    def _on_kill_executor(self, m: KillExecutor) -> None:
        if m.masterUrl != self.active_master_url:
            log.warning("Invalid Master (%s) attempted to kill executor %s", m.masterUrl,
                        m.execId)
            return
        full_id = f"{m.appId}/{m.execId}"
        runner = self.executors.get(full_id)
        if runner is None:
            log.info("Asked to kill unknown executor %s", full_id)
            return
        log.info("Asked to kill executor %s", full_id)
        runner.kill()

    def _on_application_finished(self, app_id: str) -> None:
        self.finished_apps.add(app_id)
        for runner in list(self.executors.values()):
            if runner.app_id == app_id:
                log.info("Killing executor %s of finished application %s", runner.full_id,
                         app_id)
                runner.kill()
        self._maybe_cleanup_application(app_id)

    def _maybe_cleanup_application(self, app_id: str) -> None:
        if app_id not in self.finished_apps:
            return
        if any(r.app_id == app_id for r in self.executors.values()):
            return
        self.finished_apps.discard(app_id)
        if self.shuffle_service is not None:
            self.shuffle_service.application_removed(app_id)
        dirs = self.app_directories.pop(app_id, None)
        if dirs:
            log.info("Cleaning up local directories for application %s", app_id)
            try:
                self.rpc_env.run_in_executor(_delete_dirs, dirs)
            except Exception:
                _delete_dirs(dirs)

    def kill_all_executors(self, state: ExecutorState = ExecutorState.KILLED,
                           message: Optional[str] = None) -> list[ExecutorRunner]:
        """Ask every running executor to die (non-blocking); returns the runners so a
        caller off the loop can join them."""
        runners = list(self.executors.values())
        for r in runners:
            r.kill(state, message)
        return runners

    # -- drivers (§4.4) ----------------------------------------------------------------------

    def _on_launch_driver(self, m: LaunchDriver) -> None:
        if m.driverId in self.drivers:
            log.warning("Asked to launch driver %s, which is already running here", m.driverId)
            return
        log.info("Asked to launch driver %s", m.driverId)
        desc = m.driverDesc
        try:
            runner = DriverRunner(
                m.driverId, desc, work_dir=self.work_dir, worker_url=self.worker_url,
                host=self.host, web_ui_url=self.web_ui_url, report=self._report_from_driver,
                fetch_upload=self._fetch_app_resource, worker_conf=self.conf,
                auth_secret=self._app_credential(m.driverId), attempt=m.attempt,
                resources=m.resources)
            self.drivers[m.driverId] = runner
            runner.start()
            self.cores_used += desc.cores
            self.memory_used += desc.mem
            self._acquire_resources(m.resources)
        except Exception as e:
            log.error("Failed to launch driver %s: %s", m.driverId, e)
            self.drivers.pop(m.driverId, None)
            self._send_to_master(DriverStateChanged(m.driverId, DriverState.ERROR,
                                                    f"{type(e).__name__}: {e}", None,
                                                    m.attempt))

    def _fetch_app_resource(self, url: str) -> AppResourceData:
        """For DriverRunner threads (never the loop: it blocks): an `ember-upload://` URL's
        bytes from the active master."""
        master = self.master
        if master is None:
            raise ConnectionError("the connection to the master has not yet been established")
        return master.ask_sync(FetchAppResource(url), timeout=self.wconf.ask_timeout)

    def _report_from_driver(self, m: DriverStateChanged) -> None:
        """Called on a runner thread: hop onto the loop (the one writer of our state)."""
        self.rpc_env.call_soon(self._handle_driver_state_changed, m)

    def _handle_driver_state_changed(self, m: DriverStateChanged) -> None:
        """Spark's handleDriverStateChanged: log, forward, release the driver's share. A
        driver this worker killed when its master lease ran out is reported RELAUNCHING
        (Ember): it is gone, and a supervised one may run again at once."""
        if m.driverId in self.lease_killed and m.state == DriverState.KILLED:
            self.lease_killed.discard(m.driverId)
            m = replace(m, state=DriverState.RELAUNCHING, exception=(
                f"Killed by worker {self.worker_id}: no master answered within "
                f"spark.ember.worker.masterLease ({self.lease.lease_s:g} s)"))
        if m.state == DriverState.ERROR:
            log.warning("Driver %s failed with unrecoverable exception: %s", m.driverId,
                        m.exception)
        elif m.state == DriverState.FAILED:
            log.warning("Driver %s exited with failure", m.driverId)
        elif m.state == DriverState.FINISHED:
            log.info("Driver %s exited successfully", m.driverId)
        elif m.state == DriverState.KILLED:
            log.info("Driver %s was killed by user", m.driverId)
        else:
            log.info("Driver %s changed state to %s", m.driverId, m.state)
        self._send_to_master(m)
        if m.state in (DriverState.FINISHED, DriverState.FAILED, DriverState.KILLED,
                       DriverState.ERROR, DriverState.RELAUNCHING):
            self.driver_final_states[m.driverId] = (time.monotonic(), m)
            trim_finished(self.driver_final_states, self.wconf.retained_drivers)
        runner = self.drivers.pop(m.driverId, None)
        if runner is not None:
            self.finished_drivers[m.driverId] = runner
            trim_finished(self.finished_drivers, self.wconf.retained_drivers)
            self.cores_used -= runner.cores
            self.memory_used -= runner.memory
            self._release_resources(runner.resources)

    def _on_kill_driver(self, driver_id: str) -> None:
        runner = self.drivers.get(driver_id)
        if runner is None:
            log.error("Asked to kill unknown driver %s", driver_id)
            return
        log.info("Asked to kill driver %s", driver_id)
        runner.kill()

    def kill_all_drivers(self) -> list[DriverRunner]:
        """Ask every running driver to die (non-blocking); returns the runners so a caller
        off the loop can join them."""
        runners = list(self.drivers.values())
        for r in runners:
            r.kill()
        return runners

    def _on_request_driver_log(self, m: RequestDriverLog, context: RpcCallContext) -> None:
        known = m.driverId in self.drivers or m.driverId in self.finished_drivers
        path, error = driver_log_path(self.work_dir, m.driverId, m.logType, known)
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

    def _work_dir_cleanup(self) -> None:
        active = {r.app_id for r in self.executors.values()} | set(self.drivers)
        work_dir, ttl = self.work_dir, self.wconf.app_data_ttl

        def clean() -> None:
            try:
                for d in stale_app_dirs(work_dir, active, ttl):
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
        try:
            from ember.rpc.config import RpcConf
            rpc_conf = RpcConf.from_conf(s.conf)
            if rpc_conf.authenticate and rpc_conf.secret:
                auth_secret = rpc_conf.secret.decode("utf-8")
            self.env = RpcEnv.create(SYSTEM_NAME, s.host, s.port, s.conf)
        except (ValueError, OSError) as e:
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
                shuffle_service=self.shuffle_service)
            self.env.admit_app_scopes(any_scope=True)   # its drivers' and executors'
            self.env.setup_endpoint(ENDPOINT_NAME, self.worker)
        except Exception as e:
            if self.ui is not None:
                self.ui.stop()
            if self.shuffle_service is not None:
                self.shuffle_service.stop()
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
            def kill_all() -> tuple[list[ExecutorRunner], list[DriverRunner]]:
                return (worker.kill_all_executors(ExecutorState.FAILED, "Worker shutting down"),
                        worker.kill_all_drivers())
            try:
                runners, drivers = self.run_on_loop(kill_all)
            except Exception:
                runners, drivers = list(worker.executors.values()), list(worker.drivers.values())
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
        if env is not None:
            env.shutdown()
            env.await_termination(10)
        if worker is not None:
            _delete_dirs([d for dirs in worker.app_directories.values() for d in dirs])
            worker.app_directories.clear()
        self._exited.set()
