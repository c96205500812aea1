"""A minimal SparkSession so Spark's Python examples run with only the import changed.

Only what the classic RDD examples touch: the builder, `.sparkContext`, `.read.text(path)`
whose `.rdd` yields Row(value=line), and `.stop()`. DataFrames are not part of Ember.
"""
from __future__ import annotations

import threading
from typing import Any

from ember.conf import SparkConf
from ember.context import SparkContext
from ember.sql.row import Row


class DataFrame:
    """Just enough of a DataFrame to get at its rows as an RDD."""

    def __init__(self, rdd: Any, columns: list[str]) -> None:
        self.rdd = rdd
        self.columns = columns

    def collect(self) -> list:
        return self.rdd.collect()

    def count(self) -> int:
        return self.rdd.count()


class DataFrameReader:
    def __init__(self, session: "SparkSession") -> None:
        self._session = session

    def text(self, paths: str | list[str], wholetext: bool = False, lineSep: str | None = None,
             **options: Any) -> DataFrame:
        sc = self._session.sparkContext
        path = paths if isinstance(paths, str) else ",".join(paths)
        if wholetext:
            rdd = sc.wholeTextFiles(path).map(lambda kv: Row(value=kv[1]))
        else:
            rdd = sc.textFile(path).map(lambda line: Row(value=line))
        return DataFrame(rdd, ["value"])


class SparkSession:
    _instantiated_session: "SparkSession | None" = None
    _lock = threading.RLock()

    class Builder:
        def __init__(self) -> None:
            self._options: dict[str, str] = {}

        def config(self, key: str | None = None, value: Any = None,
                   conf: SparkConf | None = None, *, map: dict | None = None
                   ) -> "SparkSession.Builder":
            if conf is not None:
                for k, v in conf.getAll():
                    self._options[k] = v
            if map is not None:
                for k, v in map.items():
                    self._options[k] = str(v)
            if key is not None:
                self._options[key] = str(value).lower() if isinstance(value, bool) else str(value)
            return self

        def appName(self, name: str) -> "SparkSession.Builder":
            return self.config("spark.app.name", name)

        def master(self, master: str) -> "SparkSession.Builder":
            return self.config("spark.master", master)

        def enableHiveSupport(self) -> "SparkSession.Builder":
            return self

        def getOrCreate(self) -> "SparkSession":
            with SparkSession._lock:
                session = SparkSession._instantiated_session
                if session is not None and not session.sparkContext.runtime.stopped:
                    for k, v in self._options.items():
                        session._conf[k] = v
                    return session
                conf = SparkConf()
                for k, v in self._options.items():
                    conf.set(k, v)
                if not conf.contains("spark.master"):
                    conf.setMaster("local[*]")
                if not conf.contains("spark.app.name"):
                    conf.setAppName("ember-app")
                sc = SparkContext.getOrCreate(conf)
                session = SparkSession(sc)
                session._conf.update(self._options)
                SparkSession._instantiated_session = session
                return session

    builder = Builder()

    def __init__(self, sparkContext: SparkContext) -> None:
        self._sc = sparkContext
        self._conf: dict[str, str] = {}

    def __class_getitem__(cls, item: Any) -> Any:
        return cls

    @property
    def sparkContext(self) -> SparkContext:
        return self._sc

    @property
    def read(self) -> DataFrameReader:
        return DataFrameReader(self)

    @property
    def version(self) -> str:
        return self._sc.version

    def stop(self) -> None:
        self._sc.stop()
        with SparkSession._lock:
            if SparkSession._instantiated_session is self:
                SparkSession._instantiated_session = None

    def __enter__(self) -> "SparkSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class _BuilderDescriptor:
    def __get__(self, obj: Any, cls: type) -> SparkSession.Builder:
        return SparkSession.Builder()


SparkSession.builder = _BuilderDescriptor()  # type: ignore[assignment]
