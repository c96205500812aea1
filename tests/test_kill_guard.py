"""A task kill is an exception raised by the task process's SIGUSR1 handler, so it can land
between any two steps of Ember's own code; the process lives on and keeps state across
tasks. Each test here runs one of those steps with the kill signal raised at its first,
second, third ... point where Python runs a handler (tests/helpers/signal_steps.py, over
every frame the step runs) and checks that the state it leaves is whole:
the byte count of the cached blocks and what the driver is told about them, the channel to
the pool (no message lost or garbled), the map output and shuffle files kept open. Before
ember.util.kill_guard each of these broke at some step."""
from __future__ import annotations

import os
import signal
import socket
import struct
from typing import Any, Callable

import pytest

from ember.errors import TaskKilledException
from ember.executor import task_process
from ember.executor.wire import FrameBuffer, Inbox, send_msg, send_msgs
from ember.shuffle import reader, writer
from ember.storage.block_manager import BlockManager, estimate_size
from ember.storagelevel import StorageLevel
from ember.util.files import unlink_quietly
from ember.util.kill_guard import kills_deferred
from tests.helpers import signal_steps

pytestmark = signal_steps.IGNORED_IN_FINALIZERS

TID = 77


@pytest.fixture
def killable(tmp_path):
    """This process as a task process whose kill file lists task TID."""
    path = tmp_path / "kills"
    path.write_bytes(struct.pack("<q", TID) + bytes(56))
    task_process._kills.open(str(path))
    old = signal.signal(signal.SIGUSR1, task_process._on_kill)
    yield
    signal.signal(signal.SIGUSR1, old)
    task_process._kills.close()
    task_process._running[0] = None


def every_step(setup: Callable[[], Any], op: Callable[[Any], Any],
               check: Callable[[Any, bool], None]) -> int:
    """The kill at each point of op where a handler runs, op run as task TID."""
    def as_task(state: Any) -> None:
        task_process._running[0] = TID
        try:
            op(state)
        finally:
            task_process._running[0] = None
    return signal_steps.every_step(setup, as_task, check, signal.SIGUSR1, TaskKilledException)


def open_fds() -> set[int]:
    """(Not the listing's own descriptor, closed once listed.)"""
    fds = set()
    for n in os.listdir("/proc/self/fd"):
        try:
            os.fstat(int(n))
            fds.add(int(n))
        except OSError:
            pass
    return fds


def test_a_kill_inside_waits_for_the_end(killable):
    task_process._running[0] = TID
    done = []
    with pytest.raises(TaskKilledException):
        with kills_deferred:
            with kills_deferred:
                signal.raise_signal(signal.SIGUSR1)
                done.append(1)
            done.append(2)          # the inner end is not the end
    assert done == [1, 2] and task_process._running[0] is None


def test_the_kill_wins_over_an_error_inside(killable):
    """(Which Ember's code might catch, and the task would run on.)"""
    task_process._running[0] = TID
    with pytest.raises(TaskKilledException) as e:
        with kills_deferred:
            signal.raise_signal(signal.SIGUSR1)
            raise KeyError("x")
    assert isinstance(e.value.__context__, KeyError)
    task_process._running[0] = TID
    with kills_deferred:            # nothing left pending
        pass


def test_a_kill_whose_task_ended_meanwhile_is_not_raised(killable):
    task_process._running[0] = TID
    with kills_deferred:
        signal.raise_signal(signal.SIGUSR1)
        task_process._running[0] = None     # the task ended inside
    task_process._running[0] = TID
    with kills_deferred:
        pass                        # and no second raise later


MEMORY = StorageLevel(False, True, False, False, 1)


def test_cached_blocks_and_their_count_stay_whole(killable, tmp_path):
    """A put that evicts two blocks, a hold and a take: the byte count matches the blocks,
    and the updates sent with the task's end tell the driver exactly which it holds."""
    small, big = [("a", i) for i in range(20)], [("b", i) for i in range(30)]
    budget = 3 * estimate_size(small) + 200

    def setup():
        bm = BlockManager(str(tmp_path), budget)
        for i in range(3):
            bm._put_memory(f"rdd_1_{i}", small, MEMORY)
        bm.hold("rdd_2_0", [1, 2, 3], 100)
        return bm, set(bm.memory), bm.take_updates()

    def op(state):
        bm = state[0]
        bm._put_memory("rdd_1_9", big, MEMORY)      # evicts two
        bm.hold("rdd_2_1", [4, 5], 100)
        bm.take("rdd_2_0")

    def check(state, killed):
        bm, seen, _ = state
        assert bm.memory_used == sum(size for _v, size, _l in bm.memory.values())
        for name, where, _mem, _disk in bm.take_updates():
            if where == "memory":
                seen.add(name)
            else:
                seen.discard(name)
        assert seen == set(bm.memory)
        if not killed:
            assert set(bm.memory) == {"rdd_1_2", "rdd_1_9", "rdd_2_1"}

    assert every_step(setup, op, check) > 100


def test_the_channel_to_the_pool_loses_and_garbles_nothing(killable, tmp_path):
    """A task waiting for a block copy from a sibling, with a task written ahead and a
    control message arriving first: whatever step the kill lands on, the task written
    ahead is kept, the request went out whole, every later message reads intact, and the
    copy is deleted (by the task that read it, by the sweep after the kill, or when its
    late answer is read)."""
    copy = tmp_path / "rdd_1_0.for77-1"
    manager = BlockManager(str(tmp_path), 0)

    def setup():
        pool, proc = socket.socketpair()
        copy.write_bytes(b"x")
        send_msgs(pool, [("task", 90, "ahead"), ("unpersist_broadcast", 5),
                         ("block_reply", TID, "rdd_1_0", str(copy))])
        channel = task_process._PoolChannel(proc, Inbox(proc), lambda msg: True)
        return pool, proc, channel

    def op(state):
        assert state[2].fetch_block(TID, "rdd_1_0") == str(copy)
        copy.unlink()

    def check(state, killed):
        pool, proc, channel = state
        if killed and channel.asked_copy == TID:      # as the serve loop does
            manager.remove_copies_for(TID)
        send_msg(pool, ("end",))
        later = []
        while not later or later[-1] != ("end",):
            later.append(channel.tasks.popleft() if channel.tasks else channel.inbox.read())
            if later[-1][0] == "block_reply":           # the serve loop's control
                unlink_quietly(later[-1][3])
        assert ("task", 90, "ahead") in later and not copy.exists()
        proc.close()
        sent = b""
        while chunk := pool.recv(1 << 16):
            sent += chunk
        frames = FrameBuffer()
        assert frames.feed(sent) in ([], [("fetch_block", TID, "rdd_1_0")])
        assert not frames._buf          # no frame cut short
        pool.close()

    assert every_step(setup, op, check) > 20


def test_map_output_files_kept_open_stay_right(killable, tmp_path):
    """The output file of a shuffle removed meanwhile is replaced by a new one, and the
    oldest of the eight kept is closed to make room: every kept descriptor is open and on
    its file, and none is left open unkept."""
    base = str(tmp_path / "shuffle_1_")

    def kept_fds():
        return {fd for _path, fd in writer._outputs.values()}

    def setup():
        for fd in kept_fds():
            os.close(fd)
        writer._outputs.clear()
        for i in range(writer._MAX_OUTPUT_FILES):
            writer._output_fd(f"{base}{i}")
        os.unlink(f"{writer._outputs[f'{base}0'][0]}.data")
        return open_fds() - kept_fds()   # the others'

    def check(others, killed):
        for path, fd in writer._outputs.values():    # (a removed one is replaced at next use)
            st = os.fstat(fd)
            assert st.st_nlink == 0 or st.st_ino == os.stat(f"{path}.data").st_ino
        assert open_fds() - others <= kept_fds()

    try:
        assert every_step(setup, lambda _: writer._output_fd(f"{base}0"), check) >= 5
    finally:
        for fd in kept_fds():
            os.close(fd)
        writer._outputs.clear()


def test_shuffle_files_a_reducer_keeps_open_stay_right(killable, tmp_path):
    """A segment read opens its map output file and keeps it with the shuffle's index;
    forgetting the shuffle closes them all."""
    path = tmp_path / "shuffle_4_1_1.data"
    path.write_bytes(b"0123456789")

    def setup():
        reader._indexes[4] = ([], {}, {}, [])
        return open_fds()

    def op(before):
        assert reader._read_segment(4, str(path), 2, 6) == b"2345"
        reader.forget_shuffle(4)

    def check(before, killed):
        entry = reader._indexes.get(4)
        kept = set(entry[2].values()) if entry else set()
        for fd in kept:
            os.fstat(fd)
        assert open_fds() - before <= kept
        reader.forget_shuffle(4)

    assert every_step(setup, op, check) > 10
