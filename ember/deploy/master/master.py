"""The master daemon's I/O shell: `Master`, the RPC endpoint around `MasterState`.

Why a shell this thin: every decision of Spark's `Master` lives in the sans-I/O
`ember.deploy.master.state.MasterState`, where it is tested without sockets. This module only
turns what arrives over RPC (sends, asks, disconnections) and timer ticks into events, stamps
them with the wall clock, and carries the returned instructions out in order: send, reply,
log, arm a timer, exit. It runs on the RpcEnv's loop thread, one message at a time, so the
state needs no lock; the web UI (`http.py`) reads it only through an ask
(`RequestMasterState`), as Spark's MasterPage does.

Robustness (a bad message never takes the daemon down): the RPC layer already refuses
malformed frames, undecodable messages and unknown endpoint names; a handler that raises is
caught by `MasterState.handle` (the state is left as before the event, nothing it decided is
carried out); an instruction that cannot be carried out is logged; an ask is always answered
(a failure if nothing else), and the next message is served as usual.

`start_master` assembles a daemon the way Spark's `Master.startRpcEnvAndEndpoint` + `onStart`
do: RpcEnv "sparkMaster" (port retries in the RPC layer), the recovery engine and leader
election agent of spark.deploy.recoveryMode (persistence.py), the web UI (its own port
retries), the "Master" endpoint, then leadership - and returns once the election has begun
(NONE / FILESYSTEM: this master leads at once, ALIVE or RECOVERING; ZOOKEEPER: it may stay
STANDBY).

Recovery: when elected, the shell reads every record back (records.py turns them into fresh
objects bound to this RpcEnv) and feeds `BeginRecovery`; Persist / Unpersist instructions
become engine writes, carried out in order before the replies that follow them (so a
submission is durable before it is acknowledged). A write the state marked as gating a
reply (Persist.failure) that fails ends the batch: nothing after it is carried out and its
PersistFailed is fed back, so the state undoes the registration and answers the failure.
The writes run on the loop, not on a thread of their own: what follows a write must wait
for it anyway, and events served meanwhile could build on a registration that is then
undone (or overtake an earlier batch's sends); the engines bound each call (ZooKeeper: the
session timeout). A revoked leadership is fed as RevokedLeadership: the state steps down to
STANDBY, nothing exits.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from ember import config
from ember.deploy.master.persistence import LeaderElectionAgent, PersistenceEngine
from ember.deploy.master.recovery_mode import check_recovery_conf, create_recovery
from ember.deploy.master.records import StoredState
from ember.deploy.instructions import (
    LOG_LEVELS, Ask, DeleteUpload, Disconnected, Instruction, Log, Persist, Reply, ReplyFailure,
    ScheduleTimer, Send, Unpersist,
)
from ember.deploy.master.config import MasterConfig
from ember.deploy.master.state import BeginRecovery, MasterState
from ember.deploy.master.uploads import AppResourceStore, UploadError
from ember.deploy.messages import (
    AppResourceData, DriverLogResponse, FetchAppResource, RequestDriverLog, UploadAppResource,
    UploadAppResourceResponse, RecoveryState, NOT_RECORDED_PREFIX,
    BoundPortsRequest, CheckForWorkerTimeOut, CompleteRecovery, DecommissionWorkers,
    DecommissionWorkersOnHosts,
    ElectedLeader, ExecutorStateChanged, Heartbeat, RevokedLeadership,
    MasterChangeAcknowledged, RegisterApplication,
    UnregisterApplication,
    KillExecutors, RequestClearCompletedDriversAndApps, RequestDriverStatus, RequestExecutors,
    RequestKillAllDrivers, RequestKillApplication, RequestKillDriver, RequestMasterState,
    RequestReadyz, RequestSubmitDriver, RequestAppStatus,
)
from ember.errors import SparkException
from ember.rpc import Cancellable, PeerInfo, RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv
from ember.rpc.config import RpcConf
from ember.rpc.errors import RpcRemoteError, UnsupportedMessageError
from ember.rpc.security import SCOPE_ENV
from ember.util.units import parse_size

log = logging.getLogger("ember.deploy.master.Master")

SYSTEM_NAME = "sparkMaster"
ENDPOINT_NAME = "Master"
DEFAULT_PORT = 7077
DEFAULT_WEBUI_PORT = 8080

# Messages Spark's Master answers in receiveAndReply. Any other message arriving as an ask is
# refused ("Unsupported message ...") without being processed, as Spark's Inbox does.
ASK_MESSAGES: tuple[type, ...] = (
    ExecutorStateChanged, RequestSubmitDriver, RequestKillDriver, RequestKillAllDrivers,
    RequestDriverStatus, RequestClearCompletedDriversAndApps, RequestMasterState, RequestReadyz,
    RequestExecutors, KillExecutors, DecommissionWorkersOnHosts, BoundPortsRequest,
    RequestKillApplication, RequestAppStatus,
    Heartbeat,   # Ember: a worker asks it to renew its master lease (driver fencing)
)

# Ember's cluster-mode asks, served by this shell rather than the state machine: they move
# bytes (uploads, log pages) and wait on workers, none of which is a scheduling decision.
SHELL_ASK_MESSAGES: tuple[type, ...] = (UploadAppResource, FetchAppResource, RequestDriverLog)

# Leader-election and timer messages (Spark's MasterMessages), and DecommissionWorkers (which
# Spark's master only sends itself, from DecommissionWorkersOnHosts): never from a peer.
INTERNAL_MESSAGES: tuple[type, ...] = (ElectedLeader, RevokedLeadership, CheckForWorkerTimeOut,
                                       CompleteRecovery, DecommissionWorkers)

# What a connection that authenticated as an application (a cluster-mode driver holding its
# derived credential) may send; each names an app, which must be that connection's own.
APP_MESSAGES: tuple[type, ...] = (RegisterApplication, UnregisterApplication,
                                  MasterChangeAcknowledged, RequestExecutors, KillExecutors,
                                  RequestAppStatus)



def spark_version() -> str:
    """The Spark version Ember reproduces (logged at start-up like Spark's master)."""
    from ember.version import SPARK_VERSION
    return SPARK_VERSION


def now_ms() -> int:
    """Wall clock in epoch milliseconds: the time base of every MasterState event."""
    return int(time.time() * 1000)


def validate_master_conf(conf: Mapping[str, Any]) -> None:
    """Raise ValueError (one line, naming the key) for a configuration the master cannot run
    with, before anything is bound: so `ember master --conf spark.worker.timeout=abc` fails
    fast with `Error: ...` instead of half-starting."""
    master_conf = MasterConfig.from_conf(conf)
    if master_conf.worker_timeout_ms <= 0:
        # The liveness timer runs every spark.worker.timeout: it must be a positive period.
        raise ValueError("spark.worker.timeout must be a positive number of seconds, but was "
                         f"{conf.get('spark.worker.timeout')!r}")
    RpcConf.from_conf(conf)
    config.read(conf, "spark.ui.killEnabled")   # the web UI's, parsed before anything binds
    check_recovery_conf(conf)
    max_upload_bytes(conf)
    max_upload_bytes(conf, TOTAL_UPLOAD_SIZE)
    ui_port = conf.get("spark.master.ui.port")
    if ui_port is not None:
        check_port("spark.master.ui.port", ui_port)


def check_port(what: str, value: Any) -> int:
    """A port as Spark's startServiceOnPort accepts it: 0 (any free port) or 1024-65535."""
    try:
        port = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{what} should be an integer, but was {value!r}") from None
    if port != 0 and not 1024 <= port <= 65535:
        raise ValueError(f"{what}: startPort should be between 1024 and 65535 (inclusive), "
                         f"or 0 for a random free port, but was {port}.")
    return port


class Master(RpcEndpoint):
    """Spark's Master endpoint: feeds every event to `MasterState`, executes the result.

    `engine` / `agent`: the recovery engine and leader election (default: recovery mode
    NONE's black hole and immediate leadership).
    """

    def __init__(self, rpc_env: RpcEnv, conf: Mapping[str, Any], *, web_ui_url: str,
                 web_ui_port: int, rest_port: Optional[int] = None,
                 uploads: Optional[AppResourceStore] = None,
                 engine: Optional[PersistenceEngine] = None,
                 agent: Optional[LeaderElectionAgent] = None) -> None:
        self.conf = dict(conf)
        if engine is None or agent is None:
            engine, agent = create_recovery({})
        self.engine, self.agent = engine, agent
        self.uploads = uploads if uploads is not None else AppResourceStore(
            max_bytes=max_upload_bytes(self.conf), blobs=engine,
            max_total_bytes=max_upload_bytes(self.conf, TOTAL_UPLOAD_SIZE))
        # The ref setup_endpoint will hand out (equal by address and name), known before
        # registration so the state can put it in RegisteredWorker / RegisteredApplication.
        ref = rpc_env.endpoint_ref(rpc_env.address, ENDPOINT_NAME)
        self.state = MasterState(self.conf, host=rpc_env.address.host, port=rpc_env.address.port,
                                 self_ref=ref, web_ui_url=web_ui_url, web_ui_port=web_ui_port,
                                 rest_port=rest_port)
        self.engine.live_records = self.state.live_records
        self.web_ui_url = web_ui_url
        self.ready = threading.Event()    # set when on_start has run (ALIVE unless failed)
        self.start_error: Optional[BaseException] = None
        self._timers: list[Cancellable] = []

    # -- RpcEndpoint ------------------------------------------------------------------------

    def on_start(self) -> None:
        try:
            self._execute(self.state.on_start(now_ms()))
            log.info("Running Spark version %s", spark_version())
            logging.getLogger("ember.deploy.master.MasterWebUI").info(
                "Bound MasterWebUI to %s, and started at %s", _ui_bind_host(self.state.host),
                self.web_ui_url)
            self.agent.start(self._on_elected, self._on_revoked)
        except BaseException as e:
            self.start_error = e
            raise
        finally:
            self.ready.set()

    app_messages = APP_MESSAGES

    def _for_sender(self, msg: Any, peer: Optional[PeerInfo]) -> Any:
        """Authorization by channel for application messages: the scope the driver's
        executors get is the one its connection proved (recorded in the description, so
        the workers derive their credentials from it), and an application may only act on
        its own app. Returns the message to handle, or None if it is refused."""
        scope = peer.scope if peer is not None else None
        if isinstance(msg, RegisterApplication):
            desc = msg.appDescription
            env = dict(desc.command.environment)
            if scope is None:
                env.pop(SCOPE_ENV, None)
            else:
                env[SCOPE_ENV] = scope
            return replace(msg, appDescription=replace(
                desc, command=replace(desc.command, environment=env)))
        if scope is not None:
            app = self.state.id_to_app.get(getattr(msg, "appId", ""))
            if app is None and isinstance(msg, RequestAppStatus):
                return msg   # "not found" tells a driver after failover to give up; no leak
            if app is None or app.desc.command.environment.get(SCOPE_ENV) != scope:
                log.warning("Refusing %s for %s from %s: it authenticated as application %r",
                            type(msg).__name__, getattr(msg, "appId", "?"), peer.address
                            if peer else "?", scope)
                return None
        return msg

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        msg = self._for_sender(msg, self.rpc_env.current_sender())
        if msg is None:
            return
        if isinstance(msg, INTERNAL_MESSAGES):
            # Only the master produces these (timers and leadership are fed in directly, see
            # `post_internal`), so one arriving over RPC is a peer's: a RevokedLeadership
            # would stop the master, an ElectedLeader fake a failover, DecommissionWorkers
            # drain workers. The sender address cannot prove it is local (a peer names its
            # own address in its hello), so none is accepted from the wire.
            log.warning("Ignoring %s from %s: only the master itself sends it",
                        type(msg).__name__, sender)
            return
        self._feed(msg, None)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, SHELL_ASK_MESSAGES):
            self._serve_shell_ask(msg, context)
            return
        if not isinstance(msg, ASK_MESSAGES):
            error = UnsupportedMessageError(msg, context.sender_address)
            log.warning("Refusing an ask: %s", error)
            context.send_failure(error)
            return
        msg = self._for_sender(msg, context.sender)
        if msg is None:
            context.send_failure(SparkException(
                f"{context.sender_address} may not act on another application"))
            return
        self._feed(msg, context)

    def on_disconnected(self, remote: RpcAddress) -> None:
        self._feed(Disconnected(remote), None)

    def on_stop(self) -> None:
        try:
            self.agent.stop()
        except Exception:
            log.exception("Error while leaving the leader election")
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()

    # -- uploads and driver logs (cluster deploy mode) ----------------------------------------

    def _serve_shell_ask(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, UploadAppResource):
            if self.state.state != RecoveryState.ALIVE:
                context.reply(UploadAppResourceResponse(
                    False, None, self.state._not_alive("accept driver submissions")))
                return
            # Disk I/O off the loop: a large upload must not delay heartbeats.
            self.rpc_env.run_in_executor(self._store_upload, msg, context)
        elif isinstance(msg, FetchAppResource):
            self.rpc_env.run_in_executor(self._load_upload, msg, context)
        else:
            self._forward_driver_log(msg, context)

    def _store_upload(self, msg: UploadAppResource, context: RpcCallContext) -> None:
        try:
            url = self.uploads.put(msg.name, msg.data, msg.sha256)
        except UploadError as e:
            context.reply(UploadAppResourceResponse(False, None, str(e)))
            return
        except Exception as e:   # the engine could not store it: not acknowledged as kept
            log.error("Cannot store uploaded resource %s: %r", msg.name, e)
            context.reply(UploadAppResourceResponse(
                False, None, f"{NOT_RECORDED_PREFIX} ({type(e).__name__}: {e}); "
                             f"{msg.name} was not stored, try again."))
            return
        log.info("Stored uploaded resource %s (%d bytes) as %s", msg.name, len(msg.data), url)
        context.reply(UploadAppResourceResponse(True, url, ""))

    def _load_upload(self, msg: FetchAppResource, context: RpcCallContext) -> None:
        try:
            data, sha = self.uploads.get(msg.url)
        except UploadError as e:
            context.reply(AppResourceData(False, b"", "", str(e)))
            return
        context.reply(AppResourceData(True, data, sha))

    def _forward_driver_log(self, msg: RequestDriverLog, context: RpcCallContext) -> None:
        """Ask the worker that runs (or ran) the driver for a page of its log, and stamp the
        answer with the master's view of the driver's state, so a follower knows when the
        output is complete."""
        driver = self.state.find_driver(msg.driverId)
        if driver is None:
            context.reply(DriverLogResponse(False, message=f"Driver {msg.driverId} not found"))
            return
        worker = driver.worker
        if worker is None:
            context.reply(DriverLogResponse(
                False, state=driver.state, exitStatus=driver.exit_status,
                message=f"Driver {msg.driverId} has not been launched on a worker yet"))
            return
        if self.state.id_to_worker.get(worker.id) is not worker:
            context.reply(DriverLogResponse(
                False, state=driver.state, exitStatus=driver.exit_status,
                message=f"Worker {worker.id}, which ran driver {msg.driverId}, is gone"))
            return

        def answer(fut: Any) -> None:
            try:
                page = fut.result()
            except Exception as e:
                context.reply(DriverLogResponse(
                    False, message=f"Worker {worker.id} did not answer for the log: {e}"))
                return
            d = self.state.find_driver(msg.driverId) or driver
            context.reply(replace(page, state=d.state, exitStatus=d.exit_status))

        worker.endpoint.ask(msg).add_done_callback(answer)

    # -- leadership ---------------------------------------------------------------------------

    def _on_elected(self, epoch: int) -> None:
        """The agent's callback (any thread): recover on the loop."""
        if self.rpc_env.in_loop():
            self._begin_recovery(epoch)
        else:
            self.rpc_env.call_soon(self._begin_recovery, epoch)

    def _on_revoked(self) -> None:
        self.post_internal(RevokedLeadership())

    def _begin_recovery(self, epoch: int) -> None:
        """Spark's ElectedLeader + readPersistedData: every record back as a fresh object;
        unreadable ones are logged with their names and left out."""
        try:
            records = self.engine.read_all()
        except Exception as e:
            # Leading with an empty state would drop every record: give the leadership up
            # (a standby may take it) and stand again.
            log.error("Cannot read the recovery state (%s: %s): giving up leadership (epoch "
                      "%d) to try again", type(e).__name__, e, epoch)
            self.agent.relinquish()
            return
        stored = StoredState(records, self._bind_ref)
        for name, reason in stored.skipped:
            log.error("Skipping record %s in the recovery store: %s", name, reason)
        self._feed(BeginRecovery(stored.apps, stored.drivers, stored.workers,
                                 stored.completed_apps, stored.completed_drivers,
                                 stored.completed_seq, epoch), None)

    def _bind_ref(self, ref: Any) -> Any:
        """A stored (unbound) endpoint ref, bound to this RpcEnv so the master can send."""
        address, name = getattr(ref, "address", None), getattr(ref, "name", None)
        if address is None or name is None:
            raise ValueError(f"not an endpoint ref: {ref!r}")
        return self.rpc_env.endpoint_ref(address, name)

    def post_internal(self, msg: Any) -> None:
        """Feed a leadership or timer message (ElectedLeader, RevokedLeadership,
        CompleteRecovery, ...) from this process, e.g. a leader-election agent's thread.
        Thread-safe: it runs on the RpcEnv loop like every other event."""
        self.rpc_env.call_soon(self._feed, msg, None)

    # -- feeding the state machine ----------------------------------------------------------

    def _feed(self, msg: Any, context: Optional[RpcCallContext]) -> None:
        """One event in, its instructions out. A handler's failure is caught in one place,
        `MasterState.handle`, which leaves the state as before the event and turns the
        failure into a logged error and a failure reply (so one bad message cannot stop
        the master, nor half-apply)."""
        event = Ask(context, msg) if context is not None else msg
        instructions = self.state.handle(event, now_ms())
        answered = self._execute(instructions, context)
        if context is not None and not answered:
            # Every ask handler replies; if one did not, the asker must not wait for a timeout.
            text = f"The master did not answer {type(msg).__name__}"
            log.error(text)
            context.send_failure(SparkException(text))

    def _execute(self, instructions: list[Instruction],
                 context: Optional[RpcCallContext] = None) -> bool:
        """Carry out `instructions` in order; one that fails is logged and the rest still run,
        except a gated Persist (one a reply is about to acknowledge): when it cannot be
        written, the rest of the batch is dropped and its PersistFailed fed to the state,
        which undoes the registration and answers. Returns whether `context` was answered."""
        answered = False
        for ins in instructions:
            if isinstance(ins, Persist) and ins.failure is not None:
                try:
                    self.engine.persist(ins.key, ins.obj)
                    continue
                except Exception as e:
                    failure = replace(ins.failure, error=f"{type(e).__name__}: {e}")
                    self._feed(failure, None)
                    return answered or (context is not None and failure.request is context)
            is_answer = isinstance(ins, (Reply, ReplyFailure)) and ins.request is not None
            if is_answer and ins.request is context:
                answered = True
            try:
                self._execute_one(ins)
            except Exception as e:
                log.error("Error while carrying out %s: %r", type(ins).__name__, e,
                          exc_info=True)
                if is_answer:   # e.g. a reply that cannot be sent: fail the ask instead
                    ins.request.send_failure(SparkException(f"{type(e).__name__}: {e}"))
        return answered

    def _execute_one(self, ins: Instruction) -> None:
        if isinstance(ins, Send):
            ins.target.send(ins.message)
        elif isinstance(ins, Reply):
            if ins.request is not None:
                ins.request.reply(ins.message)
        elif isinstance(ins, ReplyFailure):
            if ins.request is not None:
                # the asker sees ins.error_type, whatever the exception class on this side
                ins.request.send_failure(RpcRemoteError(ins.error_type, ins.error))
        elif isinstance(ins, Log):
            log.log(LOG_LEVELS.get(ins.level, logging.INFO), "%s", ins.text)
        elif isinstance(ins, Persist):
            self.engine.persist(ins.key, ins.obj)
        elif isinstance(ins, Unpersist):
            self.engine.unpersist(ins.key)
        elif isinstance(ins, DeleteUpload):
            self.rpc_env.run_in_executor(self.uploads.delete, ins.url)
        elif isinstance(ins, ScheduleTimer):
            self._schedule_timer(ins)
        else:
            log.error("Unknown instruction from the master state: %r", ins)

    def _schedule_timer(self, ins: ScheduleTimer) -> None:
        env = self.rpc_env
        delay = max(0, ins.delay_ms) / 1000.0
        if ins.period_ms:
            timer = env.schedule_periodic(delay, ins.period_ms / 1000.0, self._feed,
                                          ins.message, None)
        else:
            timer = env.schedule(delay, self._feed, ins.message, None)
        self._timers = [t for t in self._timers if not t.cancelled]
        self._timers.append(timer)


def _start_rest_server(master_ref: Any, url: str, conf: Mapping[str, str], master_host: str,
                       uploads: AppResourceStore, retries: int) -> tuple[Any, Optional[int]]:
    """Spark's StandaloneRestServer when spark.master.rest.enabled (default true, as in 4.1)
    and safe (see rest_auth_policy); otherwise one log line saying why it is off."""
    from ember.deploy.rest.server import StandaloneRestServer, rest_auth_policy
    rest_host = conf.get("spark.master.rest.host") or master_host
    policy = rest_auth_policy(conf, rest_host)
    if not policy.enabled:
        log.info("%s", policy.reason)
        return None, None
    rest = StandaloneRestServer(master_ref, url, conf, uploads)
    return rest, rest.start(rest_host, policy.port, retries)


def _ui_bind_host(host: str = "") -> str:
    """Where the web UI listens: the master's host (--host), else SPARK_LOCAL_IP, else every
    interface (Spark's WebUI.bind always takes SPARK_LOCAL_IP or 0.0.0.0: a UI on every
    interface of a master bound to loopback is exactly what issue 11 forbids)."""
    return host or os.environ.get("SPARK_LOCAL_IP") or "0.0.0.0"


TOTAL_UPLOAD_SIZE = "spark.ember.submit.maxTotalUploadSize"


def max_upload_bytes(conf: Mapping[str, Any],
                     key: str = "spark.ember.submit.maxUploadSize") -> int:
    """spark.ember.submit.maxUploadSize (default 100m): the largest app resource kept; with
    `key` TOTAL_UPLOAD_SIZE (default 1g), what all uploads together may hold."""
    value = conf.get(key)
    if value is None:
        return config.REGISTRY[key].default
    try:
        return parse_size(value, "b", spaces=True)
    except ValueError:
        raise ValueError(f"{key} must be a size like 100m or 512k, but was "
                         f"{str(value).strip().lower()!r}") from None


def public_host(rpc_host: str) -> str:
    """The host advertised in the web UI URL: SPARK_PUBLIC_DNS, else the RPC host."""
    return os.environ.get("SPARK_PUBLIC_DNS") or rpc_host


@dataclass
class MasterHandle:
    """A running master: its RpcEnv, endpoint, web UI and URLs; `stop()` shuts all down.
    (A revoked leader steps down to STANDBY and keeps running: nothing stops it but this.)"""
    rpc_env: RpcEnv
    master: Master
    web_ui: Any
    url: str
    web_ui_url: str
    rest_server: Any = None
    _stopped: bool = False

    @property
    def port(self) -> int:
        return self.rpc_env.address.port

    @property
    def web_ui_port(self) -> int:
        return self.web_ui.port

    def stop(self) -> None:
        """Stop the web UI, then the RpcEnv (endpoint on_stop, connections). Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for server in (self.web_ui, self.rest_server):
            try:
                if server is not None:
                    server.stop()
            except Exception:
                log.exception("Error while stopping %s", type(server).__name__)
        self.rpc_env.shutdown()
        self.rpc_env.await_termination(10)
        self.master.uploads.close()
        self.master.engine.close()


def start_master(host: str, port: int = DEFAULT_PORT, webui_port: int = DEFAULT_WEBUI_PORT,
                 conf: Optional[Mapping[str, Any]] = None,
                 ready_timeout: float = 30.0) -> MasterHandle:
    """Start a master (RPC "sparkMaster" + endpoint "Master" + web UI) and return once it is
    ALIVE. Busy ports are retried on the following ones (spark.port.maxRetries), both for
    RPC and the web UI; `spark.master.ui.port`, when set, wins over `webui_port`.

    Raises ValueError for a bad configuration and ember.rpc.RpcBindError / OSError when a
    port cannot be bound; nothing is left running then.
    """
    from ember.deploy.master.http import MasterWebUI

    conf = {k: str(v) for k, v in (conf or {}).items()}
    validate_master_conf(conf)
    check_port("the master port", port)
    if conf.get("spark.master.ui.port") is not None:
        webui_port = check_port("spark.master.ui.port", conf["spark.master.ui.port"])
    check_port("the web UI port", webui_port)
    retries = RpcConf.from_conf(conf).port_max_retries

    env = RpcEnv.create(SYSTEM_NAME, host, port, conf)
    env.admit_app_scopes(any_scope=True)   # cluster-mode drivers, with derived credentials
    web_ui = rest = engine = None
    try:
        url = env.address.to_spark_url()
        engine, agent = create_recovery(conf, master_url=url)
        master_ref = env.endpoint_ref(env.address, ENDPOINT_NAME)
        web_ui = MasterWebUI(master_ref, url, conf, current_leader=agent.current_leader)
        public = public_host(env.address.host)
        bound = web_ui.start(_ui_bind_host(host), webui_port, retries, public_hosts=(public,))
        web_ui_url = f"{web_ui.scheme}://{public}:{bound}"
        uploads = AppResourceStore(max_bytes=max_upload_bytes(conf), blobs=engine,
                                   max_total_bytes=max_upload_bytes(conf, TOTAL_UPLOAD_SIZE))
        rest, rest_port = _start_rest_server(master_ref, url, conf, env.address.host, uploads,
                                             retries)
        master = Master(env, conf, web_ui_url=web_ui_url, web_ui_port=bound,
                        rest_port=rest_port, uploads=uploads, engine=engine, agent=agent)
        handle = MasterHandle(env, master, web_ui, url, web_ui_url, rest)
        env.setup_endpoint(ENDPOINT_NAME, master)
        if not master.ready.wait(ready_timeout):
            raise RuntimeError(f"The master did not start within {ready_timeout:g} s")
        if master.start_error is not None:
            raise RuntimeError(f"The master failed to start: {master.start_error!r}")
        return handle
    except BaseException:
        for server in (web_ui, rest):
            if server is not None:
                try:
                    server.stop()
                except Exception:
                    log.debug("Error stopping %r after a failed start", server, exc_info=True)
        env.shutdown()
        env.await_termination(10)
        if engine is not None:
            engine.close()
        raise


__all__ = ["Master", "MasterHandle", "start_master", "validate_master_conf", "check_port",
           "ASK_MESSAGES", "SYSTEM_NAME", "ENDPOINT_NAME", "DEFAULT_PORT", "DEFAULT_WEBUI_PORT",
           "spark_version", "now_ms", "public_host"]
