"""Conformance tests for the SparkSession shim and the package's exported names
(reference §8.3 and §8.4): what the classic PySpark examples use —
SparkSession.builder.appName(..).getOrCreate(), .sparkContext, .read.text(path).rdd whose
rows give the line as r[0] / r.value, .stop() — and `import ember as pyspark` exposing
pyspark's public names.
"""
from __future__ import annotations

from operator import add

import pytest

import ember
import ember as pyspark
from ember import SparkConf, SparkContext
from ember.sql import Row, SparkSession

pytestmark = pytest.mark.timeout(60)

REQUIRED_NAMES = ["SparkContext", "SparkConf", "RDD", "StorageLevel", "Broadcast",
                  "Accumulator", "AccumulatorParam", "TaskContext", "SparkFiles",
                  "StatusTracker", "Row", "SparkSession"]
OTHER_NAMES = ["InheritableThread", "inheritable_thread_target", "SparkJobInfo",
               "SparkStageInfo", "MarshalSerializer", "CPickleSerializer", "BarrierTaskContext"]


@pytest.mark.parametrize("name", REQUIRED_NAMES + OTHER_NAMES)
def test_exported_names(name):
    assert name in pyspark.__all__
    assert getattr(pyspark, name) is not None
    assert name in dir(pyspark)


def test_exported_names_are_the_real_classes():
    from ember.accumulators import Accumulator, AccumulatorParam
    from ember.broadcast import Broadcast
    from ember.conf import SparkConf as Conf
    from ember.context import SparkContext as Context
    from ember.files import SparkFiles
    from ember.rdd import RDD
    from ember.status import StatusTracker
    from ember.storagelevel import StorageLevel
    from ember.taskcontext import TaskContext
    assert pyspark.SparkContext is Context
    assert pyspark.SparkConf is Conf
    assert pyspark.RDD is RDD
    assert pyspark.StorageLevel is StorageLevel
    assert pyspark.Broadcast is Broadcast
    assert pyspark.Accumulator is Accumulator
    assert pyspark.AccumulatorParam is AccumulatorParam
    assert pyspark.TaskContext is TaskContext
    assert pyspark.SparkFiles is SparkFiles
    assert pyspark.StatusTracker is StatusTracker
    assert pyspark.Row is Row
    assert pyspark.SparkSession is SparkSession
    with pytest.raises(AttributeError):
        ember.NoSuchName  # noqa: B018


def test_row_basics():
    r = Row(value="hello")
    assert r[0] == "hello"
    assert r.value == "hello"
    assert r == ("hello",)
    assert r.asDict() == {"value": "hello"}
    assert "value" in r          # named rows test field names (pyspark.sql.Row)


def test_builder_get_or_create(fresh_sc, tmp_path):
    spark = (SparkSession.builder.appName("PythonWordCount").master("local[2]")
             .config("spark.ember.test.key", "v").config("spark.ember.test.flag", True)
             .getOrCreate())
    try:
        sc = spark.sparkContext
        assert isinstance(sc, SparkContext)
        assert SparkContext._active_spark_context is sc
        assert sc.appName == "PythonWordCount"
        assert sc.master == "local[2]"
        assert sc.getConf().get("spark.ember.test.key") == "v"
        assert sc.getConf().get("spark.ember.test.flag") == "true"
        assert SparkSession.builder.getOrCreate() is spark
        assert SparkSession.builder.appName("other").getOrCreate().sparkContext is sc
        assert sc.parallelize(range(1, 101), 2).map(lambda x: x).reduce(add) == 5050
    finally:
        spark.stop()
    assert SparkContext._active_spark_context is None


def test_read_text_rdd_rows(fresh_sc, tmp_path):
    path = tmp_path / "input.txt"
    path.write_text("hello world\nfoo bar hello\n\nlast line")
    spark = SparkSession.builder.appName("PythonWordCount").master("local[2]").getOrCreate()
    try:
        rdd = spark.read.text(str(path)).rdd
        rows = rdd.collect()
        assert [r[0] for r in rows] == ["hello world", "foo bar hello", "", "last line"]
        assert [r.value for r in rows] == ["hello world", "foo bar hello", "", "last line"]
        assert all(isinstance(r, Row) for r in rows)
        # the wordcount example, verbatim apart from the import
        lines = spark.read.text(str(path)).rdd.map(lambda r: r[0])
        counts = lines.flatMap(lambda x: x.split(" ")) \
            .map(lambda x: (x, 1)) \
            .reduceByKey(add)
        output = dict(counts.collect())
        assert output["hello"] == 2
        assert output["world"] == 1
        assert output["last"] == 1
    finally:
        spark.stop()


def test_read_text_directory_and_list(fresh_sc, tmp_path):
    d = tmp_path / "dir"
    d.mkdir()
    (d / "a.txt").write_text("1\n2\n")
    (d / "b.txt").write_text("3\n")
    spark = SparkSession.builder.appName("PythonSort").master("local[2]").getOrCreate()
    try:
        nums = spark.read.text(str(d)).rdd.map(lambda r: int(r[0]))
        assert sorted(nums.collect()) == [1, 2, 3]
        both = spark.read.text([str(d / "a.txt"), str(d / "b.txt")]).rdd.map(lambda r: r.value)
        assert sorted(both.collect()) == ["1", "2", "3"]
        # the sort example
        sorted_count = spark.read.text(str(d)).rdd.map(lambda r: r[0]) \
            .flatMap(lambda x: x.split(" ")) \
            .map(lambda x: (int(x), 1)) \
            .sortByKey()
        assert [k for k, _ in sorted_count.collect()] == [1, 2, 3]
    finally:
        spark.stop()


def test_read_text_missing_path(fresh_sc, tmp_path):
    spark = SparkSession.builder.appName("missing").master("local[2]").getOrCreate()
    try:
        with pytest.raises(Exception, match="does not exist"):
            spark.read.text(str(tmp_path / "nope.txt")).rdd.collect()
        assert spark.sparkContext.parallelize([1, 2]).count() == 2
    finally:
        spark.stop()


def test_stop_then_new_session(fresh_sc):
    spark = SparkSession.builder.appName("first").master("local[2]").getOrCreate()
    first_sc = spark.sparkContext
    spark.stop()
    assert SparkContext._active_spark_context is None
    spark2 = SparkSession.builder.appName("second").master("local[2]").getOrCreate()
    try:
        assert spark2 is not spark
        assert spark2.sparkContext is not first_sc
        assert spark2.sparkContext.appName == "second"
        assert spark2.sparkContext.parallelize([1, 2, 3]).count() == 3
    finally:
        spark2.stop()


def test_default_master_is_local_star(fresh_sc):
    spark = SparkSession.builder.appName("PythonPi").getOrCreate()
    try:
        assert spark.sparkContext.master == "local[*]"
        assert spark.sparkContext.appName == "PythonPi"
    finally:
        spark.stop()


def test_session_reuses_existing_context(fresh_sc):
    sc = fresh_sc("local[2]", "existing-app")
    spark = SparkSession.builder.appName("ignored").getOrCreate()
    try:
        assert spark.sparkContext is sc
    finally:
        spark.stop()
    assert SparkContext._active_spark_context is None


def test_builder_config_conf_and_map(fresh_sc):
    conf = SparkConf().set("spark.ember.from.conf", "c")
    spark = (SparkSession.builder.master("local[2]").appName("cfg").config(conf=conf)
             .config(map={"spark.ember.from.map": 7}).getOrCreate())
    try:
        got = spark.sparkContext.getConf()
        assert got.get("spark.ember.from.conf") == "c"
        assert got.get("spark.ember.from.map") == "7"
    finally:
        spark.stop()


def test_session_context_manager(fresh_sc):
    with SparkSession.builder.appName("ctxmgr").master("local[2]").getOrCreate() as spark:
        assert spark.sparkContext.parallelize([1, 2]).sum() == 3
    assert SparkContext._active_spark_context is None
