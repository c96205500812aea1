"""PySparkLogger: a logging.Logger whose records are JSON lines, with the keyword arguments
of each call kept as the line's "context", as PySpark 4's `pyspark.logger.logger`.

Why: applications written for PySpark 4 log through it, and tools read its lines back with
SPARK_LOG_SCHEMA (ts, level, logger, msg, context, exception); the same lines let them read
an Ember application's logs.
"""
from __future__ import annotations

import json
import logging
import traceback
from typing import Any, cast

SPARK_LOG_SCHEMA = (
    "ts TIMESTAMP, level STRING, msg STRING, context map<STRING, STRING>, "
    "exception STRUCT<class STRING, msg STRING, "
    "stacktrace ARRAY<STRUCT<class STRING, method STRING, file STRING, line STRING>>>, "
    "logger STRING")


class JSONFormatter(logging.Formatter):
    """A record as one JSON object: ts, level, logger, msg, context and, with exc_info, the
    exception's class, message and frames."""

    default_msec_format = "%s.%03d"

    def __init__(self, ensure_ascii: bool = False) -> None:
        super().__init__()
        self._ensure_ascii = ensure_ascii

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": self.formatTime(record, self.datefmt), "level": record.levelname,
            "logger": record.name, "msg": record.getMessage(),
            "context": record.__dict__.get("context", {})}
        if record.exc_info:
            exc_type, exc, tb = record.exc_info
            entry["exception"] = {
                "class": exc_type.__name__ if exc_type else "UnknownException",
                "msg": str(exc),
                "stacktrace": [{"class": None, "method": f.name, "file": f.filename,
                                "line": str(f.lineno)} for f in traceback.extract_tb(tb)]}
        return json.dumps(entry, ensure_ascii=self._ensure_ascii, default=str)


class PySparkLogger(logging.Logger):
    """A logger (WARN by default, to stderr) whose every handler writes JSON lines;
    `logger.info("msg", user="a")` puts user="a" in the line's context."""

    def __init__(self, name: str = "PySparkLogger") -> None:
        super().__init__(name, level=logging.WARN)
        self.addHandler(logging.StreamHandler())

    def addHandler(self, handler: logging.Handler) -> None:  # noqa: N802
        handler.setFormatter(JSONFormatter())
        super().addHandler(handler)

    @staticmethod
    def getLogger(name: str | None = None) -> "PySparkLogger":  # noqa: N802
        """The PySparkLogger of that name, made if needed (no name: the root logger)."""
        previous = logging.getLoggerClass()
        logging.setLoggerClass(PySparkLogger)
        try:
            return cast(PySparkLogger, logging.getLogger(name))
        finally:
            logging.setLoggerClass(previous)

    def _log(self, level: int, msg: object, args: Any, exc_info: Any = None,  # type: ignore[override]
             extra: Any = None, stack_info: bool = False, stacklevel: int = 1,
             **context: object) -> None:
        if extra is not None:
            context["extra"] = extra
        super()._log(level, msg, args, exc_info=exc_info, extra={"context": context},
                     stack_info=stack_info, stacklevel=stacklevel)
