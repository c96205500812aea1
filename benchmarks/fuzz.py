"""`python -m benchmarks.fuzz`: hostile input against live daemons on loopback, by hand.

A local cluster (master, a worker) and a client-mode application (this process is its
driver, with two executors) are started, once without a secret (the default: strangers
are other Unix users, so the fuzzer, running as the daemons' user, reaches the frame
parser and the message codec) and once with spark.authenticate (the fuzzer, without the
secret, attacks the handshake). Every target gets --inputs inputs; the report says, per
target: crashes (the process died or stopped answering its own clients), state changes
(what the target shows of its state moved), and pickle calls during the fuzz (each
process counts pickle's find_class through an audit hook, EMBER_FUZZ_PICKLE_AUDIT).

Targets are pluggable: `@target("name")` registers a factory `(Harness) -> Target`;
HTTP targets add themselves the same way.
"""
from __future__ import annotations

import argparse
import os
import pickle
import random
import socket
import struct
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Callable

from ember.rpc import framing

TARGETS: dict[str, Callable[["Harness"], "Target"]] = {}


def target(name: str) -> Callable:
    def register(factory: Callable[["Harness"], "Target"]) -> Callable:
        TARGETS[name] = factory
        return factory
    return register


@dataclass
class Target:
    """One thing to fuzz: how to make and deliver an input, what its state looks like, and
    whether its process is alive and serving."""
    name: str
    pid: int
    generate: Callable[[random.Random], bytes]     # one input
    deliver: Callable[[bytes], None]               # send it (never raises)
    state: Callable[[], Any]                       # observable state (compared before/after)
    serving: Callable[[], bool]                    # answers its own clients


class _Evil:
    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


# ------------------------------------------------------------------------------------------
# Input generation for the RPC targets
# ------------------------------------------------------------------------------------------

def _mutate(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        op = rng.random()
        if op < 0.4 and b:
            i = rng.randrange(len(b))
            b[i] ^= 1 << rng.randrange(8)
        elif op < 0.6 and b:
            del b[rng.randrange(len(b)):]
        elif op < 0.8:
            i = rng.randrange(len(b) + 1)
            b[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif b:
            i = rng.randrange(len(b))
            b[i] = rng.choice([0x00, 0xFF, 0xC1, 0xDE, 0xDF, 0x80, 0x90, 0xA0])
    return bytes(b)


def _invalid_body(rng: random.Random, seeds: list[bytes]) -> bytes:
    """A message body the codec refuses (checked here: a mutation that happens to stay a
    valid message would be input a real client may send, not invalid input)."""
    from ember.rpc.messages import MessageDecodeError, decode
    for _ in range(50):
        body = _mutate(rng, rng.choice(seeds)) if rng.random() < 0.8 else \
            bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        try:
            decode(body)
        except MessageDecodeError:
            return body
        except Exception:
            return body
    return b"\xc1"


def rpc_generator(endpoint: str, seeds: list[Any], refused: list[Any]) -> Callable:
    """Frames for a same-user connection: malformed frames, unknown endpoints and types,
    bodies the codec refuses, and well-formed messages the target must refuse by channel."""
    from ember.rpc.messages import encode
    seed_bodies = [encode(m) for m in seeds] or [b"\x80"]
    refused_bodies = [encode(m) for m in refused]

    def generate(rng: random.Random) -> bytes:
        name = endpoint.encode()
        r = rng.random()
        if r < 0.15 and refused_bodies:
            body = rng.choice(refused_bodies)
        elif r < 0.25:
            name = _mutate(rng, name)[:200] or b"x"
            body = _invalid_body(rng, seed_bodies)
        else:
            body = _invalid_body(rng, seed_bodies)
        kind = rng.random()
        if kind < 0.45:
            frame = framing.one_way_header(name, len(body)) + body
        elif kind < 0.9:
            frame = framing.request_header(rng.randrange(1 << 32), name, len(body)) + body
        elif kind < 0.95:
            frame = struct.pack(">IB", 1 + len(body), rng.choice([0, 4, 7, 255])) + body
        else:
            frame = _mutate(rng, framing.one_way_header(name, len(body)) + body)
        return frame
    return generate


def handshake_generator(rng: random.Random) -> bytes:
    """For a stranger without the secret: handshake-shaped garbage."""
    auth = (bytes(rng.randrange(256) for _ in range(framing.MAC_LEN + framing.NONCE_LEN))
            + bytes([rng.randrange(4), rng.randrange(256)]))
    choice = rng.random()
    if choice < 0.5:
        return auth + bytes(rng.randrange(256) for _ in range(rng.randint(0, 300)))
    if choice < 0.8:
        return framing.hello_frame(None, "fuzz", "fuzz") + b"\x00" * rng.randint(0, 64)
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 600)))


class RpcSender:
    """Delivers inputs on one connection (re-opened when the peer closes it); `fresh`
    opens a new connection per input (handshake fuzzing)."""

    def __init__(self, port: int, fresh: bool) -> None:
        self.port = port
        self.fresh = fresh
        self.sock: socket.socket | None = None

    def _open(self) -> socket.socket:
        s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        s.settimeout(5)
        greeting = b""
        while len(greeting) < framing.GREETING_LEN:
            chunk = s.recv(framing.GREETING_LEN - len(greeting))
            if not chunk:
                raise ConnectionError("closed before its greeting")
            greeting += chunk
        if not self.fresh:
            s.sendall(framing.hello_frame(None, "fuzzer", "fuzzer"))
        s.setblocking(False)
        return s

    def deliver(self, data: bytes) -> None:
        for _ in range(2):
            try:
                if self.sock is None or self.fresh:
                    if self.sock is not None:
                        self.sock.close()
                    self.sock = self._open()
                self.sock.setblocking(True)
                self.sock.settimeout(5)
                self.sock.sendall(data)
                self.sock.setblocking(False)
                try:
                    while self.sock.recv(65536):
                        pass
                    self.sock.close()          # b"": closed by the peer
                    self.sock = None
                except BlockingIOError:
                    pass
                return
            except OSError:
                if self.sock is not None:
                    self.sock.close()
                self.sock = None


# ------------------------------------------------------------------------------------------
# The harness: a cluster, an application, the pickle audit
# ------------------------------------------------------------------------------------------

class Harness:
    def __init__(self, mode: str, workdir: str) -> None:
        from ember import SparkConf, SparkContext
        from ember.deploy.local_cluster import LocalCluster
        self.mode = mode
        self.audit_dir = os.path.join(workdir, "audit")
        os.makedirs(self.audit_dir, exist_ok=True)
        os.environ["EMBER_FUZZ_PICKLE_AUDIT"] = self.audit_dir
        import datetime   # this process's count so far lands in the new directory
        pickle.loads(pickle.dumps(datetime.date.today()))
        self.conf = {} if mode == "default" else {
            "spark.authenticate": "true", "spark.authenticate.secret": os.urandom(24).hex()}
        self.cluster = LocalCluster(os.path.join(workdir, mode), workers=1, cores=2,
                                    conf=self.conf).start()
        c = SparkConf().setMaster(self.cluster.url).setAppName(f"fuzz-{mode}")
        for k, v in self.conf.items():
            c.set(k, v)
        self.sc = SparkContext(conf=c)
        assert self.sc.parallelize(range(10), 2).sum() == 45
        self.marker = os.path.join(workdir, f"pickled-{mode}")
        from ember.rpc import RpcEnv
        self.trusted = RpcEnv.create("fuzz-trusted", "127.0.0.1", 0,
                                     {"spark.rpc.connect.timeout": "5s", **self.conf},
                                     client_mode=True)

    def pickle_calls(self) -> dict[str, int]:
        out = {}
        for name in os.listdir(self.audit_dir):
            try:
                with open(os.path.join(self.audit_dir, name)) as f:
                    out[name] = int(f.read() or 0)
            except (OSError, ValueError):
                pass
        return out

    def job_works(self) -> bool:
        """A job whose results are objects (dates), so unpickling them needs find_class:
        the audit's positive control."""
        import datetime
        try:
            out = self.sc.parallelize(range(100), 4).map(
                lambda x: datetime.date(2020, 1, 1 + x % 28)).collect()
            return len(out) == 100 and out[27] == datetime.date(2020, 1, 28)
        except Exception:
            return False

    def close(self) -> None:
        self.trusted.shutdown()
        self.sc.stop()
        self.cluster.stop()


def _rpc_target(h: Harness, name: str, pid: int, port: int, endpoint: str,
                seeds: list[Any], refused: list[Any], state: Callable[[], Any],
                serving: Callable[[], bool]) -> Target:
    fresh = h.mode != "default"
    sender = RpcSender(port, fresh)
    gen = handshake_generator if fresh else rpc_generator(endpoint, seeds, refused)
    return Target(name, pid, gen, sender.deliver, state, serving)


@target("master")
def master_target(h: Harness) -> Target:
    from ember.deploy.messages import (ElectedLeader, RequestMasterState, RequestSubmitDriver,
                                       RevokedLeadership)
    ref = h.trusted.endpoint_ref(h.cluster.url, "Master")

    def state() -> Any:
        j = h.cluster.json()
        return (j["aliveworkers"], sorted(a["id"] for a in j["activeapps"]),
                sorted(d["id"] for d in j["activedrivers"]), len(j["completeddrivers"]))

    def serving() -> bool:
        try:
            return ref.ask_sync(RequestMasterState(), timeout=30).port == h.cluster.master_port
        except Exception:
            return False
    seeds = [RequestMasterState(), RequestSubmitDriver(_tiny_driver(h))]
    return _rpc_target(h, "master", h.cluster.master.pid, h.cluster.master_port, "Master",
                       seeds, [ElectedLeader(), RevokedLeadership()], state, serving)


def _tiny_driver(h: Harness) -> Any:
    from ember.deploy.messages import Command, DriverDescription
    return DriverDescription(h.marker, 256, 1, False, Command(
        "ember.deploy.driver_wrapper", ["{{WORKER_URL}}", "{{USER_JAR}}", "__main__"], {},
        [], [], []))


def _worker_process(h: Harness) -> tuple[int, int]:
    w = h.cluster.json()["workers"][0]
    port = int(w["port"])
    import psutil
    for p in psutil.process_iter(["pid"]):
        try:
            if any(c.laddr.port == port and c.status == "LISTEN" for c in p.net_connections()):
                return p.pid, port
        except (psutil.Error, OSError):
            continue
    return -1, port


@target("worker")
def worker_target(h: Harness) -> Target:
    from ember.deploy.messages import (KillDriver, KillExecutor, LaunchDriver,
                                       RequestWorkerState)
    pid, port = _worker_process(h)
    ref = h.trusted.endpoint_ref(f"spark://127.0.0.1:{port}", "Worker")

    def state() -> Any:
        s = ref.ask_sync(RequestWorkerState(), timeout=30)
        return (sorted(d.driverId for d in s.drivers),
                sorted((e.appId, e.execId) for e in s.executors))

    def serving() -> bool:
        try:
            state()
            return True
        except Exception:
            return False
    refused = [LaunchDriver("driver-fuzz", _tiny_driver(h)), KillDriver("driver-fuzz"),
               KillExecutor(h.cluster.url, h.sc.applicationId, 0)]
    return _rpc_target(h, "worker", pid, port, "Worker", [RequestWorkerState()], refused,
                       state, serving)


@target("driver")
def driver_target(h: Harness) -> Target:
    from ember.deploy.messages import RetrieveSparkAppConfig, StatusUpdate
    backend = h.sc.runtime.scheduler_backend
    eid = next(iter(backend.executors))
    refused = [StatusUpdate(eid, 0, "FINISHED", pickle.dumps(_Evil(h.marker))),
               StatusUpdate("no-such", 1, "FAILED", pickle.dumps(_Evil(h.marker)))]
    return _rpc_target(h, "driver", os.getpid(), backend.rpc_env.address.port,
                       "CoarseGrainedScheduler", [RetrieveSparkAppConfig(0)], refused,
                       lambda: sorted(backend.executors), h.job_works)


@target("executor")
def executor_target(h: Harness) -> Target:
    from ember.deploy.messages import FetchShuffleBlocks, LaunchTask, StopExecutor
    import psutil
    ex = next(iter(h.sc.runtime.scheduler_backend.executors.values()))
    pid = -1
    for p in psutil.process_iter(["pid"]):
        try:
            if any(c.laddr.port == ex.address.port and c.status == "LISTEN"
                   for c in p.net_connections()):
                pid = p.pid
        except (psutil.Error, OSError):
            continue
    refused = [LaunchTask(pickle.dumps(_Evil(h.marker))), StopExecutor()]
    return _rpc_target(h, "executor", pid, ex.address.port, "Executor",
                       [FetchShuffleBlocks(0, ["/etc/passwd"], [-1], [0])], refused,
                       lambda: sorted(h.sc.runtime.scheduler_backend.executors), h.job_works)


# ------------------------------------------------------------------------------------------

def run(mode: str, names: list[str], inputs: int, seed: int) -> list[dict]:
    import psutil
    rows = []
    with tempfile.TemporaryDirectory(prefix="ember-fuzz-") as workdir:
        h = Harness(mode, workdir)
        try:
            for name in names:
                t = TARGETS[name](h)
                rng = random.Random(f"{seed}-{mode}-{name}")
                before_state = t.state()
                before_pickles = h.pickle_calls()
                crashes = 0
                legit = 0        # pickles of the serving checks' own jobs (not the fuzz's)
                start = time.perf_counter()
                for i in range(inputs):
                    t.deliver(t.generate(rng))
                    if (i + 1) % 2000 == 0:
                        time.sleep(0.5)
                        c0 = sum(h.pickle_calls().values())
                        ok = psutil.pid_exists(t.pid) and t.serving()
                        legit += sum(h.pickle_calls().values()) - c0
                        if not ok:
                            crashes += 1
                            break
                elapsed = time.perf_counter() - start
                time.sleep(1.0)            # let refused work (if any) show up
                pickles = {k: v - before_pickles.get(k, 0)
                           for k, v in h.pickle_calls().items()}
                pickles["serving checks"] = -legit
                alive = psutil.pid_exists(t.pid) and t.serving()
                crashes += 0 if alive else 1
                changed = t.state() != before_state
                rows.append({"mode": mode, "target": name, "inputs": inputs,
                             "crashes": crashes, "state_changes": int(changed),
                             "pickle_calls": sum(pickles.values()),
                             "marker": os.path.exists(h.marker),
                             "seconds": round(elapsed, 1)})
                print(rows[-1], flush=True)
            control = h.pickle_calls()
            job_after = h.job_works()
            # positive control: the legitimate job's pickles are seen by the audit
            seen = sum(v - control.get(k, 0) for k, v in h.pickle_calls().items())
            print(f"{mode}: a job after the fuzz {'works' if job_after else 'FAILS'}; "
                  f"the audit saw its {seen} pickle find_class calls", flush=True)
            for row in rows:
                row["job_after"] = job_after and seen > 0
        finally:
            h.close()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz", description=__doc__)
    p.add_argument("--inputs", type=int, default=10_000, help="inputs per target")
    p.add_argument("--targets", default=",".join(TARGETS))
    p.add_argument("--mode", choices=["default", "authenticated", "both"], default="both")
    p.add_argument("--seed", type=int, default=11)
    a = p.parse_args(argv)
    names = [n for n in a.targets.split(",") if n]
    unknown = [n for n in names if n not in TARGETS]
    if unknown:
        p.error(f"unknown targets {unknown}; known: {sorted(TARGETS)}")
    modes = ["default", "authenticated"] if a.mode == "both" else [a.mode]
    rows = [r for m in modes for r in run(m, names, a.inputs, a.seed)]
    bad = [r for r in rows if r["crashes"] or r["state_changes"] or r["pickle_calls"]
           or r["marker"] or not r["job_after"]]
    print(f"{len(rows)} target runs, {sum(r['inputs'] for r in rows)} inputs: "
          f"{'ALL CLEAN' if not bad else f'{len(bad)} FAILED'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
