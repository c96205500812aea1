"""Pure scheduling functions of the standalone master (ember.deploy.master.scheduling).

The expectations of the parametrised table are Spark's own MasterSuite cases (three workers of
10 cores / 512 MB), so a divergence from Spark's placement shows up here first.
"""
from __future__ import annotations

import random
import time

import pytest

from ember.deploy.messages import (
    ApplicationDescription, Command, DriverDescription, RegisterApplication, RegisterWorker,
    ResourceProfile, ResourceRequirement, WorkerState,
)
from ember.deploy.master.scheduling import (
    INT_MAX, ApplicationInfo, DriverInfo, WorkerInfo, WorkerSelectionPolicy,
    allocate_worker_resource_to_executors, app_warning, driver_warning,
    parse_worker_selection_policy, schedule_drivers, schedule_executors_on_workers,
    usable_workers,
)
from ember.deploy.master.state import Ask, Log, MasterState, Send
from ember.deploy.messages import (ElectedLeader, ExecutorState, ExecutorStateChanged,
                                   LaunchExecutor, RequestExecutors, ResourceInformation)

_counter = [0]


def make_worker(memory: int, cores: int, wid: str | None = None, **kw) -> WorkerInfo:
    _counter[0] += 1
    wid = wid or f"worker-{_counter[0]:05d}"
    return WorkerInfo(wid, "host", 100 + _counter[0], cores, memory, endpoint=wid + "-ref", **kw)


def make_app(memory: int, cores_per_executor: int | None = None, max_cores: int | None = None,
             custom: dict | None = None, initial_limit: int | None = None,
             app_id: str = "app-test") -> ApplicationInfo:
    rp = ResourceProfile.of(cores=cores_per_executor, memoryMb=memory, custom=custom)
    desc = ApplicationDescription("test", max_cores, Command("Main"), "", rp,
                                  initialExecutorLimit=initial_limit)
    return ApplicationInfo(0, app_id, desc, 0, app_id + "-driver", INT_MAX)


def set_limit(app: ApplicationInfo, n: int) -> None:
    app.request_executors([(app.desc.defaultProfile, n)])


def three_workers() -> list[WorkerInfo]:
    return [make_worker(512, 10) for _ in range(3)]


def sched(app, workers, spread):
    return schedule_executors_on_workers(app, workers, spread)


# -- Spark's MasterSuite cases ------------------------------------------------------------------

@pytest.mark.parametrize("spread", [True, False])
def test_basic_scheduling(spread):
    assert sched(make_app(128), three_workers(), spread) == [10, 10, 10]
    assert sched(make_app(384), three_workers(), spread) == [10, 10, 10]  # more memory


@pytest.mark.parametrize("spread,exp1,exp2", [
    (True, [3, 3, 2], [6, 5, 5]),
    (False, [8, 0, 0], [10, 6, 0]),
])
def test_scheduling_with_max_cores(spread, exp1, exp2):
    assert sched(make_app(128, max_cores=8), three_workers(), spread) == exp1
    assert sched(make_app(128, max_cores=16), three_workers(), spread) == exp2


@pytest.mark.parametrize("spread", [True, False])
def test_scheduling_with_cores_per_executor(spread):
    assert sched(make_app(128, 2), three_workers(), spread) == [8, 8, 8]  # 4 * 2: memory bound
    assert sched(make_app(32, 2), three_workers(), spread) == [10, 10, 10]  # 5 * 2
    assert sched(make_app(32, 3), three_workers(), spread) == [9, 9, 9]  # 3 * 3


@pytest.mark.parametrize("spread,e1,e2,e3", [
    (True, [2, 2, 0], [8, 6, 6], [6, 6, 6]),
    (False, [4, 0, 0], [10, 10, 0], [9, 9, 0]),
])
def test_scheduling_with_cores_per_executor_and_max_cores(spread, e1, e2, e3):
    assert sched(make_app(32, 2, 4), three_workers(), spread) == e1
    assert sched(make_app(32, 2, 20), three_workers(), spread) == e2
    assert sched(make_app(32, 3, 20), three_workers(), spread) == e3


@pytest.mark.parametrize("spread", [True, False])
def test_scheduling_with_executor_limit(spread):
    app = make_app(32)
    set_limit(app, 0)
    assert sched(app, three_workers(), spread) == [0, 0, 0]
    set_limit(app, 2)
    assert sched(app, three_workers(), spread) == [10, 10, 0]
    set_limit(app, 5)
    assert sched(app, three_workers(), spread) == [10, 10, 10]


@pytest.mark.parametrize("spread,e2,e3", [
    (True, [8, 8, 0], [6, 5, 5]),
    (False, [10, 6, 0], [10, 6, 0]),
])
def test_scheduling_with_executor_limit_and_max_cores(spread, e2, e3):
    app = make_app(32, max_cores=16)
    set_limit(app, 0)
    assert sched(app, three_workers(), spread) == [0, 0, 0]
    set_limit(app, 2)
    assert sched(app, three_workers(), spread) == e2
    set_limit(app, 5)
    assert sched(app, three_workers(), spread) == e3


@pytest.mark.parametrize("spread,e2", [(True, [4, 4, 0]), (False, [8, 0, 0])])
def test_scheduling_with_executor_limit_and_cores_per_executor(spread, e2):
    app = make_app(32, 4)
    set_limit(app, 0)
    assert sched(app, three_workers(), spread) == [0, 0, 0]
    set_limit(app, 2)
    assert sched(app, three_workers(), spread) == e2
    set_limit(app, 5)
    assert sched(app, three_workers(), spread) == [8, 8, 4]


@pytest.mark.parametrize("spread,e2,e3", [
    (True, [4, 4, 0], [8, 4, 4]),
    (False, [8, 0, 0], [8, 8, 0]),
])
def test_scheduling_with_everything(spread, e2, e3):
    app = make_app(32, 4, 18)
    set_limit(app, 0)
    assert sched(app, three_workers(), spread) == [0, 0, 0]
    set_limit(app, 2)
    assert sched(app, three_workers(), spread) == e2
    set_limit(app, 5)
    assert sched(app, three_workers(), spread) == e3


def test_initial_executor_limit_counts_existing_executors():
    workers = three_workers()
    app = make_app(32, initial_limit=2)
    assert sched(app, workers, True) == [10, 10, 0]
    app.add_executor(workers[0], 10, 32, {}, 0)
    assert sched(app, workers, True) == [10, 0, 0]  # one more allowed


# -- the worked example of §3.2 -----------------------------------------------------------------

def example_workers() -> list[WorkerInfo]:
    return [make_worker(8192, 4, wid) for wid in ("worker-a", "worker-b", "worker-c")]


def place(app, workers, spread):
    """Like startExecutorsOnWorkers for one app: {worker id: [cores of each executor]}."""
    usable = usable_workers(app, workers)
    assigned = schedule_executors_on_workers(app, usable, spread)
    cpe = app.resource_desc().cores_per_executor
    return {w.id: allocate_worker_resource_to_executors(c, cpe)
            for w, c in zip(usable, assigned) if c > 0}


def test_worked_example_without_executor_cores():
    app = make_app(1024, None, 6)
    # CORES_FREE_DESC with equal cores: descending worker id -> c, b, a
    assert place(app, example_workers(), True) == {"worker-c": [2], "worker-b": [2],
                                                   "worker-a": [2]}
    assert place(app, example_workers(), False) == {"worker-c": [4], "worker-b": [2]}


def test_worked_example_with_executor_cores_2():
    app = make_app(1024, 2, 6)
    assert place(app, example_workers(), True) == {"worker-c": [2], "worker-b": [2],
                                                   "worker-a": [2]}
    assert place(app, example_workers(), False) == {"worker-c": [2, 2], "worker-b": [2]}


def test_allocate_worker_resource_to_executors():
    assert allocate_worker_resource_to_executors(7, None) == [7]
    assert allocate_worker_resource_to_executors(7, 2) == [2, 2, 2]
    assert allocate_worker_resource_to_executors(4, 4) == [4]


# -- memory, resources, usable workers ----------------------------------------------------------

def test_memory_limits_executors_per_worker():
    workers = [make_worker(2048, 8) for _ in range(2)]
    app = make_app(1024, 1, 8)
    # only 2 executors of 1 GB fit per worker
    assert sorted(sched(app, workers, True)) == [2, 2]
    # with executor cores unset one executor per worker takes every free core
    assert sched(make_app(1024), workers, True) == [8, 8]
    # a worker with too little memory is not usable at all
    small = make_worker(512, 8)
    assert usable_workers(make_app(1024), [small]) == []


def test_memory_already_used_on_worker():
    w = make_worker(4096, 8)
    w.memory_used = 3500
    assert usable_workers(make_app(1024), [w]) == []
    w.memory_used = 3000
    assert sched(make_app(1024, 1), [w], True) == [1]


def test_custom_resources():
    gpu_worker = make_worker(4096, 8, resources={"gpu": ["0", "1"]})
    plain = make_worker(4096, 8)
    app = make_app(256, 2, custom={"gpu": 1})
    usable = usable_workers(app, [gpu_worker, plain])
    assert usable == [gpu_worker]
    assert sched(app, usable, True) == [4]  # two executors, one GPU each
    gpu_worker.acquire_resources([ResourceRequirement("gpu", 1)])
    assert sched(app, usable_workers(app, [gpu_worker]), True) == [2]


@pytest.mark.parametrize("policy,spread,expected", [
    ("CORES_FREE_ASC", True, ["10001", "10002"]),
    ("CORES_FREE_ASC", False, ["10001"]),
    ("CORES_FREE_DESC", True, ["10002", "10003"]),
    ("CORES_FREE_DESC", False, ["10003"]),
    ("MEMORY_FREE_ASC", True, ["10001", "10003"]),
    ("MEMORY_FREE_ASC", False, ["10001"]),
    ("MEMORY_FREE_DESC", True, ["10002", "10003"]),
    ("MEMORY_FREE_DESC", False, ["10002"]),
    ("WORKER_ID", True, ["10001", "10002"]),
    ("WORKER_ID", False, ["10001"]),
])
def test_worker_selection_policy(policy, spread, expected):
    """Spark's WorkerSelectionSuite (SPARK-46881): 3 workers, 5/6/7 cores, 1280/5120/3840 MB."""
    workers = [make_worker(1280 * (idx if idx < 2 else 6 - idx), 4 + idx, str(10000 + idx))
               for idx in (1, 2, 3)]
    app = make_app(128, 2, 4)
    usable = usable_workers(app, workers, parse_worker_selection_policy(policy.lower()))
    assigned = sched(app, usable, spread)
    assert sorted(w.id for w, c in zip(usable, assigned) if c > 0) == expected


def test_default_policy_orders_by_free_cores_then_descending_id():
    ws = [make_worker(4096, 4, "w1"), make_worker(4096, 8, "w2"), make_worker(4096, 4, "w3")]
    assert [w.id for w in usable_workers(make_app(128), ws)] == ["w2", "w3", "w1"]
    assert [w.id for w in usable_workers(make_app(128), ws,
                                         WorkerSelectionPolicy.WORKER_ID)] == ["w1", "w2", "w3"]


def test_bad_policy_is_rejected_with_the_choices():
    with pytest.raises(ValueError, match="CORES_FREE_DESC"):
        parse_worker_selection_policy("FASTEST")


# -- drivers ------------------------------------------------------------------------------------

def make_driver(i: int, mem: int = 1, cores: int = 1, reqs=()) -> DriverInfo:
    desc = DriverDescription("file:/app.py", mem, cores, False, Command("Main"), list(reqs))
    return DriverInfo(0, f"driver-{i}", desc, 0)


@pytest.mark.parametrize("spread,answer", [(True, [1, 1, 1]), (False, [3, 0, 0])])
def test_verify_drivers(spread, answer):
    """Spark's verifyDrivers: 3 workers (512 MB, 10 cores), 3 drivers of 1 MB / 1 core."""
    workers = [make_worker(512, 10, f"w{i}") for i in (1, 2, 3)]
    drivers = [make_driver(i) for i in (1, 2, 3)]
    plan = schedule_drivers(drivers, workers, spread, INT_MAX, 0, random.Random(1))
    assert plan.warnings == []
    counts = [sum(1 for _, w in plan.placements if w is x) for x in workers]
    assert counts == answer


def test_driver_round_robin_over_seeded_shuffle():
    workers = [make_worker(4096, 4, f"w{i}") for i in range(5)]
    drivers = [make_driver(i) for i in range(7)]
    plan = schedule_drivers(drivers, workers, True, INT_MAX, 0, random.Random(42))
    order = list(workers)
    random.Random(42).shuffle(order)
    assert [w.id for _, w in plan.placements] == [order[i % 5].id for i in range(7)]
    assert [d.id for d, _ in plan.placements] == [d.id for d in drivers]
    # inputs untouched
    assert all(not w.drivers and w.cores_used == 0 for w in workers)


def test_driver_round_robin_skips_full_workers_and_counts_earlier_placements():
    workers = [make_worker(4096, 1, f"w{i}") for i in range(3)]
    drivers = [make_driver(i) for i in range(4)]  # 1 core each: only 3 fit
    plan = schedule_drivers(drivers, workers, True, INT_MAX, 0, random.Random(0))
    assert len(plan.placements) == 3
    assert len({w.id for _, w in plan.placements}) == 3
    # the 4th visited non-idle workers (they got drivers in this round): no warning
    assert plan.warnings == []


def test_driver_warning_texts():
    idle = [make_worker(1024, 2, "w1")]
    big = make_driver(9, mem=1, cores=100)
    plan = schedule_drivers([big], idle, True, INT_MAX, 0, random.Random(0))
    assert plan.placements == []
    assert plan.warnings == [
        "Driver driver-9 requires more resource than any of Workers could have."]
    assert driver_warning("d") == "Driver d requires more resource than any of Workers could have."
    assert app_warning("a") == "App a requires more resource than any of Workers could have."
    # spread-out: a busy worker (has an executor) suppresses the warning
    busy = make_worker(1024, 2, "w2")
    busy.executors["x/0"] = object()
    assert schedule_drivers([big], [busy], True, INT_MAX, 0, random.Random(0)).warnings == []
    # consolidate: always warns when nothing fits
    assert schedule_drivers([big], [busy], False, INT_MAX, 0,
                            random.Random(0)).warnings == [driver_warning("driver-9")]
    # no alive worker at all
    assert schedule_drivers([big], [], True, INT_MAX, 0,
                            random.Random(0)).warnings == [driver_warning("driver-9")]


def test_max_drivers_cap_skips_without_warning():
    workers = [make_worker(4096, 8, f"w{i}") for i in range(2)]
    drivers = [make_driver(i) for i in range(4)]
    for spread in (True, False):
        plan = schedule_drivers(drivers, workers, spread, 3, 1, random.Random(0))
        assert len(plan.placements) == 2 and plan.warnings == []


def test_driver_resources_are_checked():
    gpu = make_worker(4096, 8, "gpu", resources={"gpu": ["0"]})
    plain = make_worker(4096, 8, "plain")
    drivers = [make_driver(i, reqs=[ResourceRequirement("gpu", 1)]) for i in range(2)]
    plan = schedule_drivers(drivers, [plain, gpu], False, INT_MAX, 0, random.Random(0))
    assert [(d.id, w.id) for d, w in plan.placements] == [("driver-0", "gpu")]
    assert plan.warnings == [driver_warning("driver-1")]


# -- scale ----------------------------------------------------------------------------------------

def test_thousand_workers_thousand_apps(capsys):
    """1,000 workers x 8 cores / 16 GB, 1,000 waiting apps wanting 8 cores in 2-core executors:
    one schedule() pass must place exactly every app, without over-committing any worker."""
    n = 1000
    state = MasterState({"spark.deploy.maxExecutorRetries": "10"}, host="m", port=7077,
                        self_ref="master", rng=random.Random(7))
    state.handle(ElectedLeader(), 0)
    now = 1_700_000_000_000
    # Apps first, while no worker exists, so that one schedule() faces all of them at once.
    for i in range(n):
        desc = ApplicationDescription(f"app{i}", 8, Command("Main"), "",
                                      ResourceProfile.of(cores=2, memoryMb=1024))
        state.handle(RegisterApplication(desc, f"driver-{i}"), now)
    assert len(state.waiting_apps) == n
    for i in range(n):
        w = WorkerInfo(f"worker-{i:04d}", f"10.0.{i // 250}.{i % 250}", 7078, 8, 16384,
                       endpoint=f"worker-ref-{i}", last_heartbeat=now)
        assert state._register_worker(w)

    t0 = time.perf_counter()
    out = state.schedule(now)
    elapsed = time.perf_counter() - t0

    launches = [i.message for i in out if isinstance(i, Send)
                and isinstance(i.message, LaunchExecutor)]
    assert len(launches) == 4 * n
    for app in state.waiting_apps:
        assert app.cores_granted == 8 and len(app.executors) == 4
        assert all(e.cores == 2 for e in app.executors.values())
    for w in state.workers:
        assert w.cores_used == 8 and w.memory_used == 4 * 1024
        assert sum(e.cores for e in w.executors.values()) == 8
    # spread-out: each app's 4 executors land on 4 different workers
    assert all(len({e.worker.id for e in a.executors.values()}) == 4 for a in state.waiting_apps)
    logs = sum(1 for i in out if isinstance(i, Log))
    with capsys.disabled():
        print(f"\n[benchmark] master schedule(): {n} workers x {n} waiting apps -> "
              f"{len(launches)} executors in {elapsed * 1000:.1f} ms ({logs} log lines)")

    # The event path: 1,000 more workers join one by one (each RegisterWorker runs schedule()
    # over the 1,000 waiting - now satisfied - apps).
    t0 = time.perf_counter()
    for i in range(n):
        state.handle(RegisterWorker(f"worker-b{i:04d}", f"10.1.{i // 250}.{i % 250}", 7078,
                                    f"worker-ref-b{i}", 8, 16384, "", "m:7077"), now)
    elapsed2 = time.perf_counter() - t0
    assert all(w.state == WorkerState.ALIVE for w in state.workers)
    with capsys.disabled():
        print(f"[benchmark] {n} RegisterWorker events with {n} apps waiting: "
              f"{elapsed2 * 1000:.1f} ms total")


# -- custom resources and resource profiles -----------------------------------------------------

def test_resources_cap_executors_per_worker():
    """Cores would allow four 2-core executors; three GPUs allow three (one GPU each)."""
    w = make_worker(4096, 8, resources={"gpu": ["0", "1", "2"]})
    app = make_app(256, 2, custom={"gpu": 1})
    assert sched(app, usable_workers(app, [w]), True) == [6]
    assert sched(app, usable_workers(app, [w]), False) == [6]


def test_one_executor_per_worker_needs_all_its_resources_on_one_worker():
    """coresPerExecutor unset: one executor per worker, which must hold every GPU it asks."""
    two = make_worker(4096, 4, resources={"gpu": ["0", "1"]})
    one = make_worker(4096, 4, resources={"gpu": ["0"]})
    app = make_app(256, None, custom={"gpu": 2})
    usable = usable_workers(app, [two, one])
    assert usable == [two]
    assert sched(app, usable, True) == [4]


def test_spread_out_with_resources_uses_every_gpu_worker():
    ws = [make_worker(4096, 4, resources={"gpu": ["0", "1"]}) for _ in range(3)]
    app = make_app(256, 1, custom={"gpu": 1}, max_cores=3)
    assert sched(app, usable_workers(app, ws), True) == [1, 1, 1]
    app = make_app(256, 1, custom={"gpu": 1}, max_cores=3)
    assert sorted(sched(app, usable_workers(app, ws), False)) == [0, 1, 2]


def _gpu_master(*workers: list[str]) -> MasterState:
    state = MasterState({}, host="m", port=7077, self_ref="master", rng=random.Random(1))
    state.handle(ElectedLeader(), 0)
    for i, addrs in enumerate(workers):
        state.handle(RegisterWorker(f"worker-{i}", "h", 7000 + i, f"w{i}", 4, 4096, "",
                                    "m:7077", {"gpu": ResourceInformation("gpu", addrs)}), 0)
    return state


def _launches(out) -> list[LaunchExecutor]:
    return [i.message for i in out if isinstance(i, Send) and isinstance(i.message,
                                                                           LaunchExecutor)]


def test_master_assigns_distinct_addresses_and_releases_them():
    state = _gpu_master(["0", "1"])
    desc = ApplicationDescription("gpu", None, Command("Main"), "",
                                  ResourceProfile.of(cores=1, memoryMb=256, custom={"gpu": 1}))
    out = state.handle(RegisterApplication(desc, "driver"), 0)
    launches = _launches(out)
    assert len(launches) == 2            # 4 cores, but only 2 GPUs of one each
    assert sorted(a for l in launches for a in l.resources["gpu"].addresses) == ["0", "1"]
    worker = state.id_to_worker["worker-0"]
    assert sorted(worker.resources_used["gpu"]) == ["0", "1"]
    app_id = launches[0].appId
    gone = launches[0]
    out = state.handle(Ask("r", ExecutorStateChanged(app_id, gone.execId,
                                                     ExecutorState.EXITED, "done", 0)), 0)
    relaunched = _launches(out)          # the freed GPU goes to a replacement executor
    assert [l.resources["gpu"].addresses for l in relaunched] == \
        [gone.resources["gpu"].addresses]
    assert sorted(worker.resources_used["gpu"]) == ["0", "1"]


def test_request_executors_per_profile_places_by_the_profile():
    """RequestExecutors for profile 1 (1 core + 1 GPU) launches rpId-1 executors only where
    GPUs are, leaving the default profile's target untouched."""
    state = _gpu_master([], ["7"])
    desc = ApplicationDescription("p", None, Command("Main"), "",
                                  ResourceProfile.of(cores=1, memoryMb=256),
                                  initialExecutorLimit=0)
    out = state.handle(RegisterApplication(desc, "driver"), 0)
    assert _launches(out) == []
    app_id = next(iter(state.apps)).id
    gpu_rp = ResourceProfile.of(id=1, cores=1, memoryMb=256, custom={"gpu": 1})
    out = state.handle(Ask("r", RequestExecutors(app_id, [(gpu_rp, 3)])), 0)
    launches = _launches(out)
    assert [(l.rpId, l.resources["gpu"].addresses) for l in launches] == [(1, ["7"])]
    assert launches[0] in [i.message for i in out if isinstance(i, Send) and i.target == "w1"]


def test_request_larger_than_any_worker_waits_with_sparks_warning():
    state = _gpu_master(["0"])
    desc = ApplicationDescription("big", None, Command("Main"), "",
                                  ResourceProfile.of(memoryMb=256, custom={"gpu": 4}))
    out = state.handle(RegisterApplication(desc, "driver"), 0)
    assert _launches(out) == []
    app = next(iter(state.apps))
    assert Log("WARN", app_warning(app.id)) in out
    assert app.state.name == "WAITING"
    # a worker with enough GPUs joining later gets the executor
    out = state.handle(RegisterWorker("worker-big", "h", 7100, "wbig", 4, 4096, "", "m:7077",
                                      {"gpu": ResourceInformation("gpu", list("0123"))}), 0)
    assert [l.resources["gpu"].addresses for l in _launches(out)] == [["0", "1", "2", "3"]]
