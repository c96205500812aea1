"""The worker's sans-I/O state machine (ember/deploy/worker/state.py), without processes,
sockets or clocks: events in, instructions out.

Refs are plain values with an `address` (the state only sends to them and compares their
addresses); peers are plain values with `address`, `scope`, `local`, as the RPC layer's
PeerInfo.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import pytest

from ember.deploy.instructions import (
    Ask, AskAnswered, CancelTimer, CleanupApplication, CleanupWorkDir, ConnectToMaster,
    Disconnected, Exit, KillDriverRunner, KillExecutorRunner, LaunchDriverRunner,
    LaunchExecutorRunner, Log, MasterRefResolved, Reply, ReplyFailure, RunnerLaunchFailed,
    ScheduleTimer, Send, SendAsk, ServeDriverLog,
)
from ember.deploy.messages import (
    ApplicationDescription, ApplicationFinished, Command, DecommissionWorker, DriverDescription,
    DriverState, DriverStateChanged, ExecutorState, ExecutorStateChanged, Heartbeat,
    HeartbeatResponse, KillDriver, KillExecutor, LaunchDriver, LaunchExecutor, MasterChanged,
    ReconnectWorker, RegisteredWorker, RegisterWorker, RegisterWorkerFailed, RequestDriverLog,
    RequestWorkerState, ResourceInformation, WorkerDecommissioning,
    WorkerDecommissionSigReceived, WorkerLatestState, WorkerSchedulerStateResponse,
    WorkerStateResponse,
)
from ember.deploy.worker.config import WorkerConf
from ember.deploy.worker.state import (
    CLEANUP_TIMER, HEARTBEAT_TIMER, LEASE_TIMER, REGISTRATION_TIMER, DriverRunnerReport,
    ExecutorRunnerReport, HeartbeatTag, HeartbeatTick, KillAll, LeaseCheckTick, Received,
    RegistrationRetryTick, RetryExecutorStateSync, Started, StateSyncTag, Stopping,
    WorkDirCleanupTick, WorkerState,
)
from ember.rpc.address import RpcAddress
from ember.rpc.errors import RpcConnectionError, RpcTimeoutError
from ember.rpc.security import SCOPE_ENV

M1, M2 = RpcAddress("m1", 7077), RpcAddress("m2", 7077)
ME = RpcAddress("w1", 40000)
GPU = {"gpu": ResourceInformation("gpu", ["0", "1", "2"])}


@dataclass(frozen=True)
class Ref:
    address: RpcAddress
    name: str = "Master"


@dataclass(frozen=True)
class Peer:
    address: RpcAddress
    scope: Optional[str] = None
    local: bool = False


SELF = Ref(ME, "Worker")
MASTER1, MASTER2 = Ref(M1), Ref(M2)


def app_desc(name: str = "app", env: Optional[dict] = None) -> ApplicationDescription:
    return ApplicationDescription(name, None, Command("ember.executor", [], env or {}), "")


def driver_desc(cores: int = 1, mem: int = 256) -> DriverDescription:
    return DriverDescription("file:/x.py", mem, cores, False,
                             Command("org.apache.spark.deploy.worker.DriverWrapper", []))


class Harness:
    """A WorkerState plus a clock; `feed` returns the instructions of one event."""

    def __init__(self, **conf: Any) -> None:
        wconf = WorkerConf.from_conf({"spark.worker.timeout": "60", **conf})
        self.state = WorkerState(worker_id="worker-1", host=ME.host, port=ME.port, cores=8,
                                 memory=4096, master_addresses=[M1, M2], work_dir="/work",
                                 web_ui_url="http://w1:8081", worker_conf=wconf, fuzz=1.0,
                                 resources=GPU)
        self.now = 100.0

    def feed(self, event: Any) -> list:
        return self.state.handle(event, self.now, int(self.now * 1000))

    def send(self, msg: Any, peer: Optional[Peer] = None, sender: Any = None) -> list:
        peer = peer if peer is not None else Peer(M1)
        return self.feed(Received(msg, sender if sender is not None else peer.address, peer))

    def start(self) -> list:
        return self.feed(Started(SELF))

    def register(self, master: Ref = MASTER1, epoch: int = 0) -> list:
        self.start()
        return self.send(RegisteredWorker(master, "http://m:8080", master.address, False, epoch),
                         Peer(master.address))

    def launch(self, app: str = "app-1", exec_id: int = 0, cores: int = 2, memory: int = 512,
               resources: Optional[dict] = None, master: Ref = MASTER1) -> list:
        return self.send(LaunchExecutor(master.address.to_spark_url(), app, exec_id, 0,
                                        app_desc(), cores, memory, resources or {}),
                         Peer(master.address))


def of(instructions: list, kind: type) -> list:
    return [i for i in instructions if isinstance(i, kind)]


def texts(instructions: list) -> list[str]:
    return [i.text for i in of(instructions, Log)]


def sent(instructions: list, kind: type) -> list:
    return [i.message for i in of(instructions, Send) if isinstance(i.message, kind)]


# -- registration and its backoff ---------------------------------------------------------------

def test_start_connects_to_every_master_and_arms_the_initial_retry():
    h = Harness()
    out = h.start()
    assert texts(out)[0] == "Starting Spark worker w1:40000 with 8 cores, 4.0 GiB RAM"
    assert of(out, ConnectToMaster) == [ConnectToMaster(M1, 1), ConnectToMaster(M2, 1)]
    assert of(out, ScheduleTimer) == [ScheduleTimer(10_000, RegistrationRetryTick(), 10_000,
                                                    REGISTRATION_TIMER)]
    out = h.feed(MasterRefResolved(M1, 1, MASTER1))
    assert out == [Send(MASTER1, RegisterWorker("worker-1", "w1", 40000, SELF, 8, 4096,
                                                "http://w1:8081", M1, GPU))]
    assert h.feed(MasterRefResolved(M2, 0, MASTER2)) == []      # an older round: dropped
    assert texts(h.feed(MasterRefResolved(M2, 1, None, RpcConnectionError("refused")))) == \
        ["Failed to connect to master m2:7077: refused"]


def test_retries_prolong_after_the_initial_ones_then_give_up():
    h = Harness()
    h.start()
    timers = []
    for attempt in range(1, 17):
        out = h.feed(RegistrationRetryTick())
        assert f"Retrying connection to master (attempt # {attempt})" in texts(out)
        assert len(of(out, ConnectToMaster)) == 2          # never registered: every master
        timers += of(out, ScheduleTimer)
    # INITIAL_REGISTRATION_RETRIES = 6: the sixth retry switches to the prolonged interval
    assert timers == [ScheduleTimer(60_000, RegistrationRetryTick(), 60_000,
                                    REGISTRATION_TIMER)]
    out = h.feed(RegistrationRetryTick())
    assert texts(out) == ["All masters are unresponsive! Giving up."]
    assert of(out, Exit) == [Exit(1)] and of(out, CancelTimer) == [CancelTimer(REGISTRATION_TIMER)]
    assert h.state.exit_code == 1
    assert h.feed(RegistrationRetryTick()) == []               # the timer is gone


def test_registration_retries_follow_the_configured_counts_and_scale():
    h = Harness(**{"spark.worker.initialRegistrationRetries": "2",
                   "spark.worker.maxRegistrationRetries": "3",
                   "spark.ember.worker.registrationIntervalScale": "0.01"})
    assert of(h.start(), ScheduleTimer)[0].delay_ms == 100
    assert of(h.feed(RegistrationRetryTick()), ScheduleTimer) == []
    assert of(h.feed(RegistrationRetryTick()), ScheduleTimer)[0].period_ms == 600
    h.feed(RegistrationRetryTick())
    assert of(h.feed(RegistrationRetryTick()), Exit) == [Exit(1)]


def test_registered_cancels_the_retry_arms_the_timers_once_and_reports_latest_state():
    h = Harness()
    out = h.register()
    s = h.state
    assert (s.registered, s.connected, s.master, s.active_master_url) == \
        (True, True, MASTER1, "spark://m1:7077")
    assert "Successfully registered with master spark://m1:7077" in texts(out)
    assert CancelTimer(REGISTRATION_TIMER) in out
    assert [t.key for t in of(out, ScheduleTimer)] == [HEARTBEAT_TIMER, LEASE_TIMER,
                                                       CLEANUP_TIMER]
    assert of(out, ScheduleTimer)[0] == ScheduleTimer(0, HeartbeatTick(), 15_000,
                                                      HEARTBEAT_TIMER)
    assert sent(out, WorkerLatestState) == [WorkerLatestState("worker-1", [], [])]
    again = h.send(RegisteredWorker(MASTER1, "http://m:8080", M1, True), Peer(M1))
    assert "Duplicate registration at master spark://m1:7077" in texts(again)
    assert of(again, ScheduleTimer) == []
    # a late retry tick of the cancelled timer does nothing
    assert h.feed(RegistrationRetryTick()) == []


def test_register_failed_exits_unless_registered():
    h = Harness()
    h.start()
    out = h.send(RegisterWorkerFailed("Duplicate worker ID"))
    assert "Worker registration failed: Duplicate worker ID" in texts(out) and Exit(1) in out
    h2 = Harness()
    h2.register()
    assert h2.send(RegisterWorkerFailed("late")) == []


def test_disconnection_reregisters_then_retries_only_the_known_master():
    h = Harness()
    h.register()
    h.now += 5
    out = h.feed(Disconnected(M1))
    assert texts(out) == ["m1:7077 Disassociated !",
                          "Connection to master failed! Waiting for master to reconnect...",
                          "Connecting to master m1:7077...", "Connecting to master m2:7077..."]
    assert not h.state.connected and not h.state.registered
    assert h.state.resend_since == h.now - 10.0
    assert of(out, ScheduleTimer)[0].key == REGISTRATION_TIMER
    out = h.feed(RegistrationRetryTick())
    assert [c.address for c in of(out, ConnectToMaster)] == [M1]   # SPARK-4592
    assert h.feed(Disconnected(RpcAddress("driver", 1))) == []     # not the master
    # a second disconnection while a retry is armed spawns no second timer
    out = h.feed(Disconnected(M1))
    assert "Not spawning another attempt to register with the master, since there is an " \
           "attempt scheduled already." in texts(out)
    assert of(out, ScheduleTimer) == []


def test_reconnect_worker_reregisters():
    h = Harness()
    h.register()
    out = h.send(ReconnectWorker("spark://m1:7077"))
    assert "Master with url spark://m1:7077 requested this worker to reconnect." in texts(out)
    assert len(of(out, ConnectToMaster)) == 2 and not h.state.registered


def test_master_changed_switches_master_and_answers_scheduler_state():
    h = Harness()
    h.register(epoch=1)
    h.launch(resources={"gpu": ResourceInformation("gpu", ["1"])})
    h.send(LaunchDriver("driver-1", driver_desc()))
    out = h.send(MasterChanged(MASTER2, "http://m2:8080", 2), Peer(M2))
    assert h.state.active_master_url == "spark://m2:7077" and h.state.master is MASTER2
    [resp] = sent(out, WorkerSchedulerStateResponse)
    assert of(out, Send)[-1].target is MASTER2
    assert [(e.desc.appId, e.desc.execId, e.resources) for e in resp.execResponses] \
        == [("app-1", 0, {"gpu": ResourceInformation("gpu", ["1"])})]
    assert [d.driverId for d in resp.driverResponses] == ["driver-1"]
    assert h.state.fence.newest == 2


def test_stale_epoch_is_refused_and_changes_nothing():
    h = Harness()
    h.register(epoch=5)
    out = h.send(MasterChanged(MASTER2, "http://old:8080", 3), Peer(M2))
    assert texts(out) == ["Refusing MasterChanged from a master at epoch 3: a master at epoch "
                          "5 has taken over"]
    assert h.state.master is MASTER1
    out = h.send(LaunchExecutor("spark://m1:7077", "app-1", 0, 0, app_desc(), 1, 256, {}, 4))
    assert of(out, LaunchExecutorRunner) == [] and not h.state.executors
    assert h.launch() and h.state.executors    # epoch 0: a master without recovery


def test_work_is_only_started_by_the_current_masters_connection():
    h = Harness()
    h.register()
    stranger = Peer(RpcAddress("evil", 1))
    out = h.send(LaunchExecutor("spark://m1:7077", "app-1", 0, 0, app_desc(), 1, 256, {}, 9),
                 stranger)
    assert texts(out) == ["Refusing LaunchExecutor from evil:1: only the current master "
                          "(m1:7077) may send it"]
    assert h.state.fence.newest == 0            # authorization before the fence
    assert of(h.send(LaunchDriver("d", driver_desc()), Peer(M1, scope="app-1")),
              LaunchDriverRunner) == []         # an application's connection
    assert of(h.send(LaunchDriver("d", driver_desc()), Peer(ME, local=True)),
              LaunchDriverRunner) != []         # this process itself


# -- heartbeats and the master lease ---------------------------------------------------------

def test_heartbeats_are_asks_whose_answers_renew_the_lease():
    h = Harness()
    h.register(epoch=2)
    h.now = 110.0
    out = h.feed(HeartbeatTick())
    assert out == [SendAsk(MASTER1, Heartbeat("worker-1", SELF), HeartbeatTag(110.0, MASTER1),
                           60.0)]
    assert h.state.last_heartbeat_ms == 110_000
    h.now = 150.0
    h.feed(AskAnswered(HeartbeatTag(110.0, MASTER1), HeartbeatResponse(True, 2)))
    assert h.state.lease.renewed_at == 110.0
    # from a deposed leader, from a master no longer followed, refused or failed: no renewal
    out = h.feed(AskAnswered(HeartbeatTag(120.0, MASTER1), HeartbeatResponse(True, 1)))
    assert texts(out) == ["Not renewing the master lease from a master at epoch 1: a master at "
                          "epoch 2 has taken over"]
    h.feed(AskAnswered(HeartbeatTag(121.0, MASTER2), HeartbeatResponse(True, 2)))
    h.feed(AskAnswered(HeartbeatTag(122.0, MASTER1), HeartbeatResponse(False, 2)))
    h.feed(AskAnswered(HeartbeatTag(123.0, MASTER1), None, RpcTimeoutError("t")))
    assert h.state.lease.renewed_at == 110.0
    h.feed(Disconnected(M1))
    assert h.feed(HeartbeatTick()) == []        # not connected: no heartbeat


def test_lease_expiry_kills_drivers_once_and_reports_them_relaunching():
    h = Harness(**{"spark.ember.worker.masterLease": "30s"})
    h.register()                                # lease renewed at 100
    h.send(LaunchDriver("driver-1", driver_desc(), attempt=3))
    h.now = 129.0
    assert h.feed(LeaseCheckTick()) == []
    h.now = 131.0
    out = h.feed(LeaseCheckTick())
    assert of(out, KillDriverRunner) == [KillDriverRunner("driver-1", fence=True)]
    assert texts(out) == ["No master has answered for 31.0 s (spark.ember.worker.masterLease="
                          "30.0 s): killing driver driver-1, which a master may relaunch "
                          "elsewhere"]
    assert of(h.feed(LeaseCheckTick()), KillDriverRunner) == []    # once
    out = h.feed(DriverRunnerReport(DriverStateChanged("driver-1", DriverState.KILLED, None,
                                                       None, 3)))
    [report] = sent(out, DriverStateChanged)
    assert report.state == DriverState.RELAUNCHING
    assert report.exception == ("Killed by worker worker-1: no master answered within "
                                "spark.ember.worker.masterLease (30 s)")
    assert h.state.finished_drivers["driver-1"].state == DriverState.KILLED
    assert (h.state.cores_used, h.state.memory_used) == (0, 0)
    # on re-registration the final state is sent again, before WorkerLatestState
    out = h.send(RegisteredWorker(MASTER2, "http://m2:8080", M2, False), Peer(M2))
    sends = [s.message for s in of(out, Send)]
    assert sends[0] == report and isinstance(sends[1], WorkerLatestState)
    assert of(h.send(RegisteredWorker(MASTER2, "u", M2, True), Peer(M2)), Send)[0].message \
        != report                                # only once


def test_no_lease_before_the_first_registration():
    h = Harness(**{"spark.ember.worker.masterLease": "1s"})
    h.start()
    h.now += 1000
    assert h.feed(LeaseCheckTick()) == []


# -- executors ------------------------------------------------------------------------------

def test_executor_launch_run_kill_exit_bookkeeping():
    h = Harness()
    h.register()
    out = h.launch(resources={"gpu": ResourceInformation("gpu", ["0", "2"])})
    assert of(out, LaunchExecutorRunner) == [LaunchExecutorRunner(
        "app-1", 0, app_desc(), 2, 512, 0, {"gpu": ResourceInformation("gpu", ["0", "2"])},
        "app-1")]
    assert "Asked to launch executor app-1/0 for app" in texts(out)
    s = h.state
    assert (s.cores_used, s.memory_used, s.cores_free, s.memory_free) == (2, 512, 6, 3584)
    assert s.resources_used == {"gpu": ("0", "2")}
    assert s.executors["app-1/0"].state == ExecutorState.LAUNCHING
    # duplicate, wrong master url
    assert "Asked to launch executor app-1/0, which is already running here" in \
        texts(h.launch())
    out = h.send(LaunchExecutor("spark://bogus:1", "app-2", 0, 0, app_desc(), 1, 1))
    assert texts(out) == ["Invalid Master (spark://bogus:1) attempted to launch executor."]
    running = ExecutorStateChanged("app-1", 0, ExecutorState.RUNNING)
    out = h.feed(ExecutorRunnerReport(running))
    assert out == [SendAsk(MASTER1, running, StateSyncTag(running, MASTER1))]
    assert s.executors["app-1/0"].state == ExecutorState.RUNNING
    out = h.send(KillExecutor("spark://m1:7077", "app-1", 0))
    assert of(out, KillExecutorRunner) == [KillExecutorRunner("app-1/0", ExecutorState.KILLED)]
    assert s.executors["app-1/0"].state == ExecutorState.KILLED
    assert texts(h.send(KillExecutor("spark://m1:7077", "app-1", 7))) == \
        ["Asked to kill unknown executor app-1/7"]
    killed = ExecutorStateChanged("app-1", 0, ExecutorState.KILLED, None, 143)
    out = h.feed(ExecutorRunnerReport(killed))
    assert "Executor app-1/0 finished with state KILLED exitStatus 143" in texts(out)
    assert not s.executors and list(s.finished_executors) == ["app-1/0"]
    assert (s.cores_used, s.memory_used, s.resources_used) == (0, 0, {"gpu": ()})
    resp = h.feed(Ask("req", RequestWorkerState()))[0].message
    assert isinstance(resp, WorkerStateResponse)
    assert [e.state for e in resp.finishedExecutors] == [ExecutorState.KILLED]
    out = h.feed(ExecutorRunnerReport(ExecutorStateChanged("app-9", 1, ExecutorState.EXITED)))
    assert "Unknown Executor app-9/1 finished with state EXITED" in texts(out)


def test_executor_credential_scope_comes_from_the_description():
    h = Harness()
    h.register()
    out = h.send(LaunchExecutor("spark://m1:7077", "app-1", 0, 0,
                                app_desc(env={SCOPE_ENV: "app-0"}), 1, 1))
    assert of(out, LaunchExecutorRunner)[0].scope == "app-0"
    assert of(h.launch("app-2"), LaunchExecutorRunner)[0].scope == "app-2"


def test_a_failed_executor_launch_is_reported_failed_and_frees_its_share():
    h = Harness()
    h.register()
    h.launch(resources={"gpu": ResourceInformation("gpu", ["1"])})
    out = h.feed(RunnerLaunchFailed("OSError: Failed to create directory", full_id="app-1/0"))
    assert texts(out) == ["Failed to launch executor app-1/0 for app: OSError: Failed to "
                          "create directory"]
    [ask] = of(out, SendAsk)
    assert ask.message == ExecutorStateChanged("app-1", 0, ExecutorState.FAILED,
                                               "OSError: Failed to create directory", None)
    s = h.state
    assert not s.executors and not s.finished_executors
    assert (s.cores_used, s.memory_used, s.resources_used) == (0, 0, {"gpu": ()})


def test_state_changes_are_retried_then_the_worker_gives_up():
    h = Harness(**{"spark.worker.executorStateSync.maxAttempts": "3",
                   "spark.rpc.askTimeout": "7s"})
    h.register()
    m = ExecutorStateChanged("app-1", 0, ExecutorState.EXITED)
    tag = StateSyncTag(m, MASTER1)
    out = h.feed(AskAnswered(tag, None, RpcTimeoutError("timed out")))
    assert of(out, ScheduleTimer) == [ScheduleTimer(0, RetryExecutorStateSync(m))]
    out = h.feed(AskAnswered(tag, None, RpcConnectionError("closed")))
    assert of(out, ScheduleTimer) == [ScheduleTimer(7000, RetryExecutorStateSync(m))]
    assert "will retry (2/3)" in texts(out)[0]
    assert of(h.feed(RetryExecutorStateSync(m)), SendAsk)[0].message == m
    out = h.feed(AskAnswered(tag, None, RpcConnectionError("closed")))
    assert texts(out)[0].endswith("for 3 times. Giving up.") and Exit(1) in out
    h2 = Harness()
    h2.register()
    h2.feed(AskAnswered(tag, None, RpcTimeoutError("t")))
    h2.feed(AskAnswered(tag, True))
    assert h2.state.sync_failures == {}


def test_state_changes_without_a_master_are_dropped():
    h = Harness()
    h.start()
    out = h.feed(ExecutorRunnerReport(ExecutorStateChanged("a", 0, ExecutorState.RUNNING)))
    assert of(out, SendAsk) == [] and texts(out)[0].startswith("Dropping ExecutorStateChanged")


def test_application_finished_kills_its_executors_then_cleans_up():
    h = Harness()
    h.register()
    h.launch("app-1", 0)
    h.launch("app-1", 1)
    h.launch("app-2", 0)
    out = h.send(ApplicationFinished("app-1"))
    assert of(out, KillExecutorRunner) == [KillExecutorRunner("app-1/0", ExecutorState.KILLED),
                                           KillExecutorRunner("app-1/1", ExecutorState.KILLED)]
    assert of(out, CleanupApplication) == []
    h.feed(ExecutorRunnerReport(ExecutorStateChanged("app-1", 0, ExecutorState.KILLED)))
    out = h.feed(ExecutorRunnerReport(ExecutorStateChanged("app-1", 1, ExecutorState.KILLED)))
    assert of(out, CleanupApplication) == [CleanupApplication("app-1")]
    assert list(h.state.executors) == ["app-2/0"] and not h.state.finished_apps
    # an application with nothing here is cleaned up at once
    assert of(h.send(ApplicationFinished("app-3")), CleanupApplication) == \
        [CleanupApplication("app-3")]


def test_finished_executors_are_trimmed_like_spark():
    h = Harness(**{"spark.worker.ui.retainedExecutors": "10"})
    h.register()
    for i in range(12):
        h.launch("app", i, cores=0, memory=0)
        h.feed(ExecutorRunnerReport(ExecutorStateChanged("app", i, ExecutorState.EXITED)))
    assert len(h.state.finished_executors) <= 11
    assert "app/11" in h.state.finished_executors and "app/0" not in h.state.finished_executors


# -- drivers --------------------------------------------------------------------------------

def test_driver_launch_kill_exit_bookkeeping():
    h = Harness()
    h.register()
    gpu = {"gpu": ResourceInformation("gpu", ["2"])}
    out = h.send(LaunchDriver("driver-1", driver_desc(2, 1024), gpu, attempt=2))
    assert of(out, LaunchDriverRunner) == [LaunchDriverRunner("driver-1", driver_desc(2, 1024),
                                                              2, gpu)]
    s = h.state
    assert (s.cores_used, s.memory_used, s.resources_used) == (2, 1024, {"gpu": ("2",)})
    assert "Asked to launch driver driver-1, which is already running here" in \
        texts(h.send(LaunchDriver("driver-1", driver_desc())))
    assert of(h.send(KillDriver("driver-1")), KillDriverRunner) == \
        [KillDriverRunner("driver-1")]
    assert texts(h.send(KillDriver("nope"))) == ["Asked to kill unknown driver nope"]
    final = DriverStateChanged("driver-1", DriverState.KILLED, None, 143, 2)
    out = h.feed(DriverRunnerReport(final))
    assert "Driver driver-1 was killed by user" in texts(out)
    assert sent(out, DriverStateChanged) == [final]
    assert (s.cores_used, s.memory_used, s.resources_used) == (0, 0, {"gpu": ()})
    assert s.finished_drivers["driver-1"].summary().state == DriverState.KILLED
    assert s.driver_final_states["driver-1"] == (h.now, final)
    out = h.feed(Ask("req", RequestDriverLog("driver-1", "stdout")))
    assert out == [ServeDriverLog("req", RequestDriverLog("driver-1", "stdout"), True)]
    assert h.feed(Ask("r", RequestDriverLog("driver-x")))[0].known is False


def test_a_failed_driver_launch_is_reported_error():
    h = Harness()
    h.register()
    h.send(LaunchDriver("driver-1", driver_desc(), attempt=4))
    out = h.feed(RunnerLaunchFailed("OSError: no", driver_id="driver-1"))
    assert texts(out) == ["Failed to launch driver driver-1: OSError: no"]
    assert sent(out, DriverStateChanged) == [DriverStateChanged("driver-1", DriverState.ERROR,
                                                                "OSError: no", None, 4)]
    assert not h.state.drivers and h.state.cores_used == 0


def test_driver_reports_sent_while_the_master_was_away_are_resent():
    h = Harness()
    h.register()
    h.send(LaunchDriver("driver-1", driver_desc()))
    h.send(LaunchDriver("driver-2", driver_desc()))
    h.feed(DriverRunnerReport(DriverStateChanged("driver-1", DriverState.FINISHED)))
    h.now = 200.0
    h.feed(Disconnected(M1))                         # may have lost reports since 190
    h.now = 205.0
    done = DriverStateChanged("driver-2", DriverState.FAILED, "boom", 1)
    h.feed(DriverRunnerReport(done))
    out = h.send(MasterChanged(MASTER2, "http://m2:8080"), Peer(M2))
    assert [s.message for s in of(out, Send)][:1] == [done]
    assert "Re-sending the final state FAILED of driver driver-2" in texts(out)


# -- resources, cleanup, decommission, asks, failures ---------------------------------------

def test_state_response_accounts_resources_in_use():
    h = Harness()
    h.register()
    h.launch("a", 0, resources={"gpu": ResourceInformation("gpu", ["0"])})
    h.send(LaunchDriver("d", driver_desc(), {"gpu": ResourceInformation("gpu", ["1"])}))
    [reply] = h.feed(Ask("req", RequestWorkerState()))
    assert isinstance(reply, Reply) and reply.request == "req"
    r = reply.message
    assert (r.coresUsed, r.memoryUsed, r.registered) == (3, 768, True)
    assert r.resourcesUsed == {"gpu": ResourceInformation("gpu", ["0", "1"])}
    assert r.resources == GPU and r.masterUrl == "spark://m1:7077"


def test_work_dir_cleanup_spares_running_apps_and_drivers():
    h = Harness(**{"spark.worker.cleanup.appDataTtl": "60"})
    h.register()
    h.launch("app-1", 0)
    h.send(LaunchDriver("driver-1", driver_desc()))
    assert h.feed(WorkDirCleanupTick()) == [CleanupWorkDir(frozenset({"app-1", "driver-1"}),
                                                           60.0)]
    h2 = Harness(**{"spark.worker.cleanup.enabled": "false"})
    assert CLEANUP_TIMER not in [t.key for t in of(h2.register(), ScheduleTimer)]


def test_decommission():
    h = Harness()
    h.register()
    assert texts(h.send(DecommissionWorker())) == \
        ["Receive decommission request, but decommission feature is disabled."]
    h = Harness(**{"spark.decommission.enabled": "true"})
    h.register()
    assert texts(h.send(DecommissionWorker())) == ["Decommission worker worker-1."]
    assert h.state.decommissioned
    assert texts(h.send(DecommissionWorker())) == \
        ["Worker worker-1 already started decommissioning."]
    assert texts(h.launch()) == ["Asked to launch an executor while decommissioned. Not "
                                 "launching executor."]
    out = h.send(WorkerDecommissionSigReceived(), Peer(ME, local=True), sender=ME)
    assert sent(out, WorkerDecommissioning) == [WorkerDecommissioning("worker-1", SELF)]
    out = h.send(WorkerDecommissionSigReceived(), Peer(M1), sender=M1)
    assert texts(out) == ["Ignoring unexpected message WorkerDecommissionSigReceived from "
                          "m1:7077"]


def test_unsupported_ask_and_unexpected_message():
    h = Harness()
    h.register()
    assert h.feed(Ask("req", Heartbeat("x", SELF))) == [
        ReplyFailure("req", "Unsupported message Heartbeat", "UnsupportedMessageError")]
    assert texts(h.send(Heartbeat("x", SELF))) == ["Ignoring unexpected message Heartbeat from "
                                                   "m1:7077"]


def view(state: WorkerState) -> dict:
    """Every attribute's value, the fence's and the lease's by content."""
    return {k: (vars(v).copy() if k in ("fence", "lease") else
                v.copy() if isinstance(v, (dict, set, list)) else v)
            for k, v in vars(state).items() if k not in ("_out", "_handlers", "_receivers")}


def test_a_handler_that_raises_changes_nothing_and_only_logs():
    h = Harness(**{"spark.worker.preferConfiguredMasterAddress": "true"})
    h.start()
    before = view(h.state)
    # registered and the fence/lease advance before the bad ref breaks _change_master
    out = h.send(RegisteredWorker(object(), "http://m:8080", M1, False, 7))
    assert len(out) == 1 and out[0].level == "ERROR"
    assert out[0].text.startswith("Error while handling Received: AttributeError")
    s = h.state
    assert (s.registered, s.fence.newest, s.lease.renewed_at) == (False, 0, None)
    assert view(s) == before


def test_a_failing_ask_gets_only_its_failure_reply(monkeypatch):
    h = Harness()
    h.register()

    def broken() -> None:
        h.state.cores_used = 99
        raise RuntimeError("broken view")
    monkeypatch.setattr(h.state, "state_response", broken)
    out = h.feed(Ask("req", RequestWorkerState()))
    assert out[1:] == [ReplyFailure("req", "RuntimeError: broken view")]
    assert h.state.cores_used == 0


def test_stopping_cancels_timers_kills_everything_and_ignores_messages():
    h = Harness()
    h.register()
    h.launch()
    h.send(LaunchDriver("driver-1", driver_desc()))
    out = h.feed(Stopping())
    assert set(of(out, CancelTimer)) == {CancelTimer(HEARTBEAT_TIMER), CancelTimer(LEASE_TIMER),
                                         CancelTimer(CLEANUP_TIMER)}
    assert of(out, KillExecutorRunner) == [KillExecutorRunner("app-1/0", ExecutorState.KILLED)]
    assert of(out, KillDriverRunner) == [KillDriverRunner("driver-1")]
    assert h.launch("app-2") == [] and h.feed(Disconnected(M1)) == []


def test_kill_all_on_daemon_stop_fails_executors_with_a_message():
    h = Harness()
    h.register()
    h.launch()
    out = h.feed(KillAll(ExecutorState.FAILED, "Worker shutting down"))
    assert of(out, KillExecutorRunner) == [KillExecutorRunner("app-1/0", ExecutorState.FAILED,
                                                              "Worker shutting down")]
    assert h.state.executors["app-1/0"].state == ExecutorState.FAILED


@pytest.mark.parametrize("prefer", ["true", "false"])
def test_prefer_configured_master_address(prefer):
    h = Harness(**{"spark.worker.preferConfiguredMasterAddress": prefer})
    h.start()
    internal = Ref(RpcAddress("10.0.0.1", 7077))
    out = h.send(RegisteredWorker(internal, "u", M1, False), Peer(M1))
    url = "spark://m1:7077" if prefer == "true" else "spark://10.0.0.1:7077"
    assert f"Successfully registered with master {url}" in texts(out)
    h.feed(Disconnected(M1))
    retry = of(h.feed(RegistrationRetryTick()), ConnectToMaster)
    assert [c.address for c in retry] == [M1 if prefer == "true" else internal.address]


def test_the_state_module_does_no_io():
    """No clock, randomness, file system, process or socket module in the decisions."""
    import ast
    import ember.deploy.worker.state as module
    tree = ast.parse(open(module.__file__, encoding="utf-8").read())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
                for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree)
                 if isinstance(n, ast.ImportFrom) and n.module}
    assert not imported & {"os", "time", "random", "uuid", "socket", "subprocess",
                           "threading", "shutil", "asyncio", "psutil"}


@pytest.mark.parametrize("seed", range(20))
def test_accounting_matches_the_records_under_random_event_sequences(seed):
    """Whatever order launches, kills, reports, failures and finished applications come
    in, the share in use is exactly what the live executors and drivers hold. (The master
    never assigns one address to two holders, so each holder gets its own.)"""
    import random
    rng = random.Random(seed)
    h = Harness()
    h.register()
    for _ in range(150):
        app, n = f"app-{rng.randrange(3)}", rng.randrange(4)
        choice = rng.randrange(8)
        if choice == 0:
            h.launch(app, n, cores=rng.randrange(1, 3), memory=256,
                     resources={"gpu": ResourceInformation("gpu", [f"{app}/{n}"])})
        elif choice == 1:
            h.send(LaunchDriver(f"driver-{n}", driver_desc(1, 128),
                                {"gpu": ResourceInformation("gpu", [f"driver-{n}"])}))
        elif choice == 2:
            h.send(KillExecutor("spark://m1:7077", app, n))
        elif choice == 3:
            state = rng.choice([ExecutorState.RUNNING, ExecutorState.EXITED,
                                ExecutorState.KILLED, ExecutorState.FAILED])
            h.feed(ExecutorRunnerReport(ExecutorStateChanged(app, n, state)))
        elif choice == 4:
            h.feed(DriverRunnerReport(DriverStateChanged(f"driver-{n}", DriverState.FINISHED)))
        elif choice == 5:
            h.feed(RunnerLaunchFailed("OSError: x", full_id=f"{app}/{n}"))
        elif choice == 6:
            h.feed(RunnerLaunchFailed("OSError: x", driver_id=f"driver-{n}"))
        else:
            h.send(ApplicationFinished(app))
        s = h.state
        live = [*s.executors.values(), *s.drivers.values()]
        assert s.cores_used == sum(r.cores for r in live)
        assert s.memory_used == sum(r.memory for r in live)
        held = sorted(a for r in live for a in r.resources.get("gpu", ResourceInformation(
            "gpu", [])).addresses)
        assert sorted(s.resources_used.get("gpu", ())) == held
