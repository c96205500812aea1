"""Cached RDD partitions inside one task process, with LRU eviction past a memory budget.

Memory blocks live as Python lists in the process that computed them (so an iterative job
re-reads them with no deserialization, and the scheduler sends the task to that process;
plain numbers scattered in memory as an array, see scattered.py);
disk blocks live in the executor's block dir, readable by every process of that executor.
Every change is recorded as a block update that travels back with the task result, which is
how the driver learns where blocks are (its BlockManagerMaster). A disk block is written once
and checked whole (its end record) before it is read; one that is gone or not whole is
computed again, and the driver told it is not on this executor's disk any more.
"""
from __future__ import annotations

import logging
import os
import pickle
import sys
from array import array
from collections import OrderedDict
from itertools import islice
from typing import Any, BinaryIO, Iterable, Iterator

from ember import fs
from ember.storage.scattered import packed
from ember.storagelevel import StorageLevel
from ember.util.files import created, unlink_quietly
from ember.util.kill_guard import kills_deferred

log = logging.getLogger(__name__)

_BATCH = 1024
# a task's property set by the scheduler (TaskSetManager): the task was given to this task
# process although another one of its executor holds its memory block; that one exports it
# for this one rather than have it recomputed (cached values stay the values first computed)
BLOCK_IN_SIBLING = "ember.task.blockInSibling"   # not a configuration key
# the level of a partition held for the next task of its partition (ember.held_partitions):
# kept in memory, dropped when evicted, told apart from a cached block by identity
_HELD = StorageLevel(False, True, False, False, 1)


def _copy_tag(task_id: int) -> str:
    """What names a block's copy for task `task_id` (see export_for_sibling)."""
    return f".for{task_id}-"


def block_name(rdd_id: int, split: int) -> str:
    return f"rdd_{rdd_id}_{split}"


def is_block_file_of(name: str, rdd_id: int) -> bool:
    """Whether a file in a block dir is one of the RDD's whole blocks, which an unpersist
    deletes; not a file a running task still writes or reads (a block's temp file, a copy
    for a sibling), whose deletion failed that task, and killed the process writing a copy."""
    prefix = f"rdd_{rdd_id}_"
    return name.startswith(prefix) and name[len(prefix):].isdigit()


def estimate_size(values: list | array) -> int:
    """Rough deep size of a list of records, from a sample (Spark's SizeEstimator idea); an
    array's own size."""
    n = len(values)
    size = sys.getsizeof(values)
    if n == 0 or isinstance(values, array):
        return size
    step = max(1, n // 64)
    sample = values[::step]
    total = 0
    for v in sample:
        total += sys.getsizeof(v)
        if isinstance(v, (tuple, list)):
            for x in v:
                total += sys.getsizeof(x)
    return size + int(total * n / len(sample))


# the last pickle of a block or checkpoint file: this tag and the bytes before it, so that a
# file cut short (a cut between two batches reads as fewer records) or written to by another
# hand is told from a whole one
_END_TAG = b"ember.end"


def _end_record(length: int) -> bytes:
    return pickle.dumps(_END_TAG + length.to_bytes(8, "little"), protocol=5)


_END_LEN = len(_end_record(0))


class UnreadableBlockError(IOError):
    """A block or checkpoint file that is not as it was written."""


def write_batches(path: str, values: Iterable, batch_size: int = _BATCH) -> int:
    """Pickle values in batches to path (atomically: a temp file renamed); its size."""
    size, f = written_batches(path, values, batch_size)
    f.close()
    return size


def written_batches(path: str, values: Iterable, batch_size: int = _BATCH
                    ) -> tuple[int, BinaryIO]:
    """write_batches, and the file it wrote, open at its start: a task that reads back the
    block it wrote reads it whatever becomes of the name (an unpersist may delete it the
    moment it is in place)."""
    tmp = f"{path}.tmp{os.getpid()}"
    f = created(tmp, lambda p: open(p, "w+b"))
    try:
        dump_batches(f, values, batch_size)
        f.flush()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        unlink_quietly(tmp)
        raise
    size = f.tell()
    f.seek(0)
    return size, f


def dump_batches(f: Any, values: Iterable, batch_size: int = _BATCH) -> None:
    """Pickle values to an open binary file, `batch_size` per pickle, then the end record."""
    values = iter(values)
    length = 0
    while batch := list(islice(values, batch_size)):
        data = pickle.dumps(batch, protocol=5)
        f.write(data)
        length += len(data)
    f.write(_end_record(length))


def read_batches(path: str) -> Iterator:
    """The values written by write_batches (a file of a URL too); UnreadableBlockError once
    the file ends without its end record."""
    with fs.open_file(path, "rb") as f:
        yield from load_batches(f, path)


def load_batches(f: Any, path: str | None = None) -> Iterator:
    """The values of the pickled batches in the stream `f`. With `path`, the stream must end
    with dump_batches' end record (else UnreadableBlockError naming it); without, it may
    end at any batch (the files Ember wrote before it wrote end records)."""
    load = pickle.load
    while True:
        try:
            batch = load(f)
        except EOFError:
            if path is not None:
                raise UnreadableBlockError(f"{path} is cut short: it ends without its end "
                                           "record") from None
            return
        if batch.__class__ is bytes and batch.startswith(_END_TAG):
            return
        yield from batch


def _open_whole(path: str) -> Any:
    """The block file at `path` opened, None if there is none; UnreadableBlockError if it is
    not as write_batches left it (its end record names its length)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    size = os.fstat(f.fileno()).st_size
    try:
        if size >= _END_LEN and os.pread(f.fileno(), _END_LEN, size - _END_LEN) == \
                _end_record(size - _END_LEN):
            return f
    except OSError:
        pass
    f.close()
    raise UnreadableBlockError(f"{path} is not whole: {size} bytes without its end record")


class BlockManager:
    def __init__(self, block_dir: str, memory_budget: int) -> None:
        self.block_dir = block_dir
        self.memory_budget = memory_budget
        self.memory: OrderedDict[str, tuple[list | array, int, Any]] = OrderedDict()
        self.memory_used = 0
        self.updates: list[tuple[str, str, int, int]] = []  # (block, where, mem, disk)
        # the held partitions the running task took: (name, values, size); see end_task
        self.taken: list[tuple[str, list, int]] = []
        # fetch_from_sibling(task id, block) -> path of a copy another task process of this
        # executor wrote, or None (the task process sets it: its line to the pool)
        self.fetch_from_sibling: Any = None
        self._copies = 0            # copies written for siblings (see export_for_sibling)

    def _disk_path(self, name: str) -> str:
        return os.path.join(self.block_dir, name)

    def take_updates(self) -> list:
        u, self.updates = self.updates, []
        return u

    def end_task(self, succeeded: bool) -> list:
        """The ended task's block updates. A task that did not succeed (killed, failed)
        holds again the partitions it took: its next attempt is sent to this process, which
        the driver still names as their place, and would otherwise compute them again."""
        if self.taken:
            taken, self.taken = self.taken, []
            if not succeeded:
                for name, values, size in taken:
                    self.hold(name, values, size)
        return self.take_updates()

    def get_or_compute(self, rdd: Any, split: Any, ctx: Any) -> Iterator:
        name = block_name(rdd.id(), split.index)
        hit = self.memory.get(name)
        if hit is not None:
            self.memory.move_to_end(name)
            return iter(hit[0])
        level = rdd._storage_level
        path = self._disk_path(name)
        # a disk copy: this level's own, or a block migrated here from a decommissioned
        # executor (whatever its level); one that is not whole is computed again
        try:
            f = _open_whole(path)
        except UnreadableBlockError as e:
            self._drop_unreadable(name, path, e)
            f = None
        if f is not None:
            if not level.useMemory:
                return self._disk_values(name, path, f)
            try:
                with f:
                    values = list(load_batches(f, path))
            except Exception as e:
                self._drop_unreadable(name, path, e)
            else:
                self._put_memory(name, values, level, disk_size=os.path.getsize(path))
                return iter(values)
        if level.useMemory and self.fetch_from_sibling is not None and \
                ctx.getLocalProperty(BLOCK_IN_SIBLING):
            copy = self.fetch_from_sibling(ctx.taskAttemptId(), name)
            if copy is not None:
                try:
                    values = list(read_batches(copy))
                finally:
                    unlink_quietly(copy)
                self._put_memory(name, values, level)
                return iter(values)
        # (a local checkpoint's block may be in a sibling task process: asked above)
        if getattr(rdd, "_local_checkpointed", False) and getattr(rdd, "_truncated", False):
            raise RuntimeError(
                f"Checkpoint block {name} not found! Either the executor that originally "
                "checkpointed this partition is no longer alive, or the original RDD is "
                "unpersisted. If this problem persists, you may consider using "
                "`rdd.checkpoint()` instead, which is slower than local checkpointing but "
                "more fault-tolerant.")
        if level.useDisk:
            # the driver may still count a copy that was here (removed or found unreadable
            # above): it must not, or a stage would skip the parents this compute reads
            self.updates.append((name, "no_disk_copy", 0, 0))
        computed = rdd.compute(split, ctx)
        if not level.useMemory:
            size, f = written_batches(path, computed)
            self.updates.append((name, "disk", 0, size))
            return self._disk_values(name, path, f)
        values = computed if isinstance(computed, list) else list(computed)
        disk_size = 0
        if getattr(rdd, "_local_checkpointed", False) and level.useDisk:
            # on disk as well: Spark keeps a local checkpoint in its executor, which a
            # Python worker's crash leaves alone, and its lineage is cut, so a copy in this
            # process alone would die with it and fail every later job reading it
            disk_size = write_batches(path, values)
        if not self._put_memory(name, values, level, disk_size) and level.useDisk:
            size = disk_size or write_batches(path, values)
            self.updates.append((name, "disk", 0, size))
        return iter(values)

    def _disk_values(self, name: str, path: str, f: Any) -> Iterator:
        """A disk block's values as the task reads them. If they fail to load (the file was
        damaged after its end record was checked) the block is dropped as the task fails,
        so that its retry computes the partition again."""
        with f:
            try:
                yield from load_batches(f, path)
            except Exception as e:
                self._drop_unreadable(name, path, e)
                raise

    @staticmethod
    def _drop_unreadable(name: str, path: str, reason: Any) -> None:
        log.warning("Block %s cannot be read (%s): removed, its partition is computed again",
                    name, reason)
        unlink_quietly(path)

    def export_for_sibling(self, name: str, task_id: int) -> str | None:
        """Write memory block `name` for task `task_id` in another task process of this
        executor to read (which then deletes the file); its path, or None when not held
        here. The file is named for the task and this process: a copy that is not wanted
        (a second holder's, or one for a task killed while it waited) is deleted when it
        arrives, and must not be the file the task reads."""
        hit = self.memory.get(name)
        if hit is None:
            return None
        # and for this request: a task whose process died is run again under the same id
        # by the process that replaces it, and asks again, while the pool may still delete
        # the first copy (late, not needed); a second copy by that name went with it
        self._copies += 1
        path = f"{self._disk_path(name)}{_copy_tag(task_id)}{os.getpid()}-{self._copies}"
        write_batches(path, hit[0])
        return path

    def remove_copies_for(self, task_id: int) -> None:
        """Delete the copies siblings wrote for task `task_id`, killed before it deleted
        them (while reading one, or as its answer arrived)."""
        tag = _copy_tag(task_id)
        try:
            names = os.listdir(self.block_dir)
        except OSError:
            return
        for n in names:
            if tag in n:
                unlink_quietly(self._disk_path(n))

    def export_to_disk(self) -> list[str]:
        """Write every memory block without a disk copy to the block dir (a decommissioning
        executor migrates files); the blocks stay in memory here too."""
        out = []
        for name, (values, _size, level) in list(self.memory.items()):
            if level is _HELD:           # only the next task here wants it
                continue
            path = self._disk_path(name)
            if not os.path.exists(path):
                write_batches(path, values)
            out.append(name)
        return out

    def _put_memory(self, name: str, values: list, level: Any, disk_size: int = 0) -> bool:
        values = packed(values)
        size = estimate_size(values)
        if size > self.memory_budget:
            log.warning("Not enough space to cache %s in memory! (computed %d bytes so far)",
                        name, size)
            return False
        with kills_deferred:    # the blocks, their byte count and the updates change together
            while self.memory_used + size > self.memory_budget and self.memory:
                self._evict_one()
            self.memory[name] = (values, size, level)
            self.memory_used += size
            self.updates.append((name, "memory", size, disk_size))
        return True

    def hold(self, name: str, values: list, size: int) -> None:
        """Keep a partition the first of two jobs read (ember.held_partitions, which checked that
        it fits without evicting anything); a retried task's copy replaces its own."""
        with kills_deferred:
            old = self.memory.pop(name, None)
            if old is not None:
                self.memory_used -= old[1]
            self.memory[name] = (values, size, _HELD)
            self.memory_used += size
            self.updates.append((name, "memory", size, 0))

    def take(self, name: str) -> list | None:
        """A held partition, no longer held; None when this process does not hold it."""
        with kills_deferred:
            hit = self.memory.get(name)
            if hit is None or hit[2] is not _HELD:
                return None
            del self.memory[name]
            self.memory_used -= hit[1]
            self.updates.append((name, "removed", 0, 0))
            self.taken.append((name, hit[0], hit[1]))
        return hit[0]

    @property
    def held_bytes(self) -> int:
        return sum(size for _values, size, level in self.memory.values() if level is _HELD)

    def _evict_one(self) -> None:
        """(Inside kills_deferred: see _put_memory.)"""
        name, (values, size, level) = self.memory.popitem(last=False)
        self.memory_used -= size
        path = self._disk_path(name)
        if level.useDisk and not os.path.exists(path):
            dsize = write_batches(path, values)
            self.updates.append((name, "disk", 0, dsize))
        elif level.useDisk:
            self.updates.append((name, "disk", 0, os.path.getsize(path)))
        else:
            self.updates.append((name, "removed", 0, 0))

    def remove_rdd(self, rdd_id: int) -> None:
        prefix = f"rdd_{rdd_id}_"
        for name in [n for n in self.memory if n.startswith(prefix)]:
            _values, size, _level = self.memory.pop(name)
            self.memory_used -= size
