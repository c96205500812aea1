"""The master's sans-I/O state machine: every event in, the exact instructions out.

Refs are real (unbound) RpcEndpointRefs for workers, so addresses behave as in the daemon,
and plain strings for drivers; nothing here opens a socket or sleeps.
"""
from __future__ import annotations

import enum
import os
import random
import time

import pytest

from ember.deploy import rollback
from ember.deploy.master.records import app_record, driver_record
from ember.deploy.master.scheduling import ApplicationInfo, DriverInfo, WorkerInfo
from ember.deploy.master.state import (
    Ask, BeginRecovery, Disconnected, LaunchBackoffExpired, LeaseExpired, Log, MasterState,
    Persist, Reply, ReplyFailure, ScheduleTimer, Send, Unpersist,
)
from ember.deploy.messages import (
    ApplicationDescription, ApplicationFinished, ApplicationRemoved, ApplicationState,
    BoundPortsRequest, BoundPortsResponse, CheckForWorkerTimeOut, Command, CompleteRecovery,
    DecommissionWorker, DecommissionWorkersOnHosts, DriverDescription, DriverState,
    DriverStateChanged, DriverStatusResponse, ElectedLeader, ExecutorAdded, ExecutorDescription,
    ExecutorState, ExecutorStateChanged, ExecutorUpdated, Heartbeat, KillAllDriversResponse,
    KillDriver, KillDriverResponse, KillExecutor, KillExecutors, LaunchDriver, LaunchExecutor,
    MasterChangeAcknowledged, MasterChanged, MasterInStandby, MasterStateResponse,
    ReconnectWorker, RecoveryState, RegisterApplication, RegisteredApplication, RegisteredWorker,
    RegisterWorker, RegisterWorkerFailed, RequestClearCompletedDriversAndApps,
    RequestDriverStatus, RequestExecutors, RequestKillAllDrivers, RequestKillApplication,
    RequestKillDriver, RequestMasterState, RequestReadyz, RequestSubmitDriver, ResourceProfile,
    RevokedLeadership, SubmitDriverResponse, UnregisterApplication, WorkerDecommissioning,
    WorkerDriverStateResponse, WorkerExecutorStateResponse, WorkerLatestState, WorkerRemoved,
    WorkerSchedulerStateResponse, WorkerState,
)
from ember.rpc import RpcAddress, RpcEndpointRef

NOW = 1_735_689_600_000  # 2025-01-01 00:00:00 UTC
MASTER = "master-ref"
MASTER_URL = "spark://m:7077"


@pytest.fixture(autouse=True)
def utc():
    """Ids carry the master's local time; pin the zone so they are predictable."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


# -- helpers ----------------------------------------------------------------------------------

def new_master(conf: dict | None = None, alive: bool = True) -> MasterState:
    m = MasterState(conf or {}, host="m", port=7077, self_ref=MASTER,
                    web_ui_url="http://m:8080", rest_port=6066, rng=random.Random(0))
    if alive:
        out = m.handle(ElectedLeader(), NOW)
        assert out == [Log("INFO", "I have been elected leader! New state: ALIVE")]
    return m


def wref(name: str, host: str = "10.0.0.1", port: int | None = None) -> RpcEndpointRef:
    port = port if port is not None else 40000 + int("".join(c for c in name if c.isdigit()) or 0)
    return RpcEndpointRef(RpcAddress(host, port), "Worker")


def register_worker(m: MasterState, wid: str, cores: int = 4, memory: int = 4096,
                    now: int = NOW, ref: RpcEndpointRef | None = None, host: str = "10.0.0.1"):
    ref = ref or wref(wid, host)
    out = m.handle(RegisterWorker(wid, ref.address.host, ref.address.port, ref, cores, memory,
                                  f"http://{ref.address.host}:8081",
                                  RpcAddress("m", 7077)), now)
    return ref, out


def app_desc(name: str = "app", max_cores: int | None = None, cores: int | None = None,
             memory: int = 1024, limit: int | None = None) -> ApplicationDescription:
    return ApplicationDescription(name, max_cores, Command("ember.executor.backend"),
                                  "http://d:4040",
                                  ResourceProfile.of(cores=cores, memoryMb=memory),
                                  initialExecutorLimit=limit, user="alice")


def register_app(m: MasterState, driver: str, desc: ApplicationDescription | None = None,
                 now: int = NOW) -> tuple[str, list]:
    out = m.handle(RegisterApplication(desc or app_desc(), driver), now)
    ids = [i.message.appId for i in out if isinstance(i.message if isinstance(i, Send) else None,
                                                      RegisteredApplication)]
    return (ids[0] if ids else None), out


def driver_desc(mem: int = 512, cores: int = 1, supervise: bool = False) -> DriverDescription:
    return DriverDescription("file:/apps/pi.py", mem, cores, supervise,
                             Command("ember.deploy.driver_wrapper",
                                     ["{{WORKER_URL}}", "{{USER_JAR}}", "pi.Main"]))


def submit_driver(m: MasterState, desc: DriverDescription | None = None, now: int = NOW):
    out = m.handle(Ask("req", RequestSubmitDriver(desc or driver_desc())), now)
    reply = [i for i in out if isinstance(i, Reply)][0].message
    return reply, out


def sends(out, cls=None, target=None) -> list:
    return [i for i in out if isinstance(i, Send) and (cls is None or isinstance(i.message, cls))
            and (target is None or i.target == target)]


def msgs(out, cls=None, target=None) -> list:
    return [i.message for i in sends(out, cls, target)]


def logs(out, level: str | None = None) -> list[str]:
    return [i.text for i in out if isinstance(i, Log) and (level is None or i.level == level)]


def reply(out):
    replies = [i for i in out if isinstance(i, (Reply, ReplyFailure))]
    assert len(replies) == 1, out
    return replies[0].message if isinstance(replies[0], Reply) else replies[0]


# -- start, leadership, standby ---------------------------------------------------------------

def test_on_start_logs_and_starts_the_timeout_timer():
    m = new_master(alive=False)
    assert m.on_start(NOW) == [Log("INFO", "Starting Spark master at spark://m:7077"),
                               ScheduleTimer(0, CheckForWorkerTimeOut(), 60_000)]
    m2 = MasterState({"spark.worker.timeout": "10"})
    assert m2.on_start(NOW)[1] == ScheduleTimer(0, CheckForWorkerTimeOut(), 10_000)


def test_standby_master_refuses_everything():
    m = new_master(alive=False)
    assert m.state == RecoveryState.STANDBY
    ref, out = register_worker(m, "worker-1")
    assert msgs(out) == [MasterInStandby()]
    assert m.workers == {}
    assert m.handle(RegisterApplication(app_desc(), "driver-1"), NOW) == []
    assert m.apps == {}
    r = reply(m.handle(Ask(1, RequestSubmitDriver(driver_desc())), NOW))
    assert r == SubmitDriverResponse(MASTER, False, None, "Current state is not alive: STANDBY. "
                                     "Can only accept driver submissions in ALIVE state.")
    r = reply(m.handle(Ask(1, RequestKillDriver("driver-x")), NOW))
    assert r == KillDriverResponse(MASTER, "driver-x", False, "Current state is not alive: "
                                   "STANDBY. Can only kill drivers in ALIVE state.")
    r = reply(m.handle(Ask(1, RequestKillAllDrivers()), NOW))
    assert r == KillAllDriversResponse(MASTER, False, "Current state is not alive: STANDBY. "
                                       "Can only kill drivers in ALIVE state.")
    r = reply(m.handle(Ask(1, RequestDriverStatus("driver-x")), NOW))
    assert r == DriverStatusResponse(False, None, None, None, "Current state is not alive: "
                                     "STANDBY. Can only request driver status in ALIVE state.")
    assert reply(m.handle(Ask(1, RequestReadyz()), NOW)) is False
    assert reply(m.handle(Ask(1, DecommissionWorkersOnHosts(["10.0.0.1"])), NOW)) == 0
    assert msgs(m.handle(WorkerDecommissioning("worker-1", ref), NOW)) == [MasterInStandby()]
    m.handle(ElectedLeader(), NOW)
    assert reply(m.handle(Ask(1, RequestReadyz()), NOW)) is True


def test_register_application_in_standby_sends_nothing():
    m = new_master(alive=False)
    out = m.handle(RegisterApplication(app_desc(), "driver-1"), NOW)
    assert out == []


def test_revoked_leadership_steps_down_to_standby_and_forgets_the_cluster():
    m = new_master()
    register_worker(m, "worker-1")
    assert m.handle(RevokedLeadership(), NOW) == [
        Log("ERROR", "Leadership has been revoked -- stepping down to STANDBY.")]
    assert m.state == RecoveryState.STANDBY and not m.workers and not m.id_to_worker
    assert m.handle(RevokedLeadership(), NOW) == []


# -- workers ----------------------------------------------------------------------------------

def test_register_worker():
    m = new_master()
    ref, out = register_worker(m, "worker-1", cores=8, memory=8192)
    assert logs(out) == ["Registering worker 10.0.0.1:40001 with 8 cores, 8.0 GiB RAM"]
    assert [i for i in out if isinstance(i, Persist)][0].key == "worker_worker-1"
    assert msgs(out, target=ref) == [RegisteredWorker(MASTER, "http://m:8080",
                                                      RpcAddress("m", 7077), False)]
    w = m.id_to_worker["worker-1"]
    assert (w.cores, w.memory, w.state, w.last_heartbeat) == (8, 8192, WorkerState.ALIVE, NOW)
    _, out = register_worker(m, "worker-2", memory=1024)
    assert logs(out)[0] == "Registering worker 10.0.0.1:40002 with 4 cores, 1024.0 MiB RAM"


def test_register_worker_duplicate_id_is_a_duplicate_registration():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    _, out = register_worker(m, "worker-1", ref=ref)
    assert msgs(out) == [RegisteredWorker(MASTER, "http://m:8080", RpcAddress("m", 7077), True)]
    assert len(m.workers) == 1
    assert not [i for i in out if isinstance(i, Persist)]


def test_register_worker_at_same_address_fails():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    _, out = register_worker(m, "worker-9", ref=ref)
    assert msgs(out) == [RegisterWorkerFailed(
        "Attempted to re-register worker at same address: 10.0.0.1:40001")]
    assert "Worker registration failed. Attempted to re-register worker at same address: " \
           "10.0.0.1:40001" in logs(out, "WARN")
    assert list(m.id_to_worker) == ["worker-1"]


def test_dead_worker_at_same_host_port_is_replaced_on_registration():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    m.handle(Disconnected(ref.address), NOW)
    assert [w.state for w in m.workers] == [WorkerState.DEAD]
    _, out = register_worker(m, "worker-1b", ref=ref)
    assert msgs(out, RegisteredWorker)[0].duplicate is False
    assert [w.id for w in m.workers] == ["worker-1b"]


def test_heartbeat():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    assert m.handle(Heartbeat("worker-1", ref), NOW + 5000) == []
    assert m.id_to_worker["worker-1"].last_heartbeat == NOW + 5000
    # never registered: warning only
    out = m.handle(Heartbeat("worker-x", wref("x9")), NOW)
    assert out == [Log("WARN", "Got heartbeat from unregistered worker worker-x. This worker "
                               "was never registered, so ignoring the heartbeat.")]
    # known but DEAD: asked to reconnect
    m.handle(Disconnected(ref.address), NOW)
    out = m.handle(Heartbeat("worker-1", ref), NOW)
    assert out == [Log("WARN", "Got heartbeat from unregistered worker worker-1. Asking it to "
                               "re-register."), Send(ref, ReconnectWorker(MASTER_URL))]


def test_a_master_that_was_stopped_removes_no_worker_for_its_own_silence():
    """Stopped (SIGSTOP, a paused VM) longer than spark.worker.timeout, the master's first
    check ran before it read the heartbeats waiting in its sockets, and removed every
    worker, and every executor of every application with them. A check that runs more than
    half an interval late removes nobody; a worker that stays silent after is removed one
    timeout later."""
    m = new_master()
    register_worker(m, "worker-1", cores=4, memory=8192)
    w2, _ = register_worker(m, "worker-2", cores=4, memory=8192)
    app_id, _ = register_app(m, "driver-A", app_desc(max_cores=2))
    executors = dict(m.id_to_app[app_id].executors)
    assert m.handle(CheckForWorkerTimeOut(), NOW + 30_000) == []
    out = m.handle(CheckForWorkerTimeOut(), NOW + 300_000)          # due at 90 s
    assert logs(out, "WARN") == ["Checked for dead workers 270000 ms after the last check "
                                 "(every 60000 ms): this master was stopped or starved, so no "
                                 "worker is removed for that silence"]
    assert not msgs(out) and m.id_to_worker.keys() == {"worker-1", "worker-2"}
    assert m.id_to_app[app_id].executors == executors
    assert m.id_to_worker["worker-1"].last_heartbeat == NOW     # what /json shows stays true
    m.handle(Heartbeat("worker-2", w2), NOW + 301_000)
    assert m.handle(CheckForWorkerTimeOut(), NOW + 360_000) == []
    m.handle(Heartbeat("worker-2", w2), NOW + 415_000)
    out = m.handle(CheckForWorkerTimeOut(), NOW + 420_000)
    assert logs(out, "WARN") == ["Removing worker-1 because we got no heartbeat in 60000 ms"]
    assert m.id_to_worker.keys() == {"worker-2"}


def test_worker_timeout_loses_executors_and_drivers():
    m = new_master()
    w1, _ = register_worker(m, "worker-1", cores=4, memory=8192)
    sup, _ = submit_driver(m, driver_desc(supervise=True))
    plain, _ = submit_driver(m, driver_desc(supervise=False))
    app_id, _ = register_app(m, "driver-A", app_desc(max_cores=2))
    assert [e.worker.id for e in m.id_to_app[app_id].executors.values()] == ["worker-1"]
    w2, out = register_worker(m, "worker-2", cores=4, memory=8192, now=NOW + 30_000)

    # not yet: the last heartbeat is exactly 60 s old
    out = m.handle(CheckForWorkerTimeOut(), NOW + 60_000)
    assert out == []
    out = m.handle(CheckForWorkerTimeOut(), NOW + 60_001)
    assert logs(out, "WARN")[0] == "Removing worker-1 because we got no heartbeat in 60000 ms"
    assert "Removing worker worker-1 on 10.0.0.1:40001" in logs(out)
    lost = ExecutorUpdated(0, ExecutorState.LOST, "worker lost: Not receiving heartbeat for 60 "
                           "seconds", None, "10.0.0.1")
    assert lost in msgs(out, target="driver-A")
    assert WorkerRemoved("worker-1", "10.0.0.1", "Not receiving heartbeat for 60 seconds") in \
        msgs(out, target="driver-A")
    assert Unpersist("worker_worker-1") in out
    assert m.id_to_worker.keys() == {"worker-2"}
    assert m.id_to_app[app_id].executors[1].worker.id == "worker-2"  # rescheduled elsewhere
    assert LaunchExecutor in {type(x) for x in msgs(out, target=w2)}

    # supervised driver: relaunched under the same id, next attempt; unsupervised: ERROR
    completed = {d.id: d.state for d in m.completed_drivers}
    assert completed == {plain.driverId: DriverState.ERROR}
    assert f"Re-launching {sup.driverId}" in logs(out)
    assert f"Not re-launching {plain.driverId} because it was not supervised" in logs(out)
    # fencing: not before worker-1's lease (= spark.worker.timeout) + grace since its last
    # heartbeat has expired, when worker-1 has surely killed its copy
    (new_driver,) = m.drivers.values()
    assert new_driver.worker is None and new_driver in m.waiting_drivers
    assert ScheduleTimer(1_999, LeaseExpired(sup.driverId), None) in out
    assert LaunchDriver not in {type(x) for x in msgs(out, target=w2)}
    assert not msgs(m.handle(LeaseExpired(sup.driverId), NOW + 61_999), LaunchDriver)
    out = m.handle(LeaseExpired(sup.driverId), NOW + 62_000)
    assert new_driver.id == sup.driverId and new_driver.worker.id == "worker-2"
    assert new_driver.attempt == 2 and new_driver.state == DriverState.RUNNING
    assert LaunchDriver(sup.driverId, new_driver.desc, {}, 2) in msgs(out, target=w2)
    assert Persist(f"driver_{new_driver.id}", driver_record(new_driver)) in out
    # the lost copy's late report (attempt 1) is fenced off; the live attempt's is not
    late = m.handle(DriverStateChanged(sup.driverId, DriverState.FAILED, None, 1, 1),
                    NOW + 62_002)
    assert m.drivers[sup.driverId].state == DriverState.RUNNING
    assert "Ignoring FAILED of" in logs(late, "WARN")[0]
    m.handle(DriverStateChanged(sup.driverId, DriverState.FINISHED, None, 0, 2), NOW + 62_003)
    assert m.completed_drivers[-1].id == sup.driverId
    assert m.completed_drivers[-1].exit_status == 0
    assert msgs(out, LaunchDriver, w2)[0].driverId == new_driver.id

    # DEAD workers are culled after (15 + 1) * 60 s without a heartbeat
    m.handle(Heartbeat("worker-2", w2), NOW + 16 * 60_000 + 1)
    assert len(m.workers) == 2
    m.handle(CheckForWorkerTimeOut(), NOW + 16 * 60_000)
    assert len(m.workers) == 2
    m.handle(CheckForWorkerTimeOut(), NOW + 16 * 60_000 + 1)
    assert [w.id for w in m.workers] == ["worker-2"]


def test_worker_disconnect_removes_it_at_once():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    out = m.handle(Disconnected(ref.address), NOW)
    assert logs(out)[0] == "10.0.0.1:40001 got disassociated, removing it."
    assert WorkerRemoved("worker-1", "10.0.0.1", "10.0.0.1:40001 got disassociated") in msgs(out)
    assert m.id_to_worker == {}


def test_worker_latest_state_kills_unknown_executors_and_drivers():
    m = new_master()
    ref, _ = register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    known = ExecutorDescription(app_id, 0, 0, 4, 1024, ExecutorState.RUNNING)
    stale = ExecutorDescription("app-old", 3, 0, 1, 1024, ExecutorState.RUNNING)
    out = m.handle(WorkerLatestState("worker-1", [known, stale], ["driver-old"]), NOW)
    assert out == [Send(ref, KillExecutor(MASTER_URL, "app-old", 3)),
                   Send(ref, KillDriver("driver-old"))]
    assert m.handle(WorkerLatestState("worker-9", [], []), NOW) == [
        Log("WARN", "Worker state from unknown worker: worker-9")]


def test_decommission_workers_on_hosts():
    m = new_master()
    r1, _ = register_worker(m, "worker-1", host="hostA")
    r2, _ = register_worker(m, "worker-2", host="hostB")
    app_id, _ = register_app(m, "driver-A", app_desc(max_cores=8))
    out = m.handle(Ask(7, DecommissionWorkersOnHosts(["HOSTA"])), NOW)
    assert reply(out) == 1
    assert m.id_to_worker["worker-1"].state == WorkerState.DECOMMISSIONED
    assert Send(r1, DecommissionWorker()) in out
    exec_on_1 = [u for u in msgs(out, ExecutorUpdated, "driver-A")]
    assert exec_on_1 and exec_on_1[0].state == ExecutorState.DECOMMISSIONED
    assert exec_on_1[0].message == "worker decommissioned"
    assert exec_on_1[0].workerHost == "hostA"
    assert Unpersist("worker_worker-1") in out
    # idempotent count; the second time is skipped with a warning
    out = m.handle(Ask(8, DecommissionWorkersOnHosts(["hosta"])), NOW)
    assert reply(out) == 1
    assert "Skipping decommissioning worker worker-1 on hostA:40001 as worker is already " \
           "decommissioned" in logs(out, "WARN")
    # the worker's own signal
    m.handle(WorkerDecommissioning("worker-2", r2), NOW)
    assert m.id_to_worker["worker-2"].state == WorkerState.DECOMMISSIONED


# -- applications -----------------------------------------------------------------------------

def test_register_application_ids_and_launches():
    m = new_master()
    w, _ = register_worker(m, "worker-1", cores=4, memory=4096)
    app_id, out = register_app(m, "driver-A", app_desc("PythonPi"))
    assert app_id == "app-20250101000000-0000"
    assert logs(out)[:2] == ["Registering app PythonPi",
                             "Registered app PythonPi with ID app-20250101000000-0000"]
    assert [(i.key, i.obj) for i in out if isinstance(i, Persist)] == [
        (f"app_{app_id}", app_record(m.id_to_app[app_id]))]
    assert msgs(out, target="driver-A")[0] == RegisteredApplication(app_id, MASTER)
    launch = msgs(out, LaunchExecutor, w)[0]
    assert (launch.masterUrl, launch.appId, launch.execId, launch.rpId, launch.cores,
            launch.memory) == (MASTER_URL, app_id, 0, 0, 4, 1024)
    assert ExecutorAdded(0, "worker-1", "10.0.0.1:40001", 4, 1024) in msgs(out, target="driver-A")
    assert m.id_to_app[app_id].state == ApplicationState.RUNNING
    app2, _ = register_app(m, "driver-B", now=NOW + 1000)
    assert app2 == "app-20250101000001-0001"


def test_app_and_driver_id_patterns_and_modulo():
    m = new_master({"spark.deploy.appIdPattern": "job-%s-%06d",
                    "spark.deploy.driverIdPattern": "drv-%s-%d",
                    "spark.deploy.appNumberModulo": "1000"})
    m.next_app_number = 999
    assert register_app(m, "d1")[0] == "job-20250101000000-000999"
    assert register_app(m, "d2")[0] == "job-20250101000000-000000"
    assert submit_driver(m)[0].driverId == "drv-20250101000000-0"
    with pytest.raises(ValueError, match="Whitespace"):
        MasterState({"spark.deploy.appIdPattern": "app %s-%d"})
    with pytest.raises(ValueError, match="at least 1000"):
        MasterState({"spark.deploy.appNumberModulo": "10"})


def test_use_app_name_as_app_id():
    m = new_master({"spark.master.useAppNameAsAppId.enabled": "true"})
    assert register_app(m, "d1", app_desc("My Nightly  Job"))[0] == "mynightlyjob"


def test_reregistration_at_same_driver_address_is_not_tracked():
    m = new_master()
    first, _ = register_app(m, "driver-A")
    second, out = register_app(m, "driver-A")
    assert "Attempted to re-register application at same address: driver-A" in logs(out)
    assert msgs(out, RegisteredApplication) == [RegisteredApplication(second, MASTER)]
    assert list(m.id_to_app) == [first]


def test_invalid_application_is_removed_with_a_reason():
    m = new_master()
    out = m.handle(RegisterApplication(app_desc(cores=0), "driver-A"), NOW)
    assert msgs(out) == [ApplicationRemoved(
        "Invalid application: spark.executor.cores must be positive, got 0")]
    assert m.apps == {}


def test_app_may_hang_warning():
    m = new_master()
    register_worker(m, "worker-1", memory=1024)
    app_id, out = register_app(m, "driver-A", app_desc(memory=100_000))
    assert f"App {app_id} requires more resource than any of Workers could have." in \
        logs(out, "WARN")


def test_spread_out_and_consolidate_through_the_state():
    for spread, expected in (("true", [2, 2, 2]), ("false", [4, 2])):
        m = new_master({"spark.deploy.spreadOut": spread})
        for i in (1, 2, 3):
            register_worker(m, f"worker-{i}", cores=4, memory=8192)
        app_id, out = register_app(m, "driver-A", app_desc(max_cores=6))
        assert [x.cores for x in msgs(out, LaunchExecutor)] == expected


def test_executor_state_changed_running_and_exit():
    m = new_master()
    w, _ = register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    app = m.id_to_app[app_id]
    out = m.handle(Ask("r1", ExecutorStateChanged(app_id, 0, ExecutorState.RUNNING)), NOW)
    assert reply(out) is True
    assert msgs(out, target="driver-A") == [ExecutorUpdated(0, ExecutorState.RUNNING, None, None,
                                                            None)]
    # a retried RUNNING ask is acknowledged without effect
    out = m.handle(Ask("r2", ExecutorStateChanged(app_id, 0, ExecutorState.RUNNING)), NOW)
    assert out == [Reply("r2", True)]
    # normal exit: removed, replaced at once, retry count untouched
    out = m.handle(Ask("r3", ExecutorStateChanged(app_id, 0, ExecutorState.EXITED,
                                                  "Command exited with code 0", 0)), NOW)
    assert f"Removing executor {app_id}/0 because it is EXITED" in logs(out)
    assert app.retry_count == 0
    assert [x.execId for x in msgs(out, LaunchExecutor)] == [1]
    assert reply(out) is True
    # unknown executor
    out = m.handle(Ask("r4", ExecutorStateChanged(app_id, 42, ExecutorState.RUNNING)), NOW)
    assert out == [Log("WARN", f"Got status update for unknown executor {app_id}/42"),
                   Reply("r4", True)]


def test_illegal_transition_to_running_is_refused_without_change():
    m = new_master()
    register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    exec = m.id_to_app[app_id].executors[0]
    exec.state = ExecutorState.KILLED
    out = m.handle(Ask("r", ExecutorStateChanged(app_id, 0, ExecutorState.RUNNING)), NOW)
    text = "executor 0 state transfer from KILLED to RUNNING is illegal"
    assert out == [Log("ERROR", text), ReplyFailure("r", text)]
    assert exec.state == ExecutorState.KILLED


def fail_executor(m, app_id, exec_id, exit_status=1):
    return m.handle(Ask("r", ExecutorStateChanged(app_id, exec_id, ExecutorState.FAILED,
                                                  "boom", exit_status)), NOW)


def test_executor_retries_remove_the_application():
    m = new_master({"spark.deploy.maxExecutorRetries": "3"})
    w, _ = register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A", app_desc("Flaky"))
    app = m.id_to_app[app_id]
    for attempt in range(2):
        out = fail_executor(m, app_id, attempt)
        assert msgs(out, LaunchExecutor)  # replaced at once
    out = fail_executor(m, app_id, 2)
    assert "Application Flaky with ID app-20250101000000-0000 failed 3 times; removing it" in \
        logs(out, "ERROR")
    assert ApplicationRemoved("FAILED") in msgs(out, target="driver-A")
    assert app.state == ApplicationState.FAILED and app in m.completed_apps
    assert ApplicationFinished(app_id) in msgs(out, target=w)
    assert reply(out) is True


def test_executor_retries_spare_an_app_with_a_running_executor():
    m = new_master({"spark.deploy.maxExecutorRetries": "1"})
    register_worker(m, "worker-1")
    register_worker(m, "worker-2")
    app_id, _ = register_app(m, "driver-A")
    m.handle(Ask("r", ExecutorStateChanged(app_id, 0, ExecutorState.RUNNING)), NOW)
    failed_on = m.id_to_app[app_id].executors[1].worker.id
    out = fail_executor(m, app_id, 1)
    assert m.id_to_app[app_id].retry_count == 1
    assert not msgs(out, ApplicationRemoved)
    # RUNNING resets the count (the replacement is launched once that worker's back-off is
    # over: the app has an executor running meanwhile)
    (launch,) = msgs(m.handle(LaunchBackoffExpired(app_id, failed_on), NOW + 1000),
                     LaunchExecutor)
    m.handle(Ask("r", ExecutorStateChanged(app_id, launch.execId, ExecutorState.RUNNING)),
             NOW + 1000)
    assert m.id_to_app[app_id].retry_count == 0


def test_executors_failing_to_start_on_a_worker_back_off_while_the_app_runs_elsewhere():
    """Spark relaunches at once forever while the app runs elsewhere (a full disk made
    thousands of launches a minute); Ember backs off that worker from the first failure
    when the app can run elsewhere, and past the retry limit otherwise (alone on one
    worker: at once, test_executor_retries_remove_the_application)."""
    m = new_master({"spark.deploy.maxExecutorRetries": "2"})
    w1, _ = register_worker(m, "worker-1")
    w2, _ = register_worker(m, "worker-2")
    app_id, out = register_app(m, "driver-A")
    placed = {x.execId: t for t, x in ((i.target, i.message) for i in out
                                        if isinstance(i, Send)
                                        and isinstance(i.message, LaunchExecutor))}
    bad = next(e for e, t in placed.items() if t == w1)
    good = next(e for e, t in placed.items() if t == w2)
    m.handle(Ask("r", ExecutorStateChanged(app_id, good, ExecutorState.RUNNING)), NOW)
    out = fail_executor(m, app_id, bad)                  # the app runs on worker-2: wait 1 s
    assert not msgs(out, LaunchExecutor)
    assert ScheduleTimer(1000, LaunchBackoffExpired(app_id, "worker-1"), None) in out
    assert "failed to start 1 times in a row on worker-1" in logs(out, "WARN")[0]
    (launch,) = msgs(m.handle(LaunchBackoffExpired(app_id, "worker-1"), NOW + 1000),
                     LaunchExecutor, w1)
    out = m.handle(Ask("r", ExecutorStateChanged(app_id, launch.execId, ExecutorState.FAILED,
                                                 "boom", 1)), NOW + 1000)
    assert ScheduleTimer(2000, LaunchBackoffExpired(app_id, "worker-1"), None) in out
    (launch,) = msgs(m.handle(LaunchBackoffExpired(app_id, "worker-1"), NOW + 3000),
                     LaunchExecutor, w1)
    m.handle(Ask("r", ExecutorStateChanged(app_id, launch.execId, ExecutorState.RUNNING)),
             NOW + 3000)
    assert not m._launch_backoff                        # running again: forgiven
    # two executors on one worker: the second's failure keeps the first one's back-off
    m = new_master()
    w, _ = register_worker(m, "worker-1", cores=2)
    app_id, _ = register_app(m, "driver-A", app_desc(max_cores=2, cores=1))
    assert not msgs(fail_executor(m, app_id, 0), LaunchExecutor)
    assert not msgs(fail_executor(m, app_id, 1), LaunchExecutor)
    assert len(msgs(m.handle(LaunchBackoffExpired(app_id, "worker-1"), NOW + 1000),
                    LaunchExecutor, w)) == 2


def test_an_executor_that_failed_to_start_is_replaced_on_another_worker_first():
    """A failed start's replacement goes to another worker that can take it, not back to the
    one that failed (Spark takes that one again first, its cores being free); that one is
    used only when no other can take the executor (alone on one worker: at once,
    test_executor_retries_remove_the_application)."""
    m = new_master()
    workers = {f"worker-{i}": register_worker(m, f"worker-{i}", cores=2)[0] for i in (1, 2, 3)}
    app_id, out = register_app(m, "driver-A", app_desc(max_cores=2, cores=1))
    placed = {x.execId: t for t, x in ((i.target, i.message) for i in out
                                        if isinstance(i, Send)
                                        and isinstance(i.message, LaunchExecutor))}
    (bad, bad_ref), (starting, _) = placed.items()
    full_disk = next(w for w, ref in workers.items() if ref == bad_ref)
    (launch,) = msgs(fail_executor(m, app_id, bad), LaunchExecutor)
    assert m.id_to_app[app_id].executors[launch.execId].worker.id != full_disk
    for e in (starting, launch.execId):
        m.handle(Ask("r", ExecutorStateChanged(app_id, e, ExecutorState.RUNNING)), NOW)
    assert m.id_to_app[app_id].state == ApplicationState.RUNNING


def test_a_young_app_whose_only_room_is_a_failing_worker_is_not_removed_at_once():
    """The chaos run's case: the other workers busy, both executors of a new app on the
    worker whose disk is full. Spark fails 10 launches there in the same second and removes
    the app; Ember waits between them, so capacity elsewhere has time to free up."""
    m = new_master()
    for i in (1, 2):
        register_worker(m, f"worker-{i}", cores=1)
    register_app(m, "driver-A", app_desc(max_cores=2, cores=1))
    w3, _ = register_worker(m, "worker-3", cores=2)
    app_id, out = register_app(m, "driver-B", app_desc(max_cores=2, cores=1))
    assert [i.target for i in sends(out, LaunchExecutor)] == [w3, w3]
    for e in (0, 1):
        out = fail_executor(m, app_id, e)
        assert not msgs(out, LaunchExecutor) and not msgs(out, ApplicationRemoved)
    assert ScheduleTimer(2000, LaunchBackoffExpired(app_id, "worker-3"), None) in out
    out = m.handle(LaunchBackoffExpired(app_id, "worker-3"), NOW + 2000)
    assert [i.target for i in sends(out, LaunchExecutor)] == [w3, w3]


def test_executor_retries_disabled_and_decommissioned_exits_do_not_count():
    m = new_master({"spark.deploy.maxExecutorRetries": "-1"})
    register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    for i in range(15):
        out = fail_executor(m, app_id, i)
        assert not msgs(out, ApplicationRemoved)
    m2 = new_master({"spark.deploy.maxExecutorRetries": "1"})
    register_worker(m2, "worker-1")
    app2, _ = register_app(m2, "driver-B")
    m2.id_to_app[app2].executors[0].state = ExecutorState.DECOMMISSIONED
    out = fail_executor(m2, app2, 0)
    assert m2.id_to_app[app2].retry_count == 0


def test_unregister_application_finishes_it():
    m = new_master()
    w, _ = register_worker(m, "worker-1")
    w2, _ = register_worker(m, "worker-2")
    app_id, _ = register_app(m, "driver-A", app_desc(max_cores=4))
    app = m.id_to_app[app_id]
    worker = app.executors[0].worker
    out = m.handle(UnregisterApplication(app_id), NOW + 5000)
    assert logs(out)[:2] == [f"Received unregister request from application {app_id}",
                             f"Removing app {app_id}"]
    assert Send(worker.endpoint, KillExecutor(MASTER_URL, app_id, 0)) in out
    assert not msgs(out, ApplicationRemoved)
    assert msgs(out, ApplicationFinished) == [ApplicationFinished(app_id)] * 2
    assert Unpersist(f"app_{app_id}") in out
    assert (app.state, app.end_time) == (ApplicationState.FINISHED, NOW + 5000)
    assert app.executors[0].state == ExecutorState.KILLED
    assert worker.cores_used == 0 and m.completed_apps == [app] and m.waiting_apps == []


def test_driver_disconnect_finishes_the_application():
    m = new_master()
    register_worker(m, "worker-1")
    driver = RpcEndpointRef(RpcAddress("client-host", 51234), "AppClient")
    app_id, _ = register_app(m, driver)
    out = m.handle(Disconnected(RpcAddress("client-host", 51234)), NOW)
    assert logs(out)[0] == "client-host:51234 got disassociated, removing it."
    assert m.completed_apps[0].state == ApplicationState.FINISHED


def test_kill_application_from_the_ui():
    m = new_master()
    register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    out = m.handle(Ask(1, RequestKillApplication(app_id)), NOW)
    assert ApplicationRemoved("KILLED") in msgs(out, target="driver-A")
    assert reply(out) is True
    assert reply(m.handle(Ask(2, RequestKillApplication(app_id)), NOW)) is False


def test_retained_applications_are_trimmed():
    m = new_master({"spark.deploy.retainedApplications": "20"})
    ids = []
    for i in range(21):
        app_id, _ = register_app(m, f"driver-{i}")
        m.handle(UnregisterApplication(app_id), NOW)
        ids.append(app_id)
    # at 20 completed, the oldest max(20 / 10, 1) = 2 go before the 21st is added
    assert [a.id for a in m.completed_apps] == ids[2:]


def test_request_executors_and_kill_executors():
    m = new_master()
    register_worker(m, "worker-1", cores=8)
    register_worker(m, "worker-2", cores=8)
    app_id, out = register_app(m, "driver-A", app_desc(cores=2, limit=0))
    assert not msgs(out, LaunchExecutor)  # dynamic allocation starts at 0
    rp = m.id_to_app[app_id].desc.defaultProfile
    out = m.handle(Ask(1, RequestExecutors(app_id, [(rp, 3)])), NOW)
    assert reply(out) is True
    assert f"Application {app_id} requested executors: Map(ResourceProfile(id=0) -> 3)." in \
        logs(out)
    assert len(msgs(out, LaunchExecutor)) == 3
    out = m.handle(Ask(2, RequestExecutors("app-nope", [(rp, 3)])), NOW)
    assert reply(out) is False
    assert "Unknown application app-nope requested executors: " \
           "Map(ResourceProfile(id=0) -> 3)." in logs(out, "WARN")
    # lowering the target does not kill; KillExecutors does
    m.handle(Ask(3, RequestExecutors(app_id, [(rp, 1)])), NOW)
    out = m.handle(Ask(4, KillExecutors(app_id, ["0", "x", "99"])), NOW)
    assert reply(out) is True
    assert "Encountered executor with a non-integer ID: x. Ignoring" in logs(out, "ERROR")
    assert f"Application {app_id} attempted to kill non-existent executors: 99" in \
        logs(out, "WARN")
    assert [k.execId for k in msgs(out, KillExecutor)] == [0]
    assert not msgs(out, LaunchExecutor)  # 2 left, target 1
    assert reply(m.handle(Ask(5, KillExecutors("app-nope", ["1"])), NOW)) is False


def test_multiple_resource_profiles():
    m = new_master()
    for i in (1, 2, 3):
        register_worker(m, f"worker-{i}", cores=2, memory=512)
    app_id, _ = register_app(m, "d", app_desc(memory=128, max_cores=4, limit=0))
    app = m.id_to_app[app_id]
    rp1 = ResourceProfile.of(id=1, cores=3, memoryMb=256)   # too many cores for any worker
    rp3 = ResourceProfile.of(id=3, cores=1, memoryMb=256)
    rp4 = ResourceProfile.of(id=4, cores=1, memoryMb=256)
    out = m.handle(Ask(1, RequestExecutors(app_id, [(app.desc.defaultProfile, 1), (rp1, 1),
                                                     (rp3, 1), (rp4, 2)])), NOW)
    assert reply(out) is True
    counts = {rp: app.executor_count(rp) for rp in (0, 1, 3, 4)}
    assert counts == {0: 1, 1: 0, 3: 1, 4: 1}  # maxCores 4: 2 (default) + 1 + 1
    assert app.executors[app.executors_per_resource_profile_id[3].copy().pop()].memory == 256


# -- drivers ----------------------------------------------------------------------------------

def test_submit_driver_launches_it():
    m = new_master()
    w, _ = register_worker(m, "worker-1")
    resp, out = submit_driver(m)
    assert resp == SubmitDriverResponse(MASTER, True, "driver-20250101000000-0000",
                                        "Driver successfully submitted as "
                                        "driver-20250101000000-0000")
    assert "Driver submitted ember.deploy.driver_wrapper" in logs(out)
    d = m.drivers[resp.driverId]
    assert Persist(f"driver_{d.id}", driver_record(d)) in out
    assert msgs(out, target=w) == [LaunchDriver(d.id, d.desc, {})]
    assert (d.state, d.worker.id) == (DriverState.RUNNING, "worker-1")
    assert m.id_to_worker["worker-1"].cores_used == 1
    # reply comes after the launch
    assert isinstance(out[-1], Reply)


def test_waiting_driver_launches_when_a_worker_registers():
    m = new_master()
    resp, out = submit_driver(m)
    assert not msgs(out, LaunchDriver)
    assert f"Driver {resp.driverId} requires more resource than any of Workers could have." in \
        logs(out, "WARN")
    w, out = register_worker(m, "worker-1")
    assert msgs(out, LaunchDriver, w)[0].driverId == resp.driverId
    assert m.waiting_drivers == []


def test_drivers_take_precedence_over_executors():
    m = new_master()
    submit_driver(m, driver_desc(cores=1))
    register_app(m, "driver-A")
    w, out = register_worker(m, "worker-1", cores=4)
    kinds = [type(x).__name__ for x in msgs(out) if isinstance(x, (LaunchDriver, LaunchExecutor))]
    assert kinds == ["LaunchDriver", "LaunchExecutor"]
    assert msgs(out, LaunchExecutor)[0].cores == 3


def test_max_drivers():
    m = new_master({"spark.deploy.maxDrivers": "1"})
    register_worker(m, "worker-1", cores=8, memory=8192)
    submit_driver(m)
    _, out = submit_driver(m)
    assert not msgs(out, LaunchDriver) and len(m.waiting_drivers) == 1


def test_kill_driver():
    m = new_master()
    w, _ = register_worker(m, "worker-1", cores=2)
    running, _ = submit_driver(m)
    waiting, _ = submit_driver(m)
    out = m.handle(Ask(1, RequestKillDriver(running.driverId)), NOW)
    assert reply(out) == KillDriverResponse(MASTER, running.driverId, True,
                                            f"Kill request for {running.driverId} submitted")
    assert Send(w, KillDriver(running.driverId)) in out
    assert m.drivers[running.driverId].state == DriverState.RUNNING  # until the worker says so
    out = m.handle(Ask(2, RequestKillDriver(waiting.driverId)), NOW)
    assert reply(out).success is True
    assert [(d.id, d.state) for d in m.completed_drivers] == [(waiting.driverId,
                                                              DriverState.KILLED)]
    out = m.handle(Ask(3, RequestKillDriver("driver-nope")), NOW)
    assert reply(out) == KillDriverResponse(MASTER, "driver-nope", False,
                                            "Driver driver-nope has already finished or does "
                                            "not exist")
    # the worker reports the kill: driver completed, resources freed
    out = m.handle(DriverStateChanged(running.driverId, DriverState.KILLED), NOW)
    assert f"Removing driver: {running.driverId} (KILLED)" in logs(out)
    assert Unpersist(f"driver_{running.driverId}") in out
    assert m.id_to_worker["worker-1"].cores_used == 0 and m.drivers == {}


def test_kill_all_drivers():
    m = new_master()
    w, _ = register_worker(m, "worker-1", cores=2)
    running, _ = submit_driver(m)
    waiting, _ = submit_driver(m)
    out = m.handle(Ask(1, RequestKillAllDrivers()), NOW)
    assert reply(out) == KillAllDriversResponse(MASTER, True,
                                                "Kill request for all drivers submitted")
    assert Send(w, KillDriver(running.driverId)) in out
    assert [d.id for d in m.completed_drivers] == [waiting.driverId]
    assert "Asked to kill all drivers" in logs(out)


def test_driver_status():
    m = new_master()
    register_worker(m, "worker-1")
    resp, _ = submit_driver(m)
    r = reply(m.handle(Ask(1, RequestDriverStatus(resp.driverId)), NOW))
    assert r == DriverStatusResponse(True, DriverState.RUNNING, "worker-1", "10.0.0.1:40001", None)
    m.handle(DriverStateChanged(resp.driverId, DriverState.ERROR, "jar not found"), NOW)
    r = reply(m.handle(Ask(1, RequestDriverStatus(resp.driverId)), NOW))
    assert r == DriverStatusResponse(True, DriverState.ERROR, "worker-1", "10.0.0.1:40001",
                                     "jar not found")
    r = reply(m.handle(Ask(1, RequestDriverStatus("driver-x")), NOW))
    assert r == DriverStatusResponse(False, None, None, None, None)


def test_driver_state_changed_rules():
    m = new_master()
    out = m.handle(DriverStateChanged("driver-1", DriverState.RUNNING), NOW)
    assert out == [Log("ERROR", "Received unexpected state update for driver driver-1: RUNNING")]
    out = m.handle(DriverStateChanged("driver-1", DriverState.FINISHED), NOW)
    assert out == [Log("WARN", "Asked to remove unknown driver: driver-1")]


def test_retained_drivers_and_clear():
    m = new_master({"spark.deploy.retainedDrivers": "5"})
    register_worker(m, "worker-1", cores=16, memory=16384)
    ids = []
    for _ in range(6):
        resp, _ = submit_driver(m)
        m.handle(DriverStateChanged(resp.driverId, DriverState.FINISHED), NOW)
        ids.append(resp.driverId)
    assert [d.id for d in m.completed_drivers] == ids[1:]
    app_id, _ = register_app(m, "d")
    m.handle(UnregisterApplication(app_id), NOW)
    out = m.handle(Ask(1, RequestClearCompletedDriversAndApps()), NOW)
    assert len([i for i in out if isinstance(i, Unpersist)]) == 6
    assert [i for i in out if not isinstance(i, Unpersist)] == [Log("INFO", "Asked to clear 5 completed drivers and 1 completed apps."),
                   Reply(1, True)]
    assert m.completed_drivers == [] and m.completed_apps == []


def test_use_driver_id_as_app_name():
    m = new_master({"spark.master.useDriverIdAsAppName.enabled": "true"})
    resp, _ = submit_driver(m)
    assert m.drivers[resp.driverId].desc.command.javaOpts == [
        f"-Dspark.app.name={resp.driverId}"]


def test_spread_out_drivers_false_uses_worker_id_order():
    m = new_master({"spark.deploy.spreadOutDrivers": "false"})
    for wid in ("worker-3", "worker-1", "worker-2"):
        register_worker(m, wid, cores=8, memory=8192)
    for _ in range(3):
        submit_driver(m)
    assert {d.worker.id for d in m.drivers.values()} == {"worker-1"}


# -- queries ----------------------------------------------------------------------------------

def test_master_state_response_readyz_and_bound_ports():
    m = new_master()
    register_worker(m, "worker-1")
    app_id, _ = register_app(m, "driver-A")
    submit_driver(m, driver_desc(cores=0, mem=0))
    r = reply(m.handle(Ask(1, RequestMasterState()), NOW + 2000))
    assert isinstance(r, MasterStateResponse)
    assert (r.host, r.port, r.restPort, r.status) == ("m", 7077, 6066, RecoveryState.ALIVE)
    assert r.uri == "spark://m:7077" and r.restUri == "spark://m:6066"
    assert [w.id for w in r.workers] == ["worker-1"]
    assert [a.id for a in r.activeApps] == [app_id] and r.activeApps[0].duration == 2000
    assert len(r.activeDrivers) == 1 and r.completedApps == [] and r.completedDrivers == []
    assert reply(m.handle(Ask(2, RequestReadyz()), NOW)) is True
    assert reply(m.handle(Ask(3, BoundPortsRequest()), NOW)) == BoundPortsResponse(7077, 8080,
                                                                                  6066)


def test_asks_without_a_request_are_handled_and_unknown_messages_ignored():
    m = new_master()
    out = m.handle(RequestReadyz(), NOW)
    assert out == []
    out = m.handle("garbage", NOW)
    assert out == [Log("WARN", "Master received an unexpected message: str")]
    out = m.handle(Ask(9, 42), NOW)
    assert out[-1] == ReplyFailure(9, "Unsupported message int", "UnsupportedMessageError")


def test_a_failing_handler_does_not_take_the_master_down():
    m = new_master()
    out = m.handle(Ask(1, RequestExecutors("app-x", "not a list")), NOW)
    assert isinstance(out[-1], ReplyFailure)
    assert logs(out, "ERROR")[0].startswith("Error while handling RequestExecutors")


def dump(m: MasterState) -> tuple:
    """Everything a MasterState holds, as plain comparable data (object identity and sharing
    kept as back-references, dict order kept, sets sorted)."""
    seen: dict[int, int] = {}
    skip = {"_handlers", "_rollback", "_out", "_now", "address_of"}

    def walk(v):
        if isinstance(v, (str, int, float, bool, bytes, type(None), enum.Enum)):
            return v
        if isinstance(v, RpcEndpointRef):
            return ("ref", repr(v))
        if isinstance(v, random.Random):
            return ("rng", v.getstate())
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [walk(x) for x in v])
        if isinstance(v, dict):
            return ("dict", [(walk(k), walk(x)) for k, x in v.items()])
        if isinstance(v, (set, frozenset)):
            return ("set", sorted(repr(walk(x)) for x in v))
        if id(v) in seen:
            return ("@", seen[id(v)])
        seen[id(v)] = len(seen)
        return (type(v).__name__, [(k, walk(x)) for k, x in sorted(vars(v).items())
                                   if k not in skip])
    return walk(m)


class ExecutorLaunchFails(MasterState):
    """Fault injection: launching an executor raises, half-way through a handler that has
    already registered a worker, queued its persistence and its RegisteredWorker."""

    def _launch_executor(self, worker, exec):
        raise RuntimeError("launch failed")


def busy_master(cls=MasterState) -> MasterState:
    """A master with history: more events than one checkpoint spacing, so a rollback
    replays some of them."""
    m = cls({}, host="m", port=7077, self_ref=MASTER, web_ui_url="http://m:8080",
            rest_port=6066, rng=random.Random(0))
    m.handle(ElectedLeader(), NOW)
    for i in range(12):
        register_app(m, f"driver-{i}", app_desc(f"app{i}", cores=1, memory=256),
                     now=NOW + i)
        submit_driver(m, now=NOW + i)
    return m


def test_a_handler_that_raises_half_way_changes_nothing_and_sends_nothing():
    m = busy_master(ExecutorLaunchFails)
    twin = busy_master(ExecutorLaunchFails)
    before = dump(m)
    assert before == dump(twin)
    out = register_worker(m, "worker-1", cores=8, memory=8192, now=NOW + 100)[1]
    # the worker was registered and its RegisteredWorker queued before the launch raised:
    # none of it is left, only the error
    assert out == [Log("ERROR", "Error while handling RegisterWorker: "
                                "RuntimeError('launch failed')")]
    assert dump(m) == before
    assert "worker-1" not in m.id_to_worker and not m.workers
    # and the state goes on exactly as the twin that never saw the failed event
    for state in (m, twin):
        state.handle(Heartbeat("worker-9", wref("worker-9")), NOW + 200)
        submit_driver(state, now=NOW + 300)
    assert dump(m) == dump(twin)


def test_a_failed_ask_gets_only_its_failure_and_the_state_is_as_before():
    m = busy_master()
    before = dump(m)
    out = m.handle(Ask("req", RequestExecutors("app-x", "not a list")), NOW + 100)
    assert [type(i) for i in out] == [Log, ReplyFailure]
    assert out[1].request == "req" and out[1].error_type == "SparkException"
    assert dump(m) == before


@pytest.mark.parametrize("cost_ratio", [0, 20, float("inf")],
                         ids=["checkpoint-every-event", "default", "replay-everything"])
def test_a_rollback_restores_the_state_right_before_the_failed_event(monkeypatch, cost_ratio):
    """Whether the last checkpoint was taken just before the failed event or at the start
    (every committed event is then replayed), the state restored is the one right before
    the failed event, not an older one."""
    monkeypatch.setattr(rollback, "COST_RATIO", cost_ratio)
    m = busy_master(ExecutorLaunchFails)
    for i in range(40):      # more than one checkpoint spacing
        m.handle(Ask(f"status-{i}", RequestDriverStatus(f"driver-{i}")), NOW + 1000 + i)
        register_app(m, f"late-{i}", app_desc(f"late{i}", cores=1, memory=256),
                     now=NOW + 1000 + i)
    before = dump(m)
    register_worker(m, "worker-1", now=NOW + 2000)
    assert dump(m) == before
    assert len(m.waiting_apps) == 52


def test_config_validation():
    with pytest.raises(ValueError, match="spark.deploy.defaultCores must be positive."):
        MasterState({"spark.deploy.defaultCores": "0"})
    with pytest.raises(ValueError, match="workerSelectionPolicy"):
        MasterState({"spark.deploy.workerSelectionPolicy": "random"})
    with pytest.raises(ValueError, match="spark.deploy.maxExecutorRetries"):
        MasterState({"spark.deploy.maxExecutorRetries": "ten"})
    c = MasterState({"spark.deploy.workerSelectionPolicy": "memory_free_asc",
                     "spark.deploy.spreadOutApps": "false", "spark.deploy.spreadOut": "true",
                     "spark.worker.timeout": "30"}).conf
    assert c.worker_selection_policy.name == "MEMORY_FREE_ASC"
    assert c.spread_out_apps is False and c.recovery_timeout_ms == 30_000


def test_default_cores_caps_apps_without_cores_max():
    m = new_master({"spark.deploy.defaultCores": "3"})
    register_worker(m, "worker-1", cores=8)
    app_id, out = register_app(m, "d")
    assert [x.cores for x in msgs(out, LaunchExecutor)] == [3]


# -- recovery ---------------------------------------------------------------------------------

def stored_state():
    w = WorkerInfo("worker-1", "10.0.0.1", 40001, 4, 4096, endpoint=wref("worker-1"))
    w_gone = WorkerInfo("worker-2", "10.0.0.2", 40002, 4, 4096,
                        endpoint=wref("worker-2", "10.0.0.2"))
    app = ApplicationInfo(NOW - 10_000, "app-1", app_desc(), NOW - 10_000, "driver-A")
    # launched before the master died (records say so): looked for on the workers
    d_sup = DriverInfo(NOW, "driver-s", driver_desc(supervise=True), NOW, DriverState.RUNNING)
    d_plain = DriverInfo(NOW, "driver-p", driver_desc(), NOW, DriverState.RUNNING)
    d_found = DriverInfo(NOW, "driver-f", driver_desc(), NOW, DriverState.RUNNING)
    return w, w_gone, app, d_sup, d_plain, d_found


def test_recovery_completes_when_everyone_answered():
    m = new_master(alive=False)
    w, w_gone, app, d_sup, d_plain, d_found = stored_state()
    out = m.handle(BeginRecovery([app], [d_found], [w]), NOW)
    assert m.state == RecoveryState.RECOVERING
    assert MasterChanged(MASTER, "http://m:8080") in msgs(out, target="driver-A")
    assert MasterChanged(MASTER, "http://m:8080") in msgs(out, target=w.endpoint)
    assert ScheduleTimer(60_000, CompleteRecovery()) in out
    m.handle(MasterChangeAcknowledged("app-1"), NOW + 100)
    assert m.state == RecoveryState.RECOVERING
    out = m.handle(WorkerSchedulerStateResponse(
        "worker-1", [WorkerExecutorStateResponse(ExecutorDescription(
            "app-1", 5, 0, 2, 1024, ExecutorState.RUNNING))],
        [WorkerDriverStateResponse("driver-f")]), NOW + 250)
    assert m.state == RecoveryState.ALIVE
    assert "Recovery complete in 250 ms - resuming operations!" in logs(out)
    assert app.state == ApplicationState.RUNNING
    assert app.executors[5].state == ExecutorState.RUNNING
    assert (d_found.state, d_found.worker) == (DriverState.RUNNING, w)
    # schedule() after recovery: the app still wants cores; the new id follows recovered ones
    assert [(x.execId, x.cores) for x in msgs(out, LaunchExecutor)] == [(6, 1)]
    assert w.cores_used == 2 + 1 + 1


def test_recovery_timeout_drops_the_silent():
    m = new_master(alive=False)
    w, w_gone, app, d_sup, d_plain, d_found = stored_state()
    m.handle(BeginRecovery([app], [d_sup, d_plain], [w, w_gone]), NOW)
    m.handle(WorkerSchedulerStateResponse("worker-1", [], []), NOW)
    out = m.handle(CompleteRecovery(), NOW + 60_000)
    assert m.state == RecoveryState.ALIVE
    assert "Removing worker worker-2 on 10.0.0.2:40002" in logs(out)
    assert app.state == ApplicationState.FINISHED  # never acknowledged
    assert "Driver driver-s was not found after master recovery" in logs(out, "WARN")
    assert "Did not re-launch driver-p because it was not supervised" in logs(out, "WARN")
    states = {d.id: d.state for d in m.completed_drivers}
    assert states == {"driver-p": DriverState.ERROR}
    (relaunched,) = m.drivers.values()
    assert relaunched.id == "driver-s" and relaunched.attempt == 2
    # fencing: its worker may run it behind a partition until its lease, renewed by the old
    # master at the latest when recovery began, has expired
    assert relaunched.worker is None
    m.handle(LeaseExpired("driver-s"), NOW + 62_000)
    assert relaunched.worker is w  # scheduled on the worker that answered
    # a second CompleteRecovery is a no-op
    assert m.handle(CompleteRecovery(), NOW + 62_001) == []


def test_begin_recovery_with_nothing_stored_is_plain_leadership():
    m = new_master(alive=False)
    m.handle(BeginRecovery(), NOW)
    assert m.state == RecoveryState.ALIVE


def test_register_worker_during_recovery_replaces_unknown_worker():
    m = new_master(alive=False)
    w, *_ = stored_state()
    m.handle(BeginRecovery([], [], [w]), NOW)
    # same address, new id: the UNKNOWN one is removed and the new one accepted
    _, out = register_worker(m, "worker-1-new", ref=w.endpoint)
    assert "Removing worker worker-1 on 10.0.0.1:40001" in logs(out)
    assert msgs(out, RegisteredWorker)[0].duplicate is False
    # re-registering with the same id while UNKNOWN makes it ALIVE (duplicate=True)
    m2 = new_master(alive=False)
    w2, *_ = stored_state()
    m2.handle(BeginRecovery([], [], [w2]), NOW)
    _, out = register_worker(m2, "worker-1", ref=w2.endpoint)
    assert "Worker has been re-registered: worker-1" in logs(out)
    assert msgs(out, RegisteredWorker)[0].duplicate is True
    assert w2.state == WorkerState.ALIVE


def test_master_change_ack_from_unknown_app():
    m = new_master()
    assert m.handle(MasterChangeAcknowledged("app-x"), NOW) == [
        Log("WARN", "Master change ack from unknown app: app-x")]
