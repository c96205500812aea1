"""The scenario both backends' slot-queue tests run (spark.ember.scheduler.queueShortTasks):
tiny tasks that must each run once with some of them having waited on a busy slot, then a
job whose last tasks are long, cancelled while short ones wait behind them."""
from __future__ import annotations

import threading
import time
from typing import Any, Callable

from ember.errors import JobCancelledException


def run_tiny_tasks_counting_promotions(sc: Any, tasks: int = 2000) -> list[int]:
    """A job of `tasks` one-record tasks; each runs once (an accumulator counts them). The
    ids of the tasks that waited on a busy slot before they started."""
    sched = sc.runtime.task_scheduler
    promoted: list[int] = []
    promote = sched.promote_queued
    sched.promote_queued = lambda tid: (promoted.append(tid), promote(tid))[1]
    acc = sc.accumulator(0)

    def count(x):
        acc.add(1)
        return x
    try:
        assert sc.parallelize(range(tasks), tasks).map(count).sum() == sum(range(tasks))
    finally:
        sched.promote_queued = promote
    assert acc.value == tasks
    return promoted


def cancel_a_job_with_waiting_tasks(sc: Any, slots: int, waiting: Callable[[], bool]) -> None:
    """40 short tasks, then 2 x `slots` that sleep a minute: once `waiting()` (tasks wait
    behind the sleepers), cancel the job group; the job must end cancelled, promptly."""
    errors: list = []

    def slow_after_short(x):
        if x >= 40:
            time.sleep(60)
        return x

    def run() -> None:
        sc.setJobGroup("queued", "waiting tasks to cancel")
        try:
            sc.parallelize(range(40 + 2 * slots), 40 + 2 * slots).map(slow_after_short).count()
        except Exception as e:
            errors.append(e)
    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 30
    while not waiting():
        assert time.time() < deadline, "no task waited behind the long ones"
        time.sleep(0.02)
    sc.cancelJobGroup("queued")
    t.join(30)
    assert not t.is_alive() and isinstance(errors[0], JobCancelledException)


def wait_until_free(free: Callable[[], bool], state: Callable[[], Any]) -> None:
    deadline = time.time() + 30
    while not free():
        assert time.time() < deadline, state()
        time.sleep(0.05)
