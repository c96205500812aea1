"""Conformance tests for SparkContext and its companions (reference §8.1 and §8.3), derived
from PySpark's documented behaviour: docstring examples of core/context.py, accumulators.py,
core/broadcast.py, conf.py, storagelevel.py, taskcontext.py, core/files.py, status.py and
PySpark's own tests/test_context.py (checkpointing, addFile/addPyFile, test_progress_api).

Most tests share one local[2] context (`ctx`); tests that need their own master, or that
stop contexts, use the `fresh_sc` factory from conftest.py.
"""
from __future__ import annotations

import getpass
import os
import threading
import time
import uuid
import zipfile

import pytest

import ember as pyspark
from ember import (Accumulator, AccumulatorParam, Broadcast, InheritableThread, SparkConf,
                   SparkContext, SparkFiles, StorageLevel, TaskContext)

pytestmark = pytest.mark.timeout(60)


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def _ctx_box():
    box: list = []
    yield box
    for c in box:
        c.stop()


@pytest.fixture
def ctx(_ctx_box):
    """A shared local[2] context, recreated if a fresh_sc test stopped it."""
    if not _ctx_box or SparkContext._active_spark_context is not _ctx_box[-1]:
        active = SparkContext._active_spark_context
        if active is not None:
            active.stop()
        _ctx_box.append(SparkContext("local[2]", "ember-api-context"))
    return _ctx_box[-1]


def _wait_for(pred, timeout=10.0, interval=0.05):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()


def _clear_job_props(sc):
    for key in ("spark.jobGroup.id", "spark.job.description", "spark.job.interruptOnCancel"):
        sc.setLocalProperty(key, None)
    sc.clearJobTags()


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize("master, parallelism", [
    ("local", 1),
    ("local[3]", 3),
    ("local[*]", os.cpu_count()),
    ("local[2,3]", 2),
])
def test_master_forms(fresh_sc, master, parallelism):
    sc = fresh_sc(master)
    assert sc.master == master
    assert sc.defaultParallelism == parallelism
    assert sc.defaultMinPartitions == min(parallelism, 2)
    assert sc.parallelize(range(10)).getNumPartitions() == parallelism
    assert sorted(sc.parallelize(range(10)).collect()) == list(range(10))


def test_default_parallelism_conf(fresh_sc):
    conf = SparkConf().set("spark.default.parallelism", "5")
    sc = fresh_sc("local[2]", conf=conf)
    assert sc.defaultParallelism == 5
    assert sc.defaultMinPartitions == 2
    assert sc.parallelize(range(10)).getNumPartitions() == 5
    # _default_reduce_partitions: spark.default.parallelism wins over the parent's count
    assert sc.parallelize([(1, 1)], 3).reduceByKey(lambda a, b: a + b).getNumPartitions() == 5


def test_invalid_master(fresh_sc):
    with pytest.raises(Exception):
        SparkContext("an-invalid-master-name", "bad")
    assert SparkContext._active_spark_context is None
    sc = fresh_sc("local[2]")
    assert sc.parallelize([1, 2]).count() == 2


def test_master_and_app_name_required(fresh_sc):
    with pytest.raises(Exception, match="MASTER_URL_NOT_SET"):
        SparkContext(conf=SparkConf(loadDefaults=False).setAppName("x"))
    with pytest.raises(Exception, match="APPLICATION_NAME_NOT_SET"):
        SparkContext(conf=SparkConf(loadDefaults=False).setMaster("local"))
    assert SparkContext._active_spark_context is None


def test_conf_master_and_app_name(fresh_sc):
    conf = SparkConf()
    assert conf.setMaster("local").setAppName("My app") is conf
    assert conf.get("spark.master") == "local"
    assert conf.get("spark.app.name") == "My app"
    sc = SparkContext(conf=conf)
    try:
        assert sc.master == "local"
        assert sc.appName == "My app"
        assert sc.sparkHome is None
    finally:
        sc.stop()


def test_second_context_raises(fresh_sc):
    sc = fresh_sc("local[2]", "first-app")
    with pytest.raises(ValueError, match="Cannot run multiple SparkContexts at once") as ei:
        SparkContext("local", "test2")
    assert "existing SparkContext(app=first-app, master=local[2])" in str(ei.value)
    assert SparkContext._active_spark_context is sc
    assert sc.parallelize([1, 2, 3]).sum() == 6


def test_a_task_may_not_create_a_context_unless_the_conf_allows_it(fresh_sc):
    """PySpark's _assert_on_driver: SparkContext() inside a task fails the task with
    CONTEXT_ONLY_VALID_ON_DRIVER; spark.executor.allowSparkContext=true lets it."""
    sc = fresh_sc("local[2]")
    with pytest.raises(Exception, match=r"CONTEXT_ONLY_VALID_ON_DRIVER\] SparkContext should "
                       r"only be created and accessed on the driver\. It appears .*SPARK-5063"):
        sc.parallelize([0], 1).map(lambda _: pyspark.SparkContext("local[1]", "x")).collect()

    def nested(_):
        conf = (SparkConf().setMaster("local[1]").setAppName("in-task")
                .set("spark.executor.allowSparkContext", "true").set("spark.ui.enabled", "false"))
        with pyspark.SparkContext(conf=conf) as inner:
            return inner.parallelize(range(3)).sum()
    assert sc.parallelize([0], 1).map(nested).collect() == [3]


def test_get_or_create(fresh_sc):
    conf = SparkConf().setMaster("local[2]").setAppName("goc")
    sc = SparkContext.getOrCreate(conf)
    try:
        assert sc.appName == "goc"
        assert SparkContext.getOrCreate() is sc
        assert SparkContext.getOrCreate(SparkConf().setMaster("local").setAppName("x")) is sc
    finally:
        sc.stop()
    assert SparkContext._active_spark_context is None


def test_with_statement(fresh_sc):
    with SparkContext("local[2]", "with-test") as sc:
        assert SparkContext._active_spark_context is sc
        assert sc.parallelize([1, 2, 3]).count() == 3
    assert SparkContext._active_spark_context is None
    with pytest.raises(RuntimeError):
        with SparkContext("local", "with-exc"):
            assert SparkContext._active_spark_context is not None
            raise RuntimeError()
    assert SparkContext._active_spark_context is None
    with SparkContext("local", "with-stop") as sc:
        sc.stop()
    assert SparkContext._active_spark_context is None


def test_stop_then_use_raises(fresh_sc):
    sc = fresh_sc("local[2]")
    rdd = sc.parallelize([1, 2, 3])
    sc.stop()
    assert SparkContext._active_spark_context is None
    with pytest.raises(Exception):
        sc.parallelize([1]).collect()
    with pytest.raises(Exception):
        rdd.collect()
    sc.stop()                      # stopping twice is harmless
    again = fresh_sc("local[2]")
    assert again.parallelize([1, 2]).count() == 2


def test_environment_reaches_tasks(fresh_sc):
    sc = SparkContext("local[2]", "env-test", environment={"EMBER_TEST_ENV": "hello"})
    try:
        assert sc.environment["EMBER_TEST_ENV"] == "hello"
        assert sc.getConf().get("spark.executorEnv.EMBER_TEST_ENV") == "hello"
        assert sc.parallelize([0], 1).map(
            lambda _: os.environ.get("EMBER_TEST_ENV")).collect() == ["hello"]
    finally:
        sc.stop()


# --------------------------------------------------------------------------- properties


def test_properties(ctx):
    assert ctx.applicationId.startswith("local-")
    assert isinstance(ctx.startTime, int)
    assert 0 < ctx.startTime <= int(time.time() * 1000)
    assert isinstance(ctx.version, str) and ctx.version.split(".")[0].isdigit()
    url = ctx.uiWebUrl
    assert url is None or url.startswith("http://")
    assert ctx.defaultParallelism > 0 and ctx.defaultMinPartitions > 0
    assert ctx.resources == {}


def test_repr(ctx):
    assert repr(ctx) == "<SparkContext master=local[2] appName=ember-api-context>"


def test_spark_user(ctx):
    expected = os.environ.get("SPARK_USER") or getpass.getuser()
    assert ctx.sparkUser() == expected


def test_get_conf_is_a_copy(ctx):
    conf = ctx.getConf()
    assert conf.get("spark.master") == "local[2]"
    assert conf.get("spark.app.name") == "ember-api-context"
    conf.set("spark.ember.test.mutation", "1")
    assert ctx.getConf().get("spark.ember.test.mutation") is None


def test_set_log_level(ctx):
    for level in ("ALL", "DEBUG", "ERROR", "FATAL", "INFO", "OFF", "TRACE", "WARN", "warn"):
        ctx.setLogLevel(level)
    with pytest.raises(Exception, match="did not match one of"):
        ctx.setLogLevel("NOT-A-LEVEL")
    ctx.setLogLevel("WARN")


def test_system_property(ctx):
    SparkContext.setSystemProperty("spark.ember.test.prop", "v1")
    assert SparkContext.getSystemProperty("spark.ember.test.prop") == "v1"


# --------------------------------------------------------------------------- creating RDDs


def test_empty_rdd_range_parallelize_union(ctx):
    e = ctx.emptyRDD()
    assert repr(e).startswith("EmptyRDD")
    assert e.count() == 0
    assert e.getNumPartitions() == 0
    assert ctx.range(5).collect() == [0, 1, 2, 3, 4]
    assert ctx.range(2, 4).collect() == [2, 3]
    assert ctx.range(1, 7, 2).collect() == [1, 3, 5]
    assert ctx.range(5, numSlices=10).getNumPartitions() == 10
    assert ctx.parallelize([0, 2, 3, 4, 6], 5).glom().collect() == [[0], [2], [3], [4], [6]]
    assert ctx.parallelize(range(0, 6, 2), 5).glom().collect() == [[], [0], [], [2], [4]]
    u = ctx.union([ctx.parallelize([1, 2], 2), ctx.parallelize([3], 1), ctx.range(4, 6)])
    assert u.collect() == [1, 2, 3, 4, 5]
    assert u.getNumPartitions() == 3 + ctx.range(4, 6).getNumPartitions()
    with pytest.raises(Exception):          # PySpark: ZeroDivisionError; Spark: "Positive
        ctx.parallelize([1, 2], 0).collect()  # number of partitions required"


# --------------------------------------------------------------------------- broadcast


def test_broadcast(ctx):
    mapping = {1: 10001, 2: 10002}
    bc = ctx.broadcast(mapping)
    assert isinstance(bc, Broadcast)
    assert bc.value == mapping
    rdd = ctx.range(5)
    rdd2 = rdd.map(lambda i: bc.value[i] if i in bc.value else -1)
    assert rdd2.collect() == [-1, 10001, 10002, -1, -1]
    b = ctx.broadcast([1, 2, 3, 4, 5])
    assert ctx.parallelize([0, 0]).flatMap(lambda x: b.value).collect() == \
        [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert b.unpersist() is None
    # after unpersist the broadcast is re-sent when used again
    assert ctx.parallelize([0, 0], 2).flatMap(lambda x: b.value).count() == 10
    large = ctx.broadcast(range(10000))
    assert ctx.parallelize([0], 1).map(lambda _: len(large.value)).collect() == [10000]


def test_broadcast_destroy(ctx):
    bc = ctx.broadcast([1, 2, 3])
    assert ctx.parallelize([1], 1).map(lambda x: sum(bc.value)).collect() == [6]
    bc.destroy()
    with pytest.raises(Exception, match="destroyed"):
        ctx.parallelize([1], 1).map(lambda x: sum(bc.value)).collect()
    assert ctx.parallelize([1, 2]).count() == 2


def test_broadcast_dump_and_load(ctx, tmp_path):
    b = ctx.broadcast([1, 2, 3, 4, 5])
    c = ctx.broadcast(1)
    path = str(tmp_path / "test.txt")
    with open(path, "wb") as f:
        b.dump(b.value, f)
    assert c.load_from_path(path) == [1, 2, 3, 4, 5]
    with open(path, "rb") as f:
        assert c.load(f) == [1, 2, 3, 4, 5]


# --------------------------------------------------------------------------- accumulators


_GLOBAL_ACC = None


def test_accumulator_docstring(ctx):
    a = ctx.accumulator(1)
    assert isinstance(a, Accumulator)
    assert a.value == 1
    a.value = 2
    assert a.value == 2
    a += 5
    assert a.value == 7
    assert ctx.accumulator(1.0).value == 1.0
    assert ctx.accumulator(1j).value == 1j

    rdd = ctx.parallelize([1, 2, 3])

    def f(x):
        a.add(x)
    rdd.foreach(f)
    assert a.value == 13

    b = ctx.accumulator(0)

    def g(x):
        b.add(x)
    rdd.foreach(g)
    assert b.value == 6


def test_accumulator_global_iadd(ctx):
    global _GLOBAL_ACC
    _GLOBAL_ACC = ctx.accumulator(9)
    _GLOBAL_ACC += 1
    assert _GLOBAL_ACC.value == 10

    def f(x):
        global _GLOBAL_ACC
        _GLOBAL_ACC += 1
    ctx.range(5).foreach(f)
    assert _GLOBAL_ACC.value == 15


def test_accumulator_custom_param(ctx):
    class VectorAccumulatorParam(AccumulatorParam):
        def zero(self, value):
            return [0.0] * len(value)

        def addInPlace(self, val1, val2):  # noqa: N802 (PySpark API)
            for i in range(len(val1)):
                val1[i] += val2[i]
            return val1
    va = ctx.accumulator([1.0, 2.0, 3.0], VectorAccumulatorParam())
    assert va.value == [1.0, 2.0, 3.0]

    def g(x):
        va.add([x] * 3)
    ctx.parallelize([1, 2, 3]).foreach(g)
    assert va.value == [7.0, 8.0, 9.0]


def test_accumulator_errors(ctx):
    a = ctx.accumulator(0)
    rdd = ctx.parallelize([1, 2, 3])
    with pytest.raises(Exception):
        rdd.map(lambda x: a.value).collect()

    def h(x):
        a.value = 7
    with pytest.raises(Exception):
        rdd.foreach(h)
    with pytest.raises(TypeError):
        ctx.accumulator([1.0, 2.0, 3.0])
    with pytest.raises(TypeError, match="No default accumulator param for type"):
        ctx.accumulator("a string")
    assert rdd.count() == 3


def test_accumulator_in_transformation_is_lazy(ctx):
    acc = ctx.accumulator(0)
    rdd = ctx.parallelize(range(10), 2).map(lambda x: acc.add(1) or x)
    assert acc.value == 0              # transformations are lazy
    assert rdd.count() == 10
    assert acc.value == 10


_ACC_REUSE_BUG = ("ember/executor/task_process.py _load_stage only tracks accumulators whose "
                  "id was not yet in the task process registry, so a reused task process "
                  "drops the updates of an accumulator it has already seen")


def test_accumulator_in_transformation_counts_each_computation(fresh_sc):
    sc = fresh_sc("local")
    acc = sc.accumulator(0)
    rdd = sc.parallelize(range(10), 2).map(lambda x: acc.add(1) or x)
    assert rdd.count() == 10
    assert acc.value == 10
    rdd.count()                        # not cached: recomputed, counted again
    assert acc.value == 20


def test_accumulator_counted_once_per_successful_task(fresh_sc, tmp_path):
    sc = fresh_sc("local[2,3]")
    acc = sc.accumulator(0)
    marker = str(tmp_path / "failed-once")

    def f(x):
        acc.add(1)
        if x == 0 and not os.path.exists(marker):
            open(marker, "w").close()
            raise RuntimeError("fail once")
        return TaskContext.get().attemptNumber()
    attempts = sc.parallelize(range(4), 2).map(f).collect()
    assert attempts == [1, 1, 0, 0]
    assert acc.value == 4
    assert os.path.exists(marker)


def test_failed_job_in_local_mode_is_not_retried(ctx):
    acc = ctx.accumulator(0)

    def f(x):
        acc.add(1)
        if x == 0:
            raise RuntimeError("boom")
        return x
    with pytest.raises(Exception) as ei:
        ctx.parallelize(range(4), 2).map(f).collect()
    assert "failed 1 times" in str(ei.value)
    assert "boom" in str(ei.value)
    assert acc.value in (0, 2)          # the failed task's updates never count
    assert ctx.parallelize([1, 2]).count() == 2


def test_accumulator_reused_across_jobs(fresh_sc):
    sc = fresh_sc("local")
    acc = sc.accumulator(0)
    sc.parallelize([1, 2, 3], 1).foreach(lambda x: acc.add(x))
    assert acc.value == 6
    sc.parallelize([1, 2, 3], 1).foreach(lambda x: acc.add(x))
    assert acc.value == 12


# --------------------------------------------------------------------------- files


def test_add_file_and_spark_files(ctx, tmp_path):
    path1 = os.path.join(str(tmp_path), "test1.txt")
    with open(path1, "w") as f:
        f.write("100")
    path2 = os.path.join(str(tmp_path), "test2.txt")
    with open(path2, "w") as f:
        f.write("200")
    ctx.addFile(path1)
    file_list1 = sorted(ctx.listFiles)
    ctx.addFile(path2)
    file_list2 = sorted(ctx.listFiles)
    ctx.addFile(path2)                         # adding the same path again is ignored
    file_list3 = sorted(ctx.listFiles)
    assert "file:" + path1 in file_list1
    assert "file:" + path2 not in file_list1
    assert {"file:" + path1, "file:" + path2} <= set(file_list2)
    assert file_list3 == file_list2

    local = SparkFiles.get("test1.txt")
    assert local != path1
    assert local.startswith(SparkFiles.getRootDirectory())
    with open(local) as f:
        assert f.read() == "100"

    def func(iterator):
        with open(SparkFiles.get("test1.txt")) as f:
            mul = int(f.readline())
            return [x * mul for x in iterator]
    assert ctx.parallelize([1, 2, 3, 4]).mapPartitions(func).collect() == [100, 200, 300, 400]

    def func1(iterator):
        path = SparkFiles.get("test2.txt")
        assert path.startswith(SparkFiles.getRootDirectory())
        return [os.path.basename(path)]
    assert ctx.parallelize([1, 2, 3, 4], 2).mapPartitions(func1).collect() == \
        ["test2.txt", "test2.txt"]


def test_add_file_recursive(ctx, tmp_path):
    d = tmp_path / f"hello_{uuid.uuid4().hex[:8]}"
    (d / "sub_hello").mkdir(parents=True)
    (d / "hello.txt").write_text("Hello World!\n")
    (d / "sub_hello" / "sub_hello.txt").write_text("Sub Hello World!\n")
    with pytest.raises(Exception):
        ctx.addFile(str(d))                    # a directory needs recursive=True
    ctx.addFile(str(d), True)
    download = SparkFiles.get(d.name)
    assert download != str(d)
    with open(download + "/hello.txt") as f:
        assert f.readline() == "Hello World!\n"
    with open(download + "/sub_hello/sub_hello.txt") as f:
        assert f.readline() == "Sub Hello World!\n"
    name = d.name
    assert ctx.parallelize([0], 1).map(
        lambda _: open(SparkFiles.get(name) + "/sub_hello/sub_hello.txt").read()).collect() \
        == ["Sub Hello World!\n"]


def test_add_missing_file_raises(ctx, tmp_path):
    with pytest.raises(Exception):
        ctx.addFile(str(tmp_path / "nope.txt"))


def test_add_py_file(ctx, tmp_path):
    mod = f"ember_userlibrary_{uuid.uuid4().hex[:10]}"
    path = tmp_path / f"{mod}.py"
    path.write_text("class UserClass(object):\n"
                    "    def hello(self):\n"
                    "        return 'Hello World!'\n")

    def func(x):
        import importlib
        return importlib.import_module(mod).UserClass().hello()
    with pytest.raises(Exception):
        ctx.parallelize(range(2)).map(func).first()
    ctx.addPyFile(str(path))
    assert ctx.parallelize(range(2)).map(func).first() == "Hello World!"
    import importlib
    assert importlib.import_module(mod).UserClass().hello() == "Hello World!"


def test_add_py_file_zip(ctx, tmp_path):
    pkg = f"ember_userlib_{uuid.uuid4().hex[:10]}"
    zpath = tmp_path / f"{pkg}-0.1.zip"
    with zipfile.ZipFile(zpath, "w") as z:
        z.writestr(f"{pkg}/__init__.py",
                   "class UserClass(object):\n"
                   "    def hello(self):\n"
                   "        return 'Hello World from inside a package!'\n")
    ctx.addPyFile(str(zpath))

    def func(x):
        import importlib
        return importlib.import_module(pkg).UserClass().hello()
    assert ctx.parallelize(range(2), 2).map(func).collect() == \
        ["Hello World from inside a package!"] * 2
    import importlib
    assert importlib.import_module(pkg).UserClass().hello() == \
        "Hello World from inside a package!"


def test_checkpoint_dir(fresh_sc, tmp_path):
    sc = fresh_sc("local[2]")
    assert sc.getCheckpointDir() is None
    with pytest.raises(Exception, match="Checkpoint directory has not been set"):
        sc.parallelize([1]).checkpoint()
    d = str(tmp_path / "ckpt")
    sc.setCheckpointDir(d)
    cd = sc.getCheckpointDir()
    assert cd is not None and cd.startswith("file:" + d)
    assert os.path.isdir(cd[len("file:"):])
    rdd = sc.parallelize([1, 2, 3, 4]).flatMap(lambda x: [x])
    rdd.checkpoint()
    assert rdd.count() == 4
    assert rdd.getCheckpointFile().startswith(cd)
    assert rdd.collect() == [1, 2, 3, 4]


# --------------------------------------------------------------------------- jobs


def _start_sleeping_job(sc, setup, result, n=4):
    def run():
        setup()
        try:
            result["value"] = sc.parallelize(range(n), 2).map(
                lambda x: time.sleep(100)).collect()
        except Exception as e:  # noqa: BLE001
            result["error"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _tasks_running(sc):
    tracker = sc.statusTracker()
    for s in tracker.getActiveStageIds():
        info = tracker.getStageInfo(s)
        if info is not None and info.numActiveTasks > 0:
            return True
    return False


def _wait_running(sc, settle=2.0):
    """Wait until the job's tasks run; then, like PySpark's own tests (which sleep 3-5 s
    before cancelling), give the task processes time to be up."""
    assert _wait_for(lambda: _tasks_running(sc)), "job never started running tasks"
    time.sleep(settle)


@pytest.mark.timeout(60)
def test_cancel_right_after_launch_frees_the_slots(fresh_sc):
    sc = fresh_sc("local[2]")
    result = {}
    t = _start_sleeping_job(sc, lambda: sc.setJobGroup("early-cancel", "d"), result)
    assert _wait_for(lambda: _tasks_running(sc), interval=0.002)
    sc.cancelJobGroup("early-cancel")
    t.join(20)
    assert "cancelled" in str(result.get("error"))
    done = {}
    def next_job():
        try:
            done["n"] = sc.parallelize([1, 2]).count()
        except Exception as e:  # noqa: BLE001 - the context is stopped at teardown
            done["error"] = e
    t2 = threading.Thread(target=next_job, daemon=True)
    t2.start()
    t2.join(10)
    assert done.get("n") == 2


@pytest.mark.timeout(60)
def test_cancel_job_group(ctx):
    result = {}
    t = _start_sleeping_job(ctx, lambda: ctx.setJobGroup("job_to_cancel", "some description"),
                            result)
    _wait_running(ctx)
    assert len(ctx.statusTracker().getJobIdsForGroup("job_to_cancel")) == 1
    start = time.time()
    ctx.cancelJobGroup("job_to_cancel")
    t.join(20)
    assert not t.is_alive()
    assert time.time() - start < 10
    assert "value" not in result
    assert "cancelled" in str(result["error"])
    assert "job_to_cancel" in str(result["error"])
    assert ctx.parallelize([1, 2, 3]).count() == 3


@pytest.mark.timeout(60)
def test_cancel_all_jobs(ctx):
    result = {}
    t = _start_sleeping_job(ctx, lambda: None, result)
    _wait_running(ctx)
    start = time.time()
    ctx.cancelAllJobs()
    t.join(20)
    assert not t.is_alive()
    assert time.time() - start < 10
    assert "cancelled" in str(result["error"])
    assert ctx.parallelize([1, 2, 3]).count() == 3


@pytest.mark.timeout(60)
def test_cancel_jobs_with_tag_inheritable_thread(ctx):
    result = {"value": "Not Set"}
    done = threading.Event()

    def start_job(x):
        try:
            ctx.addJobTag("job_to_cancel")
            result["value"] = ctx.parallelize(range(x), 2).map(lambda _: time.sleep(100)).collect()
        except Exception:  # noqa: BLE001
            result["value"] = "Cancelled"
        done.set()
    InheritableThread(target=start_job, args=(4,)).start()
    _wait_running(ctx)
    ctx.cancelJobsWithTag("job_to_cancel")
    assert done.wait(20)
    assert result["value"] == "Cancelled"
    assert ctx.parallelize([1, 2, 3]).count() == 3


def test_job_tags(ctx):
    try:
        assert ctx.getJobTags() == set()
        ctx.addJobTag("job_to_cancel1")
        ctx.addJobTag("job_to_cancel2")
        assert ctx.getJobTags() == {"job_to_cancel1", "job_to_cancel2"}
        ctx.removeJobTag("job_to_cancel1")
        assert ctx.getJobTags() == {"job_to_cancel2"}
        ctx.removeJobTag("never-added")            # no-op
        assert ctx.getJobTags() == {"job_to_cancel2"}
        ctx.clearJobTags()
        assert ctx.getJobTags() == set()
        with pytest.raises(Exception):
            ctx.addJobTag("a,b")
        ctx.addJobTag("tagged")
        assert ctx.parallelize([0], 1).map(
            lambda _: TaskContext.get().getLocalProperty("spark.job.tags")).collect() == \
            ["tagged"]
        th = threading.Thread(target=lambda: ctx.addJobTag("only-in-child"))
        th.start()
        th.join()
        assert ctx.getJobTags() == {"tagged"}      # tags are per thread
    finally:
        ctx.clearJobTags()


def test_local_properties_visible_in_tasks(ctx):
    try:
        assert ctx.getLocalProperty("ember.test.key") is None
        ctx.setLocalProperty("ember.test.key", "value")
        assert ctx.getLocalProperty("ember.test.key") == "value"
        got = ctx.parallelize([0, 1], 2).map(
            lambda _: TaskContext.get().getLocalProperty("ember.test.key")).collect()
        assert got == ["value", "value"]
        ctx.setJobGroup("group-in-task", "desc")
        assert ctx.parallelize([0], 1).map(
            lambda _: TaskContext.get().getLocalProperty("spark.jobGroup.id")).collect() == \
            ["group-in-task"]
        th = threading.Thread(target=lambda: ctx.setLocalProperty("ember.test.key", "child"))
        th.start()
        th.join()
        assert ctx.getLocalProperty("ember.test.key") == "value"   # per-thread properties
        inherited = {}
        it = InheritableThread(
            target=lambda: inherited.setdefault("v", ctx.getLocalProperty("ember.test.key")))
        it.start()
        it.join()
        assert inherited["v"] == "value"
        ctx.setLocalProperty("ember.test.key", None)
        assert ctx.getLocalProperty("ember.test.key") is None
        assert ctx.parallelize([0], 1).map(
            lambda _: TaskContext.get().getLocalProperty("ember.test.key")).collect() == [None]
    finally:
        ctx.setLocalProperty("ember.test.key", None)
        _clear_job_props(ctx)


@pytest.mark.timeout(60)
def test_progress_api(fresh_sc):
    sc = fresh_sc("local[2]")
    sc.setJobGroup("test_progress_api", "", True)
    rdd = sc.parallelize(range(10)).map(lambda x: time.sleep(100))

    def run():
        sc.setJobGroup("test_progress_api", "", True)
        try:
            rdd.count()
        except Exception:  # noqa: BLE001
            pass
    t = threading.Thread(target=run, daemon=True)
    t.start()
    tracker = sc.statusTracker()
    assert _wait_for(lambda: len(tracker.getJobIdsForGroup("test_progress_api")) == 1)
    _wait_running(sc)
    job_ids = tracker.getJobIdsForGroup("test_progress_api")
    assert len(job_ids) == 1
    job = tracker.getJobInfo(job_ids[0])
    assert job.status == "RUNNING"
    assert len(job.stageIds) == 1
    stage = tracker.getStageInfo(job.stageIds[0])
    assert rdd.getNumPartitions() == stage.numTasks
    assert tracker.getActiveJobsIds() == job_ids
    assert tracker.getActiveStageIds() == job.stageIds

    sc.cancelAllJobs()
    t.join(20)
    assert not t.is_alive()
    assert _wait_for(lambda: tracker.getJobInfo(job_ids[0]).status == "FAILED", 5)
    assert tracker.getActiveJobsIds() == []
    assert tracker.getActiveStageIds() == []
    assert tracker.getJobInfo(10_000) is None
    assert tracker.getStageInfo(10_000) is None


def test_status_tracker_after_success(ctx):
    _clear_job_props(ctx)
    ctx.setJobGroup("ok-group", "finished job")
    try:
        ctx.parallelize(range(4), 2).map(lambda x: (x % 2, x)).reduceByKey(
            lambda a, b: a + b).collect()
    finally:
        _clear_job_props(ctx)
    tracker = ctx.statusTracker()
    ids = tracker.getJobIdsForGroup("ok-group")
    assert len(ids) == 1
    info = tracker.getJobInfo(ids[0])
    assert info.jobId == ids[0]
    assert info.status == "SUCCEEDED"
    assert len(info.stageIds) == 2               # one shuffle boundary
    stages = [tracker.getStageInfo(s) for s in info.stageIds]
    assert sorted(s.numTasks for s in stages) == [2, 2]
    assert all(s.numCompletedTasks == s.numTasks for s in stages)


def test_run_job(ctx):
    my_rdd = ctx.parallelize(range(6), 3)
    assert ctx.runJob(my_rdd, lambda part: [x * x for x in part]) == [0, 1, 4, 9, 16, 25]
    assert ctx.runJob(my_rdd, lambda part: [x * x for x in part], [0, 2], True) == \
        [0, 1, 16, 25]
    assert ctx.runJob(my_rdd, lambda part: [sum(part)], [1]) == [5]


def test_task_context(ctx):
    assert TaskContext.get() is None

    def f(index, iterator):
        tc = TaskContext.get()
        yield (index, tc.partitionId(), tc.stageId(), tc.attemptNumber(), tc.taskAttemptId(),
               tc.cpus(), tc.resources())
    rows = ctx.parallelize(range(8), 4).mapPartitionsWithIndex(f).collect()
    assert [r[0] for r in rows] == [0, 1, 2, 3]
    assert [r[1] for r in rows] == [0, 1, 2, 3]
    stage_ids = {r[2] for r in rows}
    assert len(stage_ids) == 1 and isinstance(next(iter(stage_ids)), int)
    assert all(r[3] == 0 for r in rows)
    tids = [r[4] for r in rows]
    assert all(isinstance(t, int) for t in tids) and len(set(tids)) == 4
    assert all(r[5] == 1 for r in rows)
    assert all(r[6] == {} for r in rows)
    later = ctx.parallelize([0], 1).map(lambda _: TaskContext.get().stageId()).collect()[0]
    assert later > next(iter(stage_ids))
    assert TaskContext.get() is None


# --------------------------------------------------------------------------- SparkConf


def test_spark_conf():
    conf = SparkConf(loadDefaults=False)
    assert conf.setSparkHome("/path") is conf
    assert conf.get("spark.home") == "/path"
    assert conf.setExecutorEnv("VAR1", "value1") is conf
    conf.setExecutorEnv(pairs=[("VAR3", "value3"), ("VAR4", "value4")])
    assert conf.get("spark.executorEnv.VAR1") == "value1"
    assert sorted(conf.getAll(), key=lambda p: p[0]) == [
        ("spark.executorEnv.VAR1", "value1"), ("spark.executorEnv.VAR3", "value3"),
        ("spark.executorEnv.VAR4", "value4"), ("spark.home", "/path")]
    assert conf.contains("spark.home")
    assert not conf.contains("spark.nope")
    assert conf.get("spark.nope") is None
    assert conf.get("spark.nope", "dflt") == "dflt"
    assert conf.setIfMissing("spark.home", "/other").get("spark.home") == "/path"
    assert conf.setIfMissing("spark.new", "x").get("spark.new") == "x"
    assert conf.setAll([("spark.a", "1"), ("spark.b", "2")]) is conf
    assert conf.get("spark.a") == "1" and conf.get("spark.b") == "2"
    assert conf.set("spark.num", 3).get("spark.num") == "3"
    with pytest.raises(RuntimeError, match=r"\[KEY_VALUE_PAIR_REQUIRED\] Key-value pair or"):
        conf.setExecutorEnv("K", "V", pairs=[("A", "B")])
    with pytest.raises(RuntimeError, match="KEY_VALUE_PAIR_REQUIRED"):
        conf.setExecutorEnv()


def test_spark_conf_to_debug_string_is_sorted():
    conf = SparkConf(loadDefaults=False)
    conf.setSparkHome("/path")
    conf.setExecutorEnv("VAR1", "value1")
    conf.setExecutorEnv(pairs=[("VAR3", "value3"), ("VAR4", "value4")])
    assert conf.toDebugString() == ("spark.executorEnv.VAR1=value1\n"
                                    "spark.executorEnv.VAR3=value3\n"
                                    "spark.executorEnv.VAR4=value4\n"
                                    "spark.home=/path")


# --------------------------------------------------------------------------- StorageLevel


def test_storage_level_constants():
    expected = {
        "NONE": (False, False, False, False, 1, "Serialized 1x Replicated"),
        "DISK_ONLY": (True, False, False, False, 1, "Disk Serialized 1x Replicated"),
        "DISK_ONLY_2": (True, False, False, False, 2, "Disk Serialized 2x Replicated"),
        "DISK_ONLY_3": (True, False, False, False, 3, "Disk Serialized 3x Replicated"),
        "MEMORY_ONLY": (False, True, False, False, 1, "Memory Serialized 1x Replicated"),
        "MEMORY_ONLY_2": (False, True, False, False, 2, "Memory Serialized 2x Replicated"),
        "MEMORY_AND_DISK": (True, True, False, False, 1, "Disk Memory Serialized 1x Replicated"),
        "MEMORY_AND_DISK_2": (True, True, False, False, 2,
                              "Disk Memory Serialized 2x Replicated"),
        "OFF_HEAP": (True, True, True, False, 1, "Disk Memory OffHeap Serialized 1x Replicated"),
        "MEMORY_AND_DISK_DESER": (True, True, False, True, 1,
                                  "Disk Memory Deserialized 1x Replicated"),
    }
    for name, (disk, mem, off, deser, rep, text) in expected.items():
        level = getattr(StorageLevel, name)
        assert (level.useDisk, level.useMemory, level.useOffHeap, level.deserialized,
                level.replication) == (disk, mem, off, deser, rep), name
        assert str(level) == text, name
        assert level == StorageLevel(disk, mem, off, deser, rep)
        assert repr(level) == "StorageLevel(%s, %s, %s, %s, %s)" % (disk, mem, off, deser, rep)
    assert StorageLevel.MEMORY_ONLY != StorageLevel.MEMORY_ONLY_2
    assert StorageLevel(True, True, False, False) == StorageLevel.MEMORY_AND_DISK
    assert pyspark.StorageLevel is StorageLevel


def test_persist_all_levels(ctx):
    for name in ("DISK_ONLY", "MEMORY_ONLY", "MEMORY_ONLY_2", "MEMORY_AND_DISK",
                 "MEMORY_AND_DISK_DESER", "OFF_HEAP"):
        rdd = ctx.parallelize(range(10), 2).map(lambda x: x * 3)
        rdd.persist(getattr(StorageLevel, name))
        assert rdd.getStorageLevel() == getattr(StorageLevel, name)
        assert rdd.sum() == 135
        assert rdd.sum() == 135
        rdd.unpersist()
        assert rdd.getStorageLevel() == StorageLevel.NONE


# --------------------------------------------------------------------------- profiler


def _heavy_foo(x):
    for _ in range(1 << 12):
        x = 1  # noqa: F841


def test_profiler_collects_each_stages_cprofile_and_shows_and_dumps_it(fresh_sc, tmp_path,
                                                                       capsys):
    """PySpark's tests/test_profiler.py: spark.python.profile gives the RDD an action ran
    on one profiler, whose stats hold the user's function; show_profiles prints them and
    dump_profiles writes rdd_<id>.pstats. A shuffle's map side gets its own profile."""
    import pstats
    sc = fresh_sc("local[4]", conf=SparkConf().set("spark.python.profile", "true"))
    rdd = sc.parallelize(range(100))
    rdd.foreach(_heavy_foo)
    profilers = sc.profiler_collector.profilers
    assert len(profilers) == 1
    rid, profiler, shown = profilers[0]
    assert (rid, shown) == (rdd.id(), False)
    _, stat_list = profiler.stats().get_print_list([])
    heavy = [key for key in stat_list if key[2] == "_heavy_foo"]
    assert heavy and profiler.stats().stats[heavy[0]][1] == 100     # called once a record
    rdd.foreach(_heavy_foo)                           # the same RDD: the same profiler
    assert len(profilers) == 1 and profiler.stats().stats[heavy[0]][1] == 200
    capsys.readouterr()
    sc.show_profiles()
    out = capsys.readouterr().out
    assert f"Profile of RDD<id={rid}>" in out and "_heavy_foo" in out
    sc.show_profiles()                                # each profile is printed once
    assert capsys.readouterr().out == ""
    pairs = sc.parallelize(range(40), 4).map(lambda x: (x % 3, x))
    assert sorted(pairs.reduceByKey(lambda a, b: a + b).collect()) == [
        (k, sum(x for x in range(40) if x % 3 == k)) for k in range(3)]
    assert len(sc.profiler_collector.profilers) == 3
    sc.dump_profiles(str(tmp_path / "out"))
    files = sorted(os.listdir(tmp_path / "out"))
    assert f"rdd_{rid}.pstats" in files and len(files) == 3
    assert pstats.Stats(str(tmp_path / "out" / f"rdd_{rid}.pstats")).total_calls > 0
    assert sc.profiler_collector.profilers == []


def test_custom_profiler_class_runs_in_the_tasks(fresh_sc):
    """PySpark's test_custom_profiler: a profiler class the user defines (here a local one,
    shipped by value) replaces BasicProfiler; its show is the one called."""
    from ember import BasicProfiler

    class TestCustomProfiler(BasicProfiler):
        def show(self, id):
            self.result = "Custom formatting"

    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.python.profile", "true"))
    sc.profiler_collector.profiler_cls = TestCustomProfiler
    sc.parallelize(range(10)).foreach(_heavy_foo)
    (_, profiler, _), = sc.profiler_collector.profilers
    assert isinstance(profiler, TestCustomProfiler)
    sc.show_profiles()
    assert profiler.result == "Custom formatting"


def test_profiles_need_spark_python_profile(ctx):
    """PySpark 4.1's words (its error-conditions.json), error condition and parameters."""
    with pytest.raises(RuntimeError, match="`spark.python.profile` or "
                       "`spark.python.profile.memory` configuration\n must be set") as e:
        ctx.show_profiles()
    assert e.value.getCondition() == "INCORRECT_CONF_FOR_PROFILE"
    assert e.value.getMessageParameters() == {}
    with pytest.raises(RuntimeError, match="INCORRECT_CONF_FOR_PROFILE"):
        ctx.dump_profiles("/nonexistent/abc")
    assert ctx.profiler_collector is None


def test_profiles_are_dumped_or_printed_at_exit(tmp_path):
    """As PySpark: the first profile registers an exit hook that writes the profiles to
    spark.python.profile.dump, or prints them when it is not set."""
    import subprocess
    import sys
    script = tmp_path / "app.py"
    script.write_text(
        "import sys\n"
        "from ember import SparkConf, SparkContext\n"
        "conf = SparkConf().set('spark.python.profile', 'true')\n"
        "if len(sys.argv) > 1:\n"
        "    conf.set('spark.python.profile.dump', sys.argv[1])\n"
        "sc = SparkContext('local[2]', 'prof', conf=conf)\n"
        "def busy(x):\n"
        "    return sum(range(x))\n"
        "print(sc.parallelize(range(50), 2).map(busy).count())\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(pyspark.__file__)))
    dump = tmp_path / "dump"
    printed = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                             env=env, timeout=60, cwd=tmp_path)
    dumped = subprocess.run([sys.executable, str(script), str(dump)], capture_output=True,
                            text=True, env=env, timeout=60, cwd=tmp_path)
    assert printed.returncode == 0 and dumped.returncode == 0, printed.stderr + dumped.stderr
    assert "Profile of RDD<id=" in printed.stdout and "busy" in printed.stdout
    assert "Profile of RDD" not in dumped.stdout
    assert [f for f in os.listdir(dump) if f.startswith("rdd_")] != []


def test_a_driver_python_the_task_processes_do_not_run_fails_the_job(fresh_sc):
    """PySpark's test_with_different_versions_of_python: the task process checks the
    driver's sc.pythonVer against its own before it unpickles the stage."""
    sc = fresh_sc("local[2]")
    rdd = sc.parallelize(range(10))
    assert rdd.count() == 10
    version, sc.pythonVer = sc.pythonVer, "2.0"
    try:
        with pytest.raises(Exception, match=r"PYTHON_VERSION_MISMATCH.*Python in worker has "
                           r"different version: 3\.\d+ than that in driver: 2\.0"):
            rdd.count()
    finally:
        sc.pythonVer = version
    assert rdd.count() == 10


def test_pickled_broadcasts_are_registered_per_thread_until_cleared(ctx):
    """PySpark's sc._pickled_broadcast_vars (its test_multithread_broadcast_pickle): each
    thread sees the broadcasts it pickled; a stage's pickling leaves none behind (a
    registry kept full would hold broadcasts the cleaner should drop)."""
    from ember.serializers import CloudPickleSerializer
    b1, b2 = ctx.broadcast([1]), ctx.broadcast([2])
    CloudPickleSerializer().dumps(lambda: b1.value)
    seen = []

    def other():
        CloudPickleSerializer().dumps(lambda: b2.value)
        seen.extend(ctx._pickled_broadcast_vars)
        ctx._pickled_broadcast_vars.clear()
    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert seen == [b2] and list(ctx._pickled_broadcast_vars) == [b1]
    ctx._pickled_broadcast_vars.clear()
    assert ctx.parallelize([0], 1).map(lambda x: b1.value[x] + b2.value[x]).collect() == [3]
    assert list(ctx._pickled_broadcast_vars) == []


def test_an_insecure_gateway_is_refused_and_parallelize_leaves_no_temp_file(fresh_sc):
    """PySpark's test_forbid_insecure_gateway and test_parallelize_eager_cleanup."""
    import collections
    params = collections.namedtuple("MockGatewayParameters", "auth_token")(None)
    gateway = collections.namedtuple("MockJavaGateway", "gateway_parameters")(params)
    with pytest.raises(ValueError, match="insecure Py4j gateway"):
        SparkContext(gateway=gateway)
    sc = fresh_sc("local[2]")
    before = sorted(os.listdir(sc._temp_dir))
    sc.parallelize([0, 1, 2])
    assert sorted(os.listdir(sc._temp_dir)) == before


def test_add_archive_unpacks_for_the_tasks_as_pysparks_doctest(ctx, tmp_path):
    """PySpark's SparkContext.addArchive example: listArchives, the same path added twice
    is ignored, SparkFiles.get(name) is the unpacked directory; a .tar.gz under its
    #alias; a name taken by another path, a missing file and a member that would land
    outside its directory are refused."""
    import tarfile
    (tmp_path / "test.txt").write_text("100")
    for n in (1, 2):
        with zipfile.ZipFile(tmp_path / f"arch{n}.zip", "w") as z:
            z.write(tmp_path / "test.txt", "test.txt")
    with tarfile.open(tmp_path / "env.tar.gz", "w:gz") as t:
        t.add(tmp_path / "test.txt", "bin/test.txt")
    ctx.addArchive(str(tmp_path / "arch1.zip"))
    first = sorted(ctx.listArchives)
    ctx.addArchive(str(tmp_path / "arch2.zip"))
    ctx.addArchive(str(tmp_path / "arch2.zip"))
    ctx.addArchive(f"file://{tmp_path / 'env.tar.gz'}#environment")
    assert first == [f"file:{tmp_path / 'arch1.zip'}"]
    assert sorted(ctx.listArchives) == sorted(
        [f"file:{tmp_path / 'arch1.zip'}", f"file:{tmp_path / 'arch2.zip'}",
         f"file:{tmp_path / 'env.tar.gz'}#environment"])
    assert "arch1.zip" not in " ".join(ctx.listFiles)

    def func(iterator):
        with open("%s/test.txt" % SparkFiles.get("arch1.zip")) as f:
            mul = int(f.readline())
        with open(os.path.join(SparkFiles.get("environment"), "bin", "test.txt")) as f:
            mul += int(f.readline())
        return [x * mul for x in iterator]
    assert ctx.parallelize([1, 2, 3, 4]).mapPartitions(func).collect() == [200, 400, 600,
                                                                          800]
    other = tmp_path / "other"
    other.mkdir()
    (other / "arch1.zip").write_bytes((tmp_path / "arch1.zip").read_bytes())
    with pytest.raises(Exception, match="already registered with a different path"):
        ctx.addArchive(str(other / "arch1.zip"))
    with pytest.raises(FileNotFoundError):
        ctx.addArchive(str(tmp_path / "missing.zip"))
    with tarfile.open(tmp_path / "evil.tar", "w") as t:
        t.add(tmp_path / "test.txt", "../escaped.txt")
    with pytest.raises(tarfile.TarError):
        ctx.addArchive(str(tmp_path / "evil.tar"))
    assert "evil.tar" not in ctx.listArchives[-1]
    assert not os.path.exists(os.path.join(ctx.runtime.files_dir, "..", "escaped.txt"))
