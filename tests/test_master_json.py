"""Master/worker `/json` documents (§7) and the deploy messages' wire round trip."""
from __future__ import annotations

import dataclasses
import enum
import json
import os
import random
import time

import pytest

import ember.deploy.messages as msgs
from ember.deploy.json_protocol import (
    cluster_utilization_json, java_date_string, master_state_field_json, master_state_json,
    worker_state_json,
)
from ember.deploy.master.state import Ask, Disconnected, MasterState, Reply
from ember.rpc import RpcAddress, RpcEndpointRef, decode, encode
from ember.rpc.messages import registered

NOW = 1_735_689_600_000  # Wed Jan 01 00:00:00 UTC 2025


@pytest.fixture(autouse=True)
def utc():
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def test_java_date_string():
    assert java_date_string(NOW) == "Wed Jan 01 00:00:00 UTC 2025"
    assert java_date_string(NOW + 10_000 + 86_400_000 * 34) == "Tue Feb 04 00:00:10 UTC 2025"


def test_master_json_keys_order_and_types():
    m = MasterState({}, host="m", port=7077, self_ref="master", rng=random.Random(0))
    m.handle(msgs.ElectedLeader(), NOW)
    ref = RpcEndpointRef(RpcAddress("10.0.0.2", 35000), "Worker")
    m.handle(msgs.RegisterWorker("worker-0", "10.0.0.2", 35000, ref, 4, 7168, "http://10.0.0.2:8081",
                              RpcAddress("m", 7077),
                              {"gpu": msgs.ResourceInformation("gpu", ["0", "1"])}), NOW)
    dead = RpcEndpointRef(RpcAddress("10.0.0.9", 1), "Worker")
    m.handle(msgs.RegisterWorker("worker-dead", "10.0.0.9", 1, dead, 16, 16384, "",
                              RpcAddress("m", 7077)), NOW)
    m.handle(Disconnected(dead.address), NOW)
    desc = msgs.ApplicationDescription("PythonPi", 2, msgs.Command("x"), "http://d:4040",
                                    msgs.ResourceProfile.of(memoryMb=1024, custom={"gpu": 1}),
                                    user="alice")
    m.handle(msgs.RegisterApplication(desc, "driver-1"), NOW + 10_000)
    ddesc = msgs.DriverDescription("file:/pi.py", 512, 1, False,
                                msgs.Command("w", ["{{WORKER_URL}}", "{{USER_JAR}}", "pi.Main"]))
    m.handle(Ask(1, msgs.RequestSubmitDriver(ddesc)), NOW + 11_000)
    m.handle(Ask(2, msgs.RequestSubmitDriver(msgs.DriverDescription(
        "file:/big.py", 10**6, 1, False, msgs.Command("w", ["a", "b", "big.Main"])))), NOW + 11_000)
    (resp,) = [i.message for i in m.handle(Ask(3, msgs.RequestMasterState()), NOW + 15_000)
               if isinstance(i, Reply)]

    doc = master_state_json(resp)
    assert list(doc) == ["url", "workers", "aliveworkers", "cores", "coresused", "memory",
                         "memoryused", "resources", "resourcesused", "activeapps",
                         "completedapps", "activedrivers", "completeddrivers", "status",
                         "leaderurl"]   # Spark's fields in Spark's order, then Ember's
    assert doc["url"] == doc["leaderurl"] == "spark://m:7077"
    assert [w["id"] for w in doc["workers"]] == ["worker-0", "worker-dead"]  # all retained
    assert doc["aliveworkers"] == 1
    # totals over ALIVE workers only: worker-0 runs the driver (1 core, 512 MB) and one
    # executor (the remaining 3 cores, capped at cores.max 2 -> 2 cores, 1024 MB)
    assert (doc["cores"], doc["coresused"], doc["memory"], doc["memoryused"]) == \
        (4, 3, 7168, 1536)
    assert doc["resources"] == [{"gpu": {"name": "gpu", "addresses": ["0", "1"]}}]
    assert doc["resourcesused"] == [{"gpu": {"name": "gpu", "addresses": ["0"]}}]
    w = doc["workers"][0]
    assert list(w) == ["id", "host", "port", "webuiaddress", "cores", "coresused", "coresfree",
                       "memory", "memoryused", "memoryfree", "resources", "resourcesused",
                       "resourcesfree", "state", "lastheartbeat"]
    assert (w["coresfree"], w["memoryfree"], w["state"], w["lastheartbeat"]) == \
        (1, 5632, "ALIVE", NOW)
    assert w["resourcesfree"] == {"gpu": {"name": "gpu", "addresses": ["1"]}}
    assert doc["workers"][1]["state"] == "DEAD"
    (app,) = doc["activeapps"]
    assert list(app) == ["id", "starttime", "name", "cores", "user", "memoryperexecutor",
                         "memoryperslave", "resourcesperexecutor", "resourcesperslave",
                         "submitdate", "state", "duration"]
    assert app == {"id": "app-20250101000010-0000", "starttime": NOW + 10_000,
                   "name": "PythonPi", "cores": 2, "user": "alice", "memoryperexecutor": 1024,
                   "memoryperslave": 1024,
                   "resourcesperexecutor": [{"name": "gpu", "amount": 1}],
                   "resourcesperslave": [{"name": "gpu", "amount": 1}],
                   "submitdate": "Wed Jan 01 00:00:10 UTC 2025", "state": "RUNNING",
                   "duration": 5000}
    running, waiting = doc["activedrivers"]
    assert list(running) == ["id", "starttime", "state", "cores", "memory", "resources",
                             "submitdate", "worker", "mainclass"]
    assert running == {"id": "driver-20250101000011-0000", "starttime": str(NOW + 11_000),
                       "state": "RUNNING", "cores": 1, "memory": 512, "resources": {},
                       "submitdate": "Wed Jan 01 00:00:11 UTC 2025", "worker": "worker-0",
                       "mainclass": "pi.Main"}
    assert (waiting["worker"], waiting["state"], waiting["mainclass"]) == \
        ("None", "SUBMITTED", "big.Main")
    assert doc["status"] == "ALIVE"
    json.dumps(doc)  # plain JSON types only

    # /json/<field>
    assert master_state_field_json(resp, "aliveworkers") == {"aliveworkers": 1}
    assert master_state_field_json(resp, "status") == {"status": "ALIVE"}
    assert master_state_json(resp, "bogus") == {"bogus": ""}
    # utilization: only alive workers; one waiting (SUBMITTED) driver
    assert cluster_utilization_json(resp) == {
        "waitingDrivers": 1, "cores": 4, "coresused": 3, "coresutilization": 75,
        "memory": 7168, "memoryused": 1536, "memoryutilization": 21}
    # the state itself can be passed (snapshotted at now_ms)
    assert master_state_json(m, now_ms=NOW + 15_000) == doc


def test_cluster_utilization_without_workers_is_100():
    m = MasterState({}, host="m", port=7077)
    u = cluster_utilization_json(m, now_ms=NOW)
    assert u["coresutilization"] == 100 and u["memoryutilization"] == 100
    assert master_state_json(m, now_ms=NOW)["status"] == "STANDBY"


def test_worker_state_json():
    desc = msgs.ApplicationDescription("PythonPi", None, msgs.Command("ember.executor.backend",
                                                                ["--cores", "2"], {"A": "1"}),
                                    "", msgs.ResourceProfile.of(memoryMb=2048), user="bob")
    e = msgs.ExecutorRunnerSummary("app-1", 3, desc, 2, 2048,
                                {"gpu": msgs.ResourceInformation("gpu", ["0"])},
                                msgs.ExecutorState.RUNNING)
    resp = msgs.WorkerStateResponse("10.0.0.2", 35000, "worker-0", [e], [], [], [],
                                 "spark://m:7077", 8, 8192, 2, 2048, "http://m:8080",
                                 {"gpu": msgs.ResourceInformation("gpu", ["0", "1"])},
                                 {"gpu": msgs.ResourceInformation("gpu", ["0"])})
    doc = worker_state_json(resp)
    assert list(doc) == ["id", "masterurl", "masterwebuiurl", "cores", "coresused", "memory",
                         "memoryused", "resources", "resourcesused", "executors",
                         "finishedexecutors"]
    assert doc["executors"] == [{
        "id": 3, "memory": 2048, "resources": {"gpu": {"name": "gpu", "addresses": ["0"]}},
        "appid": "app-1",
        "appdesc": {"name": "PythonPi", "cores": 0, "memoryperexecutor": 2048,
                    "resourcesperexecutor": [], "memoryperslave": 2048,
                    "resourcesperslave": [], "user": "bob",
                    "command": "Command(ember.executor.backend,List(--cores, 2),Map(A -> 1),"
                               "List(),List(),List())"}}]
    assert doc["finishedexecutors"] == [] and "drivers" not in doc


# -- messages on the wire -----------------------------------------------------------------------

def test_every_deploy_message_is_registered_and_frozen():
    for name in msgs.__all__:
        obj = getattr(msgs, name)
        if not isinstance(obj, type):
            continue
        if issubclass(obj, enum.Enum):
            assert registered(name) is obj, name
        elif dataclasses.is_dataclass(obj):
            assert registered(name) is obj, name
            assert obj.__dataclass_params__.frozen, name


def test_messages_round_trip_through_the_codec():
    ref = RpcEndpointRef(RpcAddress("10.0.0.2", 35000), "Worker")
    desc = msgs.ApplicationDescription("app", 4, msgs.Command("m", ["a"], {"K": "v"}), "ui",
                                    msgs.ResourceProfile.of(cores=2, memoryMb=512,
                                                         custom={"gpu": 1}),
                                    initialExecutorLimit=0, user="u")
    ddesc = msgs.DriverDescription("file:/x.py", 512, 1, True, msgs.Command("w"),
                                [msgs.ResourceRequirement("gpu", 1)])
    samples = [
        msgs.RegisterWorker("w1", "h", 1, ref, 4, 1024, "http://h:8081", RpcAddress("m", 7077),
                         {"gpu": msgs.ResourceInformation("gpu", ["0"])}),
        msgs.RegisteredWorker(ref, "http://m:8080", RpcAddress("m", 7077), False),
        msgs.MasterInStandby(), msgs.Heartbeat("w1", ref),
        msgs.WorkerLatestState("w1", [msgs.ExecutorDescription("a", 1, 0, 2, 512,
                                                         msgs.ExecutorState.RUNNING)], ["d1"]),
        msgs.LaunchExecutor("spark://m:7077", "a", 1, 0, desc, 2, 512, {}),
        msgs.LaunchDriver("d1", ddesc, {}),
        msgs.ExecutorStateChanged("a", 1, msgs.ExecutorState.EXITED, "Command exited with code 0", 0),
        msgs.DriverStateChanged("d1", msgs.DriverState.ERROR, "boom"),
        msgs.WorkerSchedulerStateResponse("w1", [msgs.WorkerExecutorStateResponse(
            msgs.ExecutorDescription("a", 1, 0, 2, 512, msgs.ExecutorState.RUNNING))],
            [msgs.WorkerDriverStateResponse("d1")]),
        msgs.RegisterApplication(desc, ref), msgs.RequestExecutors("a", [(desc.defaultProfile, 3)]),
        msgs.ExecutorUpdated(1, msgs.ExecutorState.LOST, "worker lost: x", None, "h"),
        msgs.RequestSubmitDriver(ddesc), msgs.SubmitDriverResponse(ref, True, "d1", "ok"),
        msgs.DriverStatusResponse(True, msgs.DriverState.RUNNING, "w1", "h:1", None),
        msgs.SparkAppConfig([("spark.app.name", "x")], None, None, msgs.ResourceProfile()),
        msgs.RegisterExecutor("1", ref, "h", 2, {"stdout": "u"}, {}, {}, 0),
        msgs.LaunchTask(b"\x00\x01"), msgs.StatusUpdate("1", 7, "FINISHED", b"r"),
        msgs.KillTask(7, "1", True, "stage cancelled"), msgs.FetchShuffleBlocks(0, ["/tmp/m"], [3], [9]),
        msgs.FetchBroadcast(1), msgs.FetchFile("a.txt"), msgs.RecoveryState.ALIVE,
    ]
    for msg in samples:
        assert decode(encode(msg)) == msg, msg
    # the master's snapshot travels too
    m = MasterState({}, host="m", port=7077, self_ref=ref)
    m.handle(msgs.ElectedLeader(), NOW)
    m.handle(msgs.RegisterWorker("w1", "h", 1, ref, 4, 1024, "", RpcAddress("m", 7077)), NOW)
    m.handle(msgs.RegisterApplication(desc, RpcEndpointRef(RpcAddress("d", 5), "AppClient")), NOW)
    snap = m.master_state_response(NOW)
    assert decode(encode(snap)) == snap
