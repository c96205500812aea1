"""SparkFiles: where files added with SparkContext.addFile are found, on driver and tasks."""
from __future__ import annotations

import os


class SparkFiles:
    _root_directory: str | None = None
    _is_running_on_worker = False
    _sc = None

    def __init__(self) -> None:
        raise NotImplementedError("Do not construct SparkFiles objects")

    @classmethod
    def get(cls, filename: str) -> str:
        """Absolute path of a file added through SparkContext.addFile()."""
        return os.path.abspath(os.path.join(cls.getRootDirectory(), filename))

    @classmethod
    def getRootDirectory(cls) -> str:
        if cls._root_directory is None:
            raise RuntimeError("SparkFiles root directory is not set: no SparkContext is running")
        return cls._root_directory
