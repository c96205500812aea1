"""The worker's configuration keys, registered in Ember's one registry and parsed once.

Why a module of its own: the worker reads a dozen `spark.worker.*` keys (Spark's names and
defaults, §1.3 of the reference) plus two Ember-only knobs that make its timers testable
(`spark.ember.worker.registrationIntervalScale`, `spark.ember.worker.executorTerminateTimeout`).
They are added to `ember.config.REGISTRY` so `ember.config.read` and any listing of keys know
them, and parsed here into one frozen `WorkerConf`, so a bad value fails at start-up with a
message naming the key instead of deep inside a timer.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional

from ember.config import REGISTRY, ConfigEntry, parse_bool, parse_time_seconds

__all__ = ["WorkerConf", "WORKER_KEYS"]


def _int(v: Any) -> int:
    return int(str(v).strip())


def _float(v: Any) -> float:
    return float(str(v).strip())


def _str(v: Any) -> str:
    return str(v)


def _seconds(v: Any) -> float:
    return parse_time_seconds(v, "s")


WORKER_KEYS: dict[str, ConfigEntry] = {}


def _key(key: str, default: Any, parse: Callable[[Any], Any], doc: str) -> None:
    entry = ConfigEntry(key, default, parse, doc)
    WORKER_KEYS[key] = entry
    REGISTRY.setdefault(key, entry)


_key("spark.worker.timeout", 60.0, _seconds,
     "Seconds without a heartbeat before the master drops a worker; the worker sends a "
     "heartbeat every timeout/4.")
_key("spark.ember.worker.masterLease", None, _seconds,
     "Ember only (driver fencing, SPARK-19900): a worker that no master has answered for "
     "this many seconds kills the drivers it runs, and a master relaunches a lost worker's "
     "supervised driver only after it (plus 2 s). Default: spark.worker.timeout. Set the "
     "same value on masters and workers.")
_key("spark.worker.initialRegistrationRetries", 6, _int,
     "Registration retries at the short (INITIAL, 5-15 s) interval.")
_key("spark.worker.maxRegistrationRetries", 16, _int,
     "Total registration retries before 'All masters are unresponsive! Giving up.' (exit 1).")
_key("spark.ember.worker.registrationIntervalScale", 1.0, _float,
     "Ember only: multiplies the INITIAL/PROLONGED registration intervals (tests use 0.01).")
_key("spark.worker.preferConfiguredMasterAddress", False, parse_bool,
     "Re-register with the configured master address rather than the one the master reported.")
_key("spark.worker.cleanup.enabled", True, parse_bool,
     "Periodically delete the work dirs of stopped applications.")
_key("spark.worker.cleanup.interval", 1800.0, _seconds, "Seconds between work-dir cleanups.")
_key("spark.worker.cleanup.appDataTtl", 604800.0, _seconds,
     "A stopped app's work dir is deleted only if nothing in it changed within this TTL.")
_key("spark.worker.ui.port", None, _int, "Worker web UI port; overrides --webui-port.")
_key("spark.worker.ui.retainedExecutors", 1000, _int, "Finished executors kept for the UI.")
_key("spark.worker.ui.retainedDrivers", 1000, _int, "Finished drivers kept for the UI.")
_key("spark.worker.idPattern", "worker-%s-%s-%d", _str,
     "Worker id pattern, formatted with (yyyyMMddHHmmss, host, port).")
_key("spark.worker.executorStateSync.maxAttempts", 5, _int,
     "Failed ExecutorStateChanged asks to the master before the worker exits.")
_key("spark.ember.worker.executorTerminateTimeout", 10.0, _seconds,
     "Ember only: grace period between SIGTERM and SIGKILL when killing an executor's "
     "process tree (Spark hard-codes 10 s).")
_key("spark.decommission.enabled", False, parse_bool,
     "Honour decommission requests (DecommissionWorker, SIGPWR).")
_key("spark.port.maxRetries", 16, _int, "Successive ports tried when a port is busy.")
_key("spark.rpc.askTimeout", 120.0, _seconds, "Default timeout of an RPC ask.")


def _get(conf: Mapping[str, Any], key: str) -> Any:
    entry = WORKER_KEYS[key]
    raw = conf.get(key)
    if raw is None:
        return entry.default
    try:
        return entry.parse(raw)
    except (ValueError, TypeError) as e:
        raise ValueError(f"Invalid value for {key}: {raw!r} ({e})") from None


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
        """Parse every key (defaults for missing ones); ValueError names a bad key."""
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
            decommission_enabled=_get(conf, "spark.decommission.enabled"),
            port_max_retries=_get(conf, "spark.port.maxRetries"),
            ask_timeout=_get(conf, "spark.rpc.askTimeout"),
        )
        lease = _get(conf, "spark.ember.worker.masterLease")
        if lease is not None and lease <= 0:
            raise ValueError(f"Invalid value for spark.ember.worker.masterLease: {lease!r} "
                             "(must be positive)")
        c = replace(c, master_lease=c.timeout if lease is None else lease)
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
    raw = env.get("SPARK_LOCAL_DIRS") or conf.get("spark.local.dir") or tempfile.gettempdir()
    return [d.strip() for d in str(raw).split(",") if d.strip()]
