"""Block migration of a decommissioning executor (Spark's BlockManagerDecommissioner).

Why: a drained worker must not cost the running jobs their shuffle output or cache. The
executor being decommissioned copies each map output file (one per task process and
shuffle, holding the segments of every map output that process wrote) and each cached RDD
block (memory blocks are first written out by the task processes) to a peer executor, round
robin over the peers the driver names (GetPeers), in chunks of ``CHUNK`` bytes
(PutMigratedBlock asks). The file keeps its name and bytes (sealed segments stay sealed), so
the ranges the map statuses name stay valid. The peer puts the file in its own directories
and, before acknowledging the last chunk, tells the driver (UpdateBlockInfo), which moves
every map output in that file in the tracker (Spark's updateMapOutput) or adds the cached
block's new location. So by the time this executor exits, every migrated output already has
its new home and nothing is recomputed. Outputs small enough to travel inside their
MapStatus have no file and need no migration.

A peer may start draining itself after it was named (the driver decommissions executors one
by one): it refuses blocks from then on (BlockSavedOnDecommissionedBlockManagerException,
Spark's name), since it has listed what it will migrate and a block landing later would be
lost with it. The block goes to the next peer, and a refusing or failing peer gets no more
blocks; other failures count, up to spark.storage.decommission.maxReplicationFailuresPerBlock
a block, as Spark's decommissioner. When no peer is left, the driver is asked again.
"""
from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from ember.deploy.executor_messages import GetPeers, PutMigratedBlock, UpdateBlockInfo
from ember.errors import SparkException
from ember.rpc import RpcAddress
from ember.shuffle.writer import OUTPUT_FILE

log = logging.getLogger("ember.executor.decommission")

CHUNK = 4 << 20
_TIMEOUT = 120.0
PEER_WAIT = 30.0
_BLOCK = re.compile(rf"({OUTPUT_FILE.pattern}|rdd_\d+_\d+)")


class BlockSavedOnDecommissionedBlockManagerException(SparkException):
    """A migrated block offered to an executor that is draining itself."""

    def __init__(self, block_id: str) -> None:
        super().__init__(f"Block {block_id} cannot be saved on decommissioned executor")


def migrated_block_path(work_dir: str, block_id: str) -> str:
    """Where a migrated block goes on the receiving executor; ValueError for any other name."""
    if not _BLOCK.fullmatch(block_id):
        raise ValueError(f"Invalid migrated block id: {block_id!r}")
    if block_id.startswith("rdd_"):
        return os.path.join(work_dir, "blocks", block_id)
    return os.path.join(work_dir, block_id)


def store_migrated_chunk(backend: Any, path: str, msg: PutMigratedBlock) -> bool:
    """Receiving side: write one chunk; on the last one put the file in place and report
    shuffle data / RDD blocks to the driver (an ask: acknowledged before we answer)."""
    if not msg.offset and os.path.exists(path):
        raise FileExistsError(f"Migrated block {msg.blockId} already exists here")
    tmp = path + ".migrating"
    with open(tmp, "r+b" if msg.offset else "wb") as f:
        f.seek(msg.offset)
        f.write(msg.data)
    if not msg.last:
        return True
    os.replace(tmp, path)
    size = os.path.getsize(path)
    block = msg.blockId
    if block.startswith("shuffle_"):
        address, endpoint = backend.shuffle_location()
        update = UpdateBlockInfo(backend.executor_id, block, 0, size, path[:-len(".data")],
                                 address, endpoint)
    else:
        update = UpdateBlockInfo(backend.executor_id, block, 0, size)
    return bool(backend.driver.ask_sync(update, _TIMEOUT))


def _peers(backend: Any) -> list[Any]:
    """Endpoint refs of the executors the driver names as peers (waiting up to PEER_WAIT
    for one)."""
    deadline = time.monotonic() + PEER_WAIT
    while True:
        peers = backend.driver.ask_sync(GetPeers(backend.executor_id), _TIMEOUT)
        if peers or time.monotonic() >= deadline:
            return [backend.rpc_env.endpoint_ref(RpcAddress(p.host, p.port), "Executor")
                    for p in peers]
        time.sleep(0.5)


def blocks_to_migrate(backend: Any, shuffle: bool, rdd: bool) -> list[tuple[str, str]]:
    """(block id, local path) of each cached block and map output file."""
    out: list[tuple[str, str]] = []
    if rdd:
        if backend.pool is not None:
            backend.pool.export_blocks()
        block_dir = os.path.join(backend.work_dir, "blocks")
        for name in sorted(os.listdir(block_dir)) if os.path.isdir(block_dir) else []:
            if _BLOCK.fullmatch(name) and name.startswith("rdd_"):
                out.append((name, os.path.join(block_dir, name)))
    if shuffle:
        for name in sorted(os.listdir(backend.work_dir)):
            if OUTPUT_FILE.fullmatch(name):
                out.append((name, os.path.join(backend.work_dir, name)))
    return out


def migrate_blocks(backend: Any, shuffle: bool, rdd: bool, max_failures: int = 3) -> None:
    blocks = blocks_to_migrate(backend, shuffle, rdd)
    if not blocks:
        return
    peers = _peers(backend)
    max_failures = max(1, max_failures)
    started = time.monotonic()
    moved = 0
    total = 0
    for i, (block_id, path) in enumerate(blocks):
        size = _upload_somewhere(backend, peers, i, block_id, path, max_failures) \
            if peers else None
        if size is not None:
            total += size
            moved += 1
        elif not peers:
            log.warning("No peer to migrate %d blocks of executor %s to; they will be "
                        "recomputed", len(blocks) - i, backend.executor_id)
            return
    log.info("Migrated %d of %d blocks (%d bytes) of executor %s in %.2f s", moved,
             len(blocks), total, backend.executor_id, time.monotonic() - started)


def _upload_somewhere(backend: Any, peers: list[Any], turn: int, block_id: str, path: str,
                      max_failures: int) -> int | None:
    """Upload the block to a peer, round robin from `turn`; its size, or None once it failed
    max_failures times or no peer is left. A peer that refuses or fails leaves `peers`;
    when none is left the driver is asked once for peers again."""
    failures = 0
    asked_again = False
    while failures < max_failures:
        if not peers:
            if asked_again:
                return None
            asked_again = True
            peers.extend(_peers(backend))
            continue
        ref = peers[turn % len(peers)]
        try:
            return _upload(ref, block_id, path)
        except Exception as e:
            if not os.path.exists(path):     # deleted meanwhile (its RDD unpersisted)
                log.info("Skipping block %s: deleted", block_id)
                return None
            peers.remove(ref)
            if getattr(e, "remote_type", None) == \
                    BlockSavedOnDecommissionedBlockManagerException.__name__:
                log.info("Executor at %s is decommissioned too; migrating %s elsewhere",
                         ref.address, block_id)
                continue
            failures += 1
            log.warning("Failed to migrate block %s to %s (%d / %d): %s", block_id,
                        ref.address, failures, max_failures, e)
    return None


def _upload(ref: Any, block_id: str, path: str) -> int:
    size = os.path.getsize(path)
    offset = 0
    with open(path, "rb") as f:
        while True:
            data = f.read(CHUNK)
            last = offset + len(data) >= size
            ref.ask_sync(PutMigratedBlock(block_id, offset, data, last), _TIMEOUT)
            offset += len(data)
            if last:
                return size
