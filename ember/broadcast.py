"""Broadcast variables: written once by the driver, read once per task process.

The driver pickles the value to a file under its local dir. A Broadcast pickles as (id,
path) only, so tasks carry a few bytes; the first `.value` in a task process loads the file
(fetching it from the driver first when the executor is on another host) and caches it for
every later task of that process.
"""
from __future__ import annotations

import gc
import os
import pickle
import sys
import threading
import traceback
from typing import Any, Callable, Generic, TypeVar

from ember.errors import PySparkRuntimeError
from ember.util.files import open_created, unlink_quietly

T = TypeVar("T")

# In task processes: bid -> loaded value.
_broadcast_registry: dict[int, Any] = {}
# Set by an executor on another host: (bid, driver_path) -> local path to read.
_fetcher: list[Callable[[int, str], str] | None] = [None]
_lock = threading.Lock()


class BroadcastPickleRegistry(threading.local):
    """PySpark's: the broadcasts this thread pickled since the registry was last cleared
    (SparkContext._pickled_broadcast_vars). PySpark ships what it names with a command;
    Ember ships a broadcast by its id anyway, and clears it after each stage it pickles."""

    def __init__(self) -> None:
        self._registry: set = set()

    def __iter__(self) -> Any:
        yield from self._registry

    def add(self, bcast: "Broadcast") -> None:
        self._registry.add(bcast)

    def clear(self) -> None:
        self._registry.clear()


def _from_id(bid: int, path: str) -> "Broadcast":
    b = Broadcast.__new__(Broadcast)
    b._bid = bid
    b._path = path
    b._sc = None
    b._destroyed = False
    b._pickle_registry = None
    return b


class Broadcast(Generic[T]):
    """A broadcast variable; SparkContext.broadcast makes one.

    PySpark's constructor forms: ``Broadcast(sc, value, pickle_registry)`` on the driver
    (pickles the value to a file), ``Broadcast(path=...)`` for a value already pickled to a
    file (loaded on first use) and ``Broadcast(sock_file=...)`` (loaded at once from an open
    binary file). Tasks get theirs through pickling (`_from_id`), which ships only the id.
    """

    def __init__(self, sc: Any = None, value: T | None = None, pickle_registry: Any = None,
                 path: str | None = None, sock_file: Any = None) -> None:
        self._destroyed = False
        self._bid: int | None = None
        self._sc = sc
        self._pickle_registry = pickle_registry
        if sc is None:
            if sock_file is not None:
                self._value = self.load(sock_file)
            elif path is None:
                raise AssertionError("Broadcast(): pass sc and value (on the driver), "
                                     "path= or sock_file=")
            self._path = path
            return
        bid = sc.runtime.new_broadcast_id()
        self._path = sc.runtime.broadcast_path(bid)
        self._write(value)
        self._bid = bid
        self._value = value
        cleaner = sc.runtime.cleaner
        if cleaner is not None:
            cleaner.register_broadcast_for_cleanup(self)

    def _write(self, value: T) -> None:
        """The driver's file of the value (a temp file renamed), where tasks and executors
        read it; written again from the driver's value when a task is sent and the file is
        gone (a temp-directory cleaner)."""
        tmp = self._path + ".tmp"
        try:
            self.dump(value, open_created(tmp))
        except BaseException:
            unlink_quietly(tmp)
            raise
        os.replace(tmp, self._path)

    def dump(self, value: T, f: Any) -> None:
        """Pickle `value` to the open binary file `f` and close it; a value that cannot be
        pickled raises PicklingError("Could not serialize broadcast: ...") as in PySpark
        (cloudpickle, so lambdas and local classes broadcast too)."""
        import cloudpickle
        try:
            try:
                cloudpickle.dump(value, f, protocol=pickle.HIGHEST_PROTOCOL)
            except pickle.PickleError:
                raise
            except Exception as e:
                msg = "Could not serialize broadcast: %s: %s" % (e.__class__.__name__, str(e))
                traceback.print_exc(file=sys.stderr)
                raise pickle.PicklingError(msg) from None
        finally:
            f.close()

    def load_from_path(self, path: str) -> T:
        with open(path, "rb", 1 << 20) as f:
            return self.load(f)

    def load(self, file: Any) -> T:
        try:        # inside: a task killed by its signal in between leaves the collector on
            gc.disable()       # unpickling a large value: no collections of the half-built graph
            return pickle.load(file)
        finally:
            gc.enable()

    @property
    def value(self) -> T:
        if self._destroyed:
            raise RuntimeError(f"Attempted to use broadcast variable {self._bid} after it was destroyed")
        if hasattr(self, "_value"):
            return self._value
        if self._bid is None:                  # Broadcast(path=...): load on first use
            self._value = self.load_from_path(self._path)
            return self._value
        v = _broadcast_registry.get(self._bid, _broadcast_registry)
        if v is _broadcast_registry:
            path = self._path
            fetch = _fetcher[0]
            if fetch is not None:
                path = fetch(self._bid, path)
            v = self.load_from_path(path)
            _broadcast_registry[self._bid] = v
        return v

    def unpersist(self, blocking: bool = False) -> None:
        """Drop cached copies in task processes; the next use reloads the value."""
        if self._sc is None:
            raise PySparkRuntimeError(errorClass="INVALID_BROADCAST_OPERATION",
                                      messageParameters={"operation": "unpersisted"})
        self._sc.runtime.unpersist_broadcast(self._bid)

    def destroy(self, blocking: bool = False) -> None:
        if self._sc is None:
            raise PySparkRuntimeError(errorClass="INVALID_BROADCAST_OPERATION",
                                      messageParameters={"operation": "destroyed"})
        self.unpersist(blocking)
        self._destroyed = True
        unlink_quietly(self._path)

    def __reduce__(self):
        if self._bid is None:
            raise PySparkRuntimeError(errorClass="INVALID_BROADCAST_OPERATION",
                                      messageParameters={"operation": "serialized"})
        if self._destroyed:
            raise RuntimeError(f"Attempted to use broadcast variable {self._bid} after it was destroyed")
        if self._pickle_registry is not None:
            self._pickle_registry.add(self)
        if self._sc is not None and not os.path.exists(self._path):
            self._write(self._value)
        return (_from_id, (self._bid, self._path))

    def __repr__(self) -> str:
        return f"<ember.broadcast.Broadcast object, id={self._bid}>"
