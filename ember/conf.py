"""SparkConf: the application's key/value configuration, PySpark's API without a JVM."""
from __future__ import annotations

import os
from typing import Iterable

from ember.errors import PySparkRuntimeError


class SparkConf:
    """Configuration for an application. Values set here win over every other source.

    With loadDefaults, `spark.*` entries of the environment variable EMBER_SPARK_CONF (set by
    `ember submit`, newline-separated k=v) are loaded, as PySpark loads Java system properties;
    a SparkContext built from such a conf (or from none) also gets what spark-submit gives
    PySpark when they are absent: master local[*] and app name pyspark-shell.
    """

    def __init__(self, loadDefaults: bool = True, _jvm=None, _jconf=None) -> None:
        self._conf: dict[str, str] = {}
        self._load_defaults = loadDefaults
        if loadDefaults:
            for line in os.environ.get("EMBER_SPARK_CONF", "").splitlines():
                if "=" in line:
                    k, v = line.split("=", 1)
                    if k.startswith("spark."):
                        self._conf[k] = v

    def set(self, key: str, value: str) -> "SparkConf":
        self._conf[key] = str(value)        # as PySpark: set(k, True) stores "True"
        return self

    def setIfMissing(self, key: str, value: str) -> "SparkConf":
        if key not in self._conf:
            self.set(key, value)
        return self

    def setMaster(self, value: str) -> "SparkConf":
        return self.set("spark.master", value)

    def setAppName(self, value: str) -> "SparkConf":
        return self.set("spark.app.name", value)

    def setSparkHome(self, value: str) -> "SparkConf":
        return self.set("spark.home", value)

    def setExecutorEnv(self, key: str | None = None, value: str | None = None,
                       pairs: Iterable[tuple[str, str]] | None = None) -> "SparkConf":
        if (key is not None and pairs is not None) or (key is None and pairs is None):
            raise PySparkRuntimeError(errorClass="KEY_VALUE_PAIR_REQUIRED", messageParameters={})
        if key is not None:
            self.set("spark.executorEnv." + key, value)
        else:
            for k, v in pairs:  # type: ignore[union-attr]
                self.set("spark.executorEnv." + k, v)
        return self

    def setAll(self, pairs: Iterable[tuple[str, str]]) -> "SparkConf":
        for k, v in pairs:
            self.set(k, v)
        return self

    def get(self, key: str, defaultValue: str | None = None) -> str | None:
        return self._conf.get(key, defaultValue)

    def getAll(self) -> list[tuple[str, str]]:
        return list(self._conf.items())

    def contains(self, key: str) -> bool:
        return key in self._conf

    def toDebugString(self) -> str:
        return "\n".join(f"{k}={v}" for k, v in sorted(self._conf.items()))

    def copy(self) -> "SparkConf":
        c = SparkConf(loadDefaults=False)
        c._conf = dict(self._conf)
        c._load_defaults = self._load_defaults
        return c

    def __repr__(self) -> str:
        return f"SparkConf({self._conf!r})"
