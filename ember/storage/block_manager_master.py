"""Driver's view of cached RDD blocks: which executor slot holds each partition.

Fed by the block updates that come back with task results; read by the DAG scheduler for
locality preferences. Every change is also posted as a BlockUpdated event (after the lock is
released), which is how the UI's storage page and the event log learn about cached blocks.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from ember.scheduler.listener import BlockUpdated
from ember.storagelevel import StorageLevel


@dataclass
class BlockStatus:
    executor_id: str
    slot: int
    host: str
    where: str          # "memory" | "disk"
    mem_size: int
    disk_size: int


def _level(where: str, disk_size: int) -> StorageLevel:
    if where == "removed":
        return StorageLevel.NONE
    return StorageLevel(where == "disk" or disk_size > 0, where == "memory", False, False)


class BlockManagerMaster:
    def __init__(self, bus: Any = None) -> None:
        self._lock = threading.Lock()
        self._bus = bus
        # block name -> {(executor_id, slot): BlockStatus}
        self._blocks: dict[str, dict[tuple[str, int], BlockStatus]] = {}

    def _post_removed(self, dropped: list[BlockStatus], names: list[str]) -> None:
        if self._bus is not None:
            for st, name in zip(dropped, names):
                self._bus.post(BlockUpdated(st.executor_id, st.host, name, StorageLevel.NONE,
                                            0, 0))

    def update(self, executor_id: str, slot: int, host: str, updates: list) -> None:
        with self._lock:
            for name, where, mem, disk in updates:
                locs = self._blocks.setdefault(name, {})
                key = (executor_id, slot)
                if where == "removed":
                    locs.pop(key, None)
                    if not locs:
                        del self._blocks[name]
                else:
                    locs[key] = BlockStatus(executor_id, slot, host, where, mem, disk)
        if self._bus is not None:
            for name, where, mem, disk in updates:
                self._bus.post(BlockUpdated(executor_id, host, name, _level(where, disk),
                                            mem, disk))

    def locations(self, rdd_id: int, split: int) -> list[BlockStatus]:
        locs = self._blocks.get(f"rdd_{rdd_id}_{split}")
        return list(locs.values()) if locs else []

    def remove_rdd(self, rdd_id: int) -> None:
        prefix = f"rdd_{rdd_id}_"
        with self._lock:
            for name in [n for n in self._blocks if n.startswith(prefix)]:
                del self._blocks[name]

    def remove_slot(self, executor_id: str, slot: int) -> None:
        """A task process died: its memory blocks are gone (disk blocks stay)."""
        dropped, names = [], []
        with self._lock:
            for name in list(self._blocks):
                locs = self._blocks[name]
                st = locs.get((executor_id, slot))
                if st is not None and st.where == "memory" and not st.disk_size:
                    del locs[(executor_id, slot)]
                    dropped.append(st)
                    names.append(name)
                if not locs:
                    del self._blocks[name]
        self._post_removed(dropped, names)

    def remove_executor(self, executor_id: str) -> None:
        dropped, names = [], []
        with self._lock:
            for name in list(self._blocks):
                locs = self._blocks[name]
                for key in [k for k in locs if k[0] == executor_id]:
                    dropped.append(locs.pop(key))
                    names.append(name)
                if not locs:
                    del self._blocks[name]
        self._post_removed(dropped, names)

    def rdd_blocks(self, rdd_id: int) -> dict[str, list[BlockStatus]]:
        prefix = f"rdd_{rdd_id}_"
        with self._lock:
            return {n: list(l.values()) for n, l in self._blocks.items() if n.startswith(prefix)}

    def executors_with_blocks(self) -> set[str]:
        """Executors holding at least one block (dynamic allocation keeps them)."""
        with self._lock:
            return {key[0] for locs in self._blocks.values() for key in locs}
