"""The resource payloads of the deploy messages (Spark's ResourceInformation,
ResourceRequirement, ExecutorResourceRequest, TaskResourceRequest, ResourceProfile) and the
default profile's constants.

Why apart from ember.deploy.messages (which re-exports them): every SparkContext builds its
resource profiles from these records, also in local mode, and importing all ~100 message
dataclasses would cost a local driver's start-up about 0.1 s of CPU. Same classes, same wire
names (the registry keys by class name).
"""
from dataclasses import dataclass, field
from typing import Optional

from ember.rpc.messages import message

DEFAULT_RESOURCE_PROFILE_ID = 0
# Spark's ResourceProfile keys that are not "custom" resources (ResourceProfile.allSupported...)
BUILTIN_EXECUTOR_RESOURCES = ("cores", "memory", "memoryOverhead", "pyspark.memory", "offHeap")


@message
@dataclass(frozen=True)
class ResourceInformation:
    """A named resource and its addresses, e.g. ("gpu", ["0", "1"])."""
    name: str
    addresses: list[str] = field(default_factory=list)

    def toJson(self) -> dict:
        return {"name": self.name, "addresses": list(self.addresses)}


@message
@dataclass(frozen=True)
class ResourceRequirement:
    """`amount` units of `resourceName` (per executor or per driver)."""
    resourceName: str
    amount: int
    numParts: int = 1


@message
@dataclass(frozen=True)
class ExecutorResourceRequest:
    resourceName: str
    amount: int
    discoveryScript: str = ""
    vendor: str = ""


@message
@dataclass(frozen=True)
class TaskResourceRequest:
    resourceName: str
    amount: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "amount", float(self.amount))   # PySpark stores a float


@message
@dataclass(frozen=True)
class ResourceProfile:
    """What each executor (and task) of a profile needs. Id 0 is the default profile.

    Built-in executor keys: "cores" (None = unset: in standalone one executor per worker takes
    all free cores), "memory" (MB). Anything else is a custom resource (gpu, fpga ...).
    """
    id: int = DEFAULT_RESOURCE_PROFILE_ID
    executorResources: dict[str, ExecutorResourceRequest] = field(default_factory=dict)
    taskResources: dict[str, TaskResourceRequest] = field(default_factory=dict)

    def getExecutorCores(self) -> Optional[int]:
        r = self.executorResources.get("cores")
        return int(r.amount) if r is not None else None

    def getExecutorMemory(self) -> Optional[int]:
        r = self.executorResources.get("memory")
        return int(r.amount) if r is not None else None

    def getCustomExecutorResources(self) -> dict[str, ExecutorResourceRequest]:
        return {k: v for k, v in self.executorResources.items()
                if k not in BUILTIN_EXECUTOR_RESOURCES}

    @staticmethod
    def of(id: int = DEFAULT_RESOURCE_PROFILE_ID, cores: Optional[int] = None,
           memoryMb: Optional[int] = None, custom: Optional[dict[str, int]] = None
           ) -> "ResourceProfile":
        """Shorthand: `ResourceProfile.of(cores=2, memoryMb=1024, custom={"gpu": 1})`."""
        res: dict[str, ExecutorResourceRequest] = {}
        if cores is not None:
            res["cores"] = ExecutorResourceRequest("cores", int(cores))
        if memoryMb is not None:
            res["memory"] = ExecutorResourceRequest("memory", int(memoryMb))
        for name, amount in (custom or {}).items():
            res[name] = ExecutorResourceRequest(name, int(amount))
        return ResourceProfile(id=id, executorResources=res)
