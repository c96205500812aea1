"""Driver's view of cached RDD blocks: which executor slot holds each partition.

Fed by the block updates that come back with task results; read by the DAG scheduler for
locality preferences. Every change is also posted as a BlockUpdated event (after the lock is
released), which is how the UI's storage page and the event log learn about cached blocks.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, replace
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

    def _executor_view(self, name: str, executor_id: str) -> tuple | None:
        """The block as Spark sees it on one executor: (where, mem, disk) of one of its task
        processes holding it (memory first), else None. Two processes of an executor may
        hold copies (a sibling's copy, ember.storage.block_manager); to Spark's listeners
        that is one block, so events are posted only when this view changes."""
        found = None
        for (ex, _slot), st in self._blocks.get(name, {}).items():
            if ex != executor_id:
                continue
            if found is None or (st.where == "memory" and found[0] != "memory"):
                found = (st.where, st.mem_size, st.disk_size)
        return found

    def _changes(self, executor_id: str, host: str | None,
                 before: dict[str, tuple | None]) -> list[BlockUpdated]:
        """The BlockUpdated events for the blocks whose view on `executor_id` differs from
        `before` (block name -> view; called under the lock, posted after it)."""
        events = []
        for name, old in before.items():
            new = self._executor_view(name, executor_id)
            if new == old:
                continue
            if new is None:
                events.append(BlockUpdated(executor_id, host, name, StorageLevel.NONE, 0, 0))
            else:
                where, mem, disk = new
                events.append(BlockUpdated(executor_id, host, name, _level(where, disk),
                                           mem, disk))
        return events

    def _post(self, events: list[BlockUpdated]) -> None:
        if self._bus is not None:
            for event in events:
                self._bus.post(event)

    def update(self, executor_id: str, slot: int, host: str, updates: list) -> None:
        """A task process's block updates, (name, where, mem, disk) each: where is "memory"
        or "disk" (it holds the block there), "removed" (it holds it no more) or
        "no_disk_copy" (its executor's disk has none, whichever process wrote one)."""
        with self._lock:
            before: dict[str, tuple | None] = {}
            for name, where, mem, disk in updates:
                if name not in before:
                    before[name] = self._executor_view(name, executor_id)
                locs = self._blocks.setdefault(name, {})
                key = (executor_id, slot)
                if where == "removed":
                    locs.pop(key, None)
                elif where == "no_disk_copy":
                    for k, st in list(locs.items()):
                        if k[0] == executor_id and st.where == "disk":
                            del locs[k]
                        elif k[0] == executor_id and st.disk_size:
                            locs[k] = replace(st, disk_size=0)
                else:
                    locs[key] = BlockStatus(executor_id, slot, host, where, mem, disk)
                if not locs:
                    del self._blocks[name]
            events = self._changes(executor_id, host, before)
        self._post(events)

    def locations(self, rdd_id: int, split: int) -> list[BlockStatus]:
        locs = self._blocks.get(f"rdd_{rdd_id}_{split}")
        return list(locs.values()) if locs else []

    def remove_rdd(self, rdd_id: int) -> None:
        prefix = f"rdd_{rdd_id}_"
        with self._lock:
            for name in [n for n in self._blocks if n.startswith(prefix)]:
                del self._blocks[name]

    def slots_holding_memory(self) -> dict[str, set[int]]:
        """executor id -> its task processes that hold a block in memory."""
        held: dict[str, set[int]] = {}
        with self._lock:
            for locs in self._blocks.values():
                for (ex, slot), st in locs.items():
                    if st.where == "memory":
                        held.setdefault(ex, set()).add(slot)
        return held

    def remove_slot(self, executor_id: str, slot: int) -> None:
        """A task process died: its memory blocks are gone (disk blocks stay)."""
        with self._lock:
            before: dict[str, tuple | None] = {}
            host = None
            for name in list(self._blocks):
                locs = self._blocks[name]
                st = locs.get((executor_id, slot))
                if st is not None and st.where == "memory" and not st.disk_size:
                    before[name] = self._executor_view(name, executor_id)
                    host = st.host
                    del locs[(executor_id, slot)]
                if not locs:
                    del self._blocks[name]
            events = self._changes(executor_id, host, before)
        self._post(events)

    def remove_executor(self, executor_id: str) -> None:
        with self._lock:
            before: dict[str, tuple | None] = {}
            host = None
            for name in list(self._blocks):
                locs = self._blocks[name]
                mine = [k for k in locs if k[0] == executor_id]
                if mine:
                    before[name] = self._executor_view(name, executor_id)
                for key in mine:
                    host = locs.pop(key).host
                if not locs:
                    del self._blocks[name]
            events = self._changes(executor_id, host, before)
        self._post(events)

    def rdd_blocks(self, rdd_id: int) -> dict[str, list[BlockStatus]]:
        prefix = f"rdd_{rdd_id}_"
        with self._lock:
            return {n: list(l.values()) for n, l in self._blocks.items() if n.startswith(prefix)}

    def executors_with_blocks(self) -> set[str]:
        """Executors holding at least one block (dynamic allocation keeps them)."""
        with self._lock:
            return {key[0] for locs in self._blocks.values() for key in locs}
