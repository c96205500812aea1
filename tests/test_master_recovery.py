"""Master recovery with real processes (issue 12): spark.deploy.recoveryMode=FILESYSTEM,
kill -9 of the only master while work runs, restart on the same port; bad records; the
fencing of a deposed master's epoch; recovery mode NONE's clear failure."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

from tests.cluster import LocalCluster, _env, free_port
from tests.test_cluster_mode import ember, submit, wait_driver, write_app

pytestmark = pytest.mark.timeout(300)


def recovery_conf(directory: str, **extra: str) -> dict[str, str]:
    conf = {"spark.deploy.recoveryMode": "FILESYSTEM",
            "spark.deploy.recoveryDirectory": directory,
            "spark.deploy.recoveryTimeout": "30s",
            # these clusters are sized for Spark's placement (a driver may take a worker's
            # last core); admission is tested in test_driver_admission
            "spark.ember.deploy.driverAdmission.reserveExecutor": "false"}
    conf.update(extra)
    return conf


def wait_file(path: str, timeout: float = 60.0) -> None:
    deadline = time.time() + timeout
    while not os.path.exists(path):
        assert time.time() < deadline, f"{path} did not appear in {timeout}s"
        time.sleep(0.1)


def client_job(c: LocalCluster, app: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ember.cli", "submit", "--master", c.url, "--conf",
         "spark.cores.max=2", "--executor-memory", "256m", app, *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def active_driver(j: dict, driver_id: str) -> dict | None:
    return next((d for d in j["activedrivers"] if d["id"] == driver_id), None)


def running_driver(c: LocalCluster, tmp_path, out) -> tuple[str, str]:
    """A cluster-mode driver (1 core) that writes "started" to out/running and runs until
    the file it returns (out/release) exists; its id once it is RUNNING."""
    app = write_app(tmp_path, "running.py", """
        import os, sys, time
        open(sys.argv[1], "a").write("started\\n")
        deadline = time.time() + 200
        while not os.path.exists(sys.argv[2]) and time.time() < deadline:
            time.sleep(0.2)
    """)
    release = str(out / "release")
    driver = submit(c, "--driver-memory", "128m", app, str(out / "running"),
                    release).stdout.split()[0]
    wait_driver(c, driver, {"RUNNING"})
    return driver, release


def test_filesystem_recovery_after_kill_9_of_the_only_master(tmp_path):
    recovery = str(tmp_path / "recovery")
    out = tmp_path / "out"
    out.mkdir()
    with LocalCluster(str(tmp_path / "c"), workers=2, cores=2, memory="2g",
                      conf=recovery_conf(recovery)) as c:
        quick = write_app(tmp_path, "quick.py", """
            from ember import SparkContext
            sc = SparkContext(appName="before-the-crash")
            print("QUICK", sc.parallelize(range(10), 2).sum())
            sc.stop()
        """)
        r = ember("submit", "--master", c.url, "--executor-memory", "256m", quick)
        assert r.returncode == 0 and "QUICK 45" in r.stdout, r.stderr
        done = c.wait_for(lambda j: len(j["completedapps"]) == 1)
        finished_app = done["completedapps"][0]["id"]

        # 1. a cluster-mode driver that runs until released (1 core)
        running, release = running_driver(c, tmp_path, out)
        wait_file(str(out / "running"))

        # 2. a client-mode job that is still running when the master dies
        job = write_app(tmp_path, "job.py", """
            import os, sys, time
            from ember import SparkContext
            sc = SparkContext(appName="through-the-crash")
            marker, go = sys.argv[1], sys.argv[2]
            def slow(x):
                open(marker, "a").close()
                deadline = time.time() + 200
                while not os.path.exists(go) and time.time() < deadline:
                    time.sleep(0.1)
                return x * x
            print("RESULT", sc.parallelize(range(40), 20).map(slow).sum(), flush=True)
            sc.stop()
        """)
        client = client_job(c, job, str(out / "job-started"), str(out / "go"))
        j = c.wait_for(lambda j: any(a["name"] == "through-the-crash" and a["cores"] == 2
                                     for a in j["activeapps"]), 60)
        app_id = next(a["id"] for a in j["activeapps"] if a["name"] == "through-the-crash")

        # 3. a driver that waits for resources (1950m: every worker runs something, so none
        #    has that much free), with an uploaded --py-files resource
        helper = write_app(tmp_path / "libs", "helper.py", "VALUE = 'from-the-upload'\n")
        waiting_app = write_app(tmp_path, "waiting.py", """
            import sys, helper
            open(sys.argv[1], "w").write(helper.VALUE)
        """)
        waiting = submit(c, "--driver-memory", "1950m", "--py-files",
                         helper, waiting_app, str(out / "waiting")).stdout.split()[0]
        assert c.json() and active_driver(c.json(), waiting)["state"] == "SUBMITTED"

        # 4. a REST submission just before the kill: it must run exactly once
        once_app = write_app(tmp_path, "once.py", """
            import sys
            open(sys.argv[1], "a").write("ran\\n")
        """)
        via_rest = submit(c, "--conf", "spark.master.rest.enabled=true", "--driver-memory",
                          "128m", once_app, str(out / "once"), master=c.rest_url)
        assert via_rest.returncode == 0, via_rest.stderr
        once = via_rest.stdout.split()[0]
        wait_file(str(out / "job-started"))

        c.kill_master()
        c.start_master()
        t0 = time.time()
        j = c.wait_for(lambda j: j.get("status") == "ALIVE" and j["aliveworkers"] == 2
                       and any(a["id"] == app_id for a in j["activeapps"]), 30)
        assert time.time() - t0 < 30
        log = c.log("master.log")
        assert "Recovery complete in" in log and "resuming operations!" in log
        assert [a["id"] for a in j["completedapps"]][:1] == [finished_app]
        assert active_driver(j, running)["state"] == "RUNNING"
        assert active_driver(j, waiting)["state"] == "SUBMITTED"
        assert any(d["id"] == once for d in j["activedrivers"] + j["completeddrivers"])

        # the client job completes with the right answer, on the same application id
        open(out / "go", "w").close()
        stdout, stderr = client.communicate(timeout=120)
        assert client.returncode == 0, stderr[-3000:]
        assert "RESULT 20540" in stdout
        j = c.wait_for(lambda j: any(a["id"] == app_id and a["state"] == "FINISHED"
                                     for a in j["completedapps"]), 30)

        # the waiting driver launches once cores are free, with its uploaded resource
        assert wait_driver(c, waiting, timeout=90)["state"] == "FINISHED"
        assert (out / "waiting").read_text() == "from-the-upload"
        assert wait_driver(c, once, timeout=60)["state"] == "FINISHED"
        assert (out / "once").read_text() == "ran\n"
        open(release, "w").close()
        assert wait_driver(c, running, timeout=60)["state"] == "FINISHED"
        assert (out / "running").read_text() == "started\n"      # never relaunched
        # --status and logs through a list of master URLs (one of them down)
        listed = f"spark://127.0.0.1:{free_port()},127.0.0.1:{c.master_port}"
        st = ember("submit", "--master", listed, "--status", waiting)
        assert f"State of {waiting} is FINISHED" in st.stdout, st.stderr
        logs = ember("logs", once, "--master", listed)
        assert logs.returncode == 0, logs.stderr
        metrics = urllib.request.urlopen(
            f"http://127.0.0.1:{c.master_ui}/metrics/prometheus", timeout=10).read().decode()
        assert "ember_master_leader 1" in metrics and "ember_master_leader_epoch 2" in metrics
        assert "ember_master_last_recovery_duration_seconds 0." in metrics

        # everything completed survives a second restart too (retained lists)
        c.kill_master()
        c.start_master()
        j = c.wait_for(lambda j: j.get("status") == "ALIVE" and j["aliveworkers"] == 2, 30)
        assert {finished_app, app_id} <= {a["id"] for a in j["completedapps"]}
        assert {running, waiting, once} <= {d["id"] for d in j["completeddrivers"]}


def test_bad_records_are_logged_and_skipped(tmp_path):
    from ember.deploy.master.persistence import FileSystemPersistenceEngine, encode_record
    recovery = tmp_path / "recovery"
    engine = FileSystemPersistenceEngine(str(recovery))
    (recovery / "app_corrupt").write_bytes(b"\x81\xa7version\x01\xa6record\xc1")
    good = encode_record({"id": "x"})
    (recovery / "driver_truncated").write_bytes(good[:-3])
    (recovery / "worker_future").write_bytes(
        encode_record({"id": "x"}).replace(b"\xa7version\x01", b"\xa7version\x63"))
    (recovery / "worker_fields").write_bytes(encode_record({"id": 5}))
    engine.close()
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1, memory="1g",
                      conf=recovery_conf(str(recovery))) as c:
        app = write_app(tmp_path, "hello.py", "print('still works')\n")
        r = submit(c, "--follow", "--driver-memory", "128m", app)
        assert r.returncode == 0 and "still works" in r.stdout, r.stderr
        log = c.log("master.log")
        for name in ("app_corrupt", "driver_truncated", "worker_future", "worker_fields"):
            assert f"Skipping record {name}" in log, log[-3000:]
        assert "unknown record version 99" in log


def test_unwritable_recovery_directory_and_unknown_mode(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    r = ember("master", "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
              "--conf", "spark.deploy.recoveryMode=FILESYSTEM",
              "--conf", f"spark.deploy.recoveryDirectory={blocker}/sub", timeout=60)
    assert r.returncode == 1
    errors = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "recovery directory" in errors[0] and "Traceback" not in r.stderr
    with LocalCluster(str(tmp_path / "c"), workers=0,
                      conf={"spark.deploy.recoveryMode": "SOMETHING"}) as c:
        assert c.json()["status"] == "ALIVE"
        assert "Unknown spark.deploy.recoveryMode 'SOMETHING'" in c.log("master.log")


def test_without_recovery_a_driver_whose_master_restarted_fails_clearly(tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=2, memory="2g") as c:
        job = write_app(tmp_path, "job.py", """
            import sys, time
            from ember import SparkContext
            sc = SparkContext(appName="orphan")
            marker = sys.argv[1]
            def slow(x):
                open(marker, "a").close()
                time.sleep(1)
                return x
            print("RESULT", sc.parallelize(range(200), 100).map(slow).sum(), flush=True)
        """)
        started = str(tmp_path / "started")
        client = client_job(c, job, started)
        wait_file(started)
        c.kill_master()
        c.start_master()
        c.wait_for(lambda j: j.get("status") == "ALIVE", 30)
        t0 = time.time()
        stdout, stderr = client.communicate(timeout=120)
        assert time.time() - t0 < 60
        assert client.returncode != 0
        assert "Master removed our application" in stderr, stderr[-3000:]


class ManualAgent:
    """A LeaderElectionAgent the test drives: elect(epoch) / revoke() when it says so."""

    def start(self, on_elected, on_revoked) -> None:
        self.elect, self.revoke = on_elected, on_revoked

    def stop(self) -> None:
        pass


def test_standby_answers_like_spark_and_clients_find_the_leader(tmp_path):
    from ember.deploy.client import RpcGateway
    from ember.deploy.master.master import Master, start_master
    from ember.deploy.master.persistence import BlackHolePersistenceEngine
    from ember.deploy.messages import (RecoveryState, RequestMasterState, RequestReadyz,
                                       RequestSubmitDriver)
    from ember.deploy.submission import SubmitError
    from ember.rpc import RpcEnv
    from tests.test_master_state import driver_desc

    env = RpcEnv.create("sparkMaster", "127.0.0.1", 0, {})
    agent = ManualAgent()
    standby = Master(env, {}, web_ui_url="http://standby:8080", web_ui_port=0,
                     engine=BlackHolePersistenceEngine(), agent=agent)
    env.setup_endpoint("Master", standby)
    leader = start_master("127.0.0.1", 0, 0, {"spark.master.rest.enabled": "false"})
    client = RpcEnv.create("test", "127.0.0.1", 0, {}, client_mode=True)
    both = f"spark://{env.address.host_port},{leader.rpc_env.address.host_port}"
    gateways = []
    try:
        sref = client.endpoint_ref(env.address, "Master")
        assert sref.ask_sync(RequestReadyz(), timeout=10) is False
        refused = sref.ask_sync(RequestSubmitDriver(driver_desc()), timeout=10)
        assert refused.message == ("Current state is not alive: STANDBY. Can only accept "
                                   "driver submissions in ALIVE state.")
        gw = RpcGateway(both, {})
        gateways.append(gw)
        driver_id = gw.submit({}, _app_spec(tmp_path), "file:/x.py", {})
        assert gw.status(driver_id).state == "SUBMITTED"          # answered by the leader
        assert gw.kill(driver_id)[0] is True
        # only a standby: the client waits for a leader (bounded), which then answers
        alone = RpcGateway(f"spark://{env.address.host_port}", {"spark.rpc.askTimeout": "20s"})
        gateways.append(alone)
        threading.Timer(1.0, agent.elect, args=(4,)).start()
        later = alone.submit({}, _app_spec(tmp_path), "file:/x.py", {})
        assert later.startswith("driver-")
        state = sref.ask_sync(RequestMasterState(), timeout=10)
        assert (state.status, state.epoch) == (RecoveryState.ALIVE, 4)
        # leadership revoked: STANDBY again, without exiting, forgetting the cluster
        agent.revoke()
        deadline = time.time() + 10
        while sref.ask_sync(RequestMasterState(), timeout=10).status != RecoveryState.STANDBY:
            assert time.time() < deadline
            time.sleep(0.05)
        assert sref.ask_sync(RequestMasterState(), timeout=10).activeDrivers == []
        with pytest.raises(SubmitError, match="not alive: STANDBY"):
            RpcGateway(f"spark://{env.address.host_port}",
                       {"spark.rpc.askTimeout": "1s"}).submit({}, _app_spec(tmp_path),
                                                              "file:/x.py", {})
    finally:
        for gw in gateways:
            gw.close()
        client.shutdown()
        leader.stop()
        env.shutdown()


def _app_spec(tmp_path):
    from ember.deploy.submission import AppSpec
    return AppSpec(main=str(tmp_path / "x.py"), args=[])


def test_a_driver_whose_master_never_comes_back_gives_up_within_the_reconnect_timeout(
        tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=2, memory="2g") as c:
        job = write_app(tmp_path, "job.py", """
            import sys, time
            from ember import SparkContext
            sc = SparkContext(appName="abandoned")
            marker = sys.argv[1]
            def slow(x):
                open(marker, "a").close()
                time.sleep(1)
                return x
            print("RESULT", sc.parallelize(range(200), 100).map(slow).sum(), flush=True)
        """)
        started = str(tmp_path / "started")
        client = subprocess.Popen(
            [sys.executable, "-m", "ember.cli", "submit", "--master", c.url, "--conf",
             "spark.ember.appClient.reconnectTimeout=3s", "--executor-memory", "256m", job,
             started], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
        wait_file(started)
        c.kill_master()
        t0 = time.time()
        stdout, stderr = client.communicate(timeout=120)
        assert time.time() - t0 < 60
        assert client.returncode != 0
        assert "All masters are unresponsive! Giving up." in stderr, stderr[-3000:]


def test_a_submission_the_store_cannot_write_is_refused_then_retried(tmp_path):
    """The recovery directory is swapped for a file and the journal is full: the record
    cannot be written (compacting the journal into files fails), so the submission is
    answered with a failure and nothing runs; the client asks again, and once the directory
    is back the submission is recorded before it is acknowledged."""
    from ember.deploy.client import RpcGateway
    from ember.deploy.master.master import Master
    from ember.deploy.master.persistence import FileSystemPersistenceEngine, MonarchyLeaderAgent
    from ember.deploy.messages import NOT_RECORDED_PREFIX, RequestSubmitDriver
    from ember.deploy.submission import SubmitError
    from ember.rpc import RpcEnv
    from tests.test_master_state import driver_desc

    recovery, moved = tmp_path / "recovery", tmp_path / "moved"
    env = RpcEnv.create("sparkMaster", "127.0.0.1", 0, {})
    # Room for one driver record: every second write compacts the journal into files.
    engine = FileSystemPersistenceEngine(str(recovery), journal_capacity=1024)
    master = Master(env, {}, web_ui_url="http://m:8080", web_ui_port=0, engine=engine,
                    agent=MonarchyLeaderAgent())
    env.setup_endpoint("Master", master)
    client = RpcEnv.create("test", "127.0.0.1", 0, {}, client_mode=True)
    url = f"spark://{env.address.host_port}"
    try:
        assert master.ready.wait(30)
        ref = client.endpoint_ref(env.address, "Master")
        first = ref.ask_sync(RequestSubmitDriver(driver_desc()), timeout=10)
        assert first.success
        os.rename(recovery, moved)
        recovery.write_text("not a directory")
        refused = ref.ask_sync(RequestSubmitDriver(driver_desc()), timeout=10)
        assert not refused.success and refused.message.startswith(NOT_RECORDED_PREFIX)
        assert list(master.state.drivers) == [first.driverId]
        with pytest.raises(SubmitError, match="Could not record"):
            RpcGateway(url, {"spark.rpc.askTimeout": "1s"}).submit(
                {}, _app_spec(tmp_path), "file:/x.py", {})

        def restore() -> None:
            os.remove(recovery)
            os.rename(moved, recovery)
        threading.Timer(1.0, restore).start()
        gw = RpcGateway(url, {"spark.rpc.askTimeout": "20s"})
        try:
            driver_id = gw.submit({}, _app_spec(tmp_path), "file:/x.py", {})
        finally:
            gw.close()
        assert list(master.state.drivers) == [first.driverId, driver_id]
        stored = FileSystemPersistenceEngine(str(recovery)).read_all()
        assert sorted(k for k in stored if k.startswith("driver_")) == sorted(
            [f"driver_{first.driverId}", f"driver_{driver_id}"])
    finally:
        client.shutdown()
        env.shutdown()
        env.await_termination(10)
        engine.close()


def test_a_master_that_cannot_read_its_records_does_not_lead_without_them(tmp_path, caplog):
    """The records cannot be read at the election (the directory is swapped for a file):
    the master gives the leadership back and stands again instead of going ALIVE empty;
    once the directory is back it recovers the stored driver."""
    from ember.deploy.master.master import Master
    from ember.deploy.master.persistence import FileSystemPersistenceEngine, MonarchyLeaderAgent
    from ember.deploy.master.records import driver_record
    from ember.deploy.master.scheduling import DriverInfo
    from ember.deploy.messages import RecoveryState
    from ember.rpc import RpcEnv
    from tests.test_master_state import driver_desc

    recovery, moved = tmp_path / "recovery", tmp_path / "moved"
    engine = FileSystemPersistenceEngine(str(recovery))
    engine.persist("driver_driver-20250101000000-0007",
                   driver_record(DriverInfo(1, "driver-20250101000000-0007", driver_desc(), 1)))
    os.rename(recovery, moved)
    recovery.write_text("not a directory")
    env = RpcEnv.create("sparkMaster", "127.0.0.1", 0, {})
    master = Master(env, {}, web_ui_url="http://m:8080", web_ui_port=0, engine=engine,
                    agent=MonarchyLeaderAgent(str(tmp_path / "epoch")))
    try:
        caplog.set_level("ERROR", logger="ember.deploy.master.Master")
        env.setup_endpoint("Master", master)
        assert master.ready.wait(30)
        deadline = time.time() + 30
        while "giving up leadership" not in caplog.text:
            assert time.time() < deadline, caplog.text
            time.sleep(0.05)
        assert master.state.state == RecoveryState.STANDBY
        os.remove(recovery)
        os.rename(moved, recovery)
        while master.state.state != RecoveryState.ALIVE:
            assert time.time() < deadline
            time.sleep(0.05)
        assert list(master.state.drivers) == ["driver-20250101000000-0007"]
        assert master.state.epoch >= 2
    finally:
        env.shutdown()
        env.await_termination(10)
        engine.close()


def test_a_recovery_directory_removed_under_the_master_is_written_again(tmp_path):
    """Removed under a running master (a temp-directory cleaner), the store's journal took
    every later write into a file no restart reads, so a restart recovered nothing: not
    the running driver, not one completed app. The master writes its records there again."""
    recovery = str(tmp_path / "recovery")
    out = tmp_path / "out"
    out.mkdir()
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=2, memory="1g",
                      conf=recovery_conf(recovery)) as c:
        def quick(name: str) -> None:
            app = write_app(tmp_path, f"{name}.py", f"""
                from ember import SparkContext
                sc = SparkContext(appName="{name}")
                print("SUM", sc.parallelize(range(10), 2).sum())
                sc.stop()
            """)
            r = ember("submit", "--master", c.url, "--executor-memory", "256m", app)
            assert r.returncode == 0 and "SUM 45" in r.stdout, r.stderr

        quick("before")
        running, release = running_driver(c, tmp_path, out)
        shutil.rmtree(recovery)
        quick("after")
        c.wait_for(lambda j: len(j["completedapps"]) == 2)
        assert "The recovery journal in" in c.log("master.log")

        c.kill_master()
        c.start_master()
        j = c.wait_for(lambda j: j.get("status") == "ALIVE" and j["aliveworkers"] == 1, 30)
        assert sorted(a["name"] for a in j["completedapps"]) == ["after", "before"]
        assert active_driver(j, running)["state"] == "RUNNING"
        open(release, "w").close()
        assert wait_driver(c, running, timeout=60)["state"] == "FINISHED"
        assert (out / "running").read_text() == "started\n"      # never relaunched
