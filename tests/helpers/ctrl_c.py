"""Ctrl-C during a job, as PySpark's SIGINT handler must take it, for every master kind
(tests/test_driver_runtime.py local, tests/test_standalone_batching.py a cluster)."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import pytest


def interrupt_a_sleeping_job(sc: Any, task_sleep_s: float) -> float:
    """SIGINT to this process 1 s into a job whose two tasks sleep `task_sleep_s`: the job
    raises KeyboardInterrupt and its tasks are killed (the next job runs at once). Returns
    the seconds from the job's start until that next job ended."""
    assert signal.getsignal(signal.SIGINT) is sc.runtime.sigint_handler
    timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        sc.parallelize(range(2), 2).map(lambda x: time.sleep(task_sleep_s)).collect()
    timer.join()
    assert sc.parallelize([1, 2, 3]).count() == 3       # the sleeping tasks were killed
    return time.monotonic() - t0
