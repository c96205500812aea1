"""Standby masters with spark.deploy.recoveryMode=ZOOKEEPER, real processes and a real
ZooKeeper server (issue 12's "must show" list for ZOOKEEPER): kill -9 of the leader during
a cluster-mode job, a waiting driver launching after failover with its uploaded resources,
a ZooKeeper outage under a live leader, and a deposed leader that cannot launch anything."""
from __future__ import annotations

import glob
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.request

import psutil
import pytest

from ember.deploy.local_ha_cluster import LocalHACluster
from tests.test_cluster_mode import driver_processes, ember, write_app

pytestmark = pytest.mark.timeout(300)
FINAL = {"FINISHED", "FAILED", "ERROR", "KILLED"}

# A job whose tasks hold until the test creates the file `go` (so a failover happens while it
# runs), then a result that proves every partition ran once.
GATED_JOB = """
    import os, sys, time
    from ember import SparkContext
    go = sys.argv[1]
    sc = SparkContext(appName="ha-job")

    def gated(it):
        open(go + ".started", "a").close()
        deadline = time.time() + 150
        while not os.path.exists(go) and time.time() < deadline:
            time.sleep(0.1)
        return [sum(it)]

    print("TOTAL", sum(sc.parallelize(range(1000), 2).mapPartitions(gated).collect()),
          flush=True)
    sc.stop()
"""


@pytest.fixture
def ha(zookeeper, tmp_path):
    clusters = []

    def make(**kw) -> LocalHACluster:
        conf = {"spark.worker.timeout": "30",
                # sized for Spark's placement; admission is tested in test_driver_admission
                "spark.ember.deploy.driverAdmission.reserveExecutor": "false"}
        conf.update(kw.pop("conf", {}))
        c = LocalHACluster(str(tmp_path / f"ha{len(clusters)}"), zookeeper.url, conf=conf,
                           **kw)
        clusters.append(c)
        return c.start()

    yield make
    for c in clusters:
        c.stop()


def wait_until(pred, timeout=60.0, what="condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"{what} not reached in {timeout}s")


def find_driver(j: dict, driver_id: str) -> dict | None:
    return next((d for d in j["activedrivers"] + j["completeddrivers"] if d["id"] == driver_id),
                None)


def wait_driver(c: LocalHACluster, driver_id: str, states=FINAL, timeout=120.0) -> dict:
    j = c.wait_for(lambda j: (find_driver(j, driver_id) or {}).get("state") in states, timeout)
    return find_driver(j, driver_id)


def _cwd(p: psutil.Process) -> str:
    try:
        return os.path.realpath(p.cwd())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return ""


def worker_log_count(c: LocalHACluster, text: str) -> int:
    return sum(c.log(os.path.basename(p)).count(text)
               for p in glob.glob(os.path.join(c.workdir, "worker-*.log")))


def submit_gated(c: LocalHACluster, tmp_path, *extra: str) -> tuple[str, str]:
    app = write_app(tmp_path / "app", "ha_job.py", GATED_JOB)
    go = str(tmp_path / "go")
    r = ember("submit", "--master", c.url, "--deploy-mode", "cluster", *extra, app, go)
    assert r.returncode == 0, r.stderr
    driver_id = r.stdout.split()[0]
    assert driver_id.startswith("driver-"), r.stdout
    wait_until(lambda: os.path.exists(go + ".started"), 120, "the job's tasks running")
    return driver_id, go


def test_kill_9_of_the_leader_during_a_cluster_mode_job(ha, tmp_path):
    c = ha(masters=3, workers=2)
    driver_id, go = submit_gated(c, tmp_path)
    old = c.leader()
    app_id = c.json()["activeapps"][0]["id"]
    c.kill_master(old)
    new = c.wait_for_leader(60, exclude=(old,))
    assert new != old
    j = c.wait_for(lambda j: j["aliveworkers"] == 2
                   and any(a["id"] == app_id for a in j["activeapps"])
                   and (find_driver(j, driver_id) or {}).get("state") == "RUNNING", 60)
    assert j["url"].endswith(str(c.master_ports[new]))
    open(go, "w").close()
    assert wait_driver(c, driver_id)["state"] == "FINISHED"
    logs = ember("logs", driver_id, "--master", c.url)
    assert "TOTAL 499500" in logs.stdout, logs.stdout + logs.stderr
    # --status through the list of URLs: only the new leader can answer it.
    st = ember("submit", "--master", c.url, "--status", driver_id)
    assert st.returncode == 0 and f"State of {driver_id} is FINISHED" in st.stdout, st.stderr
    assert worker_log_count(c, f"Asked to launch driver {driver_id}") == 1
    # The old leader, restarted, joins as a standby.
    c.start_master(old)
    assert c.wait_master_status(old, ("STANDBY",)) == "STANDBY"
    assert c.leader() == new
    # Every master's /json and UI page name the leader (issue 12 item 6).
    leader_url = f"spark://127.0.0.1:{c.master_ports[new]}"
    for i in (old, new):
        assert c.master_json(i, "/json/leaderurl") == {"leaderurl": leader_url}
        with urllib.request.urlopen(f"http://127.0.0.1:{c.master_uis[i]}/", timeout=5) as r:
            assert leader_url in r.read().decode()


def test_a_waiting_driver_launches_after_failover_with_its_uploaded_resources(ha, tmp_path):
    c = ha(masters=2, workers=0)
    private = tmp_path / "private"
    write_app(private, "helper_mod.py", "GREETING = 'resources survived the failover'\n")
    app = write_app(private, "uses_helper.py", """
        import helper_mod
        print("HELPER", helper_mod.GREETING, flush=True)
    """)
    r = ember("submit", "--master", c.url, "--deploy-mode", "cluster", "--py-files",
              str(private / "helper_mod.py"), app)
    assert r.returncode == 0, r.stderr
    driver_id = r.stdout.split()[0]
    assert find_driver(c.json(), driver_id)["state"] == "SUBMITTED"
    shutil.rmtree(private)  # nothing but ZooKeeper holds the uploaded files now
    old = c.leader()
    c.kill_master(old)
    c.wait_for_leader(60, exclude=(old,))
    c.wait_for(lambda j: (find_driver(j, driver_id) or {}).get("state") == "SUBMITTED", 60)
    c.add_worker()
    assert wait_driver(c, driver_id)["state"] == "FINISHED"
    out = ember("logs", driver_id, "--master", c.url)
    assert "HELPER resources survived the failover" in out.stdout, out.stdout + out.stderr


def test_zookeeper_outage_under_a_live_leader(ha, zookeeper, tmp_path):
    # A longer session than the default, so that "shorter than the session timeout" holds
    # with room to spare for the server's restart on a loaded machine.
    c = ha(masters=3, workers=2, conf={"spark.ember.deploy.zookeeper.sessionTimeout": "6s"})
    driver_id, go = submit_gated(c, tmp_path)
    leader = c.leader()
    executors_before = worker_log_count(c, "Asked to launch executor")
    # Shorter than the session timeout: leadership is kept, nothing changes.
    with zookeeper.outage(1.0):
        pass
    time.sleep(2.0)
    assert c.leader() == leader
    # Longer: the leader gives leadership up; afterwards exactly one master leads.
    with zookeeper.outage(9.0):
        pass
    assert all(p.poll() is None for p in c.masters), "a master exited"
    c.wait_for_leader(60)
    for _ in range(10):  # and it stays that way
        assert sum(s == "ALIVE" for s in c.statuses()) == 1, c.statuses()
        time.sleep(0.3)
    c.wait_for(lambda j: j["aliveworkers"] == 2
               and (find_driver(j, driver_id) or {}).get("state") == "RUNNING", 60)
    open(go, "w").close()
    assert wait_driver(c, driver_id)["state"] == "FINISHED"
    assert "TOTAL 499500" in ember("logs", driver_id, "--master", c.url).stdout
    # Nothing was launched twice: one driver, no executor beyond the job's first ones.
    assert worker_log_count(c, f"Asked to launch driver {driver_id}") == 1
    assert worker_log_count(c, "Asked to launch executor") == executors_before
    assert all(p.poll() is None for p in c.masters), "a master exited"


def rest_create(port: int, app: str, master_url: str) -> dict:
    body = {"action": "CreateSubmissionRequest", "appArgs": [app], "appResource": "",
            "clientSparkVersion": "4.1.1", "environmentVariables": {},
            "mainClass": "org.apache.spark.deploy.SparkSubmit",
            "sparkProperties": {"spark.app.name": "deposed", "spark.driver.cores": "1",
                                "spark.driver.memory": "512m", "spark.master": master_url}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/submissions/create",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")


def test_a_deposed_leader_cannot_launch_a_driver(ha, zookeeper, tmp_path):
    """The leader is paused (SIGSTOP) until its session expires and a standby leads; it is
    resumed while ZooKeeper is briefly down, so it still believes it leads, and given a
    submission: its fenced record write fails, so it refuses the submission and sends
    nothing (had it acknowledged it, the worker would refuse its LaunchDriver by epoch);
    nothing runs."""
    c = ha(masters=2, workers=1)
    app = write_app(tmp_path, "deposed.py", "print('SHOULD NOT RUN')\n")
    old = c.leader()
    c.pause_master(old)
    try:
        new = c.wait_for_leader(60, exclude=(old,))
        wait_until(lambda: c.master_json(new)["aliveworkers"] == 1, 60, "worker re-registered")
    finally:
        zookeeper.stop()
        c.resume_master(old)
    answer: dict = {}
    t = threading.Thread(target=lambda: answer.update(
        rest_create(c.rest_ports[old], app, f"spark://127.0.0.1:{c.rest_ports[old]}")))
    try:
        time.sleep(0.3)
        t.start()
        time.sleep(1.0)
    finally:
        zookeeper.start()
    t.join(90)
    # Whoever leads now (the outage may have moved leadership again), exactly one does.
    c.wait_for_leader(60)
    assert all(p.poll() is None for p in c.masters), "a master exited"
    if answer.get("success"):
        driver_id = answer["submissionId"]
        # The deposed master believed it could launch; the worker refused it: by channel
        # (it is no longer the master the worker follows) or, failing that, by its epoch.
        wait_until(lambda: worker_log_count(c, "Refusing LaunchDriver from"),
                   30, "the worker's refusal")
        time.sleep(2.0)
        # this cluster's only: driver ids are per-second, another cluster on the machine
        # may run a driver with the same id at the same time
        assert not [p for p in driver_processes(driver_id)
                    if _cwd(p).startswith(os.path.realpath(c.workdir))]
        assert worker_log_count(c, f"Asked to launch driver {driver_id}") == 0
        assert find_driver(c.json(), driver_id) is None
    else:
        # Its record write was refused (NotLeaderError / ZooKeeper down), so it changed
        # nothing; or it had already learned it was deposed and refused as a standby.
        message = answer.get("message", "")
        assert ("Could not record the submission" in message
                or "not alive" in message.lower()), answer
        assert worker_log_count(c, "Asked to launch driver") == 0
    outputs = glob.glob(os.path.join(c.workdir, "**", "stdout"), recursive=True)
    assert not any("SHOULD NOT RUN" in open(p, errors="replace").read() for p in outputs)


def test_master_starts_as_standby_while_zookeeper_is_unreachable(tmp_path):
    """One line per attempt naming the URL, no traceback; it leads once ZooKeeper is up."""
    from ember.deploy.local_cluster import free_port
    from ember.deploy.local_zookeeper import LocalZooKeeper
    server = LocalZooKeeper(str(tmp_path / "zk"), port=free_port())
    c = LocalHACluster(str(tmp_path / "c"), server.url, masters=1, workers=0)
    try:
        c.start_master(0)
        assert c.wait_master_status(0, ("STANDBY",)) == "STANDBY"
        line = f"Cannot connect to ZooKeeper at {server.url} (spark.deploy.zookeeper.url)"
        wait_until(lambda: line in c.log("master-0.log"), 60, "the connection error")
        server.start()
        assert c.wait_master_status(0, ("ALIVE",)) == "ALIVE"
        log = c.log("master-0.log")
        assert "Traceback" not in log and "kazoo" not in log
        bad = ember("master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--conf", "spark.deploy.recoveryMode=ZOOKEEPER",
                    "--conf", f"spark.deploy.zookeeper.url={server.url}",
                    "--conf", "spark.deploy.zookeeper.dir=relative/path")
        assert bad.returncode == 1
        assert bad.stderr.strip().splitlines()[-1] == (
            "Error: spark.deploy.zookeeper.dir must be an absolute ZooKeeper path like "
            "/spark, but was 'relative/path'")
    finally:
        c.stop()
        server.destroy()
