"""Undo for a deterministic state machine: a checkpoint and the events since, replayed.

Why: a handler that raises half-way must leave the state as it was before the event (it
may already have registered a worker, taken cores, advanced a counter). Copying the whole
state before every event would make each event cost as much as the state is large (the
master simulates 1,000 workers x 1,000 apps); journaling every field write would need
hooks in every container. A sans-I/O state machine has a cheaper way: its handlers are
deterministic functions of (state, event, time), so the state before event k is the last
checkpoint with the committed events after it applied again.

A checkpoint is the state pickled (one bytes object: the garbage collector never walks it)
with handles kept by reference: endpoint refs and reply channels (what defines
``__deepcopy__`` to return itself) and functions. One is taken once the events since the
last one took `COST_RATIO` times as long to handle as that pickling (or `MAX_EVENTS` piled
up): checkpoints cost at most a twentieth of the handling, and the replay a failure pays
for is bounded by about twenty checkpoints' time.

The rules that make it exact: the state changes only through `apply` (one writer), and
an event whose payload the state adopts as its own mutable objects (a recovery's records)
is committed with ``checkpoint=True``, so it never needs replaying.
"""
from __future__ import annotations

import io
import pickle
import time
import types
from typing import Any, Callable

COST_RATIO = 20       # handling time between checkpoints, in checkpoint costs
MAX_EVENTS = 10_000   # events kept for a replay, at most

_HANDLE_TYPES = (types.FunctionType, types.MethodType, types.BuiltinFunctionType)
_KEPT: dict[type, bool] = {}


def _is_handle(t: type) -> bool:
    """Values of type `t` are references to the outside, not state: kept as they are."""
    kept = _KEPT.get(t)
    if kept is None:
        kept = _KEPT[t] = issubclass(t, _HANDLE_TYPES) or "__deepcopy__" in dir(t)
    return kept


class _Saver(pickle.Pickler):
    def __init__(self, out: io.BytesIO, kept: list[Any]) -> None:
        super().__init__(out, protocol=pickle.HIGHEST_PROTOCOL)
        self.kept = kept

    def persistent_id(self, obj: Any) -> int | None:
        if _is_handle(type(obj)):
            self.kept.append(obj)
            return len(self.kept) - 1
        return None


class _Loader(pickle.Unpickler):
    def __init__(self, data: bytes, kept: list[Any]) -> None:
        super().__init__(io.BytesIO(data))
        self.kept = kept

    def persistent_load(self, pid: Any) -> Any:
        return self.kept[pid]


class Rollback:
    """Restores `target` (its instance attributes, minus `skip`) to before a failed event.

    `apply(event, now_ms)` runs one event's handler on `target` again, its output dropped.
    """

    def __init__(self, target: Any, skip: frozenset[str],
                 apply: Callable[[Any, int], None]) -> None:
        self._target = target
        self._skip = skip
        self._apply = apply
        self._events: list[tuple[Any, int]] = []
        self._checkpoint: bytes | None = None   # taken before the first event
        self._kept: list[Any] = []
        self._checkpoint_cost = 0.0     # seconds the last checkpoint took
        self._handled = 0.0             # seconds spent handling the events since
        self._started = 0.0

    def checkpoint(self) -> None:
        """Take a checkpoint of the state as it is now (forgets the events before it)."""
        start = time.perf_counter()
        skip = self._skip
        fields = {k: v for k, v in vars(self._target).items() if k not in skip}
        out = io.BytesIO()
        kept: list[Any] = []
        _Saver(out, kept).dump(fields)
        self._checkpoint, self._kept = out.getvalue(), kept
        self._events.clear()
        self._handled = 0.0
        self._checkpoint_cost = time.perf_counter() - start

    def begin(self) -> None:
        """An event is about to be applied (starts timing its handling)."""
        if self._checkpoint is None:    # the state as constructed, subclasses included
            self.checkpoint()
        self._started = time.perf_counter()

    def committed(self, event: Any, now_ms: int, checkpoint: bool = False) -> None:
        """The event begun last was applied at `now_ms` without raising. `checkpoint`:
        take one now (the state adopted objects of the event)."""
        self._handled += time.perf_counter() - self._started
        if (checkpoint or len(self._events) >= MAX_EVENTS
                or self._handled >= COST_RATIO * self._checkpoint_cost):
            self.checkpoint()
        else:
            self._events.append((event, now_ms))

    def restore(self) -> None:
        """Put the state back as it was after the last committed event."""
        target = self._target
        assert self._checkpoint is not None, "restore() before any begin()"
        fields = _Loader(self._checkpoint, self._kept).load()
        for name in [k for k in vars(target) if k not in self._skip and k not in fields]:
            delattr(target, name)                  # created by the failed event
        vars(target).update(fields)
        for event, now_ms in self._events:
            self._apply(event, now_ms)
