"""Partitions a task is done with, freed after its result is sent instead of before.

Why: freeing a partition of 250,000 pairs takes ~30 ms (each tuple and int goes back to the
allocator on its own, in an order that jumps through memory once the records are sorted).
A task's last reference to its records usually goes when an iterator over them runs out,
inside the task, so its result waited for the free; and so, at a stage's or a job's end,
did every slot already idle. In a task process the sorter and the held input keep their
lists here, and the serve loop lets go of them once the task's result has gone out. In any
other process nothing is kept.
"""
from __future__ import annotations

from typing import Any

_kept: list = []
_enabled = [False]


def enable() -> None:
    """This process is a task process (its serve loop calls release after each task)."""
    _enabled[0] = True


def keep_until_reply(obj: Any) -> None:
    """Keep obj alive until the running task's result is sent."""
    if _enabled[0]:
        _kept.append(obj)


def release() -> None:
    _kept.clear()
