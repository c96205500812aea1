"""Issue 11's attacks against real daemons on loopback, each tried on a default-configured
cluster (no secret: only the daemon's own Unix user is admitted, so the stranger acts as
uid 65534) and on an authenticated one (spark.authenticate: the stranger has no secret, an
application holds only its derived credential). Each is refused, nothing of it runs, and
the daemon goes on serving its own clients."""
from __future__ import annotations

import os
import pickle
import threading
import time

import psutil
import pytest

from ember import SparkConf, SparkContext
from ember.deploy.messages import (LaunchDriver, LaunchTask, LaunchTasks, RequestMasterState,
                                   RequestSubmitDriver, RequestWorkerState, StatusUpdate,
                                   StatusUpdates)
from ember.rpc import RpcEnv, encode, framing
from ember.rpc.security import app_credential
from security_helpers import LoopbackCapture, as_other_user, raw_exchange
from test_driver_runner import description
from tests.cluster import LocalCluster

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="the stranger of the default cluster is uid 65534 (root)")
SECRET = "attack-tests-cluster-secret-0123456789abcdef"
AUTH = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET}


class _Evil:
    """Unpickling this creates the marker file: proof that a payload ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


@pytest.fixture(scope="module", params=["default", "authenticated"])
def mode(request, tmp_path_factory):
    conf = {} if request.param == "default" else dict(AUTH)
    tmp = tmp_path_factory.mktemp(request.param)
    with LocalCluster(str(tmp / "c"), workers=1, cores=2, conf=conf) as cluster:
        envs: list[RpcEnv] = []

        def env(name: str, c: dict) -> RpcEnv:
            e = RpcEnv.create(name, "127.0.0.1", 0, {"spark.rpc.connect.timeout": "5s", **c},
                              client_mode=True)
            envs.append(e)
            return e
        yield type("Mode", (), {"name": request.param, "cluster": cluster, "conf": conf,
                                "env": staticmethod(env), "tmp": tmp})
        for e in envs:
            e.shutdown()


def _one_way(name: str, msg: object) -> bytes:
    body = encode(msg)
    return framing.one_way_header(name.encode(), len(body)) + body


def _request(name: str, msg: object) -> bytes:
    body = encode(msg)
    return framing.request_header(1, name.encode(), len(body)) + body


def stranger(mode, port: int, payload: bytes) -> dict:
    """A peer without credentials speaks the protocol unauthenticated: hello, then the
    attack. On the default cluster it is another Unix user; on the authenticated one it
    lacks the secret."""
    data = framing.hello_frame(None, "stranger", "stranger") + payload
    if mode.name == "default":
        return as_other_user(lambda: raw_exchange(port, data))
    return raw_exchange(port, data)


def assert_refused(seen: dict) -> None:
    """No reply frame came back, and the server hung up: at most its greeting (+ scope)."""
    assert seen["closed"] and seen["bytes"] <= framing.GREETING_LEN + 1 + 255, seen


def application(mode) -> RpcEnv:
    """Another application's process: on the authenticated cluster it holds only its own
    derived credential; on the default cluster it is any same-user process that is not
    the master / driver the receiver trusts."""
    if mode.name == "default":
        return mode.env("other-app", {})
    return mode.env("other-app", {**AUTH, "spark.authenticate.secret":
                                  app_credential(SECRET.encode(), "app-other")})


def trusted(mode) -> RpcEnv:
    return mode.env("trusted", mode.conf)


def worker_address(mode) -> tuple[str, int]:
    w = mode.cluster.json()["workers"][0]
    return w["host"], int(w["port"])


def marker(mode, name: str) -> str:
    path = str(mode.tmp / f"ran-{name}")
    if os.path.exists(path):
        os.unlink(path)
    return path


def _master_still_serves(mode) -> None:
    state = trusted(mode).endpoint_ref(mode.cluster.url, "Master").ask_sync(
        RequestMasterState(), timeout=30)
    assert state.port == mode.cluster.master_port


def _driver_app(mode, path: str) -> LaunchDriver:
    script = mode.tmp / "evil_driver.py"
    script.write_text(f"open({path!r}, 'w').write('ran')\n")
    return description(str(script))


def test_unauthenticated_submit_is_refused(mode):
    path = marker(mode, "submit")
    seen = stranger(mode, mode.cluster.master_port,
                    _request("Master", RequestSubmitDriver(_driver_app(mode, path))))
    assert_refused(seen)
    time.sleep(1)
    j = mode.cluster.json()
    assert not j["activedrivers"] and not j["completeddrivers"] and not os.path.exists(path)
    _master_still_serves(mode)


def test_direct_launch_driver_to_a_worker_is_refused(mode):
    path = marker(mode, "launch-driver")
    host, port = worker_address(mode)
    launch = LaunchDriver("driver-evil", _driver_app(mode, path))
    assert_refused(stranger(mode, port, _one_way("Worker", launch)))
    # an application's connection is not the master's
    application(mode).endpoint_ref(f"spark://{host}:{port}", "Worker").send(launch)
    time.sleep(2)
    state = trusted(mode).endpoint_ref(f"spark://{host}:{port}", "Worker").ask_sync(
        RequestWorkerState(), timeout=30)
    assert not state.drivers and not state.finishedDrivers and not os.path.exists(path)
    _master_still_serves(mode)


@pytest.fixture(scope="module")
def app(mode):
    """A running client-mode application of the trusted user, with its executors."""
    c = SparkConf().setMaster(mode.cluster.url).setAppName(f"victim-{mode.name}")
    for k, v in mode.conf.items():
        c.set(k, v)
    sc = SparkContext(conf=c)
    assert sc.parallelize(range(10), 2).sum() == 45
    yield sc
    sc.stop()


@pytest.mark.parametrize("batched", [False, True], ids=["LaunchTask", "LaunchTasks"])
def test_launch_task_to_an_executor_from_a_stranger_is_refused(mode, app, batched):
    path = marker(mode, f"launch-task-{batched}")
    executors = list(app.runtime.scheduler_backend.executors.values())
    assert executors
    ex = executors[0]
    task = (LaunchTasks if batched else LaunchTask)(pickle.dumps(_Evil(path)))
    assert_refused(stranger(mode, ex.address.port, _one_way("Executor", task)))
    application(mode).endpoint_ref(ex.address, "Executor").send(task)
    time.sleep(2)
    assert not os.path.exists(path)
    assert app.parallelize(range(100), 4).map(lambda x: x * 2).sum() == 9900


@pytest.mark.parametrize("batched", [False, True], ids=["StatusUpdate", "StatusUpdates"])
def test_status_update_to_a_driver_from_strangers_is_refused(mode, app, batched):
    path = marker(mode, f"status-update-{batched}")
    driver = app.runtime.scheduler_backend.rpc_env.address
    eid = next(iter(app.runtime.scheduler_backend.executors))
    evil = pickle.dumps(_Evil(path))
    update = (StatusUpdates(eid, [0, 1], ["FINISHED"] * 2, [evil] * 2) if batched
              else StatusUpdate(eid, 0, "FINISHED", evil))
    assert_refused(stranger(mode, driver.port, _one_way("CoarseGrainedScheduler", update)))
    # another application's executor (its own credential / not the registered connection)
    try:
        application(mode).endpoint_ref(driver, "CoarseGrainedScheduler").send(update)
    except Exception:
        pass
    time.sleep(2)
    assert not os.path.exists(path)
    assert app.parallelize(range(10), 2).count() == 10


def test_application_removed_from_an_executor_identity_is_refused(mode, app):
    """The master connects to a client-mode driver as the cluster; a connection holding the
    application's own credential (what its executors have) cannot play the master."""
    from ember.deploy.messages import ApplicationRemoved
    driver = app.runtime.scheduler_backend.rpc_env.address
    if mode.name == "authenticated":
        executor_like = mode.env("executor-like", {**AUTH, "spark.authenticate.secret":
                                                   app_credential(SECRET.encode(),
                                                                  app.applicationId)})
    else:   # default: a same-user process is in the trust domain; a stranger is refused
        executor_like = None
        assert_refused(stranger(mode, driver.port,
                                _one_way("AppClient", ApplicationRemoved("by a stranger"))))
    if executor_like is not None:
        executor_like.endpoint_ref(driver, "AppClient").send(ApplicationRemoved("forged"))
    time.sleep(2)
    assert app.parallelize(range(10), 2).sum() == 45


def test_fd_exhaustion_with_half_open_connections_is_bounded(mode):
    master = psutil.Process(mode.cluster.master.pid)
    before = master.num_fds()
    n = 300
    samples: list[int] = []
    stop = threading.Event()

    def hold() -> int:
        import socket as s
        socks = []
        for _ in range(n):
            try:
                socks.append(s.create_connection(("127.0.0.1", mode.cluster.master_port),
                                                 timeout=30))
            except OSError:
                pass       # refused or reset: fine, that is the point
        time.sleep(3)       # the parent samples the master meanwhile
        for x in socks:
            x.close()
        return n

    def sample() -> None:
        while not stop.is_set():
            samples.append(master.num_fds())
            time.sleep(0.1)
    t = threading.Thread(target=sample)
    t.start()
    try:
        if mode.name == "default":
            as_other_user(hold, timeout=120)
        else:
            hold()
    finally:
        stop.set()
        t.join()
    # refused at once (another user) or capped (64 in their handshake, the oldest
    # dropped); at most one accept batch (asyncio takes up to 100 per loop turn) in flight
    assert max(samples) - before <= 64 + 100 + 16, (before, max(samples))
    deadline = time.monotonic() + 30
    while master.num_fds() - before > 16 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert master.num_fds() - before <= 16
    _master_still_serves(mode)


def test_parked_frames_cannot_grow_the_daemon(mode):
    master = psutil.Process(mode.cluster.master.pid)
    rss_before = master.memory_info().rss
    import struct
    frame_start = struct.pack(">IB", 120 << 20, framing.ONE_WAY) + b"\0" * (2 << 20)

    def park() -> int:
        return sum(raw_exchange(mode.cluster.master_port,
                                framing.hello_frame(None, "p", "p") + frame_start,
                                wait=5)["closed"] for _ in range(20))
    closed = as_other_user(park, timeout=90) if mode.name == "default" else park()
    assert closed == 20            # every parker was thrown out
    grown = master.memory_info().rss - rss_before
    assert grown < 32 << 20, grown  # 20 x 120 MiB announced, nothing of it kept
    _master_still_serves(mode)


def test_crypto_hides_a_jobs_data_on_the_wire(tmp_path):
    """A capture of the loopback traffic (AF_PACKET on lo) while a job moves a marker
    between driver and executors: visible with MAC only, absent with AES-GCM."""
    mark = "JOBDATA-" + os.urandom(6).hex()
    results = {}
    if SparkContext._active_spark_context is not None:   # the module's victim app
        SparkContext._active_spark_context.stop()
    for crypto in ("false", "true"):
        conf = {**AUTH, "spark.network.crypto.enabled": crypto}
        with LocalCluster(str(tmp_path / crypto), workers=1, cores=2, conf=conf) as cluster:
            c = SparkConf().setMaster(cluster.url).setAppName(f"crypto-{crypto}")
            for k, v in conf.items():
                c.set(k, v)
            sc = SparkContext(conf=c)
            try:
                assert sc.parallelize(range(4), 2).count() == 4   # executors are up
                with LoopbackCapture() as cap:
                    out = sc.parallelize([mark] * 200, 2).map(lambda s: s + "!").collect()
                assert out == [mark + "!"] * 200
                results[crypto] = cap.contains(mark.encode())
                assert cap.total_bytes() > 0
            finally:
                sc.stop()
    assert results == {"false": True, "true": False}


def test_cluster_mode_driver_runs_on_its_application_credential(tmp_path):
    """spark.authenticate with a cluster-mode driver: the worker hands it a credential for
    its own scope (never the secret), its executors get the same scope, and the job runs."""
    from test_cluster_mode import submit, wait_driver, write_app
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    conf = {"spark.authenticate": "true", "spark.authenticate.secret.file": str(secret_file)}
    app = write_app(tmp_path, "job.py", """
        import os
        from ember import SparkContext
        cred = os.environ["_SPARK_AUTH_SECRET"]
        print("CRED", cred.split(":")[0], cred.split(":")[1])
        sc = SparkContext()
        print("SUM", sc.parallelize(range(100), 4).map(lambda x: x * 2).sum())
        sc.stop()
    """)
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=2, memory="3g",
                      conf=conf) as cluster:
        r = submit(cluster, "--follow", "--conf", "spark.authenticate=true", "--conf",
                   f"spark.authenticate.secret.file={secret_file}", "--conf",
                   "spark.executor.memory=256m", app)
        assert r.returncode == 0, r.stdout + r.stderr
        driver_id, out = r.stdout.split("\n", 1)
        assert f"CRED ember-app-v1 {driver_id}" in out and "SUM 9900" in out
        assert SECRET not in out
        assert wait_driver(cluster, driver_id)["state"] == "FINISHED"
