"""TaskContext() built by user code inside a task is the running task's context (PySpark's
singleton), on local[N] and on a standalone cluster; outside a task get() is None."""
from __future__ import annotations

import os

import pytest

from ember import SparkContext, TaskContext

pytestmark = pytest.mark.timeout(180)


def _describe(_):
    built = TaskContext()
    ctx = TaskContext.get()
    return (built is ctx, built.partitionId(), built.stageId(), built.attemptNumber(),
            built.taskAttemptId(), built.cpus(), built.getLocalProperty("who"))


def _check(sc: SparkContext) -> None:
    assert TaskContext.get() is None
    sc.setLocalProperty("who", "test")
    out = sc.parallelize(range(4), 4).map(_describe).collect()
    assert [o[0] for o in out] == [True] * 4
    assert [o[1] for o in out] == [0, 1, 2, 3]
    assert len({o[2] for o in out}) == 1
    assert [o[3] for o in out] == [0] * 4
    assert len({o[4] for o in out}) == 4, "task attempt ids are unique"
    assert {o[5] for o in out} == {1} and {o[6] for o in out} == {"test"}
    # the next task on the same task process gets its own context, not the previous one
    again = sc.parallelize(range(4), 4).map(_describe).collect()
    assert {o[2] for o in again} != {o[2] for o in out}
    assert not {o[4] for o in again} & {o[4] for o in out}
    assert TaskContext.get() is None


def test_task_context_built_in_a_task_on_local(fresh_sc):
    _check(fresh_sc("local[2]"))


def test_task_context_built_in_a_task_on_a_cluster(cluster):
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    sc = SparkContext(cluster.url, "taskcontext-cluster")
    try:
        _check(sc)
    finally:
        sc.stop()


def test_attempt_number_of_a_retried_task(fresh_sc, tmp_path):
    sc = fresh_sc("local[2,3]")
    marker = str(tmp_path / "failed-once")

    def flaky(x):
        ctx = TaskContext()
        if not os.path.exists(marker):
            open(marker, "w").close()
            raise ValueError("first attempt")
        return ctx.attemptNumber()
    assert sc.parallelize([1], 1).map(flaky).collect() == [1]


def test_task_context_on_the_driver_is_not_a_task(fresh_sc):
    fresh_sc("local[1]")
    assert TaskContext.get() is None
