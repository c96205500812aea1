"""Local mode: one executor ("driver") whose N task slots are long-lived task processes.

Processes, not threads, so CPU-bound Python uses N cores. Every task end frees its slot and
immediately offers it again, in the pool's reader thread, so a stream of tiny tasks costs
one socket round trip each; once they are seen to be short, a busy slot also holds the next
ones, which its process starts without waiting for that round trip
(spark.ember.scheduler.queueShortTasks).
"""
from __future__ import annotations

import math
import os
from typing import Any

from ember.executor.process_pool import TaskProcessPool
from ember.scheduler.backend import SchedulerBackend, WorkerOffer
from ember.scheduler.slot_queues import SlotQueues
from ember.shuffle.writer import remove_shuffle_files

EXECUTOR_ID = "driver"
HOST = "localhost"


class LocalSchedulerBackend(SchedulerBackend):
    def __init__(self, scheduler: Any, num_slots: int, local_dir: str, memory_limit_mb: int,
                 storage_budget: int, files_dir: str, extra_env: dict[str, str],
                 kill_timeout: float, default_parallelism: int | None = None,
                 loop: Any = None, forks: Any = None,
                 fs_conf: dict[str, str] | None = None,
                 pyspark_memory_mb: int | None = None, io_key: bytes | None = None,
                 queue_depth: int = 0, hand_back_s: float | None = None,
                 fault_handler: bool = False) -> None:
        self.scheduler = scheduler
        self.slots = SlotQueues(queue_depth)
        self._revive_pending = False
        self.num_slots = num_slots
        self._default_parallelism = default_parallelism or num_slots
        self.local_dir = local_dir
        block_dir = os.path.join(local_dir, "blocks")
        os.makedirs(block_dir, exist_ok=True)
        env_conf = {"executor_id": EXECUTOR_ID, "host": HOST, "local_dir": local_dir,
                    "block_dir": block_dir, "memory_limit_mb": memory_limit_mb,
                    "storage_budget": storage_budget, "files_dir": files_dir,
                    "cwd": os.getcwd(), "fs_conf": dict(fs_conf or {}),
                    "pyspark_memory_mb": pyspark_memory_mb,
                    "io_key": io_key.hex() if io_key else None, "fault_handler": fault_handler}
        if num_slots == 1:
            # a task handed back could only come back to the same process, after the work
            # it did there (a held partition it took, say) was thrown away
            hand_back_s = math.inf
        self.pool = TaskProcessPool(num_slots, env_conf, self._on_task_end, extra_env,
                                    kill_timeout, on_slot_restarted=self._on_slot_restarted,
                                    loop=loop, forks=forks, on_barrier=self._on_barrier,
                                    hand_back_s=hand_back_s)

    def start(self) -> None:
        self.pool.start()

    def stop(self) -> None:
        self.pool.stop()

    def revive_offers(self) -> None:
        sched = self.scheduler
        with sched.lock:
            self._revive_pending = False
            free = self.pool.free_slots()
            launched = sched.resource_offers(
                [WorkerOffer(EXECUTOR_ID, HOST, s) for s in free]) if free else []
            for td in launched:
                self.slots.started(td.slot, td.task_id)
            most = self.slots.depth and len(launched) == len(free) and \
                sched.queueable_tasks()
            if most:
                # every free slot took a task: busy ones may take more (see
                # spark.ember.scheduler.queueShortTasks)
                room = self.slots.room(most)
                if room:
                    queued = sched.resource_offers(
                        [WorkerOffer(EXECUTOR_ID, HOST, s, None, n) for s, n in room])
                    for td in queued:
                        self.slots.queued(td.slot, td.task_id)
                    launched += queued
            self.pool.launch_all([(td.slot, td.task_id, td.stage_key, td.blob, td.meta,
                                   td.task_bytes) for td in launched])

    def _on_task_end(self, slot: int, tid: int, state: str, payload: Any, accum: dict,
                     metrics: dict, blocks: list) -> None:
        sched = self.scheduler
        with sched.lock:
            sched.status_update(tid, state, payload, accum, metrics, blocks)
            _free, started = self.slots.ended(slot, tid)
            if started is not None:         # it started as this one ended
                sched.promote_queued(started)
            # one offer round for the ends read together, if it could place anything
            if not self._revive_pending and sched.wants_offers():
                self._revive_pending = True
                self.pool.loop.post(self.revive_offers)

    def _on_barrier(self, slot: int, tid: int, request: Any, respond: Any) -> None:
        self.scheduler.barrier_request(EXECUTOR_ID, request, lambda msgs: respond(True, msgs),
                                       lambda error: respond(False, error))

    def _on_slot_restarted(self, slot: int) -> None:
        """Its process died, idle or not: what it cached in memory died with it."""
        if self.scheduler.block_master is not None:
            self.scheduler.block_master.remove_slot(EXECUTOR_ID, slot)
        self.revive_offers()

    def before_cache_build(self) -> None:
        """Busy task processes that hold no memory block start afresh
        (TaskProcessPool.recycle_idle)."""
        master = self.scheduler.block_master
        held = master.slots_holding_memory() if master is not None else {}
        self.pool.recycle_idle(held.get(EXECUTOR_ID, set()))

    def kill_task(self, task_id: int, executor_id: str, slot: int, reason: str) -> None:
        self.pool.kill(slot, task_id)

    def default_parallelism(self) -> int:
        return self._default_parallelism

    def max_num_concurrent_tasks(self) -> int:
        return self.num_slots

    def unpersist_rdd(self, rdd_id: int) -> None:
        self.pool.broadcast(("unpersist_rdd", rdd_id))

    def unpersist_broadcast(self, bid: int) -> None:
        self.pool.broadcast(("unpersist_broadcast", bid))

    def remove_shuffle(self, shuffle_id: int) -> None:
        self.pool.broadcast(("remove_shuffle", shuffle_id))
        remove_shuffle_files(self.local_dir, shuffle_id)

    def forget_stage(self, stage_id: int) -> None:
        self.pool.forget_stage(stage_id)
