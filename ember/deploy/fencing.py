"""Leadership fencing on the receiving side: refuse a master's instruction from an older
epoch than the newest one seen.

Why: after a failover a deposed leader may not know it yet (paused, partitioned, its
ZooKeeper session expired while it slept). Everything it still sends - LaunchExecutor,
LaunchDriver, KillExecutor, KillDriver, MasterChanged, RegisteredWorker - carries the epoch
it was elected with, and workers and app clients run it through an `EpochFence` first, so it
can never launch or kill anything once a newer leader has spoken. Epoch 0 comes from a
master without recovery (one master only, nothing to fence against) and is always let in.
Pure: one instance per receiver, used on its one loop thread.
"""
from __future__ import annotations

from typing import Any, Optional


class EpochFence:
    """The newest master epoch a worker or app client has seen."""

    def __init__(self) -> None:
        self.newest = 0

    def admit(self, epoch: int) -> bool:
        """Whether a message carrying `epoch` may act; a newer epoch becomes the newest."""
        if epoch == 0:
            return True
        if epoch < self.newest:
            return False
        self.newest = epoch
        return True

    def refusal(self, msg: Any) -> Optional[str]:
        """None if `msg` (any message with an `epoch` field) may act, else the log line."""
        epoch = int(getattr(msg, "epoch", 0) or 0)
        if self.admit(epoch):
            return None
        return (f"Refusing {type(msg).__name__} from a master at epoch {epoch}: a master at "
                f"epoch {self.newest} has taken over")



# --------------------------------------------------------------------------- master lease
# SPARK-19900: a supervised driver whose worker the master lost (a cut link, a frozen host)
# is relaunched elsewhere while the first copy may still run. The lease closes that window:
# a worker that has not heard from any master for `lease` seconds kills its drivers, and the
# master relaunches such a driver only once that lease has surely run out on the worker.

LEASE_GRACE_MS = 2000
"""Slack the master adds after a lost worker's lease: the worker's lease check runs at least
every second and kills with SIGKILL, so its drivers are gone well within it."""


class MasterLease:
    """A worker's lease on being in contact with a master. Renewed with the time a heartbeat
    was *sent* once the master acknowledged it (the master's clock of our last heartbeat is
    never earlier), or when a registration is answered. Pure; times are monotonic seconds."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self.renewed_at: Optional[float] = None

    def renew(self, at: float) -> None:
        if self.renewed_at is None or at > self.renewed_at:
            self.renewed_at = at

    def expired(self, now: float) -> bool:
        """True once no master answered for longer than the lease (never before the first
        registration: there is nothing to fence before a master ever launched anything)."""
        return self.renewed_at is not None and now - self.renewed_at > self.lease_s

    def silent_for(self, now: float) -> float:
        return 0.0 if self.renewed_at is None else now - self.renewed_at

    @property
    def check_interval(self) -> float:
        """How often the worker checks: at most a second apart, so the master's grace
        (LEASE_GRACE_MS) covers the check's delay and the kill."""
        return min(1.0, self.lease_s / 4.0)


def relaunch_not_before_ms(last_contact_ms: int, lease_ms: int) -> int:
    """The earliest time (epoch ms) a master may relaunch a driver of a worker it last heard
    from at `last_contact_ms`: by then the worker's lease has expired and it killed it."""
    return last_contact_ms + lease_ms + LEASE_GRACE_MS


__all__ = ["EpochFence", "MasterLease", "LEASE_GRACE_MS", "relaunch_not_before_ms"]
