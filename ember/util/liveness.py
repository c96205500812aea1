"""The one rule every periodic liveness check follows (the master's dead-worker check, the
driver's HeartbeatReceiver): a check that runs well after it was due shows its own process
was stopped or starved (SIGSTOP, a paused VM, a host swapping), and the heartbeats its peers
sent meanwhile wait unread in its sockets. Silence measured across that gap is its own, not
theirs: such a check removes nobody, and every peer's silence counts from that moment.
Without it a master stopped longer than spark.worker.timeout removed every worker as it
woke, and every executor of every application with them."""
from __future__ import annotations


def ran_late(previous_check: float | None, now: float, interval: float) -> bool:
    """Whether a check every `interval` that last ran at `previous_check` runs now more than
    half an interval after it was due (any unit, the same for all three)."""
    return previous_check is not None and now - previous_check > 1.5 * interval
