"""Local mode's fork server going away: it is started again for the next task process, and
a request it cannot answer ends that process's socket, so no job waits for ever."""
from __future__ import annotations

import os
import signal
import socket
import time
from types import SimpleNamespace

import psutil
import pytest

from ember.executor.fork_client import ForkServerClient, task_process_env

pytestmark = pytest.mark.timeout(120)


def test_a_killed_fork_server_is_started_again_and_jobs_still_run(fresh_sc):
    sc = fresh_sc("local[2]")
    assert sc.parallelize(range(10), 2).sum() == 45
    me = psutil.Process()
    fork_servers = [p for p in me.children() if "ember.executor.forkserver" in p.cmdline()]
    assert len(fork_servers) == 1
    for p in fork_servers[0].children():      # the task processes, then their fork server
        p.kill()
    fork_servers[0].kill()
    fork_servers[0].wait(10)
    assert sc.parallelize(range(10), 2).sum() == 45
    again = [p for p in me.children() if "ember.executor.forkserver" in p.cmdline()]
    assert len(again) == 1 and again[0].pid != fork_servers[0].pid


def test_a_task_process_is_not_ended_by_a_kill_signal_before_it_can_handle_it(fresh_sc):
    """The pool may send SIGUSR1 the moment it hears a fresh process's pid, before the
    process has installed its handler: the fork server ignores it, and so do its children
    until then, instead of ending as a crash."""
    sc = fresh_sc("local[2]")
    assert sc.parallelize(range(10), 2).sum() == 45
    server = next(p for p in psutil.Process().children()
                  if "ember.executor.forkserver" in p.cmdline())
    with open(f"/proc/{server.pid}/status") as f:
        ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
    assert ignored & (1 << (signal.SIGUSR1 - 1))
    server.send_signal(signal.SIGUSR1)
    for p in server.children():         # fresh processes come from the same server
        p.kill()
    assert sc.parallelize(range(10), 2).sum() == 45
    assert server.is_running() and server.status() != psutil.STATUS_ZOMBIE


def test_a_fork_server_that_cannot_start_ends_each_request_at_once():
    env = dict(task_process_env(), PYTHONHOME=os.path.join(os.sep, "nonexistent"))
    client = ForkServerClient(env)      # its Python dies before it runs a line
    client.start()
    try:
        for _ in range(3):              # the first request, and each after a restart
            parent, child = socket.socketpair()
            parent.settimeout(10)
            client.fork(child, object())
            assert parent.recv(1) == b""     # no process will come: the slot sees an end
            parent.close()
    finally:
        client.stop()


def test_a_fork_server_that_stops_answering_is_killed_and_started_again():
    """A stopped (or hung) fork server left the tasks waiting for a slot's new process
    waiting for ever; a request unanswered for answer_timeout now kills it."""
    client = ForkServerClient(task_process_env(), answer_timeout=1.0)
    client.start()
    stopped = psutil.Process(client._proc.pid)
    try:
        stopped.suspend()
        parent, child = socket.socketpair()
        parent.settimeout(20)
        client.fork(child, SimpleNamespace(pid=None))
        assert parent.recv(1) == b""     # the request ends: its slot sees its process end
        parent.close()
        stopped.wait(20)
        parent, child = socket.socketpair()
        slot = SimpleNamespace(pid=None)
        client.fork(child, slot)         # a new fork server answers
        deadline = time.monotonic() + 20
        while slot.pid is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert slot.pid is not None and psutil.Process(slot.pid).ppid() == client._proc.pid
        parent.close()
    finally:
        if stopped.is_running():
            stopped.resume()
        client.stop()
