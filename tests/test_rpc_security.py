"""Secure by default at the RPC layer (issue 11): who is admitted (same user on loopback, a
secret, an application credential), the start-up rules, per-frame MAC and AES-GCM, and the
bounds on what strangers can hold (pending handshakes, partial frames)."""
from __future__ import annotations

import logging
import os
import socket
import struct
import threading
import time

import psutil
import pytest

from ember.rpc import RpcAuthenticationError, RpcEndpoint, RpcEnv, RpcRemoteError, framing
from ember.rpc import security, tcp
from ember.rpc.security import app_credential
from security_helpers import as_other_user, raw_exchange
from test_rpc import Recorder, RtEcho

SECRET = "a-cluster-secret-of-more-than-32-bytes!"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="acting as another user needs root")


def auth(secret: str = SECRET, **extra: str) -> dict[str, str]:
    return {"spark.authenticate": "true", "spark.authenticate.secret": secret,
            "spark.rpc.connect.timeout": "3s", **extra}


@pytest.fixture
def envs():
    made: list[RpcEnv] = []

    def make(name: str, conf: dict, client_mode: bool = False, host: str = "127.0.0.1") -> RpcEnv:
        env = RpcEnv.create(name, host, 0, conf, client_mode=client_mode)
        made.append(env)
        return env

    yield make
    for env in made:
        env.shutdown()


# -- start-up rules -----------------------------------------------------------------------

def test_non_loopback_listener_needs_a_secret_or_the_named_opt_out(envs, caplog):
    with pytest.raises(ValueError) as e:
        RpcEnv.create("open", "0.0.0.0", 0, {})
    text = str(e.value)
    assert "\n" not in text and "without authentication" in text
    for hint in ("--generate-secret", "spark.authenticate", security.INSECURE_OPT_OUT):
        assert hint in text
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    envs("opted-out", {security.INSECURE_OPT_OUT: "true"}, host="0.0.0.0")
    assert "WITHOUT authentication" in caplog.text
    envs("with-secret", auth(), host="0.0.0.0")          # a secret: no complaint
    assert security.is_loopback_host("localhost") and security.is_loopback_host("127.0.0.2")
    assert not security.is_loopback_host("") and not security.is_loopback_host("0.0.0.0")


def test_short_secrets_are_refused_everywhere(tmp_path):
    for conf in (auth("x"), auth("y" * 31)):
        with pytest.raises(ValueError, match="at least 32 are required"):
            RpcEnv.create("short", "127.0.0.1", 0, conf)
    short_file = tmp_path / "s"
    short_file.write_text("tiny\n")
    with pytest.raises(ValueError, match="at least 32"):
        RpcEnv.create("short", "127.0.0.1", 0, {"spark.authenticate": "true",
                                                "spark.authenticate.secret.file": str(short_file)})
    with pytest.raises(ValueError, match="needs spark.authenticate=true"):
        RpcEnv.create("crypto", "127.0.0.1", 0, {security.CRYPTO_ENABLED: "true"})


def test_secret_on_the_command_line_draws_a_warning(caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    monkeypatch.setattr(security, "_warned_argv", False)
    security.warn_secret_on_command_line(["ember", "--conf", f"spark.authenticate.secret={SECRET}"])
    assert "/proc/<pid>/cmdline" in caplog.text and SECRET not in caplog.text


def test_generate_secret_file_is_private_and_found_by_default(tmp_path, monkeypatch, envs):
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "conf"))
    path, created = security.generate_secret_file()
    assert created and path == str(tmp_path / "conf" / security.SECRET_FILE_NAME)
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert security.generate_secret_file() == (path, False)   # never overwritten
    server = envs("server", {"spark.authenticate": "true"})  # found at the default path
    server.setup_endpoint("rec", Recorder())
    client = envs("client", {"spark.authenticate": "true",
                             "spark.authenticate.secret.file": path}, client_mode=True)
    assert client.endpoint_ref(server.address, "rec").ask_sync(RtEcho(1), timeout=10) == 1


def test_open_files_limit_is_raised():
    import resource
    security.raise_open_files_limit()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert soft == hard or hard == resource.RLIM_INFINITY


# -- local-user admission (the default on loopback) ----------------------------------------

@needs_root
def test_default_env_refuses_another_users_connection_before_reading_it(envs, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    server = envs("server", {})
    rec = Recorder()
    server.setup_endpoint("rec", rec)
    hello = framing.hello_frame(None, "x", "x")
    port = server.address.port
    seen = as_other_user(lambda: raw_exchange(port, hello + b"\0" * 64))
    assert seen["bytes"] == 0 and seen["closed"]          # not even a greeting
    assert "belongs to uid 65534" in caplog.text
    # a same-user client is served
    client = envs("client", {}, client_mode=True)
    assert client.endpoint_ref(server.address, "rec").ask_sync(RtEcho(2), timeout=10) == 2


@needs_root
def test_default_client_refuses_a_server_run_by_another_user(envs):
    # the impostor listens as uid 65534 in a child; the parent learns its port via a pipe
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.setgid(65534)
        os.setuid(65534)
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(4)
        os.write(w, struct.pack(">H", s.getsockname()[1]))
        conn, _ = s.accept()
        conn.sendall(framing.greeting(False, bytes(32)))
        time.sleep(3)
        os._exit(0)
    os.close(w)
    port = struct.unpack(">H", os.read(r, 2))[0]
    os.close(r)
    try:
        client = envs("client", {}, client_mode=True)
        with pytest.raises(RpcAuthenticationError, match="belongs to uid 65534"):
            client.endpoint_ref(f"spark://127.0.0.1:{port}", "rec").ask_sync(RtEcho(1), timeout=5)
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)


# -- application credentials ---------------------------------------------------------------

class _Daemonish(RpcEndpoint):
    """Takes only RtEcho from applications (like the master's APP_MESSAGES)."""
    app_messages = (RtEcho,)

    def receive_and_reply(self, msg, context):
        context.reply((type(msg).__name__, context.sender.scope))


def test_application_credentials_identify_and_confine_their_holder(envs):
    daemon = envs("daemon", auth())
    daemon.admit_app_scopes(any_scope=True)
    daemon.setup_endpoint("d", _Daemonish())
    cred_a = app_credential(SECRET.encode(), "app-a")
    assert SECRET not in cred_a and cred_a.startswith(security.APP_CREDENTIAL_PREFIX)
    app_a = envs("app-a", auth(cred_a))
    app_a.setup_endpoint("rec", Recorder())
    app_b = envs("app-b", auth(app_credential(SECRET.encode(), "app-b")), client_mode=True)
    # the daemon sees who it is talking to; application connections are confined
    assert app_a.endpoint_ref(daemon.address, "d").ask_sync(RtEcho(1), timeout=10) == \
        ["RtEcho", "app-a"]
    from test_rpc import RtSeq
    with pytest.raises(RpcRemoteError, match="takes it only from the cluster's daemons"):
        app_a.endpoint_ref(daemon.address, "d").ask_sync(RtSeq(1), timeout=10)
    # the cluster reaches the application (deriving its key); another application cannot
    assert daemon.endpoint_ref(app_a.address, "rec").ask_sync(RtEcho(3), timeout=10) == 3
    with pytest.raises(RpcAuthenticationError, match="belongs to application 'app-a'"):
        app_b.endpoint_ref(app_a.address, "rec").ask_sync(RtEcho(4), timeout=10)
    # a credential cannot be widened to another application
    with pytest.raises(ValueError):
        app_credential(cred_a.encode(), "app-b")
    # a cluster-secret env that did not admit a scope refuses it
    plain_daemon = envs("plain", auth())
    plain_daemon.setup_endpoint("rec", Recorder())
    with pytest.raises(RpcAuthenticationError):
        app_a.endpoint_ref(plain_daemon.address, "rec").ask_sync(RtEcho(5), timeout=10)
    plain_daemon.admit_app_scopes("app-a")
    assert app_a.endpoint_ref(plain_daemon.address, "rec").ask_sync(RtEcho(6), timeout=10) == 6


# -- integrity and encryption --------------------------------------------------------------

class _Proxy:
    """A TCP proxy on 127.0.0.1 that records both directions and can flip a byte of the
    client's stream after the handshake (an on-path attacker)."""

    def __init__(self, target: int, tamper_after: int | None = None) -> None:
        self.target = target
        self.tamper_after = tamper_after
        self.seen = bytearray()
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            u = socket.create_connection(("127.0.0.1", self.target))
            threading.Thread(target=self._pipe, args=(c, u, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(u, c, False), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        sent = 0
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for s in (src, dst):
                    try:
                        s.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                return
            self.seen += data
            if upstream and self.tamper_after is not None and sent + len(data) > self.tamper_after:
                i = max(0, self.tamper_after - sent)
                data = data[:i] + bytes([data[i] ^ 0x01]) + data[i + 1:]
                self.tamper_after = None
            sent += len(data)
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()


def _client_via(envs, proxy: _Proxy, conf: dict) -> object:
    c = envs("via-proxy", conf, client_mode=True)
    return c.endpoint_ref(f"spark://127.0.0.1:{proxy.port}", "rec")


@pytest.mark.parametrize("crypto", ["false", "true"])
def test_a_flipped_bit_after_the_handshake_closes_the_connection(envs, caplog, crypto):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    conf = auth(**{security.CRYPTO_ENABLED: crypto})
    server = envs("server", conf)
    rec = Recorder()
    server.setup_endpoint("rec", rec)
    handshake = framing.CLIENT_AUTH_LEN + 1 + 80     # client auth + its hello, roughly
    proxy = _Proxy(server.address.port, tamper_after=handshake + 40)
    ref = _client_via(envs, proxy, conf)
    with pytest.raises(Exception):
        ref.ask_sync(RtEcho("x" * 200), timeout=5)
    assert "tampered, replayed or reordered" in caplog.text
    assert not any(isinstance(m, RtEcho) for m in rec.seen)
    proxy.close()


def test_crypto_hides_the_payload_that_mac_only_shows(envs):
    marker = "MARKER-" + os.urandom(8).hex()
    for crypto, visible in (("false", True), ("true", False)):
        conf = auth(**{security.CRYPTO_ENABLED: crypto})
        server = envs(f"server-{crypto}", conf)
        server.setup_endpoint("rec", Recorder())
        proxy = _Proxy(server.address.port)
        ref = _client_via(envs, proxy, conf)
        assert ref.ask_sync(RtEcho(marker), timeout=10) == marker
        assert (marker.encode() in bytes(proxy.seen)) is visible
        proxy.close()


# -- bounds on strangers -------------------------------------------------------------------

def test_half_open_handshakes_are_capped_and_clients_still_served(envs):
    server = envs("server", auth(**{"spark.ember.rpc.maxPendingConnections": "16",
                                    "spark.ember.rpc.handshakeTimeout": "30s"}))
    server.setup_endpoint("rec", Recorder())
    me = psutil.Process()
    before = me.num_fds()
    socks = []
    for _ in range(150):
        s = socket.create_connection(("127.0.0.1", server.address.port), timeout=5)
        socks.append(s)
    client = envs("client", auth(), client_mode=True)
    assert client.endpoint_ref(server.address, "rec").ask_sync(RtEcho(7), timeout=10) == 7
    deadline = time.monotonic() + 10
    while len(server._transport.pending) > 16 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(server._transport.pending) <= 16
    # our 150 client sockets stay open; the server side holds at most the cap of them
    # (+ the real client's connection and some slack for the env's own descriptors)
    server_side = me.num_fds() - before - len(socks)
    assert server_side <= 16 + 10, server_side
    for s in socks:
        s.close()


def test_a_peer_cannot_talk_before_proving_itself(envs, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    server = envs("server", auth())
    server.setup_endpoint("rec", Recorder())
    seen = raw_exchange(server.address.port, b"\0" * (1 << 20))
    assert seen["closed"] and seen["bytes"] == framing.GREETING_LEN + 1   # greeting, scope
    assert "Authentication failed for connection from 127.0.0.1" in caplog.text


def test_a_parked_partial_frame_is_bounded_by_the_budget_and_released(envs):
    server = envs("server", {"spark.ember.rpc.inboundBufferBudget": "1",     # 1 MiB
                             "spark.ember.rpc.stalledFrameTimeout": "3s"})
    server.setup_endpoint("rec", Recorder())
    s = socket.create_connection(("127.0.0.1", server.address.port), timeout=5)
    assert len(s.recv(framing.GREETING_LEN)) == framing.GREETING_LEN
    s.sendall(framing.hello_frame(None, "parker", "parker"))
    s.sendall(struct.pack(">IB", 100 << 20, framing.ONE_WAY))   # announces 100 MiB
    s.setblocking(False)
    chunk = b"\0" * 65536
    sent = 0
    deadline = time.monotonic() + 10
    stalled_since = None
    while time.monotonic() < deadline and sent < (60 << 20):
        try:
            sent += s.send(chunk)
            stalled_since = None
        except BlockingIOError:
            stalled_since = stalled_since or time.monotonic()
            if time.monotonic() - stalled_since > 1.5:
                break
            time.sleep(0.01)
    assert sent < (60 << 20), "the server never pushed back"
    held = tcp._BUDGET.held
    assert held <= (1 << 20) + (2 << 20), held    # the budget, plus a read or two
    deadline = time.monotonic() + 10        # paused past the timeout: closed, bytes returned
    while tcp._BUDGET.held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tcp._BUDGET.held == 0
    s.close()


def _environ(p: psutil.Process) -> dict:
    try:
        return p.environ()
    except psutil.Error:
        return {}


def test_io_encryption_seals_shuffle_files(tmp_path):
    """spark.io.encryption.enabled: a job's shuffle files hold none of its records in
    clear (they do without it); a wrong key is refused, not misread."""
    from ember import SparkConf, SparkContext
    from tests.cluster import LocalCluster
    mark = "SHUFFLED-" + os.urandom(6).hex()
    seen = {}
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=2) as cluster:
        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
        for enabled in ("false", "true"):
            sc = SparkContext(conf=SparkConf().setMaster(cluster.url).setAppName("io-enc")
                              .set("spark.io.encryption.enabled", enabled))
            try:
                # distinct values: each map output is over INLINE_BYTES, so it goes to a file
                # `grouped` held: the context cleaner deletes an unreachable shuffle's files
                grouped = sc.parallelize([(i % 5, f"{mark}{i}") for i in range(500)], 4) \
                    .groupByKey()
                counts = dict(grouped.mapValues(len).collect())
                assert counts == {k: 100 for k in range(5)}
                roots = {d for p in cluster.all_processes()
                         for d in _environ(p).get("SPARK_EXECUTOR_DIRS", "").split(os.pathsep)
                         if d}
                files = [os.path.join(d, f) for r in roots for d, _, fs in os.walk(r)
                         for f in fs if f.endswith(".data") and f.startswith("shuffle_")]
                assert files, "no shuffle files found"
                seen[enabled] = any(mark.encode() in open(p, "rb").read() for p in files)
            finally:
                sc.stop()
    assert seen == {"false": True, "true": False}
    from ember.shuffle.crypto import Sealer
    sealed = Sealer(b"k" * 32).seal(__import__("pickle").dumps([1, 2]))
    assert list(Sealer(b"k" * 32).batches_from_bytes(sealed)) == [[1, 2]]
    with pytest.raises(ValueError, match="does not decrypt"):
        list(Sealer(b"x" * 32).batches_from_bytes(sealed))


def test_a_flood_of_refused_peers_is_not_logged_line_by_line(envs, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    server = envs("server", auth())
    for _ in range(40):
        raw_exchange(server.address.port, b"\0" * 200, wait=0.2)
    deadline = time.monotonic() + 10
    while caplog.text.count("Authentication failed") < 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    assert caplog.text.count("Authentication failed for connection from") == 20


def test_io_encryption_in_local_mode(tmp_path):
    from ember import SparkConf, SparkContext
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    mark = "LOCALSHUFFLE-" + os.urandom(6).hex()
    sc = SparkContext(conf=SparkConf().setMaster("local[2]").setAppName("io-local")
                      .set("spark.io.encryption.enabled", "true")
                      .set("spark.local.dir", str(tmp_path)))
    try:
        grouped = sc.parallelize([(i % 3, f"{mark}{i}") for i in range(300)], 3).groupByKey()
        counts = dict(grouped.mapValues(len).collect())    # `grouped` keeps the shuffle files
        assert counts == {0: 100, 1: 100, 2: 100}
        files = [os.path.join(d, f) for d, _, fs in os.walk(sc.runtime.local_dir) for f in fs
                 if f.startswith("shuffle_") and f.endswith(".data")]
        assert files
        assert not any(mark.encode() in open(p, "rb").read() for p in files)
    finally:
        sc.stop()


def test_io_encryption_with_the_applications_serializer(tmp_path):
    """spark.io.encryption.enabled seals the batches SparkContext(serializer=) makes: the
    shuffle still round-trips, and the files hold no record in the clear."""
    from ember import SparkConf, SparkContext
    from ember.serializers import MarshalSerializer
    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    mark = "MARSHALSHUFFLE-" + os.urandom(6).hex()
    sc = SparkContext(conf=SparkConf().setMaster("local[2]").setAppName("io-marshal")
                      .set("spark.io.encryption.enabled", "true")
                      .set("spark.local.dir", str(tmp_path)),
                      serializer=MarshalSerializer(), batchSize=5)
    try:
        grouped = sc.parallelize([(i % 3, f"{mark}{i}") for i in range(300)], 3).groupByKey()
        counts = dict(grouped.mapValues(len).collect())    # `grouped` keeps the shuffle files
        assert counts == {0: 100, 1: 100, 2: 100}
        files = [os.path.join(d, f) for d, _, fs in os.walk(sc.runtime.local_dir) for f in fs
                 if f.startswith("shuffle_") and f.endswith(".data")]
        assert files
        assert not any(mark.encode() in open(p, "rb").read() for p in files)
    finally:
        sc.stop()


def test_generate_secret_cluster_end_to_end(tmp_path):
    """`ember master --generate-secret` creates the 0600 secret, says how to use it, and
    authenticates; a worker on this machine finds it with just spark.authenticate=true;
    a peer without it is refused."""
    import subprocess
    import sys
    from ember.deploy.local_cluster import _env, free_port
    from ember.deploy.messages import RequestMasterState
    env = _env({"SPARK_CONF_DIR": str(tmp_path / "conf")})
    port = free_port()
    procs = []
    try:
        master = subprocess.Popen(
            [sys.executable, "-m", "ember.cli", "master", "--generate-secret", "--host",
             "127.0.0.1", "--port", str(port), "--webui-port", "0", "--conf",
             "spark.master.rest.enabled=false"], env=env, stderr=subprocess.PIPE, text=True)
        procs.append(master)
        first = master.stderr.readline()
        secret = tmp_path / "conf" / security.SECRET_FILE_NAME
        assert str(secret) in first and "spark.authenticate=true" in first
        assert os.stat(secret).st_mode & 0o777 == 0o600
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "ember.cli", "worker", "--host", "127.0.0.1", "--webui-port",
             "0", "-c", "1", "-m", "256m", "-d", str(tmp_path / "work"), "--conf",
             "spark.authenticate=true", f"spark://127.0.0.1:{port}"], env=env,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        client = RpcEnv.create("c", "127.0.0.1", 0, {"spark.authenticate": "true",
                                                     "spark.authenticate.secret.file":
                                                     str(secret)}, client_mode=True)
        try:
            ref = client.endpoint_ref(f"spark://127.0.0.1:{port}", "Master")
            deadline = time.monotonic() + 60
            workers = []
            while time.monotonic() < deadline and not workers:
                try:
                    workers = ref.ask_sync(RequestMasterState(), timeout=10).workers
                except Exception:
                    pass
                time.sleep(0.3)
            assert len(workers) == 1
        finally:
            client.shutdown()
        stranger = RpcEnv.create("s", "127.0.0.1", 0, {"spark.rpc.connect.timeout": "5s"},
                                 client_mode=True)
        try:
            with pytest.raises(RpcAuthenticationError, match="requires authentication"):
                stranger.endpoint_ref(f"spark://127.0.0.1:{port}", "Master").ask_sync(
                    RequestMasterState(), timeout=10)
        finally:
            stranger.shutdown()
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)
