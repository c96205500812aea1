"""The driver runtime behind SparkContext: what backends, RDDs and the UI reach through
`sc.runtime`, and that a failed start releases what it built."""
from __future__ import annotations

import os
import threading

import pytest

from ember import SparkConf, SparkContext
from ember.driver_runtime import DriverRuntime, parse_local_cluster_master, parse_local_master
from ember.errors import PySparkRuntimeError, SparkException


def test_master_urls_parse_as_sparks_regexes():
    assert parse_local_master("local") == (1, 1)
    assert parse_local_master("local[3, 2]") == (3, 2)
    assert parse_local_master("local[*]")[0] == (os.cpu_count() or 1)
    assert parse_local_master("spark://h:7077") is None
    assert parse_local_cluster_master("local-cluster[2, 1, 1024]") == (2, 1, 1024)
    assert parse_local_cluster_master("local[2]") is None


def test_a_failed_start_removes_its_scratch_directory_and_leaves_no_active_context(
        fresh_sc, tmp_path):
    conf = SparkConf().set("spark.local.dir", str(tmp_path)).set("spark.ui.enabled", "false")
    with pytest.raises(SparkException, match="Could not parse Master URL: 'bogus://x'"):
        SparkContext("bogus://x", "bad", conf=conf)
    assert SparkContext._active_spark_context is None
    assert [p for p in os.listdir(tmp_path) if p.startswith("ember-")] == []


def test_the_runtime_is_the_contexts_internals(fresh_sc):
    sc = fresh_sc("local[2]")
    rt = sc.runtime
    assert isinstance(rt, DriverRuntime) and not rt.stopped
    assert (rt.app_id, rt.start_time, rt.ui_url) == (sc.applicationId, sc.startTime,
                                                     sc.uiWebUrl)
    assert os.path.isdir(rt.broadcast_dir) and os.path.isdir(rt.files_dir)
    first = rt.new_rdd_id()
    assert sc.parallelize([1]).id() == first + 1, "RDDs take their ids from the runtime"
    assert rt.run_job(sc.parallelize(range(4), 2), sum) == [1, 5]
    sc.setLocalProperty("k", "main")
    seen = {}
    t = threading.Thread(target=lambda: seen.update(props=dict(rt.local_properties())))
    t.start()
    t.join()
    assert rt.local_properties()["k"] == "main" and seen["props"] == {}, "per thread"
    local_dir = rt.local_dir
    sc.stop()
    assert rt.stopped and not os.path.exists(local_dir)
    with pytest.raises(PySparkRuntimeError, match="stopped SparkContext"):
        sc.parallelize([1])
