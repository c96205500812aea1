"""Storage levels accepted by ``RDD.persist`` / ``getStorageLevel``.

Mirrors ``pyspark.storagelevel.StorageLevel``: the flags say whether cached
partitions may live in memory, spill to disk, use off-heap memory, are kept
deserialized, and how many replicas to keep.  The block manager reads these
flags; user code compares against the class constants, whose flag values are
identical to PySpark's.
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = ["StorageLevel"]


class StorageLevel:
    """Flags controlling where and how an RDD's partitions are cached."""

    NONE: ClassVar["StorageLevel"]
    DISK_ONLY: ClassVar["StorageLevel"]
    DISK_ONLY_2: ClassVar["StorageLevel"]
    DISK_ONLY_3: ClassVar["StorageLevel"]
    MEMORY_ONLY: ClassVar["StorageLevel"]
    MEMORY_ONLY_2: ClassVar["StorageLevel"]
    MEMORY_AND_DISK: ClassVar["StorageLevel"]
    MEMORY_AND_DISK_2: ClassVar["StorageLevel"]
    OFF_HEAP: ClassVar["StorageLevel"]
    MEMORY_AND_DISK_DESER: ClassVar["StorageLevel"]

    def __init__(
        self,
        useDisk: bool,  # noqa: N803
        useMemory: bool,  # noqa: N803
        useOffHeap: bool,  # noqa: N803
        deserialized: bool,
        replication: int = 1,
    ) -> None:
        self.useDisk = useDisk
        self.useMemory = useMemory
        self.useOffHeap = useOffHeap
        self.deserialized = deserialized
        self.replication = replication

    def _key(self) -> tuple:
        return (self.useDisk, self.useMemory, self.useOffHeap, self.deserialized, self.replication)

    def __repr__(self) -> str:
        return "StorageLevel(%s, %s, %s, %s, %s)" % self._key()

    def __str__(self) -> str:
        words = []
        if self.useDisk:
            words.append("Disk")
        if self.useMemory:
            words.append("Memory")
        if self.useOffHeap:
            words.append("OffHeap")
        words.append("Deserialized" if self.deserialized else "Serialized")
        words.append("%sx Replicated" % self.replication)
        return " ".join(words)

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, StorageLevel) and self._key() == other._key()

    def __ne__(self, other: Any) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(self._key())


StorageLevel.NONE = StorageLevel(False, False, False, False)
StorageLevel.DISK_ONLY = StorageLevel(True, False, False, False)
StorageLevel.DISK_ONLY_2 = StorageLevel(True, False, False, False, 2)
StorageLevel.DISK_ONLY_3 = StorageLevel(True, False, False, False, 3)
StorageLevel.MEMORY_ONLY = StorageLevel(False, True, False, False)
StorageLevel.MEMORY_ONLY_2 = StorageLevel(False, True, False, False, 2)
StorageLevel.MEMORY_AND_DISK = StorageLevel(True, True, False, False)
StorageLevel.MEMORY_AND_DISK_2 = StorageLevel(True, True, False, False, 2)
StorageLevel.OFF_HEAP = StorageLevel(True, True, True, False, 1)
StorageLevel.MEMORY_AND_DISK_DESER = StorageLevel(True, True, False, True)
