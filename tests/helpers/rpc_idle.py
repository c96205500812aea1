"""Waiting for an RpcEnv's loop thread to have run what was posted, and to be back in
select: the state in which another thread may borrow its turn (run_here) or claim its
sockets (claim/drive)."""
from __future__ import annotations

import threading
import time

from ember.rpc import RpcEnv


def settled(env: RpcEnv) -> None:
    """Wait until the loop thread has run everything posted so far."""
    done = threading.Event()
    env.call_soon(done.set)
    assert done.wait(5)


def idle(env: RpcEnv) -> None:
    """Settled, and the loop thread back in select (where it lets go of the turn)."""
    settled(env)
    deadline = time.monotonic() + 5
    while env._turn.locked():
        assert time.monotonic() < deadline, "the loop never went idle"
        time.sleep(0.001)
