"""Helpers for the security tests: acting as another Unix user, raw peers, a loopback
capture. Real sockets on 127.0.0.1 only."""
from __future__ import annotations

import json
import os
import select
import socket
import struct
import threading
import time
from typing import Callable

NOBODY = 65534


def as_other_user(fn: Callable[[], object], timeout: float = 20.0) -> object:
    """Run fn() in a forked child that dropped to uid/gid 65534 (needs root); its JSON
    result comes back through a pipe. The child only touches sockets, then _exits."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # child
        code = 0
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            out = json.dumps({"ok": fn()})
        except BaseException as e:   # report, never run the parent's code
            out = json.dumps({"error": f"{type(e).__name__}: {e}"})
            code = 1
        os.write(w, out.encode())
        os._exit(code)
    os.close(w)
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([r], [], [], 0.5)
        if ready:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    result = json.loads(data or b'{"error": "no answer"}')
    if "error" in result:
        raise RuntimeError(result["error"])
    return result["ok"]


def raw_exchange(port: int, payload: bytes = b"", wait: float = 2.0) -> dict:
    """Connect, read what the server says first, send payload, and report what came back
    and whether the server closed the connection."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    got = b""
    closed = False
    s.settimeout(wait)
    try:
        if payload:
            try:
                s.sendall(payload)
            except OSError:
                closed = True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            got += chunk
    finally:
        s.close()
    return {"greeting": got[:6].hex(), "bytes": len(got), "closed": closed}


class LoopbackCapture:
    """Every byte crossing the loopback interface while it runs (an AF_PACKET socket on
    `lo`, what tcpdump does; root only). `contains(b)` searches the TCP payloads."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.2)
        self.payloads: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame, addr = self.sock.recvfrom(262144)
            except socket.timeout:
                continue
            except OSError:
                return
            if addr[2] == socket.PACKET_OUTGOING:
                continue          # each loopback packet shows up twice; keep one copy
            ip = frame[14:]
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != 6:
                continue
            ihl = (ip[0] & 0x0F) * 4
            (total,) = struct.unpack(">H", ip[2:4])
            tcp = ip[ihl:total]
            if len(tcp) < 20:
                continue
            off = (tcp[12] >> 4) * 4
            if len(tcp) > off:
                self.payloads.append(bytes(tcp[off:]))

    def __enter__(self) -> "LoopbackCapture":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def total_bytes(self) -> int:
        return sum(len(p) for p in self.payloads)

    def contains(self, needle: bytes) -> bool:
        return any(needle in p for p in self.payloads)
