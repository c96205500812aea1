"""A real multi-host cluster under faults (issue 17): every host a network namespace on one
bridge, daemons and clients started inside their hosts, faults injected between them.

Each test states the outcome it expects and is bounded in time (short worker timeouts).
They need root and iproute2/nftables (`make test` installs them); elsewhere they are skipped
with the reason. A session-end check asserts that no namespace, mount or process is left.
"""
from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import time

import psutil
import pytest

from ember.testing.lab_cluster import LabCluster, write_app
from ember.testing.netns import Lab, leftovers, unavailable_reason
from ember.testing.lab_apps import (SLOW_SHUFFLE, SLOW_SHUFFLE_EXPECTED, TOKEN, WORDCOUNT,
                                  local_expected, overlap_seconds, runs, words_file)

_reason = unavailable_reason()
pytestmark = [pytest.mark.skipif(_reason is not None, reason=f"multi-host tests: {_reason}"),
              pytest.mark.timeout(240)]

TIMEOUT = 4          # spark.worker.timeout in these tests (seconds)
HOSTS = ["master", "worker1", "worker2", "worker3", "client1"]
_prefixes: list[str] = []


@pytest.fixture(scope="session", autouse=True)
def _nothing_left_behind():
    """Session-end check: every lab removed all it made, failed tests included."""
    yield
    left = [x for p in _prefixes for x in leftovers(p)]
    assert not left, f"multi-host labs left behind: {left}"


@pytest.fixture
def lab(tmp_path):
    lab = Lab(str(tmp_path / "lab"), len(HOSTS), names=HOSTS)
    _prefixes.append(lab.prefix)
    with lab:
        yield lab


def _cluster(lab: Lab, **kw) -> LabCluster:
    conf = {"spark.worker.timeout": str(TIMEOUT), **kw.pop("conf", {})}
    m, w1, w2, w3, _c = lab.hosts
    return LabCluster(lab, m, [w1, w2, w3], conf=conf, **kw).start()


def _read_json(path: str, timeout: float, lab: Lab, what: str,
               driver: tuple[subprocess.Popen, str] | None = None) -> dict:
    """The app's result file once it appears. `driver` = (its process, its log): if the
    result does not come, the error carries the driver's thread dump and its log's end."""
    try:
        lab.wait_until(lambda: os.path.exists(path), timeout, what)
    except TimeoutError as e:
        if driver is None:
            raise
        raise TimeoutError(f"{e}\n{_where_they_wait(lab, *driver)}") from None
    with open(path) as f:
        return json.load(f)


def _where_they_wait(lab: Lab, driver: subprocess.Popen, log: str) -> str:
    """Thread dumps (kill -3, ember.util.thread_dump) of the driver and of every executor,
    with the end of the driver's log and of each executor's stderr."""
    executors = [p for h in lab.hosts for p in _executor_processes(lab, h)]
    for p in ([driver.pid] if driver.poll() is None else []) + [e.pid for e in executors]:
        try:
            os.kill(p, signal.SIGQUIT)
        except OSError:
            pass
    time.sleep(1.0)
    parts = [f"driver exit code {driver.poll()}; the end of {log}:\n{lab.log(log)[-12000:]}"]
    for root, _dirs, files in os.walk(lab.workdir):
        if "stderr" in files and os.path.basename(os.path.dirname(root)).startswith("app-"):
            err = os.path.relpath(os.path.join(root, "stderr"), lab.workdir)
            parts.append(f"the end of {err}:\n{lab.log(err)[-6000:]}")
    return "\n".join(parts)


def _processes_running(lab: Lab, host, module: str) -> list[psutil.Process]:
    out = []
    for p in lab.processes(host):
        try:
            if module in " ".join(p.cmdline()):
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


def _executor_processes(lab: Lab, host) -> list[psutil.Process]:
    return _processes_running(lab, host, "ember.executor.backend")


def test_the_lab_itself_isolates_hosts_and_injects_each_fault(tmp_path):
    """Expected: hosts resolve each other by name through their /etc/hosts; each fault
    takes effect and heals; after teardown nothing of the lab is left (no namespace,
    /etc/netns entry, mount or process)."""
    lab = Lab(str(tmp_path / "lab"), 2, names=["alpha", "beta"])
    _prefixes.append(lab.prefix)
    with lab:
        a, b = lab.hosts
        server = subprocess.Popen(["ip", "netns", "exec", b.ns, os.sys.executable, "-m",
                                   "http.server", "--bind", b.ip, "8000"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        b.procs.append(server)
        url = f"http://{b.ip}:8000/"
        lab.wait_until(lambda: lab.http_get(url), 30, "server up")
        fetch = ("import urllib.request as u; u.urlopen('http://beta:8000/', timeout=2)")
        by_name = subprocess.run(["ip", "netns", "exec", a.ns, os.sys.executable, "-c", fetch])
        assert by_name.returncode == 0                    # alpha resolves beta by name

        def reachable() -> bool:
            try:
                lab.http_get(url, timeout=1.5)
                return True
            except OSError:
                return False
        for fault in (lab.link_down, lab.cut_outgoing, lab.cut_incoming):
            fault(b)
            assert not reachable(), fault.__name__
            lab.heal(b)
            assert lab.wait_until(reachable, 10, f"healed after {fault.__name__}")
        (proc,) = lab.pause(b)
        assert proc.status() == psutil.STATUS_STOPPED
        lab.resume(b)
        assert proc.status() != psutil.STATUS_STOPPED
        disk = lab.small_disk("disk", "1m")
        os.remove(lab.fill(disk))
        assert os.path.ismount(disk)
    assert leftovers(lab.prefix) == [] and server.poll() is not None


def test_wordcount_and_sort_over_three_worker_hosts_client_and_cluster_mode(lab):
    """Expected: results equal local mode, executors on all three worker hosts, shuffle
    bytes read remotely > 0, the same in client mode (driver on a fourth host) and in
    cluster mode (driver on a worker host, submitted from the client host)."""
    cluster = _cluster(lab, cores=2)
    client = lab.host("client1")
    app = write_app(lab.workdir, "wc.py", WORDCOUNT)
    text = words_file(os.path.join(lab.workdir, "words.txt"))
    expected = local_expected(text)

    out = os.path.join(lab.workdir, "client.json")
    r = cluster.submit(client, app, out, text, deploy_mode="client")
    assert r.returncode == 0, r.stderr[-3000:]
    got = _read_json(out, 5, lab, "client-mode result")
    assert got["counts"] == expected["counts"] and got["sorted"] == expected["sorted"]
    assert got["hosts"] == ["worker1", "worker2", "worker3"]
    assert got["remote"] > 0

    # told nothing (no SPARK_LOCAL_IP, no spark.driver.host) and bound to every interface:
    # the driver still advertises its reachable address, never 127.0.0.1
    out = os.path.join(lab.workdir, "untold.json")
    r = cluster.submit(client, app, out, text, deploy_mode="client",
                       conf={"spark.driver.bindAddress": "0.0.0.0"},
                       env={"SPARK_LOCAL_IP": ""})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _read_json(out, 5, lab, "untold result")["counts"] == expected["counts"]
    page = lab.http_get(f"http://{cluster.master_host.ip}:8080/").decode()
    assert "http://worker1:8081" in page and "127.0.0.1" not in page

    out = os.path.join(lab.workdir, "cluster.json")
    driver_id = cluster.submit_cluster(client, app, out, text)
    assert cluster.wait_driver(driver_id)["state"] == "FINISHED"
    got = _read_json(out, 5, lab, "cluster-mode result")
    assert got["counts"] == expected["counts"] and got["sorted"] == expected["sorted"]
    assert got["remote"] > 0
    # every address the master shows is a host's name, never a loopback address
    j = cluster.json()
    assert {w["webuiaddress"] for w in j["workers"]} == {
        f"http://worker{i}:8081" for i in (1, 2, 3)}
    assert "127.0.0.1" not in json.dumps(j)


def test_link_down_of_a_worker_host_mid_shuffle(lab):
    """Expected: the job completes with the right result; the cut worker is DEAD after
    spark.worker.timeout; when the link returns it re-registers and the executors it still
    ran for the application are killed."""
    cluster = _cluster(lab)
    client, w3 = lab.host("client1"), lab.host("worker3")
    app = write_app(lab.workdir, "slow.py", SLOW_SHUFFLE)
    out = os.path.join(lab.workdir, "slow.json")
    submit = lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           app, out], "submit.log",
                       env={"LAB_HOLD": "90"})
    lab.wait_until(lambda: os.path.exists(out + ".started"), 60, "job started")
    stale = lab.wait_until(lambda: _executor_processes(lab, w3), 30, "executor on worker3")
    time.sleep(1.5)
    cut_at = time.monotonic()
    lab.link_down(w3)
    cluster.wait_for(lambda j: cluster.worker_state(w3, j) == ["DEAD"], TIMEOUT * 4,
                     "worker3 DEAD")
    detected = time.monotonic() - cut_at
    got = _read_json(out, 90, lab, "job result after the cut", (submit, "submit.log"))
    assert [tuple(x) for x in got["sums"]] == SLOW_SHUFFLE_EXPECTED
    assert detected < TIMEOUT * 3
    assert _executor_processes(lab, w3), "behind the cut its executor still runs"
    lab.link_up(w3)
    cluster.wait_for(lambda j: "ALIVE" in cluster.worker_state(w3, j), 60,
                     "worker3 re-registered")
    psutil.wait_procs(stale, timeout=30)
    assert not any(p.is_running() for p in stale), "stale executors on worker3 killed"
    open(out + ".release", "w").close()
    assert submit.wait(60) == 0, lab.log("submit.log")[-3000:]


def test_client_host_link_down_right_after_cluster_submit(lab):
    """Expected: the driver finishes without its client; --status asked from another host
    says FINISHED."""
    cluster = _cluster(lab)
    client, other = lab.host("client1"), lab.host("worker1")
    app = write_app(lab.workdir, "runs_app.py", TOKEN)
    out = os.path.join(lab.workdir, "runs")
    os.makedirs(out)
    driver_id = cluster.submit_cluster(client, app, out, "t1", "2")
    lab.link_down(client)
    assert cluster.wait_driver(driver_id, timeout=60)["state"] == "FINISHED"
    st = cluster.status(other, driver_id)
    assert st.returncode == 0 and f"State of {driver_id} is FINISHED" in st.stdout
    assert len(runs(out, "t1")) == 1


def test_worker_work_dir_fills_up(lab):
    """Expected: once a worker's disk (work dir and local dirs) is full, tasks there fail
    with a clear "No space left" reason and are retried elsewhere (the job's result is
    right); the worker stays up; once space is freed, jobs run there again."""
    disk = lab.small_disk("w3disk", "8m")
    cluster = _cluster(lab, work_dirs={"worker3": disk})
    client, w3 = lab.host("client1"), lab.host("worker3")
    app = write_app(lab.workdir, "wc.py", WORDCOUNT)
    text = words_file(os.path.join(lab.workdir, "words.txt"))
    expected = local_expected(text)
    out = os.path.join(lab.workdir, "full.json")
    go = os.path.join(lab.workdir, "go")
    submit = lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           "--conf",
                                "spark.task.maxFailures=8", app, out, text], "submit.log",
                       env={"LAB_GO": go})
    lab.wait_until(lambda: os.path.exists(go + ".ready"), 60, "executors on every host")
    # registered is not yet started: the disk fills once each executor runs its task
    # process (a fork server and its child), so its failures are tasks', not its own start's
    workers = [lab.host(name) for name in cluster.workers]
    lab.wait_until(lambda: all(len(_processes_running(lab, h, "ember.executor.forkserver"))
                               >= 2 for h in workers), 30, "task processes on every host")
    filler = lab.fill(disk)
    open(go, "w").close()
    got = _read_json(out, 120, lab, "result with a full disk", (submit, "submit.log"))
    assert submit.wait(30) == 0, lab.log("submit.log")[-3000:]
    assert got["counts"] == expected["counts"] and got["sorted"] == expected["sorted"]
    assert any("No space left" in f for f in got["failures"]), got["failures"]
    assert cluster.worker_state(w3) == ["ALIVE"]
    os.remove(filler)
    out = os.path.join(lab.workdir, "freed.json")
    r = cluster.submit(client, app, out, text, deploy_mode="client")
    assert r.returncode == 0, r.stderr[-3000:]
    got = _read_json(out, 5, lab, "result after freeing space")
    assert "worker3" in got["hosts"] and got["counts"] == expected["counts"]


def test_kill_9_of_an_executor_a_worker_and_the_driver_during_jobs(lab):
    """Expected: kill -9 of an executor or of a whole worker host's processes mid-job:
    the job completes with the right result; kill -9 of a client-mode driver: its
    application is removed and its executors exit."""
    cluster = _cluster(lab)
    client, w2, w3 = lab.host("client1"), lab.host("worker2"), lab.host("worker3")
    app = write_app(lab.workdir, "slow.py", SLOW_SHUFFLE)
    for victim in ("executor", "worker"):
        out = os.path.join(lab.workdir, f"{victim}.json")
        submit = lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           app, out],
                           f"submit-{victim}.log")
        lab.wait_until(lambda: os.path.exists(out + ".started"), 60, "job started")
        host = w2 if victim == "executor" else w3
        procs = lab.wait_until(lambda: _executor_processes(lab, host), 30, "executor")
        time.sleep(1.0)
        if victim == "executor":
            lab.kill9(procs[0].pid)
        else:
            for p in lab.processes(host):
                lab.kill9(p.pid)
        got = _read_json(out, 120, lab, f"result after kill -9 of the {victim}",
                         (submit, f"submit-{victim}.log"))
        assert [tuple(x) for x in got["sums"]] == SLOW_SHUFFLE_EXPECTED
        assert submit.wait(60) == 0
    cluster.wait_for(lambda j: cluster.worker_state(w3, j) == ["DEAD"], 30, "worker3 DEAD")
    cluster.start_worker(w3)        # the host is rebooted: a new worker registers
    cluster.wait_for(lambda j: j["aliveworkers"] == 3, 60, "worker3 back")

    out = os.path.join(lab.workdir, "driver.json")
    submit = lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           app, out],
                       "submit-driver.log")
    lab.wait_until(lambda: os.path.exists(out + ".started"), 60, "job started")
    for p in lab.processes(client):
        lab.kill9(p.pid)
    cluster.wait_for(lambda j: not j["activeapps"], 30, "application removed")
    lab.wait_until(lambda: not any(_executor_processes(lab, h) for h in (w2,)), 30,
                   "executors of the dead driver exit")
    assert submit.wait(10) == -9


def test_kill_9_of_the_master_with_filesystem_recovery_during_a_job(lab):
    """Expected: kill -9 of the master while a client-mode job runs and a cluster-mode
    driver waits; restarted on its host, it recovers the workers, the job completes with
    the right result and the driver finishes (each exactly once)."""
    recovery = os.path.join(lab.workdir, "recovery")
    cluster = _cluster(lab, conf={"spark.deploy.recoveryMode": "FILESYSTEM",
                                  "spark.deploy.recoveryDirectory": recovery})
    client = lab.host("client1")
    app = write_app(lab.workdir, "slow.py", SLOW_SHUFFLE)
    token = write_app(lab.workdir, "runs_app.py", TOKEN)
    runs_dir = os.path.join(lab.workdir, "runs")
    os.makedirs(runs_dir)
    out = os.path.join(lab.workdir, "slow.json")
    submit = lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           app, out], "submit.log")
    lab.wait_until(lambda: os.path.exists(out + ".started"), 60, "job started")
    driver_id = cluster.submit_cluster(client, token, runs_dir, "m1", "3")
    cluster.master.kill()
    cluster.master.wait(10)
    cluster.start_master()
    cluster.wait_for(lambda j: j.get("status") == "ALIVE" and j.get("aliveworkers") == 3, 60,
                     "recovered master ALIVE with every worker")
    got = _read_json(out, 120, lab, "job result across the master's restart",
                     (submit, "submit.log"))
    assert [tuple(x) for x in got["sums"]] == SLOW_SHUFFLE_EXPECTED
    assert submit.wait(60) == 0, lab.log("submit.log")[-3000:]
    assert cluster.wait_driver(driver_id, timeout=60)["state"] == "FINISHED"
    assert len(runs(runs_dir, "m1")) == 1


def test_200_cluster_submissions_from_4_client_hosts_at_once(tmp_path):
    """Expected: 200 drivers (50 per client host, submitted concurrently) all FINISHED, each
    run exactly once (one side-effect file per token), none lost."""
    names = ["master", "worker1", "worker2", "worker3", "c1", "c2", "c3", "c4"]
    with Lab(str(tmp_path / "lab"), len(names), names=names) as lab:
        _prefixes.append(lab.prefix)
        m, w1, w2, w3 = lab.hosts[:4]
        cluster = LabCluster(lab, m, [w1, w2, w3], cores=4,
                             conf={"spark.worker.timeout": str(TIMEOUT)}).start()
        app = write_app(lab.workdir, "runs_app.py", TOKEN)
        out = os.path.join(lab.workdir, "runs")
        os.makedirs(out)
        per_host = 50
        auth = " ".join(shlex.quote(a) for a in cluster.conf_args())
        script = "; ".join(
            f"python -m ember.cli submit --master {cluster.url} {auth} --deploy-mode cluster "
            f"--driver-memory 64m {app} {out} {{h}}-{i}" for i in range(per_host))
        procs = []
        for h in lab.hosts[4:]:
            procs.append(subprocess.Popen(
                ["ip", "netns", "exec", h.ns, "bash", "-c",
                 f"export PATH={os.path.dirname(os.sys.executable)}:$PATH; "
                 + script.replace("{h}", h.name)],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                env=lab.env(h), start_new_session=True))
            h.procs.append(procs[-1])
        outputs = [p.communicate(timeout=400)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outputs
        ids = [line.split()[0] for o in outputs for line in o.splitlines()
               if line.startswith("driver-")]
        assert len(set(ids)) == 200, outputs
        cluster.wait_for(lambda j: len([d for d in j["completeddrivers"]
                                        if d["state"] == "FINISHED"]) >= 200
                         and not j["activedrivers"], 300, "200 drivers FINISHED")
        files = os.listdir(out)
        tokens = [f.split(".")[0] for f in files]
        assert len(files) == 200 and len(set(tokens)) == 200


def _driver_host(lab: Lab, cluster: LabCluster, driver_id: str):
    d = cluster.wait_driver(driver_id, {"RUNNING"}, 60)
    return next(h for h in lab.hosts if f"-{h.name}-" in d["worker"]), d["worker"]


def test_link_cut_of_a_supervised_drivers_worker_never_runs_two_copies(lab):
    """Expected (SPARK-19900 closed by the master lease): the cut worker kills its driver
    when its lease expires; the master relaunches it elsewhere only after that, once; the
    two copies' lifetimes (timestamps the app writes) never overlap; after the link returns
    the worker re-registers and reported the kill."""
    cluster = _cluster(lab)
    client = lab.host("client1")
    app = write_app(lab.workdir, "runs_app.py", TOKEN)
    out = os.path.join(lab.workdir, "runs")
    os.makedirs(out)
    driver_id = cluster.submit_cluster(client, app, out, "sup", "25", extra=["--supervise"])
    host, first_worker = _driver_host(lab, cluster, driver_id)
    lab.wait_until(lambda: runs(out, "sup"), 30, "first copy started")
    lab.link_down(host)
    cluster.wait_for(lambda j: (cluster.driver(driver_id, j) or {}).get("worker")
                     not in (None, "None", first_worker), 60, "driver relaunched elsewhere")
    lab.link_up(host)
    assert cluster.wait_driver(driver_id, timeout=90)["state"] == "FINISHED"
    copies = runs(out, "sup")
    assert len(copies) == 2, copies
    assert overlap_seconds(*copies) == 0.0, f"two copies ran at once: {copies}"
    cluster.wait_for(lambda j: "ALIVE" in cluster.worker_state(host, j), 60, "re-registered")
    log = lab.log(f"worker-{host.name}.log")
    assert f"killing driver {driver_id}" in log
    lab.wait_until(lambda: "Re-sending the final state RELAUNCHING" in
                   lab.log(f"worker-{host.name}.log"), 30, "kill reported")


def test_sigstop_of_a_worker_host_longer_than_the_timeout(lab):
    """Expected: the frozen worker goes DEAD; its supervised driver is relaunched elsewhere
    once and only once; after SIGCONT the old copy is killed at once (it runs at most a
    moment, never on as a second copy) and the frozen host's executors are killed too."""
    cluster = _cluster(lab)
    client = lab.host("client1")
    app = write_app(lab.workdir, "runs_app.py", TOKEN)
    out = os.path.join(lab.workdir, "runs")
    os.makedirs(out)
    driver_id = cluster.submit_cluster(client, app, out, "frozen", "20", extra=["--supervise"])
    host, first_worker = _driver_host(lab, cluster, driver_id)
    lab.wait_until(lambda: runs(out, "frozen"), 30, "first copy started")
    lab.pause(host)
    cluster.wait_for(lambda j: (cluster.driver(driver_id, j) or {}).get("worker")
                     not in (None, "None", first_worker), 60, "driver relaunched elsewhere")
    assert cluster.worker_state(host) == ["DEAD"]
    time.sleep(2)
    resumed = time.time()
    lab.resume(host)
    assert cluster.wait_driver(driver_id, timeout=90)["state"] == "FINISHED"
    copies = runs(out, "frozen")
    assert len(copies) == 2, copies
    old = min(copies, key=lambda c: c[0])
    assert old[-1] - resumed < 3.0, "the frozen copy kept running after SIGCONT"
    cluster.wait_for(lambda j: "ALIVE" in cluster.worker_state(host, j), 60, "re-registered")


def test_executors_of_a_cut_off_driver_exit_after_the_driver_lease(lab):
    """Expected: the client host running a client-mode driver loses its link mid-job; every
    executor that worked for it exits once the driver has not answered for
    spark.ember.executor.driverLease (4 s here), instead of running on for its vanished
    application."""
    cluster = _cluster(lab)
    client = lab.host("client1")
    app = write_app(lab.workdir, "slow.py", SLOW_SHUFFLE)
    out = os.path.join(lab.workdir, "slow.json")
    lab.spawn(client, ["submit", "--master", cluster.url, *cluster.conf_args(),
                           "--conf",
                       "spark.ember.executor.driverLease=4", app, out], "submit.log",
              env={"LAB_HOLD": "120"})
    lab.wait_until(lambda: os.path.exists(out + ".started"), 60, "job started")
    workers = [lab.host(f"worker{i}") for i in (1, 2, 3)]
    execs = [p for h in workers for p in _executor_processes(lab, h)]
    assert len(execs) == 3
    cut = time.monotonic()
    lab.link_down(client)
    gone, alive = psutil.wait_procs(execs, timeout=30)
    assert not alive, f"executors of the cut-off driver still run: {alive}"
    assert time.monotonic() - cut < 4 + 10 + 5      # lease + one heartbeat period + slack
    assert any("has not answered for" in open(f, errors="replace").read()
               for f in _stderr_files(lab.workdir))


def _stderr_files(root: str) -> list[str]:
    return [os.path.join(d, "stderr") for d, _dirs, files in os.walk(root) if "stderr" in files]
