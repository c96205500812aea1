"""Best-effort file removal, one copy for every layer.

Why: cleanup paths (a stale pid file, a broadcast's file, a removed shuffle's outputs or
cached blocks, a task's kill marker, a temporary file after a failed write) remove files that
another process or an earlier cleanup may have removed already, or that a vanished directory
takes with it; none of that may fail the caller.
"""
from __future__ import annotations

import os


def unlink_quietly(path: str) -> None:
    """Remove the file at `path`; one already gone, or that cannot be removed, is no error."""
    try:
        os.unlink(path)
    except OSError:
        pass
