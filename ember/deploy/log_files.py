"""Which files under a worker's work dir may be read as logs, and slices of them.

Why one module: two paths read logs with ids that come from the network - the web UI's
`/logPage/` and `/log` (Spark's LogPage) and RequestDriverLog (`ember logs`, through the
master) - and neither may ever read outside the work dir. Both name a directory by plain
ids (`<appId>/<executorId>` or `<driverId>`), so one rule decides: every id is a plain
name (no separators, no "..", no dotfiles) and the directory, symlinks resolved, is inside
the work dir.
"""
from __future__ import annotations

import os
import re
from typing import Iterable, Optional

MAX_LOG_SLICE = 4 << 20      # one answer is held in memory (and one RPC message): a cap
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def is_in_directory(parent: str, child: str) -> bool:
    parent = os.path.realpath(parent)
    child = os.path.realpath(child)
    return child == parent or child.startswith(parent.rstrip(os.sep) + os.sep)


def log_dir(work_dir: str, ids: Iterable[str]) -> Optional[str]:
    """`<work_dir>/<id>/...` (with a trailing separator), or None when an id is not a plain
    name or the directory resolves outside the work dir."""
    ids = list(ids)
    if not ids or not all(_ID.fullmatch(i or "") for i in ids):
        return None
    d = os.path.join(work_dir, *ids) + os.sep
    return d if is_in_directory(work_dir, d) else None


def read_slice(path: str, offset: Optional[int], length: int) -> tuple[bytes, int, int]:
    """(data, start, total size): up to `length` bytes (at most MAX_LOG_SLICE) from byte
    `offset`; None means the last `length` bytes, a negative offset counts from the end.
    Raises OSError."""
    length = max(0, min(length, MAX_LOG_SLICE))
    with open(path, "rb") as f:
        total = os.fstat(f.fileno()).st_size
        if offset is None:
            start = max(0, total - length)
        else:
            start = max(0, total + offset) if offset < 0 else min(offset, total)
        f.seek(start)
        return f.read(min(length, total - start)), start, total
