"""The master's driver admission (Ember; Spark has none): a driver is launched only where it
and one executor of its application fit beside the running drivers and their reservations."""
from __future__ import annotations

from ember.deploy.master.scheduling import executor_reservation
from ember.deploy.master.state import Log
from ember.deploy.messages import Command, DriverDescription, DriverState, LaunchDriver
from tests.test_master_state import msgs, new_master, register_worker, submit_driver


def desc(mem=256, cores=1, **conf):
    opts = [f"-D{k}={v}" for k, v in conf.items()]
    return DriverDescription("file:/apps/pi.py", mem, cores, False,
                             Command("ember.deploy.driver_wrapper",
                                     ["{{WORKER_URL}}", "{{USER_JAR}}", "pi.Main"], {}, [], [],
                                     opts))


def test_reservation_reads_the_submitted_executor_conf():
    assert executor_reservation(desc()) == (1, 1024)
    assert executor_reservation(desc(**{"spark.executor.cores": "2",
                                        "spark.executor.memory": "300m"})) == (2, 300)
    assert executor_reservation(desc(**{"spark.executor.memory": "lots"})) == (1, 1024)


def test_drivers_never_take_the_cores_their_applications_need():
    """Two 2-core workers: Spark launches 4 one-core drivers and then no application ever
    gets a core; here at most 2 run (each keeps a core for an executor), the rest wait
    with the reason logged once and shown in the driver summary."""
    m = new_master()
    register_worker(m, "worker-1", cores=2, memory=4096)
    register_worker(m, "worker-2", cores=2, memory=4096)
    small = {"spark.executor.memory": "256m"}
    outs = [submit_driver(m, desc(**small)) for _ in range(6)]
    launched = [o for _, out in outs for o in msgs(out, LaunchDriver)]
    assert len(launched) == 2
    waiting = [d for d in m.drivers.values() if d.state == DriverState.SUBMITTED and
               d.worker is None]
    assert len(waiting) == 4
    assert all("no room for an executor of its application (1 core(s), 256 MiB)"
               in d.wait_reason for d in waiting)
    logs = [i.text for _, out in outs for i in out if isinstance(i, Log)]
    assert sum("waits: launching it would leave no room" in t for t in logs) == 4
    from ember.deploy.master.state import driver_summary
    assert driver_summary(waiting[0]).waitReason == waiting[0].wait_reason


def test_bigger_executors_reserve_more_and_unfit_executors_keep_the_driver_waiting():
    m = new_master()
    register_worker(m, "worker-1", cores=4, memory=2048)
    _, out = submit_driver(m, desc(**{"spark.executor.cores": "3",
                                      "spark.executor.memory": "512m"}))
    assert len(msgs(out, LaunchDriver)) == 1
    _, out = submit_driver(m, desc(**{"spark.executor.memory": "512m"}))
    assert msgs(out, LaunchDriver) == []            # 1 + 3 reserved: nothing left
    # an executor no worker can ever hold: the driver would hang, so it is not launched
    m = new_master()
    register_worker(m, "worker-1", cores=4, memory=2048)
    _, out = submit_driver(m, desc(**{"spark.executor.memory": "4g"}))
    assert msgs(out, LaunchDriver) == []


def test_admission_can_be_turned_off_for_sparks_behaviour():
    m = new_master({"spark.ember.deploy.driverAdmission.reserveExecutor": "false"})
    register_worker(m, "worker-1", cores=1, memory=4096)
    _, out = submit_driver(m, desc())
    assert len(msgs(out, LaunchDriver)) == 1


def test_max_drivers_still_caps_admitted_drivers():
    m = new_master({"spark.deploy.maxDrivers": "1"})
    register_worker(m, "worker-1", cores=8, memory=8192)
    outs = [submit_driver(m, desc(**{"spark.executor.memory": "256m"})) for _ in range(3)]
    assert sum(len(msgs(out, LaunchDriver)) for _, out in outs) == 1


def test_fifty_cluster_drivers_on_two_small_workers_all_finish_once(tmp_path):
    """Measured on Spark's rules: 4 drivers take all 4 cores and their applications wait
    forever. With admission they run 2 at a time and every one finishes exactly once."""
    import json
    import textwrap
    import time
    import urllib.request

    from tests.cluster import LocalCluster
    marks = tmp_path / "marks.txt"
    app = tmp_path / "tiny.py"
    app.write_text(textwrap.dedent(f"""
        import os, sys
        from ember import SparkContext
        sc = SparkContext(appName="tiny-" + sys.argv[1])
        assert sc.parallelize(range(10), 2).sum() == 45
        sc.stop()
        fd = os.open({str(marks)!r}, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, (sys.argv[1] + "\\n").encode())
        os.close(fd)
    """))
    n = 50
    c = LocalCluster(str(tmp_path / "c"), workers=2, cores=2, memory="1g",
                     conf={"spark.master.rest.enabled": "true"})
    try:
        c.start(timeout=120)                 # a loaded machine starts daemons slowly
        ids = []
        for i in range(n):
            body = {"action": "CreateSubmissionRequest", "appArgs": [str(app), str(i)],
                    "appResource": "", "clientSparkVersion": "4.1.1",
                    "environmentVariables": {},
                    "mainClass": "org.apache.spark.deploy.SparkSubmit",
                    "sparkProperties": {
                        "spark.app.name": f"tiny-{i}", "spark.driver.cores": "1",
                        "spark.driver.memory": "256m", "spark.executor.memory": "256m",
                        "spark.executor.cores": "1", "spark.ui.enabled": "false",
                        "spark.master": c.rest_url}}
            req = urllib.request.Request(
                f"http://127.0.0.1:{c.rest_port}/v1/submissions/create",
                data=json.dumps(body).encode(), method="POST",
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                resp = json.loads(r.read())
            assert resp["success"] is True, resp
            ids.append(resp["submissionId"])
        # while drivers queue, the master UI says why
        with urllib.request.urlopen(f"http://127.0.0.1:{c.master_ui}/", timeout=10) as r:
            page = r.read().decode()
        assert "waiting: launching it would leave no room for an executor" in page
        j = c.json()
        assert len([d for d in j["activedrivers"] if d["state"] == "RUNNING"]) <= 2
        deadline = time.monotonic() + 900
        while True:
            j = c.json()
            done = {d["id"]: d["state"] for d in j["completeddrivers"]}
            if len(done) == n or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert sorted(done) == sorted(ids), f"{len(done)} of {n} drivers finished"
        assert set(done.values()) == {"FINISHED"}, done
        assert "waits: launching it would leave no room" in c.log("master.log")
    finally:
        c.stop()
    lines = marks.read_text().split()
    assert sorted(lines, key=int) == [str(i) for i in range(n)]       # each exactly once
