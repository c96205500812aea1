"""The one logging set-up of every Ember process: Spark's log4j2 default layout on stderr.

Why one module: the master, the worker, executors, the history server, the driver's UI
process and the driver itself each configured logging with their own copy of the format
string; one layout here means every Ember log reads (and greps) like Spark's -
`yy/MM/dd HH:mm:ss LEVEL Name: message` - and a change of layout is one line.

Two shapes: a process Ember owns (daemons, executors, the history server, the UI process)
sends the root logger to stderr; a process that runs user code (the driver, the cluster-mode
driver wrapper) gives Ember's own logger a handler and leaves the root logger to the
application.
"""
from __future__ import annotations

import logging
import os
import sys

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
DATE_FORMAT = "%y/%m/%d %H:%M:%S"


class SparkLogFormatter(logging.Formatter):
    """`yy/MM/dd HH:mm:ss LEVEL Name: message` - Spark's default pattern
    `%d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex`, so Ember logs read (and grep) like Spark's."""

    _LEVELS = {"WARNING": "WARN", "CRITICAL": "FATAL"}

    def __init__(self) -> None:
        super().__init__(LOG_FORMAT, datefmt=DATE_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        record = logging.makeLogRecord(record.__dict__)
        record.levelname = self._LEVELS.get(record.levelname, record.levelname)
        record.name = record.name.rsplit(".", 1)[-1]
        return super().format(record)


def _stderr_handler() -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(SparkLogFormatter())
    handler._ember = True  # type: ignore[attr-defined]
    return handler


def configure_logging(level: int | str | None = None) -> None:
    """Send every log record of this process to stderr in Spark's layout (a daemon's `.out`
    file when run by `start_daemon`). Level from `level`, else env `EMBER_LOG_LEVEL`, else
    INFO. Idempotent."""
    root = logging.getLogger()
    if level is None:
        level = os.environ.get("EMBER_LOG_LEVEL", "INFO").upper()
        if level == "WARN":
            level = "WARNING"
    if not any(getattr(h, "_ember", False) for h in root.handlers):
        root.addHandler(_stderr_handler())
    try:
        root.setLevel(level)
    except (ValueError, TypeError):
        root.setLevel(logging.INFO)
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)


def own_logger(name: str, level: int) -> logging.Logger:
    """Logger `name` writing to stderr in Spark's layout without touching the root logger,
    which belongs to the application in a process that runs user code. Idempotent."""
    logger = logging.getLogger(name)
    if not logger.handlers:
        logger.addHandler(_stderr_handler())
        logger.setLevel(level)
        logger.propagate = False
    return logger


__all__ = ["LOG_FORMAT", "DATE_FORMAT", "SparkLogFormatter", "configure_logging", "own_logger"]
