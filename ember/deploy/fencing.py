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


__all__ = ["EpochFence"]
