"""Tests of the standalone worker (ember.deploy.worker): pure helpers, then a real worker
process against a fake master (an RpcEnv with a "Master" endpoint in this process), then a few
in-process workers for master fail-over paths, and the command line.

Executors are `tests.helpers.executor_sleeper` processes: launched exactly like real
executors (placeholders, environment, stdout/stderr files), but needing no driver.
"""
from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from typing import Any, Callable, Optional

import psutil
import pytest

from ember.deploy.messages import (
    ApplicationDescription, ApplicationFinished, Command, DriverDescription, DriverState,
    DriverStateChanged, ExecutorState, ExecutorStateChanged, Heartbeat, HeartbeatResponse,
    KillExecutor,
    LaunchDriver, LaunchExecutor, MasterChanged, MasterInStandby, ReconnectWorker,
    RegisteredWorker, RegisterWorker, RegisterWorkerFailed, ResourceProfile,
    WorkerLatestState, WorkerSchedulerStateResponse,
)
from ember.deploy.worker import cli as worker_cli
from ember.deploy.worker.config import WorkerConf
from ember.deploy.worker.executor_runner import (build_command, build_environment,
                                                 command_header, substitute_variables,
                                                 terminate_process_tree)
from ember.deploy.log_pages import read_log
from ember.rpc.bind import candidate_ports
from ember.util.units import megabytes_to_string
from ember.deploy.worker.worker import (RetryAction, WorkerDaemon, WorkerSettings,
                                        generate_worker_id, parse_standalone_master_urls, registration_fuzz,
                                        registration_intervals, registration_timeline,
                                        reregister_action, stale_app_dirs, trim_finished)
from ember.rpc import RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv

SLEEPER = "tests.helpers.executor_sleeper"
# the sleeper is a test module: its executors find it from the repository root
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAST_CONF = ["--conf", "spark.worker.timeout=1",
             "--conf", "spark.ember.worker.executorTerminateTimeout=1",
             "--conf", "spark.rpc.askTimeout=5s"]
WORKER_JSON_KEYS = ["id", "masterurl", "masterwebuiurl", "cores", "coresused", "memory",
                    "memoryused", "resources", "resourcesused", "executors",
                    "finishedexecutors"]


def wait_until(pred: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.02)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------------------------------
# Pure helpers
# ------------------------------------------------------------------------------------------

def test_retry_schedule_matches_spark_defaults():
    retries, give_up = registration_timeline(10, 60)
    assert retries == [10, 20, 30, 40, 50, 60] + [60 + 60 * i for i in range(1, 11)]
    assert len(retries) == 16 and give_up == 720 == 6 * 10 + 11 * 60
    # custom counts: 2 short retries, 3 in total
    assert registration_timeline(1, 5, 2, 3) == ([1, 2, 7], 12)
    # initial > max: never prolonged
    assert registration_timeline(1, 5, 9, 3) == ([1, 2, 3], 4)


def test_reregister_action_table():
    acts = [reregister_action(n, False) for n in range(1, 18)]
    assert acts[:5] == [RetryAction.RETRY] * 5
    assert acts[5] == RetryAction.RETRY_AND_PROLONG           # attempt 6
    assert acts[6:16] == [RetryAction.RETRY] * 10             # attempts 7..16
    assert acts[16] == RetryAction.GIVE_UP                    # attempt 17
    assert reregister_action(3, True) == RetryAction.CANCEL
    assert reregister_action(2, False, initial_retries=2, max_retries=2) == \
        RetryAction.RETRY_AND_PROLONG


def test_registration_intervals_and_fuzz():
    import random
    for seed in range(50):
        f = registration_fuzz(random.Random(seed))
        assert 0.5 <= f < 1.5
        initial, prolonged = registration_intervals(f)
        assert 5 <= initial <= 15 and 30 <= prolonged <= 90
    assert registration_intervals(1.0) == (10, 60)
    assert registration_intervals(1.05) == (11, 63)     # math.round: half up
    assert registration_intervals(1.0, 0.01) == pytest.approx((0.1, 0.6))


def test_worker_id_and_master_urls():
    t = time.mktime((2023, 11, 9, 18, 30, 42, 0, 0, -1))
    assert generate_worker_id("10.0.0.1", 39729, t) == "worker-20231109183042-10.0.0.1-39729"
    assert parse_standalone_master_urls("spark://h1:1,h2:2") == [RpcAddress("h1", 1),
                                                                 RpcAddress("h2", 2)]
    for bad in ("h1:7077", "http://h:1", "spark://h", "spark://h:1/x", "spark://h:1,h2"):
        with pytest.raises(ValueError, match="Invalid master URL"):
            parse_standalone_master_urls(bad)
    assert megabytes_to_string(1024) == "1024.0 MiB"
    assert megabytes_to_string(2048) == "2.0 GiB"
    assert megabytes_to_string(1) == "1024.0 KiB"


def test_substitute_variables_whole_argument_only():
    args = ["--executor-id", "{{EXECUTOR_ID}}", "--hostname", "{{HOSTNAME}}", "--cores",
            "{{CORES}}", "--app-id", "{{APP_ID}}", "--worker-url", "{{WORKER_URL}}",
            "--resourceProfileId", "{{RESOURCE_PROFILE_ID}}", "x{{APP_ID}}", "{{ APP_ID }}",
            "{{USER_JAR}}"]
    out = substitute_variables(args, worker_url="spark://Worker@h:1", exec_id=7, host="h",
                               cores=3, app_id="app-1", rp_id=2)
    assert out == ["--executor-id", "7", "--hostname", "h", "--cores", "3", "--app-id",
                   "app-1", "--worker-url", "spark://Worker@h:1", "--resourceProfileId", "2",
                   "x{{APP_ID}}", "{{ APP_ID }}", "{{USER_JAR}}"]


def test_command_header_and_environment():
    cmd = build_command(Command("ember.executor.backend", []), ["--a", "b c"], python="/py")
    assert cmd == ["/py", "-m", "ember.executor.backend", "--a", "b c"]
    assert command_header(cmd) == ('Spark Executor Command: "/py" "-m" '
                                   '"ember.executor.backend" "--a" "b c"\n' + "=" * 40 + "\n\n")
    for bad in ("-c", "os; rm", "../x", ""):
        with pytest.raises(ValueError, match="Invalid executor main class"):
            build_command(Command(bad, []), [])
    env = build_environment({"A": "1", "B": "1", "_SPARK_AUTH_SECRET": "old"},
                            {"B": "2", "SPARK_EXECUTOR_DIRS": "app"},
                            executor_dirs=["/d1", "/d2"], stdout_url="o", stderr_url="e")
    assert env["A"] == "1" and env["B"] == "2"
    assert env["SPARK_EXECUTOR_DIRS"] == os.pathsep.join(["/d1", "/d2"])
    assert env["SPARK_LOG_URL_STDOUT"] == "o" and env["SPARK_LOG_URL_STDERR"] == "e"
    assert "_SPARK_AUTH_SECRET" not in env
    assert build_environment({}, {}, executor_dirs=[], stdout_url="", stderr_url="",
                             auth_secret="s")["_SPARK_AUTH_SECRET"] == "s"


def test_trim_finished_and_stale_dirs(tmp_path):
    d = OrderedDict((str(i), i) for i in range(1001))
    trim_finished(d, 1000)
    assert len(d) == 901 and next(iter(d)) == "100"
    d2 = OrderedDict((str(i), i) for i in range(3))
    trim_finished(d2, 2)
    assert list(d2) == ["1", "2"]

    now = time.time()
    for name in ("app-old", "app-new", "app-running", "app-old-nested"):
        (tmp_path / name / "0").mkdir(parents=True)
        (tmp_path / name / "0" / "stdout").write_text("x")
    old = now - 1000
    for name in ("app-old", "app-running", "app-old-nested"):
        for p in (tmp_path / name / "0" / "stdout", tmp_path / name / "0"):
            os.utime(p, (old, old))
    (tmp_path / "app-old-nested" / "0" / "deep").mkdir()   # recent, one level down
    os.utime(tmp_path / "app-old-nested" / "0", (old, old))
    (tmp_path / "a-file").write_text("not a dir")
    assert stale_app_dirs(str(tmp_path), {"app-running"}, ttl=100, now=now) == \
        [str(tmp_path / "app-old")]
    with pytest.raises(OSError, match="ERROR: Failed to list files in"):
        stale_app_dirs(str(tmp_path / "missing"), set(), 1)


def test_read_log_rules(tmp_path):
    work = tmp_path / "work"
    (work / "app" / "0").mkdir(parents=True)
    (work / "app" / "0" / "stdout").write_bytes(b"0123456789")
    d = str(work / "app" / "0") + "/"
    assert read_log(str(work), d, "bogus")[0] == \
        "Error: Log type must be one of stderr, stdout, out"
    outside = str(work / "app" / ".." / ".." / "etc") + "/"
    assert read_log(str(work), outside, "stdout")[0] == f"Error: invalid log directory {outside}"
    assert read_log(str(work), d, "stdout") == ("0123456789", 0, 10, 10)
    assert read_log(str(work), d, "stdout", byte_length=4) == ("6789", 6, 10, 10)
    assert read_log(str(work), d, "stdout", offset=2, byte_length=3) == ("234", 2, 5, 10)
    assert read_log(str(work), d, "stdout", offset=50) == ("", 10, 10, 10)
    assert read_log(str(work), d, "stderr")[0].startswith("Error getting logs due to exception")


def test_candidate_ports_and_conf():
    assert candidate_ports(8081, 16) == list(range(8081, 8098))
    assert candidate_ports(65535, 2) == [65535, 1024, 1025]
    assert candidate_ports(0, 16) == [0]
    c = WorkerConf.from_conf({"spark.worker.timeout": "2s"})
    assert c.heartbeat_interval == 0.5 and c.max_registration_retries == 16
    with pytest.raises(ValueError, match="spark.worker.maxRegistrationRetries"):
        WorkerConf.from_conf({"spark.worker.maxRegistrationRetries": "many"})


def test_terminate_process_tree_escalates(tmp_path):
    script = ("import signal, subprocess, sys, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "print('ready', flush=True)\n"
              "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        tree = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
        assert len(tree) == 2
        t0 = time.monotonic()
        assert terminate_process_tree(proc.pid, 0.5)
        assert 0.4 < time.monotonic() - t0 < 5
        proc.wait(5)
        assert proc.returncode == -signal.SIGKILL
        assert all(not p.is_running() or p.status() == psutil.STATUS_ZOMBIE for p in tree)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()


# ------------------------------------------------------------------------------------------
# CLI input errors
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv,expected", [
    (["-m", "1000", "spark://h:7077"], worker_cli.MEMORY_ERROR),
    (["-m", "lots", "spark://h:7077"], worker_cli.MEMORY_ERROR),
    (["-m", "0g", "spark://h:7077"], worker_cli.MEMORY_ERROR),
    (["-c", "0", "spark://h:7077"], "cores must be positive"),
    (["-c", "-2", "spark://h:7077"], "cores must be positive"),
    (["-c", "two", "spark://h:7077"], "Invalid --cores"),
    (["-p", "70000", "spark://h:7077"], "Invalid --port"),
    (["http://h:7077"], "Invalid master URL: http://h:7077"),
    (["spark://h:7077,h2"], "Invalid master URL"),
    ([], "Missing the master URL"),
    (["spark://a:1", "spark://b:2"], "Expected exactly one master URL"),
    (["--bogus", "spark://h:7077"], "unrecognized arguments: --bogus"),
    (["--conf", "spark.worker.timeout=never", "spark://h:7077"], "spark.worker.timeout"),
    (["--properties-file", "/nonexistent/x.conf", "spark://h:7077"],
     "Properties file /nonexistent/x.conf does not exist"),
])
def test_cli_bad_input_one_line(argv, expected, capsys):
    assert worker_cli.main(argv) == 1
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("Error: ") and expected in lines[0], lines[0]


def test_cli_env_and_precedence(tmp_path, monkeypatch):
    props = tmp_path / "defaults.conf"
    props.write_text("# c\nspark.worker.timeout 7\nspark.local.dir=/a\nother.key 1\n")
    env = {"SPARK_WORKER_CORES": "3", "SPARK_WORKER_MEMORY": "2g", "SPARK_WORKER_PORT": "7100",
           "SPARK_WORKER_WEBUI_PORT": "9000", "SPARK_WORKER_DIR": str(tmp_path / "w"),
           "SPARK_WORKER_OPTS": "-Dspark.local.dir=/b -Xmx1g"}
    s = worker_cli.parse_args(["--properties-file", str(props), "-h", "h1", "spark://m:1"], env)
    assert (s.cores, s.memory, s.port, s.web_ui_port, s.work_dir, s.host) == \
        (3, 2048, 7100, 9000, str(tmp_path / "w"), "h1")
    assert s.conf == {"spark.worker.timeout": "7", "spark.local.dir": "/b"}
    s = worker_cli.parse_args(["-c", "1", "-m", "512M", "-p", "0", "--webui-port", "0", "-d",
                               "x", "--conf", "spark.worker.ui.port=9100", "-h", "h",
                               "spark://m:1,m2:2"], env)
    assert (s.cores, s.memory, s.port, s.web_ui_port) == (1, 512, 0, 9100)
    assert s.masters == [RpcAddress("m", 1), RpcAddress("m2", 2)]
    assert s.work_dir == os.path.abspath("x")
    d = worker_cli.parse_args(["-h", "h", "spark://m:1"], {})
    assert d.cores >= 1 and d.memory >= 1024 and d.port == 0 and d.web_ui_port == 8081
    assert d.work_dir == os.path.join(os.getcwd(), "work")
    assert worker_cli.parse_args(["--help"], {}) is None


def test_cli_subprocess_error_has_no_traceback():
    r = subprocess.run([sys.executable, "-m", "ember.deploy.worker", "-c", "0", "spark://h:1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "Error: Number of cores must be positive, but --cores is 0"]


# ------------------------------------------------------------------------------------------
# A fake master
# ------------------------------------------------------------------------------------------

class FakeMaster(RpcEndpoint):
    """Records what workers send; answers RegisterWorker and ExecutorStateChanged."""

    def __init__(self, ui_url: str = "http://fake-master:8080", mode: str = "register") -> None:
        self.ui_url = ui_url
        self.mode = mode     # register | standby | fail | fail-asks
        self.events: list[tuple[float, Any]] = []
        self.lock = threading.Lock()

    def _record(self, msg: Any) -> None:
        with self.lock:
            self.events.append((time.monotonic(), msg))

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        self._record(msg)
        if isinstance(msg, RegisterWorker):
            if self.mode in ("register", "fail-asks"):
                msg.worker.send(RegisteredWorker(self.self_ref, self.ui_url, msg.masterAddress,
                                                 False))
            elif self.mode == "standby":
                msg.worker.send(MasterInStandby())
            elif self.mode == "fail":
                msg.worker.send(RegisterWorkerFailed(
                    f"Attempted to re-register worker at same address: {msg.host}:{msg.port}"))

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        self._record(msg)
        if self.mode == "fail-asks":
            context.send_failure(RuntimeError("master is confused"))
        elif isinstance(msg, Heartbeat):
            context.reply(HeartbeatResponse(True))
        else:
            context.reply(True)

    def of(self, cls: type) -> list:
        with self.lock:
            return [m for _, m in self.events if isinstance(m, cls)]

    def timed(self, cls: type) -> list[tuple[float, Any]]:
        with self.lock:
            return [(t, m) for t, m in self.events if isinstance(m, cls)]

    def wait_for(self, cls: type, pred: Callable[[Any], bool] = lambda m: True,
                 timeout: float = 15.0, count: int = 1) -> list:
        return wait_until(lambda: (lambda ms: ms if len(ms) >= count else None)(
            [m for m in self.of(cls) if pred(m)]), timeout, f"{count} x {cls.__name__}")

    def states(self, app_id: str, exec_id: int) -> list[ExecutorStateChanged]:
        return [m for m in self.of(ExecutorStateChanged)
                if m.appId == app_id and m.execId == exec_id]


class MasterProcess:
    """An RpcEnv "sparkMaster" with a FakeMaster, in this test process."""

    def __init__(self, port: int = 0, conf: Optional[dict] = None, mode: str = "register",
                 ui_url: str = "http://fake-master:8080") -> None:
        self.env = RpcEnv.create("sparkMaster", "127.0.0.1", port, conf or {})
        self.endpoint = FakeMaster(ui_url, mode)
        self.ref = self.env.setup_endpoint("Master", self.endpoint)

    @property
    def url(self) -> str:
        return self.env.address.to_spark_url()

    def stop(self) -> None:
        self.env.shutdown()
        self.env.await_termination(10)


def sleeper_app(name: str = "sleepy <b>app</b>", cores: int = 1, memory: int = 256,
                **env: str) -> ApplicationDescription:
    args = ["--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1", "--executor-id",
            "{{EXECUTOR_ID}}", "--hostname", "{{HOSTNAME}}", "--cores", "{{CORES}}",
            "--app-id", "{{APP_ID}}", "--worker-url", "{{WORKER_URL}}",
            "--resourceProfileId", "{{RESOURCE_PROFILE_ID}}", "x{{APP_ID}}"]
    return ApplicationDescription(name, None, Command(SLEEPER, args, {"PYTHONPATH": REPO_ROOT, **env}), "",
                                  ResourceProfile.of(cores=cores, memoryMb=memory),
                                  user="tester")


def read_info(path: str, timeout: float = 15.0) -> dict:
    wait_until(lambda: os.path.exists(path), timeout, f"{path}")
    with open(path) as f:
        return json.load(f)


def process_tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p] + p.children(recursive=True)


def all_gone(procs: list[psutil.Process]) -> bool:
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            pass
    return True


def http_get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read().decode()


def start_worker_process(master_url: str, tmp, *extra: str, log_name: str = "worker.log"
                         ) -> tuple[subprocess.Popen, Any]:
    log = open(tmp / log_name, "wb")
    cmd = [sys.executable, "-m", "ember.deploy.worker", "-h", "127.0.0.1", "-p", "0",
           "-d", str(tmp / "work"), "-c", "4", "-m", "2G", *FAST_CONF,
           "--conf", f"spark.local.dir={tmp / 'local'}", *extra, master_url]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, log


def stop_worker_process(proc: subprocess.Popen, log: Any, pids: list[int]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    log.close()
    for pid in pids:   # never leave a stray sleeper behind, whatever happened
        try:
            for p in process_tree(pid):
                p.kill()
        except psutil.NoSuchProcess:
            pass


# ------------------------------------------------------------------------------------------
# A real worker process
# ------------------------------------------------------------------------------------------

class Cluster:
    def __init__(self, master: MasterProcess, proc: subprocess.Popen, reg: RegisterWorker,
                 tmp: Any, busy_port: int) -> None:
        self.master = master
        self.m = master.endpoint
        self.proc = proc
        self.reg = reg
        self.tmp = tmp
        self.busy_port = busy_port
        self.pids: list[int] = []

    def launch(self, app_id: str, exec_id: int, app: ApplicationDescription,
               master_url: Optional[str] = None, cores: int = 1, memory: int = 256) -> None:
        self.reg.worker.send(LaunchExecutor(master_url or self.master.url, app_id, exec_id, 0,
                                            app, cores, memory))

    def json(self) -> dict:
        status, ctype, body = http_get(self.reg.workerWebUiUrl + "/json")
        assert status == 200 and ctype.startswith("text/json"), (status, ctype, body)
        return json.loads(body)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("worker")
    master = MasterProcess()
    busy = socket.socket()
    busy.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    busy.bind(("0.0.0.0", 0))
    busy.listen(1)
    busy_port = busy.getsockname()[1]
    proc, log = start_worker_process(master.url, tmp, "--webui-port", str(busy_port))
    c = None
    try:
        reg = master.endpoint.wait_for(RegisterWorker)[0]
        c = Cluster(master, proc, reg, tmp, busy_port)
        yield c
    finally:
        stop_worker_process(proc, log, c.pids if c else [])
        busy.close()
        master.stop()


def test_registration_and_heartbeats(cluster):
    reg, m = cluster.reg, cluster.m
    assert re.fullmatch(rf"worker-\d{{14}}-127\.0\.0\.1-{reg.port}", reg.id)
    assert (reg.host, reg.cores, reg.memory) == ("127.0.0.1", 4, 2048)
    assert reg.worker.url == f"spark://Worker@127.0.0.1:{reg.port}"
    assert reg.masterAddress == cluster.master.env.address
    ui_port = int(reg.workerWebUiUrl.rsplit(":", 1)[1])
    assert reg.workerWebUiUrl.startswith("http://127.0.0.1:")
    assert cluster.busy_port < ui_port <= cluster.busy_port + 16   # busy port skipped
    latest = m.wait_for(WorkerLatestState)[0]
    assert latest.id == reg.id and latest.executors == [] and latest.driverIds == []
    beats = m.wait_for(Heartbeat, count=6)
    assert all(b.workerId == reg.id and b.worker == reg.worker for b in beats)
    times = [t for t, _ in m.timed(Heartbeat)]
    gaps = sorted(b - a for a, b in zip(times, times[1:]))
    assert 0.1 < gaps[len(gaps) // 2] < 0.6, gaps   # timeout=1s -> every 0.25 s


def test_web_ui_pages(cluster):
    # the master's URL shows once the worker has read RegisteredWorker, which the fake
    # master sends after the RegisterWorker the fixture waited for
    doc = wait_until(lambda: (lambda d: d if d["masterurl"] else None)(cluster.json()),
                     what="the worker's masterurl")
    assert list(doc) == WORKER_JSON_KEYS
    assert doc["id"] == cluster.reg.id
    assert doc["masterurl"] == cluster.master.url
    assert doc["masterwebuiurl"] == "http://fake-master:8080"
    assert (doc["cores"], doc["memory"]) == (4, 2048)
    base = cluster.reg.workerWebUiUrl
    status, ctype, body = http_get(base + "/")
    assert status == 200 and "text/html" in ctype and cluster.reg.id in body
    for path in ("/nope", "/json/x/y", "/logPage/../../etc/passwd"):
        status, _, body = http_get(base + path)
        assert status == 404 and "Traceback" not in body
    status, _, body = http_get(base + "/logPage/?logType=stdout")
    assert status == 400 and "Request must specify either application or driver" in body


def test_launch_and_kill_executor(cluster, tmp_path):
    info_path = str(tmp_path / "info.json")
    app = sleeper_app(EMBER_SLEEPER_INFO=info_path, EMBER_SLEEPER_CHILDREN="2",
                      EMBER_SLEEPER_IGNORE_TERM="1")
    cluster.launch("app-kill", 0, app, cores=2, memory=512)
    m = cluster.m
    running = m.wait_for(ExecutorStateChanged, lambda s: s.appId == "app-kill")[0]
    assert (running.execId, running.state, running.message, running.exitStatus) == \
        (0, ExecutorState.RUNNING, None, None)
    info = read_info(info_path)
    cluster.pids.append(info["pid"])
    worker_url = cluster.reg.worker.url
    assert info["argv"] == ["--driver-url", "spark://CoarseGrainedScheduler@127.0.0.1:1",
                            "--executor-id", "0", "--hostname", "127.0.0.1", "--cores", "2",
                            "--app-id", "app-kill", "--worker-url", worker_url,
                            "--resourceProfileId", "0", "x{{APP_ID}}"]
    exec_dir = cluster.tmp / "work" / "app-kill" / "0"
    assert os.path.realpath(info["cwd"]) == os.path.realpath(exec_dir)
    env = info["env"]
    ui = cluster.reg.workerWebUiUrl
    assert env["SPARK_LOG_URL_STDOUT"] == f"{ui}/logPage/?appId=app-kill&executorId=0&logType=stdout"
    assert env["SPARK_LOG_URL_STDERR"] == f"{ui}/logPage/?appId=app-kill&executorId=0&logType=stderr"
    assert env["_SPARK_AUTH_SECRET"] is None
    scratch = env["SPARK_EXECUTOR_DIRS"].split(os.pathsep)
    assert len(scratch) == 1
    assert os.path.dirname(scratch[0]) == str(cluster.tmp / "local")
    assert re.fullmatch(r"executor-[0-9a-f-]{36}", os.path.basename(scratch[0]))
    assert stat.S_IMODE(os.stat(scratch[0]).st_mode) == 0o700

    stderr = (exec_dir / "stderr").read_text()
    header = stderr.split("\n")
    assert header[0].startswith(f'Spark Executor Command: "{sys.executable}" "-m" "{SLEEPER}" '
                                '"--driver-url"')
    assert header[1:3] == ["=" * 40, ""]
    assert "sleeper stderr line" in stderr
    assert "sleeper started" in (exec_dir / "stdout").read_text()
    status, ctype, body = http_get(env["SPARK_LOG_URL_STDOUT"])
    assert status == 200 and "sleeper started --driver-url" in body
    status, _, body = http_get(ui + "/log?appId=app-kill&executorId=0&logType=stderr"
                               "&offset=0&byteLength=24")
    assert body.splitlines()[0].startswith("==== Bytes 0-24 of ")
    assert body.splitlines()[1] == "Spark Executor Command: "
    status, _, body = http_get(ui + "/logPage/?appId=app-kill&executorId=0&logType=passwd")
    assert body == "Error: Log type must be one of stderr, stdout, out"
    status, _, body = http_get(ui + "/logPage/?appId=..&executorId=..&logType=stdout")
    assert body.startswith("Error: invalid log directory ")

    doc = cluster.json()
    assert [e["id"] for e in doc["executors"]] == [0]
    assert (doc["coresused"], doc["memoryused"]) == (2, 512)
    e = doc["executors"][0]
    assert e["appid"] == "app-kill" and e["memory"] == 512
    assert e["appdesc"]["name"] == "sleepy <b>app</b>" and e["appdesc"]["user"] == "tester"
    assert e["appdesc"]["command"].startswith(f"Command({SLEEPER},List(--driver-url")
    status, _, page = http_get(ui + "/")
    assert "sleepy &lt;b&gt;app&lt;/b&gt;" in page and "<b>app</b>" not in page

    tree = wait_until(lambda: (lambda t: t if len(t) >= 5 else None)(process_tree(info["pid"])),
                      what="sleeper + 2 children + 2 grandchildren")
    cluster.reg.worker.send(KillExecutor(cluster.master.url, "app-kill", 0))
    killed = m.wait_for(ExecutorStateChanged,
                        lambda s: s.appId == "app-kill" and s.state.isFinished())[0]
    # SIGTERM was ignored by the executor: SIGKILL after the 1 s grace period
    assert (killed.state, killed.message, killed.exitStatus) == \
        (ExecutorState.KILLED, None, 128 + signal.SIGKILL)
    assert all_gone(tree), [p for p in tree if p.is_running()]
    doc = wait_until(lambda: (lambda d: d if not d["executors"] else None)(cluster.json()))
    assert (doc["coresused"], doc["memoryused"]) == (0, 0)
    assert "app-kill" in [f["appid"] for f in doc["finishedexecutors"]]


def test_executor_exit_reported(cluster):
    cluster.launch("app-exit", 3, sleeper_app(EMBER_SLEEPER_EXIT_AFTER="0.2",
                                              EMBER_SLEEPER_EXIT_CODE="3"))
    states = cluster.m.wait_for(ExecutorStateChanged,
                                lambda s: s.appId == "app-exit" and s.state.isFinished())
    assert [s.state for s in cluster.m.states("app-exit", 3)] == [ExecutorState.RUNNING,
                                                                   ExecutorState.EXITED]
    assert (states[0].message, states[0].exitStatus) == ("Command exited with code 3", 3)


def test_application_finished_kills_and_cleans_scratch(cluster, tmp_path):
    infos = [str(tmp_path / f"info{i}.json") for i in range(2)]
    for i in range(2):
        cluster.launch("app-fin", i, sleeper_app(EMBER_SLEEPER_INFO=infos[i]))
    a, b = read_info(infos[0]), read_info(infos[1])
    cluster.pids += [a["pid"], b["pid"]]
    assert a["env"]["SPARK_EXECUTOR_DIRS"] == b["env"]["SPARK_EXECUTOR_DIRS"]  # one per app
    scratch = a["env"]["SPARK_EXECUTOR_DIRS"]
    assert os.path.isdir(scratch)
    procs = [psutil.Process(a["pid"]), psutil.Process(b["pid"])]
    cluster.reg.worker.send(ApplicationFinished("app-fin"))
    cluster.m.wait_for(ExecutorStateChanged,
                       lambda s: s.appId == "app-fin" and s.state == ExecutorState.KILLED,
                       count=2)
    wait_until(lambda: all_gone(procs), what="executors gone")
    wait_until(lambda: not os.path.exists(scratch), what="scratch dir deleted")
    assert (cluster.tmp / "work" / "app-fin" / "0" / "stdout").exists()   # logs are kept


def test_ignored_and_unsupported_messages(cluster):
    m = cluster.m
    cluster.launch("app-bogus", 0, sleeper_app(), master_url="spark://bogus-master:7077")
    cluster.reg.worker.send(KillExecutor(cluster.master.url, "app-none", 5))
    cluster.reg.worker.send(LaunchDriver("driver-20250101000000-0000", DriverDescription(
        "file:/x.py", 512, 1, False, Command("ember.deploy.driver_wrapper", []))))
    failed = m.wait_for(DriverStateChanged)[0]   # a command that is not DriverWrapper's
    assert (failed.driverId, failed.state) == ("driver-20250101000000-0000", DriverState.ERROR)
    assert "expected org.apache.spark.deploy.worker.DriverWrapper" in failed.exception
    # messages from one sender keep their order: the launch was ignored before the driver
    assert not m.states("app-bogus", 0)
    assert "app-bogus" not in [e["appid"] for e in cluster.json()["executors"]]
    assert cluster.proc.poll() is None
    log = (cluster.tmp / "worker.log").read_text()
    assert "Invalid Master (spark://bogus-master:7077) attempted to launch executor." in log
    assert "Asked to kill unknown executor app-none/5" in log


def test_launch_failures_are_reported_failed(cluster):
    bad_main = sleeper_app()
    bad_main = ApplicationDescription(bad_main.name, None, Command("-c", ["import os"]), "",
                                      bad_main.defaultProfile, user="tester")
    cluster.launch("app-badmain", 0, bad_main)
    cluster.launch("../escape", 0, sleeper_app())
    m = cluster.m
    failed = m.wait_for(ExecutorStateChanged, lambda s: s.appId == "app-badmain")[0]
    assert failed.state == ExecutorState.FAILED and failed.exitStatus is None
    assert failed.message.startswith("Error running executor: Invalid executor main class")
    escaped = m.wait_for(ExecutorStateChanged, lambda s: s.appId == "../escape")[0]
    assert escaped.state == ExecutorState.FAILED
    assert "invalid application id" in escaped.message
    assert not (cluster.tmp / "escape").exists()
    doc = cluster.json()
    assert not [e for e in doc["executors"] if e["appid"] in ("app-badmain", "../escape")]


def test_sigterm_kills_every_executor(tmp_path):
    master = MasterProcess()
    proc, log = start_worker_process(master.url, tmp_path, "--webui-port", "0")
    pids: list[int] = []
    try:
        reg = master.endpoint.wait_for(RegisterWorker)[0]
        infos = [str(tmp_path / f"i{i}.json") for i in range(2)]
        for i in range(2):
            reg.worker.send(LaunchExecutor(master.url, "app-term", i, 0, sleeper_app(
                EMBER_SLEEPER_INFO=infos[i], EMBER_SLEEPER_CHILDREN="1"), 1, 256))
        trees = []
        for path in infos:
            info = read_info(path)
            pids.append(info["pid"])
            trees += wait_until(lambda: (lambda t: t if len(t) >= 3 else None)(
                process_tree(info["pid"])))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(20) == 0
        assert all_gone(trees), [p for p in trees if p.is_running()]
        finals = [s for s in master.endpoint.of(ExecutorStateChanged) if s.state.isFinished()]
        assert sorted((s.execId, s.state, s.message) for s in finals) == [
            (0, ExecutorState.FAILED, "Worker shutting down"),
            (1, ExecutorState.FAILED, "Worker shutting down")]
        assert "Traceback" not in (tmp_path / "worker.log").read_text()
    finally:
        stop_worker_process(proc, log, pids)
        master.stop()


def test_unreachable_master_gives_up(tmp_path):
    port = free_port()
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "ember.deploy.worker", "-h", "127.0.0.1", "--webui-port", "0",
         "-d", str(tmp_path / "work"), "-c", "1", "-m", "1G",
         "--conf", "spark.worker.initialRegistrationRetries=2",
         "--conf", "spark.worker.maxRegistrationRetries=3",
         "--conf", "spark.ember.worker.registrationIntervalScale=0.02",
         f"spark://127.0.0.1:{port}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert "All masters are unresponsive! Giving up." in r.stderr
    assert "Retrying connection to master (attempt # 3)" in r.stderr
    assert "attempt # 4" not in r.stderr
    assert "Traceback" not in r.stderr
    assert time.monotonic() - t0 < 30


# ------------------------------------------------------------------------------------------
# In-process workers: master fail-over paths
# ------------------------------------------------------------------------------------------

def start_daemon_in_process(tmp, masters: list[MasterProcess], **conf: str) -> WorkerDaemon:
    c = {"spark.worker.timeout": "1", "spark.ember.worker.registrationIntervalScale": "0.02",
         "spark.ember.worker.executorTerminateTimeout": "1", "spark.rpc.askTimeout": "5s",
         "spark.local.dir": str(tmp / "local"), "spark.worker.cleanup.enabled": "false"}
    c.update(conf)
    settings = WorkerSettings(host="127.0.0.1", port=0, cores=2, memory=1024,
                              masters=[m.env.address for m in masters],
                              work_dir=str(tmp / "work"), web_ui_port=0, conf=c,
                              ui_bind_host="127.0.0.1")
    return WorkerDaemon(settings).start()


def test_reregisters_after_master_restart(tmp_path):
    master = MasterProcess()
    port = master.env.address.port
    daemon = start_daemon_in_process(tmp_path, [master])
    try:
        first = master.endpoint.wait_for(RegisterWorker)[0]
        master.endpoint.wait_for(Heartbeat)
        master.stop()
        wait_until(lambda: daemon.run_on_loop(lambda: daemon.worker.connected) is False,
                   what="master disconnect noticed")
        master = MasterProcess(port=port)
        again = master.endpoint.wait_for(RegisterWorker, timeout=20)[0]
        assert again.id == first.id and again.port == first.port
        master.endpoint.wait_for(Heartbeat)
        assert daemon.run_on_loop(lambda: (daemon.worker.registered, daemon.worker.connected))\
            == (True, True)
        assert daemon.wait(0) is None
    finally:
        daemon.stop()
        master.stop()


def test_standby_master_master_changed_and_reconnect(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    caplog.set_level(logging.INFO, logger="ember")    # whatever level earlier tests left it at
    standby = MasterProcess(mode="standby", ui_url="http://standby:8080")
    active = MasterProcess()
    daemon = start_daemon_in_process(tmp_path, [standby, active])
    try:
        reg = active.endpoint.wait_for(RegisterWorker)[0]
        # tried every master; the standby's RegisterWorker may never leave: as Spark's
        # Worker cancels its registerMasterFutures, registering with the active first
        # cancels a registration whose "Master" lookup has not answered yet
        for master in (standby, active):
            assert f"Connecting to master {master.env.address.host_port}..." in caplog.text
        active.endpoint.wait_for(Heartbeat)
        assert daemon.run_on_loop(lambda: daemon.worker.active_master_url) == active.url
        info_path = str(tmp_path / "info.json")
        reg.worker.send(LaunchExecutor(active.url, "app-ha", 1, 0,
                                       sleeper_app(EMBER_SLEEPER_INFO=info_path), 1, 256))
        active.endpoint.wait_for(ExecutorStateChanged)
        # the standby takes over (leader election) and tells the worker
        worker_ref = standby.env.endpoint_ref(reg.worker.address, "Worker")
        worker_ref.send(MasterChanged(standby.ref, "http://standby:8080"))
        resp = standby.endpoint.wait_for(WorkerSchedulerStateResponse)[0]
        assert resp.id == reg.id and resp.driverResponses == []
        assert [(r.desc.appId, r.desc.execId, r.desc.state) for r in resp.execResponses] == \
            [("app-ha", 1, ExecutorState.RUNNING)]
        assert daemon.run_on_loop(lambda: (daemon.worker.active_master_url,
                                           daemon.worker.active_master_web_ui_url)) == \
            (standby.url, "http://standby:8080")
        wait_until(lambda: standby.endpoint.of(Heartbeat), what="heartbeat to new master")
        # an executor launch from the old master is refused now
        reg.worker.send(LaunchExecutor(active.url, "app-ha", 2, 0, sleeper_app(), 1, 256))
        n = len(standby.endpoint.of(RegisterWorker)) + len(active.endpoint.of(RegisterWorker))
        worker_ref.send(ReconnectWorker(standby.url))
        # a new registration round (the first master to answer cancels the rest of it)
        wait_until(lambda: len(standby.endpoint.of(RegisterWorker))
                   + len(active.endpoint.of(RegisterWorker)) > n, what="a new registration")
        assert daemon.run_on_loop(lambda: sorted(daemon.worker.executors)) == ["app-ha/1"]
        info = read_info(info_path)
        assert info["env"]["_SPARK_AUTH_SECRET"] is None
    finally:
        daemon.stop()
        standby.stop()
        active.stop()


def test_work_dir_cleanup_and_decommission(tmp_path):
    work = tmp_path / "work"
    old = time.time() - 3600
    for name in ("app-old", "app-live"):
        (work / name / "9").mkdir(parents=True)
        (work / name / "9" / "stdout").write_text("x")
        for p in (work / name / "9" / "stdout", work / name / "9"):
            os.utime(p, (old, old))
    master = MasterProcess()
    daemon = start_daemon_in_process(
        tmp_path, [master], **{"spark.worker.cleanup.enabled": "true",
                               "spark.worker.cleanup.interval": "0.3",
                               "spark.worker.cleanup.appDataTtl": "60",
                               "spark.decommission.enabled": "true"})
    try:
        reg = master.endpoint.wait_for(RegisterWorker)[0]
        info_path = str(tmp_path / "info.json")
        reg.worker.send(LaunchExecutor(master.url, "app-live", 0, 0,
                                       sleeper_app(EMBER_SLEEPER_INFO=info_path), 1, 256))
        read_info(info_path)
        for p in (work / "app-live" / "0" / "stdout", work / "app-live" / "0" / "stderr",
                  work / "app-live" / "0"):
            os.utime(p, (old, old))
        wait_until(lambda: not (work / "app-old").exists(), what="stale app dir removed")
        time.sleep(0.5)
        assert (work / "app-live" / "9" / "stdout").exists()   # its app is running here
        from ember.deploy.messages import DecommissionWorker
        reg.worker.send(DecommissionWorker())
        reg.worker.send(LaunchExecutor(master.url, "app-live", 1, 0, sleeper_app(), 1, 256))
        wait_until(lambda: daemon.run_on_loop(lambda: daemon.worker.decommissioned))
        time.sleep(0.3)
        assert daemon.run_on_loop(lambda: sorted(daemon.worker.executors)) == ["app-live/0"]
    finally:
        daemon.stop()
        master.stop()


def test_executor_state_sync_retries_then_exits(tmp_path):
    master = MasterProcess(mode="fail-asks")
    daemon = start_daemon_in_process(
        tmp_path, [master], **{"spark.worker.executorStateSync.maxAttempts": "3",
                               "spark.rpc.askTimeout": "0.2s"})
    try:
        reg = master.endpoint.wait_for(RegisterWorker)[0]
        reg.worker.send(LaunchExecutor(master.url, "app-sync", 0, 0, sleeper_app(), 1, 256))
        assert daemon.wait(20) == 1
        asks = master.endpoint.of(ExecutorStateChanged)
        assert [a.state for a in asks] == [ExecutorState.RUNNING] * 3
    finally:
        daemon.stop()
        master.stop()


def test_registration_failed_exits_1(tmp_path):
    master = MasterProcess(mode="fail")
    daemon = start_daemon_in_process(tmp_path, [master])
    try:
        assert daemon.wait(10) == 1
    finally:
        daemon.stop()
        master.stop()


def test_auth_secret_reaches_executor(tmp_path):
    secret = "s3cret-of-at-least-thirty-two-bytes"
    auth = {"spark.authenticate": "true", "spark.authenticate.secret": secret}
    master = MasterProcess(conf=auth)
    daemon = start_daemon_in_process(tmp_path, [master], **auth)
    try:
        reg = master.endpoint.wait_for(RegisterWorker)[0]
        info_path = str(tmp_path / "info.json")
        reg.worker.send(LaunchExecutor(master.url, "app-auth", 0, 0,
                                       sleeper_app(EMBER_SLEEPER_INFO=info_path), 1, 256))
        info = read_info(info_path)
        # the executor gets a credential derived for its application, never the secret
        from ember.rpc.security import app_credential
        assert info["env"]["_SPARK_AUTH_SECRET"] == app_credential(secret.encode(), "app-auth")
        assert secret not in info["env"]["_SPARK_AUTH_SECRET"]
        assert "s3cret" not in " ".join(info["argv"])
        pid = info["pid"]
    finally:
        daemon.stop()
        master.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


# ------------------------------------------------------------------------------------------
# start-worker / stop-worker
# ------------------------------------------------------------------------------------------

def test_start_and_stop_worker_daemon(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EMBER_PID_DIR", str(tmp_path / "pids"))
    monkeypatch.setenv("EMBER_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("SPARK_IDENT_STRING", "wtest")
    monkeypatch.delenv("SPARK_WORKER_INSTANCES", raising=False)
    monkeypatch.delenv("SPARK_WORKER_PORT", raising=False)
    master = MasterProcess()
    try:
        assert worker_cli.start_main([]) == 1
        assert worker_cli.start_main(["spark://h:1", "-c", "0"]) == 1
        assert "Error: Number of cores must be positive" in capsys.readouterr().err
        rc = worker_cli.start_main([master.url, "-h", "127.0.0.1", "--webui-port", "0", "-d",
                                    str(tmp_path / "work"), "-c", "1", "-m", "1G"])
        assert rc == 0
        assert "starting worker, logging to" in capsys.readouterr().out
        master.endpoint.wait_for(RegisterWorker)
        pid_file = tmp_path / "pids" / "ember-wtest-worker-1.pid"
        pid = int(pid_file.read_text())
        assert psutil.pid_exists(pid)
        assert worker_cli.stop_main([]) == 0
        assert "stopping worker" in capsys.readouterr().out
        assert not pid_file.exists()
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        assert worker_cli.stop_main([]) == 0
        assert "no worker to stop" in capsys.readouterr().out
    finally:
        pid_file = tmp_path / "pids" / "ember-wtest-worker-1.pid"
        if pid_file.exists():   # a failed assertion must not leave the daemon running
            try:
                p = psutil.Process(int(pid_file.read_text()))
                if "ember.deploy.worker" in " ".join(p.cmdline()):
                    p.terminate()
                    p.wait(20)
            except (psutil.Error, ValueError):
                pass
        master.stop()


def test_a_deposed_masters_instructions_are_refused_by_epoch(tmp_path):
    """Fencing over real sockets: once a master at epoch 7 has taken over, whatever the
    deposed one (epoch 3) still sends - a driver, an executor, a MasterChanged back to
    itself - is refused (its work messages already by channel: it is no longer the current
    master; its MasterChanged by the fence), and an instruction carrying the old epoch is
    refused even on the new master's own connection; a newer epoch there is accepted."""
    new = MasterProcess(mode="standby", ui_url="http://new:8080")
    old = MasterProcess(ui_url="http://old:8080")
    daemon = start_daemon_in_process(tmp_path, [new, old])
    try:
        reg = old.endpoint.wait_for(RegisterWorker)[0]
        old.endpoint.wait_for(Heartbeat)
        worker_ref = new.env.endpoint_ref(reg.worker.address, "Worker")
        worker_ref.send(MasterChanged(new.ref, "http://new:8080", 7))
        new.endpoint.wait_for(WorkerSchedulerStateResponse)
        bad_driver = DriverDescription("file:/x.py", 512, 1, False,
                                       Command("ember.deploy.driver_wrapper", []))
        reg.worker.send(LaunchDriver("driver-stale", bad_driver, {}, 1, 3))
        reg.worker.send(LaunchExecutor(new.url, "app-stale", 0, 0, sleeper_app(), 1, 256, {}, 3))
        reg.worker.send(MasterChanged(old.ref, "http://old:8080", 3))
        # the current master's connection, an old epoch: the fence alone refuses it
        worker_ref.send(LaunchDriver("driver-stale-epoch", bad_driver, {}, 1, 3))
        # same connection, newer epoch: processed after the one above, and accepted
        worker_ref.send(LaunchDriver("driver-fresh", bad_driver, {}, 1, 8))
        new.endpoint.wait_for(DriverStateChanged, lambda m: m.driverId == "driver-fresh")
        assert not [m for m in new.endpoint.of(DriverStateChanged) + old.endpoint.of(
            DriverStateChanged) if m.driverId in ("driver-stale", "driver-stale-epoch")]
        assert daemon.run_on_loop(lambda: (daemon.worker.active_master_url,
                                           sorted(daemon.worker.executors),
                                           daemon.worker.fence.newest)) == (new.url, [], 8)
    finally:
        daemon.stop()
        new.stop()
        old.stop()
