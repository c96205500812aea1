"""An executor that cannot be created after it registered (its work dir unusable: a full
disk, a file where a directory should be) tells the driver why and exits, as Spark's
exitExecutor does, instead of staying registered with tasks it will never run; its task
process pool stops whatever it had started."""
from __future__ import annotations

import queue

import pytest

from ember.deploy.executor_messages import RegisteredExecutor, RegisterExecutor, RemoveExecutor
from ember.executor.backend import ENDPOINT_NAME, CoarseGrainedExecutorBackend
from ember.executor.process_pool import TaskProcessPool
from ember.rpc import RpcEndpoint, RpcEnv

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
