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
               in d.waitReason for d in waiting)
    logs = [i.text for _, out in outs for i in out if isinstance(i, Log)]
    assert sum("waits: launching it would leave no room" in t for t in logs) == 4
    from ember.deploy.master.state import driver_summary
    assert driver_summary(waiting[0]).waitReason == waiting[0].waitReason


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
