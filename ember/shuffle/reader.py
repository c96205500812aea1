"""Reduce side of a shuffle: stream one partition's records from the map outputs holding it.

A reducer looks only at the segments that hold its data: each task process turns a stage's
map statuses into a reduce id -> segments index once (cost: the non-empty segments), so
with thousands of maps and reducers a reducer neither opens nor scans the maps that have
nothing for it. Outputs small enough to travel inside their MapStatus are read from it;
local map outputs (same executor, or same host in local mode) straight from their files
with pread through a bounded set of cached fds, and so are those of other executors on this
host (Spark's spark.shuffle.readHostLocalDisk: same application, same user, so the RPC
round trip buys nothing; a file that cannot be opened here is fetched over RPC instead).
The others are fetched from each executor or shuffle service serving them as Spark's
ShuffleBlockFetcherIterator does: requests of about spark.reducer.maxSizeInFlight / 5,
sources interleaved, sent ahead while the bytes in flight stay within maxSizeInFlight (and
the requests within spark.reducer.maxReqsInFlight), so the next batches arrive while the
current one is merged and memory stays bounded. Records come in no particular order across
map outputs, as in Spark. A missing output is a FetchFailedError naming its map index,
which makes the driver recompute it.
"""
from __future__ import annotations

import io
import os
import pickle
from array import array
from bisect import bisect_left
from collections import deque
from itertools import chain
from typing import Any, Callable, Iterator

from ember.shuffle.base import FetchFailedError, MapStatus
from ember.shuffle.writer import OUTPUT_FILE
from ember.util.kill_guard import kills_deferred

# Spark's defaults of spark.reducer.maxSizeInFlight (the bytes of the fetch requests sent
# and not yet taken by the reducer) and spark.reducer.maxReqsInFlight; a task process on a
# cluster gets the application's values in its env
MAX_BYTES_IN_FLIGHT = 48 << 20
MAX_REQS_IN_FLIGHT = 2 ** 31 - 1

Segment = tuple[int, MapStatus, int, int]      # map index, status, start, end

# per task process: the index of the statuses list a stage received, keyed by shuffle id
# (the list is kept here too, so the identity check cannot be fooled by a reused id), and
# the map output files its reducers opened, kept open while the index is cached: every
# reducer reads a segment of (nearly) every map file, and an open costs more than the read.
# The index maps a reduce id to (map index, start, end) triples in an int64 array: arrays
# are not tracked by the garbage collector, so the hundreds of thousands of segments of a big
# shuffle are neither slow to build (no collections while they are made) nor traversed by
# every full collection while the index stays cached. The last element is the shuffle's read
# plan (see _plan), made by the first reducer that reads.
_indexes: dict[int, tuple[list, dict[int, array], dict[str, int], list]] = {}
_MAX_INDEXES = 8
# over all cached shuffles (map outputs go to one file per writing task process, so a
# shuffle has a few files per executor); beyond, a segment read opens and closes its file
_MAX_OPEN_FILES = 256
_PREAD_BYTES = 4 << 20       # a segment up to this size is read whole, larger ones streamed
# segments read whole are unpickled together once they reach this size (or the reducer's
# local segments end): with thousands of maps a reducer's segments are mostly a record or
# two each, and a buffer and a generator per segment cost more than the records
_MERGE_BYTES = 1 << 20


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


def _batches_from_file(f: Any, start: int, end: int, serializer: Any = None,
                       sealer: Any = None) -> Iterator[list]:
    with f:
        f.seek(start)
        if sealer is not None:
            yield from sealer.batches(f, end, _plain_loads(serializer))
            return
        load = _loader(serializer)
        while f.tell() < end:
            yield load(f)


def _batches_from_bytes(data: bytes, serializer: Any = None, sealer: Any = None
                        ) -> Iterator[list]:
    if sealer is not None:
        yield from sealer.batches_from_bytes(data, _plain_loads(serializer))
        return
    buf = io.BytesIO(data)
    load = _loader(serializer)
    n = len(data)
    while buf.tell() < n:
        yield load(buf)


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


def reduce_index(shuffle_id: int, statuses: list[MapStatus | None]) -> dict[int, array]:
    """reduce id -> (map index, start, end) of its non-empty segments in map order, built
    once per statuses list."""
    cached = _indexes.get(shuffle_id)
    if cached is not None and cached[0] is statuses:
        return cached[1]
    forget_shuffle(shuffle_id)
    index: dict[int, array] = {}
    get = index.get
    for map_index, st in enumerate(statuses):
        if st is None:
            raise FetchFailedError(shuffle_id, map_index, -1, None,
                                   f"Missing an output location for shuffle {shuffle_id} "
                                   f"map {map_index}")
        for reduce_id, start, end in st.segments():
            segs = get(reduce_id)
            if segs is None:
                segs = index[reduce_id] = array("q")
            segs.extend((map_index, start, end))
    while len(_indexes) >= _MAX_INDEXES:
        forget_shuffle(next(iter(_indexes)))
    _indexes[shuffle_id] = (statuses, index, {}, [])
    return index


def forget_shuffle(shuffle_id: int) -> None:
    """Drop a shuffle's index and close its files (a stale index, one making room, or the
    context cleaner's RemoveShuffle). The dict of descriptors is emptied too: a reducer
    still reading (several shuffles read at once in one task, more than _MAX_INDEXES) holds
    it, and must not use a closed descriptor whose number the next open may reuse."""
    with kills_deferred:                # no descriptor left open and unlisted
        entry = _indexes.pop(shuffle_id, None)
        if entry is not None:
            for fd in entry[2].values():
                os.close(fd)
            entry[2].clear()
            plan = entry[3]
            plan[:] = [None] * len(plan)      # such a reader takes the checked path from here


def _plan(entry: tuple, env: Any) -> list:
    """Per map of a cached index, where this process reads its segments: the output itself
    (inline in its status), the open descriptor of its file (written on this executor, or
    on this host in local mode), or None for the per-segment checks (another executor's
    output, or no descriptor to cache). Made once per shuffle and process: with thousands of
    maps a reducer's segments are mostly a record each, and the checks, repeated per segment,
    cost as much as the read.

    The plan is cached whole or not at all: a kill (TaskKilledException, raised by a signal
    between any two steps of the task) that stopped a plan half made left the next task of
    this process a plan shorter than the maps (IndexError in the last count of
    examples/transitive_closure.py, where handed-back tasks are killed as they run)."""
    plan = entry[3]
    if plan or not entry[0]:
        return plan
    my_id, my_host = env.executor_id, env.host
    fds = entry[2]
    opened: dict[str, int | None] = {}
    made = []
    for st in entry[0]:
        src = st.data
        if src is None and (st.executor_id == my_id or (st.host == my_host
                                                        and not st.address)):
            path = st.path + ".data"
            if path not in opened:
                opened[path] = _cached_fd(fds, path)
            src = opened[path]
        made.append(src)
    plan[:] = made          # one step: no signal handler runs inside it
    return plan


def _cached_fd(fds: dict[str, int], path: str) -> int | None:
    """The descriptor of a map output file, opened and kept in `fds` while the open files of
    all cached shuffles stay within _MAX_OPEN_FILES; None when it cannot be (the checked path
    then opens it per read, or names it in the fetch failure)."""
    fd = fds.get(path)
    if fd is None and sum(len(e[2]) for e in _indexes.values()) < _MAX_OPEN_FILES:
        try:
            with kills_deferred:
                fd = fds[path] = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
    return fd


def _read_segment(shuffle_id: int, path: str, start: int, end: int) -> bytes:
    entry = _indexes.get(shuffle_id)
    fds = entry[2] if entry is not None else None
    fd = fds.get(path) if fds is not None else None
    if fd is not None:
        return os.pread(fd, end - start, start)
    with kills_deferred:            # opened, then kept or closed
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        if fds is not None and sum(len(e[2]) for e in _indexes.values()) < _MAX_OPEN_FILES:
            fds[path] = fd
        else:
            try:
                return os.pread(fd, end - start, start)
            finally:
                os.close(fd)
    return os.pread(fd, end - start, start)


def read_partition(shuffle_id: int, reduce_id: int, ctx: Any,
                   serializer: Any = None, maps: tuple[int, int] | None = None) -> Iterator:
    """The partition's records: its batches chained in C, so a record costs no generator
    step (two nested generators, one a record, cost as much as unpickling it). With `maps`
    (first, end): only those the map tasks in that range wrote (a cogroup's side of a
    union)."""
    return chain.from_iterable(_read_batches(shuffle_id, reduce_id, ctx, serializer, maps))


def _read_batches(shuffle_id: int, reduce_id: int, ctx: Any,
                  serializer: Any = None, maps: tuple[int, int] | None = None
                  ) -> Iterator[list]:
    statuses: list[MapStatus | None] = ctx.map_locations.get(shuffle_id)
    if statuses is None:
        raise FetchFailedError(shuffle_id, -1, reduce_id, None,
                               f"Missing an output location for shuffle {shuffle_id}")
    try:
        triples = reduce_index(shuffle_id, statuses).get(reduce_id)
    except FetchFailedError as e:
        raise FetchFailedError(shuffle_id, e.map_index, reduce_id, None,
                               f"{e.message} partition {reduce_id}") from None
    if maps is not None and triples is not None:      # in map order: the range's slice
        map_indexes = triples[::3]
        triples = triples[3 * bisect_left(map_indexes, maps[0]):
                          3 * bisect_left(map_indexes, maps[1])]
    env = ctx.env
    metrics = ctx.metrics
    key = getattr(env, "io_key", None)
    sealer = None
    if key is not None:
        from ember.shuffle.crypto import Sealer
        sealer = Sealer(key)
    host_local = getattr(env, "read_host_local_disk", False)
    my_id, my_host = env.executor_id, env.host
    entry = _indexes[shuffle_id]
    fds = entry[2]
    plan = _plan(entry, env)
    pread = os.pread
    remote: dict[tuple[str, str], list[Segment]] = {}
    local_bytes = remote_bytes = 0
    merged: list[bytes] = []        # segments read and not yet unpickled
    merged_bytes = 0
    each = iter(triples if triples is not None else ())
    try:
        # per segment only what it needs: with thousands of maps a reducer has thousands
        # of segments of a record or two, and each step here is paid for every one
        for map_index, start, end in zip(each, each, each):
            src = plan[map_index]
            if src.__class__ is int and end - start <= _PREAD_BYTES:
                try:
                    data = pread(src, end - start, start)
                except OSError:
                    data = b""
                if len(data) != end - start:    # raises naming the file
                    data = _local_bytes(shuffle_id, reduce_id,
                                        (map_index, statuses[map_index], start, end))
            elif src.__class__ is bytes:
                data = src[start:end]
            elif (st := statuses[map_index]).data is not None:
                data = st.data[start:end]
            elif (st.executor_id == my_id or (st.host == my_host and not st.address)
                  or (host_local and st.host == my_host and _readable(shuffle_id, st))):
                if end - start > _PREAD_BYTES:     # streamed, after what was read before it
                    if merged:
                        yield from _batches_from_bytes(b"".join(merged), serializer, sealer)
                        merged, merged_bytes = [], 0
                    local_bytes += end - start
                    yield from _streamed_batches(shuffle_id, reduce_id,
                                                 (map_index, st, start, end), serializer, sealer)
                    continue
                fd = fds.get(st.path + ".data")
                data = b""
                if fd is not None:
                    try:
                        data = pread(fd, end - start, start)
                    except OSError:
                        pass
                if len(data) != end - start:    # opens the file, or raises naming it
                    data = _local_bytes(shuffle_id, reduce_id, (map_index, st, start, end))
            else:
                remote.setdefault((st.address, st.endpoint), []).append(
                    (map_index, st, start, end))
                continue
            local_bytes += end - start
            merged.append(data)
            merged_bytes += end - start
            if merged_bytes >= _MERGE_BYTES:
                yield from _batches_from_bytes(b"".join(merged), serializer, sealer)
                merged, merged_bytes = [], 0
        if merged:
            yield from _batches_from_bytes(b"".join(merged), serializer, sealer)
        for data in _fetch_remote(env, shuffle_id, reduce_id, list(remote.values())):
            remote_bytes += len(data)
            yield from _batches_from_bytes(data, serializer, sealer)
    finally:
        metrics["shuffleLocalBytesRead"] = metrics.get("shuffleLocalBytesRead", 0) + local_bytes
        metrics["shuffleRemoteBytesRead"] = (metrics.get("shuffleRemoteBytesRead", 0)
                                             + remote_bytes)


def _readable(shuffle_id: int, st: MapStatus) -> bool:
    """Whether another executor's map output file on this host can be read directly (its
    work dir may be on a filesystem this process does not see, or the file gone: then the
    executor or shuffle service serving it is asked, and decides)."""
    path = st.path + ".data"
    entry = _indexes.get(shuffle_id)
    return (entry is not None and path in entry[2]) or os.access(path, os.R_OK)


def _local_bytes(shuffle_id: int, reduce_id: int, seg: Segment) -> bytes:
    map_index, st, start, end = seg
    try:
        data = _read_segment(shuffle_id, st.path + ".data", start, end)
        if len(data) != end - start:
            raise OSError(f"it ends before byte {end}")
    except OSError as e:
        raise _open_failed(shuffle_id, reduce_id, seg, e) from None
    return data


def _streamed_batches(shuffle_id: int, reduce_id: int, seg: Segment, serializer: Any,
                      sealer: Any) -> Iterator[list]:
    """A segment too large to read whole. Not a generator: a file that cannot be opened
    fails here, before the caller yields anything more."""
    try:
        f = open(seg[1].path + ".data", "rb")
    except OSError as e:
        raise _open_failed(shuffle_id, reduce_id, seg, e) from None
    return _batches_from_file(f, seg[2], seg[3], serializer, sealer)


def _open_failed(shuffle_id: int, reduce_id: int, seg: Segment, e: OSError
                 ) -> FetchFailedError:
    return FetchFailedError(shuffle_id, seg[0], reduce_id, seg[1],
                            f"Failed to open shuffle file {seg[1].path}.data: {e}")


def _requests(sources: list[list[Segment]], target: int) -> deque:
    """Each source's segments cut into requests of about `target` bytes (a larger segment
    goes alone), the sources' requests interleaved so that several peers serve at once."""
    per_source = []
    for segs in sources:
        reqs, batch, size = [], [], 0
        for seg in segs:
            n = seg[3] - seg[2]
            if batch and size + n > target:
                reqs.append((batch, size))
                batch, size = [], 0
            batch.append(seg)
            size += n
        if batch:
            reqs.append((batch, size))
        per_source.append(reqs)
    out: deque = deque()
    for i in range(max((len(r) for r in per_source), default=0)):
        out.extend(reqs[i] for reqs in per_source if i < len(reqs))
    return out


def _fetch_remote(env: Any, shuffle_id: int, reduce_id: int, sources: list[list[Segment]]
                  ) -> Iterator[bytes]:
    """The remote segments' bytes, one segment at a time in the order the requests were sent.
    Requests are sent ahead while the bytes in flight (sent and not yet taken) stay within
    spark.reducer.maxSizeInFlight and the requests within maxReqsInFlight; at least one is
    always in flight. A request's bytes stop counting when the reducer takes them, and the
    next requests go out before they are merged (Spark's ShuffleBlockFetcherIterator)."""
    if not sources:
        return
    max_bytes = getattr(env, "max_bytes_in_flight", None) or MAX_BYTES_IN_FLIGHT
    max_reqs = getattr(env, "max_reqs_in_flight", None) or MAX_REQS_IN_FLIGHT
    pending = _requests(sources, max(max_bytes // 5, 1))
    in_flight: deque = deque()
    bytes_in_flight = 0

    def send_more() -> None:
        nonlocal bytes_in_flight
        while pending and (not in_flight or (bytes_in_flight + pending[0][1] <= max_bytes
                                             and len(in_flight) < max_reqs)):
            batch, size = pending.popleft()
            in_flight.append((batch, size, _send(env, shuffle_id, reduce_id, batch)))
            bytes_in_flight += size
    send_more()
    while in_flight:
        batch, size, wait = in_flight.popleft()
        bytes_in_flight -= size
        datas = _received(shuffle_id, reduce_id, batch, wait)
        send_more()
        yield from datas


def _send(env: Any, shuffle_id: int, reduce_id: int, batch: list[Segment]
          ) -> Callable[[], list]:
    first = batch[0][1]
    try:
        return env.fetch_remote(first.address, first.endpoint, shuffle_id,
                                [(st.path, start, end) for _m, st, start, end in batch])
    except Exception as e:
        raise _fetch_failed(shuffle_id, reduce_id, batch, e) from None


def _received(shuffle_id: int, reduce_id: int, batch: list[Segment],
              wait: Callable[[], list]) -> list:
    try:
        return wait()
    except FetchFailedError:
        raise
    except Exception as e:
        raise _fetch_failed(shuffle_id, reduce_id, batch, e) from None


def _fetch_failed(shuffle_id: int, reduce_id: int, batch: list[Segment],
                  e: BaseException) -> FetchFailedError:
    first = batch[0][1]
    return FetchFailedError(shuffle_id, batch[0][0], reduce_id, first,
                            f"Failed to fetch shuffle blocks from {first.address}: {e}")
