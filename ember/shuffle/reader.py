"""Reduce side of a shuffle: stream one partition's records from every map output.

Local map outputs (same executor or same host) are read straight from their files, one
batch at a time; others go through the environment's remote fetcher. A missing output is a
FetchFailedError, which makes the driver recompute the parent stage.
"""
from __future__ import annotations

import io
import os
import pickle
from typing import Any, Callable, Iterator

from ember.shuffle.base import FetchFailedError, MapStatus
from ember.shuffle.writer import read_index


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


def _records_from_file(path: str, start: int, end: int, serializer: Any = None,
                       sealer: Any = None) -> Iterator:
    load = _loader(serializer)
    with open(path, "rb") as f:
        f.seek(start)
        if sealer is not None:
            yield from sealer.records(f, end, _plain_loads(serializer))
            return
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


def read_shuffle_segment(map_path: str, reduce_id: int) -> bytes:
    """One reduce partition of a map output file, as the bytes a remote reducer gets."""
    start, end = read_index(map_path, reduce_id)
    if end <= start:
        return b""
    with open(map_path + ".data", "rb") as f:
        f.seek(start)
        return f.read(end - start)


def read_partition(shuffle_id: int, reduce_id: int, ctx: Any,
                   serializer: Any = None) -> Iterator:
    statuses: list[MapStatus | None] = ctx.map_locations.get(shuffle_id)
    if statuses is None:
        raise FetchFailedError(shuffle_id, -1, reduce_id, None,
                               f"Missing an output location for shuffle {shuffle_id}")
    env = ctx.env
    metrics = ctx.metrics
    key = getattr(env, "io_key", None)
    sealer = None
    if key is not None:
        from ember.shuffle.crypto import Sealer
        sealer = Sealer(key)
    for map_index, st in enumerate(statuses):
        if st is None:
            raise FetchFailedError(shuffle_id, map_index, reduce_id, None,
                                   f"Missing an output location for shuffle {shuffle_id} "
                                   f"partition {reduce_id}")
        if st.executor_id == env.executor_id or (st.host == env.host and not st.address):
            try:
                start, end = read_index(st.path, reduce_id)
            except OSError as e:
                raise FetchFailedError(shuffle_id, map_index, reduce_id, st,
                                       f"Failed to open shuffle file {st.path}: {e}") from None
            if not os.path.exists(st.path + ".data"):
                raise FetchFailedError(shuffle_id, map_index, reduce_id, st,
                                       f"Shuffle data file {st.path}.data is missing")
            metrics["shuffleLocalBytesRead"] = metrics.get("shuffleLocalBytesRead", 0) + end - start
            if end > start:
                yield from _records_from_file(st.path + ".data", start, end, serializer,
                                              sealer)
        else:
            try:
                data = env.fetch_remote(st, shuffle_id, map_index, reduce_id)
            except FetchFailedError:
                raise
            except Exception as e:
                raise FetchFailedError(shuffle_id, map_index, reduce_id, st,
                                       f"Failed to fetch shuffle block from {st.address}: "
                                       f"{e}") from None
            metrics["shuffleRemoteBytesRead"] = metrics.get("shuffleRemoteBytesRead", 0) + len(data)
            if data:
                yield from _records_from_bytes(data, serializer, sealer)
