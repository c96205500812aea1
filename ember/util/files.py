"""Best-effort file removal, and files made where a directory may have vanished.

Why: cleanup paths (a stale pid file, a broadcast's file, a removed shuffle's outputs or
cached blocks, a task's kill marker, a temporary file after a failed write) remove files that
another process or an earlier cleanup may have removed already, or that a vanished directory
takes with it; none of that may fail the caller. And an executor's local directory may be
removed under it (a temp-directory cleaner): the files it makes there next make it again.
"""
from __future__ import annotations

import os
from typing import BinaryIO, Callable, TypeVar

T = TypeVar("T")


def unlink_quietly(path: str) -> None:
    """Remove the file at `path`; one already gone, or that cannot be removed, is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass


def created(path: str, make: Callable[[str], T]) -> T:
    """make(path) for a file `make` creates, its directory made again first if it is gone
    (Spark's executors fail every later task then)."""
    try:
        return make(path)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return make(path)


def open_created(path: str) -> BinaryIO:
    """open(path, "wb"), made by `created`."""
    return created(path, lambda p: open(p, "wb"))
