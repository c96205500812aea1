"""The function a result stage's tasks run, built by the driver's run_job.

Module-level callables instead of closures: cloudpickle writes a closure's code into every
job's stage blob (and the task process rebuilds it), while these pickle by reference. Kept
in a module of their own that imports nothing of ours, because every task process
unpickles them: the driver's runtime module would cost each new one tens of ms of imports.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable


class WithoutContext:
    """A job's `func(iterator)` as the task function `(context, iterator)`."""

    __slots__ = ("func",)

    def __init__(self, func: Callable[[Iterable], Any]) -> None:
        self.func = func

    def __call__(self, ctx: Any, it: Iterable) -> Any:
        return self.func(it)


class SerializedResult:
    """The task function whose result the context's data serializer encodes."""

    __slots__ = ("run", "ser")

    def __init__(self, run: Callable[[Any, Iterable], Any], ser: Any) -> None:
        self.run, self.ser = run, ser

    def __call__(self, ctx: Any, it: Iterable) -> Any:
        return self.ser.dumps(self.run(ctx, it))
