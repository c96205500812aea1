"""Several hosts on one machine: Linux network namespaces joined by veth pairs to a bridge.

Every daemon on 127.0.0.1 hides the faults that only exist between machines (a worker alive
but unreachable, a frozen host, a client that vanishes, one direction of a link lost). A
`Lab` builds N hosts, each a network namespace with one interface (`eth0`, an address of the
benchmarking range 198.18.0.0/24 of RFC 2544, an /etc/hosts naming every host) plugged into
a bridge that lives in its own "switch" namespace, so no test packet ever reaches the
machine's real interfaces. Processes run inside a host with `ip netns exec`, which also
bind-mounts /etc/netns/<ns>/hosts over /etc/hosts for them.

Faults: link down/up (the switch port, like a pulled cable), one-way cuts (an nftables
drop rule on the host's switch port, one direction), SIGSTOP/SIGCONT of every process of a
host, kill -9 of one process, and a small tmpfs that fills up. `teardown()` removes every namespace, veth,
mount, /etc/netns entry and process the lab made, also after a failure, and `leftovers()`
lists whatever is still there (a session-end check asserts it is empty).

Names carry a per-lab prefix, so labs of parallel sessions never collide; the address
range is reused by every lab, which is safe because each lab has its own bridge.
"""
from __future__ import annotations

import concurrent.futures
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

import psutil

__all__ = ["Lab", "Host", "unavailable_reason", "leftovers", "SUBNET", "NETNS_ETC"]

SUBNET = "198.18.0"          # RFC 2544 benchmarking range: never routed, never ours
NETNS_ETC = "/etc/netns"
_CLONE_NEWNET = 0x40000000
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def unavailable_reason() -> Optional[str]:
    """Why namespaces cannot be built here (None when they can): tests skip with it."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root (run the multi-host tests as root)"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if shutil.which(tool) is None:
            return f"`{tool}` not found (apt-get install {package}: make test does it)"
    return None


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run(list(cmd), capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def _netns_list() -> list[str]:
    r = _run("ip", "netns", "list", check=False)
    return [line.split()[0] for line in r.stdout.splitlines() if line.strip()]


def leftovers(prefix: str) -> list[str]:
    """Everything named with `prefix` that still exists: namespaces, /etc/netns entries,
    mounts and processes inside those namespaces."""
    out = [f"netns {n}" for n in _netns_list() if n.startswith(prefix)]
    if os.path.isdir(NETNS_ETC):
        out += [f"{NETNS_ETC}/{n}" for n in os.listdir(NETNS_ETC) if n.startswith(prefix)]
    with open("/proc/self/mounts") as f:
        out += [f"mount {line.split()[1]}" for line in f if prefix in line.split()[1]]
    return out


def _setns(ns: str) -> None:
    """Move the calling thread (only it) into network namespace `ns`."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({ns}): {os.strerror(err)}")
    finally:
        os.close(fd)


@dataclass
class Host:
    index: int
    name: str            # host name in every namespace's /etc/hosts
    ns: str              # network namespace
    ip: str
    port: str            # switch-side veth name (in the switch namespace)
    procs: list[subprocess.Popen] = field(default_factory=list)


class Lab:
    """N hosts plus a hidden observer host the test process talks through (`http_get`)."""

    def __init__(self, workdir: str, hosts: int, prefix: Optional[str] = None,
                 names: Optional[Sequence[str]] = None) -> None:
        self.workdir = workdir
        self.prefix = prefix or f"em{os.getpid() % 10000:04d}{secrets.token_hex(2)}"
        self.switch = f"{self.prefix}-sw"
        wanted = list(names or [f"host{i}" for i in range(1, hosts + 1)])
        self.hosts = [Host(i, wanted[i], f"{self.prefix}-{wanted[i]}", f"{SUBNET}.{10 + i}",
                           f"p{i}") for i in range(hosts)]
        self.observer = Host(hosts, "observer", f"{self.prefix}-obs", f"{SUBNET}.2", "pobs")
        self._mounts: list[str] = []
        self._cuts: set[tuple[str, str]] = set()
        self._http: Optional[concurrent.futures.ThreadPoolExecutor] = None
        # sent with every `http_get` (a cluster with spark.authenticate sets its UI token)
        self.http_headers: dict[str, str] = {}

    # ------------------------------------------------------------------ build / teardown
    def host(self, name: str) -> Host:
        for h in self.hosts:
            if h.name == name:
                return h
        raise KeyError(name)

    def build(self) -> "Lab":
        os.makedirs(self.workdir, exist_ok=True)
        sw = self.switch
        _run("ip", "netns", "add", sw)
        _run("ip", "-n", sw, "link", "set", "lo", "up")
        _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", sw, "link", "set", "br0", "up")
        etc_hosts = "127.0.0.1 localhost\n" + "".join(
            f"{h.ip} {h.name}\n" for h in self.hosts)
        for h in [*self.hosts, self.observer]:
            _run("ip", "netns", "add", h.ns)
            _run("ip", "-n", sw, "link", "add", h.port, "type", "veth", "peer", "name", "eth0",
                 "netns", h.ns)
            _run("ip", "-n", sw, "link", "set", h.port, "master", "br0", "up")
            _run("ip", "-n", h.ns, "addr", "add", f"{h.ip}/24", "dev", "eth0")
            _run("ip", "-n", h.ns, "link", "set", "eth0", "up")
            _run("ip", "-n", h.ns, "link", "set", "lo", "up")
            os.makedirs(f"{NETNS_ETC}/{h.ns}", exist_ok=True)
            with open(f"{NETNS_ETC}/{h.ns}/hosts", "w") as f:
                f.write(etc_hosts)
        self._http = concurrent.futures.ThreadPoolExecutor(
            1, thread_name_prefix=f"{self.prefix}-http", initializer=_setns,
            initargs=(self.observer.ns,))
        return self

    def processes(self, host: Host) -> list[psutil.Process]:
        """Every process inside the host's network namespace (the kernel's view)."""
        r = _run("ip", "netns", "pids", host.ns, check=False)
        out = []
        for pid in r.stdout.split():
            try:
                out.append(psutil.Process(int(pid)))
            except (psutil.NoSuchProcess, ValueError):
                pass
        return out

    def teardown(self) -> None:
        """Remove everything the lab made; safe to call twice and after a failed build."""
        if self._http is not None:
            self._http.shutdown(wait=False, cancel_futures=True)
            self._http = None
        for h in [*self.hosts, self.observer]:
            if h.ns not in _netns_list():
                continue
            procs = self.processes(h)
            for p in procs:
                for sig in (signal.SIGKILL, signal.SIGCONT):
                    try:
                        p.send_signal(sig)
                    except psutil.NoSuchProcess:
                        pass
            psutil.wait_procs(procs, timeout=10)
        for h in [*self.hosts, self.observer]:
            for p in h.procs:
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
        for m in reversed(self._mounts):
            _run("umount", "-l", m, check=False)
        self._mounts.clear()
        for ns in [h.ns for h in [*self.hosts, self.observer]] + [self.switch]:
            if ns in _netns_list():
                _run("ip", "netns", "del", ns, check=False)
            shutil.rmtree(f"{NETNS_ETC}/{ns}", ignore_errors=True)
        if os.path.isdir(NETNS_ETC) and not os.listdir(NETNS_ETC):
            try:
                os.rmdir(NETNS_ETC)
            except OSError:
                pass

    def __enter__(self) -> "Lab":
        try:
            return self.build()
        except BaseException:
            self.teardown()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.teardown()

    # ------------------------------------------------------------------ processes
    def env(self, host: Host, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        env.setdefault("PYTHONHASHSEED", "0")
        env["SPARK_LOCAL_IP"] = host.ip
        env.pop("SPARK_PUBLIC_DNS", None)
        env.update(extra or {})
        return env

    def spawn(self, host: Host, args: Sequence[str], log: str,
              env: Optional[dict[str, str]] = None) -> subprocess.Popen:
        """Start `python -m ember.cli ARGS` on `host`, output appended to workdir/log."""
        out = open(os.path.join(self.workdir, log), "ab")
        try:
            p = subprocess.Popen(["ip", "netns", "exec", host.ns, sys.executable, "-m",
                                  "ember.cli", *args], stdout=out, stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=self.env(host, env),
                                 start_new_session=True)
        finally:
            out.close()
        host.procs.append(p)
        return p

    def run(self, host: Host, args: Sequence[str], timeout: float = 120.0,
            env: Optional[dict[str, str]] = None) -> subprocess.CompletedProcess:
        """Run `python -m ember.cli ARGS` on `host` to completion (a client command); on
        timeout it is killed and the error carries what it printed."""
        p = subprocess.Popen(["ip", "netns", "exec", host.ns, sys.executable, "-m",
                              "ember.cli", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=self.env(host, env),
                             stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise TimeoutError(f"ember {' '.join(args)} on {host.name} ran over {timeout}s:"
                               f"\n{out[-2000:]}\n{err[-4000:]}") from None
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def http_get(self, url: str, timeout: float = 5.0) -> bytes:
        """GET `url` from the observer host (the test process has no route into the lab)."""
        assert self._http is not None, "lab not built"

        def get() -> bytes:
            request = urllib.request.Request(url, headers=self.http_headers)
            with urllib.request.urlopen(request, timeout=timeout) as r:
                return r.read()
        return self._http.submit(get).result(timeout + 5)

    def http_json(self, url: str, timeout: float = 5.0) -> Any:
        return json.loads(self.http_get(url, timeout).decode())

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.workdir, name), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # ------------------------------------------------------------------ faults
    def link_down(self, host: Host) -> None:
        """Pull the host's cable: its switch port goes down (the host sees no carrier)."""
        _run("ip", "-n", self.switch, "link", "set", host.port, "down")

    def link_up(self, host: Host) -> None:
        _run("ip", "-n", self.switch, "link", "set", host.port, "up")

    def cut_outgoing(self, host: Host) -> None:
        """One-way cut: nothing the host sends arrives; it still receives."""
        self._cut(host, "iifname")

    def cut_incoming(self, host: Host) -> None:
        """One-way cut: nothing sent to the host arrives; what it sends still does."""
        self._cut(host, "oifname")

    def _cut(self, host: Host, direction: str) -> None:
        """A silent drop in the switch (a bridge-family nftables rule on the host's port),
        so the sender sees lost packets, not a local error."""
        nft = ["ip", "netns", "exec", self.switch, "nft"]
        if not self._cuts:
            _run(*nft, "add", "table", "bridge", "lab")
            _run(*nft, "add", "chain", "bridge", "lab", "cut",
                 "{ type filter hook forward priority 0; policy accept; }")
        if (host.port, direction) not in self._cuts:
            _run(*nft, "add", "rule", "bridge", "lab", "cut", direction, host.port, "drop")
            self._cuts.add((host.port, direction))

    def heal(self, host: Host) -> None:
        """Undo every network fault of the host (link up, no one-way cut)."""
        mine = {c for c in self._cuts if c[0] == host.port}
        if mine:
            nft = ["ip", "netns", "exec", self.switch, "nft"]
            _run(*nft, "flush", "chain", "bridge", "lab", "cut")
            self._cuts -= mine
            for port, direction in self._cuts:
                _run(*nft, "add", "rule", "bridge", "lab", "cut", direction, port, "drop")
        self.link_up(host)

    def pause(self, host: Host) -> list[psutil.Process]:
        """SIGSTOP every process of the host (a frozen machine, a long GC pause)."""
        procs = self.processes(host)
        for p in procs:
            try:
                p.send_signal(signal.SIGSTOP)
            except psutil.NoSuchProcess:
                pass

        # a process that exited before its stop stays a zombie while its parent is stopped
        done = (psutil.STATUS_STOPPED, psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)

        def stopped() -> bool:
            try:
                return all(p.status() in done for p in procs if p.is_running())
            except psutil.NoSuchProcess:
                return False
        self.wait_until(stopped, 5, f"every process of {host.name} stopped", interval=0.02)
        return procs

    def resume(self, host: Host) -> None:
        for p in self.processes(host):
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.NoSuchProcess:
                pass

    @staticmethod
    def kill9(pid: int) -> None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def small_disk(self, name: str, size: str = "4m") -> str:
        """A tmpfs of `size` at workdir/<prefix>-<name>, unmounted at teardown."""
        path = os.path.join(self.workdir, f"{self.prefix}-{name}")
        os.makedirs(path, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", path)
        self._mounts.append(path)
        return path

    @staticmethod
    def fill(path: str) -> str:
        """Fill the file system of `path` to the last byte; returns the filler to delete."""
        filler = os.path.join(path, "filler")
        with open(filler, "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        return filler

    # ------------------------------------------------------------------ waiting
    @staticmethod
    def wait_until(predicate: Callable[[], Any], timeout: float, what: str,
                   interval: float = 0.2) -> Any:
        deadline = time.monotonic() + timeout
        last_err: Optional[BaseException] = None
        while time.monotonic() < deadline:
            try:
                v = predicate()
                if v:
                    return v
            except Exception as e:  # noqa: BLE001 - surfaced in the timeout message
                last_err = e
            time.sleep(interval)
        raise TimeoutError(f"{what}: not within {timeout}s (last error: {last_err!r})")
