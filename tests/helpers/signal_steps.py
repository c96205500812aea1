"""A signal raised at each point where Python could run its handler, one point per run.

Python runs a signal's handler, in the main thread, only at some instructions: after a
call returns, at a backward jump, at a function's start (3.11's CALL, CALL_FUNCTION_EX,
JUMP_BACKWARD, RESUME). A handler that raises (a task kill, Ctrl-C) therefore cuts whatever
runs at one of those points. `raised_at(step, op, ...)` runs op with the signal raised at
its step'th such point (counted over every frame op runs, by a trace function), so a test
can try them all, one run each, and check what each left behind."""
from __future__ import annotations

import dis
import signal
import sys
from typing import Any, Callable

import pytest

_HANDLED_AFTER = {"CALL", "CALL_FUNCTION_EX", "JUMP_BACKWARD", "RESUME"}

# a signal's exception raised in code the collector runs (a weakref finalizer, a gc callback
# such as hypothesis's, once a test imported it) is printed and ignored by Python itself, and
# pytest reports that as a warning; what was running goes on, as it would
IGNORED_IN_FINALIZERS = pytest.mark.filterwarnings(
    "ignore::pytest.PytestUnraisableExceptionWarning")


def raised_at(step: int, op: Callable[[], Any], signum: int,
              catch: type[BaseException]) -> tuple[bool, bool]:
    """Run op with `signum` raised at its step'th handling point: (whether op ended with
    `catch`, whether it ran that far)."""
    count = [0]
    last: dict = {}

    def local(frame, event, arg):
        if event == "opcode":
            before = last.get(frame)
            last[frame] = dis.opname[frame.f_code.co_code[frame.f_lasti]]
            if before in _HANDLED_AFTER:
                count[0] += 1
                if count[0] == step:
                    signal.raise_signal(signum)
        return local

    def on_call(frame, event, arg):
        frame.f_trace_opcodes = True
        return local

    sys.settrace(on_call)
    try:
        op()
        raised = False
    except catch:
        raised = True
    finally:
        sys.settrace(None)
    return raised, count[0] >= step


def every_step(setup: Callable[[], Any], op: Callable[[Any], Any],
               check: Callable[[Any, bool], None], signum: int,
               catch: type[BaseException], limit: int = 20_000) -> int:
    """setup, op with the signal at its k-th point, check(state, raised), for k = 1, 2, ...
    until op ends before its k-th point; returns at how many points the signal ended op."""
    raised_count = 0
    for step in range(1, limit):
        state = setup()
        raised, reached = raised_at(step, lambda: op(state), signum, catch)
        check(state, raised)
        raised_count += raised
        if not reached:
            return raised_count
    raise AssertionError(f"op still running after {limit} points")
