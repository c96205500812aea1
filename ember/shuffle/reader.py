"""Reduce side of a shuffle: stream one partition's records from the map outputs holding it.

A reducer looks only at the segments that hold its data: each task process turns a stage's
map statuses into a reduce id -> segments index once (cost: the non-empty segments), so
with thousands of maps and reducers a reducer neither opens nor scans the maps that have
nothing for it. Outputs small enough to travel inside their MapStatus are read from it;
local map outputs (same executor, or same host in local mode) straight from their files
with pread through a bounded set of cached fds; then the others, fetched from each executor
or shuffle service serving them in batches (this reducer's segments there, up to
MAX_BYTES_IN_FLIGHT per request, one batch held at a time). Records come in no particular
order across map outputs, as in Spark. A missing output is a FetchFailedError naming its map
index, which makes the driver recompute it.
"""
from __future__ import annotations

import io
import os
import pickle
from typing import Any, Callable, Iterator

from ember.shuffle.base import FetchFailedError, MapStatus
from ember.shuffle.writer import OUTPUT_FILE

# Spark's spark.reducer.maxSizeInFlight default: what one batched fetch may bring back
MAX_BYTES_IN_FLIGHT = 48 << 20

Segment = tuple[int, MapStatus, int, int]      # map index, status, start, end

# per task process: the index of the statuses list a stage received, keyed by shuffle id
# (the list is kept here too, so the identity check cannot be fooled by a reused id), and
# the map output files its reducers opened, kept open while the index is cached: every
# reducer reads a segment of (nearly) every map file, and an open costs more than the read
_indexes: dict[int, tuple[list, dict[int, list[Segment]], dict[str, int]]] = {}
_MAX_INDEXES = 8
# over all cached shuffles (map outputs go to one file per writing task process, so a
# shuffle has a few files per executor); beyond, a segment read opens and closes its file
_MAX_OPEN_FILES = 256
_PREAD_BYTES = 4 << 20       # a segment up to this size is read whole, larger ones streamed


def _loader(serializer: Any) -> Callable[[Any], list]:
    """Reads one batch written by the writer (see writer.batch_dumps)."""
    if serializer is None:
        return pickle.load
    loads = serializer.loads
    return lambda f: loads(pickle.load(f))


def _plain_loads(serializer: Any) -> Callable[[bytes], list]:
    """One batch from the plaintext of a sealed chunk (spark.io.encryption.enabled)."""
    if serializer is None:
        return pickle.loads
    loads = serializer.loads
    return lambda plain: loads(pickle.loads(plain))


def _records_from_file(f: Any, start: int, end: int, serializer: Any = None,
                       sealer: Any = None) -> Iterator:
    with f:
        f.seek(start)
        if sealer is not None:
            yield from sealer.records(f, end, _plain_loads(serializer))
            return
        load = _loader(serializer)
        while f.tell() < end:
            yield from load(f)


def _records_from_bytes(data: bytes, serializer: Any = None, sealer: Any = None) -> Iterator:
    if sealer is not None:
        yield from sealer.records_from_bytes(data, _plain_loads(serializer))
        return
    buf = io.BytesIO(data)
    load = _loader(serializer)
    n = len(data)
    while buf.tell() < n:
        yield from load(buf)


def segment_files(map_paths: list, starts: list, ends: list,
                  allowed: Callable[[str], bool]) -> list[str]:
    """The .data files a peer's FetchShuffleBlocks names, resolved; ValueError unless the
    lists match, every range is well formed and every file is a map output file that
    `allowed` admits (under the serving side's own directories)."""
    if not (isinstance(map_paths, list) and isinstance(starts, list) and isinstance(ends, list)
            and len(map_paths) == len(starts) == len(ends)):
        raise ValueError("Invalid shuffle block request: paths, starts and ends do not match")
    files = []
    for path, start, end in zip(map_paths, starts, ends):
        if not (isinstance(path, str) and type(start) is int and type(end) is int
                and 0 <= start <= end):
            raise ValueError(f"Invalid shuffle block range: {path!r} {start!r}-{end!r}")
        real = os.path.realpath(path + ".data")
        if not OUTPUT_FILE.fullmatch(os.path.basename(real)) or not allowed(real):
            raise ValueError(f"Invalid shuffle block path: {path}")
        files.append(real)
    return files


def read_segments(files: list[str], starts: list[int], ends: list[int]) -> bytes:
    """Ranges of map output files (checked by segment_files), concatenated: what a remote
    reducer's batched fetch gets. OSError if a file is gone or shorter than asked."""
    out = bytearray()
    for path, start, end in zip(files, starts, ends):
        with open(path, "rb") as f:
            if end > os.fstat(f.fileno()).st_size:
                raise OSError(f"Shuffle file {path} ends before byte {end}")
            out += os.pread(f.fileno(), end - start, start)
    return bytes(out)


def serve_fetch(rpc_env: Any, context: Any, msg: Any, allowed: Callable[[str], bool]) -> None:
    """Answer a FetchShuffleBlocks ask: the request is checked on the RPC loop (a bad path or
    range fails at once), the files are read off it, and every outcome is a reply, so a
    malformed request never leaves the asker hanging. The executor and the worker's shuffle
    service differ only in which files `allowed` admits."""
    try:
        files = segment_files(msg.mapPaths, msg.starts, msg.ends, allowed)
    except ValueError as e:
        context.send_failure(e)
        return

    def read() -> None:
        try:
            data = read_segments(files, msg.starts, msg.ends)
        except OSError as e:
            rpc_env.call_soon(context.send_failure, FileNotFoundError(str(e)))
            return
        except Exception as e:
            rpc_env.call_soon(context.send_failure, ValueError(
                f"Invalid shuffle block request: {type(e).__name__}: {e}"))
            return
        rpc_env.call_soon(context.reply, data)
    rpc_env.run_in_executor(read)


def reduce_index(shuffle_id: int, statuses: list[MapStatus | None]) -> dict[int, list[Segment]]:
    """reduce id -> its non-empty segments in map order, built once per statuses list."""
    cached = _indexes.get(shuffle_id)
    if cached is not None and cached[0] is statuses:
        return cached[1]
    _forget(shuffle_id)
    index: dict[int, list[Segment]] = {}
    for map_index, st in enumerate(statuses):
        if st is None:
            raise FetchFailedError(shuffle_id, map_index, -1, None,
                                   f"Missing an output location for shuffle {shuffle_id} "
                                   f"map {map_index}")
        for reduce_id, start, end in st.segments():
            segs = index.get(reduce_id)
            if segs is None:
                index[reduce_id] = [(map_index, st, start, end)]
            else:
                segs.append((map_index, st, start, end))
    while len(_indexes) >= _MAX_INDEXES:
        _forget(next(iter(_indexes)))
    _indexes[shuffle_id] = (statuses, index, {})
    return index


def _forget(shuffle_id: int) -> None:
    entry = _indexes.pop(shuffle_id, None)
    if entry is not None:
        for fd in entry[2].values():
            os.close(fd)


def _read_segment(shuffle_id: int, path: str, start: int, end: int) -> bytes:
    fds = _indexes[shuffle_id][2]
    fd = fds.get(path)
    if fd is not None:
        return os.pread(fd, end - start, start)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    if sum(len(entry[2]) for entry in _indexes.values()) < _MAX_OPEN_FILES:
        fds[path] = fd
        return os.pread(fd, end - start, start)
    try:
        return os.pread(fd, end - start, start)
    finally:
        os.close(fd)


def read_partition(shuffle_id: int, reduce_id: int, ctx: Any,
                   serializer: Any = None) -> Iterator:
    statuses: list[MapStatus | None] = ctx.map_locations.get(shuffle_id)
    if statuses is None:
        raise FetchFailedError(shuffle_id, -1, reduce_id, None,
                               f"Missing an output location for shuffle {shuffle_id}")
    try:
        segments = reduce_index(shuffle_id, statuses).get(reduce_id, ())
    except FetchFailedError as e:
        raise FetchFailedError(shuffle_id, e.map_index, reduce_id, None,
                               f"{e.message} partition {reduce_id}") from None
    env = ctx.env
    metrics = ctx.metrics
    key = getattr(env, "io_key", None)
    sealer = None
    if key is not None:
        from ember.shuffle.crypto import Sealer
        sealer = Sealer(key)
    remote: dict[tuple[str, str], list[Segment]] = {}
    local_bytes = remote_bytes = 0
    try:
        for seg in segments:
            map_index, st, start, end = seg
            if st.data is not None:
                local_bytes += end - start
                yield from _records_from_bytes(st.data[start:end], serializer, sealer)
            elif _is_local(st, env):
                local_bytes += end - start
                yield from _local_records(shuffle_id, reduce_id, seg, serializer, sealer)
            else:
                remote.setdefault((st.address, st.endpoint), []).append(seg)
        for segs in remote.values():       # then each source's, one batch at a time
            for datas in _fetch_batches(env, shuffle_id, reduce_id, segs):
                for data in datas:
                    remote_bytes += len(data)
                    yield from _records_from_bytes(data, serializer, sealer)
    finally:
        metrics["shuffleLocalBytesRead"] = metrics.get("shuffleLocalBytesRead", 0) + local_bytes
        metrics["shuffleRemoteBytesRead"] = (metrics.get("shuffleRemoteBytesRead", 0)
                                             + remote_bytes)


def _local_records(shuffle_id: int, reduce_id: int, seg: Segment, serializer: Any,
                   sealer: Any) -> Iterator:
    map_index, st, start, end = seg
    try:
        if end - start <= _PREAD_BYTES:
            data = _read_segment(shuffle_id, st.path + ".data", start, end)
            if len(data) != end - start:
                raise OSError(f"it ends before byte {end}")
        else:
            data, f = None, open(st.path + ".data", "rb")
    except OSError as e:
        raise FetchFailedError(shuffle_id, map_index, reduce_id, st,
                               f"Failed to open shuffle file {st.path}.data: {e}") from None
    return (_records_from_bytes(data, serializer, sealer) if data is not None
            else _records_from_file(f, start, end, serializer, sealer))


def _is_local(st: MapStatus, env: Any) -> bool:
    return st.executor_id == env.executor_id or (st.host == env.host and not st.address)


def _fetch_batches(env: Any, shuffle_id: int, reduce_id: int, segs: list[Segment]
                   ) -> Iterator[list[bytes]]:
    """This reducer's segments from one executor or shuffle service: one request per run of
    segments up to MAX_BYTES_IN_FLIGHT (a larger segment travels alone), fetched only when
    the previous batch has been consumed."""
    i = 0
    while i < len(segs):
        batch = [segs[i]]
        size = segs[i][3] - segs[i][2]
        i += 1
        while i < len(segs) and size + segs[i][3] - segs[i][2] <= MAX_BYTES_IN_FLIGHT:
            size += segs[i][3] - segs[i][2]
            batch.append(segs[i])
            i += 1
        first = batch[0][1]
        try:
            datas = env.fetch_remote(first.address, first.endpoint, shuffle_id,
                                     [(st.path, start, end) for _m, st, start, end in batch])
        except FetchFailedError:
            raise
        except Exception as e:
            raise FetchFailedError(shuffle_id, batch[0][0], reduce_id, first,
                                   f"Failed to fetch shuffle blocks from {first.address}: "
                                   f"{e}") from None
        yield datas
