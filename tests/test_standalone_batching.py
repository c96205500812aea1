"""Driver <-> executor traffic in batches on a real 2-worker cluster: one LaunchTasks per
executor per offer round, StatusUpdates for tasks that end in one turn of an executor's
loop, and every task's update handled exactly once whichever form carried it."""
from __future__ import annotations

import pickle
import time

import pytest

from ember import SparkConf, SparkContext
from ember.deploy.messages import (LaunchTask, LaunchTasks, RemoveStage, StatusUpdate,
                                   StatusUpdates)
from ember.rpc import MessageDecodeError, decode, encode
from tests.helpers.ctrl_c import (IGNORED_IN_FINALIZERS, ctrl_c_at_every_step,
                                  interrupt_a_sleeping_job)

pytestmark = pytest.mark.timeout(180)


def test_batched_messages_round_trip_and_mismatched_columns_are_malformed() -> None:
    launch = LaunchTasks(pickle.dumps([(1, 0, (0, 0), None, None, b"t")]))
    updates = StatusUpdates("3", [7, 8], ["FINISHED", "FAILED"], [b"a", b"b"])
    assert decode(encode(launch)) == launch
    assert decode(encode(updates)) == updates
    import msgpack
    forged = msgpack.packb({"__m__": "StatusUpdates", "executorId": "3", "taskIds": [1, 2],
                            "states": ["FINISHED"], "data": [b"a", b"b"]}, use_bin_type=True)
    with pytest.raises(MessageDecodeError, match="one of each per task"):
        decode(forged)


@pytest.mark.parametrize("column, items, error", [
    ("taskIds", [1, 2, True], r"taskIds: \[2\]: expected int, got bool"),
    ("taskIds", [1, "2", 3], r"taskIds: \[1\]: expected int, got str"),
    ("states", ["FINISHED", b"FAILED", "FINISHED"], r"states: \[1\]: expected str"),
    ("data", [b"a", b"b", "c"], r"data: \[2\]: expected bytes")])
def test_a_batch_with_one_item_of_the_wrong_type_is_malformed(column, items, error) -> None:
    """ember.rpc.messages checks a list of ints, strs or bytes in one loop; an item of
    another type is refused with its position, as the per-item check does."""
    import msgpack
    fields = {"executorId": "3", "taskIds": [1, 2, 3], "states": ["FINISHED"] * 3,
              "data": [b"a", b"b", b"c"]}
    assert decode(msgpack.packb({"__m__": "StatusUpdates", **fields}, use_bin_type=True)) \
        == StatusUpdates(**fields)
    fields[column] = items
    forged = msgpack.packb({"__m__": "StatusUpdates", **fields}, use_bin_type=True)
    with pytest.raises(MessageDecodeError, match=error):
        decode(forged)


@pytest.fixture()
def sc(cluster, request):
    """request.param: more conf (see the cancel test)."""
    active = SparkContext._active_spark_context
    if active is not None:
        active.stop()
    context = SparkContext(conf=SparkConf().setMaster(cluster.url).setAppName("batching")
                           .set("spark.ui.enabled", "false")
                           .setAll(getattr(request, "param", {}).items()))
    deadline = time.time() + 60
    while len(context.runtime.scheduler_backend.executors) < 2 and time.time() < deadline:
        time.sleep(0.05)
    assert len(context.runtime.scheduler_backend.executors) == 2
    yield context
    context.stop()


class _RecordingRef:
    """The executor's real ref, noting what goes through it."""

    def __init__(self, ref, log: list) -> None:
        self._ref, self._log = ref, log

    def send(self, msg) -> None:
        self._log.append(msg)
        self._ref.send(msg)

    def __getattr__(self, name):
        return getattr(self._ref, name)


def _record_traffic(sc: SparkContext) -> tuple[list, list]:
    """Every message the driver sends to executors and receives from them (wrappers around
    the real endpoint and refs, which still do the work)."""
    sent: list = []
    received: list = []
    backend = sc.runtime.scheduler_backend
    for data in backend.executors.values():
        data.ref = _RecordingRef(data.ref, sent)
    endpoint = backend.driver_endpoint
    receive = endpoint.receive
    endpoint.receive = lambda msg, sender: (received.append(msg), receive(msg, sender))[1]
    return sent, received


def _task_ids(sent: list) -> list[int]:
    ids = []
    for msg in sent:
        if isinstance(msg, LaunchTask):
            ids.append(pickle.loads(msg.data)[0])
        elif isinstance(msg, LaunchTasks):
            ids.extend(task[0] for task in pickle.loads(msg.data))
    return ids


def test_an_offer_round_launches_one_message_per_executor(sc) -> None:
    sent, received = _record_traffic(sc)
    assert sc.parallelize(range(4), 4).map(lambda x: x * 10).collect() == [0, 10, 20, 30]
    # both executors had 2 free slots: the round gave each 2 tasks in one LaunchTasks
    launches = [m for m in sent if isinstance(m, (LaunchTask, LaunchTasks))]
    assert [type(m) for m in launches] == [LaunchTasks, LaunchTasks]
    assert sorted(_task_ids(sent)) == sorted(set(_task_ids(sent))) and len(_task_ids(sent)) == 4
    reported = [t for m in received if isinstance(m, StatusUpdate) for t in [m.taskId]] + \
        [t for m in received if isinstance(m, StatusUpdates) for t in m.taskIds]
    assert sorted(reported) == sorted(_task_ids(sent))


def test_a_finished_stage_is_removed_with_the_next_launch_or_soon_after(sc, monkeypatch):
    """A job's end sends nothing to the executors (that would wake them between its last
    task and the caller getting the result): the stage rides in the executor's next launch
    message (a message of its own would wake the executor a second time), or a RemoveStage
    goes FORGET_FLUSH_S after the stage finished when no launch came."""
    from ember.scheduler import standalone_backend
    monkeypatch.setattr(standalone_backend, "FORGET_FLUSH_S", 2.0)
    sent, _ = _record_traffic(sc)
    backend = sc.runtime.scheduler_backend
    assert sc.parallelize(range(4), 4).count() == 4
    first = {m.stageId for m in sent if isinstance(m, RemoveStage)}
    pending = {sid for d in backend.executors.values() for sid in d.forgotten}
    assert not first and len(pending) == 1
    del sent[:]
    assert sc.parallelize(range(4), 4).map(lambda x: x + 1).sum() == 10
    launches = [m for m in sent if isinstance(m, (LaunchTask, LaunchTasks))]
    # each executor is told in its launch message, and by nothing else
    assert len(launches) == 2 and all(isinstance(m, LaunchTasks) for m in launches)
    assert not any(isinstance(m, RemoveStage) for m in sent)
    assert [m.forgetStages for m in launches] == [sorted(pending)] * 2
    del sent[:]
    deadline = time.time() + 15
    while any(d.forgotten for d in backend.executors.values()) and time.time() < deadline:
        time.sleep(0.05)
    # no launch came: the timer told both executors about the second job's stage
    assert len(sent) == 2 and {type(m) for m in sent} == {RemoveStage}
    assert len({m.stageId for m in sent} - pending) == 1


def test_many_tiny_tasks_and_failures_are_each_reported_exactly_once(sc, tmp_path) -> None:
    sent, received = _record_traffic(sc)
    acc = sc.accumulator(0)

    def count(x):
        acc.add(1)
        return x
    assert sc.parallelize(range(600), 600).map(count).sum() == sum(range(600))
    assert acc.value == 600     # one accumulator update per task, batched or not
    launched = _task_ids(sent)
    # a task handed back unstarted (it waited behind a slow one) is launched again
    assert len(launched) >= 600 and len(set(launched)) == len(launched)
    reported = [m.taskId for m in received if isinstance(m, StatusUpdate)] + \
        [t for m in received if isinstance(m, StatusUpdates) for t in m.taskIds]
    assert sorted(reported) == sorted(launched)
    assert any(isinstance(m, LaunchTasks) for m in sent)
    # task processes report queued tasks' results together: more per message than cores
    assert max(len(m.taskIds) for m in received if isinstance(m, StatusUpdates)) > 2

    # a failing task inside a batch fails alone: its retries succeed, the others count once
    flag = tmp_path / "failed-once"

    def flaky(x):
        if x == 3 and not flag.exists():
            flag.write_text("x")
            raise ValueError("first attempt fails")
        return x
    assert sorted(sc.parallelize(range(8), 8).map(flaky).collect()) == list(range(8))
    assert flag.exists()


def test_a_batch_of_status_updates_asks_for_an_offer_round_once(sc) -> None:
    """StandaloneSchedulerBackend.status_updates: whether an offer round is wanted is asked
    once per status message, not once per task it reports (a busy executor's StatusUpdates
    holds dozens)."""
    sent, received = _record_traffic(sc)
    sched = sc.runtime.task_scheduler
    asked = []
    wants_offers = sched.wants_offers
    sched.wants_offers = lambda: (asked.append(1), wants_offers())[1]
    try:
        assert sc.parallelize(range(600), 600).count() == 600
    finally:
        del sched.wants_offers
    messages = [m for m in received if isinstance(m, (StatusUpdate, StatusUpdates))]
    assert max(len(m.taskIds) for m in messages if isinstance(m, StatusUpdates)) > 2
    assert len(asked) == len(messages) < 600


def test_results_cross_the_executor_as_the_task_process_encoded_them(sc) -> None:
    """The executor forwards a task's pickled result without decoding it: results,
    accumulator updates and failures still arrive whole, and a task whose accumulator
    update cannot be pickled fails as Spark's "not serializable result" (the task process
    encodes it now) instead of losing its task process."""
    import threading

    from ember.accumulators import AccumulatorParam
    from ember.errors import SparkException
    _, received = _record_traffic(sc)
    assert sc.parallelize([b"x" * 100_000, "y"], 2).collect() == [b"x" * 100_000, "y"]
    results = [d for m in received if isinstance(m, StatusUpdate) for d in [m.data]] + \
        [d for m in received if isinstance(m, StatusUpdates) for d in m.data]
    assert len(results) == 2
    assert all(len(pickle.loads(d)) == 4 for d in results)   # payload, accums, metrics, blocks

    class Locks(AccumulatorParam):
        def zero(self, value):
            return []

        def addInPlace(self, a, b):  # noqa: N802 (PySpark's name)
            return a + b
    locks = sc.accumulator([], Locks())

    def take_lock(x):
        locks.add([threading.Lock()])
        return x
    with pytest.raises(SparkException, match="not serializable result"):
        sc.parallelize(range(2), 2).map(take_lock).count()
    # the executors and their task processes are still there and still work
    assert sc.parallelize(range(10), 4).sum() == 45
    assert len(sc.runtime.scheduler_backend.executors) == 2


def test_kills_and_crashed_task_processes_reach_the_driver_through_the_executor(
        sc, tmp_path) -> None:
    """Ends without a result frame of the task process (its process killed or crashed) are
    encoded by the executor's pool in the same form: a job group cancelled while its tasks
    run (one of them ignoring the kill signal, so its process is killed) ends promptly,
    and a task whose process dies once is retried."""
    import os
    import signal
    import threading

    from ember.errors import JobCancelledException
    errors: list = []

    def sleepy(x):
        if x == 0:
            signal.signal(signal.SIGUSR1, signal.SIG_IGN)   # stopped only by SIGKILL
        time.sleep(60)
        return x

    def run() -> None:
        sc.setJobGroup("sleepers", "tasks to kill")
        try:
            sc.parallelize(range(3), 3).map(sleepy).count()
        except Exception as e:
            errors.append(e)
    t = threading.Thread(target=run)
    t.start()
    deadline = time.time() + 30
    while time.time() < deadline and len(sc.statusTracker().getActiveStageIds()) == 0:
        time.sleep(0.05)
    time.sleep(1.0)
    sc.cancelJobGroup("sleepers")
    t.join(30)
    assert not t.is_alive()
    assert isinstance(errors[0], JobCancelledException)
    # every killed task's status arrived (the driver frees a slot only then), the one that
    # ignored SIGUSR1 after spark.python.task.killTimeout killed its process
    backend = sc.runtime.scheduler_backend
    deadline = time.time() + 30
    while any(len(e.free_slots) < e.cores for e in backend.executors.values()):
        assert time.time() < deadline, {e.executor_id: e.free_slots
                                        for e in backend.executors.values()}
        time.sleep(0.05)
    flag = tmp_path / "crashed-once"

    def crash_once(x):
        if x == 1 and not flag.exists():
            flag.write_text("x")
            os._exit(3)
        return x
    assert sorted(sc.parallelize(range(4), 4).map(crash_once).collect()) == [0, 1, 2, 3]
    assert flag.exists()
    assert len(sc.runtime.scheduler_backend.executors) == 2


# tasks wait behind the long ones until the cancel, not handed back
@pytest.mark.parametrize("sc", [{"spark.ember.scheduler.handBackAfter": "60s"}], indirect=True)
def test_short_tasks_wait_on_busy_slots_and_a_cancel_reaches_the_waiting_ones(sc) -> None:
    """Once a stage's tasks are seen to be short, each busy slot gets more to start
    when its task ends (spark.ember.scheduler.queueShortTasks): every task still runs once.
    Cancelling a job whose slots each hold a waiting task behind a long one ends it
    promptly, and every core and slot is free again afterwards."""
    from tests.helpers.slot_queue import (cancel_a_job_with_waiting_tasks,
                                          run_tiny_tasks_counting_promotions, wait_until_free)
    backend, sched = sc.runtime.scheduler_backend, sc.runtime.task_scheduler
    sent, _ = _record_traffic(sc)
    assert run_tiny_tasks_counting_promotions(sc), "no task waited on a busy slot"
    # a task handed back unstarted (it waited behind a slow one) is launched again
    assert len(set(_task_ids(sent))) == len(_task_ids(sent)) >= 2000
    cancel_a_job_with_waiting_tasks(
        sc, 4, lambda: any(any(e.slots.waiting.values()) for e in backend.executors.values()))
    wait_until_free(
        lambda: not any(len(e.free_slots) < e.cores or any(e.slots.waiting.values())
                        for e in backend.executors.values())
        and not sched.queued_requirements
        and all(r.free_cores == 2 for r in sched.executor_resources.values()),
        lambda: [(e.free_slots, e.slots.waiting) for e in backend.executors.values()])
    assert sc.parallelize(range(10), 4).sum() == 45


def test_a_warm_jobs_submission_and_offer_round_run_on_the_calling_thread(sc, monkeypatch):
    """While the driver's RPC loop is idle the caller borrows it (RpcEnv.run_here): the
    job's submission and its offer round run on the calling thread, the launches leave
    from there, and the results come back as ever."""
    import threading
    backend = sc.runtime.scheduler_backend
    threads: list = []
    make_offers = backend._make_offers
    monkeypatch.setattr(backend, "_make_offers",
                        lambda: (threads.append(threading.get_ident()), make_offers())[1])
    results = []
    for i in range(5):
        time.sleep(0.05)                 # the executors' updates handled: the loop is idle
        results.append(sc.parallelize(range(4), 4).map(lambda x, i=i: x + i).sum())
    assert results == [6 + 4 * i for i in range(5)]
    assert threading.get_ident() in threads


def test_ctrl_c_cancels_a_cluster_job_and_raises_keyboard_interrupt(sc) -> None:
    assert interrupt_a_sleeping_job(sc, 60) < 30


@IGNORED_IN_FINALIZERS
def test_a_ctrl_c_anywhere_in_a_warm_cluster_job_leaves_the_context_working(sc) -> None:
    rdd = sc.parallelize(range(100), 4)
    assert ctrl_c_at_every_step(sc, rdd.count) > 50


@IGNORED_IN_FINALIZERS
def test_a_ctrl_c_anywhere_in_a_job_with_a_broadcast_leaves_the_context_working(sc) -> None:
    """Also where the caller sends (the broadcast's removal), and waits for its job."""
    def job() -> int:
        b = sc.broadcast([1, 2, 3])
        total = sc.parallelize(range(4), 2).map(lambda x: b.value[x % 3]).sum()
        b.unpersist()
        return total
    assert ctrl_c_at_every_step(sc, job) > 50
