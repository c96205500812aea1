"""StandaloneAppClient: the driver's link to the master(s) for one application.

Registers the application with every master URL in parallel, retries every 20 s up to 3
times (Spark's REGISTRATION_TIMEOUT_SECONDS / REGISTRATION_RETRIES), follows MasterChanged,
and turns master messages into listener calls (connected, executor added/removed, dead).

Beyond Spark, two things make a failover safe for the driver:
- fencing: messages from a master carry its leadership epoch; one older than the newest
  seen is refused (a deposed master cannot remove the application or hand out executors);
- a lost master connection is watched (Spark waits forever, and a master restarted without
  its state leaves the driver hanging): until a master says MasterChanged, every master URL
  is asked every second whether it knows the application (RequestAppStatus). An ALIVE
  master that does not know it ends the application ("Master removed our application: ...");
  one that knows it becomes the master again; when none answers as ALIVE within
  spark.ember.appClient.reconnectTimeout (120 s) the application ends with Spark's "All
  masters are unresponsive! Giving up.".
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Optional, Protocol

from ember.deploy.fencing import EpochFence
from ember.deploy.messages import (ApplicationDescription, ApplicationRemoved,
                                   AppStatusResponse, ExecutorAdded, ExecutorState,
                                   ExecutorUpdated, KillExecutors, MasterChangeAcknowledged,
                                   MasterChanged, RecoveryState, RegisterApplication,
                                   RegisteredApplication, RequestAppStatus, RequestExecutors,
                                   UnregisterApplication, WorkerRemoved)
from ember.rpc import RpcAddress, RpcAuthenticationError, RpcEndpoint, RpcEnv

log = logging.getLogger("ember.deploy.client")

REGISTRATION_TIMEOUT_SECONDS = 20
REGISTRATION_RETRIES = 3
DEFAULT_RECONNECT_TIMEOUT_S = 120.0
RECONNECT_PROBE_INTERVAL_S = 1.0
_FINISHED = {"KILLED", "FAILED", "LOST", "EXITED"}


class AppClientListener(Protocol):
    def connected(self, app_id: str) -> None: ...
    def disconnected(self) -> None: ...
    def dead(self, reason: str) -> None: ...
    def executor_added(self, full_id: str, worker_id: str, host_port: str, cores: int,
                       memory: int) -> None: ...
    def executor_removed(self, full_id: str, message: str, exit_status: int | None,
                         worker_host: str | None) -> None: ...
    def executor_decommissioned(self, full_id: str, message: str,
                                worker_host: str | None) -> None: ...
    def worker_removed(self, worker_id: str, host: str, message: str) -> None: ...


def parse_master_urls(master: str) -> list[RpcAddress]:
    """spark://h1:p1,h2:p2 -> addresses (Utils.parseStandaloneMasterUrls), each once: a
    master named twice must not be asked twice (two RequestSubmitDrivers would run the
    driver twice)."""
    if not master.startswith("spark://"):
        raise ValueError(f"Invalid master URL: {master}")
    addresses = [RpcAddress.from_spark_url("spark://" + hp.strip())
                 for hp in master[len("spark://"):].split(",") if hp.strip()]
    return list(dict.fromkeys(addresses))


class StandaloneAppClient(RpcEndpoint):
    def __init__(self, masters: list[RpcAddress], app_desc: ApplicationDescription,
                 listener: AppClientListener,
                 reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S) -> None:
        self.masters = masters
        self.app_desc = app_desc
        self.listener = listener
        self.app_id: str | None = None
        self.master_ref: Any = None
        self.registered = threading.Event()
        self.failed: str | None = None
        self.attempts = 0
        self._retry: Any = None
        self._auth_failures: set[RpcAddress] = set()
        self.already_dead = False
        self.fence = EpochFence()
        self.reconnect_timeout = reconnect_timeout
        self._reconnect_deadline: Optional[float] = None   # monotonic; set while watching
        self._probe: Any = None

    def on_start(self) -> None:
        self._register()

    def _register(self) -> None:
        if self.registered.is_set() or self.already_dead:
            return
        if self.attempts >= REGISTRATION_RETRIES:
            self._mark_dead("All masters are unresponsive! Giving up.")
            return
        self.attempts += 1
        for addr in self.masters:
            log.info("Connecting to master %s...", addr.to_spark_url())
            check = self.rpc_env.setup_endpoint_ref_async(addr, "Master")
            check.add_done_callback(lambda f, addr=addr: self._connected_to(f, addr))
        self._retry = self.rpc_env.schedule(REGISTRATION_TIMEOUT_SECONDS, self._register)

    def _connected_to(self, check: Any, addr: RpcAddress) -> None:
        """Register once the master's endpoint answers; a refused authentication is final
        (retrying cannot fix a wrong secret), other errors wait for the next attempt."""
        exc = check.exception()
        if exc is None:
            check.result().send(RegisterApplication(self.app_desc, self.self_ref))
        elif isinstance(exc, RpcAuthenticationError):
            self._auth_failures.add(addr)
            if self._auth_failures >= set(self.masters):
                self._mark_dead(f"Authentication with master {addr.to_spark_url()} failed: "
                                f"{exc}. Set spark.authenticate.secret to the cluster's secret.")
        else:
            log.warning("Failed to connect to master %s: %s", addr.host_port, exc)

    def _mark_dead(self, reason: str) -> None:
        if not self.already_dead:
            self.already_dead = True
            self.failed = reason
            log.error("Application has been killed. Reason: %s", reason)
            self.registered.set()
            self.listener.dead(reason)

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        if self.already_dead:
            return
        peer = self.rpc_env.current_sender()
        if (peer is not None and peer.scope is not None and self.rpc_env.scope is None):
            # this driver holds the cluster secret, so the master connects as the cluster:
            # a connection with an application's credential (an executor) is not the master.
            # Checked before the fence, so a refused sender cannot advance the epoch.
            log.warning("Refusing %s from %s: it authenticated as application %r, not as the "
                        "master", type(msg).__name__, sender, peer.scope)
            return
        refusal = self.fence.refusal(msg)
        if refusal is not None:
            log.warning("%s", refusal)
            return
        if isinstance(msg, RegisteredApplication):
            self.app_id = msg.appId
            self.master_ref = msg.master
            # a client-mode driver holds the cluster secret: admit its own executors, whose
            # credentials the workers derive for this app id (and no other app's)
            self.rpc_env.admit_app_scopes(msg.appId)
            log.info("Connected to Spark cluster with app ID %s", msg.appId)
            if self._retry is not None:
                self._retry.cancel()
            self.registered.set()
            self.listener.connected(msg.appId)
        elif isinstance(msg, ApplicationRemoved):
            self._mark_dead(f"Master removed our application: {msg.message}")
        elif isinstance(msg, ExecutorAdded):
            full_id = f"{self.app_id}/{msg.id}"
            log.info("Granted executor ID %s on hostPort %s with %d core(s), %d MiB RAM",
                     full_id, msg.hostPort, msg.cores, msg.memory)
            self.listener.executor_added(str(msg.id), msg.workerId, msg.hostPort, msg.cores,
                                         msg.memory)
        elif isinstance(msg, ExecutorUpdated):
            state = msg.state.name if isinstance(msg.state, ExecutorState) else str(msg.state)
            message = msg.message or ""
            log.info("Executor updated: %s/%s is now %s%s", self.app_id, msg.id, state,
                     f" ({message})" if message else "")
            if state in _FINISHED:
                self.listener.executor_removed(str(msg.id), f"{state}: {message}".rstrip(": "),
                                               msg.exitStatus, msg.workerHost)
            elif state == "DECOMMISSIONED":
                self.listener.executor_decommissioned(str(msg.id), message, msg.workerHost)
        elif isinstance(msg, WorkerRemoved):
            log.info("Master removed worker %s: %s", msg.id, msg.message)
            self.listener.worker_removed(msg.id, msg.host, msg.message)
        elif isinstance(msg, MasterChanged):
            log.info("Master has changed, new master is at %s", msg.master.address.to_spark_url())
            self.master_ref = msg.master
            self._stop_watching()
            msg.master.send(MasterChangeAcknowledged(self.app_id or ""))
        else:
            log.warning("Unexpected message from master: %r", type(msg).__name__)

    def on_disconnected(self, remote: RpcAddress) -> None:
        if self.master_ref is not None and remote == self.master_ref.address:
            log.warning("Connection to %s failed; waiting for master to reconnect...",
                        remote.host_port)
            self.listener.disconnected()
            if self.app_id is not None and not self.already_dead \
                    and self._reconnect_deadline is None:
                self._reconnect_deadline = time.monotonic() + self.reconnect_timeout
                self._probe = self.rpc_env.schedule(RECONNECT_PROBE_INTERVAL_S,
                                                    self._probe_masters)

    # -- after losing the master ------------------------------------------------------------

    def _stop_watching(self) -> None:
        self._reconnect_deadline = None
        if self._probe is not None:
            self._probe.cancel()
            self._probe = None

    def _probe_masters(self) -> None:
        """One round: ask every master about our application; decide on the answers."""
        if self._reconnect_deadline is None or self.already_dead:
            return
        if time.monotonic() >= self._reconnect_deadline:
            self._stop_watching()
            self._mark_dead("All masters are unresponsive! Giving up.")
            return
        for addr in self.masters:
            check = self.rpc_env.setup_endpoint_ref_async(addr, "Master",
                                                          RECONNECT_PROBE_INTERVAL_S * 5)
            check.add_done_callback(lambda f: self.rpc_env.call_soon(self._ask_status, f))
        self._probe = self.rpc_env.schedule(RECONNECT_PROBE_INTERVAL_S, self._probe_masters)

    def _ask_status(self, check: Any) -> None:
        if check.exception() is not None or self._reconnect_deadline is None:
            return
        ref = check.result()
        ref.ask(RequestAppStatus(self.app_id or "")).add_done_callback(
            lambda f: self.rpc_env.call_soon(self._on_status, ref, f))

    def _on_status(self, ref: Any, fut: Any) -> None:
        if fut.exception() is not None or self._reconnect_deadline is None or self.already_dead:
            return
        status: AppStatusResponse = fut.result()
        if status.state != RecoveryState.ALIVE or not self.fence.admit(status.epoch):
            return   # standby, still recovering (MasterChanged will come), or deposed
        self._stop_watching()
        if status.found:
            log.info("Master %s still knows application %s", ref.address.to_spark_url(),
                     self.app_id)
            self.master_ref = ref
            self.listener.connected(self.app_id or "")
        else:
            self._mark_dead(f"Master removed our application: the master at "
                            f"{ref.address.to_spark_url()} does not know {self.app_id} (it "
                            "restarted without its state; see spark.deploy.recoveryMode)")

    def request_total_executors(self, totals: list[tuple[Any, int]]) -> bool:
        """Ask the master for these executor totals per profile (RequestExecutors); False
        while not connected. The answer only says whether the master knew the app."""
        if self.master_ref is None or self.app_id is None:
            return False
        fut = self.master_ref.ask(RequestExecutors(self.app_id, list(totals)))

        def done(f: Any) -> None:
            exc = f.exception()
            if exc is not None:
                log.warning("Failed to request executors from the master: %s", exc)
        fut.add_done_callback(done)
        return True

    def kill_executors(self, executor_ids: list[str]) -> bool:
        """Ask the master to kill these executors of ours (KillExecutors)."""
        if self.master_ref is None or self.app_id is None:
            return False
        fut = self.master_ref.ask(KillExecutors(self.app_id, list(executor_ids)))
        fut.add_done_callback(lambda f: f.exception() is not None and log.warning(
            "Failed to kill executors %s: %s", executor_ids, f.exception()))
        return True

    def stop(self) -> None:
        self._stop_watching()
        if self.master_ref is not None and self.app_id is not None:
            self.master_ref.send(UnregisterApplication(self.app_id))


def start_app_client(env: RpcEnv, masters: list[RpcAddress], desc: ApplicationDescription,
                     listener: AppClientListener,
                     reconnect_timeout: float = DEFAULT_RECONNECT_TIMEOUT_S
                     ) -> StandaloneAppClient:
    client = StandaloneAppClient(masters, desc, listener, reconnect_timeout)
    env.setup_endpoint("AppClient", client)
    return client
