"""Driver fencing by lease (SPARK-19900), the pure parts: the worker's MasterLease, the
master's relaunch time for a lost worker's supervised driver, the heartbeat ask that renews
the lease, and the configuration key. The process test is in test_multihost.py."""
from __future__ import annotations

import pytest

from ember.deploy.fencing import LEASE_GRACE_MS, MasterLease, relaunch_not_before_ms
from ember.deploy.master.state import Ask, LeaseExpired, MasterConfig, Reply, ScheduleTimer
from ember.deploy.messages import (CheckForWorkerTimeOut, DriverState, Heartbeat,
                                   HeartbeatResponse, LaunchDriver)
from ember.deploy.worker.config import WorkerConf
from tests.test_master_state import (NOW, driver_desc, msgs, new_master, register_worker,
                                     submit_driver)


def test_lease_expires_only_after_the_lease_since_the_last_renewal():
    lease = MasterLease(4.0)
    assert not lease.expired(1e9)                 # never registered: nothing to fence
    lease.renew(100.0)
    assert not lease.expired(104.0) and lease.expired(104.01)
    lease.renew(99.0)                              # a late answer to an older heartbeat
    assert lease.renewed_at == 100.0
    lease.renew(103.0)
    assert not lease.expired(106.0) and lease.silent_for(106.0) == 3.0
    assert MasterLease(60.0).check_interval == 1.0 and MasterLease(2.0).check_interval == 0.5


def test_master_waits_for_the_lease_plus_grace_after_the_last_heartbeat():
    assert relaunch_not_before_ms(10_000, 4_000) == 14_000 + LEASE_GRACE_MS


def test_lease_key_defaults_to_the_worker_timeout_and_rejects_nonsense():
    assert WorkerConf.from_conf({"spark.worker.timeout": "7"}).master_lease == 7.0
    assert WorkerConf.from_conf({"spark.ember.worker.masterLease": "3s"}).master_lease == 3.0
    assert MasterConfig.from_conf({"spark.worker.timeout": "7"}).worker_lease_ms == 7_000
    assert MasterConfig.from_conf({"spark.ember.worker.masterLease": "3"}).worker_lease_ms \
        == 3_000
    with pytest.raises(ValueError, match="spark.ember.worker.masterLease"):
        WorkerConf.from_conf({"spark.ember.worker.masterLease": "0"})
    with pytest.raises(ValueError, match="spark.ember.worker.masterLease"):
        MasterConfig.from_conf({"spark.ember.worker.masterLease": "-1"})


def test_heartbeat_ask_is_answered_true_only_for_a_registered_worker():
    m = new_master({"spark.worker.timeout": "4"})
    ref, _ = register_worker(m, "worker-1")
    out = m.handle(Ask("req", Heartbeat("worker-1", ref)), NOW + 1_000)
    assert Reply("req", HeartbeatResponse(True, m.epoch)) in out
    m.handle(CheckForWorkerTimeOut(), NOW + 10_000)          # now DEAD
    out = m.handle(Ask("req2", Heartbeat("worker-1", ref)), NOW + 10_001)
    assert Reply("req2", HeartbeatResponse(False, m.epoch)) in out


def test_a_lost_workers_supervised_driver_is_relaunched_once_after_its_lease():
    m = new_master({"spark.worker.timeout": "4", "spark.ember.worker.masterLease": "6"})
    w1, _ = register_worker(m, "worker-1")
    sup, _ = submit_driver(m, driver_desc(supervise=True))
    assert m.drivers[sup.driverId].worker.id == "worker-1"
    m.handle(Heartbeat("worker-1", w1), NOW + 1_000)
    w2, _ = register_worker(m, "worker-2", host="10.0.0.2", now=NOW + 2_000)
    m.handle(Heartbeat("worker-2", w2), NOW + 5_000)
    out = m.handle(CheckForWorkerTimeOut(), NOW + 5_001)        # worker-1 lost
    driver = m.drivers[sup.driverId]
    assert driver.state == DriverState.SUBMITTED and driver.worker is None
    due = NOW + 1_000 + 6_000 + LEASE_GRACE_MS
    assert ScheduleTimer(due - (NOW + 5_001), LeaseExpired(sup.driverId), None) in out
    # any scheduling before then (a new worker, a heartbeat timer) leaves it waiting
    register_worker(m, "worker-3", host="10.0.0.3", now=NOW + 6_000)
    assert driver.worker is None
    out = m.handle(LeaseExpired(sup.driverId), due)
    assert [x.driverId for x in msgs(out, LaunchDriver)] == [sup.driverId]
    assert driver.attempt == 2 and driver.state == DriverState.RUNNING
    assert not msgs(m.handle(LeaseExpired(sup.driverId), due + 1), LaunchDriver)


def test_a_driver_its_worker_killed_at_lease_expiry_is_relaunched_at_once_if_supervised():
    """The worker reports such a kill as RELAUNCHING (the copy is gone): a supervised driver
    is placed again without waiting (e.g. after a master restart longer than the lease), an
    unsupervised one ends in ERROR with the reason; a stale attempt's report changes
    nothing."""
    from ember.deploy.messages import DriverStateChanged
    m = new_master()
    register_worker(m, "worker-1")
    sup, _ = submit_driver(m, driver_desc(supervise=True))
    plain, _ = submit_driver(m, driver_desc(supervise=False))
    why = "Killed by worker worker-1: no master answered within spark.ember.worker.masterLease"
    out = m.handle(DriverStateChanged(sup.driverId, DriverState.RELAUNCHING, why, -9, 1), NOW)
    assert [x.driverId for x in msgs(out, LaunchDriver)] == [sup.driverId]
    assert m.drivers[sup.driverId].attempt == 2
    out = m.handle(DriverStateChanged(sup.driverId, DriverState.RELAUNCHING, why, -9, 1), NOW)
    assert not msgs(out, LaunchDriver) and m.drivers[sup.driverId].attempt == 2
    m.handle(DriverStateChanged(plain.driverId, DriverState.RELAUNCHING, why, -9, 1), NOW)
    (done,) = [d for d in m.completed_drivers if d.id == plain.driverId]
    assert done.state == DriverState.ERROR and done.exception == why
