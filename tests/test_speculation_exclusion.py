"""Speculation and exclude-on-failure as state machines: the real TaskSchedulerImpl and
TaskSetManager on a manual clock, with a backend and DAG scheduler that only record what
the scheduler asks of them."""
from __future__ import annotations

import pytest

from ember.clock import ManualClock
from ember.scheduler.backend import WorkerOffer
from ember.scheduler.health_tracker import (ExcludeSettings, HealthTracker,
                                            TaskSetExcludelist)
from ember.scheduler.speculation import SpeculationSettings, median
from ember.scheduler.task import Task, TaskSet
from ember.scheduler.task_scheduler import TaskSchedulerImpl
from tests.helpers.recording_scheduler import RecordingBackend, RecordingDag


def make(n_tasks=10, speculation=None, exclude=None, max_failures=4, clock=None):
    clock = clock or ManualClock(1000.0)
    posted = []
    ht = HealthTracker(exclude, clock, posted.append) if exclude else None
    sched = TaskSchedulerImpl(max_failures, locality_wait=0.0, clock=clock,
                              speculation=speculation, health_tracker=ht)
    backend, dag = RecordingBackend(), RecordingDag()
    sched.initialize(backend, dag)
    if ht is not None:
        ht.kill_executors = backend.kill_executors
    tasks = [Task(0, 0, None, i, True, i) for i in range(n_tasks)]
    sched.submit_tasks(TaskSet(tasks, 0, 0, 0, {}, b"", b""))
    return sched, backend, dag, clock, ht, posted


def offers(*specs):
    """specs: (executor, host, slots)"""
    return [WorkerOffer(e, h, s) for e, h, n in specs for s in range(n)]


SPEC = SpeculationSettings(interval=0.1, multiplier=3.0, quantile=0.9, min_task_runtime=0.1)


def test_median_as_sparks_median_heap():
    assert median([1.0, 2.0, 10.0]) == 2.0
    assert median([1.0, 2.0, 3.0, 10.0]) == 2.5


def test_straggler_gets_speculative_copy_on_another_host_and_first_success_wins():
    sched, backend, dag, clock, _, _ = make(10, SPEC)
    launched = sched.resource_offers(offers(("1", "hostA", 5), ("2", "hostB", 5)))
    assert len(launched) == 10
    straggler = next(td for td in launched if td.executor_id == "1")
    clock.advance(1.0)
    for td in launched:
        if td is not straggler:
            sched.status_update(td.task_id, "FINISHED", "r", {"acc": 1}, {}, [])
    # threshold = max(minTaskRuntime, 3 x median 1.0 s) = 3 s after launch
    clock.advance(1.9)
    assert not sched.check_speculatable_tasks()
    clock.advance(0.2)
    assert sched.check_speculatable_tasks()
    assert not sched.check_speculatable_tasks()      # marked once
    # never a second attempt on the straggler's host
    assert sched.resource_offers(offers(("1", "hostA", 4), ("3", "hostA", 1))) == []
    copy = sched.resource_offers(offers(("2", "hostB", 1)))
    assert len(copy) == 1 and copy[0].index == straggler.index
    tsm = sched.task_id_to_tsm[copy[0].task_id]
    assert tsm.task_infos[copy[0].task_id].speculative
    assert not tsm.task_infos[straggler.task_id].speculative
    clock.advance(0.5)
    sched.status_update(copy[0].task_id, "FINISHED", "copy", {"acc": 1}, {}, [])
    assert backend.killed == [(straggler.task_id, "another attempt succeeded")]
    sched.status_update(straggler.task_id, "KILLED", "another attempt succeeded", {}, {}, [])
    results = [e for e in dag.ended if e[0] == straggler.index]
    assert [(r[1], r[2]) for r in results] == [("Success", "copy"),
                                              ("TaskKilled", None)]
    assert not dag.failed and sched.stage_tsms == {}


def test_late_duplicate_success_counts_no_accumulators():
    sched, backend, dag, clock, _, _ = make(2, SpeculationSettings(quantile=0.5))
    a, b = sched.resource_offers(offers(("1", "hostA", 1), ("2", "hostB", 1)))
    clock.advance(1.0)
    sched.status_update(a.task_id, "FINISHED", "x", {"acc": 1}, {}, [])
    clock.advance(3.5)
    assert sched.check_speculatable_tasks()
    other = ("1", "hostA", 1) if b.executor_id == "2" else ("2", "hostB", 1)
    (copy,) = sched.resource_offers(offers(other))
    sched.status_update(copy.task_id, "FINISHED", "y", {"acc": 1}, {}, [])
    sched.status_update(b.task_id, "FINISHED", "y", {"acc": 1}, {}, [])   # raced the kill
    ends = [e for e in dag.ended if e[0] == b.index]
    assert [e[3] for e in ends] == [{"acc": 1}, {}]


def test_no_speculation_before_quantile_unless_threshold_and_few_tasks():
    sched, _, _, clock, _, _ = make(10, SPEC)
    launched = sched.resource_offers(offers(("1", "hostA", 5), ("2", "hostB", 5)))
    clock.advance(1.0)
    for td in launched[:8]:                          # 8 < floor(0.9 x 10)
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    clock.advance(100.0)
    assert not sched.check_speculatable_tasks()
    spec = SpeculationSettings(duration_threshold=5.0, executor_cores=4)
    sched, _, _, clock, _, _ = make(4, spec)
    sched.resource_offers(offers(("1", "hostA", 2), ("2", "hostB", 2)))
    clock.advance(4.0)
    assert not sched.check_speculatable_tasks()
    clock.advance(1.5)
    assert sched.check_speculatable_tasks()
    # more tasks than one executor's slots: the threshold alone does not speculate
    sched, _, _, clock, _, _ = make(5, spec)
    sched.resource_offers(offers(("1", "hostA", 3), ("2", "hostB", 2)))
    clock.advance(60.0)
    assert not sched.check_speculatable_tasks()


def test_speculation_off_and_single_task_never_speculate():
    sched, _, _, clock, _, _ = make(3, None)
    sched.resource_offers(offers(("1", "hostA", 3)))
    clock.advance(100)
    (tsm,) = sched.stage_tsms[0].values()
    assert not tsm.check_speculatable_tasks(0.1) and not tsm.speculatable
    sched, _, _, clock, _, _ = make(1, SPEC)
    sched.resource_offers(offers(("1", "hostA", 1)))
    clock.advance(100)
    assert not sched.check_speculatable_tasks()


# --- exclude on failure -------------------------------------------------------------------
EX = ExcludeSettings()


def fail(sched, td, msg="boom"):
    sched.status_update(td.task_id, "FAILED", ("RuntimeError", msg, "", True), {}, {}, [])


def test_validation_uses_sparks_text():
    with pytest.raises(ValueError) as e:
        ExcludeSettings.from_conf({"spark.excludeOnFailure.enabled": "true",
                                   "spark.task.maxFailures": "2"})
    assert str(e.value) == (
        "spark.excludeOnFailure.task.maxTaskAttemptsPerNode ( = 2) was >= "
        "spark.task.maxFailures ( = 2 ). Though excludeOnFailure is enabled, with this "
        "configuration, Spark will not be robust to one bad node. Decrease "
        "spark.excludeOnFailure.task.maxTaskAttemptsPerNode, increase spark.task.maxFailures, "
        "or disable excludeOnFailure with spark.excludeOnFailure.enabled")
    with pytest.raises(ValueError, match="maxFailedTasksPerExecutor was 0, but must be > 0."):
        ExcludeSettings.from_conf({"spark.excludeOnFailure.enabled": "true",
                                   "spark.excludeOnFailure.stage.maxFailedTasksPerExecutor": "0"})
    assert ExcludeSettings.from_conf({}) is None
    s = ExcludeSettings.from_conf({"spark.excludeOnFailure.enabled": "true"})
    assert (s.max_task_attempts_per_executor, s.max_task_attempts_per_node,
            s.max_failures_per_exec_stage, s.max_failed_exec_per_node_stage,
            s.max_failures_per_exec, s.max_failed_exec_per_node, s.timeout,
            s.kill_excluded_executors) == (1, 2, 2, 2, 2, 2, 3600.0, False)


def test_task_set_excludelist_thresholds():
    clock, posted = ManualClock(), []
    ex = TaskSetExcludelist(EX, 3, 0, clock, posted.append)
    ex.update_excluded_for_failed_task("hostA", "1", 0, "r0")
    assert ex.is_executor_excluded_for_task("1", 0)
    assert not ex.is_node_excluded_for_task("hostA", 0)
    assert not ex.is_executor_excluded_for_task_set("1")
    ex.update_excluded_for_failed_task("hostA", "2", 0, "r1")
    assert ex.is_node_excluded_for_task("hostA", 0)          # 2 attempts on the node
    ex.update_excluded_for_failed_task("hostA", "1", 1, "r2")
    assert ex.is_executor_excluded_for_task_set("1")          # 2 distinct tasks
    assert not ex.is_node_excluded_for_task_set("hostA")
    ex.update_excluded_for_failed_task("hostA", "2", 2, "r3")
    assert ex.is_node_excluded_for_task_set("hostA")          # 2 excluded executors
    assert [type(e).__name__ for e in posted] == [
        "ExecutorExcludedForStage", "ExecutorExcludedForStage", "NodeExcludedForStage"]
    assert ex.latest_failure_reason == "r3"


def test_failed_attempt_avoids_its_executor_and_app_level_counts_successful_sets_only():
    sched, backend, dag, clock, ht, posted = make(4, exclude=EX)
    launched = sched.resource_offers(offers(("bad", "hostA", 2), ("good", "hostB", 2)))
    on_bad = [td for td in launched if td.executor_id == "bad"]
    for td in on_bad:
        fail(sched, td)
    # the failed tasks may not go back to "bad" (per task, then the whole stage)
    assert sched.resource_offers(offers(("bad", "hostA", 2))) == []
    assert not ht.is_executor_excluded("bad")     # the task set has not succeeded yet
    for td in launched:
        if td.executor_id == "good":
            sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    retries = sched.resource_offers(offers(("good", "hostB", 2)))
    assert sorted(td.index for td in retries) == sorted(td.index for td in on_bad)
    for td in retries:
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    assert ht.is_executor_excluded("bad") and not ht.is_node_excluded("hostA")
    assert any(type(e).__name__ == "ExecutorExcluded" and e.executor_id == "bad"
               and e.task_failures == 2 for e in posted)
    # a new task set gets no offer from the excluded executor, until the timeout
    sched.submit_tasks(TaskSet([Task(1, 0, None, 0, True)], 1, 0, 1, {}, b"", b""))
    assert sched.resource_offers(offers(("bad", "hostA", 1))) == []
    clock.advance(3600.5)
    assert len(sched.resource_offers(offers(("bad", "hostA", 1)))) == 1
    assert any(type(e).__name__ == "ExecutorUnexcluded" for e in posted)


def test_without_exclusion_a_failed_task_moves_to_another_live_executor_once_counted():
    """Ember (issue 17): without exclude-on-failure a failed task waits for another executor
    that made offers, and runs on its own executor again once that one is lost; each
    failure counts once towards spark.task.maxFailures."""
    sched, _, _, _, _, _ = make(1, max_failures=4)
    (td,) = sched.resource_offers(offers(("1", "hostA", 1), ("2", "hostB", 1)))
    tsm = sched.task_id_to_tsm[td.task_id]
    fail(sched, td)
    assert tsm.num_failures[td.index] == 1
    other = "2" if td.executor_id == "1" else "1"
    assert sched.resource_offers(offers((td.executor_id, "hostX", 1))) == []
    sched.executor_lost(other, "gone")
    (again,) = sched.resource_offers(offers((td.executor_id, "hostX", 1)))
    assert again.index == td.index and tsm.num_failures[td.index] == 1


def test_with_exclusion_the_excludelist_alone_decides_where_a_failed_task_retries():
    """maxTaskAttemptsPerExecutor=2: a second attempt on the same executor is allowed even
    though another executor made offers (Ember's own rule is off with an excludelist)."""
    from dataclasses import replace
    sched, _, _, _, _, _ = make(1, exclude=replace(EX, max_task_attempts_per_executor=2,
                                                   max_task_attempts_per_node=3))
    (td,) = sched.resource_offers(offers(("1", "hostA", 1), ("2", "hostB", 1)))
    fail(sched, td)
    (again,) = sched.resource_offers(offers((td.executor_id, "hostA", 1)))
    assert again.index == td.index
    fail(sched, again)
    assert sched.resource_offers(offers((td.executor_id, "hostA", 1))) == []


def test_failures_of_a_failed_task_set_do_not_exclude_for_the_application():
    sched, _, dag, _, ht, _ = make(2, exclude=EX, max_failures=3)
    for _ in range(3):
        launched = sched.resource_offers(offers(("1", "hostA", 1), ("2", "hostB", 1),
                                                ("3", "hostC", 1)))
        for td in launched:
            fail(sched, td)
        if dag.failed:
            break
    assert dag.failed
    assert not ht.is_executor_excluded("1") and not ht.executor_to_excluded


def test_task_that_cannot_run_anywhere_aborts_with_sparks_message():
    sched, backend, dag, _, ht, _ = make(1, exclude=EX)
    (td,) = sched.resource_offers(offers(("1", "hostA", 1)))
    sched.status_update(td.task_id, "FAILED", ("RuntimeError", "bad disk", "", True), {}, {},
                        [])
    # only executor 1 exists, it is busy with nothing: Spark kills the idle excluded
    # executor and waits; with a busy one it aborts at once
    sched.resource_offers(offers(("1", "hostA", 1)))
    assert backend.killed_executors == ["1"] and not dag.failed
    sched.clock.advance(121)
    sched.resource_offers(offers(("1", "hostA", 1)))
    assert len(dag.failed) == 1
    msg = dag.failed[0]
    assert "Aborting TaskSet 0.0 because task 0 (partition 0)\ncannot run anywhere due to " \
           "node and executor excludeOnFailure." in msg
    assert "RuntimeError: bad disk" in msg
    assert "ExcludeOnFailure behavior can be configured via spark.excludeOnFailure.*." in msg


def test_context_refuses_exclude_config_spark_refuses(fresh_sc):
    from ember import SparkConf
    from ember.errors import IllegalArgumentException
    conf = (SparkConf().set("spark.excludeOnFailure.enabled", "true")
            .set("spark.task.maxFailures", "2"))
    with pytest.raises(IllegalArgumentException, match=r"maxTaskAttemptsPerNode \( = 2\) was "
                       r">= spark.task.maxFailures \( = 2 \)"):
        fresh_sc("local[2]", "bad-exclude", conf)


def test_exclusion_and_speculation_events_round_trip_as_sparks_jackson_json():
    from ember.scheduler import listener as sl
    from ember.ui.event_log import event_to_json, json_to_event
    events = [sl.SpeculativeTaskSubmitted(3, 0, 7, 7), sl.ExecutorExcluded(12.5, "4", 2),
              sl.ExecutorUnexcluded(13.0, "4"), sl.NodeExcluded(14.0, "hostA", 2),
              sl.NodeUnexcluded(15.0, "hostA"), sl.ExecutorExcludedForStage(16.0, "4", 2, 3, 0),
              sl.NodeExcludedForStage(17.0, "hostA", 2, 3, 0)]
    for e in events:
        d = event_to_json(e)
        assert d["Event"] == "org.apache.spark.scheduler.SparkListener" + type(e).__name__
        assert json_to_event(d) == e
    assert event_to_json(events[1]) == {
        "Event": "org.apache.spark.scheduler.SparkListenerExecutorExcluded", "time": 12500,
        "executorId": "4", "taskFailures": 2}


def test_speculative_copy_prefers_the_tasks_preferred_host():
    from ember.scheduler.task import TaskLocation
    clock = ManualClock(1000.0)
    sched = TaskSchedulerImpl(4, locality_wait=0.0, clock=clock,
                              speculation=SpeculationSettings(quantile=0.5))
    backend, dag = RecordingBackend(), RecordingDag()
    sched.initialize(backend, dag)
    tasks = [Task(0, 0, None, i, True, i, locations=[TaskLocation("hostB")]) for i in range(2)]
    sched.submit_tasks(TaskSet(tasks, 0, 0, 0, {}, b"", b""))
    clock.advance(5)                                   # past the locality wait: ANY
    a, b = sched.resource_offers(offers(("1", "hostA", 2)))
    clock.advance(1)
    sched.status_update(a.task_id, "FINISHED", None, {}, {}, [])
    clock.advance(4)
    assert sched.check_speculatable_tasks()
    (copy,) = sched.resource_offers(offers(("2", "hostB", 1)))
    info = sched.task_id_to_tsm[copy.task_id].task_infos[copy.task_id]
    assert info.speculative and info.locality == "NODE_LOCAL" and copy.index == b.index


def test_allocation_demand_counts_speculative_copies_as_spark_does():
    """Dynamic allocation's (pending, running): a marked copy is pending until it launches,
    then a running attempt; it never hides a regular pending task."""
    sched, _, _, clock, _, _ = make(10, SPEC)
    assert sched.tasks_needed_by_profile() == {0: (10, 0)}
    launched = sched.resource_offers(offers(("1", "hostA", 2), ("2", "hostB", 2)))
    assert sched.tasks_needed_by_profile() == {0: (6, 4)}
    clock.advance(1.0)
    # the task left running is on hostA (offers are shuffled), so its copy may use hostB
    slow = next(td for td in launched if td.executor_id == "1")
    for td in launched:
        if td is not slow:
            sched.status_update(td.task_id, "FINISHED", "r", {}, {}, [])
    rest = sched.resource_offers(offers(("2", "hostB", 3), ("3", "hostC", 3)))
    clock.advance(1.0)
    for td in rest:
        sched.status_update(td.task_id, "FINISHED", "r", {}, {}, [])
    assert sched.tasks_needed_by_profile() == {0: (0, 1)}
    clock.advance(5.0)
    assert sched.check_speculatable_tasks()
    assert sched.tasks_needed_by_profile() == {0: (1, 1)}      # the marked copy
    copy = sched.resource_offers(offers(("2", "hostB", 1)))
    assert len(copy) == 1
    assert sched.tasks_needed_by_profile() == {0: (0, 2)}      # two attempts of one task


def test_attempt_starting_after_the_commit_leaves_nothing_behind(tmp_path):
    """A speculative copy still starting when its job committed must neither write a part
    nor recreate _temporary beside the committed output."""
    from types import SimpleNamespace

    from ember.output_commit import OutputCommitter
    out = str(tmp_path / "out")
    committer = OutputCommitter(out)
    committer.setup_job()
    ctx = lambda tid: SimpleNamespace(stageId=lambda: 0, partitionId=lambda: 0,
                                      taskAttemptId=lambda: tid)
    first = committer.attempt_file(ctx(1), "part-00000")
    with open(first, "w") as f:
        f.write("first\n")
    committer.commit_job([first])
    with pytest.raises(FileNotFoundError):
        committer.attempt_file(ctx(2), "part-00000")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["_SUCCESS", "part-00000"]
    assert (tmp_path / "out" / "part-00000").read_text() == "first\n"
