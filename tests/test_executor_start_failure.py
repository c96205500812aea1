"""An executor that cannot be created after it registered (its work dir unusable: a full
disk, a file where a directory should be) tells the driver why and exits, as Spark's
exitExecutor does, instead of staying registered with tasks it will never run; its task
process pool stops whatever it had started. And the tasks the driver sends while the pool
starts all run, in the order sent."""
from __future__ import annotations

import pickle
import queue
import time

import pytest

from ember.deploy.executor_messages import (LaunchTask, RegisteredExecutor, RegisterExecutor,
                                            RemoveExecutor, StatusUpdate, StatusUpdates)
from ember.executor.backend import ENDPOINT_NAME, CoarseGrainedExecutorBackend
from ember.executor.process_pool import TaskProcessPool
from ember.rdd import serialize_stage
from ember.rpc import RpcEndpoint, RpcEnv
from ember.scheduler.task import TaskDescription

CONF = {"spark.rpc.connect.timeout": "5s"}


class FakeDriver(RpcEndpoint):
    """Registers any executor (True, then RegisteredExecutor) and records RemoveExecutor."""

    def __init__(self) -> None:
        self.removed: "queue.Queue[RemoveExecutor]" = queue.Queue()

    def receive_and_reply(self, msg, context) -> None:
        if isinstance(msg, RegisterExecutor):
            context.reply(True)
            msg.executorRef.send(RegisteredExecutor())
        else:
            super().receive_and_reply(msg, context)

    def receive(self, msg, sender) -> None:
        if isinstance(msg, RemoveExecutor):
            self.removed.put(msg)


def test_an_executor_that_cannot_start_its_task_processes_tells_the_driver_and_exits(tmp_path):
    work = tmp_path / "work"
    work.write_text("a file where the executor's directory should be")
    driver_env = RpcEnv.create("driver", "127.0.0.1", 0, CONF)
    executor_env = RpcEnv.create("sparkExecutor", "127.0.0.1", 0, CONF)
    try:
        driver = FakeDriver()
        driver_env.setup_endpoint("CoarseGrainedScheduler", driver)
        backend = CoarseGrainedExecutorBackend("7", "127.0.0.1", 1, "app-1",
                                               driver_env.address, None, {}, str(work))
        executor_env.setup_endpoint(ENDPOINT_NAME, backend)
        msg = driver.removed.get(timeout=20)
        assert msg.executorId == "7", msg
        assert msg.reason.startswith("Unable to create executor due to ") and \
            "Not a directory" in msg.reason, msg.reason
        assert backend.exited.wait(10) and backend.exit_code == 1 and backend.pool is None
    finally:
        executor_env.shutdown()
        driver_env.shutdown()


def test_a_pool_that_fails_to_start_stops_what_it_started(tmp_path):
    pool = TaskProcessPool(2, {"local_dir": str(tmp_path / "missing")}, lambda *a: None)
    with pytest.raises(FileNotFoundError):
        pool.start()                 # the fork server is up when the kill file fails
    assert pool._stopped and pool._forks._proc is not None
    assert pool._forks._proc.poll() is not None, "the fork server outlived the failed start"


class LaunchingDriver(FakeDriver):
    """Registers the executor and launches a first task at once, while the executor's task
    processes are still starting; records the tasks' ends."""

    def __init__(self, first: bytes) -> None:
        super().__init__()
        self.first = first
        self.ended: "queue.Queue[tuple[int, str]]" = queue.Queue()

    def receive_and_reply(self, msg, context) -> None:
        super().receive_and_reply(msg, context)
        if isinstance(msg, RegisterExecutor):
            msg.executorRef.send(LaunchTask(self.first))

    def receive(self, msg, sender) -> None:
        if isinstance(msg, StatusUpdate):
            self.ended.put((msg.taskId, msg.state))
        elif isinstance(msg, StatusUpdates):
            for tid, state in zip(msg.taskIds, msg.states):
                self.ended.put((tid, state))
        else:
            super().receive(msg, sender)


def test_a_task_sent_while_the_task_processes_start_and_one_sent_after_both_run(sc, tmp_path):
    # the second names the stage by its key only (the driver sent the closure with the
    # first); it came once the pool was up, before the first, held back, was launched: it
    # found no closure and was lost, and its job waited for it for ever
    rdd = sc.parallelize(range(10), 2)
    blob = serialize_stage("result", rdd, lambda ctx, it: sum(it))

    def task(tid: int, slot: int, with_closure: bool) -> bytes:     # partition = slot
        td = TaskDescription(tid, 0, "7", slot, slot, (0, 0), blob, b"",
                             rdd.partitions()[slot], slot)
        return pickle.dumps((tid, slot, (0, 0), blob if with_closure else None, b"",
                             td.encode()), protocol=5)
    driver_env = RpcEnv.create("driver", "127.0.0.1", 0, CONF)
    executor_env = RpcEnv.create("sparkExecutor", "127.0.0.1", 0, CONF)
    backend = CoarseGrainedExecutorBackend("7", "127.0.0.1", 2, "app-1", driver_env.address,
                                           None, {}, str(tmp_path))
    try:
        driver = LaunchingDriver(task(1, 0, True))
        driver_env.setup_endpoint("CoarseGrainedScheduler", driver)
        executor_env.setup_endpoint(ENDPOINT_NAME, backend)
        deadline = time.monotonic() + 20
        while backend.pool is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        assert backend.pool is not None
        driver_env.endpoint_ref(executor_env.address, ENDPOINT_NAME).send(
            LaunchTask(task(2, 1, False)))
        ended = {driver.ended.get(timeout=20), driver.ended.get(timeout=20)}
        assert ended == {(1, "FINISHED"), (2, "FINISHED")}
    finally:
        backend.shutdown()              # its task processes and their fork server
        executor_env.shutdown()
        driver_env.shutdown()
