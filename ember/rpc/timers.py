"""Timers on an RpcEnv's loop: ``schedule`` (once) and ``schedule_periodic`` (fixed rate).

Their own module because they are the loop's clock, not routing: every run goes through the
env's `safe_call` (exceptions logged, slow runs warned about), arming happens on the loop,
and a `Cancellable` wins against a run that is already due.
"""
from __future__ import annotations

import asyncio
from typing import Callable

# run_on_loop(fn, *args): run fn on the loop soon, from any thread (RuntimeError if closed)
RunOnLoop = Callable[..., None]
# safe_call(fn, args): run fn(*args) on the loop, logging what it raises
SafeCall = Callable[[Callable, tuple], None]


class Cancellable:
    """Handle of a scheduled function; ``cancel()`` is thread-safe and idempotent."""

    __slots__ = ("_run_on_loop", "handle", "_cancelled", "next_at")

    def __init__(self, run_on_loop: RunOnLoop, cancelled: bool = False) -> None:
        self._run_on_loop = run_on_loop
        self.handle: asyncio.TimerHandle | None = None
        self._cancelled = cancelled
        self.next_at = 0.0          # loop time of the next periodic run

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        self._cancelled = True   # checked before every run, so it wins even if racing
        handle = self.handle
        if handle is not None:
            try:
                self._run_on_loop(handle.cancel)
            except RuntimeError:
                pass  # loop already gone


class LoopTimers:
    """Arms one-shot and fixed-rate timers on `loop` for the env that owns it."""

    def __init__(self, loop: asyncio.AbstractEventLoop, run_on_loop: RunOnLoop,
                 safe_call: SafeCall) -> None:
        self._loop = loop
        self._run_on_loop = run_on_loop
        self._safe_call = safe_call

    def stopped(self) -> Cancellable:
        """The handle returned once the env is shut down: it runs nothing more."""
        return Cancellable(self._run_on_loop, cancelled=True)

    def once(self, delay: float, fn: Callable, args: tuple) -> Cancellable:
        c = Cancellable(self._run_on_loop)
        safe_call = self._safe_call

        def fire() -> None:
            if not c.cancelled:
                safe_call(fn, args)

        def arm() -> None:
            if not c.cancelled:
                c.handle = self._loop.call_later(max(0.0, delay), fire)
        self._run_on_loop(arm)
        return c

    def periodic(self, delay: float, period: float, fn: Callable, args: tuple) -> Cancellable:
        if period <= 0:
            raise ValueError(f"period must be positive, got {period}")
        c = Cancellable(self._run_on_loop)
        loop = self._loop
        safe_call = self._safe_call

        def fire() -> None:
            if c.cancelled:
                return
            safe_call(fn, args)
            if c.cancelled:
                return
            now = loop.time()
            c.next_at += period
            if c.next_at < now:       # late: skip the missed runs, keep the phase
                c.next_at = now + period - ((now - c.next_at) % period)
            c.handle = loop.call_at(c.next_at, fire)

        def arm() -> None:
            if not c.cancelled:
                c.next_at = loop.time() + max(0.0, delay)
                c.handle = loop.call_at(c.next_at, fire)
        self._run_on_loop(arm)
        return c
