"""TaskSetManager as a state machine on a manual clock, no processes: delay scheduling
across locality levels, retries up to spark.task.maxFailures and Spark's abort text, zombie
task sets, and the serialization that happens after the locality decision (Spark's
TaskSetManagerSuite, in Ember's terms)."""
from __future__ import annotations

import logging
import pickle

from ember.clock import ManualClock
from ember.scheduler.backend import WorkerOffer
from ember.scheduler.speculation import SpeculationSettings
from ember.scheduler.task import (ExceptionFailure, FetchFailed, Task, TaskKilled,
                                  TaskLocation, TaskSet)
from ember.scheduler.task_scheduler import TASK_SIZE_TO_WARN_KIB, TaskSchedulerImpl, spread
from ember.scheduler.task_set_manager import (ANY, NO_PREF, NODE_LOCAL, PROCESS_LOCAL,
                                              TaskSetManager)
from ember.storage.block_manager import BLOCK_IN_SIBLING
from tests.helpers.recording_scheduler import RecordingBackend, RecordingDag

WAIT = 3.0      # spark.locality.wait's default


def make(locations, max_failures=4, locality_wait=WAIT, speculation=None, stage_attempt=0,
         sched=None, clock=None, partitions=None):
    """A real TaskSchedulerImpl (recording backend and DAG) with one task set; its manager."""
    if sched is None:
        clock = clock or ManualClock(1000.0)
        sched = TaskSchedulerImpl(max_failures, locality_wait=locality_wait, clock=clock,
                                  speculation=speculation)
        sched.initialize(RecordingBackend(), RecordingDag())
    tasks = [Task(0, stage_attempt, partitions[i] if partitions else None, i, True, i,
                  locations=list(locs)) for i, locs in enumerate(locations)]
    sched.submit_tasks(TaskSet(tasks, 0, stage_attempt, 0, {"k": "v"}, b"blob", b"meta"))
    return sched, sched.stage_tsms[0][stage_attempt]


def offer(tsm: TaskSetManager, executor: str, host: str, slot: int = 0, max_level: str = ANY):
    td = tsm.resource_offer(executor, host, slot, max_level)
    return None if td is None else (td.index, tsm.task_infos[td.task_id].locality)


def fail(tsm: TaskSetManager, index: int, reason=None) -> None:
    tid = next(i.task_id for i in tsm.attempts[index] if i.finish_time == 0)
    tsm.handle_failure(tid, "FAILED", reason or ExceptionFailure("ValueError", "boom", ""), {})


def succeed(tsm: TaskSetManager, index: int) -> None:
    tid = next(i.task_id for i in tsm.attempts[index] if i.finish_time == 0)
    tsm.handle_success(tid, f"r{index}", {}, {})


# --- delay scheduling ---------------------------------------------------------------------
def test_delay_scheduling_waits_locality_wait_per_level_process_node_any():
    in_process = TaskLocation("host1", "exec1", 0)
    sched, tsm = make([[in_process], [in_process], [TaskLocation("host2")]])
    clock = sched.clock
    assert tsm.levels == [PROCESS_LOCAL, NODE_LOCAL, ANY]
    # an offer from elsewhere waits while process-local tasks are pending
    assert offer(tsm, "exec2", "host3") is None
    assert offer(tsm, "exec1", "host1") == (0, PROCESS_LOCAL)
    clock.advance(WAIT - 0.1)
    assert offer(tsm, "exec2", "host3") is None
    # spark.locality.wait after the last launch at PROCESS_LOCAL: NODE_LOCAL, not ANY yet
    clock.advance(0.1)
    assert offer(tsm, "exec2", "host3") is None
    assert offer(tsm, "exec3", "host2") == (2, NODE_LOCAL)
    # a launch at NODE_LOCAL restarts the wait there
    clock.advance(WAIT - 0.1)
    assert offer(tsm, "exec2", "host3") is None
    clock.advance(0.1)
    assert offer(tsm, "exec2", "host3") == (1, ANY)


def test_an_idle_process_takes_over_a_sibling_processs_backlog_but_not_its_last_task():
    """A cache spread 4/1 over an executor's two task processes: once the second has run
    its own task it takes the first's last-to-run tasks (marked: their blocks are to be
    copied from the first) while two or more wait, instead of idling for
    spark.locality.wait; other executors still wait."""
    held, other = TaskLocation("host1", "exec1", 0), TaskLocation("host1", "exec1", 1)
    sched, tsm = make([[held], [held], [held], [held], [other]])
    assert offer(tsm, "exec1", "host1", 0) == (0, PROCESS_LOCAL)
    assert offer(tsm, "exec1", "host1", 1) == (4, PROCESS_LOCAL)
    succeed(tsm, 4)
    td = tsm.resource_offer("exec1", "host1", 1, ANY)
    # the task process asks slot 0 for a copy of the block instead of recomputing it
    assert td.index == 3 and td.properties[BLOCK_IN_SIBLING] == "true"
    assert BLOCK_IN_SIBLING not in tsm.task_set.properties
    succeed(tsm, 3)
    assert offer(tsm, "exec1", "host1", 1) == (2, PROCESS_LOCAL)
    succeed(tsm, 2)
    assert offer(tsm, "exec1", "host1", 1) is None       # only 1 waits: slot 0 runs it next
    assert offer(tsm, "exec2", "host2", 0) is None
    succeed(tsm, 0)
    assert offer(tsm, "exec1", "host1", 0) == (1, PROCESS_LOCAL)


def test_a_level_with_nothing_pending_is_skipped_without_waiting():
    sched, tsm = make([[TaskLocation("host1", "exec1", 0)], [TaskLocation("host2")], []])
    assert tsm.levels == [PROCESS_LOCAL, NODE_LOCAL, NO_PREF, ANY]
    assert offer(tsm, "exec1", "host1") == (0, PROCESS_LOCAL)
    # no process-local task left: the next offer may go straight to NODE_LOCAL, then on to
    # NO_PREF (which has no wait) once host2's task is running
    assert offer(tsm, "exec9", "host2") == (1, NODE_LOCAL)
    assert offer(tsm, "exec9", "host9") == (2, NO_PREF)


def test_a_lost_executor_is_no_preference_at_once():
    cached = TaskLocation("host1", "exec1", 0)
    sched, tsm = make([[cached], [cached]])
    first = offer(tsm, "exec1", "host1")
    assert first is not None and first[1] == PROCESS_LOCAL
    sched.executor_lost("exec1", "killed")
    fail(tsm, first[0])                         # pending again, and nothing waits for exec1
    assert tsm.levels == [NODE_LOCAL, ANY]     # (it never comes back)
    assert {offer(tsm, "exec2", "host1", s) for s in (0, 1)} == \
        {(0, NODE_LOCAL), (1, NODE_LOCAL)}


def test_levels_recomputed_keep_the_level_reached():
    cached = TaskLocation("host1", "exec1", 0)
    sched, tsm = make([[cached], [cached], [TaskLocation("host2")]])
    first = offer(tsm, "exec1", "host1")
    assert first[1] == PROCESS_LOCAL
    sched.clock.advance(WAIT)
    assert offer(tsm, "exec9", "host1")[1] == NODE_LOCAL     # PROCESS_LOCAL waited out
    sched.executor_lost("exec1", "killed")
    fail(tsm, first[0])
    # PROCESS_LOCAL is gone; the set stays at NODE_LOCAL (Spark's recomputeLocality), not
    # one level further on: an offer from a host no task prefers still waits
    assert tsm.levels[tsm.current_level_index] == NODE_LOCAL
    assert offer(tsm, "exec9", "host9") is None
    assert offer(tsm, "exec9", "host1", 1)[1] == NODE_LOCAL


def test_tasks_without_preferences_never_wait():
    sched, tsm = make([[], [], []])
    assert tsm.levels == [NO_PREF, ANY]
    assert [offer(tsm, "exec1", "host1", s) for s in range(3)] == \
        [(0, NO_PREF), (1, NO_PREF), (2, NO_PREF)]


def test_the_offer_cap_bounds_the_level_whatever_the_wait():
    sched, tsm = make([[TaskLocation("host2")]])
    sched.clock.advance(10 * WAIT)
    assert offer(tsm, "exec1", "host1", max_level=NODE_LOCAL) is None
    assert offer(tsm, "exec1", "host1", max_level=ANY) == (0, ANY)


def test_each_level_waits_its_own_spark_locality_wait():
    """spark.locality.wait.process=0 and .node=WAIT: an offer from another host of the
    cached block's executor goes on at once to NODE_LOCAL, where it waits the node wait."""
    in_process = TaskLocation("host1", "exec1", 0)
    sched = TaskSchedulerImpl(4, locality_wait={PROCESS_LOCAL: 0.0, NODE_LOCAL: WAIT},
                              clock=ManualClock(1000.0))
    sched.initialize(RecordingBackend(), RecordingDag())
    _, tsm = make([[in_process], [TaskLocation("host2")]], sched=sched)
    assert offer(tsm, "exec3", "host2") == (1, NODE_LOCAL)
    assert offer(tsm, "exec3", "host2") is None
    sched.clock.advance(WAIT)
    assert offer(tsm, "exec3", "host2") == (0, ANY)


def test_zero_locality_wait_schedules_anywhere_at_once():
    sched, tsm = make([[TaskLocation("host1", "exec1", 0)]], locality_wait=0.0)
    assert offer(tsm, "exec2", "host2") == (0, ANY)


def test_scheduler_offers_walk_the_levels_and_serialize_after_choosing():
    sched, tsm = make([[TaskLocation("host1", "exec1", 0)], []], partitions=["p0", "p1"])
    launched = sched.resource_offers([WorkerOffer("exec1", "host1", 0),
                                      WorkerOffer("exec2", "host2", 0)])
    assert sorted((td.executor_id, td.index) for td in launched) == \
        [("exec1", 0), ("exec2", 1)]
    for td in launched:
        # what the task process unpickles: partition, id, attempt, properties, stage, cpus
        assert pickle.loads(td.task_bytes) == (f"p{td.index}", td.index, 0, {"k": "v"}, 0, 0,
                                               None)
        assert (td.blob, td.meta) == (b"blob", b"meta")


def test_an_offer_round_stops_asking_a_task_set_once_its_tasks_are_all_placed(monkeypatch):
    """Four free slots, two tasks: the set is asked twice (its two launches), not once per
    slot and locality level; the slots it was not asked about still count as seen."""
    sched, tsm = make([[], []])
    asked = []
    real = tsm.resource_offer
    monkeypatch.setattr(tsm, "resource_offer",
                        lambda e, *a, **k: asked.append(e) or real(e, *a, **k))
    offers = [WorkerOffer(f"exec{e}", f"host{e}", s) for e in (1, 2) for s in (0, 1)]
    launched = sched.resource_offers(offers)
    assert len(launched) == 2 and len(asked) == 2
    assert tsm.seen_executors == {"exec1", "exec2"}


def test_tasks_fewer_than_slots_go_one_per_executor_on_its_lowest_slot():
    """Spark's round-robin over shuffled executors: two tasks on two executors of two slots
    each land one per executor, whatever the shuffle, and each on slot 0 (the process
    that ran the last small job), never on a random slot."""
    for _ in range(20):
        sched, _tsm = make([[], []])
        offers = [WorkerOffer(f"exec{e}", f"host{e}", s) for e in (1, 2) for s in (0, 1)]
        launched = sched.resource_offers(offers)
        assert sorted((td.executor_id, td.slot) for td in launched) == [("exec1", 0),
                                                                         ("exec2", 0)]
    assert [(o.executor_id, o.slot) for o in spread(offers)][2:] in (
        [("exec1", 1), ("exec2", 1)], [("exec2", 1), ("exec1", 1)])


def test_fair_pools_each_get_a_slot_of_a_round_whose_slots_freed_together():
    """FAIR: two tasks of pool a end together and free both slots in one offer round; pool b
    (submitted later, nothing running) gets one of them, as Spark's one offer per
    StatusUpdate would give it, instead of pool a (sorted first on the tie) taking both."""
    sched = TaskSchedulerImpl(4, "FAIR", clock=ManualClock(1000.0))
    sched.initialize(RecordingBackend(), RecordingDag())
    for stage, pool in ((0, "a"), (1, "b")):
        tasks = [Task(stage, 0, None, i, True, i) for i in range(8)]
        sched.submit_tasks(TaskSet(tasks, stage, 0, stage, {"spark.scheduler.pool": pool},
                                   b"blob", b"meta"))
    offers = [WorkerOffer("exec1", "host1", s) for s in (0, 1)]
    assert sorted(td.stage_key[0] for td in sched.resource_offers(offers)) == [0, 1]
    more = sched.resource_offers([WorkerOffer("exec1", "host1", s) for s in (2, 3)])
    assert sorted(td.stage_key[0] for td in more) == [0, 1]


def test_resource_offer_only_chooses_the_task_serialization_is_the_callers():
    sched, tsm = make([[]], partitions=["p0"])
    td = tsm.resource_offer("exec1", "host1", 0, ANY, (1, {"gpu": ["0"]}))
    assert td.task_bytes == b"" and td.partition == "p0" and td.resources == (1, {"gpu": ["0"]})
    assert td.properties == {"k": "v"} and td.stage_key == (0, 0)


def test_a_task_encodes_a_plain_partition_as_none_and_a_range_slice_as_its_ints():
    """What the pickler saves per task (TaskDescription.encode): a shuffle's plain Partition
    is rebuilt from the partition id by the task process; a parallelize(range) slice comes
    back as the same range; any other partition as itself."""
    from ember.rdd_sources import ParallelCollectionPartition, Partition
    from ember.scheduler.task import TaskDescription

    def decoded(partition, partition_id=3):
        td = TaskDescription(9, 0, "exec1", 0, partition_id, (1, 0), b"", b"", partition,
                             partition_id, {"k": "v"})
        return pickle.loads(td.encode())

    assert decoded(Partition(3)) == (None, 3, 0, {"k": "v"}, 1, 0, None)
    assert type(decoded(Partition(2))[0]) is Partition     # an index that is not the id
    for data in (range(50, 100), range(7, 7), range(0, 30, 4), [1, "a"], None):
        part = decoded(ParallelCollectionPartition(3, data))[0]
        assert type(part) is ParallelCollectionPartition and part.index == 3
        assert part.data == data and type(part.data) is type(data)


def test_a_very_large_task_warns_once_per_task_set(caplog):
    big = "x" * (TASK_SIZE_TO_WARN_KIB * 1024 + 1)
    sched, tsm = make([[], []], partitions=[big, big])
    with caplog.at_level(logging.WARNING, "ember.scheduler.task_scheduler"):
        launched = sched.resource_offers([WorkerOffer("exec1", "host1", s) for s in range(2)])
    assert len(launched) == 2
    warnings = [r.getMessage() for r in caplog.records if "very large size" in r.getMessage()]
    assert warnings == [f"Stage 0 contains a task of very large size ({len(launched[0].task_bytes) // 1024} "
                        f"KiB). The maximum recommended task size is {TASK_SIZE_TO_WARN_KIB} KiB."]


# --- retries and abort --------------------------------------------------------------------
def test_a_task_is_retried_until_max_failures_then_aborts_with_sparks_text():
    sched, tsm = make([[]], max_failures=4)
    dag = sched.dag
    for attempt in range(3):
        assert offer(tsm, "exec1", "host1") == (0, NO_PREF)
        fail(tsm, 0)
        assert dag.failed == [] and not tsm.is_zombie
        assert tsm.num_failures[0] == attempt + 1
    assert offer(tsm, "exec1", "host1") == (0, NO_PREF)
    fail(tsm, 0)
    assert dag.failed == [
        "Task 0 in stage 0.0 failed 4 times, most recent failure: Lost task 0.3 in stage 0.0 "
        "(TID 3) (host1 executor exec1): ValueError: boom\nDriver stacktrace:"]
    assert tsm.is_zombie
    assert offer(tsm, "exec1", "host1") is None
    assert 0 not in sched.stage_tsms, "an aborted task set with nothing running is finished"


def test_abort_text_carries_the_python_traceback_of_the_last_failure():
    sched, tsm = make([[]], max_failures=1)
    offer(tsm, "exec1", "host1")
    fail(tsm, 0, ExceptionFailure("ZeroDivisionError", "division by zero",
                                  "Traceback (most recent call last):\nZeroDivisionError: "
                                  "division by zero\n"))
    assert sched.dag.failed == [
        "Task 0 in stage 0.0 failed 1 times, most recent failure: Lost task 0.0 in stage 0.0 "
        "(TID 0) (host1 executor exec1): org.apache.spark.api.python.PythonException: "
        "Traceback (most recent call last):\nZeroDivisionError: division by zero\n\n"
        "Driver stacktrace:"]


def test_killed_attempts_do_not_count_towards_max_failures():
    sched, tsm = make([[]], max_failures=2)
    for _ in range(5):
        offer(tsm, "exec1", "host1")
        fail(tsm, 0, TaskKilled("stage cancelled"))
    assert tsm.num_failures[0] == 0 and sched.dag.failed == []
    assert offer(tsm, "exec1", "host1") == (0, NO_PREF)


def test_a_failed_task_retries_on_another_executor_while_one_is_offering():
    sched, tsm = make([[], []])
    assert offer(tsm, "exec1", "host1") == (0, NO_PREF)
    assert offer(tsm, "exec2", "host2") == (1, NO_PREF)
    fail(tsm, 1)
    assert offer(tsm, "exec2", "host2") is None, "exec1 has not seen it fail"
    assert offer(tsm, "exec1", "host1", 1) == (1, NO_PREF)


def test_an_offer_round_skips_a_set_with_nothing_pending_but_notes_who_offered():
    """Once every task runs, offers pass the set by (has_pending) yet still count as
    executors it has seen: a task failing later waits for the one that offered meanwhile."""
    sched, tsm = make([[]])
    [td] = sched.resource_offers([WorkerOffer("exec1", "host1", 0)])
    assert not tsm.has_pending
    assert sched.resource_offers([WorkerOffer("exec2", "host2", 0)]) == []
    fail(tsm, 0)
    assert tsm.has_pending
    assert sched.resource_offers([WorkerOffer("exec1", "host1", 0)]) == []
    [retry] = sched.resource_offers([WorkerOffer("exec2", "host2", 0)])
    assert (retry.index, retry.executor_id) == (0, "exec2")


def test_a_not_serializable_result_aborts_at_once():
    sched, tsm = make([[]], max_failures=4)
    offer(tsm, "exec1", "host1")
    fail(tsm, 0, ExceptionFailure("NotSerializableResult", "cannot pickle 'lock'", "", False))
    assert sched.dag.failed == ["Task 0 in stage 0.0 had a not serializable result: "
                                "cannot pickle 'lock'"]
    assert tsm.is_zombie


# --- zombies ------------------------------------------------------------------------------
def test_a_new_stage_attempt_makes_the_old_task_set_a_zombie_that_still_takes_results():
    sched, old = make([[], []])
    offer(old, "exec1", "host1", 0)
    _, new = make([[], []], stage_attempt=1, sched=sched)
    assert old.is_zombie and not new.is_zombie
    assert offer(old, "exec1", "host1", 1) is None, "a zombie launches nothing"
    # its running task still reports to the DAG scheduler, and a failure is not retried
    fail(old, 0)
    assert old.num_failures[0] == 0, "a zombie's failures count towards nothing"
    assert sched.dag.ended[-1][1] == "ExceptionFailure"
    assert offer(old, "exec1", "host1", 0) is None
    assert sched.stage_tsms[0] == {1: new}, "the zombie finished once nothing ran"


def test_a_fetch_failure_makes_the_task_set_a_zombie(caplog):
    sched, tsm = make([[], []])
    offer(tsm, "exec1", "host1", 0)
    offer(tsm, "exec1", "host1", 1)
    tid = tsm.attempts[0][0].task_id
    with caplog.at_level(logging.WARNING, logger="ember.scheduler.task_set_manager"):
        tsm.handle_failure(tid, "FETCH_FAILED", FetchFailed(3, 0, 0, "exec9", "gone"), {})
    # logged as Spark's TaskSetManager logs every lost task, a fetch failure included
    assert [r.getMessage() for r in caplog.records] == [
        f"Lost task 0.0 in stage 0.0 (TID {tid}) (host1 executor exec1): "
        f"{FetchFailed(3, 0, 0, 'exec9', 'gone').to_error_string()}"]
    assert tsm.is_zombie and sched.dag.failed == []
    assert 0 in sched.stage_tsms, "still running its other task"
    succeed(tsm, 1)
    assert 0 not in sched.stage_tsms


def test_all_tasks_successful_makes_a_zombie_and_finishes_the_set():
    sched, tsm = make([[], []])
    offer(tsm, "exec1", "host1", 0)
    offer(tsm, "exec1", "host1", 1)
    succeed(tsm, 1)
    assert not tsm.is_zombie
    succeed(tsm, 0)
    assert tsm.is_zombie and 0 not in sched.stage_tsms
    assert [e[2] for e in sched.dag.ended] == ["r1", "r0"]


# --- times from the clock -----------------------------------------------------------------
def test_task_times_come_from_the_schedulers_clock():
    sched, tsm = make([[]])
    offer(tsm, "exec1", "host1")
    sched.clock.advance(2.5)
    succeed(tsm, 0)
    info = tsm.attempts[0][0]
    assert (info.launch_time, info.finish_time, info.duration) == (1000.0, 1002.5, 2.5)


def test_speculation_marks_a_task_only_once_it_ran_longer_than_the_threshold():
    spec = SpeculationSettings(interval=0.1, multiplier=2.0, quantile=0.5,
                               min_task_runtime=0.1)
    sched, tsm = make([[], []], speculation=spec)
    offer(tsm, "exec1", "host1", 0)
    offer(tsm, "exec2", "host2", 0)
    sched.clock.advance(1.0)
    succeed(tsm, 0)                    # median 1.0 s: threshold 2.0 s of runtime
    sched.clock.advance(1.0)           # task 1 has run 2.0 s: not more than the threshold
    assert not tsm.check_speculatable_tasks(spec.min_task_runtime)
    sched.clock.advance(0.001)
    assert tsm.check_speculatable_tasks(spec.min_task_runtime)
    assert tsm.speculatable == {1}
    # the copy goes to a host where the task has no attempt
    assert offer(tsm, "exec2", "host2", 1) is None
    assert offer(tsm, "exec1", "host1", 1) == (1, PROCESS_LOCAL)
    assert tsm.attempts[1][1].speculative


# --- queued tasks on busy slots (spark.ember.scheduler.queueShortTasks) --------------------
def _slots(queued: int, slots=(0, 1)):
    return [WorkerOffer("exec1", "host1", s, None, queued) for s in slots]


def test_short_tasks_queue_one_per_busy_slot_and_take_its_core_when_they_start():
    sched, tsm = make([[]] * 8)
    sched.register_executor_resources("exec1", 2, {})
    cores = sched.executor_resources["exec1"]
    first = sched.resource_offers(_slots(False))
    assert len(first) == 2 and cores.free_cores == 0
    assert sched.resource_offers(_slots(True)) == []      # not yet known to be short
    for td in first:
        sched.clock.advance(0.001)
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    assert tsm.queueable and cores.free_cores == 2
    # offers are shuffled (as Spark's are): order both lists by slot
    running = sorted(sched.resource_offers(_slots(False)), key=lambda td: td.slot)
    waiting = sorted(sched.resource_offers(_slots(True)), key=lambda td: td.slot)
    assert [td.slot for td in running] == [0, 1]
    assert [td.slot for td in waiting] == [0, 1] and cores.free_cores == 0
    assert all(td.resources == (1, {}) for td in waiting)
    # slot 0's task ends: its waiting task takes the core it frees
    sched.status_update(running[0].task_id, "FINISHED", None, {}, {}, [])
    sched.promote_queued(waiting[0].task_id)
    assert cores.free_cores == 0
    # slot 1's waiting task is killed before it starts: it had taken nothing
    sched.status_update(waiting[1].task_id, "KILLED", "cancelled", {}, {}, [])
    assert cores.free_cores == 0
    sched.status_update(running[1].task_id, "FINISHED", None, {}, {}, [])
    sched.status_update(waiting[0].task_id, "FINISHED", None, {}, {}, [])
    assert cores.free_cores == 2 and not sched.queued_requirements


def test_a_queued_task_is_launched_for_listeners_when_it_starts_on_its_slot():
    """TaskStart and the launch time of a task queued on a busy slot come when it starts
    (its slot's task before it ended), or when it ends unstarted: its duration does not
    count the wait and every TaskEnd has its TaskStart."""
    from ember.scheduler.listener import TaskStart

    class Bus:
        def __init__(self) -> None:
            self.started: list[tuple[int, float]] = []

        def post(self, e) -> None:
            if isinstance(e, TaskStart):
                self.started.append((e.task_info.task_id, e.task_info.launch_time))
    sched, tsm = make([[]] * 8)
    sched.bus = bus = Bus()
    sched.register_executor_resources("exec1", 2, {})
    for td in sched.resource_offers(_slots(False)):
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    running = sorted(sched.resource_offers(_slots(False)), key=lambda td: td.slot)
    waiting = sorted(sched.resource_offers(_slots(True)), key=lambda td: td.slot)
    assert len(running) == len(waiting) == 2
    assert {tid for tid, _ in bus.started[-2:]} == {td.task_id for td in running}
    sched.clock.advance(0.004)                           # the wait
    sched.status_update(running[0].task_id, "FINISHED", None, {}, {}, [])
    sched.promote_queued(waiting[0].task_id)
    assert bus.started[-1] == (waiting[0].task_id, sched.clock.time())
    sched.clock.advance(0.001)
    sched.status_update(waiting[0].task_id, "FINISHED", None, {}, {}, [])
    assert abs(tsm.task_infos[waiting[0].task_id].duration - 0.001) < 1e-9
    sched.status_update(waiting[1].task_id, "KILLED", "handed back", {}, {}, [])
    assert bus.started[-1] == (waiting[1].task_id, sched.clock.time())
    assert len(bus.started) == 6


def test_a_slot_that_took_no_queued_task_is_not_offered_again_further_back_in_its_queue():
    """A cache held 5/3 by two task processes, its tasks short: every place behind both busy
    slots is offered, slot by slot, and each slot queues only its own blocks' tasks. Once a
    place of a slot takes nothing, the places behind it are skipped in that pass (they
    could take nothing either), and every task is still queued on its own slot."""
    held = [TaskLocation("host1", "exec1", s) for s in (0, 0, 0, 0, 0, 1, 1, 1)]
    sched, tsm = make([[loc] for loc in held])
    sched.register_executor_resources("exec1", 2, {})
    for td in sched.resource_offers(_slots(False)):
        sched.clock.advance(0.001)
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    running = sched.resource_offers(_slots(False))
    assert tsm.queueable and len(running) == 2
    calls = []
    real_offer = tsm.resource_offer

    def counted(*args, **kwargs):
        calls.append(args[2])
        return real_offer(*args, **kwargs)
    tsm.resource_offer = counted
    places = [WorkerOffer("exec1", "host1", s, None, n) for s in (0, 1) for n in range(1, 32)]
    waiting = sched.resource_offers(places)
    assert sorted((td.slot, held[td.index].slot) for td in waiting) == \
        [(0, 0)] * 3 + [(1, 1)] * 1
    assert len(calls) <= len(waiting) + 2         # one refusal per slot, not one per place


def test_a_slow_task_stops_the_queueing_until_short_ones_are_seen_again():
    sched, tsm = make([[]] * 8)
    sched.register_executor_resources("exec1", 2, {})
    for duration in (0.001, 0.001, 0.2):
        td = sched.resource_offers(_slots(False, [0]))[0]
        sched.clock.advance(duration)
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    assert not tsm.queueable
    sched.resource_offers(_slots(False))
    assert sched.resource_offers(_slots(True)) == []


def test_how_deep_tasks_queue_follows_their_run_time():
    """Tasks are queued on a slot while those ahead of the queued one are expected to
    take under 5 ms in all: deep for sub-millisecond tasks (counted at least 0.1 ms, and at
    their CPU time when executorRunTime's whole milliseconds say 0), one for 4 ms ones."""
    sched, tsm = make([[]] * 80)
    sched.register_executor_resources("exec1", 1, {})

    def finish(run_ms: int, cpu_ns: int = 0) -> None:
        td = sched.resource_offers(_slots(0, [0]))[0]
        sched.clock.advance(0.001)
        sched.status_update(td.task_id, "FINISHED", None, {},
                            {"executorRunTime": run_ms, "executorCpuTime": cpu_ns}, [])
    for _ in range(3):
        finish(0)
    assert tsm.queueable_at(50) and not tsm.queueable_at(51)
    launched = sched.resource_offers(_slots(0, [0]))
    launched += sched.resource_offers([WorkerOffer("exec1", "host1", 0, None, n)
                                       for n in (1, 2, 50, 51)])
    assert len(launched) == 4
    for td in launched:
        sched.status_update(td.task_id, "FINISHED", None, {}, {}, [])
    for _ in range(30):             # the average follows 0.3 ms of CPU per task
        finish(0, 300_000)
    assert tsm.queueable_at(16) and not tsm.queueable_at(17)
    for _ in range(12):             # and then 4 ms tasks
        finish(4, 300_000)
    assert tsm.queueable_at(1) and not tsm.queueable_at(2)


def test_barrier_stages_and_speculation_never_queue():
    _, speculating = make([[]] * 8, speculation=SpeculationSettings())
    _, barrier = make([[]] * 8)
    barrier.is_barrier = True
    for tsm in (speculating, barrier):
        tsm.quick_streak = 10
        assert not tsm.queueable
