"""Executors' own threads and task processes as SCHED_BATCH (Linux).

Why: a SCHED_BATCH thread gets the same share of the CPU as a SCHED_OTHER one, but its
wake-ups never preempt whoever woke it. This VM packs runnable tasks onto few vCPUs:
- An executor relays, it does not compute. Woken by the driver's LaunchTask (or by a task
  process's result), a SCHED_OTHER executor preempted the driver on that CPU, so the driver
  writing one LaunchTask per executor was held ~130 us per write while the first executor
  ran, before it wrote to the next. Measured on 2 workers x 2 cores (12 alternating blocks
  of 200 warm 2-task jobs in one driver): 0.89 -> 0.76 and 0.66 -> 0.62 ms.
- A task process woken to start a task that runs for milliseconds took the CPU of the
  driver (or executor) that wrote it; the scheduler then kept the preempted writer on that
  CPU, still cache-hot, for a time slice (~4 ms seen) even when the other CPU went idle,
  and the other task process's result waited for it. spark.ember.task.batchScheduling.
Only a SCHED_OTHER process switches; a policy chosen for it (chrt) is left alone.
"""
from __future__ import annotations

import os

# the policy the fork server sets before it forks task processes
TASK_POLICY_ENV = "EMBER_TASK_SCHED_POLICY"


def batch_threads() -> int | None:
    """Every thread of this process SCHED_BATCH (the threads they start inherit it): the
    policy they had, for the task processes, or None if nothing was changed (not
    SCHED_OTHER, or no such call here)."""
    try:
        before = os.sched_getscheduler(0)
        if before != os.SCHED_OTHER:
            return None
        for tid in os.listdir("/proc/self/task"):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_BATCH, os.sched_param(0))
            except ProcessLookupError:      # the thread ended meanwhile
                pass
    except (AttributeError, OSError):
        return None
    return before


def task_policy(batch_tasks: bool, original: int | None = None) -> int | None:
    """The policy for task processes (TASK_POLICY_ENV), or None to leave them at the fork
    server's own. `batch_tasks`: spark.ember.task.batchScheduling; `original`: the policy
    this process had before batch_threads switched it (None: it was not switched)."""
    try:
        policy = original if original is not None else os.sched_getscheduler(0)
        if batch_tasks and policy == os.SCHED_OTHER:
            return os.SCHED_BATCH
    except (AttributeError, OSError):
        pass
    return original


def apply_task_policy() -> None:
    """In the fork server, before its first fork: the policy named in the environment by
    the driver or executor that started it."""
    value = os.environ.pop(TASK_POLICY_ENV, None)
    if value is None:
        return
    try:
        os.sched_setscheduler(0, int(value), os.sched_param(0))
    except (AttributeError, OSError, ValueError):
        pass
