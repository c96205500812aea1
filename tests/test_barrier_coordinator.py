"""BarrierCoordinator as a state machine: requests in, replies and failures out, a fake
timer for spark.barrier.sync.timeout; Spark's messages."""
from __future__ import annotations

from ember.deploy.messages import RequestToSync
from ember.scheduler.barrier_coordinator import BarrierCoordinator
from ember.scheduler.listener import StageCompleted, StageInfo


class Timers:
    def __init__(self) -> None:
        self.pending: list = []

    def start(self, delay: float, fn):
        t = [delay, fn, False]
        self.pending.append(t)

        class Handle:
            def cancel(self) -> None:
                t[2] = True
        return Handle()

    def fire(self) -> None:
        pending, self.pending = self.pending, []
        for _delay, fn, cancelled in pending:
            if not cancelled:
                fn()


class Task:
    def __init__(self, coord: BarrierCoordinator, tid: int, partition: int, n: int = 2,
                 stage: tuple[int, int] = (3, 0)) -> None:
        self.coord, self.tid, self.partition, self.n, self.stage = coord, tid, partition, n, stage
        self.epoch = 0
        self.replies: list = []
        self.failures: list[str] = []

    def call(self, method: str = "BARRIER", message: str = "", epoch: int | None = None,
             n: int | None = None) -> None:
        req = RequestToSync(n or self.n, self.stage[0], self.stage[1], self.tid,
                            self.epoch if epoch is None else epoch, self.partition, message,
                            method)
        self.coord.handle_request(req, self.replies.append, self.failures.append)


def test_all_tasks_released_together_with_messages_by_partition() -> None:
    timers = Timers()
    c = BarrierCoordinator(60, timers.start)
    a, b = Task(c, 10, 0), Task(c, 11, 1)
    b.call("ALL_GATHER", "from-1")
    assert not b.replies and len(timers.pending) == 1
    a.call("ALL_GATHER", "from-0")
    assert a.replies == b.replies == [["from-0", "from-1"]]
    timers.fire()                     # the epoch's timer was cancelled: nothing fails
    assert not a.failures and not b.failures
    a.epoch = b.epoch = 1             # the next call is epoch 1
    a.call()
    b.call()
    assert a.replies[-1] == ["", ""] and len(a.replies) == 2


def test_timeout_fails_every_waiting_task_with_sparks_message() -> None:
    timers = Timers()
    c = BarrierCoordinator(2, timers.start)
    a = Task(c, 10, 0)
    a.call()
    timers.fire()
    assert a.failures == ["The coordinator didn't get all barrier sync requests for barrier "
                          "epoch 0 from Stage 3 (Attempt 0) within 2 second(s)."]


def test_stale_epoch_wrong_task_count_and_mixed_methods_fail() -> None:
    c = BarrierCoordinator(60, Timers().start)
    a, b = Task(c, 10, 0), Task(c, 11, 1)
    a.call(epoch=1)
    assert a.failures == ["The request to sync of Stage 3 (Attempt 0) with barrier epoch 0 "
                          "has already finished. Maybe task 10 is not properly killed."]
    b.call(n=3)
    assert b.failures == ["requirement failed: Number of tasks of Stage 3 (Attempt 0) is 3 "
                          "from Task 11, previously it was 2."]
    a.call("BARRIER")
    b.call("ALL_GATHER", "x")
    msg = ("Different barrier sync types found for the sync Stage 3 (Attempt 0): ALL_GATHER, "
           "BARRIER. Please use the same barrier sync type within a single sync.")
    assert a.failures[-1] == msg and b.failures[-1] == msg


def test_a_finished_stage_attempt_releases_its_waiting_tasks() -> None:
    c = BarrierCoordinator(60, Timers().start)
    a = Task(c, 10, 0, stage=(5, 1))
    a.call()
    c.on_event(StageCompleted(StageInfo(5, 1, "s", 2)))
    assert a.failures == ["Stage 5 (Attempt 1) has finished; its barrier sync was abandoned."]
    other = Task(c, 12, 0, stage=(5, 2))       # a new attempt starts from epoch 0
    other.call()
    assert not other.failures
