"""Broadcast variables: written once by the driver, read once per task process.

The driver pickles the value to a file under its local dir. A Broadcast pickles as (id,
path) only, so tasks carry a few bytes; the first `.value` in a task process loads the file
(fetching it from the driver first when the executor is on another host) and caches it for
every later task of that process.
"""
from __future__ import annotations

import os
import pickle
import threading
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")

# In task processes: bid -> loaded value.
_broadcastRegistry: dict[int, Any] = {}
# Set by an executor on another host: (bid, driver_path) -> local path to read.
_fetcher: list[Callable[[int, str], str] | None] = [None]
_lock = threading.Lock()


def _from_id(bid: int, path: str) -> "Broadcast":
    b = Broadcast.__new__(Broadcast)
    b._bid = bid
    b._path = path
    b._sc = None
    b._destroyed = False
    return b


class Broadcast(Generic[T]):
    def __init__(self, sc: Any = None, value: T | None = None, pickle_registry: Any = None,
                 path: str | None = None, sock_file: Any = None) -> None:
        if sc is None:
            raise ValueError("Broadcast can only be created through SparkContext.broadcast")
        self._sc = sc
        self._bid = sc._next_broadcast_id()
        self._path = os.path.join(sc._broadcast_dir, f"broadcast_{self._bid}")
        self._destroyed = False
        with open(self._path + ".tmp", "wb") as f:
            self.dump(value, f)
        os.replace(self._path + ".tmp", self._path)
        self._value = value

    def dump(self, value: T, f: Any) -> None:
        from ember.serializers import dumps_closure
        f.write(dumps_closure(value))

    def load_from_path(self, path: str) -> T:
        with open(path, "rb") as f:
            return self.load(f)

    def load(self, file: Any) -> T:
        return pickle.load(file)

    @property
    def value(self) -> T:
        if self._destroyed:
            raise RuntimeError(f"Attempted to use broadcast variable {self._bid} after it was destroyed")
        if self._sc is not None:
            return self._value
        v = _broadcastRegistry.get(self._bid, _broadcastRegistry)
        if v is _broadcastRegistry:
            path = self._path
            fetch = _fetcher[0]
            if fetch is not None:
                path = fetch(self._bid, path)
            v = self.load_from_path(path)
            _broadcastRegistry[self._bid] = v
        return v

    def unpersist(self, blocking: bool = False) -> None:
        """Drop cached copies in task processes; the next use reloads the value."""
        if self._sc is None:
            raise RuntimeError("Broadcast can only be unpersisted in driver")
        self._sc._unpersist_broadcast(self._bid)

    def destroy(self, blocking: bool = False) -> None:
        if self._sc is None:
            raise RuntimeError("Broadcast can only be destroyed in driver")
        self.unpersist(blocking)
        self._destroyed = True
        try:
            os.unlink(self._path)
        except OSError:
            pass

    def __reduce__(self):
        if self._destroyed:
            raise RuntimeError(f"Attempted to use broadcast variable {self._bid} after it was destroyed")
        return (_from_id, (self._bid, self._path))

    def __repr__(self) -> str:
        return f"<ember.broadcast.Broadcast object, id={self._bid}>"
