"""BarrierCoordinator: the driver side of BarrierTaskContext.barrier() and allGather().

Every task of a barrier stage attempt sends one RequestToSync per call; the call succeeds
for all of them at once when all `numTasks` requests of the same barrier epoch arrived, and
fails for all of them if they do not arrive within spark.barrier.sync.timeout, or if they
mix barrier() and allGather(). Tasks reach it through their task process pool (local mode)
or their executor (a cluster); the backend checks that the requesting task really runs
there before handing the request over. Messages and rules are Spark's BarrierCoordinator's.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

from ember.scheduler.listener import StageCompleted

log = logging.getLogger(__name__)

Reply = Callable[[list], None]       # every task's message, ordered by partition id
Fail = Callable[[str], None]         # the error message the task raises as SparkException


@dataclass
class _Requester:
    task_id: int
    reply: Reply
    fail: Fail


@dataclass
class _ContextBarrierState:
    """The barrier calls of one stage attempt (Spark's ContextBarrierState)."""
    barrier_id: str
    num_tasks: int
    epoch: int = 0
    requesters: list[_Requester] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    methods: set[str] = field(default_factory=set)
    timer: Any = None

    def reset_call(self) -> None:
        self.requesters = []
        self.messages = [""] * self.num_tasks
        self.methods = set()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def barrier_id(stage_id: int, stage_attempt: int) -> str:
    """Spark's ContextBarrierId.toString."""
    return f"Stage {stage_id} (Attempt {stage_attempt})"


class BarrierCoordinator:
    def __init__(self, timeout_s: float,
                 start_timer: Callable[[float, Callable[[], None]], Any] | None = None) -> None:
        self.timeout_s = timeout_s
        self._start_timer = start_timer or _daemon_timer
        self._lock = threading.Lock()
        self._states: dict[tuple[int, int], _ContextBarrierState] = {}

    def handle_request(self, request: Any, reply: Reply, fail: Fail) -> None:
        """One task's RequestToSync; reply/fail are called exactly once, maybe later."""
        key = (request.stageId, request.stageAttemptId)
        to_reply: list[tuple[Reply, list]] = []
        to_fail: list[tuple[Fail, str]] = []
        with self._lock:
            st = self._states.get(key)
            if st is None:
                st = _ContextBarrierState(barrier_id(*key), request.numTasks)
                st.reset_call()
                self._states[key] = st
            tid = request.taskAttemptId
            if request.numTasks != st.num_tasks:
                to_fail.append((fail, f"requirement failed: Number of tasks of {st.barrier_id} "
                                      f"is {request.numTasks} from Task {tid}, previously it "
                                      f"was {st.num_tasks}."))
            elif not 0 <= request.partitionId < st.num_tasks:
                to_fail.append((fail, f"Invalid partition id {request.partitionId} for "
                                      f"{st.barrier_id} of {st.num_tasks} tasks"))
            elif request.barrierEpoch != st.epoch:
                to_fail.append((fail, f"The request to sync of {st.barrier_id} with barrier "
                                      f"epoch {st.epoch} has already finished. Maybe task "
                                      f"{tid} is not properly killed."))
            else:
                if not st.requesters:
                    epoch = st.epoch
                    st.timer = self._start_timer(self.timeout_s,
                                                 lambda: self._timed_out(key, epoch))
                st.requesters.append(_Requester(tid, reply, fail))
                st.messages[request.partitionId] = request.message
                st.methods.add(request.requestMethod)
                log.info("Barrier sync epoch %d from %s received update from Task %d, current "
                         "progress: %d/%d.", st.epoch, st.barrier_id, tid, len(st.requesters),
                         st.num_tasks)
                if len(st.methods) > 1:
                    msg = (f"Different barrier sync types found for the sync {st.barrier_id}: "
                           f"{', '.join(sorted(st.methods))}. Please use the same barrier sync "
                           "type within a single sync.")
                    to_fail += [(r.fail, msg) for r in st.requesters]
                    self._cleanup(key)
                elif len(st.requesters) == st.num_tasks:
                    log.info("Barrier sync epoch %d from %s received all updates from tasks, "
                             "finished successfully.", st.epoch, st.barrier_id)
                    messages = list(st.messages)
                    to_reply += [(r.reply, messages) for r in st.requesters]
                    st.epoch += 1
                    st.reset_call()
        for f, msg in to_fail:
            f(msg)
        for r, messages in to_reply:
            r(messages)

    def _timed_out(self, key: tuple[int, int], epoch: int) -> None:
        with self._lock:
            st = self._states.get(key)
            if st is None or st.epoch != epoch or not st.requesters:
                return
            msg = (f"The coordinator didn't get all barrier sync requests for barrier epoch "
                   f"{epoch} from {st.barrier_id} within {_fmt_seconds(self.timeout_s)} "
                   "second(s).")
            waiting = list(st.requesters)
            self._cleanup(key)
        for r in waiting:
            r.fail(msg)

    def _cleanup(self, key: tuple[int, int]) -> list[_Requester]:
        """Forget a stage attempt's barrier state (lock held); its waiting requesters."""
        st = self._states.pop(key, None)
        if st is None:
            return []
        waiting = st.requesters
        st.reset_call()
        return waiting

    def on_event(self, event: Any) -> None:
        """Listener bus hook: a finished stage attempt's barrier state is dropped, and a task
        still waiting in it (being killed with its stage) is released with an error."""
        if isinstance(event, StageCompleted):
            info = event.stage_info
            key = (info.stage_id, info.attempt_id)
            with self._lock:
                waiting = self._cleanup(key)
            for r in waiting:
                r.fail(f"{barrier_id(*key)} has finished; its barrier sync was abandoned.")


def _daemon_timer(delay: float, fn: Callable[[], None]) -> threading.Timer:
    t = threading.Timer(delay, fn)
    t.daemon = True
    t.start()
    return t


def _fmt_seconds(s: float) -> str:
    return str(int(s)) if float(s).is_integer() else str(s)
