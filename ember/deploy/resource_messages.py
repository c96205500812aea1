"""The resource payloads of the deploy messages (Spark's ResourceInformation,
ResourceRequirement, ExecutorResourceRequest, TaskResourceRequest) and the default profile's
constants.

Why apart from ember.deploy.messages (which re-exports them): every SparkContext builds its
resource profiles from these records, also in local mode, and importing all ~100 message
dataclasses would cost a local driver's start-up about 0.1 s of CPU. Same classes, same wire
names (the registry keys by class name).
"""
from dataclasses import dataclass, field

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
