"""ZOOKEEPER recovery mode against a real ZooKeeper server: the persistence engine (records,
corrupt records, uploaded resources in chunked znodes) and the leader election agent
(epochs, failover, suspension vs. session loss, fencing, an unreachable server)."""
from __future__ import annotations

import hashlib
import msgpack
import logging
import os
import queue
import time
import uuid

import pytest
from kazoo.client import KazooClient

from ember.deploy.local_cluster import free_port
from ember.deploy.local_zookeeper import LocalZooKeeper
from ember.deploy.master.persistence import RecoveryError, encode_record
from ember.deploy.master.recovery_mode import create_recovery
from ember.deploy.master.uploads import UploadError
from ember.deploy.master.zookeeper import (
    CHUNK_BYTES, NotLeaderError, ZooKeeperLeaderElectionAgent, ZooKeeperPersistenceEngine,
    ZooKeeperSession, ZooKeeperSettings,
)


def conf_for(zk, **extra):
    conf = {"spark.deploy.recoveryMode": "ZOOKEEPER", "spark.deploy.zookeeper.url": zk.url,
            "spark.deploy.zookeeper.dir": f"/t-{uuid.uuid4().hex[:10]}"}
    conf.update(extra)
    return conf


@pytest.fixture
def raw(zookeeper):
    """A plain kazoo client for looking at (and damaging) what the engine wrote."""
    client = KazooClient(zookeeper.url)
    client.start(timeout=30)
    yield client
    client.stop()
    client.close()


@pytest.fixture
def closing():
    objs = []
    yield objs.append
    for o in reversed(objs):
        o.stop() if isinstance(o, ZooKeeperLeaderElectionAgent) else o.close()


def wait_until(pred, timeout=30.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached in {timeout}s")


class Callbacks:
    """What an election agent told its master, in order."""

    def __init__(self) -> None:
        self.events: "queue.Queue[tuple]" = queue.Queue()
        self.history: list[tuple] = []

    def elected(self, epoch: int) -> None:
        self.events.put(("elected", epoch))

    def revoked(self) -> None:
        self.events.put(("revoked",))

    def next(self, timeout=30.0) -> tuple:
        event = self.events.get(timeout=timeout)
        self.history.append(event)
        return event

    def quiet(self, seconds: float) -> bool:
        try:
            event = self.events.get(timeout=seconds)
        except queue.Empty:
            return True
        self.history.append(event)
        return False


def start_agent(conf, closing, identity=""):
    session = ZooKeeperSession(ZooKeeperSettings(conf))
    agent = ZooKeeperLeaderElectionAgent(session, identity)
    engine = ZooKeeperPersistenceEngine(session)
    cb = Callbacks()
    agent.start(cb.elected, cb.revoked)
    closing(engine)
    closing(agent)
    return agent, engine, cb


# --- settings -----------------------------------------------------------------------------
def test_settings_errors_are_one_line_and_name_the_key():
    with pytest.raises(RecoveryError, match="spark.deploy.zookeeper.url must be set"):
        ZooKeeperSettings({"spark.deploy.recoveryMode": "ZOOKEEPER"})
    with pytest.raises(RecoveryError, match="spark.deploy.zookeeper.dir"):
        ZooKeeperSettings({"spark.deploy.zookeeper.url": "h:1",
                           "spark.deploy.zookeeper.dir": "spark"})
    with pytest.raises(RecoveryError, match="sessionTimeout"):
        ZooKeeperSettings({"spark.deploy.zookeeper.url": "h:1",
                           "spark.ember.deploy.zookeeper.sessionTimeout": "soon"})
    s = ZooKeeperSettings({"spark.deploy.zookeeper.url": "h:1"})
    assert (s.status_dir, s.election_dir, s.session_timeout_s) == (
        "/spark/master_status", "/spark/leader_election", 3.0)


# --- records ------------------------------------------------------------------------------
def test_records_round_trip_one_znode_each(zookeeper, raw, closing):
    conf = conf_for(zookeeper)
    engine = ZooKeeperPersistenceEngine(ZooKeeperSession(ZooKeeperSettings(conf)))
    closing(engine)
    engine.persist("app_app-1", {"id": "app-1", "cores": 4})
    engine.persist("driver_driver-1", {"id": "driver-1", "supervise": True})
    engine.persist("app_app-1", {"id": "app-1", "cores": 8})  # rewritten in place
    assert engine.read_all() == {"app_app-1": {"id": "app-1", "cores": 8},
                                 "driver_driver-1": {"id": "driver-1", "supervise": True}}
    root = conf["spark.deploy.zookeeper.dir"]
    assert sorted(raw.get_children(f"{root}/master_status")) == ["app_app-1",
                                                                 "driver_driver-1"]
    data, _ = raw.get(f"{root}/master_status/app_app-1")
    assert data == encode_record({"id": "app-1", "cores": 8})
    engine.unpersist("app_app-1")
    engine.unpersist("app_never-written")
    assert engine.read_all() == {"driver_driver-1": {"id": "driver-1", "supervise": True}}
    with pytest.raises(ValueError, match="Invalid record name"):
        engine.persist("../escape", {})


def test_corrupt_truncated_and_unknown_version_records_are_logged_and_skipped(
        zookeeper, raw, closing, caplog):
    conf = conf_for(zookeeper)
    engine = ZooKeeperPersistenceEngine(ZooKeeperSession(ZooKeeperSettings(conf)))
    closing(engine)
    engine.persist("worker_w1", {"id": "w1"})
    status = f"{conf['spark.deploy.zookeeper.dir']}/master_status"
    good, _ = raw.get(f"{status}/worker_w1")
    raw.create(f"{status}/app_truncated", good[:len(good) // 2])
    raw.create(f"{status}/app_garbage", b"\x80\x04\x95 pickle-looking bytes")
    raw.create(f"{status}/app_future", msgpack.packb({"version": 99, "record": {}}))
    raw.create(f"{status}/app_notobject", msgpack.packb({"version": 1, "record": [1]}))
    with caplog.at_level(logging.ERROR, logger="ember.deploy.master"):
        assert engine.read_all() == {"worker_w1": {"id": "w1"}}
    logged = " ".join(r.getMessage() for r in caplog.records)
    for name in ("app_truncated", "app_garbage", "app_future", "app_notobject"):
        assert name in logged
    assert "unknown record version 99" in logged
    assert all(r.exc_info is None for r in caplog.records)


# --- uploaded resources -------------------------------------------------------------------
def test_blob_in_chunks_verified_by_sha256(zookeeper, raw, closing, caplog):
    conf = conf_for(zookeeper)
    engine = ZooKeeperPersistenceEngine(ZooKeeperSession(ZooKeeperSettings(conf)))
    closing(engine)
    data = os.urandom(2 * CHUNK_BYTES + 1234)
    key = hashlib.sha256(data).hexdigest() + "/app.py"
    engine.put_blob(key, data)
    engine.put_blob(key, data)  # idempotent
    assert engine.get_blob(key) == data
    assert engine.get_blob("nothing/here.py") is None
    engine.put_blob("empty/e.txt", b"")
    assert engine.get_blob("empty/e.txt") == b""
    # Another engine (a standby that became leader) reads the same bytes.
    other = ZooKeeperPersistenceEngine(ZooKeeperSession(ZooKeeperSettings(conf)))
    closing(other)
    assert other.get_blob(key) == data
    blob_dir = f"{conf['spark.deploy.zookeeper.dir']}/app_resources"
    (node,) = [n for n in raw.get_children(blob_dir) if n.startswith(key[:64])]
    assert sorted(raw.get_children(f"{blob_dir}/{node}")) == ["000000", "000001", "000002"]
    # A damaged chunk is detected, logged with the key, and the blob is "missing".
    raw.set(f"{blob_dir}/{node}/000001", b"x" * CHUNK_BYTES)
    with caplog.at_level(logging.ERROR, logger="ember.deploy.master"):
        assert other.get_blob(key) is None
    assert key in caplog.text and "SHA-256" in caplog.text
    # Storing it again repairs it; deleting removes every chunk.
    engine.put_blob(key, data)
    assert other.get_blob(key) == data
    engine.delete_blob(key)
    assert engine.get_blob(key) is None
    assert node not in raw.get_children(blob_dir)
    engine.delete_blob(key)


def test_blob_without_header_is_missing_and_size_cap_is_enforced(zookeeper, raw, closing):
    conf = conf_for(zookeeper, **{"spark.ember.deploy.zookeeper.maxBlobSize": "1m"})
    engine = ZooKeeperPersistenceEngine(ZooKeeperSession(ZooKeeperSettings(conf)))
    closing(engine)
    blob_dir = f"{conf['spark.deploy.zookeeper.dir']}/app_resources"
    # A writer that died after its chunks but before the header.
    raw.create(f"{blob_dir}/half%2Fa.py/000000", b"print(1)", makepath=True)
    assert engine.get_blob("half/a.py") is None
    engine.put_blob("half/a.py", b"print(2)")
    assert engine.get_blob("half/a.py") == b"print(2)"
    with pytest.raises(UploadError, match="maxBlobSize"):
        engine.put_blob("big/b.bin", b"\0" * (1024 * 1024 + 1))
    assert engine.get_blob("big/b.bin") is None


# --- leader election ----------------------------------------------------------------------
def test_one_leader_epochs_grow_and_a_stopped_leader_hands_over_at_once(zookeeper, closing):
    conf = conf_for(zookeeper)
    a, engine_a, cb_a = start_agent(conf, closing, "spark://a:7077")
    assert cb_a.next()[0] == "elected"
    epoch_a = a.epoch
    b, engine_b, cb_b = start_agent(conf, closing, "spark://b:7077")
    assert cb_b.quiet(1.0)
    assert a.current_leader() == "spark://a:7077" and b.current_leader() == "spark://a:7077"
    engine_a.persist("app_1", {"id": "1"})
    with pytest.raises(NotLeaderError):
        engine_b.persist("app_2", {"id": "2"})
    a.stop()  # deletes its latch node: no session timeout to wait for
    assert cb_b.next() == ("elected", b.epoch)
    assert b.epoch > epoch_a
    assert engine_b.read_all() == {"app_1": {"id": "1"}}
    engine_b.persist("app_2", {"id": "2"})


def test_a_leader_that_relinquishes_hands_over_and_stands_again(zookeeper, closing):
    """What a master does when it cannot read its records right after its election."""
    conf = conf_for(zookeeper)
    a, _, cb_a = start_agent(conf, closing, "spark://a:7077")
    assert cb_a.next()[0] == "elected"
    epoch_a = a.epoch
    b, _, cb_b = start_agent(conf, closing, "spark://b:7077")
    wait_until(lambda: b.session.connected.is_set(), what="b connected")
    assert cb_b.quiet(0.5)
    a.relinquish()
    assert cb_a.next() == ("revoked",)
    assert cb_b.next() == ("elected", b.epoch) and b.epoch > epoch_a
    wait_until(lambda: a.current_leader() == "spark://b:7077", what="a sees b lead")
    assert not a.is_leader and cb_a.quiet(1.0)     # a stands again, behind b
    b.stop()
    assert cb_a.next() == ("elected", a.epoch) and a.epoch > b.epoch


def expire_session(zk, client: KazooClient) -> None:
    """Expire `client`'s session on the server, as a pause longer than the timeout does:
    a second connection with the same session id closes it."""
    session_id, password = client.client_id
    other = KazooClient(zk.url, client_id=(session_id, password))
    other.start(timeout=30)
    other.stop()
    other.close()


def test_lost_session_revokes_at_once_and_rejoins_as_standby(zookeeper, closing, caplog):
    conf = conf_for(zookeeper)
    a, engine_a, cb_a = start_agent(conf, closing, "a")
    assert cb_a.next()[0] == "elected"
    b, engine_b, cb_b = start_agent(conf, closing, "b")
    first_epoch = a.epoch
    with caplog.at_level(logging.INFO, logger="ember.deploy.master"):
        expire_session(zookeeper, a.session.client)
        assert cb_a.next() == ("revoked",)
        assert cb_b.next() == ("elected", b.epoch)
    assert b.epoch > first_epoch
    # A deposed leader does not write, and comes back as a standby in the election.
    with pytest.raises(NotLeaderError):
        engine_a.persist("app_x", {})
    wait_until(lambda: len(a.session.client.get_children(
        f"{conf['spark.deploy.zookeeper.dir']}/leader_election")) == 2, what="rejoined")
    assert cb_a.quiet(0.5) and not a.is_leader
    b.stop()
    assert cb_a.next() == ("elected", a.epoch)
    assert a.epoch > b.epoch


def test_write_is_fenced_by_the_latch_node(zookeeper, raw, closing):
    """A leader whose latch node is gone (session expired, not yet noticed) writes nothing:
    the check on the node is part of the write's transaction."""
    conf = conf_for(zookeeper)
    session = ZooKeeperSession(ZooKeeperSettings(conf))
    engine = ZooKeeperPersistenceEngine(session)
    closing(engine)
    engine.persist("app_before", {})
    root = conf["spark.deploy.zookeeper.dir"]
    node = raw.create(f"{root}/leader_election/latch-", b"", sequence=True)
    session.fencing, session.fence_path = True, node
    engine.persist("app_fenced_ok", {})
    engine.put_blob("k/a.py", b"x")
    raw.delete(node)
    with pytest.raises(NotLeaderError):
        engine.persist("app_late", {})
    with pytest.raises(NotLeaderError):
        engine.unpersist("app_before")
    with pytest.raises(UploadError, match="Leadership lost"):
        engine.put_blob("k/b.py", b"y")
    engine.delete_blob("k/a.py")  # refused (logged): garbage collection is best effort
    assert sorted(raw.get_children(f"{root}/master_status")) == ["app_before", "app_fenced_ok"]
    assert engine.get_blob("k/a.py") == b"x" and engine.get_blob("k/b.py") is None
    session.fence_path = None  # a standby
    with pytest.raises(NotLeaderError):
        engine.persist("app_standby", {})


def test_short_outage_keeps_leadership_long_one_revokes_and_one_leader_after(
        zookeeper, closing):
    # 6 s sessions: "shorter than the session timeout" with room for a slow server restart.
    conf = conf_for(zookeeper, **{"spark.ember.deploy.zookeeper.sessionTimeout": "6s"})
    a, engine_a, cb_a = start_agent(conf, closing, "a")
    assert cb_a.next()[0] == "elected"
    b, engine_b, cb_b = start_agent(conf, closing, "b")
    wait_until(lambda: b.session.connected.is_set(), what="b connected")
    epoch = a.epoch
    with zookeeper.outage(1.0):
        pass
    wait_until(lambda: a.session.connected.is_set(), what="a reconnected")
    assert cb_a.quiet(1.0) and cb_b.quiet(0.1)
    assert a.is_leader and a.epoch == epoch
    engine_a.persist("app_after_blip", {"ok": True})
    # Down for longer than the session timeout: leadership is given up, then exactly one
    # master leads again, with a larger epoch.
    with zookeeper.outage(9.0):
        assert cb_a.next(timeout=15) == ("revoked",)
    leader = wait_until(lambda: [x for x in (a, b) if x.is_leader], timeout=30,
                        what="a new leader")
    time.sleep(1.0)
    assert [x for x in (a, b) if x.is_leader] == leader and len(leader) == 1
    assert leader[0].epoch > epoch
    engine = engine_a if leader[0] is a else engine_b
    assert engine.read_all()["app_after_blip"] == {"ok": True}


def test_unreachable_zookeeper_one_line_error_then_connects(tmp_path, closing, caplog):
    server = LocalZooKeeper(str(tmp_path), port=free_port())
    conf = {"spark.deploy.recoveryMode": "ZOOKEEPER", "spark.deploy.zookeeper.url": server.url,
            "spark.deploy.zookeeper.dir": "/unreachable"}
    engine, agent = create_recovery(conf, master_url="a")
    cb = Callbacks()
    with caplog.at_level(logging.INFO, logger="ember.deploy.master"):
        agent.start(cb.elected, cb.revoked)  # returns at once
        try:
            wait_until(lambda: "Cannot connect to ZooKeeper" in caplog.text, timeout=30,
                       what="the connection error")
            server.start()
            assert cb.next(timeout=60)[0] == "elected"
        finally:
            agent.stop()
            engine.close()
            server.destroy()
    errors = [r for r in caplog.records if "Cannot connect" in r.getMessage()]
    assert server.url in errors[0].getMessage() and "\n" not in errors[0].getMessage()
    assert all(r.exc_info is None for r in caplog.records)


def test_a_latch_node_whose_create_answer_was_lost_is_adopted(zookeeper, raw, closing):
    """Otherwise it would stay first in line, owned by a live session, and nobody would lead."""
    conf = conf_for(zookeeper)
    session = ZooKeeperSession(ZooKeeperSettings(conf))
    engine = ZooKeeperPersistenceEngine(session)
    agent = ZooKeeperLeaderElectionAgent(session, "a")
    closing(engine)
    closing(agent)
    session.require_client(wait_s=30)
    election = f"{conf['spark.deploy.zookeeper.dir']}/leader_election"
    orphan = session.client.create(f"{election}/latch-{agent._guid}-", b"a", ephemeral=True,
                                   sequence=True)
    cb = Callbacks()
    agent.start(cb.elected, cb.revoked)
    assert cb.next() == ("elected", int(orphan[-10:]) + 1)
    assert raw.get_children(election) == [orphan.rsplit("/", 1)[1]]
