"""The worker's external shuffle service over real sockets: registration, serving map output
only under registered directories, authentication, cleanup, Spark's start errors."""
from __future__ import annotations

import os
import time

import pytest

from ember.deploy.local_cluster import free_port
from ember.deploy.messages import FetchShuffleBlocks, RegisterExecutorShuffleInfo
from ember.deploy.worker.shuffle_service import (ENDPOINT_NAME, MULTIPLE_WORKERS_ERROR,
                                                 ExternalShuffleService)
from ember.partitioner import portable_hash
from ember.rpc import RpcAddress, RpcEndpoint, RpcEnv
from ember.shuffle.reader import _batches_from_bytes
from ember.shuffle.writer import output_file_base, write_map_output



def _records(data: bytes) -> list:
    return [r for batch in _batches_from_bytes(data) for r in batch]


SECRET = {"spark.authenticate": "true", "spark.authenticate.secret": "shuffle-service-test-secret-of-32-bytes"}


@pytest.fixture
def service():
    svc = ExternalShuffleService("127.0.0.1", {"spark.shuffle.service.port": str(free_port()),
                                               **SECRET})
    svc.start()
    yield svc
    svc.stop()


@pytest.fixture
def client():
    env = RpcEnv.create("test", "127.0.0.1", 0, dict(SECRET), client_mode=True)
    yield env
    env.shutdown()


def ref(env, svc):
    return env.setup_endpoint_ref_sync(RpcAddress("127.0.0.1", svc.bound_port), ENDPOINT_NAME,
                                       timeout=10)


def write(records, n, exec_dir, service):
    """A map output big enough to go to a file (small ones travel in their MapStatus)."""
    st = write_map_output(records, n, portable_hash, str(exec_dir / "spill"),
                          output_file_base(str(exec_dir), 0), 64, "1", "127.0.0.1",
                          f"127.0.0.1:{service.bound_port}", None, endpoint=ENDPOINT_NAME)
    assert st.data is None and st.path.startswith(str(exec_dir))
    return st


def blocks(st, reduce_ids=None, path=None):
    """The FetchShuffleBlocks a reducer sends for these reducers' segments of `st`."""
    segs = [(r, s, e) for r, s, e in st.segments() if reduce_ids is None or r in reduce_ids]
    return FetchShuffleBlocks(0, [path or st.path] * len(segs), [s for _r, s, _e in segs],
                              [e for _r, _s, e in segs])


def test_serves_registered_map_output_and_nothing_else(service, client, tmp_path):
    exec_dir = tmp_path / "executor-1"
    exec_dir.mkdir()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    st = write([(k, k * 10) for k in range(2000)], 2, exec_dir, service)
    svc = ref(client, service)
    with pytest.raises(Exception, match="Invalid shuffle block path"):
        svc.ask_sync(blocks(st), 10)        # not registered yet
    assert svc.ask_sync(RegisterExecutorShuffleInfo("app-1", "1", [str(exec_dir)]), 10)
    records = []
    for reduce_id in (0, 1):       # one batch per reducer: its segment, whole
        records += list(_records(svc.ask_sync(blocks(st, {reduce_id}), 10)))
    assert sorted(records) == [(k, k * 10) for k in range(2000)]
    both = svc.ask_sync(blocks(st), 10)            # a batch of segments, concatenated
    assert sorted(_records(both)) == sorted(records)
    (exec_dir / "notes.data").write_bytes(b"x" * 100)   # registered dir, not a map output
    for bad in ("/etc/passwd", str(exec_dir / ".." / "x"), str(exec_dir / "notes"),
                str(exec_dir / "shuffle_0_1_2" / ".." / ".." / "other" / "shuffle_0_1_2")):
        with pytest.raises(Exception, match="Invalid shuffle block path"):
            svc.ask_sync(FetchShuffleBlocks(0, [bad], [0], [10]), 10)
    size = os.path.getsize(st.path + ".data")
    with pytest.raises(Exception, match="ends before byte"):      # past the file's end
        svc.ask_sync(FetchShuffleBlocks(0, [st.path], [0], [size + 1]), 10)
    with pytest.raises(Exception, match="Invalid shuffle block range"):
        svc.ask_sync(FetchShuffleBlocks(0, [st.path], [10], [5]), 10)
    with pytest.raises(Exception, match="do not match"):
        svc.ask_sync(FetchShuffleBlocks(0, [st.path, st.path], [0], [5]), 10)
    with pytest.raises(Exception, match="Invalid shuffle registration"):
        svc.ask_sync(RegisterExecutorShuffleInfo("app-1", "2", [str(tmp_path / "nope")]), 10)
    # the application ends: the service forgets it and deletes what it registered
    service.application_removed("app-1")
    deadline = time.time() + 10
    while exec_dir.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert not exec_dir.exists()
    with pytest.raises(Exception, match="Invalid shuffle block path"):
        svc.ask_sync(blocks(st), 10)


def test_an_application_reads_only_its_own_shuffle_files(service, tmp_path):
    """Executors hold their application's derived credential: each may register and read
    only its own application's files, never another application's."""
    from ember.rpc.security import app_credential

    def app_env(scope: str) -> RpcEnv:
        cred = app_credential(SECRET["spark.authenticate.secret"].encode(), scope)
        return RpcEnv.create(scope, "127.0.0.1", 0, {"spark.authenticate": "true",
                                                      "spark.authenticate.secret": cred},
                             client_mode=True)
    a, b = app_env("app-a"), app_env("app-b")
    try:
        outputs = {}
        for name in ("app-a", "app-b"):
            d = tmp_path / name
            d.mkdir()
            outputs[name] = write([(1, name * 1000)], 1, d, service)
        ra, rb = ref(a, service), ref(b, service)
        assert ra.ask_sync(RegisterExecutorShuffleInfo("app-a", "1", [str(tmp_path / "app-a")]), 10)
        with pytest.raises(Exception, match="may not register shuffle files of app-a"):
            rb.ask_sync(RegisterExecutorShuffleInfo("app-a", "2", [str(tmp_path / "app-b")]), 10)
        assert rb.ask_sync(RegisterExecutorShuffleInfo("app-b", "1", [str(tmp_path / "app-b")]), 10)
        assert list(_records(ra.ask_sync(blocks(outputs["app-a"]), 10))
                    ) == [(1, "app-a" * 1000)]
        with pytest.raises(Exception, match="Invalid shuffle block path"):
            rb.ask_sync(blocks(outputs["app-a"]), 10)
        with pytest.raises(Exception, match="Invalid shuffle block path"):   # not even one
            rb.ask_sync(FetchShuffleBlocks(0, [outputs["app-b"].path, outputs["app-a"].path],
                                           [0, 0], [1, 1]), 10)
    finally:
        a.shutdown()
        b.shutdown()


def test_authenticates_like_the_worker(service):
    stranger = RpcEnv.create("stranger", "127.0.0.1", 0,
                             {"spark.authenticate": "true",
                              "spark.authenticate.secret": "a-wrong-secret-that-is-32-bytes-long"}, client_mode=True)
    try:
        with pytest.raises(Exception):
            ref(stranger, service)
    finally:
        stranger.shutdown()


def test_spark_errors_for_two_services_on_one_host(service, monkeypatch):
    taken = ExternalShuffleService("127.0.0.1",
                                   {"spark.shuffle.service.port": str(service.bound_port)})
    with pytest.raises(OSError, match="Failed to start the external shuffle service"):
        taken.start()
    monkeypatch.setenv("SPARK_WORKER_INSTANCES", "2")
    with pytest.raises(ValueError) as e:
        ExternalShuffleService("127.0.0.1", {"spark.shuffle.service.port": "0"}).start()
    assert str(e.value) == MULTIPLE_WORKERS_ERROR


def test_a_lost_worker_takes_the_outputs_its_service_served():
    """With the service on, a lost executor keeps its outputs; when its worker goes too,
    every output that worker's service served goes, and another worker's on the same host
    stays."""
    from ember.scheduler.map_output_tracker import MapOutputTracker
    from ember.shuffle.base import MapStatus
    t = MapOutputTracker()
    t.register_shuffle(0, 3)
    w1, w2 = "127.0.0.1:7001", "127.0.0.1:7002"
    t.register_map_output(0, 0, MapStatus("1", "127.0.0.1", "/a", 1, 1, w1, ENDPOINT_NAME))
    t.register_map_output(0, 1, MapStatus("2", "127.0.0.1", "/b", 1, 1, w1, ENDPOINT_NAME))
    t.register_map_output(0, 2, MapStatus("3", "127.0.0.1", "/c", 1, 1, w2, ENDPOINT_NAME))
    assert t.remove_outputs_served_with("2") == 2
    assert t.missing(0) == [0, 1]


class _Stopped(RpcEndpoint):
    """An executor or shuffle service that takes the fetch and never answers (its process
    stopped after the kernel accepted the connection)."""

    def receive_and_reply(self, msg, context) -> None:
        pass


@pytest.mark.parametrize("conf, quiet_ms", [({"spark.network.timeout": "1s"}, 1000),
                                            ({"spark.network.timeout": "60s",
                                              "spark.shuffle.io.connectionTimeout": "500ms"},
                                             500)])
def test_a_fetch_nobody_answers_fails_after_the_connection_timeout(tmp_path, conf, quiet_ms):
    """A reducer's fetch from a stopped peer fails after spark.shuffle.io.connectionTimeout
    (else spark.network.timeout; a fixed 120 s before) in Spark's words, so the stage's
    FetchFailed runs the map stage again."""
    from ember.executor.remote import RemoteFetcher
    server = RpcEnv.create("stopped", "127.0.0.1", 0, {})
    server.setup_endpoint("silent", _Stopped())
    fetcher = RemoteFetcher(("127.0.0.1", 1), conf, str(tmp_path), str(tmp_path))
    try:
        wait = fetcher.fetch_shuffle(f"127.0.0.1:{server.address.port}", "silent", 0,
                                     [("shuffle_0_0", 0, 10)])
        with pytest.raises(OSError) as e:
            wait()
        assert str(e.value) == (
            f"Connection from 127.0.0.1:{server.address.port} has been quiet for {quiet_ms} "
            "ms while there are outstanding requests. Assuming connection is dead; please "
            "adjust spark.shuffle.io.connectionTimeout if this is wrong.")
    finally:
        if fetcher._env is not None:
            fetcher._env.shutdown()
        server.shutdown()
