"""Master recovery without processes: the persistence engines, the records, the recovery flow
of the state machine (epochs, waiting drivers, retained lists, re-attachment, stepping down)
and the receivers' epoch fence. A master "crash" here is: keep what its Persist/Unpersist
instructions wrote, throw the MasterState away, feed the records to a new one."""
from __future__ import annotations

import os
import queue
from dataclasses import replace

import pytest

from ember.deploy.fencing import EpochFence
from ember.deploy.master.persistence import (
    BlackHolePersistenceEngine, FileSystemPersistenceEngine, MonarchyLeaderAgent,
    RecoveryError, decode_record, encode_record,
)
from ember.deploy.master.recovery_mode import create_recovery, recovery_mode
from ember.deploy.master.records import StoredState, no_bind
from ember.deploy.master.state import (
    Ask, BeginRecovery, MasterState, Persist, Reply, ScheduleTimer, Unpersist,
)
from ember.deploy.json_protocol import master_state_json
from ember.deploy.master.http import render_master_page
from ember.deploy.messages import (
    NOT_RECORDED_PREFIX, AppStatusResponse, ApplicationState, CompleteRecovery, DriverState,
    DriverStateChanged,
    ElectedLeader, ExecutorDescription, ExecutorState, KillDriver, KillExecutor, LaunchDriver,
    LaunchExecutor, MasterChangeAcknowledged, MasterChanged, MasterInStandby, RecoveryState, RegisteredApplication,
    RegisteredWorker, RequestAppStatus, RequestSubmitDriver, RevokedLeadership,
    UnregisterApplication, WorkerDriverStateResponse, WorkerExecutorStateResponse,
    WorkerLatestState, WorkerSchedulerStateResponse, WorkerState,
)
from tests.test_master_state import (  # noqa: F401  (utc: autouse fixture)
    MASTER, NOW, app_desc, driver_desc, logs, msgs, register_app, register_worker, reply,
    submit_driver, utc,
)


class MemoryStore:
    """What a master's Persist/Unpersist instructions leave behind, encoded like an engine
    does (so records go through the real codec)."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}

    def apply(self, out: list) -> list:
        for i in out:
            if isinstance(i, Persist):
                self.data[i.key] = encode_record(i.obj)
            elif isinstance(i, Unpersist):
                self.data.pop(i.key, None)
        return out

    def begin_recovery(self, epoch: int) -> BeginRecovery:
        stored = StoredState({k: decode_record(v) for k, v in self.data.items()}, no_bind)
        assert stored.skipped == []
        return BeginRecovery(stored.apps, stored.drivers, stored.workers, stored.completed_apps,
                             stored.completed_drivers, stored.completed_seq, epoch)


def leader(epoch: int, conf: dict | None = None) -> MasterState:
    m = MasterState(conf or {}, host="m", port=7077, self_ref=MASTER,
                    web_ui_url="http://m:8080")
    m.handle(ElectedLeader(epoch), NOW)
    return m


def restarted(store: MemoryStore, epoch: int, now: int = NOW + 5_000,
              conf: dict | None = None) -> tuple[MasterState, list]:
    m = MasterState(conf or {}, host="m", port=7077, self_ref=MASTER, web_ui_url="http://m:8080")
    return m, store.apply(m.handle(store.begin_recovery(epoch), now))


# -- engines ----------------------------------------------------------------------------------

def test_filesystem_engine_round_trip_blobs_and_bad_records(tmp_path, caplog):
    e = FileSystemPersistenceEngine(str(tmp_path))
    e.persist("app_a", {"id": "a", "desc": app_desc("x"), "n": [1, 2]})
    e.persist("app_a", {"id": "a2"})                      # replaced atomically
    e.persist("driver_d", {"id": "d"})
    e.unpersist("driver_d")
    e.unpersist("driver_never")
    assert e.read_all() == {"app_a": {"id": "a2"}}
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    (tmp_path / "worker_trunc").write_bytes(encode_record({"id": "w"})[:-2])
    (tmp_path / "worker_v2").write_bytes(
        encode_record({"id": "w"}).replace(b"\xa7version\x01", b"\xa7version\x02"))
    (tmp_path / "pickle_like").write_bytes(b"\x80\x04\x95")
    assert e.read_all() == {"app_a": {"id": "a2"}}
    text = caplog.text
    assert "Skipping record worker_trunc" in text and "Skipping record worker_v2" in text
    assert "unknown record version 2" in text and "Skipping record pickle_like" in text
    e.put_blob("ab" * 32 + "/app.py", b"print(1)")
    assert e.get_blob("ab" * 32 + "/app.py") == b"print(1)"
    assert e.get_blob("ab" * 32 + "/other.py") is None
    e.delete_blob("ab" * 32 + "/app.py")
    assert e.get_blob("ab" * 32 + "/app.py") is None
    for bad in ("../x", "a/../../x", "", "a//b", "a\\b"):
        with pytest.raises(ValueError):
            e.put_blob(bad, b"")
    for bad in ("../app", ".hidden", "a/b", ""):
        with pytest.raises(ValueError):
            e.persist(bad, {})


def test_black_hole_keeps_blobs_but_no_records():
    e = BlackHolePersistenceEngine()
    e.persist("app_a", {"id": "a"})
    assert e.read_all() == {}
    e.put_blob("k/v", b"x")
    assert e.get_blob("k/v") == b"x"
    e.close()


def test_epoch_counter_grows_with_each_start(tmp_path):
    agent = MonarchyLeaderAgent(str(tmp_path / ".leader_epoch"))
    epochs: list[int] = []
    for _ in range(3):
        agent.start(epochs.append, lambda: None)
    assert epochs == [1, 2, 3]
    none: list[int] = []
    MonarchyLeaderAgent().start(none.append, lambda: None)
    assert none == [0]


def test_the_only_master_stands_again_with_a_new_epoch_after_relinquishing(tmp_path):
    agent = MonarchyLeaderAgent(str(tmp_path / ".leader_epoch"))
    elected: "queue.Queue[int]" = queue.Queue()
    agent.start(elected.put, lambda: None)
    assert elected.get(timeout=10) == 1
    agent.relinquish()
    assert elected.get(timeout=10) == 2


def test_recovery_modes(tmp_path):
    warnings: list[str] = []
    assert recovery_mode({"spark.deploy.recoveryMode": "filesystem"}) == "FILESYSTEM"
    assert recovery_mode({"spark.deploy.recoveryMode": "Bogus"}, warnings.append) == "NONE"
    assert "Unknown spark.deploy.recoveryMode 'Bogus'" in warnings[0]
    with pytest.raises(RecoveryError, match="ROCKSDB is not supported"):
        recovery_mode({"spark.deploy.recoveryMode": "ROCKSDB"})
    with pytest.raises(RecoveryError, match="recoveryDirectory must be set"):
        create_recovery({"spark.deploy.recoveryMode": "FILESYSTEM"})
    (tmp_path / "file").write_text("")
    with pytest.raises(RecoveryError, match="is not writable"):
        create_recovery({"spark.deploy.recoveryMode": "FILESYSTEM",
                         "spark.deploy.recoveryDirectory": str(tmp_path / "file" / "sub")})
    engine, agent = create_recovery({"spark.deploy.recoveryMode": "FILESYSTEM",
                                     "spark.deploy.recoveryDirectory": str(tmp_path / "r")})
    assert isinstance(engine, FileSystemPersistenceEngine)


# -- the recovery flow ------------------------------------------------------------------------

def test_every_instruction_carries_the_leaders_epoch():
    m = leader(5)
    ref, out = register_worker(m, "worker-1")
    assert msgs(out, RegisteredWorker)[0].epoch == 5
    app_id, out = register_app(m, "driver-A", app_desc(max_cores=1))
    assert msgs(out, RegisteredApplication)[0].epoch == 5
    assert {x.epoch for x in msgs(out, LaunchExecutor)} == {5}
    _, out = submit_driver(m)
    assert msgs(out, LaunchDriver)[0].epoch == 5
    out = m.handle(WorkerLatestState("worker-1", [ExecutorDescription(
        "app-gone", 3, 0, 1, 1, ExecutorState.RUNNING)], ["driver-gone"]), NOW)
    assert msgs(out, KillExecutor)[0].epoch == 5 and msgs(out, KillDriver)[0].epoch == 5


def test_restart_recovers_workers_apps_running_and_waiting_drivers():
    store = MemoryStore()
    m = leader(1)
    store.apply(register_worker(m, "worker-1", cores=2, memory=2048)[1])
    app_id, out = register_app(m, "driver-A", app_desc(max_cores=1))
    store.apply(out)
    running, out = submit_driver(m, driver_desc(mem=512))
    store.apply(out)
    waiting, out = submit_driver(m, driver_desc(mem=4096))      # bigger than any worker
    store.apply(out)
    assert m.drivers[waiting.driverId].state == DriverState.SUBMITTED
    (w,) = m.workers
    exec_id = next(iter(m.id_to_app[app_id].executors))

    m2, out = restarted(store, 2)
    assert m2.state == RecoveryState.RECOVERING and m2.epoch == 2
    w2 = m2.id_to_worker["worker-1"]
    assert MasterChanged(MASTER, "http://m:8080", 2) in msgs(out, target=w2.endpoint)
    assert MasterChanged(MASTER, "http://m:8080", 2) in msgs(out, target="driver-A")
    assert ScheduleTimer(60_000, CompleteRecovery(2)) in out
    assert m2.waiting_drivers == [m2.drivers[waiting.driverId]]
    store.apply(m2.handle(MasterChangeAcknowledged(app_id), NOW + 5_100))
    out = store.apply(m2.handle(WorkerSchedulerStateResponse("worker-1", [
        WorkerExecutorStateResponse(ExecutorDescription(app_id, exec_id, 0, 1, 1024,
                                                        ExecutorState.RUNNING))],
        [WorkerDriverStateResponse(running.driverId)]), NOW + 5_300))
    assert "Recovery complete in 300 ms - resuming operations!" in logs(out)
    assert m2.state == RecoveryState.ALIVE and m2.recovery_duration_ms == 300
    app = m2.id_to_app[app_id]
    assert app.state == ApplicationState.RUNNING and list(app.executors) == [exec_id]
    assert m2.drivers[running.driverId].worker is w2
    assert m2.drivers[waiting.driverId].state == DriverState.SUBMITTED      # still waiting
    assert not msgs(out, LaunchDriver) and not msgs(out, KillExecutor)      # nothing twice
    assert (w2.cores_used, w2.memory_used) == (2, 1024 + 512)
    # new ids never repeat recovered ones, even in the same second
    new_app, _ = register_app(m2, "driver-B")
    assert new_app.endswith("-0001")


def test_driver_launch_is_recorded_before_it_is_sent():
    m = leader(1)
    register_worker(m, "worker-1")
    resp, out = submit_driver(m)
    persists = [(i.key, i.obj["launched"]) for i in out if isinstance(i, Persist)]
    assert persists == [(f"driver_{resp.driverId}", False), (f"driver_{resp.driverId}", True)]
    kinds = [type(i.message).__name__ if hasattr(i, "message") else type(i).__name__
             for i in out if type(i).__name__ in ("Persist", "Send")]
    assert kinds.index("LaunchDriver") > 1


def test_drivers_lost_in_recovery_follow_spark_and_finished_ones_are_not_relaunched():
    store = MemoryStore()
    m = leader(1)
    store.apply(register_worker(m, "worker-1")[1])
    store.apply(register_worker(m, "worker-2", host="10.0.0.2")[1])
    sup, out = submit_driver(m, driver_desc(supervise=True))
    store.apply(out)
    plain, out = submit_driver(m, driver_desc())
    store.apply(out)
    done, out = submit_driver(m, driver_desc())
    store.apply(out)
    m2, _ = restarted(store, 2)
    # one driver ended during the failover: its worker re-sends the final state first
    store.apply(m2.handle(DriverStateChanged(done.driverId, DriverState.FINISHED, None, 0, 1),
                          NOW + 5_100))
    for wid in ("worker-1", "worker-2"):
        store.apply(m2.handle(WorkerSchedulerStateResponse(wid, [], []), NOW + 5_200))
    assert m2.state == RecoveryState.ALIVE
    finished = {d.id: (d.state, d.exit_status) for d in m2.completed_drivers}
    assert finished[done.driverId] == (DriverState.FINISHED, 0)
    assert finished[plain.driverId] == (DriverState.ERROR, None)
    relaunched = m2.drivers[sup.driverId]
    assert relaunched.attempt == 2 and relaunched.state == DriverState.RUNNING
    # a later re-send of an already finished driver's state is harmless
    out = m2.handle(DriverStateChanged(done.driverId, DriverState.FINISHED, None, 0, 1), NOW)
    assert logs(out) == [f"Driver {done.driverId} has already finished; ignoring FINISHED"]


def test_retained_lists_survive_restarts_in_order():
    store = MemoryStore()
    conf = {"spark.deploy.retainedApplications": "3"}
    m = leader(1, conf)
    ids = []
    for i in range(4):
        app_id, out = register_app(m, f"driver-{i}", app_desc(f"a{i}"))
        store.apply(out)
        store.apply(m.handle(UnregisterApplication(app_id), NOW))
        ids.append(app_id)
    assert [a.id for a in m.completed_apps] == ids[1:]
    assert sorted(k for k in store.data if k.startswith("completed_app_")) == \
        sorted(f"completed_app_{i}" for i in ids[1:])
    m2, _ = restarted(store, 2, conf=conf)
    assert m2.state == RecoveryState.ALIVE                  # nothing active: no recovery
    assert [(a.id, a.state) for a in m2.completed_apps] == \
        [(i, ApplicationState.FINISHED) for i in ids[1:]]
    app_id, out = register_app(m2, "driver-9")
    assert app_id.endswith("-0004")
    store.apply(out)
    store.apply(m2.handle(UnregisterApplication(app_id), NOW))
    m3, _ = restarted(store, 3, conf=conf)
    assert [a.id for a in m3.completed_apps] == ids[2:] + [app_id]


def test_worker_that_re_registers_before_answering_keeps_its_work():
    store = MemoryStore()
    m = leader(1)
    ref, out = register_worker(m, "worker-1")
    store.apply(out)
    app_id, out = register_app(m, "driver-A", app_desc(max_cores=2))
    store.apply(out)
    m2, _ = restarted(store, 2)
    _, out = register_worker(m2, "worker-1", ref=ref)            # duplicate registration
    assert msgs(out, RegisteredWorker)[0].duplicate is True
    out = m2.handle(WorkerLatestState("worker-1", [ExecutorDescription(
        app_id, 0, 0, 2, 1024, ExecutorState.RUNNING)], []), NOW + 5_100)
    assert not msgs(out, KillExecutor)                           # re-attached, not killed
    assert list(m2.id_to_app[app_id].executors) == [0]
    # a second report (the answer to MasterChanged) changes nothing
    m2.handle(WorkerSchedulerStateResponse("worker-1", [WorkerExecutorStateResponse(
        ExecutorDescription(app_id, 0, 0, 2, 1024, ExecutorState.RUNNING))], []), NOW + 5_200)
    assert m2.id_to_worker["worker-1"].cores_used == 2


def test_work_unknown_after_recovery_is_killed():
    store = MemoryStore()
    m = leader(1)
    store.apply(register_worker(m, "worker-1")[1])
    m2, _ = restarted(store, 2)
    out = m2.handle(WorkerSchedulerStateResponse(
        "worker-1", [WorkerExecutorStateResponse(ExecutorDescription(
            "app-gone", 0, 0, 1, 1024, ExecutorState.RUNNING))],
        [WorkerDriverStateResponse("driver-gone")]), NOW + 5_100)
    assert KillExecutor("spark://m:7077", "app-gone", 0, 2) in msgs(out)
    assert KillDriver("driver-gone", 2) in msgs(out)


def test_revoked_leader_stops_acting_and_a_stale_recovery_timer_is_ignored():
    store = MemoryStore()
    m = leader(1)
    store.apply(register_worker(m, "worker-1")[1])
    m2, _ = restarted(store, 2)
    assert m2.handle(RevokedLeadership(), NOW)[0].text.startswith("Leadership has been revoked")
    assert m2.state == RecoveryState.STANDBY and not m2.workers and not m2.drivers
    ref, out = register_worker(m2, "worker-1")
    assert msgs(out) == [MasterInStandby()]
    r = reply(m2.handle(Ask(1, RequestSubmitDriver(driver_desc())), NOW))
    assert r.success is False and r.message.startswith("Current state is not alive: STANDBY")
    assert m2.handle(CompleteRecovery(2), NOW + 60_000) == []
    # elected again (epoch 3): recovers from the records; the epoch-2 timer does nothing
    out = m2.handle(store.begin_recovery(3), NOW + 61_000)
    assert m2.state == RecoveryState.RECOVERING and m2.epoch == 3
    assert m2.handle(CompleteRecovery(2), NOW + 62_000) == []
    assert m2.state == RecoveryState.RECOVERING
    m2.handle(CompleteRecovery(3), NOW + 121_000)
    assert m2.state == RecoveryState.ALIVE
    assert m2.id_to_worker == {} and m2.workers and all(
        w.state == WorkerState.DEAD for w in m2.workers)          # never answered: removed


def test_app_status_tells_an_orphaned_driver_the_truth():
    m = leader(0)
    app_id, _ = register_app(m, "driver-A")
    assert reply(m.handle(Ask(1, RequestAppStatus(app_id)), NOW)) == AppStatusResponse(
        RecoveryState.ALIVE, True, 0)
    assert reply(m.handle(Ask(1, RequestAppStatus("app-other")), NOW)) == AppStatusResponse(
        RecoveryState.ALIVE, False, 0)


# -- the receivers' fence ---------------------------------------------------------------------

def test_epoch_fence():
    f = EpochFence()
    assert f.admit(3) and f.newest == 3
    assert not f.admit(2) and f.newest == 3
    assert f.admit(3) and f.admit(0)                 # same epoch; 0 = a master without HA
    assert f.refusal(LaunchDriver("d", driver_desc(), {}, 1, 1)) == (
        "Refusing LaunchDriver from a master at epoch 1: a master at epoch 3 has taken over")
    assert f.refusal(LaunchDriver("d", driver_desc(), {}, 1, 4)) is None and f.newest == 4


def test_uploads_are_deleted_when_their_last_driver_leaves_the_retained_list(tmp_path):
    from ember.deploy.master.state import DeleteUpload, upload_urls
    from ember.deploy.master.uploads import AppResourceStore
    from ember.deploy.messages import Command, DriverDescription, RequestKillDriver
    app, lib = "ember-upload://" + "a" * 64 + "/app.py", "ember-upload://" + "b" * 64 + "/l.py"

    def desc(jar: str) -> DriverDescription:
        return DriverDescription(jar, 512, 1, False, Command(
            "ember.deploy.driver_wrapper", ["{{WORKER_URL}}", "{{USER_JAR}}", "app"],
            {}, [], [], [f"-Dspark.submit.pyFiles={lib}"]))
    assert upload_urls(desc(app)) == {app, lib}
    m = leader(1, {"spark.deploy.retainedDrivers": "1"})
    first, _ = submit_driver(m, desc(app))
    m.handle(Ask(1, RequestKillDriver(first.driverId)), NOW)          # completed (KILLED)
    still, _ = submit_driver(m, desc("ember-upload://" + "c" * 64 + "/other.py"))
    out = m.handle(Ask(1, RequestKillDriver(still.driverId)), NOW)   # pushes `first` out
    assert [i for i in out if isinstance(i, DeleteUpload)] == [DeleteUpload(app),
                                                              DeleteUpload(lib)]
    # an active driver still using a file keeps it
    m = leader(1, {"spark.deploy.retainedDrivers": "1"})
    first, _ = submit_driver(m, desc(app))
    submit_driver(m, desc(app))
    m.handle(Ask(1, RequestKillDriver(first.driverId)), NOW)
    third, _ = submit_driver(m, desc(app))
    out = m.handle(Ask(1, RequestKillDriver(third.driverId)), NOW)
    assert not [i for i in out if isinstance(i, DeleteUpload)]
    # the store keeps a file uploaded within the last hour
    store = AppResourceStore(str(tmp_path))
    url = store.put("app.py", b"print(1)")
    assert store.delete(url) is False and store.get(url)[0] == b"print(1)"
    assert store.delete(url, keep_recent_s=0) is True
    with pytest.raises(ValueError, match="No uploaded resource"):
        store.get(url)


# -- a record that cannot be written is never acknowledged ------------------------------------

def carry_out(m: MasterState, out: list, failing: str) -> tuple[list, list]:
    """What the shell does with a batch when the engine cannot write keys starting with
    `failing`: the instructions carried out before the failed gated write, and the batch of
    the PersistFailed it feeds back."""
    done = []
    for i in out:
        if isinstance(i, Persist) and i.failure is not None and i.key.startswith(failing):
            return done, m.handle(replace(i.failure, error="OSError: No space left"), NOW)
        done.append(i)
    raise AssertionError(f"no gated write of {failing} in {out}")


def test_a_submission_whose_record_fails_is_refused_and_leaves_no_trace():
    m = leader(1)
    register_worker(m, "worker-1")
    _, out = submit_driver(m)
    done, failed = carry_out(m, out, "driver_")
    assert not msgs(done, LaunchDriver) and not [i for i in done if isinstance(i, Reply)]
    answer = reply(failed)
    assert not answer.success and answer.driverId is None
    assert answer.message.startswith(NOT_RECORDED_PREFIX) and "No space left" in answer.message
    s = m.master_state_response()
    assert s.activeDrivers == [] and s.workers[0].coresUsed == 0 and not m.waiting_drivers
    # The client asks again and this time the write succeeds.
    resp, out = submit_driver(m)
    assert resp.success and len(msgs(out, LaunchDriver)) == 1


def test_a_worker_whose_record_fails_is_forgotten_and_its_work_goes_elsewhere():
    m = leader(1)
    app_id, _ = register_app(m, "driver-a")
    resp, _ = submit_driver(m)                            # waits: no worker yet
    ref, out = register_worker(m, "worker-1")
    assert msgs(out, LaunchExecutor) and msgs(out, LaunchDriver)   # what schedule() decided
    done, failed = carry_out(m, out, "worker_")
    assert not msgs(done, RegisteredWorker) and not msgs(done, LaunchExecutor)
    assert "worker-1" not in m.id_to_worker and not m.workers
    assert m.id_to_app[app_id].executors == {} and m.id_to_app[app_id].cores_granted == 0
    assert [d.id for d in m.waiting_drivers] == [resp.driverId]
    assert m.drivers[resp.driverId].state == DriverState.SUBMITTED
    assert not msgs(failed)                                # no answer: the worker retries
    # Its registration retry succeeds: everything is launched there, once.
    _, out = register_worker(m, "worker-1", ref=ref)
    assert len(msgs(out, RegisteredWorker)) == 1 and len(msgs(out, LaunchDriver)) == 1
    assert len(msgs(out, LaunchExecutor)) == 1


def test_a_worker_record_failure_moves_its_driver_to_another_worker():
    m = leader(1)
    register_worker(m, "worker-1", cores=1, memory=256)    # too small for the driver
    resp, _ = submit_driver(m)
    _, out = register_worker(m, "worker-2", host="10.0.0.2")
    _, failed = carry_out(m, out, "worker_")
    assert not msgs(failed, LaunchDriver)                   # nowhere else big enough
    register_worker(m, "worker-3", host="10.0.0.3")
    assert m.drivers[resp.driverId].worker.id == "worker-3"


def test_an_application_whose_record_fails_is_not_registered():
    m = leader(1)
    register_worker(m, "worker-1")
    app_id, out = register_app(m, "driver-a")
    done, failed = carry_out(m, out, "app_")
    assert not msgs(done, RegisteredApplication) and not msgs(done, LaunchExecutor)
    assert not msgs(failed) and app_id not in m.id_to_app and not m.apps and not m.waiting_apps
    assert m.master_state_response().workers[0].coresUsed == 0
    again, out = register_app(m, "driver-a")                # the app client's retry
    assert again is not None and len(msgs(out, LaunchExecutor)) == 1


def test_json_names_the_leader():
    m = leader(1)
    assert master_state_json(m)["leaderurl"] == "spark://m:7077"
    standby = MasterState({}, host="s", port=7078, self_ref=MASTER, web_ui_url="http://s:8080")
    assert master_state_json(standby, "leaderurl") == {"leaderurl": None}
    assert "Leader" not in render_master_page(standby.master_state_response(), "t")
    assert "spark://m:7077" in render_master_page(m.master_state_response(), "t")


# -- the FILESYSTEM journal -------------------------------------------------------------------

def test_filesystem_writes_go_to_the_journal_and_survive_a_reopen(tmp_path):
    e = FileSystemPersistenceEngine(str(tmp_path))
    e.persist("driver_a", {"id": "a"})
    e.persist("driver_b", {"id": "b"})
    e.persist("driver_a", {"id": "a2"})
    e.unpersist("driver_b")
    e.unpersist("driver_never")
    assert not (tmp_path / "driver_a").exists()           # in the journal, not yet a file
    # A crash (no close): the next master reads the journal.
    again = FileSystemPersistenceEngine(str(tmp_path))
    assert again.read_all() == {"driver_a": {"id": "a2"}}
    # A torn last entry (a write the master never acknowledged) ends the replay.
    with open(tmp_path / ".journal", "r+b") as f:
        f.seek(again._journal.offset)
        next_seq = (again._journal.seq + 1).to_bytes(8, "little")
        f.write(b"\x12\x34\x56\x78\x10\x00\x00\x00" + next_seq)
    third = FileSystemPersistenceEngine(str(tmp_path))
    assert third.read_all() == {"driver_a": {"id": "a2"}}
    third.persist("driver_c", {"id": "c"})
    assert FileSystemPersistenceEngine(str(tmp_path)).read_all() == {
        "driver_a": {"id": "a2"}, "driver_c": {"id": "c"}}


def test_a_full_journal_is_compacted_into_record_files(tmp_path):
    e = FileSystemPersistenceEngine(str(tmp_path), journal_capacity=4096)
    for i in range(40):
        e.persist(f"app_{i:02d}", {"id": i, "pad": "x" * 100})
    assert (tmp_path / "app_00").exists()                 # compacted at least once
    assert decode_record((tmp_path / "app_00").read_bytes()) == {"id": 0, "pad": "x" * 100}
    e.unpersist("app_00")                                 # a delete after a compaction
    e.persist("app_01", {"id": "new"})
    expected = {f"app_{i:02d}": {"id": i, "pad": "x" * 100} for i in range(2, 40)}
    expected["app_01"] = {"id": "new"}
    # The entries left over from before the compaction are not replayed over newer ones.
    reopened = FileSystemPersistenceEngine(str(tmp_path), journal_capacity=4096)
    assert reopened.read_all() == expected
    assert not [n for n in os.listdir(tmp_path) if n.endswith((".compact", ".new"))]


def test_live_records_are_what_the_instructions_left_in_the_store():
    """A store removed under the master is written again from MasterState.live_records:
    the records the Persist / Unpersist instructions left there (the completed lists'
    sequence numbers aside), so a restart from either recovers the same."""
    store = MemoryStore()
    conf = {"spark.deploy.retainedApplications": "2"}
    m = leader(1, conf)
    store.apply(register_worker(m, "worker-1", cores=2, memory=2048)[1])
    store.apply(register_worker(m, "worker-2", host="10.0.0.2")[1])
    for i in range(3):
        app_id, out = register_app(m, f"driver-{i}", app_desc(f"a{i}"))
        store.apply(out)
        store.apply(m.handle(UnregisterApplication(app_id), NOW))
    store.apply(register_app(m, "driver-L", app_desc(max_cores=1))[1])
    drivers = []
    for mem in (512, 4096, 256):
        d, out = submit_driver(m, driver_desc(mem=mem))
        store.apply(out)
        drivers.append(d.driverId)
    store.apply(m.handle(DriverStateChanged(drivers[2], DriverState.FINISHED, None, 0, 1), NOW))
    rebuilt = MemoryStore()
    rebuilt.data = {k: encode_record(r) for k, r in m.live_records()}
    assert rebuilt.data.keys() == store.data.keys()
    assert {k: v for k, v in rebuilt.data.items() if not k.startswith("completed_")} == \
        {k: v for k, v in store.data.items() if not k.startswith("completed_")}
    a, _ = restarted(store, 2, conf=conf)
    b, _ = restarted(rebuilt, 2, conf=conf)
    for m2 in (a, b):
        assert [x.id for x in m2.completed_apps] == [x.id for x in m.completed_apps]
        assert [x.id for x in m2.completed_drivers] == [drivers[2]]
        assert sorted(m2.drivers) == sorted(drivers[:2])
        assert sorted(x.id for x in m2.apps) == sorted(x.id for x in m.apps)
        assert sorted(m2.id_to_worker) == ["worker-1", "worker-2"]
