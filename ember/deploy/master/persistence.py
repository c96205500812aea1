"""Where a master keeps what must outlive it, and how it learns it leads: Spark's
PersistenceEngine and LeaderElectionAgent, chosen by `spark.deploy.recoveryMode`.

Why: with recovery mode NONE the master is the control plane's single point of failure;
kill -9 loses every submitted driver, the retained lists and every uploaded resource.
With FILESYSTEM (one master restarted in place) or ZOOKEEPER (standby masters) the master
writes a record per application, driver and worker at the moments Spark's master does, and
a newly elected leader reads them back and runs the recovery flow (state.py).

Records are plain dicts (built by `records.py`) encoded with the RPC layer's data-only
msgpack codec inside a versioned envelope, never pickle: a record file or znode that an
attacker or a disk error changed can at worst be refused. A record that cannot be decoded,
is truncated or carries an unknown version is logged with its name and skipped, so one bad
record never keeps the master from starting and recovering the rest.

Uploaded app resources (`ember-upload://`) are blobs in the same engine: under the recovery
directory with FILESYSTEM (they survive a restart), a private temporary directory with NONE.

The epoch: every election hands the leader an int that grows with each election (ZooKeeper:
the election's sequence number; FILESYSTEM: a counter kept in the recovery directory and
incremented at each start; NONE: 0, which means "unfenced", there being one master only).
Every instruction a master sends to workers and drivers carries it, and they refuse an older
one than the newest they have seen (fencing.py), so a deposed master can launch nothing.
"""
from __future__ import annotations

import abc
import logging
import os
import re
import shutil
import tempfile
import threading
from typing import Callable, Optional

from ember.deploy.master.journal import JournalFull, RecordJournal, fsync_dir, sync_file_system
from ember.rpc.messages import MessageDecodeError, decode, encode
from ember.util.files import unlink_quietly

log = logging.getLogger("ember.deploy.master.PersistenceEngine")

RECORD_VERSION = 1
RECOVERY_MODES = ("NONE", "FILESYSTEM", "ZOOKEEPER")
# Spark modes Ember does not implement: refused rather than silently run without recovery.
UNSUPPORTED_RECOVERY_MODES = ("ROCKSDB", "CUSTOM")
EPOCH_FILE = ".leader_epoch"
UPLOADS_DIR = "uploads"
JOURNAL = ".journal"                     # journal.py; a dot name is never a record
DEFAULT_JOURNAL_CAPACITY = 4 * 1024 * 1024   # about 5,000 driver records between compactions
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,254}")
_BAD_PART = re.compile(r"[\x00-\x1f\\]")


class RecoveryError(ValueError):
    """A recovery set-up the master cannot run with; the message is one line for the CLI."""


class RecordError(ValueError):
    """A stored record that cannot be read back (corrupt, truncated, unknown version)."""


# ---------------------------------------------------------------------------------------------
# Record encoding (shared by every engine)
# ---------------------------------------------------------------------------------------------

def encode_record(record: dict) -> bytes:
    """A record dict -> bytes: msgpack of {"version": 1, "record": record} (data only)."""
    return encode({"version": RECORD_VERSION, "record": record})


def decode_record(data: bytes) -> dict:
    """Bytes from `encode_record` -> the record dict; RecordError if they are not."""
    try:
        envelope = decode(data)
    except MessageDecodeError as e:
        raise RecordError(f"undecodable ({e})") from None
    if not isinstance(envelope, dict) or "version" not in envelope:
        raise RecordError("not a versioned record")
    if envelope["version"] != RECORD_VERSION:
        raise RecordError(f"unknown record version {envelope['version']!r} "
                          f"(this master reads version {RECORD_VERSION})")
    record = envelope.get("record")
    if not isinstance(record, dict):
        raise RecordError("the record is not a map")
    return record


def check_record_name(name: str) -> str:
    """Record names are plain identifiers (`app_<id>`, ...), usable as a file or znode name."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"Invalid record name {name!r}")
    return name


def blob_key_parts(key: str) -> list[str]:
    """A blob key's path parts (`<sha256>/<file name>`): no empty, dot or control parts."""
    parts = key.split("/") if isinstance(key, str) else []
    if not parts or len(parts) > 4 or any(
            not p or p in (".", "..") or len(p) > 255 or _BAD_PART.search(p) for p in parts):
        raise ValueError(f"Invalid blob key {key!r}")
    return parts


# ---------------------------------------------------------------------------------------------
# Interfaces
# ---------------------------------------------------------------------------------------------

class PersistenceEngine(abc.ABC):
    """Spark's PersistenceEngine: named records and uploaded blobs. Thread-safe (the master's
    loop persists records, upload threads put blobs)."""

    # set by the master: every record the store should hold now, by name, for an engine
    # whose store was lost under it (FileSystemPersistenceEngine)
    live_records: Optional[Callable[[], list[tuple[str, dict]]]] = None

    @abc.abstractmethod
    def persist(self, name: str, record: dict) -> None:
        """Write `record` under `name` atomically (replacing an older one)."""

    @abc.abstractmethod
    def unpersist(self, name: str) -> None:
        """Remove the record `name` (no error if it is not there)."""

    @abc.abstractmethod
    def read_all(self) -> dict[str, dict]:
        """Every readable record by name; unreadable ones are logged with the name, skipped."""

    @abc.abstractmethod
    def put_blob(self, key: str, data: bytes) -> None:
        """Keep `data` under `key` (uploaded app resources); returns once it is durable."""

    @abc.abstractmethod
    def get_blob(self, key: str) -> Optional[bytes]:
        """The blob under `key`, or None."""

    @abc.abstractmethod
    def delete_blob(self, key: str) -> None:
        """Remove a blob (no error if it is not there)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the engine's resources (a temporary blob directory, a connection)."""


class LeaderElectionAgent(abc.ABC):
    """Spark's LeaderElectionAgent: tells the master when it leads and when it no longer does."""

    @abc.abstractmethod
    def start(self, on_elected: Callable[[int], None], on_revoked: Callable[[], None]) -> None:
        """Begin; `on_elected(epoch)` / `on_revoked()` may be called from another thread.
        The epoch grows with each election."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Leave the election (a leader steps down)."""

    @abc.abstractmethod
    def relinquish(self) -> None:
        """Give up a leadership just gained because the master could not read its records
        (leading with an empty state would lose them): revoke, then stand for election again
        a moment later with a new epoch. Must not block (called on the master's loop)."""

    def current_leader(self) -> Optional[str]:
        """The spark:// URL of the master that leads now, as the election knows it; None when
        unknown. May block (it can ask ZooKeeper): never call it on the master's loop. A
        monarchy has no other master to name, so this one says None."""
        return None


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------

def write_atomically(path: str, data: bytes) -> None:
    """Write-then-rename with fsync of the file and of its directory: after a crash `path`
    holds either the old or the new bytes, never a mix."""
    folder = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path)[:100] + ".", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        unlink_quietly(tmp)
        raise
    fsync_dir(folder)


class BlobDirectory:
    """Blobs as files under `root`, each written atomically; keys checked by
    `blob_key_parts`, so no key can name a path outside `root`."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        os.makedirs(self.root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *blob_key_parts(key))

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomically(path, data)

    def get(self, key: str) -> Optional[bytes]:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            os.unlink(path)
        except FileNotFoundError:
            return
        folder = os.path.dirname(path)
        if folder != self.root:
            try:
                os.rmdir(folder)   # only when empty
            except OSError:
                pass


class _DirectoryBlobsEngine(PersistenceEngine):
    """An engine whose uploads live in a BlobDirectory (`self._blobs`, set by the subclass)."""

    _blobs: BlobDirectory

    def put_blob(self, key: str, data: bytes) -> None:
        self._blobs.put(key, data)

    def get_blob(self, key: str) -> Optional[bytes]:
        return self._blobs.get(key)

    def delete_blob(self, key: str) -> None:
        self._blobs.delete(key)


class BlackHolePersistenceEngine(_DirectoryBlobsEngine):
    """Recovery mode NONE (Spark's BlackHolePersistenceEngine): records go nowhere. Uploaded
    blobs still live as long as the master, in a temporary directory removed by close()."""

    def __init__(self) -> None:
        self._blobs = BlobDirectory(tempfile.mkdtemp(prefix="ember-master-uploads-"))

    def persist(self, name: str, record: dict) -> None:
        pass

    def unpersist(self, name: str) -> None:
        pass

    def read_all(self) -> dict[str, dict]:
        return {}

    def close(self) -> None:
        shutil.rmtree(self._blobs.root, ignore_errors=True)


class FileSystemPersistenceEngine(_DirectoryBlobsEngine):
    """Recovery mode FILESYSTEM: one file per record in the recovery directory (Spark's
    layout); a write is first one entry of the journal (journal.py: one fdatasync, which is
    what keeps a submission under 5 ms) and reaches its file when the journal is compacted;
    `read_all` is the files with the journal's entries on top. Uploads under `<dir>/uploads/`.
    Raises RecoveryError if the directory cannot be created or written."""

    def __init__(self, directory: str, journal_capacity: int = DEFAULT_JOURNAL_CAPACITY
                 ) -> None:
        self.dir = os.path.abspath(directory)
        check_writable_dir(self.dir)
        self._blobs = BlobDirectory(os.path.join(self.dir, UPLOADS_DIR))
        self._lock = threading.Lock()   # the journal and `_pending` are shared state
        try:
            self._journal = RecordJournal(os.path.join(self.dir, JOURNAL), journal_capacity)
        except (OSError, ValueError) as e:
            raise RecoveryError(f"Cannot open the recovery journal in {self.dir}: {e}") from None
        # name -> record bytes (None: deleted) written since the last compaction
        self._pending: dict[str, Optional[bytes]] = {}
        for name, data in self._journal.replay():
            if _NAME.fullmatch(name):
                self._pending[name] = data
            else:
                log.error("Skipping entry %r in the recovery journal of %s: not a record name",
                          name, self.dir)

    def persist(self, name: str, record: dict) -> None:
        data = encode_record(record)
        self._write(check_record_name(name), data)

    def unpersist(self, name: str) -> None:
        name = check_record_name(name)
        if name not in self._pending and not os.path.exists(os.path.join(self.dir, name)):
            return
        self._write(name, None)

    def _write(self, name: str, data: Optional[bytes]) -> None:
        with self._lock:
            if self._journal.removed():
                self._start_over()
            try:
                self._journal.append(name, data)
            except JournalFull:
                self._compact()
                try:
                    self._journal.append(name, data)
                except JournalFull:   # larger than the whole journal: its own file
                    self._pending.pop(name, None)
                    write_atomically(os.path.join(self.dir, name), data)
                    return
            self._pending[name] = data

    def _start_over(self) -> None:
        """The journal was removed under the master (with its directory, say): what the
        store held is gone and the next writes would go to a file no restart reads. The
        directory and journal are made again and hold every record the master holds now;
        uploads made before are lost (a relaunch of such a driver fails, naming them)."""
        log.error("The recovery journal in %s was removed: writing the master's records "
                  "there again (uploaded driver files stored before are lost)", self.dir)
        self._journal.close()
        check_writable_dir(self.dir)
        self._journal = RecordJournal(os.path.join(self.dir, JOURNAL), self._journal.capacity)
        self._pending.clear()
        for name, record in self.live_records() if self.live_records is not None else []:
            write_atomically(os.path.join(self.dir, check_record_name(name)),
                             encode_record(record))

    def _compact(self) -> None:
        """The pending entries become files (no flush each: one file-system flush and one
        directory flush for all), then the journal starts over. A crash in between leaves
        the journal as it was, so its entries are simply written out again."""
        for name, data in self._pending.items():
            path = os.path.join(self.dir, name)
            if data is None:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                continue
            tmp = os.path.join(self.dir, f".{name}.compact")
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        sync_file_system(self.dir)
        fsync_dir(self.dir)
        self._journal.reset()
        self._pending.clear()

    def read_all(self) -> dict[str, dict]:
        with self._lock:
            pending = dict(self._pending)
        out: dict[str, dict] = {}
        for name in sorted(os.listdir(self.dir)):
            path = os.path.join(self.dir, name)
            if name.startswith(".") or name in pending or not os.path.isfile(path):
                continue   # temporary files, the journal, the epoch counter, the uploads
            if not _NAME.fullmatch(name):
                log.warning("Skipping %s in the recovery directory %s: not a record name",
                            name, self.dir)
                continue
            try:
                with open(path, "rb") as f:
                    out[name] = decode_record(f.read())
            except (OSError, RecordError) as e:
                log.error("Skipping record %s in the recovery directory %s: %s", name,
                          self.dir, e)
        for name, data in pending.items():
            if data is None:
                continue
            try:
                out[name] = decode_record(data)
            except RecordError as e:
                log.error("Skipping record %s in the recovery journal of %s: %s", name,
                          self.dir, e)
        return dict(sorted(out.items()))

    def close(self) -> None:
        with self._lock:
            self._journal.close()


def check_writable_dir(directory: str) -> None:
    """Create `directory` if needed and prove it is writable, or raise RecoveryError."""
    try:
        os.makedirs(directory, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=directory)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise RecoveryError(f"The recovery directory {directory} is not writable: "
                            f"{e.strerror or e}") from None


# ---------------------------------------------------------------------------------------------
# Leader election without ZooKeeper
# ---------------------------------------------------------------------------------------------

RELECT_DELAY_S = 1.0   # before a master that could not read its records stands again


class MonarchyLeaderAgent(LeaderElectionAgent):
    """Spark's MonarchyLeaderAgent: the only master leads from the start. With an
    `epoch_file` (FILESYSTEM) the epoch is a counter kept there and incremented at each
    start, so a master restarted on the recovery directory outranks its previous life."""

    def __init__(self, epoch_file: Optional[str] = None) -> None:
        self.epoch_file = epoch_file

    def next_epoch(self) -> int:
        if self.epoch_file is None:
            return 0
        previous = 0
        try:
            with open(self.epoch_file, "rb") as f:
                previous = int(f.read().strip() or b"0")
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as e:
            # A counter we cannot read must not go backwards: start above any plausible one.
            log.error("Cannot read the leader epoch %s (%s); starting a new epoch range",
                      self.epoch_file, e)
            previous = 1 << 32
        epoch = previous + 1
        write_atomically(self.epoch_file, str(epoch).encode())
        return epoch

    def start(self, on_elected: Callable[[int], None], on_revoked: Callable[[], None]) -> None:
        self._on_elected = on_elected
        on_elected(self.next_epoch())

    def relinquish(self) -> None:
        """The only master: elect it again, with a new epoch, after RELECT_DELAY_S."""
        timer = threading.Timer(RELECT_DELAY_S, lambda: self._on_elected(self.next_epoch()))
        timer.daemon = True
        timer.start()

    def stop(self) -> None:
        pass


__all__ = ["PersistenceEngine", "LeaderElectionAgent", "BlackHolePersistenceEngine",
           "FileSystemPersistenceEngine", "MonarchyLeaderAgent", "BlobDirectory",
           "RecoveryError", "RecordError", "RECORD_VERSION", "encode_record", "decode_record",
           "check_record_name", "blob_key_parts", "write_atomically", "check_writable_dir"]
