"""A process on a pseudo-terminal, for tests of what a person at a terminal sees (the
shell's banner and prompt, the demo's keep-alive), with ANSI escapes stripped."""
from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import time

from tests.cluster import _env

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """A process on a pseudo-terminal: what it prints is read back, keys are typed in."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.fd, child = pty.openpty()
        env = _env({"TERM": "dumb", "COLUMNS": "200", **(env or {})})
        self.proc = subprocess.Popen(argv, stdin=child, stdout=child, stderr=child, env=env,
                                     start_new_session=True)
        os.close(child)
        self.screen = ""

    def read_until(self, pattern: str, timeout: float = 60) -> re.Match:
        deadline = time.time() + timeout
        while True:
            m = re.search(pattern, self.screen)
            if m:
                return m
            left = deadline - time.time()
            if left <= 0:
                raise AssertionError(f"{pattern!r} not shown in {timeout}s:\n{self.screen}")
            ready, _, _ = select.select([self.fd], [], [], min(left, 0.5))
            if ready:
                try:
                    raw = os.read(self.fd, 65536).decode(errors="replace")
                    self.screen += ANSI.sub("", raw)     # IPython's colours and cursor
                except OSError:       # the process closed the terminal
                    if self.proc.poll() is not None:
                        raise AssertionError(f"{pattern!r} not shown; exited "
                                             f"{self.proc.returncode}:\n{self.screen}")

    def type(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def close(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(10)
            os.close(self.fd)
