"""The worker's configuration, parsed once through Ember's one registry (ember.config).

Why a module of its own: the worker reads a dozen `spark.worker.*` keys (Spark's names and
defaults, §1.3 of the reference) plus Ember-only knobs that make its timers testable
(`spark.ember.worker.registrationIntervalScale`, `spark.ember.worker.executorTerminateTimeout`).
They are declared in `ember.config` and parsed here into one frozen `WorkerConf`, so a bad
value fails at start-up with a message naming the key instead of deep inside a timer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional

from ember import config

__all__ = ["WorkerConf"]


def _get(conf: Mapping[str, Any], key: str) -> Any:
    return config.read(conf, key)


@dataclass(frozen=True)
class WorkerConf:
    """The parsed `spark.worker.*` settings a Worker runs with (times in seconds)."""

    timeout: float = 60.0
    initial_registration_retries: int = 6
    max_registration_retries: int = 16
    registration_interval_scale: float = 1.0
    prefer_configured_master_address: bool = False
    cleanup_enabled: bool = True
    cleanup_interval: float = 1800.0
    app_data_ttl: float = 604800.0
    ui_port: Optional[int] = None
    retained_executors: int = 1000
    retained_drivers: int = 1000
    id_pattern: str = "worker-%s-%s-%d"
    executor_state_sync_max_attempts: int = 5
    executor_terminate_timeout: float = 10.0
    executor_zygote: bool = True
    decommission_enabled: bool = False
    port_max_retries: int = 16
    ask_timeout: float = 120.0
    master_lease: float = 60.0

    @property
    def heartbeat_interval(self) -> float:
        """Spark's HEARTBEAT_MILLIS = timeout * 1000 / 4."""
        return self.timeout / 4.0

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "WorkerConf":
        """Parse every key (defaults for missing ones); ValueError names a bad key, or an
        unsupported safety key set (ember.config.check_unsupported)."""
        config.check_unsupported(conf)
        c = cls(
            timeout=_get(conf, "spark.worker.timeout"),
            initial_registration_retries=_get(conf, "spark.worker.initialRegistrationRetries"),
            max_registration_retries=_get(conf, "spark.worker.maxRegistrationRetries"),
            registration_interval_scale=_get(conf, "spark.ember.worker.registrationIntervalScale"),
            prefer_configured_master_address=_get(
                conf, "spark.worker.preferConfiguredMasterAddress"),
            cleanup_enabled=_get(conf, "spark.worker.cleanup.enabled"),
            cleanup_interval=_get(conf, "spark.worker.cleanup.interval"),
            app_data_ttl=_get(conf, "spark.worker.cleanup.appDataTtl"),
            ui_port=_get(conf, "spark.worker.ui.port"),
            retained_executors=_get(conf, "spark.worker.ui.retainedExecutors"),
            retained_drivers=_get(conf, "spark.worker.ui.retainedDrivers"),
            id_pattern=_get(conf, "spark.worker.idPattern"),
            executor_state_sync_max_attempts=_get(
                conf, "spark.worker.executorStateSync.maxAttempts"),
            executor_terminate_timeout=_get(conf, "spark.ember.worker.executorTerminateTimeout"),
            executor_zygote=_get(conf, "spark.ember.worker.executorZygote"),
            decommission_enabled=_get(conf, "spark.decommission.enabled"),
            port_max_retries=_get(conf, "spark.port.maxRetries"),
            ask_timeout=_get(conf, "spark.rpc.askTimeout"),
        )
        lease = _get(conf, "spark.ember.worker.masterLease")
        if lease <= 0:
            raise ValueError(f"Invalid value for spark.ember.worker.masterLease: {lease!r} "
                             "(must be positive)")
        c = replace(c, master_lease=lease)
        if c.timeout <= 0:
            raise ValueError(f"Invalid value for spark.worker.timeout: {c.timeout!r} "
                             "(must be positive)")
        if c.registration_interval_scale <= 0:
            raise ValueError("Invalid value for spark.ember.worker.registrationIntervalScale: "
                             f"{c.registration_interval_scale!r} (must be positive)")
        if c.cleanup_interval <= 0:
            raise ValueError("Invalid value for spark.worker.cleanup.interval: "
                             f"{c.cleanup_interval!r} (must be positive)")
        if c.executor_terminate_timeout < 0:
            raise ValueError("Invalid value for spark.ember.worker.executorTerminateTimeout: "
                             f"{c.executor_terminate_timeout!r} (must not be negative)")
        if c.ui_port is not None and not 0 <= c.ui_port <= 65535:
            raise ValueError(f"Invalid value for spark.worker.ui.port: {c.ui_port} "
                             "(must be 0-65535)")
        return c


def local_root_dirs(conf: Mapping[str, Any], environ: Optional[Mapping[str, str]] = None
                    ) -> list[str]:
    """Where app-local scratch dirs go, in Spark's order (Utils.getConfiguredLocalDirs):
    env SPARK_LOCAL_DIRS (comma-separated), else spark.local.dir, else the system temp dir."""
    import tempfile
    env = os.environ if environ is None else environ
    raw = (env.get("SPARK_LOCAL_DIRS") or config.read(conf, "spark.local.dir")
           or tempfile.gettempdir())
    return [d.strip() for d in str(raw).split(",") if d.strip()]
