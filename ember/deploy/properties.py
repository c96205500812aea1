"""Spark configuration from the places Spark's launch scripts read it, in one copy.

Why this module exists: the master, the worker, the history server and `ember submit` all read
spark-defaults.conf-style properties files, and the daemons also take `-Dspark.x=y` words from
SPARK_<DAEMON>_OPTS (Spark hands those to the JVM as system properties). One copy per CLI had
drifted apart (line continuations, `key:value`, `!` comments, which keys were kept), so a file
that configured the master could mean something else to the worker. Spark's precedence for a
daemon's `spark.*` configuration, highest first, applied by `daemon_conf`:

1. `--conf k=v` on the daemon's command line (an Ember addition),
2. `-Dk=v` in SPARK_<DAEMON>_OPTS (SPARK_MASTER_OPTS, SPARK_WORKER_OPTS, SPARK_HISTORY_OPTS),
3. the properties file: `--properties-file FILE`, else `$SPARK_CONF_DIR/spark-defaults.conf`,
   else `$SPARK_HOME/conf/spark-defaults.conf`, if that file exists.

Only `spark.*` keys of the file reach a daemon (Spark's Utils.loadDefaultSparkProperties).
`read_properties` itself returns every key, so that `ember submit` can warn about the others
("Ignoring non-Spark config property"), as spark-submit does.

Errors are ValueError with one line naming the file or the variable; each CLI turns them into
its own one-line error. No I/O besides reading the file, no logging.
"""
from __future__ import annotations

import os
import re
import shlex
from typing import Mapping, Optional, Sequence

__all__ = ["PropertiesFileError", "read_properties", "default_properties_file",
           "opts_properties", "parse_java_opts", "daemon_conf"]

_WHITESPACE = " \t\f"          # java.util.Properties' whitespace
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class PropertiesFileError(ValueError):
    """A properties file that cannot be read. `str()` is the one-line message (Spark's
    wording: `Properties file X does not exist`); `path` and `reason` (strerror style) let a
    CLI word it its own way."""

    def __init__(self, message: str, path: str, reason: str) -> None:
        super().__init__(message)
        self.path = path
        self.reason = reason


def _logical_lines(text: str):
    """java.util.Properties' logical lines: `#`/`!` comment and blank lines skipped, a line
    ending in an odd number of backslashes continues on the next one (whose leading
    whitespace is dropped)."""
    pending: Optional[str] = None
    for raw in _LINE_BREAK.split(text):
        line = raw.lstrip(_WHITESPACE)
        if pending is None and (not line or line[0] in "#!"):
            continue
        if (len(line) - len(line.rstrip("\\"))) % 2:
            pending = (pending or "") + line[:-1]
            continue
        yield (pending or "") + line
        pending = None
    if pending:
        yield pending


def _key_value(line: str) -> tuple[str, str]:
    """`key value`, `key=value`, `key:value` (whitespace allowed around the separator); the
    value is trimmed, as Spark trims it. No escape processing besides line continuation."""
    i = 0
    while i < len(line) and line[i] not in "=:" and line[i] not in _WHITESPACE:
        i += 1
    key, rest = line[:i], line[i:].lstrip(_WHITESPACE)
    if rest[:1] in ("=", ":"):
        rest = rest[1:]
    return key, rest.strip()


def read_properties(path: str) -> dict[str, str]:
    """Every key of a Java properties file (spark-defaults.conf), UTF-8 as in Spark.
    Raises PropertiesFileError (a ValueError) when the file cannot be read."""
    if not os.path.exists(path):
        raise PropertiesFileError(f"Properties file {path} does not exist", path,
                                  "No such file or directory")
    if not os.path.isfile(path):
        raise PropertiesFileError(f"Properties file {path} is not a normal file", path,
                                  "Not a normal file")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        reason = e.strerror or str(e)
        raise PropertiesFileError(f"Cannot read the properties file {path}: {reason}", path,
                                  reason) from None
    except UnicodeDecodeError as e:
        reason = f"not UTF-8 ({e.reason} at byte {e.start})"
        raise PropertiesFileError(f"Cannot read the properties file {path}: {reason}", path,
                                  reason) from None
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        key, value = _key_value(line)
        props[key] = value
    return props


def default_properties_file(environ: Mapping[str, str]) -> Optional[str]:
    """`$SPARK_CONF_DIR/spark-defaults.conf`, else `$SPARK_HOME/conf/spark-defaults.conf`,
    if that file exists; None otherwise."""
    conf_dir = environ.get("SPARK_CONF_DIR") or (
        os.path.join(environ["SPARK_HOME"], "conf") if environ.get("SPARK_HOME") else None)
    if conf_dir:
        path = os.path.join(conf_dir, "spark-defaults.conf")
        if os.path.isfile(path):
            return path
    return None


def opts_properties(opts: Optional[str], variable_name: str) -> dict[str, str]:
    """The `-Dspark.x=y` words of a SPARK_<DAEMON>_OPTS value (shell quoting honoured; other
    words such as `-Xmx1g` ignored). ValueError `Cannot parse <variable_name>: ...` on bad
    quoting."""
    try:
        words = shlex.split(opts or "")
    except ValueError as e:
        raise ValueError(f"Cannot parse {variable_name}: {e}") from None
    return {k: v for k, v in parse_java_opts(words).items() if k.startswith("spark.")}


def parse_java_opts(java_opts: Sequence[str]) -> dict[str, str]:
    """The `-Dkey=value` options of a JVM command line as properties (other options, such
    as JVM flags, mean nothing to a Python process and are ignored)."""
    props: dict[str, str] = {}
    for opt in java_opts:
        if opt.startswith("-D") and "=" in opt:
            k, v = opt[2:].split("=", 1)
            props[k] = v
    return props


def daemon_conf(environ: Mapping[str, str], opts_variable: str,
                properties_file: Optional[str],
                cli_conf: Mapping[str, str]) -> dict[str, str]:
    """A daemon's configuration with Spark's precedence: `cli_conf` (its `--conf` pairs, taken
    as given) > `-D` words of `environ[opts_variable]` > the `spark.*` keys of
    `properties_file` (`--properties-file`; None: the default file, if any).
    ValueError (PropertiesFileError for the file) with a one-line message."""
    path = properties_file if properties_file is not None else default_properties_file(environ)
    conf: dict[str, str] = {}
    if path is not None:
        conf.update((k, v) for k, v in read_properties(path).items() if k.startswith("spark."))
    conf.update(opts_properties(environ.get(opts_variable, ""), opts_variable))
    conf.update(cli_conf)
    return conf
