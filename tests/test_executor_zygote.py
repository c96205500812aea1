"""The worker's executor zygote (ember.deploy.worker.executor_zygote) under the real
ExecutorRunner, with real processes: a forked executor gets what a spawned one gets (argv,
cwd, environment, log files, its own session and process group), its exit status, a signal
death and a kill are reported exactly as a spawned one's, commands that do not fit it are
spawned, a dead one is replaced a few times and then executors are spawned, while those
it forked are still watched.

The executors are `tests.helpers.executor_sleeper` processes (see test_worker.py); the
zygote is given that module as its main instead of ember.executor.backend.
"""
from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Any, Callable

import psutil
import pytest

from ember.deploy.messages import (ApplicationDescription, Command, ExecutorState,
                                   ExecutorStateChanged, ResourceProfile)
from ember.deploy.worker.executor_runner import ExecutorRunner
from ember.deploy.worker.executor_zygote import MAX_RESTARTS, ExecutorZygote

SLEEPER = "tests.helpers.executor_sleeper"
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ARGS = ["--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1", "--executor-id",
        "{{EXECUTOR_ID}}", "--app-id", "{{APP_ID}}", "x{{APP_ID}}"]


def wait_until(pred: Callable[[], Any], timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def zygote():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    z = ExecutorZygote(env, main=SLEEPER).start()
    assert z.alive
    yield z
    z.stop()


def launch(tmp_path, zygote: ExecutorZygote | None, exec_id: int = 0,
           terminate_timeout: float = 1.0, main: str = SLEEPER,
           **env: str) -> tuple[ExecutorRunner, list, str]:
    """An ExecutorRunner of the sleeper; its reports and the path of its info file."""
    info = str(tmp_path / f"info{exec_id}.json")
    hash_seed = zygote.env["PYTHONHASHSEED"] if zygote is not None else "0"
    command_env = {"PYTHONPATH": REPO_ROOT, "PYTHONHASHSEED": hash_seed,
                   "EMBER_SLEEPER_INFO": info, "EMBER_SLEEPER_MARK": "app-env", **env}
    app = ApplicationDescription("zygote", None, Command(main, ARGS, command_env), "",
                                 ResourceProfile.of(cores=1, memoryMb=256), user="tester")
    reports: list[ExecutorStateChanged] = []
    runner = ExecutorRunner(
        "app-z", exec_id, app, 1, 256, worker_id="worker-z", host="127.0.0.1",
        worker_url="spark://Worker@127.0.0.1:1", web_ui_url="http://127.0.0.1:1",
        executor_dir=str(tmp_path / "work" / str(exec_id)),
        app_local_dirs=[str(tmp_path / "local")], report=reports.append,
        terminate_timeout=terminate_timeout, zygote=zygote)
    runner.start()
    return runner, reports, info


def read_info(path: str) -> dict:
    wait_until(lambda: os.path.exists(path), what=path)
    with open(path) as f:
        return json.load(f)


def finished(runner: ExecutorRunner, reports: list) -> tuple:
    assert runner.join(30), "the runner never reported a final state"
    return tuple((r.state, r.message, r.exitStatus) for r in reports)


def test_forked_executor_gets_what_a_spawned_one_gets(tmp_path, zygote) -> None:
    seen = {}
    for name, z in (("forked", zygote), ("spawned", None)):
        base = tmp_path / name
        base.mkdir()
        runner, reports, info_path = launch(base, z, EMBER_SLEEPER_EXIT_AFTER="1.0",
                                            EMBER_SLEEPER_EXIT_CODE="3")
        info = read_info(info_path)
        pid = info["pid"]
        assert runner.pid == pid
        parent = psutil.Process(pid).ppid()
        assert parent == (zygote.pid if z is not None else os.getpid())
        assert os.getpgid(pid) == pid and os.getsid(pid) == pid    # own session and group
        assert " ".join(psutil.Process(pid).cmdline()).startswith(   # what ps shows
            f"{sys.executable} -m {SLEEPER} --driver-url spark://")
        assert finished(runner, reports) == (
            (ExecutorState.RUNNING, None, None),
            (ExecutorState.EXITED, "Command exited with code 3", 3))
        exec_dir = base / "work" / "0"
        assert os.path.realpath(info["cwd"]) == os.path.realpath(exec_dir)
        stderr = (exec_dir / "stderr").read_text()
        assert stderr.startswith(f'Spark Executor Command: "{sys.executable}" "-m" '
                                 f'"{SLEEPER}" "--driver-url"')
        assert "sleeper stderr line" in stderr and "RuntimeWarning" not in stderr
        assert "sleeper started" in (exec_dir / "stdout").read_text()
        info["cwd"] = os.path.relpath(info["cwd"], base)
        info["env"]["SPARK_EXECUTOR_DIRS"] = os.path.relpath(info["env"]["SPARK_EXECUTOR_DIRS"],
                                                             base)
        seen[name] = {k: info[k] for k in ("argv", "cwd", "env")}
    assert seen["forked"] == seen["spawned"]
    assert seen["forked"]["argv"] == ["--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1",
                                      "--executor-id", "0", "--app-id", "app-z", "x{{APP_ID}}"]
    assert seen["forked"]["env"]["EMBER_SLEEPER_MARK"] == "app-env"


def gone(p: psutil.Process) -> bool:
    """Dead or a zombie; a zombie may be reaped between the two questions."""
    try:
        return not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_kill_takes_down_a_forked_executors_tree(tmp_path, zygote) -> None:
    runner, reports, info_path = launch(tmp_path, zygote, EMBER_SLEEPER_CHILDREN="2",
                                        EMBER_SLEEPER_IGNORE_TERM="1")
    info = read_info(info_path)
    assert psutil.Process(info["pid"]).ppid() == zygote.pid
    tree = wait_until(lambda: (lambda t: t if len(t) >= 5 else None)(
        [psutil.Process(info["pid"])] + psutil.Process(info["pid"]).children(recursive=True)),
        what="sleeper + 2 children + 2 grandchildren")
    runner.kill()
    # SIGTERM ignored: SIGKILL after the 1 s grace period, reported as a spawned one's is
    assert finished(runner, reports)[-1] == (ExecutorState.KILLED, None, 128 + signal.SIGKILL)
    # the group's SIGKILL is sent when the executor is reaped; its children may take a
    # moment more to finish dying
    for p in tree:
        wait_until(lambda: gone(p), timeout=5.0, what=f"process {p.pid} gone")


def test_a_signal_death_is_reported_as_a_shell_would(tmp_path, zygote) -> None:
    runner, reports, info_path = launch(tmp_path, zygote)
    pid = read_info(info_path)["pid"]
    os.kill(pid, signal.SIGTERM)
    assert finished(runner, reports)[-1] == (ExecutorState.EXITED,
                                             "Command exited with code 143", 143)


def test_commands_that_do_not_fit_are_spawned(tmp_path, zygote) -> None:
    # an interpreter setting the zygote was not started with
    runner, reports, info_path = launch(tmp_path / "a", zygote, PYTHONOPTIMIZE="1")
    assert psutil.Process(read_info(info_path)["pid"]).ppid() == os.getpid()
    runner.kill()
    assert finished(runner, reports)[-1][0] == ExecutorState.KILLED
    # a PYTHONPATH that would find one of the zygote's modules elsewhere
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "pickle.py").write_text("# not the standard library's\n")
    runner, reports, info_path = launch(tmp_path / "b", zygote,
                                        PYTHONPATH=os.pathsep.join([str(shadow), REPO_ROOT]))
    assert psutil.Process(read_info(info_path)["pid"]).ppid() == os.getpid()
    runner.kill()
    assert finished(runner, reports)[-1][0] == ExecutorState.KILLED
    assert zygote.alive


def test_a_dead_zygote_is_replaced_a_few_times_then_executors_are_spawned(tmp_path,
                                                                          zygote) -> None:
    first, first_reports, first_info = launch(tmp_path / "a", zygote)
    pid = read_info(first_info)["pid"]
    assert psutil.Process(pid).ppid() == zygote.pid
    for n in range(1, MAX_RESTARTS + 2):
        dead = zygote.pid
        os.kill(dead, signal.SIGKILL)
        wait_until(lambda: not zygote.alive, what="the worker to see the zygote die")
        runner, reports, info = launch(tmp_path / f"b{n}", zygote, exec_id=n,
                                       EMBER_SLEEPER_EXIT_AFTER="0.2",
                                       EMBER_SLEEPER_EXIT_CODE="4")
        parent = psutil.Process(read_info(info)["pid"]).ppid()
        if n <= MAX_RESTARTS:        # forked by a new zygote
            assert zygote.alive and zygote.pid != dead and parent == zygote.pid
        else:                        # given up: spawned by the runner
            assert not zygote.alive and parent == os.getpid()
        assert finished(runner, reports)[-1] == (ExecutorState.EXITED,
                                                 "Command exited with code 4", 4)
    # the orphan still runs and is still killed and watched, without a status to report
    assert psutil.Process(pid).is_running()
    first.kill()
    assert finished(first, first_reports)[-1] == (ExecutorState.KILLED, None, None)
    wait_until(lambda: not psutil.pid_exists(pid) or
               psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, what="the orphan to go")


def test_a_zygote_that_stops_answering_is_killed_and_the_next_executor_starts_a_new_one(
        tmp_path) -> None:
    """A stopped (or hung) zygote made every executor on its worker wait out the answer
    timeout, for the worker's life; now it is killed after one such wait."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    z = ExecutorZygote(env, main=SLEEPER, answer_timeout=1.0).start()
    stopped = z.pid
    try:
        os.kill(stopped, signal.SIGSTOP)
        runner, reports, info = launch(tmp_path / "a", z, EMBER_SLEEPER_EXIT_AFTER="0.2")
        assert psutil.Process(read_info(info)["pid"]).ppid() == os.getpid()   # spawned
        assert finished(runner, reports)[-1][0] == ExecutorState.EXITED
        wait_until(lambda: not psutil.pid_exists(stopped)
                   or psutil.Process(stopped).status() == psutil.STATUS_ZOMBIE,
                   what="the silent zygote to be killed")
        runner, reports, info = launch(tmp_path / "b", z, exec_id=1,
                                       EMBER_SLEEPER_EXIT_AFTER="0.2")
        assert psutil.Process(read_info(info)["pid"]).ppid() == z.pid != stopped
        assert z.restarts == 1
        assert finished(runner, reports)[-1][0] == ExecutorState.EXITED
    finally:
        if psutil.pid_exists(stopped):
            os.kill(stopped, signal.SIGCONT)
        z.stop()


def test_a_kill_that_overtakes_the_fork_kills_the_fork(tmp_path) -> None:
    """kill() returns at once while the zygote is still busy (here: importing a slow main
    module), and the executor it forks afterwards is killed: KILLED, never RUNNING."""
    slow = "tests.helpers.slow_sleeper"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO_ROOT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    z = ExecutorZygote(env, main=slow).start()
    try:
        runner, reports, info_path = launch(tmp_path, z, main=slow)
        stderr = tmp_path / "work" / "0" / "stderr"
        wait_until(lambda: stderr.exists() and stderr.stat().st_size > 0,
                   what="the runner to ask the zygote")
        time.sleep(0.2)       # the request is out; the zygote imports for ~2 s more
        t0 = time.monotonic()
        runner.kill()
        assert time.monotonic() - t0 < 0.5
        final = finished(runner, reports)
        assert [r[0] for r in final] == [ExecutorState.KILLED]
        assert final[0][2] in (128 + signal.SIGTERM, 128 + signal.SIGKILL)
        assert type(runner._process).__name__ == "ZygoteChild"     # it was forked
        wait_until(lambda: psutil.Process(z.pid).children() == [],
                   what="the fork to be reaped")
    finally:
        z.stop()
