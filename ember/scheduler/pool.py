"""Scheduling pools: FIFO and FAIR ordering of task sets (Spark's Pool and algorithms).

Pools come from spark.scheduler.allocation.file (fairscheduler.xml format); a job's pool is
its thread-local property spark.scheduler.pool; unknown pools are created with defaults.
"""
from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

DEFAULT_POOL_NAME = "default"


class Pool:
    def __init__(self, name: str, mode: str = "FIFO", min_share: int = 0, weight: int = 1) -> None:
        self.name = name
        self.scheduling_mode = mode
        self.min_share = min_share
        self.weight = weight
        self.children: list[Any] = []   # Pools or TaskSetManagers
        self.pools: dict[str, Pool] = {}

    @property
    def running_tasks(self) -> int:
        return sum(c.running_tasks for c in self.children)

    @property
    def priority(self) -> int:
        return 0

    @property
    def stage_id(self) -> int:
        return 0

    def add(self, child: Any) -> None:
        self.children.append(child)
        if isinstance(child, Pool):
            self.pools[child.name] = child

    def remove(self, child: Any) -> None:
        try:
            self.children.remove(child)
        except ValueError:
            pass

    def sorted_task_sets(self) -> list[Any]:
        children = self.children
        if len(children) == 1 and not isinstance(children[0], Pool):   # one job running
            return [] if children[0].is_zombie else [children[0]]
        out: list[Any] = []
        key = _fifo_key if self.scheduling_mode == "FIFO" else _fair_key
        for c in sorted(self.children, key=key):
            if isinstance(c, Pool):
                out.extend(c.sorted_task_sets())
            elif not c.is_zombie:
                out.append(c)
        return out


def _fifo_key(s: Any) -> tuple:
    return (s.priority, s.stage_id)


def _fair_key(s: Any) -> tuple:
    running = s.running_tasks
    min_share = s.min_share
    needy = running < min_share
    min_share_ratio = running / max(min_share, 1)
    task_to_weight = running / max(s.weight, 1)
    if needy:
        return (0, min_share_ratio, s.name)
    return (1, task_to_weight, s.name)


class SchedulableBuilder:
    """Builds the root pool; FIFO puts task sets straight in it, FAIR in named sub-pools."""

    def __init__(self, mode: str, allocation_file: str | None = None) -> None:
        if mode not in ("FIFO", "FAIR"):
            raise ValueError(f"Unsupported spark.scheduler.mode: {mode}")
        self.mode = mode
        self.root = Pool("", mode)
        if mode == "FAIR":
            if allocation_file:
                self._load(allocation_file)
            if DEFAULT_POOL_NAME not in self.root.pools:
                self.root.add(Pool(DEFAULT_POOL_NAME))

    def _load(self, path: str) -> None:
        import xml.etree.ElementTree as ET   # only FAIR mode with an allocation file parses XML
        tree = ET.parse(path)
        for el in tree.getroot().iter("pool"):
            name = el.get("name")
            mode = (el.findtext("schedulingMode") or "FIFO").strip().upper()
            if mode not in ("FIFO", "FAIR"):
                log.warning("Unsupported schedulingMode: %s found in Fair Scheduler "
                            "configuration file, using the default schedulingMode: FIFO", mode)
                mode = "FIFO"
            weight = _int(el.findtext("weight"), 1, "weight")
            min_share = _int(el.findtext("minShare"), 0, "minShare")
            self.root.add(Pool(name, mode, min_share, weight))

    def add_task_set(self, tsm: Any, properties: dict[str, str]) -> None:
        if self.mode == "FIFO":
            self.root.add(tsm)
            tsm.parent = self.root
            return
        name = properties.get("spark.scheduler.pool") or DEFAULT_POOL_NAME
        pool = self.root.pools.get(name)
        if pool is None:
            log.warning("A job was submitted with scheduler pool %s, which has not been "
                        "configured. This can happen when the file that pools are read from "
                        "isn't set, or when that file doesn't contain %s. Created %s with "
                        "default configuration (schedulingMode: FIFO, minShare: 0, weight: 1)",
                        name, name, name)
            pool = Pool(name)
            self.root.add(pool)
        pool.add(tsm)
        tsm.parent = pool


def _int(text: str | None, default: int, what: str) -> int:
    if text is None:
        return default
    try:
        return int(text.strip())
    except ValueError:
        log.warning("Error while loading fair scheduler configuration: %s %r is not an "
                    "integer, using the default %d", what, text, default)
        return default
