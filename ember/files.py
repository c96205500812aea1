"""SparkFiles: where files added with SparkContext.addFile are found, on driver and tasks."""
from __future__ import annotations

import os
from typing import Callable


class SparkFiles:
    _root_directory: str | None = None
    _is_running_on_worker = False
    _sc = None
    # On a cluster's executors: fetches an added file that is not here yet, or raises
    # naming it (set by the task process).
    _fetch_missing: Callable[[str], None] | None = None

    def __init__(self) -> None:
        raise NotImplementedError("Do not construct SparkFiles objects")

    @classmethod
    def get(cls, filename: str) -> str:
        """Absolute path of a file added through SparkContext.addFile()."""
        path = os.path.abspath(os.path.join(cls.getRootDirectory(), filename))
        if cls._fetch_missing is not None and not os.path.exists(path):
            cls._fetch_missing(filename)
        return path

    @classmethod
    def getRootDirectory(cls) -> str:  # noqa: N802
        if cls._root_directory is None:
            raise RuntimeError("SparkFiles root directory is not set: no SparkContext is running")
        return cls._root_directory
