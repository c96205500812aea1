"""A standalone cluster with standby masters (recovery mode ZOOKEEPER) on this machine, for
tests and benchmarks: N masters sharing one ZooKeeper, workers given every master's URL.

Why a subclass of LocalCluster: workers, logs and the no-process-left-behind `stop()` are the
same; what differs is that there are several masters, that any of them may lead, and that
the tests kill, pause and restart them.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
import uuid
from typing import Any, Callable, Optional

from ember.deploy.local_cluster import LocalCluster, free_port


class LocalHACluster(LocalCluster):
    def __init__(self, workdir: str, zookeeper_url: str, masters: int = 3, workers: int = 2,
                 cores: int = 2, memory: str = "1g", conf: Optional[dict[str, str]] = None,
                 env: Optional[dict[str, str]] = None) -> None:
        conf = dict(conf or {})
        conf.setdefault("spark.deploy.recoveryMode", "ZOOKEEPER")
        conf.setdefault("spark.deploy.zookeeper.url", zookeeper_url)
        conf.setdefault("spark.deploy.zookeeper.dir", f"/ember-{uuid.uuid4().hex[:12]}")
        super().__init__(workdir, workers=workers, cores=cores, memory=memory, conf=conf,
                         env=env)
        # Each master has its own REST port; the shared conf must not name one.
        self.conf.pop("spark.master.rest.port", None)
        self.n_masters = masters
        self.master_ports = [free_port() for _ in range(masters)]
        self.master_uis = [free_port() for _ in range(masters)]
        self.rest_ports = [free_port() for _ in range(masters)]
        self.masters: list[Optional[subprocess.Popen]] = [None] * masters

    @property
    def url(self) -> str:
        return "spark://" + ",".join(f"127.0.0.1:{p}" for p in self.master_ports)

    @property
    def rest_url(self) -> str:
        return "spark://" + ",".join(f"127.0.0.1:{p}" for p in self.rest_ports)

    def start_master(self, i: int = 0) -> subprocess.Popen:
        os.makedirs(self.workdir, exist_ok=True)
        p = self._spawn(["master", "--host", "127.0.0.1", "--port", str(self.master_ports[i]),
                         "--webui-port", str(self.master_uis[i]), *self._conf_args(),
                         "--conf", f"spark.master.rest.port={self.rest_ports[i]}"],
                        f"master-{i}.log")
        self.masters[i] = p
        return p

    def start(self, timeout: float = 60.0) -> "LocalHACluster":
        os.makedirs(self.workdir, exist_ok=True)
        for i in range(self.n_masters):
            self.start_master(i)
        self.wait_for_leader(timeout)
        for i in range(self.n_masters):
            self.wait_master_status(i, ("ALIVE", "STANDBY"), timeout)
        for _ in range(self.n_workers):
            self.add_worker()
        self.wait_for(self.workers_registered, timeout)
        return self

    def master_json(self, i: int, path: str = "/json") -> Any:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.master_uis[i]}{path}",
                                    timeout=5) as r:
            return json.loads(r.read().decode())

    def status(self, i: int) -> Optional[str]:
        """The master's recovery state from its /json, None if it does not answer."""
        p = self.masters[i]
        if p is None or p.poll() is not None:
            return None
        try:
            return self.master_json(i).get("status")
        except (OSError, ValueError):
            return None

    def statuses(self) -> list[Optional[str]]:
        return [self.status(i) for i in range(self.n_masters)]

    def wait_master_status(self, i: int, wanted: tuple[str, ...], timeout: float = 60.0) -> str:
        deadline = time.time() + timeout
        while time.time() < deadline:
            s = self.status(i)
            if s in wanted:
                return s
            time.sleep(0.05)
        raise TimeoutError(f"master {i} not in {wanted} after {timeout}s (is {self.status(i)})"
                           f"\n{self.log(f'master-{i}.log')[-3000:]}")

    def leader(self, exclude: tuple[int, ...] = ()) -> Optional[int]:
        """The one ALIVE master (None if none or several); `exclude`d ones (a paused master,
        which would not answer) are not asked."""
        alive = [i for i in range(self.n_masters)
                 if i not in exclude and self.status(i) == "ALIVE"]
        return alive[0] if len(alive) == 1 else None

    def wait_for_leader(self, timeout: float = 60.0,
                        exclude: tuple[int, ...] = ()) -> int:
        deadline = time.time() + timeout
        while time.time() < deadline:
            i = self.leader(exclude)
            if i is not None:
                return i
            time.sleep(0.05)
        raise TimeoutError(f"no single ALIVE master after {timeout}s: {self.statuses()}\n"
                           + "\n".join(self.log(f"master-{i}.log")[-1500:]
                                       for i in range(self.n_masters)))

    def json(self, path: str = "/json") -> Any:
        """The leader's /json (any master's if none leads right now)."""
        i = self.leader()
        return self.master_json(0 if i is None else i, path)

    def wait_for(self, predicate: Callable[[Any], bool], timeout: float = 30.0) -> Any:
        deadline = time.time() + timeout
        last: Any = None
        while time.time() < deadline:
            try:
                last = self.json()
                if last.get("status") == "ALIVE" and predicate(last):
                    return last
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"cluster condition not met in {timeout}s; last /json: {last}")

    def kill_master(self, i: int = 0) -> None:
        p = self.masters[i]
        if p is not None and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(timeout=15)

    def pause_master(self, i: int) -> None:
        self.masters[i].send_signal(signal.SIGSTOP)

    def resume_master(self, i: int) -> None:
        self.masters[i].send_signal(signal.SIGCONT)

    def daemons(self) -> list[subprocess.Popen | None]:
        return [*self.masters, *self.workers]

    def stop(self) -> None:
        for p in self.masters:
            if p is not None and p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)  # a paused master cannot handle SIGTERM
                except ProcessLookupError:
                    pass
        super().stop()
        for p in self.masters:
            if p is not None:
                try:
                    p.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass
