"""The task-process channel's framing (ember/executor/wire.py) and the pool's result frames:
a pool reads whatever the socket gives it into one reused buffer, so messages must come out
whole and in order however the bytes are cut, and a result frame must carry exactly what
the driver unpickles."""
from __future__ import annotations

import pickle
import random
import socket
import threading
import time

from ember.executor.task_process import HOLD_RESULTS, HOLD_S, report_now, result_frame
from ember.executor.wire import FrameBuffer, Inbox, send_msg, send_msgs
from tests.helpers.switches import context_switches


def _stream(messages: list) -> bytes:
    a, b = socket.socketpair()

    def write() -> None:
        for m in messages:
            send_msg(a, m)
        a.close()
    t = threading.Thread(target=write)
    t.start()
    out = bytearray()
    while True:
        chunk = b.recv(1 << 16)
        if not chunk:
            break
        out += chunk
    t.join()
    b.close()
    return bytes(out)


def test_frames_come_out_whole_and_in_order_however_the_bytes_are_cut() -> None:
    messages = [("done", i, "FINISHED", b"r" * n) for i, n in
                enumerate([0, 1, 3, 70_000, 5, 2_000_000, 17])]
    data = _stream(messages)
    rng = random.Random(7)
    scratch = bytearray(1 << 20)          # the pool's reused receive buffer
    for _ in range(20):
        buf, got, pos = FrameBuffer(), [], 0
        while pos < len(data):
            n = min(rng.choice([1, 2, 3, 4, 5, 100, 65_536, 1 << 20]), len(data) - pos)
            scratch[:n] = data[pos:pos + n]
            with memoryview(scratch) as view:
                got.extend(buf.feed(view[:n]))
            pos += n
        assert got == messages
    assert FrameBuffer().feed(data) == messages        # all at once, from bytes


def test_a_pool_reads_results_through_its_reused_buffer() -> None:
    """Two slots' results interleaved on the pool's one reader thread."""
    a, b = socket.socketpair()
    msgs = [("done", i, "FINISHED", pickle.dumps(i) * (i * 10_000)) for i in range(12)]
    t = threading.Thread(target=lambda: [send_msg(a, m) for m in msgs])
    t.start()
    scratch, buf, got = bytearray(1 << 20), FrameBuffer(), []
    while len(got) < len(msgs):
        n = b.recv_into(scratch)
        with memoryview(scratch) as view:
            got.extend(buf.feed(view[:n]))
    t.join()
    a.close()
    b.close()
    assert got == msgs


def test_a_result_frame_is_what_the_driver_unpickles_or_a_not_serializable_failure() -> None:
    metrics = {"executorRunTime": 1}
    frame = result_frame(("done", 5, "FINISHED", b"payload", {1: 2}, metrics, [("b", 1)]))
    assert frame[:3] == ("done", 5, "FINISHED")
    assert pickle.loads(frame[3]) == (b"payload", {1: 2}, metrics, [("b", 1)])
    frame = result_frame(("done", 6, "FINISHED", b"p", {1: threading.Lock()}, metrics, []))
    assert frame[:3] == ("done", 6, "FAILED")
    payload, accums, got_metrics, blocks = pickle.loads(frame[3])
    assert payload[0] == "NotSerializableResult" and "lock" in payload[1]
    assert payload[3] is False and accums == {} and got_metrics == metrics and blocks == []


def test_an_inbox_says_without_blocking_whether_a_message_is_here() -> None:
    """A task process holds finished results while its next task is already here: poll()
    must answer at once, and what it took in is read in order afterwards."""
    a, b = socket.socketpair()
    inbox = Inbox(b)
    assert not inbox.poll()                         # nothing sent: no wait
    send_msgs(a, [("task", 1), ("task", 2)])
    assert inbox.poll() and inbox.ready[0] == ("task", 1)
    assert inbox.read() == ("task", 1) and inbox.poll() and inbox.read() == ("task", 2)
    assert not inbox.poll()
    big = ("task", 3, b"x" * 2_000_000)             # more than one receive takes
    t = threading.Thread(target=lambda: send_msgs(a, [big, ("stop",)]))
    t.start()
    assert inbox.read() == big and inbox.read() == ("stop",)
    t.join()
    a.close()
    assert not inbox.poll()                         # the peer is gone: still no wait
    try:
        inbox.read()
        raise AssertionError("read after the peer closed")
    except EOFError:
        pass
    b.close()


def test_held_results_go_before_the_tasks_in_hand_run_out() -> None:
    """The pool writes more tasks only as it hears of ends: a process holding the results
    of a queue of 15 reports once as many have ended as still wait, not when it runs dry."""
    now = time.perf_counter()
    assert [report_now(held, 15 - held, now) for held in range(1, 9)] == [False] * 7 + [True]
    assert report_now(HOLD_RESULTS, 40, now)
    assert report_now(1, 40, now - 2 * HOLD_S)
    assert not report_now(1, 40, now)


def _asleep(tid: int) -> bool:
    with open(f"/proc/self/task/{tid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "S"


def test_an_idle_inbox_is_not_woken_when_the_pool_reads_what_its_process_sent() -> None:
    """A process waiting for its next task must sleep through the pool reading its results:
    a blocking recv would be woken by the freed send buffer (no filter on that wait queue),
    an extra wake-up per reported batch; a wait in poll(POLLIN) is not."""
    pool_end, process_end = socket.socketpair()
    inbox = Inbox(process_end)
    got: list = []
    tid: list = []

    def process() -> None:
        tid.append(threading.get_native_id())
        send_msg(process_end, ("done", 1, "FINISHED", b"r" * 100_000))
        got.append(inbox.read())
    t = threading.Thread(target=process)
    t.start()
    deadline = time.monotonic() + 10
    while not (tid and _asleep(tid[0])) and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(0.05)
    before = context_switches(tid[0])
    received = 0
    while received < 100_000:                      # the pool reads the result, in pieces
        received += len(pool_end.recv(4096))
        time.sleep(0.002)
    time.sleep(0.05)
    assert context_switches(tid[0]) == before, "woken without a message"
    send_msg(pool_end, ("task", 2))
    t.join(10)
    assert got == [("task", 2)]
    pool_end.close()
    process_end.close()
