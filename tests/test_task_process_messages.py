"""A real task process, with the test as its pool, so the order of the messages is exact.

The pool sends a stage's closure to a task process once, with the first of that stage's
tasks it gives the process, and names the stage by its key after that. The process must
keep the closure until the pool says to forget it: not lose it when that first task ends
without running (handed back unstarted), nor drop it early when the pool's "forget_stage"
arrives while an earlier task of the stage still waits behind a running task's request
to the pool. Either way the next task of the stage found no closure and failed (a
TypeError in the task process), which aborts a job in local mode. Found by a stress run of
concurrent jobs, cancellations and killed task processes.

A copy of a cached block that a process cannot write for a sibling (a full disk, say) is
answered "none here", and the process goes on; the error ended the process, and every
block it cached went with it."""
from __future__ import annotations

import pickle
import socket
import time
from types import SimpleNamespace

import pytest

from ember.executor.fork_client import ForkServerClient, task_process_env
from ember.executor.process_pool import KILL_SLOTS
from ember.executor.wire import read_msg, send_msg, send_msgs
from ember.rdd import serialize_stage
from ember.scheduler.task import TaskDescription

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def process(tmp_path):
    """A task process on a socket the test speaks on as its pool: (socket, reader)."""
    forks = ForkServerClient(task_process_env())
    forks.start()
    (tmp_path / "blocks").mkdir()
    kill_file = tmp_path / "kills"
    kill_file.write_bytes(bytes(8 * (KILL_SLOTS + 1)))
    pool_end, child = socket.socketpair()
    send_msg(pool_end, {"executor_id": "driver", "host": "localhost", "slot": 0,
                        "local_dir": str(tmp_path), "block_dir": str(tmp_path / "blocks"),
                        "memory_limit_mb": 512, "storage_budget": 64 << 20,
                        "hand_back_s": 0.05, "kill_file": str(kill_file)})
    forks.fork(child, SimpleNamespace(pid=0))   # the slot, as the pool's
    child.close()
    reader = pool_end.makefile("rb")
    assert read_msg(reader)[0] == "ready"
    try:
        yield pool_end, reader
    finally:
        try:
            send_msg(pool_end, ("stop",))
        except OSError:
            pass
        reader.close()
        pool_end.close()
        forks.stop()


def _task(rdd, tid: int, stage_key: tuple, blob: bytes | None, sent_at: float | None = None
          ) -> tuple:
    td = TaskDescription(tid, 0, "driver", 0, 0, stage_key, b"", b"", rdd.partitions()[0], 0)
    return ("task", tid, stage_key, blob, b"", td.encode(), sent_at)


def _ends(reader, n: int) -> dict[int, tuple]:
    out = {}
    while len(out) < n:
        msg = read_msg(reader)
        assert msg[0] == "done", msg
        out[msg[1]] = (msg[2], pickle.loads(msg[3]) if msg[2] == "FINISHED" else msg[3])
    return out


def test_a_closure_sent_with_a_task_handed_back_unstarted_is_kept(sc, process) -> None:
    sock, reader = process
    rdd = sc.parallelize(range(10), 1)
    blob = serialize_stage("result", rdd, lambda ctx, it: sum(it))
    # written ahead long ago (behind a long task): ended unstarted when reached
    send_msg(sock, _task(rdd, 1, (5, 0), blob, sent_at=time.monotonic() - 10))
    assert _ends(reader, 1)[1][0] == "KILLED"
    send_msg(sock, _task(rdd, 2, (5, 0), None))     # the stage named by its key only
    assert _ends(reader, 1)[2] == ("FINISHED", 45)


def test_a_stage_forgotten_behind_its_waiting_task_is_dropped_after_it(sc, process) -> None:
    from ember.executor import task_process
    sock, reader = process
    rdd = sc.parallelize(range(10), 1)

    def ask_the_pool(ctx, it):          # a request that waits for the pool's answer
        task_process._channel[0].fetch_block(ctx.taskAttemptId(), "rdd_99_0")
        return sum(it)
    asking = serialize_stage("result", rdd, ask_the_pool)
    plain = serialize_stage("result", rdd, lambda ctx, it: sum(it) + 1)
    send_msg(sock, _task(rdd, 2, (7, 0), plain))
    assert _ends(reader, 1)[2] == ("FINISHED", 46)
    send_msg(sock, _task(rdd, 3, (6, 0), asking))
    assert read_msg(reader) == ("fetch_block", 3, "rdd_99_0")
    # while task 3 waits for its answer: another task of stage 7, written ahead, then
    # stage 7 forgotten with the next task written (as the pool writes them)
    send_msgs(sock, [_task(rdd, 4, (7, 0), None, sent_at=time.monotonic()),
                     ("forget_stage", 7), _task(rdd, 5, (8, 0), plain)])
    send_msg(sock, ("block_reply", 3, "rdd_99_0", None))
    assert _ends(reader, 3) == {3: ("FINISHED", 45), 4: ("FINISHED", 46),
                                5: ("FINISHED", 46)}


def test_a_block_copy_that_cannot_be_written_is_answered_none(sc, process, tmp_path) -> None:
    from ember import StorageLevel
    sock, reader = process
    rdd = sc.parallelize(range(10), 1).persist(StorageLevel.MEMORY_ONLY)
    blob = serialize_stage("result", rdd, lambda ctx, it: sum(it))
    send_msg(sock, _task(rdd, 1, (9, 0), blob))
    assert _ends(reader, 1)[1] == ("FINISHED", 45)       # the block is cached in memory
    (tmp_path / "blocks").rmdir()
    (tmp_path / "blocks").write_bytes(b"")               # no copy can be written now
    name = f"rdd_{rdd.id()}_0"
    send_msg(sock, ("export_block", name, 1, 77))
    assert read_msg(reader) == ("block_exported", 1, 77, name, None)
    send_msg(sock, _task(rdd, 2, (9, 0), None))
    assert _ends(reader, 1)[2] == ("FINISHED", 45)       # alive, the block still there
