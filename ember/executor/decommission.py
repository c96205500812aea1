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
"""
from __future__ import annotations

import logging
import os
import re
import time
from typing import Any

from ember.deploy.executor_messages import GetPeers, PutMigratedBlock, UpdateBlockInfo
from ember.rpc import RpcAddress
from ember.shuffle.writer import OUTPUT_FILE

log = logging.getLogger("ember.executor.decommission")

CHUNK = 4 << 20
_TIMEOUT = 120.0
PEER_WAIT = 30.0
_BLOCK = re.compile(rf"({OUTPUT_FILE.pattern}|rdd_\d+_\d+)")


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
    deadline = time.monotonic() + PEER_WAIT
    while True:
        peers = backend.driver.ask_sync(GetPeers(backend.executor_id), _TIMEOUT)
        if peers or time.monotonic() >= deadline:
            return list(peers)
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


def migrate_blocks(backend: Any, shuffle: bool, rdd: bool) -> None:
    blocks = blocks_to_migrate(backend, shuffle, rdd)
    if not blocks:
        return
    peers = _peers(backend)
    if not peers:
        log.warning("No peer to migrate %d blocks of executor %s to; they will be "
                    "recomputed", len(blocks), backend.executor_id)
        return
    started = time.monotonic()
    moved = 0
    total = 0
    refs = [backend.rpc_env.endpoint_ref(RpcAddress(p.host, p.port), "Executor")
            for p in peers]
    for i, (block_id, path) in enumerate(blocks):
        ref = refs[i % len(refs)]
        try:
            total += _upload(ref, block_id, path)
            moved += 1
        except Exception as e:
            log.warning("Failed to migrate block %s to %s: %s", block_id, ref.address, e)
    log.info("Migrated %d of %d blocks (%d bytes) of executor %s in %.2f s", moved,
             len(blocks), total, backend.executor_id, time.monotonic() - started)


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
