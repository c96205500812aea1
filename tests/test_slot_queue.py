"""One task waiting per busy slot in the executor's TaskProcessPool (the driver queues short
tasks there, spark.ember.scheduler.queueShortTasks): the waiting task is written ahead to
the process and starts the moment the running one ends, a kill ends it unstarted without
touching the running one, a process that dies hands it to its replacement, and nothing is
ever dropped silently. The pool runs on real socket pairs; the task processes are threads
that answer what the test tells them to and read the kill file as a task process does."""
from __future__ import annotations

import os
import pickle
import queue
import select
import signal
import struct
import threading
import time

import pytest

from ember.errors import TaskKilledException
from ember.executor import task_process
from ember.executor.process_pool import MAX_WAITING, SEND_AHEAD_BYTES, TaskProcessPool
from ember.executor.wire import read_msg, send_msgs
from ember.scheduler.slot_queues import (CLUSTER_DEPTH, LOCAL_DEPTH, LONG_RUNNING_S, MAX_DEPTH,
                                         SlotQueues, queue_depth)
from tests.helpers.slot_queue import (cancel_a_job_with_waiting_tasks,
                                      run_tiny_tasks_counting_promotions, wait_until_free)


class FakeProcess:
    """Reads the pool's messages like a task process; `finish(tid)` ends a task, `die()`
    closes the socket as a crash would. A task its kill file lists ends unstarted. The ends
    of the tasks in `hold` are sent with the next end, as a task process holds results."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.started: "queue.Queue[int]" = queue.Queue()
        self.release: dict[int, threading.Event] = {}
        self.hold: set[int] = set()
        self.f = sock.makefile("rb")
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        kills = task_process._Kills()
        try:
            kills.open(read_msg(self.f)["kill_file"])       # the slot's conf
            held: list[tuple] = []
            while True:
                msg = read_msg(self.f)
                if msg[0] != "task":
                    continue
                tid = msg[1]
                kills.reached(tid)
                if tid in kills:
                    end = ("done", tid, "KILLED", b"unstarted")
                else:
                    gate = self.release.setdefault(tid, threading.Event())
                    self.started.put(tid)
                    gate.wait(10)
                    end = ("done", tid, "FINISHED", f"result {tid}".encode())
                held.append(end)
                if tid not in self.hold:
                    send_msgs(self.sock, held)
                    held.clear()
        except (OSError, EOFError, ValueError):
            pass
        finally:
            kills.close()

    def finish(self, tid: int) -> None:
        self.release.setdefault(tid, threading.Event()).set()

    def die(self) -> None:
        import socket
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


class FakeForks:
    started = True

    def __init__(self) -> None:
        self.processes: "queue.Queue[FakeProcess]" = queue.Queue()

    def fork(self, child, slot) -> None:
        self.processes.put(FakeProcess(child))

    def exit_code(self, pid: int, timeout: float = 0.0) -> int:
        return 1

    def stop(self) -> None:
        pass


@pytest.fixture()
def pool(tmp_path, request):
    """One slot; waiting tasks are handed back after request.param seconds (a minute: not
    within a test, unless it asks)."""
    ends: "queue.Queue[tuple]" = queue.Queue()
    forks = FakeForks()
    p = TaskProcessPool(1, {"local_dir": str(tmp_path)},
                        lambda slot, tid, state, data: ends.put((tid, state, data)),
                        forks=forks, raw_results=True,
                        hand_back_s=getattr(request, "param", 60.0))
    p.start()
    p.ends, p.fake = ends, forks.processes.get(timeout=5)
    p.forks = forks
    yield p
    p.stop()


def launch(pool, tid: int, size: int = 0) -> None:
    pool.launch_all([(0, tid, (1, 0), b"blob", b"meta", b"task %d " % tid + b"x" * size)])


def ended(pool) -> tuple:
    return pool.ends.get(timeout=5)


def test_a_waiting_task_starts_as_soon_as_the_running_one_ends(pool) -> None:
    launch(pool, 1)
    launch(pool, 2)
    assert pool.fake.started.get(timeout=5) == 1
    assert pool.fake.started.empty()
    pool.fake.finish(1)
    assert ended(pool) == (1, "FINISHED", b"result 1")
    assert pool.fake.started.get(timeout=5) == 2      # no other call was needed
    pool.fake.finish(2)
    assert ended(pool) == (2, "FINISHED", b"result 2")
    assert pool.free_slots() == [0]


def test_killing_a_task_written_ahead_ends_it_unstarted_and_leaves_the_running_one(pool):
    launch(pool, 1)
    launch(pool, 2)
    assert pool.fake.started.get(timeout=5) == 1
    pool.kill(0, 2)
    pool.kill(0, 2)                                    # twice: still one end
    pool.fake.finish(1)
    assert ended(pool) == (1, "FINISHED", b"result 1")
    assert ended(pool) == (2, "KILLED", b"unstarted")
    time.sleep(0.1)
    assert pool.fake.started.empty() and pool.ends.empty()
    assert pool.free_slots() == [0]


def test_a_big_waiting_task_stays_in_the_pool_and_a_kill_drops_it_at_once(pool) -> None:
    launch(pool, 1)
    launch(pool, 2, size=SEND_AHEAD_BYTES)
    assert pool.fake.started.get(timeout=5) == 1
    pool.kill(0, 2)
    tid, state, _ = ended(pool)
    assert (tid, state) == (2, "KILLED")
    pool.fake.finish(1)
    assert ended(pool) == (1, "FINISHED", b"result 1")
    time.sleep(0.1)
    assert pool.fake.started.empty()                   # task 2 never reached the process
    assert pool.free_slots() == [0]


def test_a_big_waiting_task_is_sent_when_the_slot_frees(pool) -> None:
    launch(pool, 1)
    launch(pool, 2, size=SEND_AHEAD_BYTES)
    assert pool.fake.started.get(timeout=5) == 1
    pool.fake.finish(1)
    assert ended(pool) == (1, "FINISHED", b"result 1")
    assert pool.fake.started.get(timeout=5) == 2
    pool.fake.finish(2)
    assert ended(pool) == (2, "FINISHED", b"result 2")


def test_sigusr1_stops_only_a_task_the_kill_file_lists(tmp_path, monkeypatch) -> None:
    """The task process's side: with two tasks in the process, the signal says "look", the
    kill file says which."""
    path = tmp_path / "kills"
    path.write_bytes(struct.pack("<8q", 7, *[-1] * 7))
    kills = task_process._Kills()
    kills.open(str(path))
    monkeypatch.setattr(task_process, "_kills", kills)
    monkeypatch.setattr(task_process, "_running", [5])
    task_process._on_kill(signal.SIGUSR1, None)        # task 5 runs on
    assert task_process._running == [5]
    task_process._running[0] = 7
    with pytest.raises(TaskKilledException):
        task_process._on_kill(signal.SIGUSR1, None)
    assert task_process._running == [None]
    # the pool lists a kill later, as it does, with one pwrite: the mapped file shows it
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, struct.pack("<q", 9), 8)
    os.close(fd)
    assert 9 in kills and 7 in kills and 5 not in kills
    # an id whose bytes straddle two entries is not listed
    pair = struct.pack("<2q", 2 ** 40 + 3, 2 ** 20 + 1)
    straddling = struct.unpack("<q", pair[4:12])[0]
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, pair, 16)
    os.close(fd)
    assert straddling not in kills and 2 ** 40 + 3 in kills and 2 ** 20 + 1 in kills
    kills.close()
    assert 9 not in kills


def test_waiting_tasks_run_in_order_and_one_too_many_is_reported_lost_not_dropped(pool):
    for tid in range(1, MAX_WAITING + 3):
        launch(pool, tid)
    tid, state, _ = ended(pool)
    assert (tid, state) == (MAX_WAITING + 2, "LOST")
    for tid in range(1, MAX_WAITING + 2):
        assert pool.fake.started.get(timeout=5) == tid
        pool.fake.finish(tid)
        assert ended(pool)[:2] == (tid, "FINISHED")
    assert pool.free_slots() == [0]


def test_the_tasks_one_offer_round_writes_ahead_reach_the_process_in_one_write(
        pool, monkeypatch):
    """launch_all: the task for the idle process goes at once (with the stage it is to
    forget), the ones written ahead behind it together, in order; the one too many is
    still reported lost."""
    from ember.executor import process_pool
    writes = []
    real = process_pool.send_msgs
    monkeypatch.setattr(process_pool, "send_msgs",
                        lambda sock, msgs: (writes.append([m[:2] for m in msgs]),
                                            real(sock, msgs)))
    pool.launch_all([(0, 100, (7, 0), b"blob", b"meta", b"task 100")])
    assert pool.fake.started.get(timeout=5) == 100
    pool.fake.finish(100)
    assert ended(pool)[:2] == (100, "FINISHED")
    pool.forget_stage(7)
    writes.clear()
    pool.launch_all([(0, tid, (1, 0), b"blob", b"meta", b"task %d" % tid)
                     for tid in range(1, MAX_WAITING + 3)])
    assert writes == [[("forget_stage", 7), ("task", 1)],
                      [("task", tid) for tid in range(2, MAX_WAITING + 2)]]
    assert ended(pool)[:2] == (MAX_WAITING + 2, "LOST")
    for tid in range(1, MAX_WAITING + 2):
        assert pool.fake.started.get(timeout=5) == tid
        pool.fake.finish(tid)
        assert ended(pool)[:2] == (tid, "FINISHED")
    assert pool.free_slots() == [0]


def test_a_new_stages_closure_counts_once_against_the_send_ahead_budget(pool, monkeypatch):
    """Three tasks of a stage the busy process has not seen, queued in one round: its
    closure goes with the first only, so all three fit in SEND_AHEAD_BYTES and go ahead."""
    from ember.executor import process_pool
    writes = []
    real = process_pool.send_msgs
    monkeypatch.setattr(process_pool, "send_msgs",
                        lambda sock, msgs: (writes.append([m[:2] for m in msgs]),
                                            real(sock, msgs)))
    launch(pool, 1)
    assert pool.fake.started.get(timeout=5) == 1
    closure = b"c" * (SEND_AHEAD_BYTES * 5 // 8)
    pool.launch_all([(0, tid, (2, 0), closure, b"meta", b"task %d" % tid) for tid in (2, 3, 4)])
    assert writes[-1] == [("task", 2), ("task", 3), ("task", 4)]
    for tid in (1, 2, 3, 4):
        pool.fake.finish(tid)
        assert ended(pool)[:2] == (tid, "FINISHED")


def test_waiting_tasks_past_the_send_ahead_budget_wait_in_the_pool(pool) -> None:
    """Two fit in the process's socket, the third waits in the pool: killing it ends it at
    once, killing the second (written ahead) ends it unstarted in its turn."""
    launch(pool, 1)
    for tid in (2, 3, 4):
        launch(pool, tid, size=SEND_AHEAD_BYTES // 3)
    assert pool.fake.started.get(timeout=5) == 1
    pool.kill(0, 4)
    assert ended(pool)[:2] == (4, "KILLED")
    pool.kill(0, 2)
    pool.fake.finish(1)
    assert ended(pool)[:2] == (1, "FINISHED")
    assert ended(pool) == (2, "KILLED", b"unstarted")
    assert pool.fake.started.get(timeout=5) == 3
    pool.fake.finish(3)
    assert ended(pool)[:2] == (3, "FINISHED")
    time.sleep(0.1)
    assert pool.fake.started.empty() and pool.ends.empty()


@pytest.mark.parametrize("pool", [0.05], indirect=True)
def test_tasks_waiting_behind_a_long_task_are_handed_back_while_it_runs(pool) -> None:
    """Task 1 runs on; task 2 (written ahead) and task 3 (held in the pool) end as handed
    back within a few hand-back periods, not when task 1 ends. Task 2's unstarted end from
    the process is not reported twice, and the slot takes new tasks as usual."""
    import pickle

    from ember.errors import TASK_HANDED_BACK
    launch(pool, 1)
    launch(pool, 2)
    launch(pool, 3, size=SEND_AHEAD_BYTES)
    assert pool.fake.started.get(timeout=5) == 1
    t0 = time.monotonic()
    back = [ended(pool), ended(pool)]
    assert time.monotonic() - t0 < 2.0
    assert [(tid, state, pickle.loads(data)[0]) for tid, state, data in back] == \
        [(2, "KILLED", TASK_HANDED_BACK), (3, "KILLED", TASK_HANDED_BACK)]
    assert pool.fake.started.empty()
    pool.fake.finish(1)
    assert ended(pool) == (1, "FINISHED", b"result 1")
    launch(pool, 4)
    assert pool.fake.started.get(timeout=5) == 4       # task 2 was skipped, unstarted
    pool.fake.finish(4)
    assert ended(pool) == (4, "FINISHED", b"result 4")
    time.sleep(0.1)
    assert pool.ends.empty() and pool.free_slots() == [0]


@pytest.mark.parametrize("pool", [0.05], indirect=True)
def test_a_hand_back_leaves_the_tasks_the_process_has_reached(pool) -> None:
    """Task 1 has ended but the process holds its end while it runs task 2, so the pool
    counts task 1 running past the hand-back time: only task 3, which the process has not
    reached, is handed back; task 2 runs on and ends once, with task 1's end."""
    from ember.errors import TASK_HANDED_BACK
    pool.fake.hold.add(1)
    for tid in (1, 2, 3):
        launch(pool, tid)
    assert pool.fake.started.get(timeout=5) == 1
    pool.fake.finish(1)
    assert pool.fake.started.get(timeout=5) == 2
    tid, state, data = ended(pool)
    assert (tid, state, pickle.loads(data)[0]) == (3, "KILLED", TASK_HANDED_BACK)
    time.sleep(0.2)                     # four times the hand-back time: task 2 stays
    assert pool.ends.empty()
    pool.fake.finish(2)
    assert [ended(pool), ended(pool)] == [(1, "FINISHED", b"result 1"),
                                          (2, "FINISHED", b"result 2")]
    time.sleep(0.1)
    assert pool.fake.started.empty() and pool.ends.empty()
    assert pool.free_slots() == [0]


@pytest.mark.parametrize("pool", [0.05], indirect=True)
def test_a_task_reached_while_the_pool_hands_back_is_kept(pool, monkeypatch) -> None:
    """The process reaches task 2 after the pool's first look and before task 2 is listed
    killed (it passed its kill check first): the pool's second look keeps task 2 and takes
    its entry back, and hands back task 3 only; task 2 runs and ends once. On a loaded
    host this moment let a running long task be killed and run again."""
    from ember.errors import TASK_HANDED_BACK
    from ember.executor.process_pool import _KILL_ID, REACHED_AT
    real = pool._list_killed

    def list_killed(slot, tid: int) -> int:
        if tid == 2:        # the process starts task 2 now
            os.pwrite(slot.kill_fd, _KILL_ID.pack(2), REACHED_AT)
        return real(slot, tid)
    monkeypatch.setattr(pool, "_list_killed", list_killed)
    pool.fake.hold.add(1)
    for tid in (1, 2, 3):
        launch(pool, tid)
    assert pool.fake.started.get(timeout=5) == 1
    tid, state, data = ended(pool)
    assert (tid, state, pickle.loads(data)[0]) == (3, "KILLED", TASK_HANDED_BACK)
    pool.fake.finish(1)
    assert pool.fake.started.get(timeout=5) == 2      # not listed killed any more
    pool.fake.finish(2)
    assert [ended(pool), ended(pool)] == [(1, "FINISHED", b"result 1"),
                                          (2, "FINISHED", b"result 2")]
    time.sleep(0.1)
    assert pool.fake.started.empty() and pool.ends.empty()


@pytest.mark.parametrize("pool", [0.05], indirect=True)
def test_a_task_handed_back_and_reached_does_not_hand_back_those_before_it(pool) -> None:
    """Task 1's and task 2's ends are held while the process goes on to task 3, handed
    back already, which it reaches only to end unstarted (its end held too). The pool,
    still counting task 1 running and task 2 waiting, looks again: the process names task 3
    as reached, which is not waiting any more, so task 2 was handed back as well and ran
    twice. A task handed back and reached means every one written before it was reached."""
    from ember.errors import TASK_HANDED_BACK
    pool.fake.hold.update({1, 2, 3})
    for tid in (1, 2, 3):
        launch(pool, tid)
    launch(pool, 4, size=SEND_AHEAD_BYTES)      # held in the pool, not written
    assert pool.fake.started.get(timeout=5) == 1
    pool.fake.finish(1)
    assert pool.fake.started.get(timeout=5) == 2
    back = [ended(pool), ended(pool)]
    assert [(tid, state, pickle.loads(data)[0]) for tid, state, data in back] == \
        [(3, "KILLED", TASK_HANDED_BACK), (4, "KILLED", TASK_HANDED_BACK)]
    pool.fake.finish(2)                 # the process reaches task 3, ends it unstarted
    time.sleep(0.2)                     # four times the hand-back time: task 2 stays
    assert pool.ends.empty()
    launch(pool, 5)
    assert pool.fake.started.get(timeout=5) == 5
    pool.fake.finish(5)
    assert [ended(pool) for _ in range(3)] == [(1, "FINISHED", b"result 1"),
                                               (2, "FINISHED", b"result 2"),
                                               (5, "FINISHED", b"result 5")]
    time.sleep(0.1)
    assert pool.fake.started.empty() and pool.ends.empty()


def test_a_dying_process_hands_the_waiting_task_to_its_replacement(pool) -> None:
    launch(pool, 1)
    launch(pool, 2)
    assert pool.fake.started.get(timeout=5) == 1
    pool.fake.die()
    tid, state, _ = ended(pool)
    assert (tid, state) == (1, "LOST")                 # the running task crashed with it
    fresh = pool.forks.processes.get(timeout=5)
    assert fresh.started.get(timeout=5) == 2
    fresh.finish(2)
    assert ended(pool) == (2, "FINISHED", b"result 2")


def test_local_mode_queues_short_tasks_and_a_cancel_reaches_the_waiting_ones(fresh_sc) -> None:
    """local[2] queues as an executor does: every task runs once, tasks did wait on busy
    slots, and cancelling a job whose slots each hold a waiting task behind a long one ends
    it and leaves every core free."""
    from ember import SparkConf
    # tasks wait behind the long ones until the cancel, not handed back
    sc = fresh_sc("local[2]", conf=SparkConf().set("spark.ember.scheduler.handBackAfter", "60s"))
    sched, backend = sc.runtime.task_scheduler, sc.runtime.scheduler_backend
    assert run_tiny_tasks_counting_promotions(sc), "no task waited on a busy slot"
    waiting = backend.slots.waiting
    cancel_a_job_with_waiting_tasks(sc, 2, lambda: sum(map(len, waiting.values())) >= 2)
    cores = sched.executor_resources["driver"]
    wait_until_free(lambda: not (any(waiting.values()) or backend.slots.running
                                 or sched.queued_requirements) and cores.free_cores == 2,
                    lambda: (waiting, sched.queued_requirements, cores.free_cores))
    assert sc.parallelize(range(10), 4).sum() == 45


def test_the_drivers_slot_queues_follow_the_order_the_process_runs_them() -> None:
    now = [0.0]
    q = SlotQueues(depth=2, clock=lambda: now[0])
    q.started(0, 1)
    assert q.room(8) == [(0, 1), (0, 2)]            # (slot, tasks ahead of the queued one)
    q.queued(0, 2)
    assert q.room(8) == [(0, 2)]
    q.queued(0, 3)
    assert q.room(8) == []
    assert q.ended(0, 3) == (False, None)           # killed while it waited
    assert q.ended(0, 1) == (False, 2)              # 2 started in its place
    assert q.ended(0, 99) == (False, None)          # not a task of this slot: no change
    assert q.room(8) == [(0, 1), (0, 2)]
    now[0] += LONG_RUNNING_S * 2                    # task 2 runs long: nothing more behind it
    assert q.room(8) == []
    q.started(1, 4)
    assert q.room(8) == [(1, 1), (1, 2)]
    assert q.ended(0, 2) == (True, None)
    assert q.ended(1, 4) == (True, None)
    assert q.room(8) == [] and not q.running
    q.started(0, 5)
    assert q.room(1) == [(0, 1)]                    # 1 task left to place: 1 place


def test_queue_depth_by_deploy_mode_unless_set() -> None:
    """Unset, a cluster's slots take more tasks ahead than local mode's (an executor's relay
    takes longer to answer); a set value holds for both, within 1..MAX_DEPTH, which the
    executor's pool takes (MAX_WAITING); off is 0."""
    assert (queue_depth({}, cluster=False), queue_depth({}, cluster=True)) == (31, 63)
    assert LOCAL_DEPTH < CLUSTER_DEPTH == MAX_DEPTH == MAX_WAITING
    key = "spark.ember.scheduler.queueDepth"
    for value, depth in (("8", 8), ("0", 1), ("1000", MAX_DEPTH)):
        assert queue_depth({key: value}, cluster=False) == queue_depth({key: value}, cluster=True) == depth
    assert queue_depth({"spark.ember.scheduler.queueShortTasks": "false"}, cluster=True) == 0


def test_a_task_that_waited_too_long_behind_others_is_handed_back_unstarted() -> None:
    """The task process's side: a queued task written ahead hand_back_s ago or more ends
    KILLED with the hand-back reason without its stage being loaded (the garbage closure
    would fail it otherwise); one sent to an idle process (no send time) is run."""
    from types import SimpleNamespace

    from ember.errors import TASK_HANDED_BACK
    env = SimpleNamespace(raw_results=False, hand_back_s=0.05)
    stale = time.monotonic() - 0.06
    reply = task_process._run(env, ("task", 7, (1, 0), b"garbage", None, b"", stale), {},
                              [None, 0])
    assert reply[:4] == ("done", 7, "KILLED", TASK_HANDED_BACK)
    reply = task_process._run(env, ("task", 8, (1, 0), b"garbage", None, b"", None), {},
                              [None, 0])
    assert reply[:3] == ("done", 8, "FAILED")          # it tried: the closure is garbage


def test_tasks_queued_behind_a_slow_one_each_run_once(fresh_sc):
    """A slow task in a stream of tiny ones: the tiny ones queued behind it may be handed
    back unstarted (to run on whichever slot is free); every task still runs once."""
    from ember.errors import TASK_HANDED_BACK
    sc = fresh_sc("local[2]")
    sched = sc.runtime.task_scheduler
    ends: list[tuple] = []
    status_update = sched.status_update
    sched.status_update = lambda tid, state, payload, *rest: (
        ends.append((tid, state, payload)), status_update(tid, state, payload, *rest))[1]
    acc = sc.accumulator(0)

    def count(x):
        acc.add(1)
        if x == 300:
            time.sleep(0.5)
        return x
    try:
        assert sc.parallelize(range(600), 600).map(count).sum() == sum(range(600))
    finally:
        sched.status_update = status_update
    assert acc.value == 600
    assert all(payload == TASK_HANDED_BACK for _, state, payload in ends if state != "FINISHED")
    assert sorted(tid for tid, state, _ in ends if state == "FINISHED") == \
        sorted({tid for tid, state, _ in ends if state == "FINISHED"})
    assert sum(state == "FINISHED" for _, state, _ in ends) == 600


def test_long_tasks_among_short_ones_run_once_each(fresh_sc, tmp_path):
    """Every 20th task sleeps 0.2 s: queued behind a short one whose end its process holds,
    it was handed back (killed, run again) while it ran; each task's function now runs once
    (counted by a line per call in a file, which killed calls write too)."""
    sc = fresh_sc("local[2]")
    calls = str(tmp_path / "calls")

    def f(x):
        with open(calls, "a") as out:
            out.write(f"{x}\n")
        time.sleep(0.2 if x % 20 == 19 else 0.0005)
        return x
    assert sc.parallelize(range(200), 200).map(f).sum() == sum(range(200))
    with open(calls) as f_in:
        assert sorted(map(int, f_in.read().split())) == list(range(200))


def test_a_task_sent_to_a_given_up_slot_fails_at_once_instead_of_waiting_for_ever(pool):
    """A slot whose process keeps dying at start is given up; the driver, which tracks
    slots itself, may still send it a task: that task must end (FAILED, so the driver runs
    it on another executor), not wait for a process that will never come."""
    for _ in range(10):
        pool.fake.die()
        try:
            pool.fake = pool.forks.processes.get(timeout=2)   # its replacement
        except queue.Empty:
            break                                               # none: given up
    assert pool.slots[0].dead and pool.free_slots() == []
    launch(pool, 7)
    tid, state, data = ended(pool)
    exc_type, message, _tb, retryable = pickle.loads(data)[0]
    assert (tid, state, exc_type, retryable) == (7, "FAILED", "SparkException", True)
    assert "given up" in message


def test_results_already_sent_are_taken_in_with_the_first_and_read_once(tmp_path) -> None:
    """take_arrived (the executor, before it reports an end): a result another process has
    already sent is read at once, inside the first one's report, and the loop's own
    readiness event for it, now stale, neither blocks nor counts as the process's death."""
    forks = FakeForks()
    ends: list = []
    nested: list = []
    p = TaskProcessPool(2, {"local_dir": str(tmp_path)},
                        lambda slot, tid, state, data: on_end(tid), forks=forks,
                        raw_results=True)

    def on_end(tid: int) -> None:
        ends.append(tid)
        if len(ends) == 1:
            p.take_arrived()
            nested.extend(ends[1:])
    p.start()
    try:
        fakes = [forks.processes.get(timeout=5) for _ in range(2)]
        p.launch_all([(0, 1, (1, 0), b"blob", b"meta", b"t1"),
                      (1, 2, (1, 0), b"blob", b"meta", b"t2")])
        tids = [fake.started.get(timeout=5) for fake in fakes]
        hold = threading.Event()
        p.loop.post(hold.wait, 5)           # both results wait in their sockets
        for fake, tid in zip(fakes, tids):
            fake.finish(tid)
        sent = select.poll()
        for slot in p.slots:
            sent.register(slot.sock, select.POLLIN)
        deadline = time.monotonic() + 5
        while len(sent.poll(50)) < 2 and time.monotonic() < deadline:
            pass
        hold.set()
        deadline = time.monotonic() + 5
        while len(ends) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert sorted(ends) == [1, 2] and len(nested) == 1
        assert forks.processes.empty()      # no slot was taken for dead and replaced
        assert sorted(p.free_slots()) == [0, 1]
        alive = threading.Event()
        p.loop.post(alive.set)
        assert alive.wait(2)                # the loop is not stuck in a read
    finally:
        p.stop()
