"""Driver's view of cached RDD blocks: which executor slot holds each partition.

Fed by the block updates that come back with task results; read by the DAG scheduler for
locality preferences and by the status/UI code for storage info.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class BlockStatus:
    executor_id: str
    slot: int
    host: str
    where: str          # "memory" | "disk"
    mem_size: int
    disk_size: int


class BlockManagerMaster:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # block name -> {(executor_id, slot): BlockStatus}
        self._blocks: dict[str, dict[tuple[str, int], BlockStatus]] = {}

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
        with self._lock:
            for name in list(self._blocks):
                locs = self._blocks[name]
                st = locs.get((executor_id, slot))
                if st is not None and st.where == "memory" and not st.disk_size:
                    del locs[(executor_id, slot)]
                if not locs:
                    del self._blocks[name]

    def remove_executor(self, executor_id: str) -> None:
        with self._lock:
            for name in list(self._blocks):
                locs = self._blocks[name]
                for key in [k for k in locs if k[0] == executor_id]:
                    del locs[key]
                if not locs:
                    del self._blocks[name]

    def rdd_blocks(self, rdd_id: int) -> dict[str, list[BlockStatus]]:
        prefix = f"rdd_{rdd_id}_"
        with self._lock:
            return {n: list(l.values()) for n, l in self._blocks.items() if n.startswith(prefix)}

    def cached_rdd_ids(self) -> set[int]:
        with self._lock:
            return {int(n.split("_")[1]) for n in self._blocks}
