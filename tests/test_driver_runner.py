"""Tests of cluster-mode drivers on a worker: DriverRunner, the driver wrapper, the Worker's
driver handling.

Pure decisions first (supervision backoff and retry limit, properties, environment, log
reads), then resource fetching (local files, file: URLs with checksums, ember-upload through a
fake master callable, http from a local server), then real driver processes run by a
DriverRunner with a recording report callback against a fake "Worker" endpoint (the wrapper
connects to it), the wrapper's WorkerWatcher, and one in-process Worker with a fake master.
"""
from __future__ import annotations

import functools
import hashlib
import http.server
import os
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any, Callable, Optional

import psutil
import pytest

from ember.deploy.driver_wrapper import has_main_block, split_submit_args, DriverMainError
from ember.deploy.upload_urls import upload_url
from ember.deploy.messages import (AppResourceData, Command, DriverDescription,
                                   DriverLogResponse, DriverState, DriverStateChanged,
                                   FetchAppResource, KillDriver, LaunchDriver,
                                   RegisteredWorker, RegisterWorker, RequestDriverLog,
                                   RequestWorkerState)
from ember.deploy.worker.driver_runner import (
    DRIVER_WRAPPER_CLASS, Decision, DriverLaunchError, DriverRunner, Supervisor,
    SupervisePolicy, build_driver_environment, driver_command, fetch_resource, final_state,
    launch_header, read_driver_exception,
    substitute_driver_variables, supervise_policy)
from ember.deploy.properties import parse_java_opts
from ember.util.units import duration_to_string
from ember.deploy.worker.worker import Worker, driver_log_path, read_log_chunk
from ember.rpc import RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv


def wait_until(pred: Callable[[], Any], timeout: float = 15.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------
# Supervision decisions
# ------------------------------------------------------------------------------------------

def test_final_state_and_durations():
    assert final_state(0, False) == DriverState.FINISHED
    assert final_state(0, True) == DriverState.FINISHED      # Spark: exit 0 wins
    assert final_state(143, True) == DriverState.KILLED
    assert final_state(1, False) == DriverState.FAILED
    assert [duration_to_string(s) for s in (3600, 30, 0.5, 90, 120, 86400)] == \
        ["1h", "30s", "500ms", "90s", "2min", "1d"]


def test_supervisor_backoff_is_sparks():
    s = Supervisor("driver-x", SupervisePolicy(True, max_retries=100))
    waits = [s.after_exit(1, False, 0.1, now=float(i)).wait for i in range(5)]
    assert waits == [1, 2, 4, 8, 16]                        # doubling while runs fail fast
    d = s.after_exit(1, False, run_seconds=5.5, now=10.0)   # a run of more than 5 s resets
    assert d == Decision(True, 1.0)
    assert s.after_exit(1, False, run_seconds=5.0, now=11.0).wait == 2   # exactly 5 s: no
    for code, killed, supervise in ((0, False, True), (1, True, True), (1, False, False)):
        s = Supervisor("d", SupervisePolicy(supervise))
        assert s.after_exit(code, killed, 0.1, 0.0) == Decision(False)


def test_supervisor_retry_limit_in_window():
    s = Supervisor("driver-x", SupervisePolicy(True, max_retries=2, window=60.0))
    assert s.after_exit(1, False, 0.1, now=0.0).relaunch
    assert s.after_exit(1, False, 0.1, now=1.0).relaunch
    d = s.after_exit(7, False, 0.1, now=2.0)
    assert not d.relaunch
    assert d.give_up == ("Driver driver-x was restarted 2 times within 1min "
                         "(spark.driver.supervise.maxRetries=2); giving up. Last exit code: 7")
    # restarts older than the window no longer count
    s = Supervisor("d", SupervisePolicy(True, max_retries=2, window=60.0))
    s.after_exit(1, False, 0.1, now=0.0)
    s.after_exit(1, False, 0.1, now=30.0)
    assert s.after_exit(1, False, 0.1, now=61.0).relaunch
    assert s.after_exit(1, False, 0.1, now=70.0).give_up is not None
    assert Supervisor("d", SupervisePolicy(True, max_retries=0)).after_exit(
        1, False, 0.1, 0.0).give_up.startswith("Driver d was restarted 0 times within 1h")


def test_supervise_policy_sources():
    assert supervise_policy(True, {}, {}) == SupervisePolicy(True, 10, 3600.0)
    worker = {"spark.driver.supervise.maxRetries": "3", "spark.driver.supervise.window": "30s"}
    assert supervise_policy(True, {}, worker) == SupervisePolicy(True, 3, 30.0)
    props = {"spark.driver.supervise.maxRetries": "5", "spark.driver.supervise.window": "500ms"}
    assert supervise_policy(False, props, worker, 0.1) == SupervisePolicy(False, 5, 0.5, 0.1)
    assert supervise_policy(True, {"spark.driver.supervise.window": "90"}, {}).window == 90
    with pytest.raises(ValueError, match="spark.driver.supervise.maxRetries: '-1'"):
        supervise_policy(True, {"spark.driver.supervise.maxRetries": "-1"}, {})
    with pytest.raises(ValueError, match="spark.driver.supervise.window: 'soon'"):
        supervise_policy(True, {"spark.driver.supervise.window": "soon"}, {})


def test_command_properties_and_environment():
    assert parse_java_opts(["-Dspark.a=1", "-Xmx1g", "-Dspark.b=x=y", "-Dflag", "x"]) == \
        {"spark.a": "1", "spark.b": "x=y"}
    args = ["{{WORKER_URL}}", "{{USER_JAR}}", "__main__", "x{{USER_JAR}}"]
    assert substitute_driver_variables(args, worker_url="spark://Worker@h:1",
                                       user_jar="/d/app.py") == \
        ["spark://Worker@h:1", "/d/app.py", "__main__", "x{{USER_JAR}}"]
    desc = DriverDescription("", 256, 1, False, Command(DRIVER_WRAPPER_CLASS, []))
    cmd = driver_command(desc, ["a", "b c"], python="/py")
    assert cmd == ["/py", "-m", "ember.deploy.driver_wrapper", "a", "b c"]
    assert launch_header(cmd) == ('Launch Command: "/py" "-m" "ember.deploy.driver_wrapper" '
                                  '"a" "b c"\n' + "=" * 40 + "\n\n")
    with pytest.raises(DriverLaunchError, match="Invalid driver main class"):
        driver_command(DriverDescription("", 1, 1, False, Command("-c", [])), [])
    env = build_driver_environment(
        {"HOME": "/h", "_SPARK_AUTH_SECRET": "old", "PYTHONHASHSEED": "random"},
        {"MINE": "1"}, {"spark.a": "1", "spark.b": "2"}, stdout_url="o", stderr_url="e")
    assert env["EMBER_SPARK_CONF"] == "spark.a=1\nspark.b=2" and env["MINE"] == "1"
    assert env["SPARK_DRIVER_LOG_URL_STDOUT"] == "o" and env["SPARK_DRIVER_LOG_URL_STDERR"] == "e"
    assert env["PYTHONHASHSEED"] == "0" and "_SPARK_AUTH_SECRET" not in env
    env = build_driver_environment({}, {"PYTHONHASHSEED": "7"}, {}, stdout_url="",
                                   stderr_url="", auth_secret="s3")
    assert env["PYTHONHASHSEED"] == "7" and env["_SPARK_AUTH_SECRET"] == "s3"


def test_driver_log_rules(tmp_path):
    work = tmp_path / "work"
    (work / "driver-1").mkdir(parents=True)
    (work / "driver-1" / "stdout").write_bytes(b"0123456789")
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", work / "driver-link")
    ok = str(work / "driver-1" / "stdout")
    assert driver_log_path(str(work), "driver-1", "stdout", False) == (ok, "")
    assert driver_log_path(str(work), "driver-new", "stderr", True)[0] == \
        str(work / "driver-new" / "stderr")
    for driver_id, log_type, why in (("driver-1", "out", "Log type"),
                                     ("../outside", "stdout", "Invalid driver id"),
                                     ("..", "stdout", "Invalid driver id"),
                                     ("driver-link", "stdout", "Invalid driver id"),
                                     ("a/b", "stdout", "Invalid driver id"),
                                     ("driver-2", "stdout", "Unknown driver")):
        path, error = driver_log_path(str(work), driver_id, log_type, False)
        assert path is None and why in error, (driver_id, error)
    assert read_log_chunk(ok, 0, 4) == (b"0123", 0, 10)
    assert read_log_chunk(ok, -3, 100) == (b"789", 7, 10)
    assert read_log_chunk(ok, -30, 2) == (b"01", 0, 10)
    assert read_log_chunk(ok, 50, 2) == (b"", 10, 10)
    assert read_log_chunk(str(work / "nope"), 0, 2) == (b"", 0, 0)


def test_wrapper_argument_helpers():
    assert split_submit_args(["-c", "spark.a=1", "--conf", "spark.b=x=y", "--conf=spark.c=3",
                              "app.py", "-c", "z"]) == \
        ({"spark.a": "1", "spark.b": "x=y", "spark.c": "3"}, "app.py", ["-c", "z"])
    with pytest.raises(DriverMainError, match="Spark config without '=': spark.a"):
        split_submit_args(["--conf", "spark.a", "app.py"])
    with pytest.raises(DriverMainError, match="no application file"):
        split_submit_args(["--conf", "spark.a=1"])
    assert has_main_block("x = 1\nif __name__ == '__main__':\n    pass\n")
    assert has_main_block("if '__main__' == __name__:\n    pass\n")
    assert not has_main_block("def f():\n    if __name__ == '__main__':\n        pass\n")


# ------------------------------------------------------------------------------------------
# Resources
# ------------------------------------------------------------------------------------------

def test_fetch_local_files(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "app.py").write_bytes(b"print(1)\n")
    (src / "pkg").mkdir()
    (src / "pkg" / "m.py").write_text("x = 1\n")
    dest = tmp_path / "dest"
    dest.mkdir()
    good = sha(b"print(1)\n")
    assert fetch_resource(str(src / "app.py"), str(dest)) == str(dest / "app.py")
    (dest / "app.py").unlink()
    assert fetch_resource(f"file://{src}/app.py#sha256={good}", str(dest)) == str(dest / "app.py")
    assert (dest / "app.py").read_bytes() == b"print(1)\n"
    assert fetch_resource(f"file:{src}/app.py", str(dest)) == str(dest / "app.py")
    assert fetch_resource(f"file://{src}/pkg", str(dest)) == str(dest / "pkg")
    assert (dest / "pkg" / "m.py").read_text() == "x = 1\n"
    (dest / "app.py").unlink()
    with pytest.raises(DriverLaunchError, match=f"Checksum mismatch for app.py from .*: "
                                                f"expected sha256 {'0' * 64}, got {good}"):
        fetch_resource(f"file://{src}/app.py#sha256={'0' * 64}", str(dest))
    assert not (dest / "app.py").exists() and not (dest / "app.py.part").exists()
    with pytest.raises(DriverLaunchError, match=r"Can not find expected jar x.py which should "
                                                f"have been loaded in {dest}"):
        fetch_resource("file:/nonexistent/x.py", str(dest), what="jar")
    for bad, why in (("relative.py", "unsupported URL"),
                     ("foo://nn/x.py", 'No FileSystem for scheme "foo"'),
                     ("file://otherhost/x.py", "must name a local path"),
                     (f"file://{src}/app.py#sha256=abc", "Invalid sha256 fragment"),
                     ("/some/dir/stdout", "reserved")):
        with pytest.raises(DriverLaunchError, match=why):
            fetch_resource(bad, str(dest))


def test_fetch_ember_upload(tmp_path):
    data = b"print('uploaded')\n"
    url = upload_url(sha(data), "my app.py")
    asked: list[str] = []

    def master(u: str) -> AppResourceData:
        asked.append(u)
        return AppResourceData(True, data, sha(data))
    assert fetch_resource(url, str(tmp_path), master) == str(tmp_path / "my app.py")
    assert (tmp_path / "my app.py").read_bytes() == data and asked == [url]

    tampered = upload_url(sha(b"other"), "x.py")
    with pytest.raises(DriverLaunchError, match="Checksum mismatch for x.py"):
        fetch_resource(tampered, str(tmp_path), master)
    assert not (tmp_path / "x.py").exists()
    with pytest.raises(DriverLaunchError, match="the master has no .*: gone"):
        fetch_resource(url, str(tmp_path), lambda u: AppResourceData(False, b"", "", "gone"))

    def unreachable(u: str) -> AppResourceData:
        raise ConnectionError("no master")
    with pytest.raises(DriverLaunchError, match="Can not find expected jar my app.py .*no master"):
        fetch_resource(url, str(tmp_path), unreachable, what="jar")
    with pytest.raises(DriverLaunchError, match="no master to fetch it from"):
        fetch_resource(url, str(tmp_path), None)
    with pytest.raises(DriverLaunchError, match="Not an ember-upload URL"):
        fetch_resource("ember-upload://nothex/x.py", str(tmp_path), master)


@pytest.fixture
def http_root(tmp_path):
    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass
    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Quiet, directory=str(root)))
    t = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    t.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_fetch_http(tmp_path, http_root):
    root, base = http_root
    data = b"x" * 3_000_000
    (root / "big.zip").write_bytes(data)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert fetch_resource(f"{base}/big.zip#sha256={sha(data)}", str(dest)) == str(dest / "big.zip")
    assert (dest / "big.zip").read_bytes() == data
    with pytest.raises(DriverLaunchError, match="Checksum mismatch for big.zip"):
        fetch_resource(f"{base}/big.zip#sha256={sha(b'')}", str(dest))
    with pytest.raises(DriverLaunchError, match=r"Can not find expected jar missing.py .*"
                                                r"download of .* failed: HTTP Error 404"):
        fetch_resource(f"{base}/missing.py", str(dest), what="jar")


# ------------------------------------------------------------------------------------------
# Real drivers: a DriverRunner against a fake "Worker" endpoint
# ------------------------------------------------------------------------------------------

class FakeWorker(RpcEndpoint):
    """What the driver wrapper's WorkerWatcher connects to."""


@pytest.fixture(scope="module")
def worker_env():
    env = RpcEnv.create("sparkWorker", "127.0.0.1", 0, {})
    env.setup_endpoint("Worker", FakeWorker())
    yield env
    env.shutdown()
    env.await_termination(10)


class Reports:
    def __init__(self) -> None:
        self.items: list[DriverStateChanged] = []
        self.done = threading.Event()

    def __call__(self, m: DriverStateChanged) -> None:
        self.items.append(m)
        self.done.set()

    def wait(self, timeout: float = 30.0) -> DriverStateChanged:
        assert self.done.wait(timeout), "no DriverStateChanged"
        assert len(self.items) == 1
        return self.items[0]


def description(jar_url: str, main: str = "__main__", args: tuple = (),
                props: Optional[dict] = None, supervise: bool = False,
                env: Optional[dict] = None) -> DriverDescription:
    opts = [f"-D{k}={v}" for k, v in (props or {}).items()] + ["-Xmx512m"]
    return DriverDescription(jar_url, 256, 1, supervise, Command(
        DRIVER_WRAPPER_CLASS, ["{{WORKER_URL}}", "{{USER_JAR}}", main, *args], env or {}, [],
        [], opts))


@pytest.fixture
def drivers(tmp_path, worker_env):
    """Start DriverRunners in tmp_path/work; every one is killed and joined afterwards."""
    started: list[DriverRunner] = []
    worker_url = f"spark://Worker@{worker_env.address.host_port}"

    def start(driver_id: str, desc: DriverDescription, **kw: Any) -> tuple[DriverRunner, Reports]:
        reports = Reports()
        r = DriverRunner(driver_id, desc, work_dir=str(tmp_path / "work"), worker_url=worker_url,
                         host="127.0.0.1", web_ui_url="http://127.0.0.1:8081", report=reports,
                         attempt=kw.pop("attempt", 1), **kw)
        started.append(r)
        r.start()
        return r, reports
    yield start
    for r in started:
        r.kill()
    for r in started:
        assert r.join(30)


def app(tmp_path, name: str, body: str) -> str:
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_driver_runs_and_finishes(tmp_path, drivers):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper.py").write_text("GREETING = 'hi from py-file'\n")
    (tmp_path / "data.txt").write_text("some data")
    path = app(tmp_path, "hello.py", """
        import os, sys
        import helper
        print("hello from driver", sys.argv[1:], helper.GREETING)
        print("CONF", os.environ["EMBER_SPARK_CONF"].replace("\\n", ";"))
        print("LOG", os.environ["SPARK_DRIVER_LOG_URL_STDERR"], os.environ["PYTHONHASHSEED"])
        print("CWD", os.getcwd(), os.environ.get("MINE"))
        print("DATA", open(os.path.basename("data.txt")).read())
        """)
    runner, reports = drivers("driver-ok", description(
        path, args=("a", "b c"), env={"MINE": "yes"}, props={
            "spark.app.name": "hello", "spark.submit.pyFiles": str(lib / "helper.py"),
            "spark.files": f"file://{tmp_path}/data.txt"}), attempt=3)
    m = reports.wait()
    driver_dir = tmp_path / "work" / "driver-ok"
    out = (driver_dir / "stdout").read_text()
    assert m == DriverStateChanged("driver-ok", DriverState.FINISHED, None, 0, 3), out
    assert "hello from driver ['a', 'b c'] hi from py-file" in out
    conf = dict(kv.split("=", 1) for kv in out.split("CONF ", 1)[1].split("\n")[0].split(";"))
    assert conf["spark.app.name"] == "hello" and conf["spark.submit.deployMode"] == "cluster"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.submit.pyFiles"] == str(driver_dir / "helper.py")
    assert conf["spark.files"] == str(driver_dir / "data.txt")
    assert ("LOG http://127.0.0.1:8081/logPage/?driverId=driver-ok&logType=stderr 0" in out)
    assert f"CWD {driver_dir} yes" in out and "DATA some data" in out
    err = (driver_dir / "stderr").read_text()
    assert err.startswith(f'Launch Command: "{sys.executable}" "-m" '
                          f'"ember.deploy.driver_wrapper" "spark://Worker@')
    assert f'"{driver_dir / "hello.py"}" "__main__" "a" "b c"\n{"=" * 40}\n\n' in err
    assert runner.finished and runner.summary().state == DriverState.FINISHED


def test_driver_failures(tmp_path, drivers):
    exit3 = app(tmp_path, "exit3.py", "import sys\nprint('bye')\nsys.exit(3)\n")
    boom = app(tmp_path, "boom.py", """
        def f():
            raise ValueError("boom: bad input")
        f()
        """)
    _, r3 = drivers("driver-exit3", description(exit3))
    _, rb = drivers("driver-boom", description(boom))
    _, rm = drivers("driver-missing", description("file:/nonexistent/gone.py"))
    _, rx = drivers("../escape", description(exit3))
    assert r3.wait() == DriverStateChanged("driver-exit3", DriverState.FAILED, None, 3, 1)
    m = rb.wait()
    assert m.state == DriverState.FAILED and m.exitStatus == 1
    assert m.exception.startswith("ValueError: boom: bad input\nTraceback (most recent call")
    assert 'boom.py", line 3, in f' in m.exception and "runpy" not in m.exception
    err = (tmp_path / "work" / "driver-boom" / "stderr").read_text()
    assert "Traceback" in err and "ValueError: boom: bad input" in err
    m = rm.wait()
    assert m.state == DriverState.ERROR and m.exitStatus is None
    assert m.exception == (f"Can not find expected jar gone.py which should have been loaded "
                           f"in {tmp_path / 'work' / 'driver-missing'} (/nonexistent/gone.py "
                           "does not exist)")
    m = rx.wait()
    assert m.state == DriverState.ERROR and "invalid driver id" in m.exception
    assert not (tmp_path / "escape").exists()
    assert read_driver_exception(str(tmp_path / "work" / "driver-exit3")) is None


def test_supervised_driver_gives_up(tmp_path, drivers):
    fail = app(tmp_path, "fail.py", "raise RuntimeError('always')\n")
    props = {"spark.driver.supervise.maxRetries": "2", "spark.driver.supervise.window": "1h"}
    _, reports = drivers("driver-sup", description(fail, props=props, supervise=True),
                         initial_backoff=0.05)
    m = reports.wait()
    assert m.state == DriverState.FAILED and m.exitStatus == 1
    assert m.exception.startswith(
        "Driver driver-sup was restarted 2 times within 1h (spark.driver.supervise.maxRetries"
        "=2); giving up. Last exit code: 1\nRuntimeError: always\nTraceback")
    err = (tmp_path / "work" / "driver-sup" / "stderr").read_text()
    assert err.count("Launch Command: ") == 3


def test_kill_running_driver(tmp_path, drivers):
    sleeper = app(tmp_path, "sleep.py", """
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print("sleeping", flush=True)
        time.sleep(600)
        """)
    runner, reports = drivers("driver-kill", description(sleeper, supervise=True))
    out = tmp_path / "work" / "driver-kill" / "stdout"
    wait_until(lambda: out.exists() and "sleeping" in out.read_text(), what="driver started")
    procs = [psutil.Process(runner.pid)] + psutil.Process(runner.pid).children(recursive=True)
    assert len(procs) == 2
    runner.kill()
    m = reports.wait()
    assert m.state == DriverState.KILLED and m.exception is None
    assert m.exitStatus == 143          # the wrapper unwinds on SIGTERM
    for p in procs:
        assert not p.is_running() or p.status() == psutil.STATUS_ZOMBIE
    runner.kill()   # idempotent


def test_module_mains(tmp_path, drivers):
    pkgdir = tmp_path / "appdir"
    (pkgdir / "tool").mkdir(parents=True)
    (pkgdir / "tool" / "__init__.py").write_text("")
    (pkgdir / "tool" / "__main__.py").write_text("import sys\nprint('pkg main', sys.argv[1:])\n")
    (pkgdir / "withmain.py").write_text(
        "import sys\ndef main():\n    print('main()', sys.argv[1:])\n    return 4\n")
    (pkgdir / "block.py").write_text("if __name__ == '__main__':\n    print('block ran')\n")
    (pkgdir / "neither.py").write_text("print('plain script ran')\n")
    sub = app(tmp_path, "sub.py", """
        from ember.conf import SparkConf
        import sys
        print("submit", sys.argv[1:], SparkConf().get("spark.extra"))
        """)
    jar = f"file://{pkgdir}"
    runs = {
        "driver-main": drivers("driver-main", description(jar, "withmain", ("x",)))[1],
        "driver-pkg": drivers("driver-pkg", description(jar, "tool", ("y",)))[1],
        "driver-block": drivers("driver-block", description(jar, "block"))[1],
        "driver-neither": drivers("driver-neither", description(jar, "neither"))[1],
        "driver-submit": drivers("driver-submit", description(
            sub, "org.apache.spark.deploy.SparkSubmit",
            ("--conf", "spark.extra=42", "/elsewhere/sub.py", "z")))[1],
    }
    results = {k: r.wait() for k, r in runs.items()}

    def out(d: str) -> str:
        return (tmp_path / "work" / d / "stdout").read_text()
    assert results["driver-main"].state == DriverState.FAILED      # main() returned 4
    assert results["driver-main"].exitStatus == 4 and "main() ['x']" in out("driver-main")
    assert results["driver-pkg"].state == DriverState.FINISHED and "pkg main ['y']" in out(
        "driver-pkg")
    assert results["driver-block"].state == DriverState.FINISHED
    assert "block ran" in out("driver-block")
    m = results["driver-neither"]      # a plain script: importing it ran it, successfully
    assert m.state == DriverState.FINISHED and m.exception is None, m
    assert "plain script ran" in out("driver-neither")
    assert results["driver-submit"].state == DriverState.FINISHED, results["driver-submit"]
    assert "submit ['z'] 42" in out("driver-submit")


# ------------------------------------------------------------------------------------------
# The wrapper's WorkerWatcher
# ------------------------------------------------------------------------------------------

def test_wrapper_exits_when_worker_goes_away(tmp_path):
    env = RpcEnv.create("sparkWorker", "127.0.0.1", 0, {})
    env.setup_endpoint("Worker", FakeWorker())
    sleeper = app(tmp_path, "sleep.py", "import time\nprint('up', flush=True)\ntime.sleep(600)\n")
    out = tmp_path / "stdout"
    with open(out, "wb") as o, open(tmp_path / "stderr", "wb") as e:
        proc = subprocess.Popen([sys.executable, "-m", "ember.deploy.driver_wrapper",
                                 f"spark://Worker@{env.address.host_port}", sleeper, "__main__"],
                                cwd=tmp_path, stdout=o, stderr=e, start_new_session=True)
    try:
        wait_until(lambda: b"up" in out.read_bytes(), what="app started")
        env.shutdown()
        assert proc.wait(10) == 255
        assert (f"Lost connection to worker rpc endpoint spark://Worker@{env.address.host_port}. "
                "Exiting.") in (tmp_path / "stderr").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        env.shutdown()
    bad = subprocess.run([sys.executable, "-m", "ember.deploy.driver_wrapper", "x"],
                         capture_output=True, text=True)
    assert bad.returncode == 255
    assert bad.stderr.strip() == ("Usage: DriverWrapper <workerUrl> <userJar> "
                                  "<driverMainClass> [options]")
    gone = subprocess.run([sys.executable, "-m", "ember.deploy.driver_wrapper",
                           f"spark://Worker@{env.address.host_port}", sleeper, "__main__"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert gone.returncode == 255 and "up" not in gone.stdout
    assert (f"Could not initialize connection to worker spark://Worker@"
            f"{env.address.host_port}. Exiting.") in gone.stderr


# ------------------------------------------------------------------------------------------
# An in-process Worker with a fake master
# ------------------------------------------------------------------------------------------

class UploadMaster(RpcEndpoint):
    """Registers workers, serves one uploaded resource, records DriverStateChanged."""

    def __init__(self, uploads: dict[str, bytes]) -> None:
        self.uploads = uploads
        self.states: list[DriverStateChanged] = []
        self.registered = threading.Event()

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        if isinstance(msg, RegisterWorker):
            msg.worker.send(RegisteredWorker(self.self_ref, "http://m:8080", msg.masterAddress,
                                             False))
            self.registered.set()
        elif isinstance(msg, DriverStateChanged):
            self.states.append(msg)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, FetchAppResource):
            data = self.uploads.get(msg.url)
            context.reply(AppResourceData(data is not None, data or b"", sha(data or b""),
                                          "" if data is not None else "unknown"))
        else:
            context.reply(True)


def test_worker_runs_drivers(tmp_path):
    data = b"import sys\nprint('uploaded app', sys.argv[1:])\n"
    url = upload_url(sha(data), "up.py")
    master_env = RpcEnv.create("sparkMaster", "127.0.0.1", 0, {})
    master = UploadMaster({url: data})
    master_env.setup_endpoint("Master", master)
    env = RpcEnv.create("sparkWorker", "127.0.0.1", 0, {})
    work = tmp_path / "work"
    work.mkdir()
    worker = Worker(host="127.0.0.1", port=env.address.port, cores=4, memory=2048,
                    master_addresses=[master_env.address], work_dir=str(work),
                    web_ui_url="http://127.0.0.1:8081", fuzz=1.0,
                    conf={"spark.worker.cleanup.enabled": "false",
                          "spark.worker.driverTerminateTimeout": "2s"})
    ref = env.setup_endpoint("Worker", worker)
    try:
        assert master.registered.wait(10)
        wait_until(lambda: worker.master is not None, what="worker registered")
        ref.send(LaunchDriver("driver-up", description(url, args=("q",)), attempt=2))
        sleeper = app(tmp_path, "sleep.py", "import time\nprint('up', flush=True)\n"
                                            "time.sleep(600)\n")
        ref.send(LaunchDriver("driver-long", description(sleeper)))
        ref.send(KillDriver("driver-unknown"))
        wait_until(lambda: master.states, what="driver-up ended")
        assert master.states[0] == DriverStateChanged("driver-up", DriverState.FINISHED, None,
                                                      0, 2)
        log = ref.ask_sync(RequestDriverLog("driver-up", "stdout", 0, 1 << 20), timeout=10)
        assert log.found and log.data == b"uploaded app ['q']\n"
        assert (log.offset, log.nextOffset, log.totalLength) == (0, len(log.data),
                                                                 len(log.data))
        tail = ref.ask_sync(RequestDriverLog("driver-up", "stdout", -3, 10), timeout=10)
        assert tail.data == log.data[-3:] and tail.offset == len(log.data) - 3
        for bad in (RequestDriverLog("../x"), RequestDriverLog("driver-up", "stdin"),
                    RequestDriverLog("driver-none")):
            resp = ref.ask_sync(bad, timeout=10)
            assert isinstance(resp, DriverLogResponse) and not resp.found and resp.message
        state = ref.ask_sync(RequestWorkerState(), timeout=10)
        assert [d.driverId for d in state.drivers] == ["driver-long"]
        assert [d.driverId for d in state.finishedDrivers] == ["driver-up"]
        assert (state.coresUsed, state.memoryUsed) == (1, 256)
        out = work / "driver-long" / "stdout"
        wait_until(lambda: out.exists() and b"up" in out.read_bytes(), what="driver-long up")
        ref.send(LaunchDriver("driver-long", description(sleeper)))   # already running: ignored
        ref.send(KillDriver("driver-long"))
        wait_until(lambda: len(master.states) == 2, what="driver-long killed")
        assert master.states[1].driverId == "driver-long"
        assert master.states[1].state == DriverState.KILLED
        state = ref.ask_sync(RequestWorkerState(), timeout=10)
        assert not state.drivers and (state.coresUsed, state.memoryUsed) == (0, 0)
        assert (work / "driver-long" / "stderr").read_text().count("Launch Command") == 1
    finally:
        env.shutdown()
        env.await_termination(10)
        master_env.shutdown()
        master_env.await_termination(10)
