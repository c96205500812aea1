"""Ctrl-C during a job, as PySpark's SIGINT handler must take it, for every master kind
(tests/test_driver_runtime.py local, tests/test_standalone_batching.py a cluster)."""
from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any, Callable

import pytest

from tests.helpers import signal_steps
from tests.helpers.signal_steps import IGNORED_IN_FINALIZERS  # noqa: F401 (the tests' marker)


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



def ctrl_c_at_every_step(sc: Any, job: Callable[[], Any]) -> int:
    """A Ctrl-C at each point of a warm job where Python could run the handler (on the
    calling thread: the submission, the results it handles, the event loop's turn taken and
    given back; tests/helpers/signal_steps.py): each ends the job with KeyboardInterrupt or
    lets it end right, and a job after it answers right within 20 s. Before, a Ctrl-C
    between the loop's non-blocking take of its turn and the `try` that gives it back kept
    the turn for good, and every later job hung. Returns how many Ctrl-C's ended the job."""
    expected = job()

    def op(_: Any) -> None:
        assert job() == expected

    def check(_: Any, raised: bool) -> None:
        out: list = []
        t = threading.Thread(target=lambda: out.append(job()), daemon=True)
        t.start()
        t.join(20)
        assert out == [expected], "the job after a Ctrl-C hung or answered wrong"

    return signal_steps.every_step(lambda: None, op, check, signal.SIGINT, KeyboardInterrupt)
