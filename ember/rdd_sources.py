"""RDDs that read data: local collections, text files, whole files, binary and pickle files.

File inputs follow Hadoop's rules, because PySpark users see them: comma-separated paths,
globs and directories (hidden `_`/`.` files skipped), splits of at most 32 MB
(fs.local.block.size) from a goal of totalSize/minPartitions, a line belonging to the split
in which it starts, compressed files unsplit, and "Input path does not exist: file:..." when a
path is missing — raised when the job computes partitions, not when the RDD is defined.

A URL (`s3a://bucket/logs/*.gz`, `https://...`; see ember.fs) follows the same rules: one
listing per directory gives the sizes, and a split is read with range requests - one per
split where possible - instead of seek and read: from S3 as plain HTTP GETs streamed into a
reused buffer (ember.s3_range), elsewhere through fsspec, prefetched. http(s) files are read
whole. Lines are decoded from memoryviews of what was read: a byte is copied once, into the
str, except the pieces of a line that spans two reads.
"""
from __future__ import annotations

import contextlib
import glob
import os
import re
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import chain
from typing import TYPE_CHECKING, Any, Iterable, Iterator, NamedTuple

from ember import fs
from ember.errors import InvalidInputException
from ember.util.compressed import EXTENSIONS, decompressed

if TYPE_CHECKING:   # loaded for the first remote split: http.client and ssl cost start-up
    from ember import s3_range

LOCAL_BLOCK_SIZE = 32 * 1024 * 1024
SPLIT_SLOP = 1.1
_CHUNK = 4 * 1024 * 1024
_REMOTE_CHUNK = 32 * 1024 * 1024   # about one range request (S3A's block size)
_PREFETCH = 2                       # range requests in flight ahead of the reader
_TAIL = 64 * 1024                   # read past a split's end for its last line
# compressed files are read whole: the codecs Ember reads, and two it reads as they are
_WHOLE_FILE_SUFFIXES = (*EXTENSIONS.values(), ".zst", ".xz")
_LINE_END = re.compile(r"\r\n|\r|\n")
_BUFFERS: list[bytearray] = []      # reused _CHUNK buffers of direct S3 reads (no page faults)


class Partition:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __reduce__(self):
        return (type(self), self._args())

    def _args(self) -> tuple:
        return (self.index,)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.index})"


class ParallelCollectionPartition(Partition):
    __slots__ = ("data",)

    def __init__(self, index: int, data: Any, *range_args: int) -> None:
        super().__init__(index)
        self.data = range(*range_args) if range_args else data

    def _args(self) -> tuple:
        """A slice of parallelize(range(...)) travels as three ints: a range object costs
        the pickler a global lookup and a reduce per task."""
        d = self.data
        if type(d) is range:
            return (self.index, None, d.start, d.stop, d.step)
        return (self.index, d)


class SliceFile:
    """A parallelized slice too large to travel inside each of its tasks: its pickled bytes
    in a file the driver wrote once, with a broadcast's id and place, so that an executor
    on another host fetches it once (a broadcast's FetchBroadcast) and the ContextCleaner
    removes it with its RDD. A task reads it only when it computes the partition, which a
    cached partition's later tasks do not."""
    __slots__ = ("bid", "path")

    def __init__(self, bid: int, path: str) -> None:
        self.bid, self.path = bid, path

    def __reduce__(self):
        return (SliceFile, (self.bid, self.path))

    def read(self) -> bytes:
        from ember import broadcast
        path = self.path
        fetch = broadcast._fetcher[0]
        if fetch is not None:
            path = fetch(self.bid, path)
        with open(path, "rb", buffering=0) as f:
            return f.readall()


class FileSplit(Partition):
    __slots__ = ("path", "start", "length")

    def __init__(self, index: int, path: str, start: int, length: int) -> None:
        super().__init__(index)
        self.path, self.start, self.length = path, start, length

    def _args(self) -> tuple:
        return (self.index, self.path, self.start, self.length)


class FileListPartition(Partition):
    __slots__ = ("paths",)

    def __init__(self, index: int, paths: list[str]) -> None:
        super().__init__(index)
        self.paths = paths

    def _args(self) -> tuple:
        return (self.index, self.paths)


def slice_collection(data: Any, num_slices: int) -> list[Any]:
    """Slice i is [i*n/k, (i+1)*n/k) of the collection; ranges stay lazy ranges."""
    if num_slices < 1:
        raise ValueError("Positive number of partitions required")
    if isinstance(data, range):
        n = len(data)
        return [data[i * n // num_slices:(i + 1) * n // num_slices] for i in range(num_slices)]
    items = data if isinstance(data, list) else list(data)
    n = len(items)
    return [items[i * n // num_slices:(i + 1) * n // num_slices] for i in range(num_slices)]


# --- path resolution -------------------------------------------------------------------------
def _uri(path: str) -> str:
    return "file:" + os.path.abspath(path)


def _hidden(name: str) -> bool:
    return name.startswith("_") or name.startswith(".")


class InputFile(NamedTuple):
    """A file to read (an absolute local path or a URL) and its size (Hadoop's FileStatus)."""
    path: str
    size: int


def list_input_files(paths: str, recursive: bool = False) -> list[InputFile]:
    """Resolve Hadoop-style comma-separated paths, globs and directories to sorted files."""
    files: list[InputFile] = []
    errors: list[str] = []
    for raw in [p.strip() for p in paths.split(",") if p.strip()]:
        if fs.is_local(raw):
            _list_local(fs.local_path(raw), recursive, files, errors)
        else:
            _list_remote(raw, recursive, files, errors)
    if errors:
        raise InvalidInputException("\n".join(errors))
    return files


def _list_local(p: str, recursive: bool, files: list, errors: list) -> None:
    if glob.has_magic(p):
        matches = sorted(m for m in glob.glob(p) if not _hidden(os.path.basename(m)))
        if not matches:
            errors.append(f"Input Pattern {_uri(p)} matches 0 files")
            return
    elif not os.path.exists(p):
        errors.append(f"Input path does not exist: {_uri(p)}")
        return
    else:
        matches = [p]
    found = []
    for m in matches:
        if os.path.isdir(m):
            for root, dirs, names in os.walk(m):
                dirs[:] = sorted(d for d in dirs if not _hidden(d)) if recursive else []
                found.extend(os.path.join(root, n) for n in sorted(names) if not _hidden(n))
        else:
            found.append(m)
    files.extend(InputFile(os.path.abspath(f), os.path.getsize(f)) for f in found)


def _list_remote(url: str, recursive: bool, files: list, errors: list) -> None:
    """The same rules through fsspec; one listing call per directory, sizes included."""
    filesystem, path = fs.filesystem(url)
    if glob.has_magic(path):
        matches = sorted(filesystem.glob(path, detail=True).items())
        matches = [(p, info) for p, info in matches if not _hidden(_basename(p))]
        if not matches:
            errors.append(f"Input Pattern {url} matches 0 files")
            return
    else:
        try:
            matches = [(path, filesystem.info(path))]
        except FileNotFoundError:
            errors.append(f"Input path does not exist: {url}")
            return
    for p, info in matches:
        if info.get("type") == "directory":
            listing = (filesystem.find(p, detail=True, withdirs=False) if recursive
                       else {e["name"]: e for e in filesystem.ls(p, detail=True)})
            for name in sorted(listing):
                e = listing[name]
                rel = name[len(p.rstrip("/")):].strip("/").split("/")
                if e.get("type") == "file" and not any(_hidden(part) for part in rel):
                    files.append(InputFile(fs.url_of(url, filesystem, name), int(e["size"])))
        else:
            files.append(InputFile(fs.url_of(url, filesystem, p), int(info.get("size") or 0)))


def _basename(path: str) -> str:
    return path.rstrip("/").rsplit("/", 1)[-1]


def splittable(path: str) -> bool:
    """Compressed files are read whole; so are http(s) files, as Hadoop's HttpFileSystem
    reads them (no seek; many servers ignore range requests)."""
    return not path.endswith(_WHOLE_FILE_SUFFIXES) and \
        fs.scheme(path) not in ("http", "https")


def compute_file_splits(files: list[InputFile], min_partitions: int) -> list[FileSplit]:
    goal = sum(f.size for f in files) // max(min_partitions, 1)
    splits: list[FileSplit] = []
    for path, size in files:
        if size == 0:
            splits.append(FileSplit(len(splits), path, 0, 0))
            continue
        if not splittable(path):
            splits.append(FileSplit(len(splits), path, 0, size))
            continue
        split_size = max(1, min(goal, LOCAL_BLOCK_SIZE))
        remaining = size
        while remaining / split_size > SPLIT_SLOP:
            splits.append(FileSplit(len(splits), path, size - remaining, split_size))
            remaining -= split_size
        if remaining:
            splits.append(FileSplit(len(splits), path, size - remaining, remaining))
    return splits


@contextlib.contextmanager
def open_input(path: str) -> Iterator[Any]:
    """A binary stream of the file's (decompressed) bytes; a URL opens through fsspec, with
    read-ahead of _REMOTE_CHUNK so that a sequential read is a few large range requests."""
    remote = {} if fs.is_local(path) else {"block_size": _REMOTE_CHUNK,
                                            "cache_type": "readahead"}
    if fs.scheme(path) in ("http", "https"):
        remote = {"block_size": 0}        # a stream from the start (see splittable)
    with fs.open_file(path, "rb", **remote) as raw, decompressed(raw, path) as f:
        yield f


def _whole(chunks: Iterable[bytes]) -> Iterator[tuple]:
    """Byte chunks as segments `(data, lo, hi)`, i.e. data[lo:hi]. A segment's data may be a
    buffer that the next segment overwrites: it is valid until the next one is pulled."""
    for chunk in chunks:
        yield chunk, 0, len(chunk)


def _decode_lines(data: Any, lo: int, hi: int, use_unicode: bool) -> list:
    """The lines of data[lo:hi] (no line break at hi), decoded without copying the bytes."""
    if hi > lo and data[hi - 1] == 13:            # the \r of a \r\n
        hi -= 1
    view = memoryview(data)[lo:hi]
    if use_unicode:
        text = str(view, "utf-8", "replace")
        return _LINE_END.split(text) if "\r" in text else text.split("\n")
    raw = bytes(view)
    return re.split(rb"\r\n|\r|\n", raw) if b"\r" in raw else raw.split(b"\n")


def _line_batches(segments: Iterable[tuple], use_unicode: bool) -> Iterator[list]:
    """Decode whole lines from a stream of segments, a list of lines per segment (a line may
    span segments; only its partial pieces are copied). Lists, so that the lines reach
    the task's functions through C iteration (chain.from_iterable), not a generator
    resumed per line."""
    rest = b""
    for data, lo, hi in segments:
        cut = data.rfind(b"\n", lo, hi)
        if cut < 0:
            rest += data[lo:hi]
            continue
        if rest:                                  # finish the line the last segment began
            first = data.find(b"\n", lo, hi)
            rest += data[lo:first]
            yield _decode_lines(rest, 0, len(rest), use_unicode)
            lo = first + 1
        if cut >= lo:
            yield _decode_lines(data, lo, cut, use_unicode)
        rest = bytes(memoryview(data)[cut + 1:hi])
    if rest:
        rest = rest.rstrip(b"\r")
        yield _decode_lines(rest, 0, len(rest), use_unicode)


def _split_chunks(f: Any, start: int, end: int) -> Iterator[bytes]:
    """The bytes of the lines starting in (start, end] (or [0, end] when start is 0)."""
    if start:
        f.seek(start)
        f.readline()          # the first (partial) line belongs to the previous split
    pos = f.tell()
    while pos < end:
        chunk = f.read(min(_CHUNK, end - pos))
        if not chunk:
            return
        pos += len(chunk)
        yield chunk
    if pos == end:            # finish the line that started at or before `end`
        line = f.readline()
        if line:
            yield line


def _owned(segments: Iterable[tuple], start: int, end: int) -> Iterator[tuple]:
    """`_split_chunks` for segments that cover a file from `start` on: the segments of the
    lines starting in (start, end] (or [0, end] when start is 0), as Hadoop's
    LineRecordReader reads them; it pulls no segment past the end of the last line."""
    pos = start                       # file offset of data[lo]
    found_start = start == 0          # the first (partial) line belongs to the previous split
    for data, lo, hi in segments:
        if not found_start:
            cut = data.find(b"\n", lo, hi)
            if cut < 0:
                pos += hi - lo
                continue
            found_start = True
            pos += cut + 1 - lo
            lo = cut + 1
            if pos > end:
                return
        own = min(hi, lo + max(0, end - pos))    # data[lo:own] lies before `end`
        if own > lo:
            yield data, lo, own
        if own < hi:                              # then the line that started at <= end
            cut = data.find(b"\n", own, hi)
            yield data, own, hi if cut < 0 else cut + 1
            if cut >= 0:
                return
        pos += hi - lo


def _remote_split_segments(url: str, start: int, end: int) -> Iterator[tuple]:
    """The segments of a URL's split, in as few range requests as possible (object stores
    charge per request, and some servers read the whole object for each): [start, end +
    _TAIL) - the split and, almost always, the rest of its last line - then, only for a
    last line longer than that, more requests. S3 objects stream into a reused buffer
    (ember.s3_range); other URLs go through fsspec, prefetched on a thread."""
    from ember import s3_range
    reader = s3_range.reader(url)
    if reader is not None:
        return _owned(_direct_segments(reader, start, end + _TAIL), start, end)
    filesystem, path = fs.filesystem(url)
    size = filesystem.size(path)
    return _owned(_whole(_ranges(filesystem, path, start, min(end + _TAIL, size), size)),
                  start, end)


def _direct_segments(reader: s3_range.S3RangeReader, start: int, stop: int
                     ) -> Iterator[tuple]:
    """[start, stop) through one request, then the object's rest in growing requests, as
    far as the reader asks; every piece lands in the same buffer."""
    try:
        buffer = _BUFFERS.pop()
    except IndexError:
        buffer = bytearray(_CHUNK)
    try:
        for n in reader.stream(start, stop, buffer):
            yield buffer, 0, n
        step = _TAIL
        while reader.size is not None and stop < reader.size:
            step = min(step * 4, _REMOTE_CHUNK)
            for n in reader.stream(stop, stop + step, buffer):
                yield buffer, 0, n
            stop += step
    finally:
        if len(_BUFFERS) < 2:
            _BUFFERS.append(buffer)


def _ranges(filesystem: Any, path: str, start: int, stop: int, size: int) -> Iterator[bytes]:
    """[start, stop) in about-equal requests of at most ~_REMOTE_CHUNK, prefetched; then,
    only as far as the reader asks, [stop, size) in growing requests."""
    n = max(1, round((stop - start) / _REMOTE_CHUNK))
    bounds = [start + (stop - start) * i // n for i in range(n + 1)]
    with ThreadPoolExecutor(1, thread_name_prefix="prefetch") as pool:
        pending: deque = deque()
        nxt = 0
        try:
            while nxt < n or pending:
                while nxt < n and len(pending) < _PREFETCH:
                    pending.append(pool.submit(filesystem.cat_file, path,
                                               start=bounds[nxt], end=bounds[nxt + 1]))
                    nxt += 1
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()
    step = _TAIL
    while stop < size:
        step = min(step * 4, _REMOTE_CHUNK)
        data = filesystem.cat_file(path, start=stop, end=min(stop + step, size))
        if not data:
            return
        stop += len(data)
        yield data


def read_lines(split: FileSplit, use_unicode: bool = True) -> Iterator:
    """Lines of one split, Hadoop LineRecordReader ownership: lines starting in (start, end]."""
    return chain.from_iterable(_split_line_batches(split, use_unicode))


def _split_line_batches(split: FileSplit, use_unicode: bool) -> Iterator[list]:
    if split.length == 0 and split.start == 0 and splittable(split.path):
        return
    if splittable(split.path) and not fs.is_local(split.path):
        yield from _line_batches(_remote_split_segments(split.path, split.start,
                                                        split.start + split.length), use_unicode)
        return
    with open_input(split.path) as f:
        if not splittable(split.path):
            yield from _line_batches(_whole(iter(lambda: f.read(_CHUNK), b"")), use_unicode)
        else:
            yield from _line_batches(_whole(_split_chunks(f, split.start,
                                                          split.start + split.length)),
                                     use_unicode)


def read_whole_file(path: str) -> bytes:
    with open_input(path) as f:
        return f.read()


def read_records(path: str, record_length: int) -> Iterator[bytes]:
    with open_input(path) as f:
        while True:
            rec = f.read(record_length)
            if len(rec) < record_length:
                return
            yield rec
