"""`kill -3` (SIGQUIT) writes every thread's stack to stderr and the process goes on, as a
JVM's thread dump does: the one way to see where a daemon, driver or executor that seems
stuck is waiting, without stopping it (its stderr is its log file or the terminal)."""
from __future__ import annotations

import faulthandler
import signal
import sys


def install() -> None:
    """Dump all threads on SIGQUIT; a no-op where there is no SIGQUIT or no real stderr."""
    quit_signal = getattr(signal, "SIGQUIT", None)
    if quit_signal is None or sys.stderr is None:
        return
    try:
        faulthandler.register(quit_signal, file=sys.stderr, all_threads=True)
    except (AttributeError, OSError, RuntimeError, ValueError):
        pass     # stderr without a file descriptor (an embedding host), or not main thread
