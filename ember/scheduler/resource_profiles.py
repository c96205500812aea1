"""The driver's resource profiles (Spark's ResourceProfileManager) and the per-executor
resource bookkeeping the task scheduler uses to hand addresses to tasks.

Why here and not in `ember.resource`: the user API only describes requirements; deciding
whether a profile is usable with this master, which executors a stage's tasks may use and
which GPU addresses a task gets is scheduling. The rules are Spark 4.1's:
- the default profile (id 0) comes from spark.executor.{cores,memory,...},
  spark.executor.resource.{name}.*, spark.task.cpus and spark.task.resource.{name}.amount;
- a profile with task requirements only (Spark's TaskResourceProfile) runs on the default
  profile's executors of a standalone / local-cluster master when dynamic allocation is off;
- any other profile needs dynamic allocation (then executors are requested per profile and a
  task only runs on executors of exactly its profile);
- task amounts <= 0.5 share one address between several tasks (0.25: four tasks per
  address), whole amounts take whole addresses.
"""
from __future__ import annotations

import logging
import math
import os
import threading
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from ember import config
from ember.deploy.resource_messages import BUILTIN_EXECUTOR_RESOURCES, DEFAULT_RESOURCE_PROFILE_ID
from ember.deploy.resources import parse_resource_requests
from ember.errors import SparkException
from ember.resource.profile import ResourceProfile
from ember.resource.requests import (ExecutorResourceRequest, TaskResourceRequest,
                                     check_task_amount)

if TYPE_CHECKING:   # the wire form is built only for a master: local mode never loads it
    from ember.deploy.messages import ResourceProfile as ResourceProfileMessage

log = logging.getLogger("ember.resource.ResourceProfileManager")

CPUS = "cpus"
MERGE_CONFLICTS_KEY = "spark.scheduler.resource.profileMergeConflicts"
MULTIPLE_PROFILES_ERROR = (
    "Multiple ResourceProfiles specified in the RDDs for this stage, either resolve the "
    "conflicting ResourceProfiles yourself or enable spark.scheduler.resource."
    "profileMergeConflicts and understand how Spark handles the merge.")

__all__ = ["TaskRequirements", "ExecutorResources", "ResourceProfileManager",
           "default_profile", "MULTIPLE_PROFILES_ERROR"]


@dataclass(frozen=True)
class TaskRequirements:
    """What one task takes from its executor: cores and (name, amount) per custom resource."""
    cpus: int = 1
    resources: tuple[tuple[str, Fraction], ...] = ()


class ExecutorResources:
    """One executor's free cores and free share of each resource address.

    Each address starts with a share of 1; a task asking 0.25 takes a quarter of one address,
    a task asking 2 takes two whole free addresses. Addresses are handed out in sorted order.
    """

    def __init__(self, cores: int, resources: Mapping[str, Sequence[str]]) -> None:
        self.free_cores = cores
        self.free = {name: {a: Fraction(1) for a in sorted(addrs)}
                     for name, addrs in resources.items()}

    def fits(self, req: TaskRequirements) -> bool:
        if self.free_cores < req.cpus:
            return False
        for name, amount in req.resources:
            shares = self.free.get(name, {})
            if amount >= 1:
                if sum(1 for s in shares.values() if s == 1) < amount:
                    return False
            elif not any(s >= amount for s in shares.values()):
                return False
        return True

    def acquire(self, req: TaskRequirements) -> dict[str, list[str]]:
        """Take what `req` needs (callers checked `fits`): the addresses per resource."""
        self.free_cores -= req.cpus
        assigned: dict[str, list[str]] = {}
        for name, amount in req.resources:
            shares = self.free[name]
            if amount >= 1:
                taken = [a for a, s in shares.items() if s == 1][:int(amount)]
                for a in taken:
                    shares[a] = Fraction(0)
            else:
                taken = [next(a for a, s in shares.items() if s >= amount)]
                shares[taken[0]] -= amount
            assigned[name] = taken
        return assigned

    def release(self, req: TaskRequirements, assigned: Mapping[str, Sequence[str]]) -> None:
        self.free_cores += req.cpus
        amounts = dict(req.resources)
        for name, addrs in assigned.items():
            shares = self.free.get(name)
            if shares is None:
                continue
            give = Fraction(1) if amounts.get(name, 1) >= 1 else amounts[name]
            for a in addrs:
                if a in shares:
                    shares[a] = min(Fraction(1), shares[a] + give)


def _is_standalone_or_local_cluster(master: str) -> bool:
    return master.startswith("spark://") or master.startswith("local-cluster")


def default_profile(conf: Mapping[str, Any]) -> ResourceProfile:
    """Spark's getOrCreateDefaultProfile: the application's executor and task settings."""
    execs: dict[str, ExecutorResourceRequest] = {}
    cores = config.read(conf, "spark.executor.cores")
    if cores is not None:   # standalone: unset means one executor takes all free cores
        execs["cores"] = ExecutorResourceRequest("cores", cores)
    execs["memory"] = ExecutorResourceRequest(
        "memory", config.read(conf, "spark.executor.memory"))
    for key, name in (("spark.executor.memoryOverhead", "memoryOverhead"),
                      ("spark.executor.pyspark.memory", "pyspark.memory")):
        if conf.get(key) is not None:
            execs[name] = ExecutorResourceRequest(name, config.read(conf, key))
    off_heap = 0
    if config.read(conf, "spark.memory.offHeap.enabled"):
        off_heap = config.read(conf, "spark.memory.offHeap.size")
    execs["offHeap"] = ExecutorResourceRequest("offHeap", off_heap)
    for req in parse_resource_requests(conf, "spark.executor"):
        execs[req.name] = ExecutorResourceRequest(req.name, req.amount, req.discovery_script,
                                                  req.vendor)
    tasks = {CPUS: TaskResourceRequest(CPUS, config.read(conf, "spark.task.cpus"))}
    prefix = "spark.task.resource."
    for key in conf:
        if key.startswith(prefix) and key.endswith(".amount"):
            name = key[len(prefix):-len(".amount")]
            amount = check_task_amount(float(conf[key]))
            if amount > 0:
                tasks[name] = TaskResourceRequest(name, amount)
    profile = ResourceProfile(_exec_req=execs, _task_req=tasks)
    profile._id = DEFAULT_RESOURCE_PROFILE_ID
    return profile


def custom_executor_resources(rp: ResourceProfile) -> dict[str, ExecutorResourceRequest]:
    return {k: v for k, v in rp._executor_resource_requests.items()
            if k not in BUILTIN_EXECUTOR_RESOURCES}


class ResourceProfileManager:
    """Every profile the application used, by id; Spark's support rules and validation."""

    def __init__(self, conf: Mapping[str, Any], master: str, bus: Any = None) -> None:
        self.conf = dict(conf)
        self.bus = bus
        self.master = master
        self.dynamic_enabled = config.read(self.conf, "spark.dynamicAllocation.enabled")
        # Spark's isTesting && !spark.testing.resourceProfileManager: PySpark's own test
        # runner sets SPARK_TESTING, and its tests attach profiles on local masters
        self._check_support = (not ("SPARK_TESTING" in os.environ or "spark.testing" in self.conf)
                               or config.read(self.conf, "spark.testing.resourceProfileManager"))
        self.merge_conflicts = config.read(self.conf, MERGE_CONFLICTS_KEY)
        self._lock = threading.Lock()
        self.default = default_profile(self.conf)
        self._profiles: dict[int, ResourceProfile] = {}
        self._requirements: dict[int, TaskRequirements] = {}
        self.add(self.default)

    @property
    def only_default(self) -> bool:
        """No RDD of the application carries a profile other than the default one (profiles
        come in only through RDD.withResources): every stage runs with the default."""
        return len(self._profiles) == 1

    # --- Spark's isSupported / addResourceProfile -----------------------------------------
    def is_supported(self, rp: ResourceProfile) -> bool:
        standalone = _is_standalone_or_local_cluster(self.master)
        if rp._is_task_profile() and not self.dynamic_enabled:
            if not standalone and self._check_support:
                raise SparkException("TaskResourceProfiles are only supported for Standalone, "
                                     "Yarn and Kubernetes cluster for now when dynamic "
                                     "allocation is disabled.")
        else:
            not_default = rp._id != DEFAULT_RESOURCE_PROFILE_ID
            if not_default and (not standalone or not self.dynamic_enabled) \
                    and self._check_support:
                raise SparkException("ResourceProfiles are only supported on YARN and "
                                     "Kubernetes and Standalone with dynamic allocation "
                                     "enabled.")
            if (standalone and self.dynamic_enabled and "cores" not in rp.executorResources
                    and self.conf.get("spark.executor.cores") is None):
                log.warning("Neither executor cores is set for resource profile, nor "
                            "spark.executor.cores is explicitly set, you may get more "
                            "executors allocated than expected. It's recommended to set "
                            "executor cores explicitly. Please check SPARK-30299 for more "
                            "details.")
        return True

    def add(self, rp: ResourceProfile) -> ResourceProfile:
        """Register `rp` (checking it is supported and well formed) unless already known."""
        rp_id = rp._ensure_id()
        with self._lock:
            if rp_id in self._profiles:
                return self._profiles[rp_id]
        if rp_id != DEFAULT_RESOURCE_PROFILE_ID:
            self.is_supported(rp)
        req = self._validate(rp)
        with self._lock:
            self._profiles.setdefault(rp_id, rp)
            self._requirements.setdefault(rp_id, req)
        log.info("Added ResourceProfile id: %d", rp_id)
        if self.bus is not None:
            from ember.scheduler.listener import ResourceProfileAdded
            self.bus.post(ResourceProfileAdded(
                rp_id, {n: (r.amount, r.discoveryScript, r.vendor)
                        for n, r in rp._executor_resource_requests.items()},
                {n: r.amount for n, r in rp._task_resource_requests.items()}))
        return rp

    def _executor_resources_of(self, rp: ResourceProfile) -> dict[str, ExecutorResourceRequest]:
        """A TaskResourceProfile runs on default executors: their resources count."""
        if rp._is_task_profile():
            return custom_executor_resources(self.default)
        return custom_executor_resources(rp)

    def _validate(self, rp: ResourceProfile) -> TaskRequirements:
        """Spark's calculateTasksAndLimitingResource checks; the task's requirements."""
        tasks = rp._task_resource_requests
        cpus_req = tasks.get(CPUS)
        cpus = int(cpus_req.amount) if cpus_req is not None else \
            config.read(self.conf, "spark.task.cpus")
        if cpus <= 0:
            raise SparkException("CPUs per task configuration has to be > 0")
        executor = rp._executor_resource_requests if not rp._is_task_profile() \
            else self.default._executor_resource_requests
        cores = executor.get("cores")
        if cores is not None and cores.amount < cpus:
            raise SparkException(f"The number of cores per executor (={cores.amount}) has to "
                                 f"be >= the number of cpus per task = {cpus}.")
        exec_custom = self._executor_resources_of(rp)
        missing = [n for n in tasks if n != CPUS and n not in exec_custom]
        if missing:
            raise SparkException("No executor resource configs were not specified for the "
                                 f"following task configs: {','.join(missing)}")
        resources = []
        for name, treq in tasks.items():
            if name == CPUS or treq.amount <= 0:
                continue
            if treq.amount > exec_custom[name].amount:
                raise SparkException(f"The executor resource: {name}, amount: "
                                     f"{exec_custom[name].amount} needs to be >= the task "
                                     f"resource request amount of {treq.amount}")
            resources.append((name, Fraction(str(check_task_amount(treq.amount)))))
        return TaskRequirements(cpus, tuple(resources))

    # --- lookups --------------------------------------------------------------------------
    def from_id(self, rp_id: int) -> ResourceProfile:
        with self._lock:
            rp = self._profiles.get(rp_id)
        if rp is None:
            raise SparkException(f"ResourceProfileId {rp_id} not found!")
        return rp

    def task_requirements(self, rp_id: int) -> TaskRequirements:
        with self._lock:
            req = self._requirements.get(rp_id)
        return req if req is not None else self._requirements[DEFAULT_RESOURCE_PROFILE_ID]

    def can_be_scheduled(self, task_rp_id: int, executor_rp_id: int) -> bool:
        """Spark's canBeScheduled: the same profile, or (dynamic allocation off) a task-only
        profile on any executor."""
        if task_rp_id == executor_rp_id:
            return True
        return not self.dynamic_enabled and self.from_id(task_rp_id)._is_task_profile()

    def stage_profile(self, profiles: Iterable[ResourceProfile]) -> int:
        """The profile id of a stage whose RDDs carry `profiles` (Spark's
        mergeResourceProfilesForStage: several distinct ones are an error unless
        spark.scheduler.resource.profileMergeConflicts, then the maximum of each request)."""
        distinct = {rp._ensure_id(): rp for rp in profiles}
        if not distinct:
            return DEFAULT_RESOURCE_PROFILE_ID
        if len(distinct) == 1:
            return self.add(next(iter(distinct.values())))._ensure_id()
        if not self.merge_conflicts:
            raise ValueError(MULTIPLE_PROFILES_ERROR)
        execs: dict[str, ExecutorResourceRequest] = {}
        tasks: dict[str, TaskResourceRequest] = {}
        for rp in sorted(distinct.values(), key=lambda p: p._ensure_id()):
            for k, v in rp._executor_resource_requests.items():
                if k not in execs or v.amount > execs[k].amount:
                    execs[k] = v
            for k, v in rp._task_resource_requests.items():
                if k not in tasks or v.amount > tasks[k].amount:
                    tasks[k] = v
        merged_key = (sorted(execs.items()), sorted(tasks.items()))
        with self._lock:
            for rp in self._profiles.values():
                if rp._id != DEFAULT_RESOURCE_PROFILE_ID and merged_key == (
                        sorted(rp._executor_resource_requests.items()),
                        sorted(rp._task_resource_requests.items())):
                    return rp._id  # type: ignore[return-value]
        return self.add(ResourceProfile(_exec_req=execs, _task_req=tasks))._ensure_id()

    def profile_message(self, rp_id: int) -> ResourceProfileMessage:
        """The profile as the master sees it (RegisterApplication, RequestExecutors)."""
        from ember.deploy.messages import ResourceProfile as ResourceProfileMessage
        rp = self.from_id(rp_id)
        return ResourceProfileMessage(rp_id, dict(rp._executor_resource_requests),
                                      dict(rp._task_resource_requests))

    def max_tasks_per_executor(self, rp_id: int) -> int:
        """Spark's maxTasksPerExecutor: the tightest of cores / cpus (when the executor's
        cores are known) and each custom resource's amount / task amount; else 1."""
        rp = self.from_id(rp_id)
        req = self.task_requirements(rp_id)
        execs = self.default if rp._is_task_profile() else rp
        cores = execs._executor_resource_requests.get("cores")
        limits = []
        if cores is not None:
            limits.append(cores.amount // req.cpus)
        elif config.read(self.conf, "spark.executor.cores") is not None:
            limits.append(config.read(self.conf, "spark.executor.cores") // req.cpus)
        custom = self._executor_resources_of(rp)
        for name, amount in req.resources:
            have = custom[name].amount
            limits.append(have * math.floor(1 / amount) if amount < 1 else int(have // amount))
        return max(1, min(limits)) if limits else 1


def profiles_of_stage(rdd: Any) -> list[ResourceProfile]:
    """The profiles attached to the RDDs of one stage."""
    from ember.dependency import stage_rdds
    return [rp for r in stage_rdds(rdd)
            if (rp := getattr(r, "_resource_profile", None)) is not None]
