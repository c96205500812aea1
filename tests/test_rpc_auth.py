"""Authentication of RpcEnv connections (spark.authenticate): the challenge-response
handshake, refusal of peers without the secret, and that nothing from an unauthenticated
peer is ever decoded (let alone unpickled)."""
from __future__ import annotations

import logging
import os
import pickle
import socket
import struct
import threading
import time

import msgpack
import pytest

from ember.rpc import (RpcAuthenticationError, RpcConnectionError, RpcEnv, encode, framing,
                       messages)
from ember.rpc import env as env_module
from test_rpc import Recorder, RtEcho, RtSeq, _closed_by_peer, _frame, _raw_connect

SECRET = "s3cret-shared-by-both-sides-of-these-tests"


def auth_conf(secret: str | None = SECRET, **extra: str) -> dict[str, str]:
    c = {"spark.authenticate": "true", "spark.rpc.connect.timeout": "2s"}
    if secret is not None:
        c["spark.authenticate.secret"] = secret
    c.update(extra)
    return c


@pytest.fixture
def envs():
    made: list[RpcEnv] = []

    def make(name: str, conf: dict, client_mode: bool = False, inprocess: bool = False) -> RpcEnv:
        c = dict(conf)
        if inprocess:
            c["spark.ember.rpc.inprocess"] = "true"
        env = RpcEnv.create(name, "127.0.0.1", 0, c, client_mode=client_mode)
        made.append(env)
        return env

    yield make
    for env in made:
        env.shutdown()


class _Evil:
    """Unpickling this would run code; the server must never get that far."""

    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_unauthenticated_raw_peers_refused_nothing_decoded(envs, caplog, monkeypatch):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    server = envs("server", auth_conf())
    server.setup_endpoint("rec", Recorder())

    decoded: list[str] = []

    def forbidden(name):
        def f(*a, **k):
            decoded.append(name)
            raise AssertionError(f"{name} called on data from an unauthenticated peer")
        return f

    class NoUnpickler:
        def __init__(self, *a, **k):
            decoded.append("pickle.Unpickler")
            raise AssertionError("pickle.Unpickler used")

    monkeypatch.setattr(pickle, "loads", forbidden("pickle.loads"))
    monkeypatch.setattr(pickle, "load", forbidden("pickle.load"))
    monkeypatch.setattr(pickle, "Unpickler", NoUnpickler)
    real_unpackb = msgpack.unpackb
    monkeypatch.setattr(msgpack, "unpackb", forbidden("msgpack.unpackb"))
    monkeypatch.setattr(messages, "_decode_with", forbidden("messages._decode_with"))
    monkeypatch.setattr(env_module, "_decode_with", forbidden("env._decode_with"))
    monkeypatch.setattr(framing, "parse_hello", forbidden("framing.parse_hello"))

    payload = pickle.dumps(_Evil())
    # 1. the greeting asks for a proof; a pickled payload instead of it is refused
    s, greeting = _raw_connect(server)
    auth_required, nonce = framing.parse_greeting(greeting)
    assert auth_required and nonce != bytes(32)
    s.sendall(payload + b"\x00" * 64)
    assert _closed_by_peer(s)
    s.close()
    # 2. garbage without even reading the greeting
    s = socket.create_connection((server.address.host, server.address.port), timeout=5)
    s.sendall(os.urandom(200))
    assert _closed_by_peer(s)
    s.close()
    # 3. a well-formed hello and message frame, but no proof: framing is not bypassable
    s, _ = _raw_connect(server)
    s.sendall(framing.hello_frame(None, "x", "x") + _frame(framing.ONE_WAY, b"\x00\x03rec"
                                                           + encode(RtSeq(1))) + b"\x00" * 64)
    assert _closed_by_peer(s)
    s.close()
    # 4. a peer that connects and says nothing is timed out (spark.rpc.connect.timeout)
    s, _ = _raw_connect(server)
    assert _closed_by_peer(s, timeout=5)
    s.close()

    assert decoded == []
    assert caplog.text.count("Authentication failed for connection from 127.0.0.1:") >= 4

    # the server keeps serving a client with the secret
    monkeypatch.undo()
    assert msgpack.unpackb is real_unpackb
    good = envs("good", auth_conf())
    assert good.endpoint_ref(server.address, "rec").ask_sync(RtEcho("ok"), timeout=5) == "ok"


def test_manual_handshake_matches_the_documented_protocol(envs):
    """A hand-written client that follows ember.rpc.tcp's docstring can talk to an env."""
    import hashlib
    import hmac
    server = envs("server", auth_conf())
    server.setup_endpoint("rec", Recorder())
    s, greeting = _raw_connect(server)
    auth, snonce = framing.parse_greeting(greeting)
    assert auth and greeting[5] == framing.FLAG_AUTH
    assert s.recv(1) == b"\x00"                       # server scope: "" (the cluster)
    cnonce = os.urandom(32)
    transcript = (b"ember-rpc-v2" + snonce + cnonce + bytes([greeting[5], 0])
                  + b"\x00" + b"\x00")
    key = SECRET.encode()
    s.sendall(hmac.new(key, b"client" + transcript, hashlib.sha256).digest() + cnonce
              + b"\x00" + b"\x00")                      # flags, client scope ""
    proof = b""
    while len(proof) < 32:
        proof += s.recv(32 - len(proof))
    assert proof == hmac.new(key, b"server" + transcript, hashlib.sha256).digest()
    c2s, s2c, _, _ = framing.session_keys(key, transcript)
    seq = {"out": 0, "in": 0}

    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    def gmac(key: bytes, n: int, data: bytes) -> bytes:   # AES-GCM, empty plaintext
        return AESGCM(key).encrypt(b"\0" * 4 + struct.pack(">Q", n), b"", data)

    def sealed(content: bytes) -> bytes:
        prefix = struct.pack(">I", len(content) + 16)
        tag = gmac(c2s, seq["out"], prefix + content)
        seq["out"] += 1
        return prefix + content + tag

    # after the handshake: records of whole frames, each with its MAC
    s.sendall(sealed(framing.hello_frame(None, "manual", "manual")))
    body = encode(RtEcho("hand made"))
    s.sendall(sealed(_frame(framing.REQUEST, struct.pack(">QH", 42, 3) + b"rec" + body)))
    head = b""
    while len(head) < 4:
        head += s.recv(4 - len(head))
    (length,) = struct.unpack(">I", head)
    data = b""
    while len(data) < length:
        data += s.recv(length - len(data))
    assert data[-16:] == gmac(s2c, 0, head + data[:-16])
    assert struct.unpack(">I", data[:4])[0] == length - 16 - 4 and data[4] == framing.RESPONSE
    req_id, ok, reply = framing.parse_response(data[5:-16])
    assert (req_id, ok, msgpack.unpackb(reply, raw=False)) == (42, True, "hand made")
    s.close()


@pytest.mark.parametrize("inprocess", [False, True])
def test_wrong_secret_and_mismatched_settings_fail_cleanly(envs, caplog, inprocess):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    server = envs("server", auth_conf(), inprocess=inprocess)
    server.setup_endpoint("rec", Recorder())
    plain = envs("plain", {"spark.rpc.connect.timeout": "2s"}, inprocess=inprocess)
    plain.setup_endpoint("rec", Recorder())

    wrong = envs("wrong", auth_conf("not-the-secret-but-just-as-long-as-it"), inprocess=inprocess)
    start = time.monotonic()
    with pytest.raises(RpcAuthenticationError, match="Authentication failed"):
        wrong.endpoint_ref(server.address, "rec").ask_sync(RtEcho(1), timeout=5)
    assert "Authentication failed for connection from" in caplog.text
    # client without auth -> auth server; auth client -> server without auth
    with pytest.raises(RpcAuthenticationError, match="requires authentication"):
        plain.endpoint_ref(server.address, "rec").ask_sync(RtEcho(1), timeout=5)
    with pytest.raises(RpcAuthenticationError, match="does not authenticate"):
        wrong.endpoint_ref(plain.address, "rec").ask_sync(RtEcho(1), timeout=5)
    assert time.monotonic() - start < 4    # nothing waited for a timeout
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("requires authentication" in r.getMessage() for r in errors)
    assert any("does not authenticate" in r.getMessage() for r in errors)
    # sends never raise; the right secret works (secret from a file, client mode too)
    wrong.endpoint_ref(server.address, "rec").send(RtSeq(1))


def test_secret_file_and_client_mode(envs, tmp_path):
    path = tmp_path / "secret"
    path.write_text(SECRET + "\n")
    server = envs("server", auth_conf())
    rec = Recorder()
    server.setup_endpoint("rec", rec)
    client = envs("client", auth_conf(None, **{"spark.authenticate.secret.file": str(path)}),
                  client_mode=True)
    assert client.endpoint_ref(server.address, "rec").ask_sync(RtEcho(5), timeout=5) == 5
    # Spark hands the secret to child processes in _SPARK_AUTH_SECRET
    import unittest.mock
    with unittest.mock.patch.dict(os.environ, {"_SPARK_AUTH_SECRET": SECRET}):
        child = envs("child", auth_conf(None))
    assert child.endpoint_ref(server.address, "rec").ask_sync(RtEcho(6), timeout=5) == 6
    with pytest.raises(ValueError, match="Cannot read the secret file"):
        RpcEnv.create("x", "127.0.0.1", 0,
                      auth_conf(None, **{"spark.authenticate.secret.file": str(path) + ".no"}))


def test_client_verifies_the_server_too(envs, caplog):
    """A fake server that asks for a proof but cannot prove the secret itself."""
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    got: list[bytes] = []

    def fake_server() -> None:
        conn, _ = listener.accept()
        conn.sendall(framing.greeting(True, os.urandom(32)))
        got.append(conn.recv(66))
        conn.sendall(os.urandom(32))           # a proof made without the secret
        conn.settimeout(5)
        try:
            got.append(conn.recv(1024))        # the client must not send its hello
        except OSError:
            got.append(b"")
        conn.close()

    t = threading.Thread(target=fake_server, daemon=True)
    t.start()
    client = envs("client", auth_conf())
    port = listener.getsockname()[1]
    with pytest.raises(RpcAuthenticationError, match="could not prove the shared secret"):
        client.endpoint_ref(f"spark://127.0.0.1:{port}", "rec").ask_sync(RtEcho(1), timeout=5)
    t.join(10)
    listener.close()
    assert len(got[0]) == 66 and got[1] == b""


def test_silent_server_does_not_hang_the_client(envs):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)                         # accepts (kernel backlog) but never speaks
    try:
        client = envs("client", auth_conf(**{"spark.rpc.connect.timeout": "0.5s"}))
        port = listener.getsockname()[1]
        start = time.monotonic()
        with pytest.raises(RpcConnectionError, match="spark.rpc.connect.timeout"):
            client.endpoint_ref(f"spark://127.0.0.1:{port}", "rec").ask_sync(RtEcho(1),
                                                                               timeout=5)
        assert time.monotonic() - start < 3
    finally:
        listener.close()
