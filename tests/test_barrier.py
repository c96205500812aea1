"""Barrier execution mode through the public API, on local[N] and on a standalone cluster:
RDD.barrier(), BarrierTaskContext.barrier()/allGather()/getTaskInfos(), all tasks launched
together or not at all, a failed task failing and retrying the whole stage, and the jobs
Spark refuses (too few slots, unsupported RDD chains, dynamic allocation)."""
from __future__ import annotations

import os
import time
from operator import add

import pytest

from ember import BarrierTaskContext, RDDBarrier, SparkConf, SparkContext, TaskContext
from ember.errors import PySparkRuntimeError, SparkException

pytestmark = pytest.mark.timeout(240)

SLOTS_ERROR = ("[SPARK-24819]: Barrier execution mode does not allow run a barrier stage that "
               "requires more slots than the total number of slots in the cluster currently. "
               "Please init a new cluster with more resources(e.g. CPU, GPU) or repartition the "
               "input RDD(s) to reduce the number of slots required to run this barrier stage.")
CHAIN_ERROR = ("[SPARK-24820][SPARK-24821]: Barrier execution mode does not allow the following "
               "pattern of RDD chain within a barrier stage")


def _conf(**kv: str) -> SparkConf:
    c = SparkConf()
    for k, v in kv.items():
        c.set(k, v)
    return c


def _cluster_context(cluster, name: str, **conf: str) -> SparkContext:
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    sc = SparkContext(cluster.url, name, conf=_conf(**conf))
    deadline = time.time() + 60         # barrier stages need every slot registered
    while sc.runtime.scheduler_backend.max_num_concurrent_tasks() < 4 and time.time() < deadline:
        time.sleep(0.1)
    return sc


def _sync_everything(it):
    ctx = BarrierTaskContext.get()
    ctx.barrier()
    gathered = ctx.allGather(f"p{ctx.partitionId()}")
    ctx.barrier()
    return [(ctx.partitionId(), gathered, [i.address for i in ctx.getTaskInfos()],
             TaskContext() is ctx, sorted(it))]


def _check_sync_result(out: list, n: int) -> None:
    assert [o[0] for o in out] == list(range(n))
    for pid, gathered, addresses, same_ctx, data in out:
        assert gathered == [f"p{i}" for i in range(n)]      # ordered by partition id
        assert len(addresses) == n and all(":" in a for a in addresses)
        assert same_ctx
    assert [x for o in out for x in o[4]] == list(range(2 * n))


# --- local mode --------------------------------------------------------------------------
def test_barrier_allgather_and_task_infos_on_local(fresh_sc):
    sc = fresh_sc("local[4]")
    barrier = sc.parallelize(range(8), 4).barrier()
    assert isinstance(barrier, RDDBarrier)
    _check_sync_result(barrier.mapPartitions(_sync_everything).collect(), 4)
    # mapPartitionsWithIndex, and a transformation after the barrier RDD stays in the stage
    out = (sc.parallelize(range(4), 2).barrier()
           .mapPartitionsWithIndex(lambda i, it: [(i, BarrierTaskContext.get().allGather(str(i)))])
           .map(lambda t: t).collect())
    assert out == [(0, ["0", "1"]), (1, ["0", "1"])]


def test_barrier_context_outside_a_barrier_stage(fresh_sc):
    sc = fresh_sc("local[2]")
    assert TaskContext.get() is None
    with pytest.raises(PySparkRuntimeError, match="NOT_IN_BARRIER_STAGE"):
        BarrierTaskContext.get()

    def probe(_):
        try:
            BarrierTaskContext.get()
        except PySparkRuntimeError as e:
            return str(e)
        return "no error"
    assert sc.parallelize([1], 1).map(probe).collect() == \
        ["[NOT_IN_BARRIER_STAGE] It is not in a barrier stage."]


def test_allgather_refuses_a_non_string_message(fresh_sc):
    sc = fresh_sc("local[2]")

    def bad(it):
        try:
            BarrierTaskContext.get().allGather(1)
        except TypeError as e:
            return [str(e)]
        return ["no error"]
    out = sc.parallelize(range(2), 2).barrier().mapPartitions(bad).collect()
    assert out == ["Argument `message` must be of type `str`"] * 2


def test_too_few_slots_fails_with_sparks_error_after_the_retries(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf(**{
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "0.2s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "3"}))
    start = time.monotonic()
    with pytest.raises(SparkException) as e:
        sc.parallelize(range(3), 3).barrier().mapPartitions(lambda it: it).collect()
    assert str(e.value) == SLOTS_ERROR
    assert 0.6 <= time.monotonic() - start < 60      # 3 re-checks 0.2 s apart, then fail
    assert sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: it).collect() == [0, 1]


@pytest.mark.parametrize("job", ["union", "take", "zip", "coalesce"])
def test_unsupported_rdd_chains_are_refused(fresh_sc, job):
    sc = fresh_sc("local[4]")
    b1 = sc.parallelize(range(4), 2).barrier().mapPartitions(lambda it: it)
    b2 = sc.parallelize(range(4), 2).barrier().mapPartitions(lambda it: it)
    run = {"union": lambda: b1.union(sc.parallelize(range(2), 1)).collect(),
           "take": lambda: b1.take(1),
           "zip": lambda: b1.zip(b2).collect(),
           "coalesce": lambda: b1.coalesce(1).collect()}[job]
    with pytest.raises(SparkException) as e:
        run()
    assert str(e.value).startswith(CHAIN_ERROR)
    assert b1.collect() == [0, 1, 2, 3]              # the context is fine afterwards


def test_barrier_calls_mismatched_across_tasks_time_out(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf(**{"spark.barrier.sync.timeout": "2s"}))

    def uneven(it):
        ctx = BarrierTaskContext.get()
        ctx.barrier()
        if ctx.partitionId() == 0:
            ctx.barrier()                 # partition 1 never makes this second call
        return it
    with pytest.raises(Exception) as e:
        sc.parallelize(range(2), 2).barrier().mapPartitions(uneven).collect()
    msg = str(e.value)
    assert "Could not recover from a failed barrier ResultStage" in msg
    assert "The coordinator didn't get all barrier sync requests for barrier epoch 1 from " \
           "Stage " in msg and "within 2 second(s)." in msg


def test_mixing_barrier_and_allgather_in_one_sync_fails(fresh_sc):
    sc = fresh_sc("local[2]", conf=_conf(**{"spark.barrier.sync.timeout": "30s"}))

    def mixed(it):
        ctx = BarrierTaskContext.get()
        if ctx.partitionId() == 0:
            ctx.barrier()
        else:
            ctx.allGather("x")
        return it
    with pytest.raises(Exception) as e:
        sc.parallelize(range(2), 2).barrier().mapPartitions(mixed).collect()
    assert "Different barrier sync types found for the sync Stage " in str(e.value)
    assert "ALL_GATHER, BARRIER. Please use the same barrier sync type within a single " \
           "sync." in str(e.value)


def _fail_once_then_sync(marker_dir: str):
    """Partition 0 of the first stage attempt fails before the barrier (its siblings wait
    in barrier() until they are killed); every task records which attempt ran it."""
    def f(it):
        ctx = BarrierTaskContext.get()
        attempt = ctx.stageAttemptNumber()
        open(os.path.join(marker_dir, f"{attempt}-{ctx.partitionId()}"), "w").close()
        if attempt == 0 and ctx.partitionId() == 0:
            raise ValueError("first attempt fails")
        ctx.barrier()
        return it
    return f


def _assert_whole_stage_retried(marker_dir: str, n: int) -> None:
    names = set(os.listdir(marker_dir))
    assert {f"1-{p}" for p in range(n)} <= names     # the retry ran every task again
    assert "0-0" in names


def test_failed_barrier_task_retries_the_whole_map_stage_on_local(fresh_sc, tmp_path):
    sc = fresh_sc("local[3]")
    rdd = sc.parallelize(range(6), 3).barrier().mapPartitions(_fail_once_then_sync(str(tmp_path)))
    assert sorted(rdd.map(lambda x: (x % 2, 1)).reduceByKey(add).collect()) == [(0, 3), (1, 3)]
    _assert_whole_stage_retried(str(tmp_path), 3)


def test_failed_barrier_result_stage_aborts_the_job(fresh_sc, tmp_path):
    sc = fresh_sc("local[2]")
    rdd = sc.parallelize(range(4), 2).barrier().mapPartitions(_fail_once_then_sync(str(tmp_path)))
    with pytest.raises(Exception) as e:
        rdd.collect()
    assert "Job aborted due to stage failure: Could not recover from a failed barrier " \
           "ResultStage. Most recent failure reason: Stage failed because barrier task " \
           "ResultTask(" in str(e.value)
    assert "first attempt fails" in str(e.value)


# --- standalone ----------------------------------------------------------------------------
def test_barrier_on_a_standalone_cluster(cluster, tmp_path):
    sc = _cluster_context(cluster, "barrier-standalone")
    try:
        out = sc.parallelize(range(8), 4).barrier().mapPartitions(_sync_everything).collect()
        _check_sync_result(out, 4)
        addresses = out[0][2]
        assert len(set(addresses)) == 2 and all(a.startswith("127.0.0.1:") for a in addresses)
        # a failed task: all siblings killed, the map stage rerun as a whole
        rdd = sc.parallelize(range(6), 3).barrier().mapPartitions(
            _fail_once_then_sync(str(tmp_path)))
        assert sorted(rdd.map(lambda x: (x % 2, 1)).reduceByKey(add).collect()) == \
            [(0, 3), (1, 3)]
        _assert_whole_stage_retried(str(tmp_path), 3)
    finally:
        sc.stop()


def test_standalone_refuses_too_many_tasks_and_dynamic_allocation(cluster):
    sc = _cluster_context(cluster, "barrier-refusals", **{
        "spark.scheduler.barrier.maxConcurrentTasksCheck.interval": "0.2s",
        "spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures": "2"})
    try:
        with pytest.raises(SparkException) as e:
            sc.parallelize(range(5), 5).barrier().mapPartitions(lambda it: it).collect()
        assert str(e.value) == SLOTS_ERROR
    finally:
        sc.stop()
    sc = _cluster_context(cluster, "barrier-dyn", **{"spark.dynamicAllocation.enabled": "true"})
    try:
        with pytest.raises(SparkException) as e:
            sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: it).collect()
        assert str(e.value) == (
            "[SPARK-24942]: Barrier execution mode does not support dynamic resource "
            "allocation for now. You can disable dynamic resource allocation by setting Spark "
            'conf "spark.dynamicAllocation.enabled" to "false".')
        assert sc.parallelize(range(4), 2).sum() == 6        # other jobs are unaffected
    finally:
        sc.stop()


def test_is_barrier_marks_the_barrier_stage_only(fresh_sc, tmp_path):
    sc = fresh_sc("local[4]", conf=_conf(**{"spark.eventLog.enabled": "true",
                                            "spark.eventLog.dir": str(tmp_path)}))
    rdd = sc.parallelize(range(12), 4)
    assert not rdd._is_barrier()
    barrier = rdd.barrier().mapPartitions(lambda it: it)
    assert barrier._is_barrier() and barrier.map(lambda x: x)._is_barrier()
    assert not barrier.map(lambda x: (x, 1)).reduceByKey(add)._is_barrier(), \
        "a shuffle ends the barrier stage"
    assert sorted(barrier.map(lambda x: (x % 2, x)).reduceByKey(add).collect()) == \
        [(0, 30), (1, 36)]
    sc.stop()
    import json
    [log] = os.listdir(tmp_path)
    stages = [json.loads(line) for line in open(tmp_path / log)
              if '"SparkListenerStageCompleted"' in line]
    flags = {s["Stage Info"]["Stage ID"]: {r["RDD ID"]: r["Barrier"]
                                           for r in s["Stage Info"]["RDD Info"]}
             for s in stages}
    map_stage, result_stage = (flags[k] for k in sorted(flags))
    assert any(map_stage.values()) and not map_stage[rdd.id()]
    assert not any(result_stage.values())


def test_the_coordinator_only_believes_tasks_of_a_running_barrier_stage(fresh_sc):
    sc = fresh_sc("local[2]")
    sc.setLocalProperty("addresses", "spoofed:1,spoofed:2")   # a non-barrier stage posing

    def pose(_):
        try:
            BarrierTaskContext.get().barrier()
        except SparkException as e:
            return str(e)
        return "synced"
    [msg] = sc.parallelize([1], 1).map(pose).collect()
    assert msg.startswith("Task ") and "is not a running task of barrier stage" in msg


def test_driver_refuses_request_to_sync_from_a_non_executor(cluster):
    from ember.deploy.messages import RequestToSync
    from ember.rpc import RpcEnv, RpcRemoteError
    sc = _cluster_context(cluster, "barrier-foreign-request")
    env = RpcEnv.create("foreign", "127.0.0.1", 0, {}, client_mode=True)
    try:
        ref = env.endpoint_ref(sc.runtime.scheduler_backend.rpc_env.address, "CoarseGrainedScheduler")
        with pytest.raises(RpcRemoteError) as e:
            ref.ask_sync(RequestToSync(2, 0, 0, 0, 0, 0, "", "BARRIER"), timeout=30)
        assert "which is not a registered executor" in str(e.value)
        assert sc.parallelize(range(4), 2).barrier().mapPartitions(
            lambda it: [BarrierTaskContext.get().allGather("ok")]).collect() == [["ok", "ok"]] * 2
    finally:
        env.shutdown()
        sc.stop()


def test_barrier_calls_outside_a_running_task_are_refused():
    ctx = BarrierTaskContext._getOrCreate()
    try:
        for call, name in ((ctx.barrier, "barrier"), (lambda: ctx.allGather("x"), "allGather"),
                           (ctx.getTaskInfos, "getTaskInfos")):
            with pytest.raises(PySparkRuntimeError) as e:
                call()
            assert str(e.value) == (f"[CALL_BEFORE_INITIALIZE] Not supported to call "
                                    f"`{name}` before initialize BarrierTaskContext.")
    finally:
        TaskContext._setTaskContext(None)


def test_barrier_timeout_reaches_tasks_through_their_executors(cluster):
    sc = _cluster_context(cluster, "barrier-timeout", **{"spark.barrier.sync.timeout": "2s"})

    def only_first_syncs(it):
        ctx = BarrierTaskContext.get()
        if ctx.partitionId() == 0:
            ctx.barrier()
        return it
    try:
        with pytest.raises(Exception) as e:
            sc.parallelize(range(2), 2).barrier().mapPartitions(only_first_syncs).collect()
        assert "The coordinator didn't get all barrier sync requests for barrier epoch 0 " \
               "from Stage " in str(e.value) and "within 2 second(s)." in str(e.value)
    finally:
        sc.stop()
