"""Map side of a shuffle: bucket records by key, append the output to the process's file.

Records are pickled in batches per reduce partition as they arrive; when the serialized
batches held in memory pass the budget (spark.python.worker.memory) they are spilled to a
run file, and the output is the concatenation, partition by partition, of spilled segments
and what stayed in memory. Only partitions that received records are touched, and the
MapStatus itself carries the (reduce id, start, end) of each non-empty segment: with
thousands of partitions on each side most segments are empty, and a dense per-reducer
index would make a shuffle cost maps x reducers.

Where the output goes: one .data file per task process and shuffle, appended to by every
map task of that shuffle the process runs (creating a file costs more than a whole small
map task); a MapStatus is only sent once its bytes are written, so readers never see a
partial range, and bytes a failed attempt left behind are simply never referenced. A file
changed by anything but those appends (removed, truncated) is never written again: the
statuses of the outputs it held still name their ranges, which must keep their bytes or end
short (a fetch failure, so the driver recomputes them), never hold a later output's bytes;
the next output starts a file of a new name. An output of at most INLINE_BYTES travels
inside its MapStatus and touches no file at all.
With spark.io.encryption.enabled every batch is sealed on its own, so any segment (a run of
whole batches) decrypts alone.
"""
from __future__ import annotations

import os
import pickle
import re
from array import array
from collections import defaultdict
from itertools import accumulate, chain, islice
from typing import Any, Callable, Iterable

from ember.partitioner import portable_hash, round_robin_partition
from ember.shuffle.base import MapStatus
from ember.util.files import created, open_created, unlink_quietly
from ember.util.kill_guard import kills_deferred

_BATCH = 1024
_CHECK_EVERY = 16384
# the driver ships every inline output to each reduce task process once per stage, so this
# bounds that copy at 1 KB per map task
INLINE_BYTES = 1024
# per task process, by output_file_base: the path (without .data) and descriptor of each
# recent shuffle's output file (see the module docstring), written to with writev: a
# buffered file copied every piece once more and cost a seek and two writes per map task
_outputs: dict[str, tuple[str, int]] = {}
_MAX_OUTPUT_FILES = 8
_IOV_MAX = 1024      # the most pieces one writev takes (Linux: UIO_MAXIOV)
# a map output file's name: shuffle id, writing process id and a random number of the file
# (a migrated file keeps its name on the peer, whose own processes' ids may be the same)
OUTPUT_FILE = re.compile(r"shuffle_(\d+)_(\d+)_(\d+)\.data")


def used_memory_mb() -> int:
    """RSS of this process in MB."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10


def spill_prefix(local_dir: str, shuffle_id: int) -> str:
    """Where a shuffle's spill files go: a map attempt's are this + f"_{map}_{attempt}"."""
    return os.path.join(local_dir, f"shuffle_{shuffle_id}")


def output_file_base(local_dir: str, shuffle_id: int) -> str:
    """What names this process's output files of a shuffle (each file's path adds a random
    number and .data)."""
    return os.path.join(local_dir, f"shuffle_{shuffle_id}_{os.getpid()}")


def remove_shuffle_files(local_dir: str, shuffle_id: int) -> None:
    """Delete a shuffle's output and spill files in `local_dir` (every process's, every
    attempt's: all are named shuffle_<id>_...)."""
    prefix = f"shuffle_{shuffle_id}_"
    try:
        names = os.listdir(local_dir)
    except OSError:
        return
    for name in names:
        if name.startswith(prefix):
            unlink_quietly(os.path.join(local_dir, name))


def close_outputs(shuffle_id: int) -> None:
    """Close this process's output file of a removed shuffle (an open descriptor would keep
    the deleted file's space)."""
    prefix = f"shuffle_{shuffle_id}_"
    for base in [b for b in _outputs if os.path.basename(b).startswith(prefix)]:
        os.close(_outputs.pop(base)[1])


def _output_fd(base_path: str) -> tuple[str, int, int]:
    """This process's output file of a shuffle, opened for appending: its path (without
    .data), descriptor and size, where the next append starts. The file is used only while
    it ends where this process's last append left it (it is not removed, and only this
    process writes to it); otherwise a new file is made, under a name never used before."""
    kept = _outputs.get(base_path)
    if kept is not None:
        fd = kept[1]
        st = os.fstat(fd)
        if st.st_nlink and st.st_size == os.lseek(fd, 0, os.SEEK_CUR):
            return kept[0], fd, st.st_size
    # a descriptor is opened and kept, or forgotten and closed, in steps a kill does not cut
    # (a closed descriptor left kept would append to whatever file next reuses its number)
    with kills_deferred:
        if kept is not None:              # removed or changed meanwhile
            os.close(_outputs.pop(base_path)[1])
        while len(_outputs) >= _MAX_OUTPUT_FILES:
            os.close(_outputs.pop(next(iter(_outputs)))[1])
        while True:
            path = f"{base_path}_{int.from_bytes(os.urandom(4), 'big')}"
            try:
                fd = created(f"{path}.data", _new_output_file)
            except FileExistsError:
                continue
            _outputs[base_path] = (path, fd)
            return path, fd, 0


def _new_output_file(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC,
                   0o666)


def _write_all(fd: int, pieces: list[bytes]) -> int:
    """Append the pieces in order, a writev per _IOV_MAX of them; returns the bytes written."""
    total = 0
    for i in range(0, len(pieces), _IOV_MAX):
        group = pieces[i:i + _IOV_MAX] if len(pieces) > _IOV_MAX else pieces
        want = sum(map(len, group))
        done = os.writev(fd, group)
        if done < want:             # cut short (by a signal): the rest from where it stopped
            rest = memoryview(b"".join(group))[done:]
            while rest:
                rest = rest[os.write(fd, rest):]
        total += want
    return total


def write_map_output(records: Iterable, num_partitions: int,
                     partition_func: Callable[[Any], int], spill_base: str, output_base: str,
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
    buckets: defaultdict[int, list] = defaultdict(list)
    chunks: defaultdict[int, list[bytes]] = defaultdict(list)
    held = 0                      # bytes of serialized chunks in memory
    budget = max(memory_limit_mb, 1) << 20
    spills: list[tuple[str, dict[int, tuple[int, int]]]] = []
    count = 0
    fast_hash = partition_func is portable_hash
    if fast_hash:
        portable_hash(None)       # raises PYTHON_HASH_SEED_NOT_SET if it must
    elif partition_func is round_robin_partition:
        fast_hash = True          # keys are ints below 2**61 - 1, which hash to themselves
    # a chunk of records at a time: the per-record loop only buckets them (no batch-size
    # or memory check per record), then full buckets are pickled and the budget checked
    records = iter(records)
    while chunk := list(islice(records, _CHECK_EVERY)):
        if fast_hash:
            for kv in chunk:
                k = kv[0]
                buckets[hash(k) % n if k.__class__ is not tuple and k is not None
                        else partition_func(k) % n].append(kv)
        else:
            for kv in chunk:
                buckets[partition_func(kv[0]) % n].append(kv)
        count += len(chunk)
        if len(chunk) < _CHECK_EVERY:
            break                 # the last chunk: what follows pickles every bucket
        for p in [p for p, b in buckets.items() if len(b) >= _BATCH]:
            data = dumps(buckets.pop(p), 5)
            chunks[p].append(data)
            held += len(data)
        if held > budget // 2 or (held and used_memory_mb() > memory_limit_mb):
            spills.append(_spill(spill_base, len(spills), chunks))
            chunks = defaultdict(list)
            held = 0
    if spills:
        for p, b in buckets.items():
            chunks[p].append(dumps(b, 5))
        parts = set(chunks)
        for _path, segs in spills:
            parts.update(segs)
        blocks = array("q")
        path, written = _append_spilled(output_base, sorted(parts), chunks, spills, blocks)
        status = MapStatus(executor_id, host, path, written, count, address, endpoint,
                           blocks.tobytes())
    else:
        # what a map output usually is with many reducers: a few records per partition, so
        # everything per partition is a C-level call (the segments' bounds are running
        # sums, the blocks array is built from them in one go)
        if chunks:
            parts = sorted(buckets.keys() | chunks.keys())
            for p, b in buckets.items():
                chunks[p].append(dumps(b, 5))
            per_part = [chunks[p] for p in parts]
            lengths = [sum(map(len, c)) for c in per_part]
            pieces = list(chain.from_iterable(per_part))
        else:
            parts = sorted(buckets)
            pieces = [dumps(buckets[p], 5) for p in parts]
            lengths = list(map(len, pieces))
        total = sum(lengths)
        if total <= INLINE_BYTES:
            path, first, data = "", 0, b"".join(pieces)
        else:
            path, first = _append_output(output_base, pieces)
            data = None
        bounds = list(accumulate(lengths, initial=first))
        blocks = array("q", chain.from_iterable(zip(parts, bounds, islice(bounds, 1, None))))
        status = MapStatus(executor_id, host, path, total, count, address, endpoint,
                           blocks.tobytes(), data)
    if metrics is not None:
        metrics["shuffleBytesWritten"] = (metrics.get("shuffleBytesWritten", 0)
                                          + status.bytes_written)
        metrics["shuffleRecordsWritten"] = metrics.get("shuffleRecordsWritten", 0) + count
        if spills:
            metrics["diskBytesSpilled"] = metrics.get("diskBytesSpilled", 0) + sum(
                sum(length for _o, length in segs.values()) for _p, segs in spills)
    return status


def _append_output(base_path: str, pieces: list[bytes]) -> tuple[str, int]:
    """Append an output's pieces to the process's file; returns the file's path (without
    .data) and the offset they start at. Unbuffered: the status may be read as soon as it
    is sent."""
    path, fd, first = _output_fd(base_path)
    _write_all(fd, pieces)
    return path, first


def _append_spilled(base_path: str, parts: list[int], chunks: dict[int, list[bytes]],
                    spills: list[tuple[str, dict[int, tuple[int, int]]]], blocks: array
                    ) -> tuple[str, int]:
    """Append an output that spilled, partition by partition (its spilled segments, then what
    stayed in memory), recording each segment in `blocks`; returns the file's path (without
    .data) and the bytes appended. The spill files are removed."""
    path, fd, first = _output_fd(base_path)
    pos = first
    handles = [open(spill, "rb") for spill, _ in spills]
    try:
        for p in parts:
            pieces = []
            for h, (_path, segs) in zip(handles, spills):
                off, length = segs.get(p, (0, 0))
                if length:
                    h.seek(off)
                    pieces.append(h.read(length))
            pieces.extend(chunks.get(p, ()))
            end = pos + _write_all(fd, pieces)
            blocks.extend((p, pos, end))
            pos = end
    finally:
        for h in handles:
            h.close()
        for spill, _ in spills:
            os.unlink(spill)
    return path, pos - first


def batch_dumps(serializer: Any) -> Callable[[list, int], bytes]:
    """A batch as the application's serializer makes it, framed as a pickled bytes object
    (so a data file stays a sequence of self-delimiting pickles); see batch_loads."""
    def dumps(batch: list, protocol: int) -> bytes:
        return pickle.dumps(serializer.dumps(batch), protocol)
    return dumps


def _spill(base_path: str, seq: int, chunks: dict[int, list[bytes]]
           ) -> tuple[str, dict[int, tuple[int, int]]]:
    path = f"{base_path}.spill{seq}"
    segs = {}
    with open_created(path) as f:
        for p, part in chunks.items():
            start = f.tell()
            for data in part:
                f.write(data)
            segs[p] = (start, f.tell() - start)
    return path, segs


class ShuffleWriteFunc:
    """The map side of a ShuffleMapStage: what a task process runs over its partition."""

    def __init__(self, shuffle_id: int, num_partitions: int,
                 partition_func: Callable[[Any], int], serializer: Any = None) -> None:
        self.shuffle_id = shuffle_id
        self.num_partitions = num_partitions
        self.partition_func = partition_func
        self.serializer = serializer
        # per task process (the function arrives once per stage): the local dir and process
        # they were joined for, the spill prefix and the output base, joined once rather
        # than per map task (the process too: a copy pickled after a call must not write to
        # the file of the process that made the call)
        self._paths: tuple[str, int, str, str] = ("", 0, "", "")

    @classmethod
    def for_dependency(cls, dep: Any) -> "ShuffleWriteFunc":
        return cls(dep.shuffle_id, dep.num_partitions, dep.partition_func, dep.serializer)

    def __call__(self, ctx: Any, records: Iterable, task_attempt_id: int) -> MapStatus:
        env = ctx.env
        local_dir, pid, spills, output_base = self._paths
        if local_dir != env.local_dir or pid != os.getpid():
            local_dir, pid = env.local_dir, os.getpid()
            spills = spill_prefix(local_dir, self.shuffle_id)
            output_base = output_file_base(local_dir, self.shuffle_id)
            self._paths = (local_dir, pid, spills, output_base)
        return write_map_output(records, self.num_partitions, self.partition_func,
                                f"{spills}_{ctx.partitionId()}_{task_attempt_id}",
                                output_base, env.memory_limit_mb, env.executor_id, env.host,
                                env.shuffle_address, ctx.metrics, self.serializer,
                                env.shuffle_endpoint, getattr(env, "io_key", None))
