"""Where drivers and executors go: Spark's `Master.schedule()` placement rules as pure functions.

Why pure functions over plain data: placement is the part of the master worth testing hardest
(spread-out vs. consolidate, memory, executor limits, worker ordering) and simulating at scale
(thousands of fake workers). Written as functions that read a few attributes of plain objects
and return decisions, they need no sockets, no clock and no master. `state.MasterState` applies
the decisions (launch messages, bookkeeping); this module never mutates its inputs.

This module also defines the master's bookkeeping records (`WorkerInfo`, `ApplicationInfo`,
`DriverInfo`, `ExecutorDesc`, `ExecutorResourceDescription`) - plain mutable dataclasses with
Spark's field names - because they are exactly the data the functions read; `state.py` owns
and mutates them.

Spark source followed: `core/.../deploy/master/Master.scala` (4.x): `schedule()`,
`startExecutorsOnWorkers()`, `scheduleExecutorsOnWorkers()`, `allocateWorkerResourceToExecutors()`,
`canLaunch*`; `ApplicationInfo.scala`; `WorkerInfo.scala`.
"""
from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Optional, Sequence

from ember.deploy.messages import (
    DEFAULT_RESOURCE_PROFILE_ID, ApplicationDescription, ApplicationState, DriverDescription,
    DriverState, ExecutorDescription, ExecutorState, ResourceInformation, ResourceProfile,
    ResourceRequirement, WorkerState,
)

INT_MAX = 2147483647  # Scala Int.MaxValue, Spark's "unlimited"


class WorkerSelectionPolicy(Enum):
    """`spark.deploy.workerSelectionPolicy`: order in which usable workers get executors."""
    CORES_FREE_ASC = "CORES_FREE_ASC"
    CORES_FREE_DESC = "CORES_FREE_DESC"
    MEMORY_FREE_ASC = "MEMORY_FREE_ASC"
    MEMORY_FREE_DESC = "MEMORY_FREE_DESC"
    WORKER_ID = "WORKER_ID"


# ---------------------------------------------------------------------------------------------
# Bookkeeping records (Spark: WorkerInfo, ApplicationInfo, DriverInfo, ExecutorDesc)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExecutorResourceDescription:
    """What one executor of a resource profile needs (Spark: ExecutorResourceDescription)."""
    cores_per_executor: Optional[int]
    memory_mb_per_executor: int
    custom_resources_per_executor: tuple[ResourceRequirement, ...] = ()


def resources_meet_requirements(free: dict[str, int], reqs: Iterable[ResourceRequirement]) -> bool:
    """Spark's ResourceUtils.resourcesMeetRequirements: every requirement fits in `free`."""
    return all(free.get(r.resourceName, 0) >= r.amount for r in reqs)


@dataclass(eq=False)
class WorkerInfo:
    """The master's view of one worker. `resources` maps a resource name to its addresses."""
    id: str
    host: str
    port: int
    cores: int
    memory: int
    endpoint: Any = None
    web_ui_address: str = ""
    resources: dict[str, list[str]] = field(default_factory=dict)
    state: WorkerState = WorkerState.ALIVE
    cores_used: int = 0
    memory_used: int = 0
    last_heartbeat: int = 0
    executors: dict[str, "ExecutorDesc"] = field(default_factory=dict)  # by fullId
    drivers: dict[str, "DriverInfo"] = field(default_factory=dict)
    resources_used: dict[str, list[str]] = field(default_factory=dict)  # assigned addresses

    @property
    def cores_free(self) -> int:
        return self.cores - self.cores_used

    @property
    def memory_free(self) -> int:
        return self.memory - self.memory_used

    @property
    def host_port(self) -> str:
        return f"{self.host}:{self.port}"

    def is_alive(self) -> bool:
        return self.state == WorkerState.ALIVE

    @property
    def resources_amount_free(self) -> dict[str, int]:
        return {name: len(addrs) - len(self.resources_used.get(name, ()))
                for name, addrs in self.resources.items()}

    @property
    def resources_info(self) -> dict[str, ResourceInformation]:
        return {n: ResourceInformation(n, list(a)) for n, a in self.resources.items()}

    @property
    def resources_info_used(self) -> dict[str, ResourceInformation]:
        return {n: ResourceInformation(n, list(self.resources_used.get(n, ())))
                for n in self.resources}

    def add_executor(self, exec: "ExecutorDesc") -> None:
        self.executors[exec.full_id] = exec
        self.cores_used += exec.cores
        self.memory_used += exec.memory

    def remove_executor(self, exec: "ExecutorDesc") -> None:
        if exec.full_id in self.executors:
            del self.executors[exec.full_id]
            self.cores_used -= exec.cores
            self.memory_used -= exec.memory
            self.release_resources(exec.resources)

    def add_driver(self, driver: "DriverInfo") -> None:
        self.drivers[driver.id] = driver
        self.memory_used += driver.desc.mem
        self.cores_used += driver.desc.cores

    def remove_driver(self, driver: "DriverInfo") -> None:
        if driver.id in self.drivers:
            del self.drivers[driver.id]
            self.memory_used -= driver.desc.mem
            self.cores_used -= driver.desc.cores
            self.release_resources(driver.resources)

    def acquire_resources(self, reqs: Iterable[ResourceRequirement]
                          ) -> dict[str, ResourceInformation]:
        """Take the first free addresses for each requirement (callers checked they fit)."""
        out: dict[str, ResourceInformation] = {}
        for r in reqs:
            used = self.resources_used.setdefault(r.resourceName, [])
            free = [a for a in self.resources.get(r.resourceName, ()) if a not in used]
            taken = free[:r.amount]
            used.extend(taken)
            out[r.resourceName] = ResourceInformation(r.resourceName, taken)
        return out

    def release_resources(self, allocated: dict[str, ResourceInformation]) -> None:
        for name, info in (allocated or {}).items():
            used = self.resources_used.get(name)
            if used:
                for a in info.addresses:
                    if a in used:
                        used.remove(a)

    def recover_resources(self, allocated: dict[str, ResourceInformation]) -> None:
        """Mark addresses a worker reports as in use (master recovery)."""
        for name, info in (allocated or {}).items():
            used = self.resources_used.setdefault(name, [])
            used.extend(a for a in info.addresses if a not in used)


@dataclass(eq=False)
class DriverInfo:
    """A cluster-mode driver the master tracks (waiting, running or completed)."""
    start_time: int  # epoch ms
    id: str
    desc: DriverDescription
    submit_date: int  # epoch ms
    state: DriverState = DriverState.SUBMITTED
    worker: Optional[WorkerInfo] = None
    exception: Optional[str] = None
    resources: dict[str, ResourceInformation] = field(default_factory=dict)
    attempt: int = 1                   # Ember: master-level launches (see LaunchDriver.attempt)
    exit_status: Optional[int] = None   # Ember: the driver process's last exit code
    wait_reason: Optional[str] = None   # Ember: why admission keeps a waiting driver waiting
    relaunch_not_before: int = 0         # Ember: epoch ms; a lost worker's lease (fencing)


@dataclass(eq=False)
class ExecutorDesc:
    """One executor of an application on a worker (Spark: ExecutorDesc)."""
    id: int
    application: "ApplicationInfo"
    worker: WorkerInfo
    cores: int
    memory: int
    resources: dict[str, ResourceInformation]
    rp_id: int
    state: ExecutorState = ExecutorState.LAUNCHING

    @property
    def full_id(self) -> str:
        return f"{self.application.id}/{self.id}"

    def copy_state(self, desc: ExecutorDescription) -> None:
        self.state = desc.state


class ApplicationInfo:
    """An application registered with the master (Spark: ApplicationInfo).

    Cores are capped by `desc.maxCores` or the master's `spark.deploy.defaultCores`; executors
    per resource profile are capped by a target (`initialExecutorLimit`, else unlimited;
    changed by RequestExecutors).
    """

    def __init__(self, start_time: int, id: str, desc: ApplicationDescription, submit_date: int,
                 driver: Any, default_cores: int = INT_MAX) -> None:
        self.start_time = start_time
        self.id = id
        self.desc = desc
        self.submit_date = submit_date
        self.driver = driver
        self.default_cores = default_cores
        self.state = ApplicationState.WAITING
        self.executors: dict[int, ExecutorDesc] = {}
        self.removed_executors: list[ExecutorDesc] = []
        self.cores_granted = 0
        self.end_time = -1
        self.retry_count = 0
        self.next_executor_id = 0
        self.requested_cores = desc.maxCores if desc.maxCores is not None else default_cores
        limit = desc.initialExecutorLimit
        self.rp_id_to_resource_profile: dict[int, ResourceProfile] = {
            DEFAULT_RESOURCE_PROFILE_ID: desc.defaultProfile}
        self._rp_ids = [DEFAULT_RESOURCE_PROFILE_ID]
        self.rp_id_to_resource_desc: dict[int, ExecutorResourceDescription] = {}
        self._create_resource_desc(desc.defaultProfile, DEFAULT_RESOURCE_PROFILE_ID)
        self.target_num_executors_per_resource_profile_id: dict[int, int] = {
            DEFAULT_RESOURCE_PROFILE_ID: limit if limit is not None else INT_MAX}
        self.executors_per_resource_profile_id: dict[int, set[int]] = {}

    def __repr__(self) -> str:
        return f"ApplicationInfo({self.id}, {self.desc.name}, {self.state})"

    def _create_resource_desc(self, rp: ResourceProfile, rp_id: int) -> None:
        if rp_id not in self.rp_id_to_resource_desc:
            cores = rp.getExecutorCores()
            if cores is None:
                cores = self.desc.coresPerExecutor
            mem = rp.getExecutorMemory()
            if mem is None:
                mem = self.desc.memoryPerExecutorMB
            custom = tuple(ResourceRequirement(r.resourceName, int(r.amount))
                           for _, r in sorted(rp.getCustomExecutorResources().items()))
            self.rp_id_to_resource_desc[rp_id] = ExecutorResourceDescription(cores, int(mem), custom)

    @property
    def cores_left(self) -> int:
        return self.requested_cores - self.cores_granted

    def is_finished(self) -> bool:
        return self.state not in (ApplicationState.WAITING, ApplicationState.RUNNING)

    def requested_rp_ids(self) -> list[int]:
        return self._rp_ids

    def resource_desc(self, rp_id: int = DEFAULT_RESOURCE_PROFILE_ID
                      ) -> ExecutorResourceDescription:
        return self.rp_id_to_resource_desc[rp_id]

    def executor_count(self, rp_id: int = DEFAULT_RESOURCE_PROFILE_ID) -> int:
        return len(self.executors_per_resource_profile_id.get(rp_id, ()))

    def target_executors(self, rp_id: int = DEFAULT_RESOURCE_PROFILE_ID) -> int:
        return self.target_num_executors_per_resource_profile_id.get(rp_id, 0)

    def request_executors(self, totals: Iterable[tuple[ResourceProfile, int]]) -> None:
        for rp, num in totals:
            self._create_resource_desc(rp, rp.id)
            if rp.id not in self.rp_id_to_resource_profile:
                self.rp_id_to_resource_profile[rp.id] = rp
                self._rp_ids = sorted(self.rp_id_to_resource_profile)
            self.target_num_executors_per_resource_profile_id[rp.id] = int(num)

    def add_executor(self, worker: WorkerInfo, cores: int, memory_mb: int,
                     resources: dict[str, ResourceInformation], rp_id: int,
                     use_id: Optional[int] = None) -> ExecutorDesc:
        if use_id is not None:
            exec_id = use_id
            self.next_executor_id = max(self.next_executor_id, use_id + 1)
        else:
            exec_id = self.next_executor_id
            self.next_executor_id += 1
        exec = ExecutorDesc(exec_id, self, worker, cores, memory_mb, resources, rp_id)
        self.executors[exec_id] = exec
        self.executors_per_resource_profile_id.setdefault(rp_id, set()).add(exec_id)
        self.cores_granted += cores
        return exec

    def remove_executor(self, exec: ExecutorDesc) -> None:
        if exec.id in self.executors:
            self.removed_executors.append(self.executors.pop(exec.id))
            self.executors_per_resource_profile_id.get(exec.rp_id, set()).discard(exec.id)
            self.cores_granted -= exec.cores

    def increment_retry_count(self) -> int:
        self.retry_count += 1
        return self.retry_count

    def reset_retry_count(self) -> None:
        self.retry_count = 0

    def mark_finished(self, end_state: ApplicationState, now_ms: int) -> None:
        self.state = end_state
        self.end_time = now_ms

    def duration(self, now_ms: int) -> int:
        return (self.end_time if self.end_time != -1 else now_ms) - self.start_time


# ---------------------------------------------------------------------------------------------
# Drivers (Master.schedule(), first half)
# ---------------------------------------------------------------------------------------------

def driver_warning(driver_id: str) -> str:
    return f"Driver {driver_id} requires more resource than any of Workers could have."


def app_warning(app_id: str) -> str:
    return f"App {app_id} requires more resource than any of Workers could have."


@dataclass
class DriverPlacements:
    """Result of `schedule_drivers`: (driver, worker) launches in order, warning texts, and
    why each driver left waiting waits (admission), by driver id."""
    placements: list[tuple[DriverInfo, WorkerInfo]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    waiting_reasons: dict[str, str] = field(default_factory=dict)


def executor_reservation(desc: DriverDescription) -> tuple[int, int]:
    """(cores, MiB) of one executor of the driver's application, from the -Dspark.* options
    the submission carries: spark.executor.cores (a standalone executor without it takes
    what a worker has free, at least 1) and spark.executor.memory (Spark's 1g default)."""
    from ember import config
    opts = {}
    for o in desc.command.javaOpts:
        if o.startswith("-D") and "=" in o:
            k, v = o[2:].split("=", 1)
            opts[k] = v
    try:
        cores = max(config.read(opts, "spark.executor.cores", 1), 1)
        mem = config.read(opts, "spark.executor.memory")
    except ValueError:
        cores, mem = 1, 1024
    return cores, mem


class _DriverAdmission:
    """Ember's admission rule (Spark has none: drivers can take every core, and their
    applications then wait for executors forever). Every driver holds a reservation of one
    executor of its application; a driver is launched only where it, and its reservation
    somewhere, fit beside the running drivers and their reservations. Executors are not
    counted: they end when their applications do, drivers only once they got executors."""

    def __init__(self, alive_workers: Sequence[WorkerInfo]) -> None:
        self.cores = {id(w): w.cores - sum(d.desc.cores for d in w.drivers.values())
                      for w in alive_workers}
        self.mem = {id(w): w.memory - sum(d.desc.mem for d in w.drivers.values())
                    for w in alive_workers}
        self.order = sorted(alive_workers, key=lambda w: w.id)
        for w in self.order:
            for d in sorted(w.drivers.values(), key=lambda d: d.id):
                self.reserve(executor_reservation(d.desc))

    def reserve(self, need: tuple[int, int]) -> bool:
        for w in self.order:
            k = id(w)
            if self.cores[k] >= need[0] and self.mem[k] >= need[1]:
                self.cores[k] -= need[0]
                self.mem[k] -= need[1]
                return True
        return False

    def admit(self, d: DriverInfo, w: WorkerInfo) -> bool:
        """Take d's cores and memory on w and its reservation somewhere; False (nothing
        taken) if either does not fit."""
        k = id(w)
        if self.cores[k] < d.desc.cores or self.mem[k] < d.desc.mem:
            return False
        self.cores[k] -= d.desc.cores
        self.mem[k] -= d.desc.mem
        if self.reserve(executor_reservation(d.desc)):
            return True
        self.cores[k] += d.desc.cores
        self.mem[k] += d.desc.mem
        return False

    @staticmethod
    def reason(d: DriverInfo) -> str:
        cores, mem = executor_reservation(d.desc)
        return (f"launching it would leave no room for an executor of its application "
                f"({cores} core(s), {mem} MiB) beside the running drivers, whose "
                f"applications each keep room for one; it waits for a driver to finish")


def schedule_drivers(waiting_drivers: Sequence[DriverInfo], alive_workers: Sequence[WorkerInfo],
                     spread_out: bool, max_drivers: int, running_drivers: int,
                     rng: random.Random, reserve_executor: bool = False) -> DriverPlacements:
    """Place waiting drivers (in submission order) on alive workers; mutates nothing.

    spread_out (spark.deploy.spreadOutDrivers, default): round-robin over a shuffled copy of
    the alive workers, each driver starting where the previous search stopped; a driver that
    fits nowhere gets the warning only if the last worker visited was idle (no drivers, no
    executors). Otherwise: the first fitting worker in worker-id order, else the warning.
    A driver is skipped (no warning) while `running_drivers` has reached `max_drivers`.
    Resources taken by earlier placements of the same call are accounted for.
    reserve_executor: Ember's admission rule (`_DriverAdmission`) on top.
    """
    out = DriverPlacements()
    admission = _DriverAdmission(alive_workers) if reserve_executor else None
    refused: set[str] = set()
    used_cores: dict[int, int] = {}
    used_mem: dict[int, int] = {}
    used_res: dict[int, dict[str, int]] = {}
    running = running_drivers

    def fits(w: WorkerInfo, d: DriverInfo) -> bool:
        k = id(w)
        desc = d.desc
        if w.memory_free - used_mem.get(k, 0) < desc.mem:
            return False
        if w.cores_free - used_cores.get(k, 0) < desc.cores:
            return False
        if desc.resourceReqs:
            taken = used_res.get(k, {})
            free = {n: a - taken.get(n, 0) for n, a in w.resources_amount_free.items()}
            if not resources_meet_requirements(free, desc.resourceReqs):
                return False
        if admission is not None and not admission.admit(d, w):
            refused.add(d.id)
            return False
        return True

    def place(d: DriverInfo, w: WorkerInfo) -> None:
        nonlocal running
        k = id(w)
        used_mem[k] = used_mem.get(k, 0) + d.desc.mem
        used_cores[k] = used_cores.get(k, 0) + d.desc.cores
        for r in d.desc.resourceReqs:
            taken = used_res.setdefault(k, {})
            taken[r.resourceName] = taken.get(r.resourceName, 0) + r.amount
        out.placements.append((d, w))
        running += 1

    if spread_out:
        shuffled = list(alive_workers)
        rng.shuffle(shuffled)
        num_alive = len(shuffled)
        cur = 0
        for d in waiting_drivers:
            launched = running >= max_drivers
            cluster_idle = not launched
            visited = 0
            while visited < num_alive and not launched:
                w = shuffled[cur]
                cluster_idle = not w.drivers and not w.executors and id(w) not in used_mem
                visited += 1
                if fits(w, d):
                    place(d, w)
                    launched = True
                cur = (cur + 1) % num_alive
            if not launched and cluster_idle:
                out.warnings.append(driver_warning(d.id))
    else:
        by_id = sorted(alive_workers, key=lambda w: w.id)
        for d in waiting_drivers:
            if running < max_drivers:
                for w in by_id:
                    if fits(w, d):
                        place(d, w)
                        break
                else:
                    out.warnings.append(driver_warning(d.id))
    placed = {d.id for d, _ in out.placements}
    for d in waiting_drivers:
        if d.id in refused and d.id not in placed:
            out.waiting_reasons[d.id] = _DriverAdmission.reason(d)
    return out


# ---------------------------------------------------------------------------------------------
# Executors (Master.startExecutorsOnWorkers / scheduleExecutorsOnWorkers)
# ---------------------------------------------------------------------------------------------

def parse_worker_selection_policy(value: str) -> WorkerSelectionPolicy:
    name = str(value).strip().upper()
    try:
        return WorkerSelectionPolicy[name]
    except KeyError:
        allowed = ", ".join(p.name for p in WorkerSelectionPolicy)
        raise ValueError(f"spark.deploy.workerSelectionPolicy should be one of {allowed}, "
                         f"but was {value}") from None


def sort_workers(workers: list[WorkerInfo], policy: WorkerSelectionPolicy) -> None:
    """Sort in place in `policy` order (Spark: sortBy((coresFree, id)), reversed for *_DESC;
    ids are unique, so a descending sort equals Spark's sort-then-reverse)."""
    if policy is WorkerSelectionPolicy.CORES_FREE_DESC:
        workers.sort(key=lambda w: (w.cores - w.cores_used, w.id), reverse=True)
    elif policy is WorkerSelectionPolicy.CORES_FREE_ASC:
        workers.sort(key=lambda w: (w.cores - w.cores_used, w.id))
    elif policy is WorkerSelectionPolicy.MEMORY_FREE_ASC:
        workers.sort(key=lambda w: (w.memory - w.memory_used, w.id))
    elif policy is WorkerSelectionPolicy.MEMORY_FREE_DESC:
        workers.sort(key=lambda w: (w.memory - w.memory_used, w.id), reverse=True)
    else:
        workers.sort(key=lambda w: w.id)


class WorkerOrder:
    """Alive workers kept in `policy` order while schedule() launches executors.

    Re-sorting every worker after each app would cost O(workers) key computations per app;
    instead the workers whose free cores/memory changed are moved with bisection.
    """

    def __init__(self, workers: Iterable[WorkerInfo], policy: WorkerSelectionPolicy) -> None:
        self.policy = policy
        self._desc = policy in (WorkerSelectionPolicy.CORES_FREE_DESC,
                                WorkerSelectionPolicy.MEMORY_FREE_DESC)
        pairs = sorted(((self._key(w), w) for w in workers), key=lambda p: p[0])
        self._keys = [k for k, _ in pairs]  # ascending
        self._workers = [w for _, w in pairs]
        self._key_of = {id(w): k for k, w in pairs}

    def _key(self, w: WorkerInfo) -> Any:
        p = self.policy
        if p is WorkerSelectionPolicy.CORES_FREE_DESC or p is WorkerSelectionPolicy.CORES_FREE_ASC:
            return (w.cores - w.cores_used, w.id)
        if p is WorkerSelectionPolicy.WORKER_ID:
            return (0, w.id)
        return (w.memory - w.memory_used, w.id)

    def __iter__(self):
        return reversed(self._workers) if self._desc else iter(self._workers)

    def __len__(self) -> int:
        return len(self._workers)

    def update(self, changed: Iterable[WorkerInfo]) -> None:
        """Reposition workers whose free cores or memory changed."""
        for w in changed:
            old = self._key_of[id(w)]
            new = self._key(w)
            if new == old:
                continue
            i = bisect.bisect_left(self._keys, old)
            del self._keys[i]
            del self._workers[i]
            j = bisect.bisect_left(self._keys, new)
            self._keys.insert(j, new)
            self._workers.insert(j, w)
            self._key_of[id(w)] = new


def usable_workers(app: ApplicationInfo, alive_workers: Iterable[WorkerInfo],
                   policy: WorkerSelectionPolicy = WorkerSelectionPolicy.CORES_FREE_DESC,
                   rp_id: int = DEFAULT_RESOURCE_PROFILE_ID,
                   presorted: bool = False) -> list[WorkerInfo]:
    """Alive workers that could host one executor of `app` (profile `rp_id`), in policy order.

    A worker is usable if it has the executor's memory, `coresPerExecutor` (1 if unset) cores
    and custom resources free. CORES_FREE_DESC (default): most free cores first, ties by
    *descending* worker id (Spark sorts by (coresFree, id) and reverses). `presorted=True`
    promises `alive_workers` is already in policy order (the master keeps it so between apps
    of one schedule() pass, which makes a pass over many apps cheaper); filtering keeps order.
    """
    desc = app.resource_desc(rp_id)
    min_cores = desc.cores_per_executor if desc.cores_per_executor is not None else 1
    mem = desc.memory_mb_per_executor
    reqs = desc.custom_resources_per_executor
    if reqs:
        ws = [w for w in alive_workers
              if w.memory - w.memory_used >= mem and w.cores - w.cores_used >= min_cores
              and resources_meet_requirements(w.resources_amount_free, reqs)]
    else:
        ws = [w for w in alive_workers
              if w.memory - w.memory_used >= mem and w.cores - w.cores_used >= min_cores]
    if not presorted:
        sort_workers(ws, policy)
    return ws


def schedule_executors_on_workers(app: ApplicationInfo, usable: Sequence[WorkerInfo],
                                  spread_out: bool,
                                  rp_id: int = DEFAULT_RESOURCE_PROFILE_ID) -> list[int]:
    """Cores to give `app` on each usable worker (same order as `usable`). Spark's algorithm:

    Cores are handed out in chunks of `coresPerExecutor` (1 if unset). With `coresPerExecutor`
    unset, each worker gets at most one (new) executor that grows chunk by chunk; otherwise
    every chunk is a new executor. A new executor also needs its memory (and resources) free
    after the executors already assigned here, and the app must stay under its executor target.
    Spread-out gives one chunk per worker per round; consolidate fills each worker in turn.

    Same result as Spark's loop, cheaper: Spark filters all workers with canLaunch before the
    first round. For a worker nothing was assigned to yet, canLaunch only turns false as the
    round goes on (the cores left to assign shrink, the executor count grows), so visiting every
    worker in the first round and stopping once no untouched worker can launch is equivalent,
    and later rounds only look at workers that got cores in the first.
    """
    desc = app.resource_desc(rp_id)
    cpe = desc.cores_per_executor
    min_cores = cpe if cpe is not None else 1
    one_per_worker = cpe is None
    mem = desc.memory_mb_per_executor
    reqs = desc.custom_resources_per_executor
    n = len(usable)
    res_free = [w.resources_amount_free for w in usable] if reqs else None
    assigned_cores = [0] * n
    assigned_execs = [0] * n
    total_assigned_execs = 0
    # Spark: min(app.coresLeft, sum of usable free cores). The sum never binds - while any
    # worker has min_cores unassigned free cores, the free cores left in total are at least
    # that (no usable worker has negative free cores) - so it is not computed.
    cores_to_assign = app.cores_left
    existing = app.executor_count(rp_id)
    limit = app.target_executors(rp_id)

    def can_launch(pos: int) -> bool:
        if cores_to_assign < min_cores:
            return False
        w = usable[pos]
        if w.cores - w.cores_used - assigned_cores[pos] < min_cores:
            return False
        num = assigned_execs[pos]
        if not one_per_worker or num == 0:  # launching a new executor
            if w.memory - w.memory_used - num * mem < mem:
                return False
            if reqs:
                free = res_free[pos]
                for r in reqs:
                    if free.get(r.resourceName, 0) - r.amount * num < r.amount:
                        return False
            if total_assigned_execs + existing >= limit:
                return False
        return True

    def assign(pos: int) -> None:
        nonlocal cores_to_assign, total_assigned_execs
        while can_launch(pos):
            cores_to_assign -= min_cores
            assigned_cores[pos] += min_cores
            if one_per_worker:
                if assigned_execs[pos] == 0:
                    total_assigned_execs += 1
                assigned_execs[pos] = 1
            else:
                assigned_execs[pos] += 1
                total_assigned_execs += 1
            if spread_out:
                return

    touched = []
    for pos in range(n):  # first round
        if cores_to_assign < min_cores or total_assigned_execs + existing >= limit:
            break  # no untouched worker can launch any more
        assign(pos)
        if assigned_cores[pos]:
            touched.append(pos)
    free_workers = [pos for pos in touched if can_launch(pos)]
    while free_workers:
        for pos in free_workers:
            assign(pos)
        free_workers = [pos for pos in free_workers if can_launch(pos)]
    return assigned_cores


def allocate_worker_resource_to_executors(assigned_cores: int,
                                          cores_per_executor: Optional[int]) -> list[int]:
    """Split one worker's assigned cores into executors: `assigned // coresPerExecutor`
    executors of `coresPerExecutor` cores, or (unset) one executor with all of them."""
    if cores_per_executor is None:
        return [assigned_cores] if assigned_cores > 0 else []
    return [cores_per_executor] * (assigned_cores // cores_per_executor)
