"""Spark's HeartbeatReceiver: when the driver last heard each executor, so an executor that
stopped answering while its connection stays open (its process stopped, or hung) is
removed and replaced after spark.network.timeout instead of holding its tasks forever.

Pure state: the standalone backend feeds it registrations, heartbeats and removals, and
asks it every spark.network.timeoutInterval which executors have been silent too long.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ember import config
from ember.util.liveness import ran_late

TIMEOUT = "spark.storage.blockManagerHeartbeatTimeoutMs"
NETWORK_TIMEOUT = "spark.network.timeout"
CHECK_INTERVAL = "spark.network.timeoutInterval"
HEARTBEAT_INTERVAL = "spark.executor.heartbeatInterval"


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


@dataclass(frozen=True)
class HeartbeatSettings:
    timeout_s: float
    check_interval_s: float

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | Any) -> "HeartbeatSettings":
        """Spark's checks (SparkConf.validateSettings and the HeartbeatReceiver's), in its
        words; ValueError when one fails."""
        network = config.read(conf, NETWORK_TIMEOUT)
        heartbeat = config.read(conf, HEARTBEAT_INTERVAL)
        timeout = config.read(conf, TIMEOUT)
        check = config.read(conf, CHECK_INTERVAL)
        if _ms(network) <= _ms(heartbeat):
            raise ValueError(f"requirement failed: The value of {NETWORK_TIMEOUT}="
                             f"{_ms(network)}ms must be no less than the value of "
                             f"{HEARTBEAT_INTERVAL}={_ms(heartbeat)}ms.")
        if check > timeout:
            raise ValueError(f"requirement failed: {CHECK_INTERVAL} should be less than or "
                             f"equal to {config.source_key(conf, TIMEOUT)}.")
        if heartbeat > timeout:
            raise ValueError(f"requirement failed: {HEARTBEAT_INTERVAL} should be less than "
                             f"or equal to {TIMEOUT}")
        if check <= 0:
            raise ValueError(f"requirement failed: {CHECK_INTERVAL} should be positive.")
        return cls(timeout, check)


class HeartbeatReceiver:
    """A check that runs late removes nobody (ember.util.liveness): the heartbeats that
    waited in the driver's sockets meanwhile are not read yet."""

    def __init__(self, settings: HeartbeatSettings, now: float) -> None:
        self.settings = settings
        self.last_seen: dict[str, float] = {}
        self._last_check = now

    def executor_added(self, executor_id: str, now: float) -> None:
        self.last_seen[executor_id] = now

    def executor_removed(self, executor_id: str) -> None:
        self.last_seen.pop(executor_id, None)

    def heartbeat(self, executor_id: str, now: float) -> None:
        if executor_id in self.last_seen:
            self.last_seen[executor_id] = now

    def expire(self, now: float) -> list[tuple[str, float]]:
        """(executor, seconds silent) of those silent longer than the timeout, forgotten
        here; called every check interval."""
        late = ran_late(self._last_check, now, self.settings.check_interval_s)
        self._last_check = now
        if late:
            self.last_seen = dict.fromkeys(self.last_seen, now)
            return []
        expired = [(executor_id, now - seen) for executor_id, seen in self.last_seen.items()
                   if now - seen > self.settings.timeout_s]
        for executor_id, _ in expired:
            del self.last_seen[executor_id]
        return expired
