"""Response time of the master web UI's `/` and `/json` on a large cluster's state.

Why simulated: 200 workers and 1,000 completed applications cannot be started on a laptop,
but the UI only ever sees a `MasterStateResponse` snapshot. So this builds one of that size
and serves it through the real `MasterWebUI` (its own thread, aiohttp, RPC ask to a
"Master" endpoint) with a fake endpoint answering `RequestMasterState`: what is measured is
the ask, rendering and HTTP, as in production, minus the snapshot's construction on the
master's loop. Target: median < 50 ms for each page.

    python -m benchmarks.master_ui [--workers 200] [--completed-apps 1000] [--requests 30]
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import urllib.request
from typing import Any, Optional

from ember.deploy.master.http import MasterWebUI
from ember.deploy.messages import (
    ApplicationDescription, ApplicationState, ApplicationSummary, Command, DriverDescription,
    DriverState, DriverSummary, ExecutorState, ExecutorSummary, MasterStateResponse,
    RecoveryState, RequestMasterState, ResourceProfile, WorkerState, WorkerSummary,
)
from ember.rpc import RpcCallContext, RpcEndpoint, RpcEnv

TARGET_MS = 50.0


class FakeMaster(RpcEndpoint):
    """Answers RequestMasterState with a fixed snapshot and any other ask (the UI's kill
    requests) with True, recording every ask it gets."""

    def __init__(self, state: MasterStateResponse) -> None:
        self.state = state
        self.asks: list[Any] = []

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        self.asks.append(msg)
        context.reply(self.state if isinstance(msg, RequestMasterState) else True)


def synthetic_state(workers: int = 200, completed_apps: int = 1000, running_apps: int = 10,
                    completed_drivers: int = 100, app_name: str = "bench-app"
                    ) -> MasterStateResponse:
    """A master snapshot of the given size: ALIVE workers of 8 cores / 16 GiB, running apps
    with one executor per worker (up to 4), finished apps and drivers."""
    now = int(time.time() * 1000)
    hosts = [f"10.0.{i // 250}.{i % 250}" for i in range(workers)]
    ws = [WorkerSummary(f"worker-20250101000000-{h}-7078", h, 7078, f"http://{h}:8081", 8, 4,
                        16384, 4096, {}, {}, WorkerState.ALIVE, now) for h in hosts]

    def desc(n: int) -> ApplicationDescription:
        return ApplicationDescription(f"{app_name}-{n}", 16, Command("x"),
                                      f"http://driver-{n}:4040", ResourceProfile.of(memoryMb=2048),
                                      user="alice")

    def app(n: int, state: ApplicationState) -> ApplicationSummary:
        running = state == ApplicationState.RUNNING
        app_id = f"app-20250101000000-{n:04d}"
        execs = [ExecutorSummary(e, app_id, ws[e].id, ws[e].hostPort, 4, 2048, {}, 0,
                                 ExecutorState.RUNNING)
                 for e in range(min(4, workers))] if running else []
        return ApplicationSummary(app_id, now - 60_000, desc(n),
                                  now - 60_000, state, 16 if running else 0,
                                  -1 if running else now, 60_000, execs)

    drivers = [DriverSummary(f"driver-20250101000000-{n:04d}", now - 60_000,
                             DriverDescription("ember-upload://x/app.py", 1024, 1, False,
                                               Command("driver", ["w", "j", "app.py"])),
                             now - 60_000, DriverState.FINISHED, ws[n % workers].id,
                             ws[n % workers].hostPort)
               for n in range(completed_drivers)] if workers else []
    return MasterStateResponse(
        "10.0.0.1", 7077, 6066, ws,
        [app(n, ApplicationState.RUNNING) for n in range(running_apps)],
        [app(running_apps + n, ApplicationState.FINISHED) for n in range(completed_apps)],
        [], drivers, RecoveryState.ALIVE)


class FakeMasterUI:
    """A MasterWebUI serving `state` through a FakeMaster; a context manager."""

    def __init__(self, state: MasterStateResponse,
                 conf: Optional[dict[str, str]] = None) -> None:
        self.master = FakeMaster(state)
        self.env = RpcEnv.create("benchMaster", "127.0.0.1", 0, {})
        self.env.setup_endpoint("Master", self.master)
        self.ui = MasterWebUI(self.env.endpoint_ref(self.env.address, "Master"),
                              "spark://10.0.0.1:7077", conf)
        self.url = f"http://127.0.0.1:{self.ui.start('127.0.0.1', 0)}"

    def __enter__(self) -> "FakeMasterUI":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ui.stop()
        self.env.shutdown()
        self.env.await_termination(10)


def median_ms(url: str, requests: int) -> tuple[float, int]:
    """(median response time in ms over `requests` GETs after one warm-up, body size)."""
    samples = []
    size = 0
    for i in range(requests + 1):
        t0 = time.perf_counter()
        with urllib.request.urlopen(url, timeout=30) as r:
            size = len(r.read())
        if i:
            samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples), size


def run(workers: int = 200, completed_apps: int = 1000, requests: int = 30
        ) -> dict[str, tuple[float, int]]:
    """{path: (median ms, bytes)} for `/` and `/json`."""
    with FakeMasterUI(synthetic_state(workers, completed_apps)) as ui:
        return {path: median_ms(ui.url + path, requests) for path in ("/", "/json")}


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.master_ui")
    p.add_argument("--workers", type=int, default=200)
    p.add_argument("--completed-apps", type=int, default=1000)
    p.add_argument("--requests", type=int, default=30)
    args = p.parse_args(argv)
    results = run(args.workers, args.completed_apps, args.requests)
    print(f"master UI, {args.workers} workers, {args.completed_apps} completed apps, "
          f"median of {args.requests} requests (target < {TARGET_MS:.0f} ms):")
    for path, (ms, size) in results.items():
        verdict = "ok" if ms < TARGET_MS else "OVER TARGET"
        print(f"  GET {path:6} {ms:7.1f} ms  {size / 1024:8.0f} KiB  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
