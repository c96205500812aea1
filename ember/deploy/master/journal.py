"""The FILESYSTEM recovery store's write-ahead journal: one fdatasync per record write.

Why: a record written as its own file needs two flushes before the master may answer (the
file's fsync before the rename, the directory's after it): 7 ms median on the disk this
was measured on, over the 5 ms a submission may cost. Here a write is one entry appended to
`<dir>/.journal`, a file created once at full size (zeros, flushed), so appending changes
no file metadata and `fdatasync` flushes only the entry's own blocks. The per-record files
stay the store's layout (Spark's): when the journal is full, its pending entries are written
out as files (one flush of the file system for all of them, one of the directory), and only
then is the journal marked empty.

Layout: a 512-byte header (magic, the last sequence number already in the files), then
entries `crc32 | length | seq | name length | name | record bytes` (a delete has no record
bytes). The crc covers seq, name and record, so a torn entry (the master died while writing
it, so it was never acknowledged) ends the replay, as does an entry whose seq does not
follow the previous one: the leftovers of an earlier round of the journal after a reset.
One header sector is rewritten in place to reset the journal (sector writes are atomic).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import struct
import zlib
from typing import Iterator, Optional

MAGIC = b"EMBERJ01"
HEADER = struct.Struct("<8sQ")          # magic, compacted-through seq
HEADER_SIZE = 512
ENTRY = struct.Struct("<IIQH")          # crc32, record length, seq, name length
DELETED = 0xFFFFFFFF                    # record length of a delete


class JournalFull(Exception):
    """The entry does not fit: compact the journal into files, then append again."""


class RecordJournal:
    """Append-only record log in a preallocated file; not thread-safe (the engine locks)."""

    def __init__(self, path: str, capacity: int) -> None:
        self.path = path
        self.capacity = capacity
        if not os.path.exists(path) or os.path.getsize(path) <= HEADER_SIZE:
            self._create()
        self.fd = os.open(path, os.O_RDWR)
        self.capacity = os.fstat(self.fd).st_size   # an existing journal keeps its size
        magic, self.compacted = HEADER.unpack(os.pread(self.fd, HEADER.size, 0))
        if magic != MAGIC:
            os.close(self.fd)
            raise ValueError(f"{path} is not an Ember recovery journal")
        self.seq = self.compacted
        self.offset = HEADER_SIZE

    def _create(self) -> None:
        """Full size at once, written (not fallocated: unwritten extents would turn every
        append into a metadata change), flushed, then renamed into place."""
        tmp = self.path + ".new"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, HEADER.pack(MAGIC, 0).ljust(HEADER_SIZE, b"\0"))
            zeros = b"\0" * (1 << 20)
            for at in range(HEADER_SIZE, self.capacity, len(zeros)):
                os.write(fd, zeros[:self.capacity - at])
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        fsync_dir(os.path.dirname(self.path) or ".")

    def replay(self) -> Iterator[tuple[str, Optional[bytes]]]:
        """The entries written since the last compaction, in order; leaves `offset` and
        `seq` after the last valid one, where the next append goes."""
        offset, seq = HEADER_SIZE, self.compacted
        while offset + ENTRY.size <= self.capacity:
            crc, length, entry_seq, name_len = ENTRY.unpack(
                os.pread(self.fd, ENTRY.size, offset))
            if entry_seq != seq + 1:
                break
            body_len = name_len + (0 if length == DELETED else length)
            if offset + ENTRY.size + body_len > self.capacity:
                break
            body = os.pread(self.fd, body_len, offset + ENTRY.size)
            if len(body) != body_len or _crc(entry_seq, body) != crc:
                break
            name = body[:name_len].decode("utf-8", "replace")
            yield name, None if length == DELETED else body[name_len:]
            offset, seq = offset + ENTRY.size + body_len, entry_seq
        self.offset, self.seq = offset, seq

    def append(self, name: str, data: Optional[bytes]) -> None:
        """Durable on return (one fdatasync); JournalFull when it does not fit."""
        raw_name = name.encode()
        body = raw_name + (data or b"")
        seq = self.seq + 1
        entry = ENTRY.pack(_crc(seq, body), DELETED if data is None else len(data), seq,
                           len(raw_name)) + body
        if self.offset + len(entry) > self.capacity:
            raise JournalFull(name)
        os.pwrite(self.fd, entry, self.offset)
        os.fdatasync(self.fd)
        self.offset += len(entry)
        self.seq = seq

    def reset(self) -> None:
        """Everything appended so far is in the files now: start the journal over."""
        os.pwrite(self.fd, HEADER.pack(MAGIC, self.seq), 0)
        os.fdatasync(self.fd)
        self.compacted = self.seq
        self.offset = HEADER_SIZE

    def removed(self) -> bool:
        """The journal file was unlinked (its directory deleted, say): appends would still
        succeed, into a file no restart reads."""
        return os.fstat(self.fd).st_nlink == 0

    def close(self) -> None:
        os.close(self.fd)


def _crc(seq: int, body: bytes) -> int:
    return zlib.crc32(body, zlib.crc32(struct.pack("<Q", seq)))


def fsync_dir(folder: str) -> None:
    """Make the directory's entries (creates, renames, unlinks) durable."""
    try:
        dfd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def sync_file_system(folder: str) -> None:
    """Flush every file written in `folder`'s file system at once (Linux syncfs; os.sync
    elsewhere): one flush for a whole compaction instead of one per file."""
    syncfs = getattr(_libc, "syncfs", None)
    fd = os.open(folder, os.O_RDONLY)
    try:
        if syncfs is None or syncfs(fd) != 0:
            os.sync()
    finally:
        os.close(fd)
