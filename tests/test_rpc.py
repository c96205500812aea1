"""Tests of ember.rpc: codec, addresses, RpcEnv over real sockets and the in-process
transport, two-process round trips, restarts, disconnects and bad input.

Run as a script (``python tests/test_rpc.py serve|bench``) it is also the peer process of the
two-process tests and the micro-benchmark.
"""
from __future__ import annotations

import concurrent.futures
import enum
import logging
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import msgpack
import pytest

from ember.rpc import (MessageDecodeError, RpcAddress, RpcCallContext, RpcConnectionError,
                       RpcEndpoint, RpcEndpointNotFoundError, RpcEndpointRef, RpcEnv, RpcError,
                       RpcMessageTooLargeError, RpcRemoteError, RpcTimeoutError,
                       create_inprocess_env, decode, encode, message)
from ember.rpc import framing

HERE = os.path.abspath(__file__)
BASE_CONF = {"spark.rpc.connect.timeout": "3s"}
# `test_rpc.py bench` with EMBER_BENCH_RPC_SECURITY=mac (spark.authenticate: per-frame MAC)
# or =gcm (spark.network.crypto.enabled: AES-GCM); unset: the default, no per-frame work.
_BENCH_SECURITY = {
    "mac": {"spark.authenticate": "true", "spark.authenticate.secret": "b" * 40},
    "gcm": {"spark.authenticate": "true", "spark.authenticate.secret": "b" * 40,
            "spark.network.crypto.enabled": "true"},
}


def _bench_conf() -> dict[str, str]:
    return {**BASE_CONF, **_BENCH_SECURITY.get(os.environ.get("EMBER_BENCH_RPC_SECURITY", ""), {})}


# ------------------------------------------------------------------------------------------
# Messages used by the tests (names prefixed: the registry is process-wide)
# ------------------------------------------------------------------------------------------

@message
class RtColor(enum.Enum):
    RED = "red"
    GREEN = "green"


@message
@dataclass(frozen=True)
class RtInner:
    label: str
    weight: float = 1.0


@message
@dataclass(frozen=True)
class RtOuter:
    id: int
    inner: RtInner
    items: list[RtInner]
    pairs: list[tuple[str, int]]
    by_id: dict[int, str]
    color: RtColor
    blob: bytes
    ref: Optional[RpcEndpointRef]
    addr: RpcAddress
    maybe: Optional[int] = None
    flag: bool = False
    tags: dict[str, list[str]] = field(default_factory=dict)


@message
@dataclass(frozen=True)
class RtSeq:
    n: int


@message
@dataclass(frozen=True)
class RtGet:
    pass


@message
@dataclass(frozen=True)
class RtEcho:
    payload: Any


@message
@dataclass(frozen=True)
class RtFail:
    text: str


@message
@dataclass(frozen=True)
class RtRaise:
    text: str


@message
@dataclass(frozen=True)
class RtSilent:
    pass


@message
@dataclass(frozen=True)
class RtAskSelfSync:
    pass


@message
@dataclass(frozen=True)
class RtRegister:
    ref: RpcEndpointRef


@message
@dataclass(frozen=True)
class RtWelcome:
    text: str


@message
@dataclass(frozen=True)
class RtHello:
    who: str
    ref: Optional[RpcEndpointRef] = None


@message
@dataclass(frozen=True)
class RtBlob:
    data: bytes


class Recorder(RpcEndpoint):
    """Records everything; answers asks per message type; checks one-at-a-time."""

    def __init__(self) -> None:
        self.seen: list[Any] = []
        self.senders: list[RpcAddress] = []
        self.events: "queue.Queue[tuple[str, Any]]" = queue.Queue()
        self.busy = False
        self.overlaps = 0
        self.threads: set[int] = set()
        self.registered: list[RpcEndpointRef] = []

    def _enter(self) -> None:
        if self.busy:
            self.overlaps += 1
        self.busy = True
        self.threads.add(threading.get_ident())

    def on_start(self) -> None:
        self.events.put(("start", None))

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self._enter()
        try:
            self.seen.append(msg)
            self.senders.append(sender)
            if isinstance(msg, RtRegister):
                self.registered.append(msg.ref)
                msg.ref.send(RtWelcome(f"hi {msg.ref.name}"))
            self.events.put(("msg", msg))
        finally:
            self.busy = False

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        self._enter()
        try:
            if isinstance(msg, RtGet):
                context.reply([m.n for m in self.seen if isinstance(m, RtSeq)])
            elif isinstance(msg, RtEcho):
                context.reply(msg.payload)
            elif isinstance(msg, RtFail):
                context.send_failure(KeyError(msg.text))
            elif isinstance(msg, RtRaise):
                raise ValueError(msg.text)
            elif isinstance(msg, RtSilent):
                pass  # never replies: the ask must time out
            elif isinstance(msg, RtAskSelfSync):
                context.reply(self.self_ref.ask_sync(RtEcho(1), timeout=1))
            elif isinstance(msg, RtRegister):
                self.registered.append(msg.ref)
                context.reply(str(context.sender_address))
            elif isinstance(msg, RtBlob):
                context.reply(len(msg.data))
            else:
                super().receive_and_reply(msg, context)
        finally:
            self.busy = False

    def on_connected(self, remote: RpcAddress) -> None:
        self.events.put(("connected", remote))

    def on_disconnected(self, remote: RpcAddress) -> None:
        self.events.put(("disconnected", remote))

    def on_network_error(self, cause: Exception, remote: RpcAddress) -> None:
        self.events.put(("network_error", remote))

    def on_stop(self) -> None:
        self.events.put(("stop", None))

    def wait_for(self, kind: str, value: Any = None, timeout: float = 10.0) -> Any:
        """Take the oldest event of `kind` (equal to `value`, if given), waiting for it;
        events of other kinds stay queued for later calls."""
        deadline = time.monotonic() + timeout
        with self.events.not_empty:
            while True:
                for i, (k, v) in enumerate(self.events.queue):
                    if k == kind and (value is None or v == value):
                        del self.events.queue[i]
                        return v
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no {kind} {value!r} event within {timeout}s")
                self.events.not_empty.wait(left)


def wait_until(pred, timeout: float = 10.0, interval: float = 0.01) -> None:
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        time.sleep(interval)


# ------------------------------------------------------------------------------------------
# Fixtures
# ------------------------------------------------------------------------------------------

@pytest.fixture
def envs():
    """Factory of RpcEnvs (TCP on 127.0.0.1 by default); all shut down after the test."""
    made: list[RpcEnv] = []

    def make(name: str = "env", conf: dict | None = None, client_mode: bool = False,
             inprocess: bool = False, port: int = 0) -> RpcEnv:
        c = dict(BASE_CONF)
        c.update(conf or {})
        if inprocess:
            c["spark.ember.rpc.inprocess"] = "true"
        env = RpcEnv.create(name, "127.0.0.1", port, c, client_mode=client_mode)
        made.append(env)
        return env

    yield make
    for env in made:
        env.shutdown()
    for env in made:
        env.await_termination(5)


@pytest.fixture(params=["tcp", "inprocess"])
def transport(request) -> str:
    return request.param


# ------------------------------------------------------------------------------------------
# Codec
# ------------------------------------------------------------------------------------------

def _sample(ref: RpcEndpointRef | None = None) -> RtOuter:
    return RtOuter(
        id=7, inner=RtInner("a", 2.5), items=[RtInner("b"), RtInner("c", 0.5)],
        pairs=[("x", 1), ("y", 2)], by_id={1: "one", 2: "two"}, color=RtColor.GREEN,
        blob=b"\x00\x80\xffpickle?", ref=ref, addr=RpcAddress("h", 7077), maybe=None,
        flag=True, tags={"k": ["v1", "v2"]})


def test_codec_round_trip_nested_enums_refs_bytes():
    ref = RpcEndpointRef(RpcAddress("10.0.0.1", 7077), "Master")
    msg = _sample(ref)
    data = encode(msg)
    assert isinstance(data, bytes)
    out = decode(data)
    assert out == msg
    assert isinstance(out.pairs[0], tuple) and out.color is RtColor.GREEN
    assert out.ref == ref and out.ref.url == "spark://Master@10.0.0.1:7077"
    # the wire shape documented in ember.rpc.messages
    raw = msgpack.unpackb(data, raw=False, strict_map_key=False)
    assert raw["__m__"] == "RtOuter" and raw["color"] == {"__enum__": ["RtColor", "GREEN"]}
    assert raw["ref"] == {"__ref__": ["10.0.0.1", 7077, "Master"]}
    assert raw["addr"] == {"__addr__": ["h", 7077]}
    assert raw["blob"] == b"\x00\x80\xffpickle?"      # msgpack bin, opaque
    # plain values too
    assert decode(encode([1, "a", None, True, 2.5, b"x", {"k": (1, 2)}])) == \
        [1, "a", None, True, 2.5, b"x", {"k": [1, 2]}]


def test_codec_binds_refs_to_receiving_env(envs):
    env = envs("codec", inprocess=True)
    ref = RpcEndpointRef(RpcAddress("h", 1), "W")
    out = decode(encode(RtRegister(ref)), env)
    assert out.ref == ref and out.ref._env is env
    with pytest.raises(RuntimeError, match="not bound"):
        decode(encode(RtRegister(ref))).ref.send(RtSeq(1))


def test_codec_rejects_wrong_types_and_unknown_names():
    good = msgpack.unpackb(encode(_sample()), raw=False, strict_map_key=False)

    def bad(**changes: Any) -> bytes:
        d = dict(good)
        d.update(changes)
        return msgpack.packb(d, use_bin_type=True)

    with pytest.raises(MessageDecodeError, match=r"RtOuter\.id: expected int, got str"):
        decode(bad(id="7"))
    with pytest.raises(MessageDecodeError, match=r"RtOuter\.blob: expected bytes"):
        decode(bad(blob="text"))
    with pytest.raises(MessageDecodeError, match=r"RtOuter\.items.*expected RtInner"):
        decode(bad(items=[{"label": "no tag"}]))
    with pytest.raises(MessageDecodeError, match=r"RtOuter\.maybe"):
        decode(bad(maybe=1.5))
    with pytest.raises(MessageDecodeError, match=r"RtOuter\.flag: expected bool"):
        decode(bad(flag=1))
    with pytest.raises(MessageDecodeError, match=r"RtOuter\.by_id"):
        decode(bad(by_id={"1": "one"}))
    with pytest.raises(MessageDecodeError, match="has no field 'extra'"):
        decode(bad(extra=1))
    d = dict(good)
    del d["inner"]
    with pytest.raises(MessageDecodeError, match="missing field.*inner"):
        decode(msgpack.packb(d, use_bin_type=True))
    with pytest.raises(MessageDecodeError, match="Unknown message type 'os.system'"):
        decode(msgpack.packb({"__m__": "os.system", "x": 1}))
    with pytest.raises(MessageDecodeError, match="RtColor has no member"):
        decode(msgpack.packb({"__enum__": ["RtColor", "BLUE"]}))
    with pytest.raises(MessageDecodeError, match="Malformed message"):
        decode(b"\xc1garbage")
    import pickle
    with pytest.raises(MessageDecodeError):
        decode(pickle.dumps(RtSeq(1)))
    # int where float is annotated is fine (and becomes a float); defaults fill missing
    out = decode(msgpack.packb({"__m__": "RtInner", "label": "z", "weight": 3}))
    assert out == RtInner("z", 3.0) and type(out.weight) is float
    assert decode(msgpack.packb({"__m__": "RtInner", "label": "z"})) == RtInner("z")


def test_codec_encode_errors_and_registration():
    @dataclass(frozen=True)
    class NotRegistered:
        x: int

    with pytest.raises(TypeError, match="register the dataclass with @message"):
        encode(RtEcho(NotRegistered(1)))
    with pytest.raises(TypeError, match="Cannot encode"):
        encode(RtEcho(lambda: 1))
    with pytest.raises(TypeError, match="must be a @dataclass"):
        message(type("Plain", (), {}))
    with pytest.raises(ValueError, match="already registered"):
        @message
        @dataclass(frozen=True)
        class RtSeq:  # noqa: F811 - a clash with the module-level RtSeq on purpose
            n: int


def test_rpc_address_parsing():
    a = RpcAddress.from_spark_url("spark://h:7077")
    assert a == RpcAddress("h", 7077) and a.host_port == "h:7077" and str(a) == "h:7077"
    assert a.to_spark_url() == "spark://h:7077"
    assert RpcAddress.from_spark_url("spark://[::1]:7077") == RpcAddress("::1", 7077)
    assert RpcAddress("::1", 1).to_spark_url() == "spark://[::1]:1"
    for url in ["http://h:7077", "spark://h", "spark://:7077", "spark://h:7077/x",
                "spark://h:7077?a=b", "spark://u@h:7077", "spark://h:port", "h:7077",
                "spark://h1:7077,h2:7077"]:
        with pytest.raises(ValueError, match=re.escape(f"Invalid master URL: {url}")):
            RpcAddress.from_spark_url(url)
    ref = RpcEndpointRef(a, "Master")
    assert repr(ref) == "NettyRpcEndpointRef(spark://Master@h:7077)"
    assert ref == RpcEndpointRef(RpcAddress("h", 7077), "Master") and len({ref, ref}) == 1


def test_frame_reader_limits_before_body():
    r = framing.FrameReader(limit=100)
    r.feed(struct.pack(">IB", 5, framing.ONE_WAY) + b"ab")
    assert r.next_frame() is None               # incomplete
    r.feed(b"cd")
    assert r.next_frame() == (framing.ONE_WAY, b"abcd")
    r.feed(struct.pack(">I", 1 << 30))          # only the header of a 1 GB frame
    with pytest.raises(framing.FrameTooLargeError):
        r.next_frame()


def test_conf_validation():
    with pytest.raises(ValueError, match=r"A secret key must be specified via the "
                                         r"spark\.authenticate\.secret config\."):
        RpcEnv.create("x", "127.0.0.1", 0, {"spark.authenticate": "true"})
    with pytest.raises(ValueError, match="spark.rpc.askTimeout"):
        RpcEnv.create("x", "127.0.0.1", 0, {"spark.rpc.askTimeout": "soon"})


# ------------------------------------------------------------------------------------------
# RpcEnv behaviour, on both transports
# ------------------------------------------------------------------------------------------

def test_send_and_ask_round_trip(envs, transport):
    inproc = transport == "inprocess"
    a, b = envs("a", inprocess=inproc), envs("b", inprocess=inproc)
    rec_a, rec_b = Recorder(), Recorder()
    a.setup_endpoint("rec", rec_a)
    b_ref_in_b = b.setup_endpoint("rec", rec_b)
    ref = b.endpoint_ref(a.address.to_spark_url(), "rec")

    payload = _sample(b_ref_in_b)
    assert ref.ask(RtEcho(payload)).result(5) == payload
    assert ref.ask_sync(RtEcho(b"\x00" * 1000), timeout=5) == b"\x00" * 1000
    # a message carrying a ref: the receiver can answer through it
    ref.send(RtRegister(b_ref_in_b))
    assert rec_b.wait_for("msg").text == "hi rec"
    assert rec_b.senders[-1] == a.address and rec_a.senders[-1] == b.address
    assert rec_a.registered[0]._env is a
    # verified refs
    assert b.setup_endpoint_ref_sync(a.address, "rec") == ref
    with pytest.raises(RpcEndpointNotFoundError,
                       match=f"Cannot find endpoint: spark://nope@127.0.0.1:{a.address.port}"):
        b.setup_endpoint_ref_sync(a.address, "nope", timeout=5)
    # local refs go through the same API
    assert a.endpoint_ref(a.address, "rec").ask_sync(RtEcho(3)) == 3
    assert rec_a.wait_for("connected") == b.address


@message
@dataclass(frozen=True)
class RtSendThenRaise:
    n: int
    fail: bool


class SendsThenRaises(RpcEndpoint):
    """Sends to a remote and a local endpoint, asks the remote one, answers its own ask -
    then raises if told to: none of that may leave the env."""

    def __init__(self, remote: RpcEndpointRef, local: RpcEndpointRef) -> None:
        self.remote, self.local = remote, local
        self.asked: list[concurrent.futures.Future] = []

    def _act(self, msg: RtSendThenRaise) -> None:
        self.remote.send(RtSeq(msg.n))
        self.local.send(RtSeq(msg.n))
        self.asked.append(self.remote.ask(RtRegister(self.self_ref)))

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self._act(msg)
        if msg.fail:
            raise RuntimeError(f"half-way {msg.n}")

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        self._act(msg)
        context.reply("done")
        if msg.fail:
            raise RuntimeError(f"half-way {msg.n}")


def test_a_callback_that_raises_sends_nothing_but_its_failure(envs, transport, caplog):
    inproc = transport == "inprocess"
    a, b = envs("a", inprocess=inproc), envs("b", inprocess=inproc)
    remote, local = Recorder(), Recorder()
    remote_ref = b.setup_endpoint("remote", remote)
    local_ref = a.setup_endpoint("local", local)
    fickle = SendsThenRaises(a.endpoint_ref(b.address, "remote"), local_ref)
    a.setup_endpoint("fickle", fickle)
    ref = b.endpoint_ref(a.address, "fickle")

    # an ask: its reply ("done", issued before the raise) is withdrawn for the failure
    with pytest.raises(RpcRemoteError) as ei:
        ref.ask_sync(RtSendThenRaise(1, fail=True), timeout=10)
    assert ei.value.remote_type == "RuntimeError" and ei.value.remote_message == "half-way 1"
    # a one-way message
    ref.send(RtSendThenRaise(2, fail=True))
    # then one that succeeds: everything it issued goes out, in order
    assert ref.ask_sync(RtSendThenRaise(3, fail=False), timeout=10) == "done"
    assert remote.wait_for("msg") == RtSeq(3) and local.wait_for("msg") == RtSeq(3)
    assert fickle.asked[2].result(10) == str(a.address)
    # messages from one sender keep their order: had 1 or 2 gone out, they would be first
    assert remote.seen == [RtSeq(3)] and local.seen == [RtSeq(3)]
    assert remote.registered == [a.endpoint_ref(a.address, "fickle")]
    for dropped in fickle.asked[:2]:
        with pytest.raises(RpcError, match="not sent: the callback that made it raised "
                                           "RuntimeError: half-way"):
            dropped.result(10)
    assert any("Dropped 2 message(s) and 2 ask(s)/reply(s)" in r.getMessage()
               for r in caplog.records)
    assert remote_ref.ask_sync(RtGet(), timeout=10) == [3]


def test_ask_timeout_remote_failure_unknown_endpoint(envs, transport):
    inproc = transport == "inprocess"
    a, b = envs("a", inprocess=inproc), envs("b", inprocess=inproc)
    a.setup_endpoint("rec", Recorder())
    ref = b.endpoint_ref(a.address, "rec")
    start = time.monotonic()
    with pytest.raises(RpcTimeoutError) as ei:
        ref.ask(RtSilent(), timeout=0.3).result(5)
    assert 0.25 < time.monotonic() - start < 3
    assert str(ei.value) == (f"Cannot receive any reply from 127.0.0.1:{a.address.port} in 0.3 "
                             "seconds. This timeout is controlled by spark.rpc.askTimeout")
    assert isinstance(ei.value, TimeoutError)
    with pytest.raises(RpcRemoteError) as ei2:
        ref.ask_sync(RtFail("boom"))
    assert ei2.value.remote_type == "KeyError" and "boom" in str(ei2.value)
    with pytest.raises(RpcRemoteError, match="ValueError: kaput"):
        ref.ask_sync(RtRaise("kaput"))
    with pytest.raises(RpcRemoteError, match=r"Could not find Nobody\."):
        b.endpoint_ref(a.address, "Nobody").ask_sync(RtEcho(1), timeout=5)
    with pytest.raises(RpcRemoteError, match="UnsupportedMessageError: Unsupported message RtWelcome"):
        ref.ask_sync(RtWelcome("not handled"))
    # ask_sync from the loop thread is refused instead of deadlocking
    with pytest.raises(RpcRemoteError, match="RuntimeError: .*deadlock"):
        ref.ask_sync(RtAskSelfSync(), timeout=5)
    # the env still serves after all that
    assert ref.ask_sync(RtEcho("still here")) == "still here"


def test_ordering_of_1000_sends_and_one_at_a_time(envs, transport):
    inproc = transport == "inprocess"
    a, b = envs("a", inprocess=inproc), envs("b", inprocess=inproc)
    rec = Recorder()
    a.setup_endpoint("rec", rec)
    ref = b.endpoint_ref(a.address, "rec")
    for i in range(1000):
        ref.send(RtSeq(i))
    assert ref.ask_sync(RtGet(), timeout=10) == list(range(1000))

    # several threads at once: each one's order is kept, the endpoint never runs twice at once
    def blast(base: int) -> None:
        for i in range(200):
            ref.send(RtSeq(base + i))
            if i % 50 == 0:
                ref.ask(RtEcho(i))
    threads = [threading.Thread(target=blast, args=(k * 10_000,)) for k in range(1, 5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = ref.ask_sync(RtGet(), timeout=10)
    for k in range(1, 5):
        mine = [n for n in got if k * 10_000 <= n < (k + 1) * 10_000]
        assert mine == list(range(k * 10_000, k * 10_000 + 200))
    assert rec.overlaps == 0 and len(rec.threads) == 1


class Relay(RpcEndpoint):
    """Forwards each RtSeq(n) as n (from its callback: held, then scheduled) and n + 1
    (from a plain function on the loop, issued after n's release was scheduled)."""

    def __init__(self, target: RpcEndpointRef) -> None:
        self.target = target

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self.rpc_env.call_soon(self.target.send, RtSeq(msg.n + 1))
        self.target.send(RtSeq(msg.n))


def test_a_send_written_at_once_never_overtakes_one_issued_before_it(envs, transport):
    """A remote send issued on the loop outside an endpoint callback goes out at once only
    when nothing issued before it still waits in the loop; otherwise it queues behind."""
    inproc = transport == "inprocess"
    a, b = envs("a", inprocess=inproc), envs("b", inprocess=inproc)
    rec = Recorder()
    a.setup_endpoint("rec", rec)
    relay_ref = b.setup_endpoint("relay", Relay(b.endpoint_ref(a.address, "rec")))
    for i in range(0, 60, 2):      # one at a time: each pair is issued n, then n + 1
        relay_ref.send(RtSeq(i))
        wait_until(lambda: len(rec.seen) >= i + 2)
    assert [m.n for m in rec.seen] == list(range(60))
    # and from a plain loop function with nothing waiting, a send still arrives
    b.call_soon(b.endpoint_ref(a.address, "rec").send, RtSeq(1000))
    wait_until(lambda: len(rec.seen) == 61)
    assert rec.seen[-1] == RtSeq(1000)


def test_disconnect_and_reconnect_after_restart_on_same_port(envs, transport):
    inproc = transport == "inprocess"
    a = envs("a", inprocess=inproc)
    b = envs("b", inprocess=inproc)
    rec_a, rec_b = Recorder(), Recorder()
    a.setup_endpoint("rec", rec_a)
    b.setup_endpoint("rec", rec_b)
    ref = a.endpoint_ref(b.address, "rec")
    assert ref.ask_sync(RtEcho(1)) == 1
    assert rec_b.wait_for("connected") == a.address
    port = b.address.port

    b.shutdown()
    b.await_termination(5)
    assert rec_b.wait_for("stop") is None
    assert rec_a.wait_for("disconnected", b.address) == b.address
    ref.send(RtSeq(0))  # never raises for network errors
    # queued behind the send: once this ask has failed, no connect attempt is left under way
    # that a later ask could join and fail with (a refused SYN sent before b2 binds)
    with pytest.raises(RpcConnectionError):
        ref.ask(RtEcho(2), timeout=5).result(5)

    b2 = envs("b", inprocess=inproc, port=port, conf={"spark.port.maxRetries": "0"})
    assert b2.address == b.address
    rec_b2 = Recorder()
    b2.setup_endpoint("rec", rec_b2)
    assert ref.ask_sync(RtEcho(3), timeout=5) == 3
    ref.send(RtSeq(5))
    assert rec_b2.wait_for("msg", RtSeq(5)) == RtSeq(5)
    # RtSeq(0) was sent while nothing listened: dropped, or delivered if its connection
    # attempt raced with the restart - never reordered after RtSeq(5)
    assert rec_b2.seen in ([RtSeq(5)], [RtSeq(0), RtSeq(5)])


def test_client_mode_replies_through_its_connection(envs, transport):
    inproc = transport == "inprocess"
    server = envs("master", inprocess=inproc)
    client = envs("driverClient", inprocess=inproc, client_mode=True)
    assert client.address == RpcAddress("127.0.0.1", 0)
    srv, app = Recorder(), Recorder()
    server.setup_endpoint("Master", srv)
    app_ref = client.setup_endpoint("AppClient", app)
    master = client.setup_endpoint_ref_sync(server.address, "Master")
    identity = master.ask_sync(RtRegister(app_ref))     # master answers with the sender address
    master.send(RtRegister(app_ref))                    # master sends RtWelcome through app ref
    assert app.wait_for("msg") == RtWelcome("hi AppClient")
    stored = srv.registered[0]
    assert str(stored.address) == identity and stored.address.port != 0
    assert srv.wait_for("connected") == stored.address
    client.shutdown()
    assert srv.wait_for("disconnected") == stored.address
    with pytest.raises(RpcConnectionError, match="no longer connected"):
        stored.ask(RtEcho(1), timeout=2).result(5)


def test_endpoint_lifecycle_timers_and_executor(envs, transport):
    env = envs("e", inprocess=transport == "inprocess")
    rec = Recorder()
    ref = env.setup_endpoint("rec", rec)
    assert rec.wait_for("start") is None
    with pytest.raises(ValueError, match="There is already an RpcEndpoint called rec"):
        env.setup_endpoint("rec", Recorder())
    # timers run on the loop thread
    fired: "queue.Queue[Any]" = queue.Queue()
    env.schedule(0.05, lambda x: fired.put((x, threading.get_ident())), "once")
    x, tid = fired.get(timeout=5)
    assert x == "once" and tid in rec.threads | {env._loop_tid}
    cancelled = env.schedule(0.2, fired.put, "never")
    cancelled.cancel()
    ticks: list[float] = []
    periodic = env.schedule_periodic(0.0, 0.03, lambda: ticks.append(time.monotonic()))
    wait_until(lambda: len(ticks) >= 4)
    periodic.cancel()
    n = len(ticks)
    time.sleep(0.3)
    assert len(ticks) <= n + 1 and fired.empty()
    env.call_soon(fired.put, "soon")
    assert fired.get(timeout=5) == "soon"
    assert env.run_in_executor(lambda a, b: a + b, 2, 3).result(5) == 5
    # stopping frees the name and makes later messages "Could not find"
    env.stop_endpoint(ref)
    assert rec.wait_for("stop") is None
    with pytest.raises(RpcRemoteError, match=r"Could not find rec\."):
        env.endpoint_ref(env.address, "rec").ask_sync(RtEcho(1), timeout=5)
    env.setup_endpoint("rec", Recorder())


def test_after_shutdown_nothing_hangs_or_runs(envs, transport):
    env = envs("e", inprocess=transport == "inprocess")
    other = envs("o", inprocess=transport == "inprocess")
    other.setup_endpoint("rec", Recorder())
    ran: list[str] = []
    env.shutdown()
    env.await_termination(5)
    with pytest.raises(RpcConnectionError, match="shut down"):
        env.endpoint_ref(other.address, "rec").ask("x", timeout="2s").result(5)
    env.endpoint_ref(other.address, "rec").send(RtSeq(1))      # logged, not raised
    env.call_soon(ran.append, "call_soon")
    assert env.schedule(0, ran.append, "schedule").cancelled
    with pytest.raises(RpcConnectionError):
        env.setup_endpoint("late", Recorder())
    time.sleep(0.05)
    assert ran == []


def test_a_send_accepted_before_shutdown_still_goes_out(envs):
    """An executor that cannot start sends RemoveExecutor and shuts down at once (Spark's
    exitExecutor): what send() accepted before shutdown() was called is delivered, even
    when the loop gets to it only after the shutdown began."""
    env, other = envs("e"), envs("o")
    rec = Recorder()
    other.setup_endpoint("rec", rec)
    ref = env.endpoint_ref(other.address, "rec")
    ref.send(RtSeq(0))
    assert rec.wait_for("msg") == RtSeq(0)           # connected
    gate = threading.Event()
    env.call_soon(gate.wait, 10)                     # the loop is busy meanwhile
    ref.send(RtSeq(1))
    stopper = threading.Thread(target=env.shutdown)
    stopper.start()
    wait_until(lambda: env.stopping)
    gate.set()
    stopper.join(10)
    assert rec.wait_for("msg") == RtSeq(1)
    ref.send(RtSeq(2))                               # after shutdown(): dropped, logged
    time.sleep(0.1)
    assert rec.seen == [RtSeq(0), RtSeq(1)]


def test_what_a_background_call_raises_is_logged(envs, caplog):
    """run_in_executor's callers rarely look at the future: an executor whose start failed
    there once stayed registered with no trace of why."""
    env = envs("e")

    def start_pool() -> None:
        raise OSError(28, "No space left on device")
    with caplog.at_level(logging.ERROR, logger="ember.rpc"):
        fut = env.run_in_executor(start_pool)
        with pytest.raises(OSError):
            fut.result(5)
        wait_until(lambda: "No space left on device" in caplog.text)
    assert "start_pool" in caplog.text
    assert env.run_in_executor(lambda: 5).result(5) == 5


def test_ask_sync_refused_on_any_env_loop_thread(envs):
    a, b = envs("a", inprocess=True), envs("b", inprocess=True)
    b.setup_endpoint("rec", Recorder())
    errors: "queue.Queue[BaseException]" = queue.Queue()

    def on_a_loop() -> None:
        try:
            a.endpoint_ref(b.address, "rec").ask_sync(RtEcho(1))
        except BaseException as e:  # noqa: BLE001 - handed to the test thread
            errors.put(e)
    a.call_soon(on_a_loop)
    e = errors.get(timeout=5)
    assert isinstance(e, RuntimeError) and "event-loop thread of RpcEnv 'a'" in str(e)
    # an encode error leaves the per-thread packer clean
    with pytest.raises(TypeError):
        encode([1, lambda: 0])
    assert decode(encode([1, 2])) == [1, 2]


def test_port_retry_when_busy(envs):
    first = envs("first")
    second = envs("second", port=first.address.port)
    assert second.address.port != first.address.port
    with pytest.raises(OSError, match="failed after 0 retries"):
        envs("third", port=first.address.port, conf={"spark.port.maxRetries": "0"})


def test_transports_use_only_the_public_transport_handler_seam(envs):
    """RpcEnv implements every member of TransportHandler, and the TCP and in-process
    transports reach their env through nothing else: no private attribute of a handler."""
    import ast
    import inspect

    from ember.rpc import inprocess, tcp
    from ember.rpc.transport import TransportHandler
    env = envs("seam")
    members = set(TransportHandler.__annotations__) | {
        n for n, v in vars(TransportHandler).items()
        if not n.startswith("_") and (callable(v) or isinstance(v, property))}
    assert members >= {"channel_opened", "channel_closed", "one_way_received",
                       "request_received", "response_received", "run_on_loop", "rpc_conf"}
    assert all(hasattr(env, m) for m in members), members - set(dir(env))
    handlers = {"handler", "_handler", "peer_handler", "env", "target", "_env"}
    for module in (tcp, inprocess):
        crossings = [
            f"{module.__name__}:{node.lineno}: {ast.unparse(node)}"
            for node in ast.walk(ast.parse(inspect.getsource(module)))
            if isinstance(node, ast.Attribute) and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and ((isinstance(node.value, ast.Name) and node.value.id in handlers)
                 or (isinstance(node.value, ast.Attribute) and node.value.attr in handlers))]
        assert not crossings, crossings


def test_inprocess_factory():
    a = create_inprocess_env("ia")
    b = create_inprocess_env("ib")
    try:
        rec = Recorder()
        a.setup_endpoint("rec", rec)
        assert b.endpoint_ref(a.address, "rec").ask_sync(RtEcho("x")) == "x"
        # not reachable over TCP: nothing listens on a socket
        assert a.rpc_conf.inprocess and a._transport.__class__.__name__ == "InProcessTransport"
    finally:
        a.shutdown()
        b.shutdown()


# ------------------------------------------------------------------------------------------
# Size limits and bad input
# ------------------------------------------------------------------------------------------

def test_oversized_frame_dropped_env_keeps_serving(envs, transport, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    inproc = transport == "inprocess"
    small = envs("small", inprocess=inproc, conf={"spark.rpc.message.maxSize": "1"})
    big = envs("big", inprocess=inproc, conf={"spark.rpc.message.maxSize": "4"})
    other = envs("other", inprocess=inproc)
    rec_small, rec_big = Recorder(), Recorder()
    small.setup_endpoint("rec", rec_small)
    big.setup_endpoint("rec", rec_big)
    ref = big.endpoint_ref(small.address, "rec")
    assert ref.ask_sync(RtEcho(1)) == 1
    ref.send(RtBlob(b"x" * (2 << 20)))
    assert rec_big.wait_for("disconnected", small.address)
    assert rec_small.wait_for("network_error", big.address)
    assert "exceeds spark.rpc.message.maxSize" in caplog.text
    assert not any(isinstance(m, RtBlob) for m in rec_small.seen)
    # the small env serves others, and the big one again after reconnecting
    assert other.endpoint_ref(small.address, "rec").ask_sync(RtEcho(2)) == 2
    assert ref.ask_sync(RtEcho(3)) == 3
    # a too-large ask fails at the sender, before anything is sent
    with pytest.raises(RpcMessageTooLargeError, match="spark.rpc.message.maxSize"):
        small.endpoint_ref(big.address, "rec").ask(RtBlob(b"y" * (2 << 20))).result(5)


def test_unreachable_peer_and_large_messages(envs, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    a, b = envs("a"), envs("b")
    b.setup_endpoint("rec", Recorder())
    with socket.socket() as s:       # a port with nothing listening
        s.bind(("127.0.0.1", 0))
        dead = RpcAddress("127.0.0.1", s.getsockname()[1])
    ref = a.endpoint_ref(dead, "rec")
    ref.send(RtSeq(1))
    with pytest.raises(RpcConnectionError, match=f"Failed to connect to {dead}"):
        ref.ask(RtEcho(1), timeout=5).result(5)
    wait_until(lambda: "Failed to send 1 message(s)" in caplog.text)
    # blocks travel as opaque bytes inside messages
    blob = os.urandom(20 << 20)
    assert a.endpoint_ref(b.address, "rec").ask_sync(RtBlob(blob), timeout=20) == len(blob)
    assert a.endpoint_ref(b.address, "rec").ask_sync(RtEcho(blob), timeout=20) == blob


def _raw_connect(env: RpcEnv) -> tuple[socket.socket, bytes]:
    s = socket.create_connection((env.address.host, env.address.port), timeout=5)
    greeting = b""
    while len(greeting) < framing.GREETING_LEN:
        chunk = s.recv(framing.GREETING_LEN - len(greeting))
        assert chunk, "server closed before its greeting"
        greeting += chunk
    return s, greeting


def _closed_by_peer(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        while True:
            if not s.recv(65536):
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def _frame(ftype: int, payload: bytes) -> bytes:
    return struct.pack(">IB", 1 + len(payload), ftype) + payload


def test_raw_socket_bad_frames_are_logged_and_answered(envs, caplog):
    caplog.set_level(logging.WARNING, logger="ember.rpc")
    env = envs("target")
    env.setup_endpoint("rec", Recorder())
    s, greeting = _raw_connect(env)
    assert framing.parse_greeting(greeting) == (False, bytes(32))
    s.sendall(framing.hello_frame(None, "raw", "raw"))

    def request(req_id: int, name: str, body: bytes) -> bytes:
        n = name.encode()
        return _frame(framing.REQUEST, struct.pack(">QH", req_id, len(n)) + n + body)

    def read_response() -> tuple[int, bool, str]:
        hdr = b""
        while len(hdr) < 4:
            hdr += s.recv(4 - len(hdr))
        (length,) = struct.unpack(">I", hdr)
        data = b""
        while len(data) < length:
            data += s.recv(length - len(data))
        assert data[0] == framing.RESPONSE
        req_id, ok, body = framing.parse_response(data[1:])
        return req_id, ok, (msgpack.unpackb(body, raw=False) if ok
                            else ": ".join(framing.decode_failure(body)))

    s.sendall(_frame(framing.ONE_WAY, b"\x00\x03rec" + b"\xc1\xc1 not msgpack"))   # logged
    s.sendall(_frame(99, b"whatever"))                                                # logged
    s.sendall(request(1, "rec", msgpack.packb({"__m__": "NoSuchMessage"})))
    assert read_response() == (1, False, "MessageDecodeError: Unknown message type "
                                         "'NoSuchMessage'")
    s.sendall(request(2, "rec", msgpack.packb({"__m__": "RtSeq", "n": "seven"})))
    r = read_response()
    assert r[:2] == (2, False) and "RtSeq.n: expected int, got str" in r[2]
    s.sendall(request(3, "Ghost", encode(RtEcho(1))))
    assert read_response() == (3, False, "SparkException: Could not find Ghost.")
    s.sendall(request(4, "rec", encode(RtEcho("ok"))))
    assert read_response() == (4, True, "ok")        # same connection still served
    assert "Dropping a malformed message" in caplog.text
    assert "unknown type 99" in caplog.text
    # a frame announcing more than the limit closes the connection before its body is read
    s.sendall(struct.pack(">IB", 0x7FFFFFFF, framing.ONE_WAY))
    assert _closed_by_peer(s)
    s.close()
    client = envs("client")
    assert client.endpoint_ref(env.address, "rec").ask_sync(RtEcho("alive")) == "alive"


# ------------------------------------------------------------------------------------------
# Two processes
# ------------------------------------------------------------------------------------------

def _spawn_peer(*args: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, HERE, "serve", *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    assert line.startswith("READY "), f"peer did not start: {line!r}"
    return proc, int(line.split()[1])


def test_two_processes_round_trip_and_kill_9(envs):
    env = envs("parent")
    watcher = Recorder()
    env.setup_endpoint("watcher", watcher)
    proc, port = _spawn_peer(env.address.to_spark_url())
    try:
        peer = RpcAddress("127.0.0.1", port)
        # the child introduced itself (with a ref to its own endpoint) on start
        hello = watcher.wait_for("msg")
        assert hello.who == "child" and hello.ref.address == peer
        assert watcher.wait_for("connected", peer) == peer
        ref = env.endpoint_ref(peer, "rec")
        assert ref.ask_sync(RtEcho(_sample(None)), timeout=10) == _sample(None)
        with pytest.raises(RpcRemoteError, match="KeyError"):
            ref.ask_sync(RtFail("remote"))
        for i in range(1000):
            ref.send(RtSeq(i))
        assert ref.ask_sync(RtGet(), timeout=10) == list(range(1000))
        assert hello.ref.ask_sync(RtEcho("via the ref it sent")) == "via the ref it sent"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        assert watcher.wait_for("disconnected", peer) == peer
        with pytest.raises(RpcConnectionError):
            ref.ask(RtEcho(1), timeout=5).result(5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_two_processes_graceful_shutdown_disconnect(envs):
    env = envs("parent")
    watcher = Recorder()
    env.setup_endpoint("watcher", watcher)
    proc, port = _spawn_peer(env.address.to_spark_url())
    try:
        peer = RpcAddress("127.0.0.1", port)
        watcher.wait_for("connected", peer)
        proc.stdin.close()  # type: ignore[union-attr]  # child shuts its env down and exits
        assert watcher.wait_for("disconnected", peer) == peer
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


# ------------------------------------------------------------------------------------------
# Peer process and benchmark (python tests/test_rpc.py serve|bench)
# ------------------------------------------------------------------------------------------

class Sink(RpcEndpoint):
    """The benchmark's receiver: as little work per message as an endpoint can do."""

    def __init__(self) -> None:
        self.ns: list[int] = []

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self.ns.append(msg.n)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        context.reply(self.ns if isinstance(msg, RtGet) else msg.payload)


def _serve(argv: list[str]) -> None:
    """Child side: an env with a Recorder "rec" and a Sink "sink"; says hello to the
    parent's "watcher"."""
    logging.basicConfig(level=logging.WARNING)
    env = RpcEnv.create("child", "127.0.0.1", 0, _bench_conf())
    ref = env.setup_endpoint("rec", Recorder())
    env.setup_endpoint("sink", Sink())
    if argv:
        env.endpoint_ref(argv[0], "watcher").send(RtHello("child", ref))
    print(f"READY {env.address.port}", flush=True)
    sys.stdin.read()                     # until the parent closes our stdin (or kills us)
    env.shutdown()
    env.await_termination(5)


def _bench() -> None:
    """Ask round-trip latency and one-way throughput between two processes on loopback."""
    import statistics
    env = RpcEnv.create("bench", "127.0.0.1", 0, _bench_conf())
    proc, port = _spawn_peer()
    try:
        ref = env.endpoint_ref(RpcAddress("127.0.0.1", port), "sink")
        ref.ask_sync(RtEcho(0))
        lat = []
        for i in range(3000):
            t0 = time.perf_counter()
            ref.ask_sync(RtEcho(i))
            lat.append(time.perf_counter() - t0)
        lat.sort()
        print(f"ask round trip (ask_sync from a user thread): median "
              f"{statistics.median(lat) * 1e6:.0f} us, p99 {lat[int(len(lat) * .99)] * 1e6:.0f} us")
        # the same from the env's own loop (an endpoint chaining asks): no thread hand-off
        done: "concurrent.futures.Future[float]" = concurrent.futures.Future()
        count = [0]
        t_start = [0.0]

        def next_ask(f: Any = None) -> None:
            if count[0] == 3000:
                done.set_result((time.perf_counter() - t_start[0]) / 3000)
                return
            count[0] += 1
            ref.ask(RtEcho(count[0])).add_done_callback(next_ask)

        def start() -> None:
            t_start[0] = time.perf_counter()
            next_ask()
        env.call_soon(start)
        print(f"ask round trip (asks chained on the env's loop): mean "
              f"{done.result(60) * 1e6:.0f} us")
        n = 100_000
        t0 = time.perf_counter()
        for i in range(n):
            ref.send(RtSeq(i))
        got = ref.ask_sync(RtGet(), timeout=120)
        dt = time.perf_counter() - t0
        assert got == list(range(n))
        print(f"one-way sends: {n / dt:,.0f} messages/s ({n} RtSeq messages in {dt:.2f} s)")
    finally:
        proc.stdin.close()  # type: ignore[union-attr]
        proc.wait(10)
        env.shutdown()


if __name__ == "__main__":
    if sys.argv[1:2] == ["serve"]:
        _serve(sys.argv[2:])
    elif sys.argv[1:2] == ["bench"]:
        _bench()
    else:
        sys.exit("usage: test_rpc.py serve [parent-url] | bench")
