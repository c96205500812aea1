"""The driver's HeartbeatReceiver as pure state (Spark's HeartbeatReceiverSuite, in Ember's
terms) and Spark's checks of the settings it reads; tests/test_standalone.py stops a real
executor process."""
from __future__ import annotations

import pytest

from ember import SparkConf, SparkContext
from ember.errors import IllegalArgumentException
from ember.scheduler.heartbeat_receiver import HeartbeatReceiver, HeartbeatSettings


def receiver(timeout: float = 120.0, interval: float = 60.0, now: float = 0.0):
    return HeartbeatReceiver(HeartbeatSettings(timeout, interval), now)


def test_settings_are_sparks_defaults_and_follow_spark_network_timeout():
    assert HeartbeatSettings.from_conf({}) == HeartbeatSettings(120.0, 60.0)
    assert HeartbeatSettings.from_conf({"spark.network.timeout": "90s"}).timeout_s == 90.0
    own = {"spark.network.timeout": "90s",
           "spark.storage.blockManagerHeartbeatTimeoutMs": "80000"}
    assert HeartbeatSettings.from_conf(own).timeout_s == 80.0


@pytest.mark.parametrize("conf, message", [
    ({"spark.network.timeout": "10s"},
     "requirement failed: The value of spark.network.timeout=10000ms must be no less than "
     "the value of spark.executor.heartbeatInterval=10000ms."),
    ({"spark.network.timeout": "30s"},
     "requirement failed: spark.network.timeoutInterval should be less than or equal to "
     "spark.network.timeout."),
    ({"spark.storage.blockManagerHeartbeatTimeoutMs": "30000"},
     "requirement failed: spark.network.timeoutInterval should be less than or equal to "
     "spark.storage.blockManagerHeartbeatTimeoutMs."),
    ({"spark.storage.blockManagerHeartbeatTimeoutMs": "5000",
      "spark.network.timeoutInterval": "1s"},
     "requirement failed: spark.executor.heartbeatInterval should be less than or equal to "
     "spark.storage.blockManagerHeartbeatTimeoutMs"),
])
def test_sparks_checks_in_sparks_words(conf, message):
    with pytest.raises(ValueError) as e:
        HeartbeatSettings.from_conf(conf)
    assert str(e.value) == message


def test_a_context_with_a_heartbeat_longer_than_the_network_timeout_does_not_start(fresh_sc):
    conf = SparkConf().set("spark.executor.heartbeatInterval", "200s")
    with pytest.raises(IllegalArgumentException, match="must be no less than the value of "
                       "spark.executor.heartbeatInterval=200000ms"):
        fresh_sc("local[1]", "hb", conf)
    assert SparkContext._active_spark_context is None


def test_a_silent_executor_expires_once_past_the_timeout_a_beating_one_never():
    r = receiver(timeout=120.0, interval=60.0)
    r.executor_added("1", 0.0)
    r.executor_added("2", 0.0)
    for now in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
        r.heartbeat("2", now)
    assert r.expire(60.0) == []
    for now in (70.0, 80.0, 90.0, 100.0, 110.0, 120.0):
        r.heartbeat("2", now)
    assert r.expire(120.0) == []              # exactly the timeout: not past it
    r.heartbeat("2", 130.0)
    assert r.expire(180.0) == [("1", 180.0)]
    assert r.expire(240.0) == []             # reported once, then forgotten
    assert "1" not in r.last_seen and "2" in r.last_seen


def test_a_removed_executor_is_forgotten_and_its_late_heartbeat_adds_nothing():
    r = receiver()
    r.executor_added("1", 0.0)
    r.executor_removed("1")
    r.heartbeat("1", 5.0)
    assert r.last_seen == {} and r.expire(300.0) == []


def test_a_check_that_runs_late_removes_nobody_and_silence_counts_from_then():
    """The driver was stopped for 500 s: the heartbeats that waited in its sockets are not
    read yet when the first check runs, so no executor is removed for that silence; one
    that stays silent after is removed a timeout later."""
    r = receiver(timeout=120.0, interval=60.0)
    r.executor_added("1", 0.0)
    r.executor_added("2", 0.0)
    assert r.expire(60.0) == []
    assert r.expire(620.0) == []          # due at 120, ran at 620
    assert r.last_seen == {"1": 620.0, "2": 620.0}
    for now in (680.0, 740.0):
        r.heartbeat("1", now - 5.0)
        assert r.expire(now) == []
    r.heartbeat("1", 795.0)
    assert r.expire(800.0) == [("2", 180.0)]


def test_a_check_up_to_half_an_interval_late_is_on_time():
    r = receiver(timeout=120.0, interval=60.0)
    r.executor_added("1", 0.0)
    assert r.expire(60.0) == [] and r.expire(150.0) == [("1", 150.0)]
