"""kill -3 of an ember process: every thread's stack on stderr, and the process goes on."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGQUIT"), reason="no SIGQUIT here")

PROGRAM = """
import sys, threading, time
from ember.util import thread_dump
thread_dump.install()
def parked_in_a_helper():
    time.sleep(30)
threading.Thread(target=parked_in_a_helper, daemon=True).start()
print("ready", flush=True)
sys.stdin.readline()
print("still here", flush=True)
"""


def test_sigquit_dumps_every_thread_and_the_process_goes_on():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    p = subprocess.Popen([sys.executable, "-c", PROGRAM], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "PYTHONPATH": root})
    try:
        assert p.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        p.send_signal(signal.SIGQUIT)
        time.sleep(0.5)
        out, err = p.communicate("go\n", timeout=20)
    finally:
        p.kill()
    assert p.returncode == 0 and out.strip() == "still here"
    assert "in parked_in_a_helper" in err and "Current thread" in err, err
