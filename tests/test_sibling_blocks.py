"""A memory block copied from one task process to another of the same executor (a task
taken from a busy sibling's backlog asks the pool, the pool asks the other processes, the
holder writes a copy between two of its tasks). Each copy is a file of its own, named for
the asking task and the writing process: the pool deletes the copies nobody waits for any
more (a second holder's, or one asked for by a task killed while it waited), and before,
such a copy had the same name as the one the next task was reading, so that task failed
with FileNotFoundError (seen in examples/transitive_closure.py, whose last count reads
65,534 cached partitions). The pool runs on real socket pairs; the task processes are
threads that pass on what they read and send what the test tells them to."""
from __future__ import annotations

import os
import queue
import threading
import time

import pytest

from ember.executor.process_pool import TaskProcessPool
from ember.executor.wire import read_msg, send_msg
from ember.storage.block_manager import BlockManager, read_batches

BLOCK = "rdd_3_5"


class ScriptedProcess:
    """Hands every message the pool sends (after the slot's conf) to `inbox`."""

    def __init__(self, sock) -> None:
        self.sock = sock
        self.inbox: "queue.Queue[tuple]" = queue.Queue()
        self.f = sock.makefile("rb")
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            read_msg(self.f)
            while True:
                self.inbox.put(read_msg(self.f))
        except (OSError, EOFError, ValueError):
            pass

    def next(self, kind: str, timeout: float = 5.0) -> tuple:
        while True:
            msg = self.inbox.get(timeout=timeout)
            if msg[0] == kind:
                return msg

    def send(self, *msg: object) -> None:
        send_msg(self.sock, msg)


class ScriptedForks:
    started = True

    def __init__(self) -> None:
        self.processes: list[ScriptedProcess] = []

    def fork(self, child, slot) -> None:
        self.processes.append(ScriptedProcess(child))

    def exit_code(self, pid: int, timeout: float = 0.0) -> int:
        return 1

    def stop(self) -> None:
        pass


@pytest.fixture()
def pool_of(tmp_path):
    pools = []

    def make(slots: int) -> tuple[TaskProcessPool, list[ScriptedProcess]]:
        forks = ScriptedForks()
        p = TaskProcessPool(slots, {"local_dir": str(tmp_path)}, lambda *end: None,
                            forks=forks, raw_results=True)
        p.start()
        pools.append(p)
        return p, forks.processes
    yield make
    for p in pools:
        p.stop()


def holder(tmp_path) -> BlockManager:
    bm = BlockManager(str(tmp_path / "blocks"), 1 << 20)
    os.makedirs(bm.block_dir, exist_ok=True)
    bm.memory[BLOCK] = ([1, 2, 3], 0, None)
    return bm


def test_a_copy_asked_for_by_a_killed_task_is_not_the_file_the_next_task_reads(pool_of,
                                                                              tmp_path):
    pool, (asker, other) = pool_of(2)
    pool.launch_all([(0, 7, (1, 0), b"blob", b"meta", b"task 7")])
    asker.next("task")
    asker.send("fetch_block", 6, BLOCK)     # task 6 asked, then was killed while it waited
    asker.send("fetch_block", 7, BLOCK)     # task 7, now running there, asks the same
    bm = holder(tmp_path)
    for tid in (6, 7):                      # the holder answers both, in order
        msg = other.next("export_block")
        assert msg[1:] == (BLOCK, 0, tid)
        other.send("block_exported", 0, tid, BLOCK, bm.export_for_sibling(BLOCK, tid))
    reply = asker.next("block_reply")
    assert reply[:3] == ("block_reply", 7, BLOCK)
    assert list(read_batches(reply[3])) == [1, 2, 3]
    assert os.listdir(bm.block_dir) == [os.path.basename(reply[3])], "task 6's copy is gone"
    assert asker.inbox.empty()


def test_a_second_holders_copy_is_deleted_and_the_first_one_kept(pool_of, tmp_path) -> None:
    pool, (asker, first, second) = pool_of(3)
    pool.launch_all([(0, 7, (1, 0), b"blob", b"meta", b"task 7")])
    asker.next("task")
    asker.send("fetch_block", 7, BLOCK)
    paths = []
    for proc, name in ((first, "a"), (second, "b")):
        assert proc.next("export_block")[1:] == (BLOCK, 0, 7)
        paths.append(tmp_path / name)
        paths[-1].write_bytes(b"copy")
        proc.send("block_exported", 0, 7, BLOCK, str(paths[-1]))
    assert asker.next("block_reply") == ("block_reply", 7, BLOCK, str(paths[0]))
    deadline = time.monotonic() + 5         # the pool reads the second answer after replying
    while paths[1].exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert paths[0].exists() and not paths[1].exists()


def test_no_holder_answers_none_once_all_said_no(pool_of) -> None:
    pool, (asker, first, second) = pool_of(3)
    pool.launch_all([(0, 7, (1, 0), b"blob", b"meta", b"task 7")])
    asker.next("task")
    asker.send("fetch_block", 7, BLOCK)
    first.next("export_block")
    first.send("block_exported", 0, 7, BLOCK, None)
    second.next("export_block")
    with pytest.raises(queue.Empty):
        asker.next("block_reply", timeout=0.3)  # one answer is still to come
    second.send("block_exported", 0, 7, BLOCK, None)
    assert asker.next("block_reply") == ("block_reply", 7, BLOCK, None)


def test_a_copy_is_named_for_the_task_the_process_and_the_request(tmp_path) -> None:
    """A task run again under its id (its process died; the replacement runs it) asks
    again; its second copy must not share a name with the first, which the pool deletes
    when it comes late (a stress run's task failed to open the second so)."""
    bm = holder(tmp_path)
    a, b = bm.export_for_sibling(BLOCK, 6), bm.export_for_sibling(BLOCK, 7)
    assert a != b and f".for6-{os.getpid()}-" in a and os.path.exists(b)
    again = bm.export_for_sibling(BLOCK, 6)
    os.unlink(a)
    assert again != a and os.path.exists(again)
    assert bm.export_for_sibling("rdd_9_9", 6) is None
