"""A real standalone cluster on this machine: a master and N workers as subprocesses.

Behind the `local-cluster[N,C,M]` master (Spark's test master, here with real daemons) and
used by tests and benchmarks: free ports on 127.0.0.1 are picked per process, and stop()
kills every process tree it started, so a failing test never leaves daemons or executors
behind.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in env.get("PYTHONPATH", "").split(
        os.pathsep) if p])
    env.setdefault("PYTHONHASHSEED", "0")
    env.update(extra or {})
    return env


def _parent_death_signal() -> Any:
    """A preexec_fn asking Linux to SIGTERM the child when this thread's process dies
    (prctl PR_SET_PDEATHSIG), resolved before the fork so the child only makes the call;
    None where unavailable. Only from the main thread: the signal follows the forking
    thread, and any other thread may end before the process does."""
    import ctypes
    import threading
    if not sys.platform.startswith("linux") or \
            threading.current_thread() is not threading.main_thread():
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, int(signal.SIGTERM))      # 1 = PR_SET_PDEATHSIG


class LocalCluster:
    def __init__(self, workdir: str, workers: int = 2, cores: int = 2, memory: str = "1g",
                 conf: dict[str, str] | None = None,
                 env: dict[str, str] | None = None, die_with_parent: bool = False,
                 worker_hosts: list[str] | None = None) -> None:
        """die_with_parent: the daemons get SIGTERM if this process dies without stop()
        (killed, os._exit), as Spark's in-process local-cluster daemons would die with it.
        worker_hosts: loopback addresses (127.0.0.x) the workers bind, one per worker in
        turn, so that they count as distinct hosts (speculation, exclusion per node)."""
        self.worker_hosts = list(worker_hosts or ["127.0.0.1"])
        self.workdir = workdir
        self.die_with_parent = die_with_parent
        self.n_workers = workers
        self.cores = cores
        self.memory = memory
        self.conf = dict(conf or {})
        self.env = env
        self.master_port = free_port()
        self.master_ui = free_port()
        self.rest_port = int(self.conf.setdefault("spark.master.rest.port", str(free_port())))
        self.master: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.worker_ui: list[int] = []

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    @property
    def rest_url(self) -> str:
        return f"spark://127.0.0.1:{self.rest_port}"

    def _conf_args(self) -> list[str]:
        out: list[str] = []
        for k, v in self.conf.items():
            out += ["--conf", f"{k}={v}"]
        return out

    def _spawn(self, args: list[str], log: str) -> subprocess.Popen:
        out = open(os.path.join(self.workdir, log), "ab")
        return subprocess.Popen([sys.executable, "-P", "-m", "ember.cli", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=_env(self.env), start_new_session=True,
                                preexec_fn=_parent_death_signal() if self.die_with_parent
                                else None)

    def start(self, timeout: float = 30.0) -> "LocalCluster":
        os.makedirs(self.workdir, exist_ok=True)
        self.start_master()
        self.wait_for(lambda j: j.get("status") == "ALIVE", timeout)
        for i in range(self.n_workers):
            self.add_worker()
        self.wait_for(self.workers_registered, timeout)
        return self

    def workers_registered(self, master_json: dict) -> bool:
        """Whether every worker started is alive in the master's /json; a worker that exited
        meanwhile (a bad resource script, say) raises RuntimeError with its log at once,
        rather than after the whole wait."""
        for i, p in enumerate(self.workers):
            if p.poll() is not None:
                raise RuntimeError(f"worker {i} exited with {p.returncode}:\n"
                                   + self.log(f"worker-{i}.log")[-3000:])
        return master_json.get("aliveworkers") == len(self.workers)

    def start_master(self) -> subprocess.Popen:
        """Start the master on the cluster's ports (again, after `kill_master`)."""
        self.master = self._spawn(["master", "--host", "127.0.0.1", "--port",
                                   str(self.master_port), "--webui-port", str(self.master_ui),
                                   *self._conf_args()], "master.log")
        return self.master

    def kill_master(self) -> None:
        """kill -9 of the master (master recovery tests)."""
        if self.master is not None:
            self.master.kill()
            self.master.wait(timeout=10)

    def add_worker(self) -> subprocess.Popen:
        i = len(self.workers)
        ui = free_port()
        wdir = os.path.join(self.workdir, f"work-{i}")
        host = self.worker_hosts[i % len(self.worker_hosts)]
        p = self._spawn(["worker", "--host", host, "--webui-port", str(ui), "-c",
                         str(self.cores), "-m", self.memory, "-d", wdir, *self._conf_args(),
                         self.url], f"worker-{i}.log")
        self.workers.append(p)
        self.worker_ui.append(ui)
        return p

    def auth_headers(self) -> dict[str, str]:
        """A fresh bearer token for the web UIs when the cluster authenticates, else {}."""
        from ember.web.security import mint_token, ui_secret_key
        from ember.rpc.config import AUTH_SECRET, ENV_AUTH_SECRET
        conf = dict(self.conf)
        if (self.env or {}).get(ENV_AUTH_SECRET) and not conf.get(AUTH_SECRET):
            conf[AUTH_SECRET] = self.env[ENV_AUTH_SECRET]   # the daemons' secret, by env
        key = ui_secret_key(conf)
        return {} if key is None else {"Authorization": "Bearer "
                                       + mint_token(key, "ember-test", 300)}

    def json(self, path: str = "/json") -> Any:
        req = urllib.request.Request(f"http://127.0.0.1:{self.master_ui}{path}",
                                     headers=self.auth_headers())
        with urllib.request.urlopen(req, timeout=5) as r:
            return json.loads(r.read().decode())

    def wait_for(self, predicate: Any, timeout: float = 30.0) -> Any:
        deadline = time.time() + timeout
        last: Any = None
        while time.time() < deadline:
            if self.master is not None and self.master.poll() is not None:
                raise RuntimeError(f"master exited with {self.master.returncode}:\n"
                                   + self.log("master.log"))
            try:
                last = self.json()
                if predicate(last):
                    return last
            except (OSError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"cluster condition not met in {timeout}s; last /json: {last}\n"
                           + self.log("master.log")[-3000:])

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.workdir, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def worker_tree(self, i: int) -> list[psutil.Process]:
        try:
            p = psutil.Process(self.workers[i].pid)
            return [p] + p.children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def kill_worker(self, i: int) -> None:
        """kill -9 of a worker and of every process it started (its executors)."""
        procs = self.worker_tree(i)
        for p in procs:
            try:
                p.send_signal(signal.SIGKILL)
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(procs, timeout=5)

    def daemons(self) -> list[subprocess.Popen | None]:
        """The daemon processes this cluster started (None where one is down)."""
        return [self.master, *self.workers]

    def all_processes(self) -> list[psutil.Process]:
        out: list[psutil.Process] = []
        for p in self.daemons():
            if p is None:
                continue
            try:
                proc = psutil.Process(p.pid)
                out += [proc] + proc.children(recursive=True)
            except psutil.NoSuchProcess:
                pass
        return out

    def stop(self) -> None:
        procs = self.all_processes()
        for p in procs:
            try:
                p.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _gone, alive = psutil.wait_procs(procs, timeout=10)
        for p in alive:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)
        for p in [self.master, *self.workers]:
            if p is not None:
                try:
                    p.wait(timeout=1)
                except subprocess.TimeoutExpired:
                    pass

    def __enter__(self) -> "LocalCluster":
        try:
            return self.start()
        except BaseException:
            self.stop()         # __exit__ does not run when __enter__ raises: no strays
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()
