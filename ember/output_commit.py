"""Writing an output directory the way Hadoop's FileOutputCommitter (algorithm 1) does.

Why a protocol and not "each task writes its part file": a task attempt that fails half way,
or a speculative or retried copy of a task, must leave no part file behind, and a reader
must be able to tell a finished output from a partial one. So:

- the job refuses an existing output path (Hadoop's FileAlreadyExistsException text) and
  creates `<out>/_temporary/0`;
- each task attempt writes `<out>/_temporary/0/_temporary/attempt_<stage>_<partition>_<tid>/
  part-NNNNN` and returns that path with its result;
- the driver gets exactly one result per partition (the attempt the scheduler counted), moves
  those files to `<out>/part-NNNNN`, deletes `_temporary` (every other attempt's file with
  it) and writes `_SUCCESS` last; a failed job deletes `_temporary` and leaves no
  `_SUCCESS`.

It works the same on local paths (os calls) and URLs (fsspec, where a move is a copy and a
delete, as with S3A's committer). Readers skip `_`-names, so `_temporary` is never read.
"""
from __future__ import annotations

import contextlib
import os
import shutil
from typing import Any, Iterator

from ember import fs
from ember.errors import FileAlreadyExistsException
from ember.util.compressed import compressed

PENDING_DIR = "_temporary"
SUCCESS_MARKER = "_SUCCESS"
_JOB_ATTEMPT = "0"


class OutputCommitter:
    """One save job's output directory. Picklable (paths only), so tasks carry it."""

    def __init__(self, path: str) -> None:
        self.local = fs.is_local(path)
        self.root = fs.local_path(path) if self.local else path.rstrip("/")
        self.display = ("file:" + self.root) if self.local else self.root

    def _join(self, *parts: str) -> str:
        return os.path.join(self.root, *parts) if self.local else "/".join((self.root,) + parts)

    def setup_job(self) -> None:
        """Refuse an existing output directory, then create the job's pending directory."""
        if self.local:
            if os.path.exists(self.root):
                raise FileAlreadyExistsException(f"Output directory {self.display} already exists")
            os.makedirs(self._join(PENDING_DIR, _JOB_ATTEMPT, PENDING_DIR))
            return
        filesystem, path = fs.filesystem(self.root)
        if filesystem.exists(path):
            raise FileAlreadyExistsException(f"Output directory {self.display} already exists")
        filesystem.makedirs(fs.filesystem(self._join(PENDING_DIR, _JOB_ATTEMPT))[1],
                            exist_ok=True)

    def attempt_file(self, ctx: Any, name: str) -> str:
        """The file this task attempt writes `name` to (its directory is created)."""
        # the task attempt id is unique in the app, also across stage attempts (a zombie
        # task of an earlier stage attempt never shares a file with its successor)
        attempt = f"attempt_{ctx.stageId()}_{ctx.partitionId():05d}_{ctx.taskAttemptId()}"
        path = self._join(PENDING_DIR, _JOB_ATTEMPT, PENDING_DIR, attempt, name)
        if self.local:
            # only the attempt's own directory: once the job has committed or aborted (its
            # _temporary gone), a late attempt, e.g. a speculative copy being killed, fails
            # here instead of recreating _temporary beside the committed parts
            with contextlib.suppress(FileExistsError):
                os.mkdir(os.path.dirname(path))
        return path

    def commit_job(self, attempt_files: list[str]) -> None:
        """Move each partition's committed attempt file into place, drop every other
        attempt, then write `_SUCCESS`."""
        if self.local:
            for f in attempt_files:
                os.replace(f, self._join(os.path.basename(f)))
        else:
            filesystem, _ = fs.filesystem(self.root)
            for f in attempt_files:
                src = fs.filesystem(f)[1]
                filesystem.mv(src, fs.filesystem(self._join(src.rsplit("/", 1)[-1]))[1])
        self.abort_job()
        if self.local:
            open(self._join(SUCCESS_MARKER), "wb").close()
        else:
            filesystem.pipe_file(fs.filesystem(self._join(SUCCESS_MARKER))[1], b"")

    def abort_job(self) -> None:
        """Delete the pending directory with whatever attempts left in it."""
        pending = self._join(PENDING_DIR)
        if self.local:
            shutil.rmtree(pending, ignore_errors=True)
            return
        filesystem, path = fs.filesystem(pending)
        with contextlib.suppress(FileNotFoundError):
            filesystem.rm(path, recursive=True)


@contextlib.contextmanager
def open_output(path: str, ext: str = "") -> Iterator[Any]:
    """A binary stream to a new file (local path or URL), compressed per its extension."""
    if fs.is_local(path):
        raw = open(path, "wb", buffering=1 << 20)
    else:
        raw = fs.open_file(path, "wb")
    with raw, compressed(raw, ext) as f:
        yield f
