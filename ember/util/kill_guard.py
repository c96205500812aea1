"""Steps of Ember's own code that a task kill must not cut in half.

A task process kills its running task by raising TaskKilledException from its SIGUSR1
handler (ember.executor.task_process), so the kill lands between any two steps of whatever
runs, Ember's own code included. The process lives on after a kill and keeps state across
tasks (cached blocks and their byte count, open map output files, the channel to its pool),
and a kill between two steps that change that state together leaves it half changed for the
next task: a byte count that no longer matches the blocks, a block the driver is never told
about, a message read off the socket and lost before it was framed.

Such steps run inside ``with kills_deferred:``; a kill signal arriving there is remembered
and raised again, to the same handler, when the outermost such block ends (whatever
exception is on its way out then), which decides afresh whether the task it meant still
runs. No user code runs inside one, so a kill waits at most for Ember's own bookkeeping.
"""
from __future__ import annotations

import signal

_depth = [0]
_pending: list[int | None] = [None]     # the signal that came while deferred


class _KillsDeferred:
    __slots__ = ()

    def __enter__(self) -> None:
        _depth[0] += 1

    def __exit__(self, exc_type, exc, tb) -> None:
        _depth[0] -= 1
        if _pending[0] is not None and not _depth[0]:
            # also over an exception on its way out, which Ember's code may yet catch
            signum, _pending[0] = _pending[0], None
            signal.raise_signal(signum)


kills_deferred = _KillsDeferred()


def defer_kill(signum: int) -> bool:
    """Called first by a kill signal's handler: True if the kill must wait (the handler
    returns, and the signal is raised again when the deferred steps end)."""
    if _depth[0]:
        _pending[0] = signum
        return True
    return False
