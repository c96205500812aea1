"""A real, single-node ZooKeeper server on this machine, for tests and benchmarks.

Why a real server: leader election, session expiry and a server restart are exactly what the
ZOOKEEPER recovery mode must survive, and only the real server shows how sessions, watches
and ephemeral nodes behave then. It runs Debian's ZooKeeper jars (`apt-get install
zookeeper`, done by `make test`) with the machine's Java, on a free loopback port, with its
own data directory, so sessions survive `stop()` + `start()` on the same instance as they do
across a real server restart. Nothing is left running: `stop()` kills the JVM and waits.

A short tick (250 ms) makes session expiry follow the client's timeout closely (the server
checks expiry once per tick) and allows sessions down to 2 ticks.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from contextlib import contextmanager
from typing import Iterator, Optional

from ember.deploy.local_cluster import free_port

DEBIAN_JAR = "/usr/share/java/zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 250


def zookeeper_classpath() -> str:
    """Debian's zookeeper.jar (its manifest names every other jar it needs), plus an SLF4J
    binding when one is installed so the server log is not empty. Override with
    EMBER_ZOOKEEPER_CLASSPATH."""
    override = os.environ.get("EMBER_ZOOKEEPER_CLASSPATH")
    if override:
        return override
    if not os.path.isfile(DEBIAN_JAR):
        raise RuntimeError(f"No ZooKeeper server: {DEBIAN_JAR} is missing. Install Debian's "
                           "zookeeper package (make test does: apt-get install zookeeper) or "
                           "set EMBER_ZOOKEEPER_CLASSPATH to the server's jars")
    parts = [DEBIAN_JAR]
    binding = "/usr/share/java/slf4j-simple.jar"
    if os.path.isfile(binding):
        parts.append(binding)
    return os.pathsep.join(parts)


class LocalZooKeeper:
    """One ZooKeeper server process on 127.0.0.1:<port>; `url` is its connect string."""

    def __init__(self, workdir: str, port: Optional[int] = None) -> None:
        self.workdir = workdir
        self.port = port or free_port()
        self.data_dir = os.path.join(workdir, "data")
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _write_config(self) -> str:
        os.makedirs(self.data_dir, exist_ok=True)
        path = os.path.join(self.workdir, "zoo.cfg")
        with open(path, "w") as f:
            f.write(f"tickTime={TICK_MS}\n"
                    f"dataDir={self.data_dir}\n"
                    f"clientPort={self.port}\n"
                    "clientPortAddress=127.0.0.1\n"
                    "admin.enableServer=false\n"
                    f"minSessionTimeout={2 * TICK_MS}\n"
                    "maxSessionTimeout=120000\n"
                    "maxClientCnxns=0\n"
                    "4lw.commands.whitelist=ruok,srvr\n")
        return path

    def start(self, timeout: float = 60.0) -> "LocalZooKeeper":
        """Start the server (again, after `stop`: same port, same data) and wait until it
        answers `ruok`."""
        if self.proc is not None and self.proc.poll() is None:
            return self
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("No java on the PATH: the ZooKeeper server needs Java 17 "
                               "(apt-get install default-jre-headless)")
        cfg = self._write_config()
        log = open(os.path.join(self.workdir, "zookeeper.log"), "ab")
        try:
            self.proc = subprocess.Popen(
                [java, "-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                 "-Dzookeeper.jmx.log4j.disable=true", "-cp", zookeeper_classpath(),
                 MAIN_CLASS, cfg],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True)
        finally:
            log.close()
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}:\n"
                                   + self.log()[-3000:])
            if self.ruok():
                return self
            time.sleep(0.1)
        self.stop()
        raise TimeoutError(f"ZooKeeper did not start in {timeout}s:\n" + self.log()[-3000:])

    def ruok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                s.sendall(b"ruok")
                return s.recv(4) == b"imok"
        except OSError:
            return False

    def stop(self, sig: int = signal.SIGKILL) -> None:
        """Stop the server (kill -9 by default: the abrupt loss the masters must survive)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=15)
        self.proc = None

    @contextmanager
    def outage(self, seconds: float) -> Iterator[None]:
        """The server is down for `seconds` (then started again on the same port and data)
        while the body runs; the body runs once the server is down."""
        self.stop()
        started = time.monotonic()
        try:
            yield
        finally:
            rest = seconds - (time.monotonic() - started)
            if rest > 0:
                time.sleep(rest)
            self.start()

    def log(self) -> str:
        try:
            with open(os.path.join(self.workdir, "zookeeper.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def destroy(self) -> None:
        """Stop and remove the data directory."""
        self.stop()
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> "LocalZooKeeper":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.destroy()
