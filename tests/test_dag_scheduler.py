"""DAGScheduler as a state machine: fake RDD graphs, fake task results, no processes."""
from __future__ import annotations

from typing import Any

import pytest

from ember.clock import ManualClock
from ember.dependency import OneToOneDependency, ShuffleDependency
from ember.errors import JobCancelledException, SparkException
from ember.scheduler.dag_scheduler import DAGScheduler
from ember.scheduler.listener import (JobEnd, JobStart, ListenerBus, StageCompleted,
                                      StageSubmitted)
from ember.scheduler.map_output_tracker import MapOutputTracker
from ember.scheduler.task import SUCCESS, ExceptionFailure, FetchFailed, TaskSet
from ember.shuffle.base import MapStatus
from ember.storagelevel import StorageLevel


class FakeRDD:
    _next = [0]

    def __init__(self, n: int, deps: list | None = None, barrier: bool = False) -> None:
        self._barrier = barrier
        self._id = FakeRDD._next[0]
        FakeRDD._next[0] += 1
        self._n = n
        self._deps = deps or []
        self._storage_level = StorageLevel.NONE
        self._call_site = f"rdd{self._id} at test.py:1"

    def id(self) -> int:
        return self._id

    def partitions(self) -> list:
        return list(range(self._n))

    def getNumPartitions(self) -> int:  # noqa: N802 (RDD API)
        return self._n

    def _is_barrier(self) -> bool:
        return self._barrier or any(d.rdd._is_barrier() for d in self._deps
                                    if not isinstance(d, ShuffleDependency))

    def dependencies(self) -> list:
        return self._deps

    def preferred_locations(self, p: int) -> list:
        return []

    def name(self) -> str:
        return ""


def shuffle(parent: FakeRDD, n: int, sid: list = [100]) -> FakeRDD:
    sid[0] += 1
    return FakeRDD(n, [ShuffleDependency(parent, sid[0], n, hash)])


class FakeBackend:
    def __init__(self) -> None:
        self.slots = 8

    def max_num_concurrent_tasks(self) -> int:
        return self.slots


class FakeTaskScheduler:
    def __init__(self) -> None:
        self.backend = FakeBackend()
        self.task_sets: list[TaskSet] = []
        self.cancelled: list[int] = []
        self.zombies: list[tuple[int, int]] = []
        self.removed: list[int] = []

    def submit_tasks(self, ts: TaskSet) -> None:
        self.task_sets.append(ts)

    def cancel_tasks(self, stage_id: int, reason: str) -> None:
        self.cancelled.append(stage_id)

    def zombify(self, stage_id: int, attempt: int) -> None:
        self.zombies.append((stage_id, attempt))

    def is_executor_alive(self, executor_id: str) -> bool:
        return True

    def stage_removed(self, stage_id: int) -> None:
        self.removed.append(stage_id)


class Harness:
    def __init__(self, clock: ManualClock | None = None) -> None:
        self.ts = FakeTaskScheduler()
        self.timers: list = []
        self.tracker = MapOutputTracker()
        self.bus = ListenerBus()
        self.dag = DAGScheduler(self.ts, self.bus, self.tracker, lambda r, p: [],
                                lambda kind, rdd, f: b"blob", lambda dep: None,
                                max_consecutive_attempts=4,
                                timer=lambda d, fn: self.timers.append(fn), clock=clock)

    def run_job(self, rdd: FakeRDD, partitions: list[int] | None = None,
                properties: dict | None = None) -> tuple[Any, dict]:
        results: dict = {}
        parts = partitions if partitions is not None else list(range(rdd._n))
        waiter = self.dag.submit_job(rdd, lambda c, it: None, parts, "job at test.py:1",
                                     lambda i, r: results.__setitem__(i, r), properties or {})
        return waiter, results

    def complete(self, ts: TaskSet, results: list[Any] | None = None) -> None:
        for i, task in enumerate(ts.tasks):
            res = results[i] if results else (
                "r%d" % task.partition_id if task.is_result else
                MapStatus(f"exec-{task.partition_id}", "host1", f"/tmp/x{task.partition_id}", 1, 1))
            self.dag.handle_task_completion(task, SUCCESS, res, {}, {}, None)

    def fire_timers(self) -> None:
        timers, self.timers = self.timers, []
        for fn in timers:
            fn()


def test_single_stage_job_runs_one_task_set_and_collects_results() -> None:
    h = Harness()
    rdd = FakeRDD(3)
    waiter, results = h.run_job(rdd)
    assert len(h.ts.task_sets) == 1
    ts = h.ts.task_sets[0]
    assert [t.partition_id for t in ts.tasks] == [0, 1, 2]
    assert all(t.is_result for t in ts.tasks)
    h.complete(ts)
    assert waiter.completed and waiter.error is None
    assert results == {0: "r0", 1: "r1", 2: "r2"}
    assert h.ts.removed == [ts.stage_id], "backends may now drop the stage's closure"


def test_a_result_task_s_accumulator_updates_count_once_as_in_spark() -> None:
    """A second success of a result task (an attempt of an earlier stage attempt, a copy)
    counts neither its result nor its accumulator updates; a map task's updates count each
    time (Spark's guarantee covers actions only)."""
    from ember.accumulators import INT_ACCUMULATOR_PARAM, Accumulator
    acc = Accumulator(987_654, 0, INT_ACCUMULATOR_PARAM)
    h = Harness()
    parent = FakeRDD(1)
    waiter, results = h.run_job(shuffle(parent, 2))
    (map_task,) = h.ts.task_sets[0].tasks
    status = MapStatus("exec-0", "host1", "/tmp/x0", 1, 1)
    for _ in range(2):
        h.dag.handle_task_completion(map_task, SUCCESS, status, {987_654: 1}, {}, None)
    assert acc.value == 2
    first, second = h.ts.task_sets[1].tasks
    h.dag.handle_task_completion(first, SUCCESS, "r0", {987_654: 10}, {}, None)
    h.dag.handle_task_completion(first, SUCCESS, "again", {987_654: 10}, {}, None)
    assert acc.value == 12 and results == {0: "r0"}
    h.dag.handle_task_completion(second, SUCCESS, "r1", {987_654: 100}, {}, None)
    h.dag.handle_task_completion(second, SUCCESS, "late", {987_654: 100}, {}, None)
    assert waiter.completed and acc.value == 112 and results == {0: "r0", 1: "r1"}


def test_stages_are_cut_at_shuffles_and_children_wait_for_parents() -> None:
    h = Harness()
    base = FakeRDD(4)
    mapped = FakeRDD(4, [OneToOneDependency(base)])      # narrow: same stage
    reduced = shuffle(mapped, 2)
    waiter, results = h.run_job(reduced)
    assert len(h.ts.task_sets) == 1, "only the map stage may run first"
    map_ts = h.ts.task_sets[0]
    assert not any(t.is_result for t in map_ts.tasks) and len(map_ts.tasks) == 4
    h.complete(map_ts)
    assert len(h.ts.task_sets) == 2
    result_ts = h.ts.task_sets[1]
    assert [t.is_result for t in result_ts.tasks] == [True, True]
    h.complete(result_ts)
    assert waiter.completed and results == {0: "r0", 1: "r1"}


def test_map_stage_outputs_are_reused_by_later_jobs() -> None:
    h = Harness()
    reduced = shuffle(FakeRDD(3), 2)
    w1, _ = h.run_job(reduced)
    h.complete(h.ts.task_sets[0])
    h.complete(h.ts.task_sets[1])
    assert w1.completed
    w2, r2 = h.run_job(reduced)
    assert len(h.ts.task_sets) == 3, "the second job skips the finished map stage"
    assert all(t.is_result for t in h.ts.task_sets[2].tasks)
    h.complete(h.ts.task_sets[2])
    assert w2.completed and len(r2) == 2


def test_independent_parent_stages_are_submitted_together() -> None:
    h = Harness()
    left, right = shuffle(FakeRDD(2), 2), shuffle(FakeRDD(3), 2)
    joined = FakeRDD(2, [OneToOneDependency(left), OneToOneDependency(right)])
    h.run_job(joined)
    assert len(h.ts.task_sets) == 2
    assert sorted(len(ts.tasks) for ts in h.ts.task_sets) == [2, 3]


def test_fetch_failure_resubmits_the_lost_map_output_then_the_reducer(caplog) -> None:
    h = Harness()
    reduced = shuffle(FakeRDD(3), 2)
    waiter, results = h.run_job(reduced)
    map_ts = h.ts.task_sets[0]
    h.complete(map_ts)
    res_ts = h.ts.task_sets[1]
    sid = reduced.dependencies()[0].shuffle_id
    task = res_ts.tasks[0]
    with caplog.at_level("INFO", logger="ember.scheduler.dag_scheduler"):
        h.dag.handle_task_completion(task, FetchFailed(sid, 1, 0, "exec-1", "gone"), None, {},
                                     {}, None)
    # Spark's two lines: which stage failed, and what runs again
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("Marking ResultStage 1 (") and "as failed due to a fetch failure "
               "from ShuffleMapStage 0 (" in m for m in said), said
    assert any(m.startswith("Resubmitting ShuffleMapStage 0 (") and m.endswith(
        "due to fetch failure") for m in said), said
    assert h.tracker.missing(sid) == [1]
    assert (res_ts.stage_id, res_ts.stage_attempt) in h.ts.zombies
    assert len(h.timers) == 1, "resubmission is delayed (RESUBMIT_TIMEOUT)"
    h.fire_timers()
    retry = h.ts.task_sets[2]
    assert [t.partition_id for t in retry.tasks] == [1] and retry.stage_attempt == 1
    h.complete(retry)
    res_retry = h.ts.task_sets[3]
    assert res_retry.stage_id == res_ts.stage_id and res_retry.stage_attempt == 1
    h.complete(res_retry)
    assert waiter.completed and waiter.error is None and len(results) == 2


def test_consecutive_fetch_failures_abort_after_max_attempts() -> None:
    h = Harness()
    reduced = shuffle(FakeRDD(1), 1)
    waiter, _ = h.run_job(reduced)
    sid = reduced.dependencies()[0].shuffle_id
    h.complete(h.ts.task_sets[0])
    for attempt in range(4):
        res_ts = h.ts.task_sets[-1]
        assert res_ts.tasks[0].is_result and res_ts.stage_attempt == attempt
        h.dag.handle_task_completion(res_ts.tasks[0], FetchFailed(sid, 0, 0, None, "lost"),
                                     None, {}, {}, None)
        if attempt < 3:
            h.fire_timers()
            h.complete(h.ts.task_sets[-1])      # the map stage recomputes its output
    assert waiter.completed
    with pytest.raises(SparkException, match="failed the maximum allowable number of times: 4"):
        waiter.wait()


def test_task_set_failure_aborts_the_job_with_the_remote_exception_type() -> None:
    h = Harness()
    waiter, _ = h.run_job(FakeRDD(2))
    ts = h.ts.task_sets[0]
    failure = ExceptionFailure("ValueError", "bad", "Traceback...\nValueError: bad\n")
    h.dag.handle_task_set_failed(ts, "Task 0 in stage 0.0 failed 1 times", failure)
    with pytest.raises(ValueError, match="Job aborted due to stage failure: Task 0") as e:
        waiter.wait()
    assert e.value.exc_type == "ValueError" and "ValueError: bad" in e.value.traceback_text


def test_cancelling_a_job_kills_its_running_stages() -> None:
    h = Harness()
    waiter, _ = h.run_job(FakeRDD(2))
    stage_id = h.ts.task_sets[0].stage_id
    h.dag.handle_job_cancellation(0, "")
    assert stage_id in h.ts.cancelled
    with pytest.raises(JobCancelledException, match="Job 0 cancelled"):
        waiter.wait()


def test_job_group_cancellation_matches_on_the_group_property() -> None:
    h = Harness()
    results: dict = {}
    w = h.dag.submit_job(FakeRDD(1), lambda c, it: None, [0], "x", results.__setitem__,
                         {"spark.jobGroup.id": "g"})
    other, _ = h.run_job(FakeRDD(1))
    h.dag.handle_job_group_cancelled("g", False)
    with pytest.raises(JobCancelledException, match="part of cancelled job group g"):
        w.wait()
    assert not other.completed


def test_results_for_a_partition_subset() -> None:
    h = Harness()
    waiter, results = h.run_job(FakeRDD(5), [1, 3])
    ts = h.ts.task_sets[0]
    assert [t.partition_id for t in ts.tasks] == [1, 3]
    assert [t.output_id for t in ts.tasks] == [0, 1]
    h.complete(ts)
    assert results == {0: "r1", 1: "r3"}


def test_stage_serialization_failure_fails_the_job() -> None:
    h = Harness()

    def bad(kind: str, rdd: Any, f: Any) -> bytes:
        raise RuntimeError("cannot pickle lock")
    h.dag.serialize_stage = bad
    waiter, _ = h.run_job(FakeRDD(1))
    with pytest.raises(SparkException, match="Task not serializable"):
        waiter.wait()


# --- barrier stages ------------------------------------------------------------------------
def test_failed_barrier_map_task_reruns_the_whole_stage_attempt() -> None:
    h = Harness()
    barrier_map = FakeRDD(3, barrier=True)
    waiter, results = h.run_job(shuffle(barrier_map, 2))
    ts0 = h.ts.task_sets[0]
    assert ts0.barrier and len(ts0.tasks) == 3
    t0, t1, _ = ts0.tasks
    h.dag.handle_task_completion(t1, SUCCESS, MapStatus("e1", "h", "/tmp/1", 1, 1), {}, {}, None)
    h.dag.handle_task_completion(t0, ExceptionFailure("ValueError", "boom", ""), None, {}, {},
                                 None)
    assert h.ts.cancelled == [ts0.stage_id], "the sibling tasks are killed"
    # a sibling finishing after the failure, and the killed ones, change nothing
    h.dag.handle_task_completion(ts0.tasks[2], SUCCESS, MapStatus("e2", "h", "/tmp/2", 1, 1),
                                 {}, {}, None)
    h.fire_timers()
    ts1 = h.ts.task_sets[1]
    assert (ts1.stage_id, ts1.stage_attempt) == (ts0.stage_id, 1)
    assert [t.partition_id for t in ts1.tasks] == [0, 1, 2], "every task runs again"
    h.complete(ts1)
    h.complete(h.ts.task_sets[2])
    assert waiter.completed and waiter.error is None and results == {0: "r0", 1: "r1"}


def test_failed_barrier_result_task_aborts_the_job() -> None:
    h = Harness()
    waiter, _ = h.run_job(FakeRDD(2, barrier=True))
    task = h.ts.task_sets[0].tasks[1]
    h.dag.handle_task_completion(task, ExceptionFailure("ValueError", "boom", ""), None, {}, {},
                                 None)
    assert waiter.completed
    assert str(waiter.error).startswith(
        "Job aborted due to stage failure: Could not recover from a failed barrier "
        "ResultStage. Most recent failure reason: Stage failed because barrier task "
        f"ResultTask({task.stage_id}, 1) finished unsuccessfully.\nValueError: boom")


def test_barrier_slot_check_retries_then_fails_with_sparks_error() -> None:
    h = Harness()
    h.dag.barrier_check_max_failures = 2
    h.ts.backend.slots = 1
    waiter, _ = h.run_job(FakeRDD(2, barrier=True))
    for _ in range(2):
        assert not waiter.completed and not h.ts.task_sets and len(h.timers) == 1
        h.fire_timers()
    assert waiter.completed and str(waiter.error).startswith("[SPARK-24819]: Barrier execution")
    # slots that show up before a re-check let the job through
    waiter, _ = h.run_job(FakeRDD(2, barrier=True))
    h.ts.backend.slots = 2
    h.fire_timers()
    assert len(h.ts.task_sets) == 1 and h.ts.task_sets[0].barrier


def test_a_barrier_job_waiting_for_slots_can_be_cancelled_or_shut_down() -> None:
    h = Harness()
    h.ts.backend.slots = 1
    cancelled, _ = h.run_job(FakeRDD(2, barrier=True))
    h.dag.handle_job_cancellation(0, "")
    assert isinstance(cancelled.error, JobCancelledException)
    grouped, _ = h.run_job(FakeRDD(2, barrier=True), properties={"spark.jobGroup.id": "g"})
    h.dag.handle_job_group_cancelled("g", False)
    assert str(grouped.error) == "Job 1 cancelled part of cancelled job group g"
    tagged, _ = h.run_job(FakeRDD(2, barrier=True), properties={"spark.job.tags": "a,t"})
    h.dag.handle_job_tag_cancelled("t")
    assert isinstance(tagged.error, JobCancelledException)
    stopped, _ = h.run_job(FakeRDD(2, barrier=True))
    h.dag.handle_shutdown()
    assert str(stopped.error) == "Job 3 cancelled because SparkContext was shut down"
    h.ts.backend.slots = 2
    h.fire_timers()                   # the pending re-checks find nothing to do
    assert not h.ts.task_sets


def test_job_and_stage_times_come_from_the_injected_clock() -> None:
    clock = ManualClock(500.0)
    h = Harness(clock)
    events: list = []
    h.bus.add_sync(type("Rec", (), {"on_event": lambda self, e: events.append(e)})())
    waiter, _ = h.run_job(FakeRDD(1))
    clock.advance(2.0)
    h.complete(h.ts.task_sets[0])
    assert waiter.completed
    times = [(type(e).__name__, e.time if isinstance(e, (JobStart, JobEnd)) else
              e.stage_info.submission_time if isinstance(e, StageSubmitted) else
              e.stage_info.completion_time)
             for e in events if isinstance(e, (JobStart, JobEnd, StageSubmitted,
                                              StageCompleted))]
    assert times == [("JobStart", 500.0), ("StageSubmitted", 500.0),
                     ("StageCompleted", 502.0), ("JobEnd", 502.0)]


def test_tasks_ask_for_preferred_locations_only_where_their_stage_can_have_them() -> None:
    """Per partition only when some RDD of the stage is persisted or names locations (or
    does not say whether it does); never through a shuffle (the parent stage's RDDs)."""
    class Plain(FakeRDD):
        def names_locations(self) -> bool:
            return False
    base = Plain(4)
    child = Plain(4, [OneToOneDependency(base)])
    assert not DAGScheduler._may_prefer_locations(child)
    base._storage_level = StorageLevel.MEMORY_ONLY
    assert DAGScheduler._may_prefer_locations(child)
    assert not DAGScheduler._may_prefer_locations(
        Plain(4, [ShuffleDependency(child, 900, 4, hash)]))
    base._storage_level = StorageLevel.NONE
    assert DAGScheduler._may_prefer_locations(FakeRDD(4, [OneToOneDependency(base)]))


def test_blocks_a_held_rdd_still_has_are_released_when_its_stage_is_done() -> None:
    """A HeldRDD's partition whose task ran in another process is still held there: the
    finished stage drops it (and asks nobody when every partition was taken)."""
    for left, released in (({1}, True), (set(), False)):
        h = Harness()
        calls: list[int] = []
        h.dag.cache_locations = lambda rdd_id, p, left=left: ["there"] if p in left else []
        h.dag.release_blocks = calls.append
        held = FakeRDD(3)
        held.holds_blocks = True
        reduced = shuffle(FakeRDD(3, [OneToOneDependency(held)]), 2)
        h.run_job(reduced)
        h.complete(h.ts.task_sets[0])
        assert calls == ([held.id()] if released else [])
    # a result stage: only a job of all the RDD's partitions releases
    for parts, released in (([0, 1, 2], True), ([0], False)):
        h = Harness()
        calls = []
        h.dag.cache_locations = lambda rdd_id, p: ["there"] if p == 2 else []
        h.dag.release_blocks = calls.append
        held = FakeRDD(3)
        held.holds_blocks = True
        h.run_job(FakeRDD(3, [OneToOneDependency(held)]), parts)
        h.complete(h.ts.task_sets[0])
        assert calls == ([held.id()] if released else [])


class TurnLoop:
    """A scheduler loop in the middle of a turn: what is posted runs when the turn ends."""

    def __init__(self) -> None:
        self.posted: list = []

    def in_loop(self) -> bool:
        return True

    def post(self, fn: Any, *args: Any) -> None:
        self.posted.append((fn, args))

    post_after_turn = post

    def wake_driver(self) -> None:
        pass


def test_a_caller_woken_before_it_waits_blocks_on_nothing() -> None:
    """The usual warm job: the caller drove the loop itself, so the job is done and its
    wake-up ran before wait(); no lock is made for it to block on."""
    h = Harness()
    h.dag.loop = loop = TurnLoop()
    waiter, results = h.run_job(FakeRDD(2))
    for fn, args in loop.posted:
        fn(*args)
    loop.posted.clear()
    h.complete(h.ts.task_sets[0])
    for fn, args in loop.posted:             # the rest of the loop's turn, the wake-up
        fn(*args)
    waiter.wait()
    assert waiter._woken and waiter._done is None and results == {0: "r0", 1: "r1"}


def test_the_caller_is_woken_when_the_loop_s_turn_ends_and_never_lost() -> None:
    """The job's end is known at once (completed), but the waiting caller is woken only
    after the rest of the loop's turn, when the loop no longer holds the GIL; if that
    wake-up is lost (the loop shut down first) wait() still returns."""
    import time

    h = Harness()
    h.dag.loop = loop = TurnLoop()
    waiter, results = h.run_job(FakeRDD(2))
    for fn, args in loop.posted:             # the submission
        fn(*args)
    loop.posted.clear()
    ts = h.ts.task_sets[0]
    h.complete(ts)
    assert waiter.completed and results == {0: "r0", 1: "r1"}
    assert not waiter._woken and len(loop.posted) == 1
    t0 = time.monotonic()
    waiter.wait()                            # the posted wake-up never runs here
    assert time.monotonic() - t0 < 2
    loop.posted[0][0]()
    assert waiter._woken and not waiter._done.locked()     # released, once
