"""Map side of a shuffle: bucket records by key, write one .data file and one .index file.

Records are pickled in batches per reduce partition as they arrive; when the serialized
batches held in memory pass the budget (spark.python.worker.memory) they are spilled to a
run file, and the final .data file is the concatenation, partition by partition, of spilled
segments and what stayed in memory. The .index file holds n+1 big-endian offsets, so a
reducer (local or remote) reads exactly its segment.
"""
from __future__ import annotations

import os
import pickle
import struct
from typing import Any, Callable, Iterable

from ember.partitioner import portable_hash
from ember.shuffle.base import MapStatus

_BATCH = 1024
_CHECK_EVERY = 16384


def used_memory_mb() -> int:
    """RSS of this process in MB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def shuffle_file_base(local_dir: str, shuffle_id: int, map_index: int, attempt_id: int) -> str:
    return os.path.join(local_dir, f"shuffle_{shuffle_id}_{map_index}_{attempt_id}")


def write_map_output(records: Iterable, num_partitions: int,
                     partition_func: Callable[[Any], int], base_path: str,
                     memory_limit_mb: int, executor_id: str, host: str,
                     address: str = "", metrics: dict | None = None,
                     serializer: Any = None, endpoint: str = "Executor",
                     io_key: bytes | None = None) -> MapStatus:
    n = num_partitions
    plain_dumps = pickle.dumps if serializer is None else batch_dumps(serializer)
    dumps = plain_dumps
    if io_key is not None:            # spark.io.encryption.enabled: every chunk sealed
        from ember.shuffle.crypto import Sealer
        seal = Sealer(io_key).seal

        def dumps(obj: Any, protocol: int) -> bytes:   # noqa: F811
            return seal(plain_dumps(obj, protocol))
    buckets: list[list] = [[] for _ in range(n)]
    chunks: list[list[bytes]] = [[] for _ in range(n)]
    held = 0                      # bytes of serialized chunks in memory
    budget = max(memory_limit_mb, 1) << 20
    spills: list[tuple[str, list[tuple[int, int]]]] = []
    count = 0
    since_check = 0
    fast_hash = partition_func is portable_hash
    if fast_hash:
        portable_hash(None)       # raises PYTHON_HASH_SEED_NOT_SET if it must
    for kv in records:
        k = kv[0]
        if fast_hash and k.__class__ is not tuple and k is not None:
            p = hash(k) % n
        else:
            p = partition_func(k) % n
        b = buckets[p]
        b.append(kv)
        if len(b) >= _BATCH:
            data = dumps(b, 5)
            chunks[p].append(data)
            held += len(data)
            buckets[p] = []
        since_check += 1
        if since_check >= _CHECK_EVERY:
            count += since_check
            since_check = 0
            if held > budget // 2 or (held and used_memory_mb() > memory_limit_mb):
                spills.append(_spill(base_path, len(spills), chunks))
                chunks = [[] for _ in range(n)]
                held = 0
    count += since_check

    tmp_data = f"{base_path}.data.tmp"
    offsets = [0]
    with open(tmp_data, "wb") as out:
        handles = [open(path, "rb") for path, _ in spills]
        try:
            for p in range(n):
                for h, (_path, segs) in zip(handles, spills):
                    off, length = segs[p]
                    if length:
                        h.seek(off)
                        out.write(h.read(length))
                for data in chunks[p]:
                    out.write(data)
                if buckets[p]:
                    out.write(dumps(buckets[p], 5))
                offsets.append(out.tell())
        finally:
            for h in handles:
                h.close()
            for path, _ in spills:
                os.unlink(path)
    with open(f"{base_path}.index.tmp", "wb") as f:
        f.write(struct.pack(f">{n + 1}q", *offsets))
    os.replace(f"{base_path}.index.tmp", f"{base_path}.index")
    os.replace(tmp_data, f"{base_path}.data")
    if metrics is not None:
        metrics["shuffleBytesWritten"] = metrics.get("shuffleBytesWritten", 0) + offsets[-1]
        metrics["shuffleRecordsWritten"] = metrics.get("shuffleRecordsWritten", 0) + count
        if spills:
            metrics["diskBytesSpilled"] = metrics.get("diskBytesSpilled", 0) + sum(
                sum(length for _o, length in segs) for _p, segs in spills)
    return MapStatus(executor_id, host, base_path, offsets[-1], count, address, endpoint)


def batch_dumps(serializer: Any) -> Callable[[list, int], bytes]:
    """A batch as the application's serializer makes it, framed as a pickled bytes object
    (so a data file stays a sequence of self-delimiting pickles); see batch_loads."""
    def dumps(batch: list, protocol: int) -> bytes:
        return pickle.dumps(serializer.dumps(batch), protocol)
    return dumps


def _spill(base_path: str, seq: int, chunks: list[list[bytes]]) -> tuple[str, list]:
    path = f"{base_path}.spill{seq}"
    segs = []
    with open(path, "wb") as f:
        for part in chunks:
            start = f.tell()
            for data in part:
                f.write(data)
            segs.append((start, f.tell() - start))
    return path, segs


def read_index(base_path: str, reduce_id: int) -> tuple[int, int]:
    with open(f"{base_path}.index", "rb") as f:
        f.seek(reduce_id * 8)
        start, end = struct.unpack(">2q", f.read(16))
    return start, end


class ShuffleWriteFunc:
    """The map side of a ShuffleMapStage: what a task process runs over its partition."""

    def __init__(self, shuffle_id: int, num_partitions: int,
                 partition_func: Callable[[Any], int], serializer: Any = None) -> None:
        self.shuffle_id = shuffle_id
        self.num_partitions = num_partitions
        self.partition_func = partition_func
        self.serializer = serializer

    @classmethod
    def for_dependency(cls, dep: Any) -> "ShuffleWriteFunc":
        return cls(dep.shuffle_id, dep.num_partitions, dep.partition_func, dep.serializer)

    def __call__(self, ctx: Any, records: Iterable, task_attempt_id: int) -> MapStatus:
        env = ctx.env
        base = shuffle_file_base(env.local_dir, self.shuffle_id, ctx.partitionId(),
                                 task_attempt_id)
        return write_map_output(records, self.num_partitions, self.partition_func, base,
                                env.memory_limit_mb, env.executor_id, env.host,
                                env.shuffle_address, ctx.metrics, self.serializer,
                                env.shuffle_endpoint, getattr(env, "io_key", None))
