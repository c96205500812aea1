"""Issue 13's three correctness bugs, each on local[2] and on a 2-worker standalone cluster:
a StopIteration from user code fails the task with PySpark's error (never a silently short
result), addFile(directory, recursive=True) reaches executors and an unfetchable file fails
only the tasks that need it, and a plain script named as a cluster submission's main class
reports FINISHED."""
from __future__ import annotations

import json
import logging
import operator
import os
import textwrap

import pytest

from ember import SparkConf, SparkContext, SparkFiles
from tests.test_cluster_mode import rest, submit, wait_driver, write_app

pytestmark = pytest.mark.timeout(240)

STOP_MSG = "Caught StopIteration thrown from user's code; failing the task"


@pytest.fixture(scope="module", params=["local[2]", "cluster"])
def ctx(request):
    """One context per master kind for the whole module (pytest groups the tests by it)."""
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    if request.param == "cluster":
        master = request.getfixturevalue("cluster").url
    else:
        master = request.param
    # small, so that the cluster-mode drivers below find room next to it
    sc = SparkContext(conf=SparkConf().setMaster(master).setAppName("parity-bugs")
                      .set("spark.task.maxFailures", "1").set("spark.cores.max", "2")
                      .set("spark.executor.memory", "256m"))
    ember_log = logging.getLogger("ember")
    level = ember_log.level
    ember_log.setLevel(logging.CRITICAL)    # expected task failures
    yield sc
    ember_log.setLevel(level)
    sc.stop()


def _stopit(*_):
    raise StopIteration("from user code")


@pytest.mark.parametrize("action", [
    "map", "filter", "flatMap", "keyBy", "mapValues", "groupBy", "sortBy", "foreach",
    "reduce", "fold", "aggregate_seq", "aggregate_comb", "reduceByKey", "reduceByKeyLocally",
    "combineByKey", "mapPartitions", "cartesian_flatMap", "max_key", "word_count_flatMap"])
def test_stop_iteration_in_user_code_fails_the_task(ctx, action):
    nums = ctx.parallelize(range(10), 2)
    pairs = nums.map(lambda x: (x % 2, x))
    run = {
        "map": lambda: nums.map(_stopit).collect(),
        "filter": lambda: nums.filter(_stopit).collect(),
        "flatMap": lambda: nums.flatMap(_stopit).collect(),
        "keyBy": lambda: nums.keyBy(_stopit).collect(),
        "mapValues": lambda: pairs.mapValues(_stopit).collect(),
        "groupBy": lambda: nums.groupBy(_stopit).collect(),
        "sortBy": lambda: nums.sortBy(_stopit).collect(),
        "foreach": lambda: nums.foreach(_stopit),
        "reduce": lambda: nums.reduce(_stopit),
        "fold": lambda: nums.fold(0, _stopit),
        "aggregate_seq": lambda: nums.aggregate(0, _stopit, lambda *x: 1),
        "aggregate_comb": lambda: nums.aggregate(0, lambda *x: 1, _stopit),
        "reduceByKey": lambda: pairs.reduceByKey(_stopit).collect(),
        "reduceByKeyLocally": lambda: pairs.reduceByKeyLocally(_stopit),
        "combineByKey": lambda: pairs.combineByKey(_stopit, _stopit, _stopit).collect(),
        "mapPartitions": lambda: nums.mapPartitions(_stopit).collect(),
        "cartesian_flatMap": lambda: nums.cartesian(nums).flatMap(_stopit).collect(),
        "max_key": lambda: nums.max(key=_stopit),
        # the word count idiom, whose keys are counted a run of flatMap items at a time
        "word_count_flatMap": lambda: nums.flatMap(_stopit).map(lambda w: (w, 1))
        .reduceByKey(operator.add).collect(),
    }[action]
    with pytest.raises(RuntimeError, match=STOP_MSG) as info:
        run()
    assert not isinstance(info.value, StopIteration)
    assert "STOP_ITERATION_OCCURRED" in str(info.value)
    if action in ("foreach", "reduce", "fold", "aggregate_seq", "aggregate_comb",
                  "reduceByKeyLocally", "max_key", "mapPartitions"):
        assert "from user code" in str(info.value)    # wrapped calls keep the exception's text


def test_stop_iteration_on_the_last_record_is_caught_and_early_stops_are_not(ctx):
    def stop_at_9(x):
        if x == 9:
            raise StopIteration
        return x
    nums = ctx.parallelize(range(10), 1)
    cases = [(nums.map(stop_at_9), [0, 1, 2]), (nums.filter(stop_at_9), [1, 2, 3]),
             (nums.flatMap(lambda x: [stop_at_9(x)]), [0, 1, 2])]
    for rdd, first_three in cases:
        with pytest.raises(RuntimeError, match=STOP_MSG):
            rdd.collect()
        assert rdd.take(3) == first_three          # never reaches record 9: no failure
    assert nums.filter(lambda x: x % 2).map(lambda x: x * 10).collect() == [10, 30, 50, 70, 90]


def test_stop_iteration_is_caught_over_lists_and_cached_partitions(ctx):
    """A list's own iterator (a list slice, a cached partition) reaches map/filter/flatMap
    with nothing chained after it: the check then reads the iterator's state instead."""
    def stop_at(n):
        def f(x):
            if x == n:
                raise StopIteration
            return x
        return f
    nums = ctx.parallelize(list(range(10)), 1)
    cached = ctx.parallelize(list(range(10)), 1).map(lambda x: x).cache()
    try:
        for src in (nums, cached):
            for n in (0, 4, 9):               # the first, a middle and the last record
                for rdd in (src.map(stop_at(n)), src.filter(stop_at(n)),
                            src.flatMap(lambda x, f=stop_at(n): [f(x)]),
                            src.map(stop_at(n)).map(lambda x: x)):
                    with pytest.raises(RuntimeError, match=STOP_MSG):
                        rdd.collect()
            # actions that read a map's or filter's output past its chained check
            # (consume_whole), the first and the last record failing
            for n in (0, 9):
                for rdd in (src.map(stop_at(n)), src.filter(stop_at(n)),
                            src.map(stop_at(n)).map(lambda x: x)):
                    for action in (rdd.sum, rdd.count, rdd.max,
                                   lambda r=rdd: r.reduce(operator.add),
                                   lambda r=rdd: r.fold(0, operator.add),
                                   lambda r=rdd: r.aggregate(0, operator.add, operator.add)):
                        with pytest.raises(RuntimeError, match=STOP_MSG):
                            action()
            assert src.map(lambda x: x + 1).sum() == 55
            assert src.map(lambda x: x + 1).reduce(operator.add) == 55
            assert src.filter(lambda x: x % 2).map(lambda x: x * 2).count() == 5
            assert src.flatMap(lambda x: [x, x]).reduce(operator.add) == 90
            assert src.map(lambda x: -x).max() == 0 and src.map(lambda x: x).min() == 0
            assert src.map(lambda x: x).fold(0, operator.add) == 45
            assert src.filter(lambda x: x > 4).aggregate(0, operator.add, operator.add) == 35
            assert src.filter(lambda x: x % 2).collect() == [1, 3, 5, 7, 9]
            assert src.flatMap(lambda x: [x] * (x % 3)).count() == 9
            assert src.map(stop_at(9)).take(3) == [0, 1, 2]
        assert ctx.parallelize([], 1).map(stop_at(0)).collect() == []
        assert ctx.parallelize([], 1).flatMap(stop_at(0)).collect() == []
    finally:
        cached.unpersist()


def test_a_users_own_generator_keeps_pythons_error_and_the_context_goes_on(ctx):
    def gen(it):
        for x in it:
            yield x
        next(iter([]))          # PEP 479 inside the user's generator: Python's message
    with pytest.raises(RuntimeError, match="generator raised StopIteration"):
        ctx.parallelize(range(4), 2).mapPartitions(gen).collect()
    assert ctx.parallelize(range(4), 2).map(lambda x: x * 2).collect() == [0, 2, 4, 6]


def test_add_file_directory_recursive_reaches_the_tasks(ctx, tmp_path):
    d = tmp_path / "conf_dir"
    (d / "nested").mkdir(parents=True)
    (d / "top.txt").write_text("top\n")
    (d / "nested" / "deep.txt").write_text("deep\n")
    ctx.addFile(str(d), recursive=True)

    def read(_):
        root = SparkFiles.get("conf_dir")
        files = sorted(os.path.relpath(os.path.join(r, f), root)
                       for r, _, fs in os.walk(root) for f in fs)
        with open(os.path.join(root, "nested", "deep.txt")) as f:
            return os.path.isdir(root), files, f.read().strip()
    got = set(map(repr, ctx.parallelize(range(4), 4).map(read).collect()))
    assert got == {repr((True, ["nested/deep.txt", "top.txt"], "deep"))}


def test_unfetchable_file_fails_only_the_tasks_that_need_it(ctx, tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("good\n")
    bad = tmp_path / "doomed.txt"
    bad.write_text("doomed\n")
    ctx.addFile(str(good))
    ctx.addFile(str(bad))
    os.unlink(SparkFiles.get("doomed.txt"))     # the driver's copy is gone: nobody can fetch it

    def read(name):
        with open(SparkFiles.get(name)) as f:
            return f.read().strip()
    with pytest.raises(Exception, match="doomed.txt") as info:
        ctx.parallelize(["doomed.txt"], 1).map(read).collect()
    assert "good.txt" not in str(info.value).split("Driver stacktrace")[0].splitlines()[-1]
    # later jobs of the same context, and tasks that need other files, are unaffected
    assert ctx.parallelize(range(6), 3).map(lambda x: x + 1).sum() == 21
    assert ctx.parallelize(["good.txt"] * 3, 3).map(read).collect() == ["good"] * 3


# --- a plain script as a cluster submission's main module ------------------------------

def _plain_job(directory, master: str) -> str:
    write_app(directory, "plainjob.py", f"""
        from ember import SparkContext
        sc = SparkContext({master!r}, "plain-script")
        print("PLAIN RESULT", sc.parallelize(range(10), 2).map(lambda x: x * x).sum())
        sc.stop()
    """)
    return str(directory)


@pytest.mark.parametrize("app_master", ["local[2]", "cluster"])
def test_plain_script_module_finishes_over_rest_and_rpc(cluster, tmp_path, app_master):
    master = cluster.url if app_master == "cluster" else app_master
    project = _plain_job(tmp_path / "proj", master)
    body = {"action": "CreateSubmissionRequest", "appArgs": [], "appResource": project,
            "clientSparkVersion": "4.1.1", "environmentVariables": {},
            "mainClass": "plainjob",
            "sparkProperties": {"spark.app.name": "plain-rest", "spark.driver.cores": "1",
                                "spark.driver.memory": "512m", "spark.cores.max": "1",
                                "spark.executor.memory": "256m",
                                "spark.master": cluster.rest_url}}
    code, resp = rest(cluster, "POST", "/v1/submissions/create", json.dumps(body).encode(),
                      {"Content-Type": "application/json"})
    assert code == 200 and resp["success"] is True, resp
    done = wait_driver(cluster, resp["submissionId"], timeout=120)
    assert done["state"] == "FINISHED", done
    code, st = rest(cluster, "GET", f"/v1/submissions/status/{resp['submissionId']}")
    assert st["driverState"] == "FINISHED" and "message" not in st, st

    r = submit(cluster, "--follow", "--conf", "spark.cores.max=1", "--conf",
               "spark.executor.memory=256m", "--driver-memory", "512m", "--class", "plainjob",
               project, timeout=180)
    assert r.returncode == 0, r.stderr
    assert "PLAIN RESULT 285" in r.stdout


def test_plain_script_that_raises_still_fails(cluster, tmp_path):
    project = tmp_path / "broken"
    write_app(project, "brokenjob.py", textwrap.dedent("""
        raise ValueError("the script itself failed")
    """))
    r = submit(cluster, "--follow", "--driver-memory", "512m", "--class", "brokenjob",
               str(project), timeout=180)
    assert r.returncode != 0
    assert wait_driver(cluster, r.stdout.split()[0])["state"] == "FAILED"


def test_consume_whole_reads_a_checked_map_without_its_chain_and_checks_its_end():
    """consume_whole gives a whole-input consumer the map or filter itself, after any
    records already read through the checked chain, and fails as the chain would have
    when the user's function stopped the map early."""
    from ember.util.user_code import consume_whole, filter_checked, map_checked

    for source in (lambda: iter([1, 2, 3, 4]), lambda: (x for x in [1, 2, 3, 4])):
        out = map_checked(lambda x: x * 10, source())
        assert next(out) == 10
        assert consume_whole(list, out) == [20, 30, 40]
        assert consume_whole(sum, filter_checked(lambda x: x % 2, source())) == 4

        def stop_at_3(x):
            if x == 3:
                raise StopIteration
            return x
        with pytest.raises(RuntimeError, match=STOP_MSG):
            consume_whole(sum, map_checked(stop_at_3, source()))
        with pytest.raises(RuntimeError, match=STOP_MSG):
            consume_whole(list, filter_checked(stop_at_3, source()))
    assert consume_whole(list, iter([5, 6])) == [5, 6]      # anything else: as it is
