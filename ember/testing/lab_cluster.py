"""A standalone cluster spread over the hosts of a `Lab`: master, workers, drivers and
`ember submit` clients each in the namespace of their host, every one told its host's
address (``--host`` and ``SPARK_LOCAL_IP``), as an operator would on real machines.

The daemons listen on the hosts' non-loopback addresses, so the cluster authenticates as a
real one must (secure by default refuses otherwise): spark.authenticate=true with a
32-byte secret in a 0600 file named by spark.authenticate.secret.file (never the secret on
a command line), shared by every host (they share this machine's file system). The lab's
HTTP requests carry a UI bearer token signed with it.

Each host has its own network stack, so Spark's default ports (7077, 8080, 6066, 8081) are
used on every host without collisions, as on a real cluster.
"""
from __future__ import annotations

import os
import re
import secrets
import subprocess
import textwrap
from typing import Any, Callable, Optional, Sequence

from ember.web.security import max_token_lifetime, mint_token, ui_secret_key
from ember.testing.netns import Host, Lab

__all__ = ["LabCluster", "FINAL_DRIVER_STATES", "MASTER_PORT", "MASTER_UI_PORT", "REST_PORT",
           "WORKER_UI_PORT"]

MASTER_PORT, MASTER_UI_PORT, REST_PORT, WORKER_UI_PORT = 7077, 8080, 6066, 8081
FINAL_DRIVER_STATES = {"FINISHED", "FAILED", "ERROR", "KILLED"}


class LabCluster:
    def __init__(self, lab: Lab, master: Host, workers: Sequence[Host], *,
                 conf: Optional[dict[str, str]] = None, cores: int = 1,
                 memory: str = "1g", work_dirs: Optional[dict[str, str]] = None) -> None:
        self.lab = lab
        self.master_host = master
        self.worker_hosts = list(workers)
        self.conf = dict(conf or {})
        self.conf.setdefault("spark.master.rest.enabled", "true")
        self.conf.setdefault("spark.master.rest.port", str(REST_PORT))
        if "spark.authenticate" not in self.conf:
            self.conf["spark.authenticate"] = "true"
            self.conf["spark.authenticate.secret.file"] = _write_secret(lab.workdir)
        key = ui_secret_key(self.conf)
        if key is not None:
            lab.http_headers["Authorization"] = "Bearer " + mint_token(
                key, "lab", max_token_lifetime(self.conf))
        self.cores = cores
        self.memory = memory
        self.work_dirs = dict(work_dirs or {})
        self.master: Optional[subprocess.Popen] = None
        self.workers: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return f"spark://{self.master_host.name}:{MASTER_PORT}"

    def conf_args(self, extra: Optional[dict[str, str]] = None) -> list[str]:
        out: list[str] = []
        for k, v in {**self.conf, **(extra or {})}.items():
            out += ["--conf", f"{k}={v}"]
        return out

    # ------------------------------------------------------------------ daemons
    def start(self, timeout: float = 60.0) -> "LabCluster":
        self.start_master()
        self.wait_for(lambda j: j.get("status") == "ALIVE", timeout, "master ALIVE")
        for h in self.worker_hosts:
            self.start_worker(h)
        self.wait_for(lambda j: j.get("aliveworkers") == len(self.worker_hosts), timeout,
                      "every worker ALIVE")
        return self

    def start_master(self) -> subprocess.Popen:
        h = self.master_host
        self.master = self.lab.spawn(h, ["master", "--host", h.name, "--port", str(MASTER_PORT),
                                         "--webui-port", str(MASTER_UI_PORT),
                                         *self.conf_args()], f"master-{h.name}.log")
        return self.master

    def start_worker(self, h: Host) -> subprocess.Popen:
        wdir = self.work_dirs.get(h.name) or os.path.join(self.lab.workdir, f"work-{h.name}")
        # a host given a work dir keeps its scratch (shuffle) dirs on the same disk
        env = {"SPARK_LOCAL_DIRS": wdir} if h.name in self.work_dirs else None
        p = self.lab.spawn(h, ["worker", "--host", h.name, "--webui-port", str(WORKER_UI_PORT),
                               "-c", str(self.cores), "-m", self.memory, "-d", wdir,
                               *self.conf_args(), self.url], f"worker-{h.name}.log", env=env)
        self.workers[h.name] = p
        return p

    # ------------------------------------------------------------------ observing
    def json(self, path: str = "/json") -> Any:
        return self.lab.http_json(f"http://{self.master_host.ip}:{MASTER_UI_PORT}{path}")

    def wait_for(self, predicate: Callable[[Any], Any], timeout: float, what: str) -> Any:
        last: list[Any] = [None]

        def check() -> Any:
            last[0] = self.json()
            return last[0] if predicate(last[0]) else None
        try:
            return self.lab.wait_until(check, timeout, what)
        except TimeoutError as e:
            raise TimeoutError(f"{e}\nlast /json: {last[0]}\n"
                               + self.lab.log(f"master-{self.master_host.name}.log")[-3000:]
                               ) from None

    def worker_state(self, host: Host, j: Optional[Any] = None) -> list[str]:
        """States of every worker entry of `host` in the master's /json (oldest first)."""
        j = j if j is not None else self.json()
        return [w["state"] for w in j["workers"] if w["host"] == host.name]

    def driver(self, driver_id: str, j: Optional[Any] = None) -> Optional[dict]:
        j = j if j is not None else self.json()
        for d in j["activedrivers"] + j["completeddrivers"]:
            if d["id"] == driver_id:
                return d
        return None

    def wait_driver(self, driver_id: str, states: set[str] = FINAL_DRIVER_STATES,
                    timeout: float = 120.0) -> dict:
        j = self.wait_for(lambda j: (self.driver(driver_id, j) or {}).get("state") in states,
                          timeout, f"{driver_id} in {sorted(states)}")
        return self.driver(driver_id, j) or {}

    # ------------------------------------------------------------------ clients
    def submit(self, host: Host, app: str, *app_args: str, deploy_mode: str = "cluster",
               conf: Optional[dict[str, str]] = None, extra: Sequence[str] = (),
               timeout: float = 180.0, master: Optional[str] = None,
               env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
        return self.lab.run(host, ["submit", "--master", master or self.url, "--deploy-mode",
                                   deploy_mode, *self.conf_args(conf), *extra, app,
                                   *app_args], timeout=timeout, env=env)

    def submit_cluster(self, host: Host, app: str, *app_args: str, **kw: Any) -> str:
        """`ember submit --deploy-mode cluster` from `host`; returns the driver id."""
        r = self.submit(host, app, *app_args, **kw)
        m = re.search(r"driver-\d{14}-\d{4}", r.stdout + r.stderr)
        if r.returncode != 0 or not m:
            raise RuntimeError(f"submit failed ({r.returncode}): {r.stdout}\n{r.stderr}")
        return m.group(0)

    def status(self, host: Host, driver_id: str) -> subprocess.CompletedProcess:
        return self.lab.run(host, ["submit", "--master", self.url, *self.conf_args(), "--status",
                                   driver_id],
                            timeout=60)


def _write_secret(directory: str) -> str:
    """A fresh 32-byte (64 hex digits) cluster secret in a file only this user can read."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, "cluster.secret")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path


def write_app(directory: str, name: str, body: str) -> str:
    """Write a dedented application file (all hosts share this machine's file system)."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(body))
    return path
