"""The master's configuration (§1.2 of the reference), parsed once through Ember's one
registry (ember.config) into a frozen `MasterConfig`, so a bad value stops `ember master` at
start with a message naming the key instead of failing inside a timer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ember import config
from ember.deploy.master.scheduling import (
    INT_MAX, WorkerSelectionPolicy, parse_worker_selection_policy)

__all__ = ["MasterConfig"]


def _int(conf: Mapping[str, Any], key: str) -> int:
    return config.read(conf, key)


def _seconds_ms(conf: Mapping[str, Any], key: str) -> Optional[int]:
    seconds = config.read(conf, key)
    return None if seconds is None else int(seconds * 1000)


def _pattern(conf: Mapping[str, Any], key: str) -> str:
    value = config.read(conf, key)
    if any(c.isspace() for c in value):
        raise ValueError(f"{key}: Whitespace is not allowed ({value!r}).")
    try:
        value % ("20250101000000", 0)
    except (TypeError, ValueError):
        raise ValueError(f"{key} should be a format like 'app-%s-%04d' taking a timestamp and "
                         f"a number, but was {value!r}") from None
    return value


@dataclass(frozen=True)
class MasterConfig:
    """The spark.* keys the master reads, parsed, with Spark 4.1 defaults."""
    worker_timeout_ms: int = 60_000
    retained_applications: int = 200
    retained_drivers: int = 200
    max_drivers: int = INT_MAX
    reaper_iterations: int = 15
    recovery_mode: str = "NONE"
    recovery_timeout_ms: int = 60_000
    worker_lease_ms: int = 60_000      # spark.ember.worker.masterLease (driver fencing)
    max_executor_retries: int = 10
    spread_out_drivers: bool = True
    spread_out_apps: bool = True
    worker_selection_policy: WorkerSelectionPolicy = WorkerSelectionPolicy.CORES_FREE_DESC
    default_cores: int = INT_MAX
    app_id_pattern: str = "app-%s-%04d"
    driver_id_pattern: str = "driver-%s-%04d"
    app_number_modulo: int = 0
    use_app_name_as_app_id: bool = False
    use_driver_id_as_app_name: bool = False
    reserve_executor_for_drivers: bool = True

    @staticmethod
    def from_conf(conf: Mapping[str, Any]) -> "MasterConfig":
        config.check_unsupported(conf)
        timeout = _seconds_ms(conf, "spark.worker.timeout")
        if timeout <= 0:
            raise ValueError("spark.worker.timeout must be a positive number of seconds.")
        for key, low in (("spark.deploy.retainedApplications", 1),
                         ("spark.deploy.retainedDrivers", 1),
                         ("spark.dead.worker.persistence", 0)):
            if _int(conf, key) < low:
                raise ValueError(f"{key} must be at least {low}.")
        recovery_timeout = _seconds_ms(conf, "spark.deploy.recoveryTimeout")
        lease = _seconds_ms(conf, "spark.ember.worker.masterLease")
        if lease <= 0:
            raise ValueError(f"Invalid value for spark.ember.worker.masterLease: "
                             f"{conf.get('spark.ember.worker.masterLease')!r} (must be > 0)")
        if recovery_timeout <= 0:
            raise ValueError("spark.deploy.recoveryTimeout must be positive.")
        default_cores = _int(conf, "spark.deploy.defaultCores")
        if default_cores < 1:
            raise ValueError("spark.deploy.defaultCores must be positive.")
        max_drivers = _int(conf, "spark.deploy.maxDrivers")
        if max_drivers < 1:
            raise ValueError("spark.deploy.maxDrivers must be positive.")
        modulo_n = _int(conf, "spark.deploy.appNumberModulo")
        if modulo_n is not None and modulo_n < 1000:
            raise ValueError("spark.deploy.appNumberModulo should be at least 1000, "
                             f"but was {modulo_n}.")
        return MasterConfig(
            worker_timeout_ms=timeout,
            retained_applications=_int(conf, "spark.deploy.retainedApplications"),
            retained_drivers=_int(conf, "spark.deploy.retainedDrivers"),
            max_drivers=max_drivers,
            reaper_iterations=_int(conf, "spark.dead.worker.persistence"),
            recovery_mode=config.read(conf, "spark.deploy.recoveryMode"),
            recovery_timeout_ms=recovery_timeout,
            worker_lease_ms=lease,
            max_executor_retries=_int(conf, "spark.deploy.maxExecutorRetries"),
            spread_out_drivers=config.read(conf, "spark.deploy.spreadOutDrivers"),
            spread_out_apps=config.read(conf, "spark.deploy.spreadOutApps"),
            worker_selection_policy=parse_worker_selection_policy(
                config.read(conf, "spark.deploy.workerSelectionPolicy")),
            default_cores=default_cores,
            app_id_pattern=_pattern(conf, "spark.deploy.appIdPattern"),
            driver_id_pattern=_pattern(conf, "spark.deploy.driverIdPattern"),
            app_number_modulo=modulo_n or 0,
            use_app_name_as_app_id=config.read(conf, "spark.master.useAppNameAsAppId.enabled"),
            use_driver_id_as_app_name=config.read(
                conf, "spark.master.useDriverIdAsAppName.enabled"),
            reserve_executor_for_drivers=config.read(
                conf, "spark.ember.deploy.driverAdmission.reserveExecutor"),
        )
