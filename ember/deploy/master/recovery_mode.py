"""Choosing the master's PersistenceEngine and LeaderElectionAgent by
`spark.deploy.recoveryMode`.

Why a module of its own: the choice names every engine (FILESYSTEM's in persistence.py,
ZOOKEEPER's in zookeeper.py), while the ZooKeeper engine builds on persistence.py's base
classes; with the choice inside persistence.py the two modules imported each other.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable, Mapping

from ember import config
from ember.deploy.master.persistence import (
    EPOCH_FILE, RECOVERY_MODES, UNSUPPORTED_RECOVERY_MODES, BlackHolePersistenceEngine,
    FileSystemPersistenceEngine, LeaderElectionAgent, MonarchyLeaderAgent, PersistenceEngine,
    RecoveryError, check_writable_dir,
)

log = logging.getLogger("ember.deploy.master.PersistenceEngine")


def recovery_mode(conf: Mapping[str, Any], warn: Callable[[str], None] = log.warning) -> str:
    """NONE, FILESYSTEM or ZOOKEEPER. An unknown value is NONE, as in Spark (whose master
    matches the known names and falls back to the black hole), plus a warning naming it;
    Spark modes Ember does not implement raise RecoveryError."""
    raw = config.read(conf, "spark.deploy.recoveryMode").strip()
    mode = raw.upper()
    if mode in RECOVERY_MODES:
        return mode
    if mode in UNSUPPORTED_RECOVERY_MODES:
        raise RecoveryError(f"spark.deploy.recoveryMode={mode} is not supported by Ember; "
                            "use FILESYSTEM or ZOOKEEPER")
    warn(f"Unknown spark.deploy.recoveryMode {raw!r}: running without recovery (NONE); "
         "the known modes are NONE, FILESYSTEM and ZOOKEEPER")
    return "NONE"


def recovery_directory(conf: Mapping[str, Any]) -> str:
    directory = config.read(conf, "spark.deploy.recoveryDirectory").strip()
    if not directory:
        raise RecoveryError("spark.deploy.recoveryDirectory must be set when "
                            "spark.deploy.recoveryMode=FILESYSTEM")
    return directory


def check_recovery_conf(conf: Mapping[str, Any]) -> None:
    """What `validate_master_conf` checks before binding anything (RecoveryError)."""
    mode = recovery_mode(conf, warn=lambda text: None)
    if mode == "FILESYSTEM":
        check_writable_dir(os.path.abspath(recovery_directory(conf)))
    elif mode == "ZOOKEEPER":
        from ember.deploy.master.zookeeper import ZooKeeperSettings
        ZooKeeperSettings(conf)   # the URL, directory and timeouts, each named when wrong


def create_recovery(conf: Mapping[str, Any], *, master_url: str = "",
                    **kwargs: Any) -> tuple[PersistenceEngine, LeaderElectionAgent]:
    """The engine and election agent for `spark.deploy.recoveryMode`. NONE: black hole and
    immediate leadership (epoch 0); FILESYSTEM: records in spark.deploy.recoveryDirectory
    and immediate leadership with a persisted epoch counter; ZOOKEEPER: the ZooKeeper
    engine and election (`ember.deploy.master.zookeeper.create_recovery(conf, master_url=...,
    **kwargs)`). Raises RecoveryError for a set-up the master cannot run with."""
    mode = recovery_mode(conf)
    if mode == "FILESYSTEM":
        directory = os.path.abspath(recovery_directory(conf))
        log.info("Persisting recovery state to directory: %s", directory)
        engine = FileSystemPersistenceEngine(directory)
        return engine, MonarchyLeaderAgent(os.path.join(directory, EPOCH_FILE))
    if mode == "ZOOKEEPER":
        try:
            from ember.deploy.master import zookeeper
        except ImportError as e:
            raise RecoveryError("spark.deploy.recoveryMode=ZOOKEEPER is not available: "
                                f"{e}") from None
        log.info("Persisting recovery state to ZooKeeper")
        return zookeeper.create_recovery(conf, master_url=master_url, **kwargs)
    return BlackHolePersistenceEngine(), MonarchyLeaderAgent()


__all__ = ["recovery_mode", "recovery_directory", "check_recovery_conf", "create_recovery"]
