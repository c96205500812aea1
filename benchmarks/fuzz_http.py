"""`python -m benchmarks.fuzz_http [--inputs N]`: hostile HTTP input against live daemons.

A local cluster (master with its REST gateway, one worker) and a driver's application UI
(this process is the driver, local mode) are started twice: without a secret (the
default) and with spark.authenticate (the fuzzer then sends no credentials, or forged
ones). Each target gets --inputs requests: random methods, paths, query strings, headers
(Host, Origin, Content-Type, Authorization, Cookie) and bodies (JSON-shaped, broken,
binary, huge). The report says, per target: crashes (the daemon died or stopped answering
its own clients), 5xx answers other than the gateway's deliberate JSON error responses, and
state changes (drivers or applications appearing or disappearing).

The targets are plain functions of a random generator, so the RPC harness
(`benchmarks.fuzz`) can run them too: `http_targets(urls)` returns them by name.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional
from urllib.parse import quote, urlsplit

_METHODS = ["GET", "GET", "GET", "POST", "POST", "PUT", "DELETE", "OPTIONS", "HEAD", "PATCH",
            "TRACE", "G\x00T"]
_WORDS = ["", "..", "../..", "%2e%2e", "app-1", "driver-1", "0", "-1", "99999999999999999999",
          "nan", "stdout", "stderr", "out", "self", "<script>", "%00", "\u00e9", "a" * 300]
_KEYS = ["appId", "executorId", "driverId", "self", "logType", "offset", "byteLength", "id",
         "attempt", "terminate", "csrf", "quantiles", "status", "details", "next", "token"]
_PATHS = {
    "master-ui": ["/", "/json", "/json/activeapps", "/app/", "/app/kill/", "/driver/kill/",
                  "/logPage/", "/log", "/metrics/prometheus", "/login"],
    "worker-ui": ["/", "/json", "/logPage/", "/log", "/metrics/prometheus", "/login"],
    "rest": ["/v1/submissions/create", "/v1/submissions/kill/driver-1",
             "/v1/submissions/status/driver-1", "/v1/submissions/killall",
             "/v1/submissions/clear", "/v1/submissions/readyz", "/v1/submissions/upload",
             "/v1/submissions/logs/driver-1", "/v2/x", "/"],
    "app-ui": ["/", "/jobs/", "/jobs/job/", "/stages/", "/stages/stage/", "/executors/",
               "/environment/", "/storage/", "/api/v1/applications", "/metrics/prometheus",
               "/login"],
}


def _word(rng: random.Random) -> str:
    if rng.random() < 0.2:
        return "".join(chr(rng.randrange(1, 0x250)) for _ in range(rng.randint(0, 12)))
    return rng.choice(_WORDS)


def _body(rng: random.Random) -> bytes:
    r = rng.random()
    create = {"action": "CreateSubmissionRequest", "appArgs": [], "appResource": "",
              "clientSparkVersion": "4.1.1", "environmentVariables": {}, "mainClass": "json",
              "sparkProperties": {"spark.master": "spark://127.0.0.1:7077"}}
    if r < 0.3:
        key = rng.choice(list(create))
        create[key] = rng.choice([None, 1, -1, [], {}, "x" * rng.randint(0, 100_000), True,
                                  {"a": [1, {"b": None}]}])
        data = json.dumps(create).encode()
        return data[:rng.randint(0, len(data))] if rng.random() < 0.3 else data
    if r < 0.5:
        return "&".join(f"{rng.choice(_KEYS)}={quote(_word(rng))}"
                        for _ in range(rng.randint(0, 5))).encode()
    if r < 0.6:
        return b"[" * rng.randint(1, 20_000)
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))


@dataclass
class HttpInput:
    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: Optional[bytes] = None


def generate(rng: random.Random, paths: list[str], port: int) -> HttpInput:
    path = rng.choice(paths)
    if rng.random() < 0.7:
        path += "?" + "&".join(
            rng.choice(_KEYS) if rng.random() < 0.1 else f"{rng.choice(_KEYS)}={quote(_word(rng))}"
            for _ in range(rng.randint(0, 5)))
    headers: dict[str, str] = {}
    if rng.random() < 0.3:
        headers["Host"] = rng.choice(["evil.example", f"evil.example:{port}", "", "127.0.0.1",
                                      f"localhost:{port}", "[::1]", "a" * 500])
    if rng.random() < 0.3:
        headers["Origin"] = rng.choice(["null", "http://evil.example", f"http://127.0.0.1:{port}",
                                        "file://", "http://[::1", "javascript:x"])
    if rng.random() < 0.5:
        headers["Content-Type"] = rng.choice([
            "application/json", "text/plain", "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x", "application/octet-stream", ";;;"])
    if rng.random() < 0.3:
        headers["Authorization"] = rng.choice([
            "Bearer ", "Bearer a.b.c", "Basic Zm9vOmJhcg==",
            "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJyb290In0.", "Bearer " + "A" * 4000])
    if rng.random() < 0.2:
        headers["Cookie"] = f"ember_ui_{port}=" + rng.choice(["x", "a.b.c", "", "\x7f"])
    body = _body(rng) if rng.random() < 0.6 else None
    return HttpInput(rng.choice(_METHODS), path, headers, body)


def send(url: str, inp: HttpInput, timeout: float = 20.0) -> int:
    """The status, or 0 when the request could not be sent or got no HTTP answer (bad
    method or header refused by the client library or closed by the server)."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.putrequest(inp.method, inp.path, skip_host="Host" in inp.headers,
                        skip_accept_encoding=True)
        for k, v in inp.headers.items():
            conn.putheader(k, v)
        if inp.body is not None:
            conn.putheader("Content-Length", str(len(inp.body)))
        conn.endheaders(inp.body)
        r = conn.getresponse()
        r.read()
        return r.status
    except (OSError, ValueError, http.client.HTTPException, UnicodeError):
        return 0
    finally:
        conn.close()


@dataclass
class HttpTarget:
    name: str
    url: str
    paths: list[str]
    alive: Callable[[], bool]
    state: Callable[[], Any]
    serving: Callable[[], bool]


@dataclass
class Report:
    inputs: int = 0
    crashes: int = 0
    server_errors: int = 0
    state_changes: int = 0
    statuses: dict[int, int] = field(default_factory=dict)


def run_target(t: HttpTarget, inputs: int, seed: int) -> Report:
    rng = random.Random(seed)
    port = urlsplit(t.url).port or 80
    rep = Report()
    before = t.state()
    for i in range(inputs):
        inp = generate(rng, t.paths, port)
        status = send(t.url, inp)
        rep.inputs += 1
        rep.statuses[status] = rep.statuses.get(status, 0) + 1
        if status >= 500 and status != 503:
            rep.server_errors += 1
        if i % 500 == 499 or i == inputs - 1:
            if not t.alive() or not t.serving():
                rep.crashes += 1
                break
    if t.state() != before:
        rep.state_changes += 1
    return rep


def _get(url: str, headers: dict[str, str]) -> Optional[bytes]:
    import urllib.request
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=20) as r:
            return r.read()
    except OSError:
        return None


def targets_for(cluster: Any, ui_url: str, ui_pid: int) -> list[HttpTarget]:
    """The HTTP targets of a started LocalCluster and a driver UI (`ui_pid`: its process)."""
    import psutil
    auth = cluster.auth_headers

    def master_state() -> Any:
        j = cluster.json()
        return (sorted(d["id"] for d in j["activedrivers"] + j["completeddrivers"]),
                sorted(a["id"] for a in j["activeapps"] + j["completedapps"]))

    def master_serving() -> bool:
        return _get(f"http://127.0.0.1:{cluster.master_ui}/json", auth()) is not None

    def alive(pid: int) -> Callable[[], bool]:
        return lambda: psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"

    worker = f"http://127.0.0.1:{cluster.worker_ui[0]}"
    return [
        HttpTarget("master-ui", f"http://127.0.0.1:{cluster.master_ui}", _PATHS["master-ui"],
                   alive(cluster.master.pid), master_state, master_serving),
        HttpTarget("worker-ui", worker, _PATHS["worker-ui"], alive(cluster.workers[0].pid),
                   master_state, lambda: _get(worker + "/json", auth()) is not None),
        HttpTarget("rest", f"http://127.0.0.1:{cluster.rest_port}", _PATHS["rest"],
                   alive(cluster.master.pid), master_state, master_serving),
        HttpTarget("app-ui", ui_url, _PATHS["app-ui"], alive(ui_pid), lambda: None,
                   lambda: _get(ui_url + "/api/v1/applications", auth()) is not None),
    ]


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.fuzz_http")
    p.add_argument("--inputs", type=int, default=10_000, help="inputs per target and mode")
    p.add_argument("--seed", type=int, default=11)
    p.add_argument("--modes", default="default,auth")
    args = p.parse_args(argv)
    from ember import SparkConf, SparkContext
    from ember.deploy.local_cluster import LocalCluster
    failed = False
    with tempfile.TemporaryDirectory(prefix="ember-fuzz-http-") as tmp:
        for mode in args.modes.split(","):
            conf = {} if mode == "default" else {
                "spark.authenticate": "true", "spark.authenticate.secret": os.urandom(24).hex()}
            cluster = LocalCluster(os.path.join(tmp, mode), workers=1, cores=1, conf=conf)
            cluster.start()
            c = SparkConf().setMaster("local[1]").setAppName(f"fuzz-http-{mode}").set(
                "spark.ui.port", "0")
            for k, v in conf.items():
                c.set(k, v)
            sc = SparkContext(conf=c)
            try:
                sc.parallelize(range(10), 2).count()
                ui_pid = sc.runtime.ui_process.proc.pid
                for t in targets_for(cluster, sc.uiWebUrl, ui_pid):
                    t0 = time.monotonic()
                    rep = run_target(t, args.inputs, args.seed)
                    bad = rep.crashes or rep.server_errors or rep.state_changes
                    failed = failed or bool(bad)
                    print(f"{mode:8s} {t.name:10s} inputs={rep.inputs} crashes={rep.crashes} "
                          f"5xx={rep.server_errors} state_changes={rep.state_changes} "
                          f"statuses={dict(sorted(rep.statuses.items()))} "
                          f"({time.monotonic() - t0:.1f} s)", flush=True)
            finally:
                sc.stop()
                cluster.stop()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
