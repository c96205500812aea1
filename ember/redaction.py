"""Spark's Utils.redact: secrets never reach a page, a `/json` answer or an event log.

Why one module: the application UI's Environment tab, the event log, the worker's `/json`
and pages and the master's all show configuration, commands and environments; one rule
(`spark.redaction.regex`, Spark's default `(?i)secret|password|token|access[.]?key`) applied
in one place cannot be forgotten by one of them. A pair is redacted when its key or its value
matches, as Spark does; command-line words `-Dk=v` and `--conf k=v` are redacted by the same
rule (Spark's redactCommandLineArgs).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Iterable, Mapping, Pattern

from ember import config

REDACTED = "*********(redacted)"


def redaction_pattern(conf: Any) -> Pattern[str]:
    """spark.redaction.regex of `conf` (a SparkConf or a dict), compiled."""
    return re.compile(config.read(conf, "spark.redaction.regex"))


def redact(conf: Any, items: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """Spark's Utils.redact, sorted: the value of every entry whose key or value matches
    spark.redaction.regex (secrets, tokens, S3A access and secret keys) is hidden."""
    return sorted(redact_pairs(redaction_pattern(conf), items))


def _secret(pattern: Pattern[str], key: str, value: str) -> bool:
    return bool(pattern.search(key) or pattern.search(value))


def redact_pairs(pattern: Pattern[str], items: Iterable[tuple[str, str]]
                 ) -> list[tuple[str, str]]:
    return [(k, REDACTED if _secret(pattern, k, v) else v) for k, v in items]


def redact_args(pattern: Pattern[str], args: Iterable[str]) -> list[str]:
    """`-Dk=v`, `--conf k=v` / `--conf=k=v` and `k=v` words with a secret key or value
    keep their key and lose their value."""
    out: list[str] = []
    for word in args:
        key, sep, value = word.partition("=")
        if sep and _secret(pattern, key, value):
            word = f"{key}={REDACTED}"
        out.append(word)
    return out


def redact_command(pattern: Pattern[str], command: Any) -> Any:
    """A copy of a deploy `Command` with its environment, arguments and javaOpts redacted."""
    env: Mapping[str, str] = command.environment
    return dataclasses.replace(
        command, environment=dict(redact_pairs(pattern, env.items())),
        arguments=redact_args(pattern, command.arguments),
        javaOpts=redact_args(pattern, command.javaOpts))


__all__ = ["REDACTED", "redact", "redaction_pattern", "redact_pairs", "redact_args", "redact_command"]
