"""The external shuffle service embedded in the worker (spark.shuffle.service.enabled).

Why: an executor's map output normally dies with it, so removing an idle executor (dynamic
allocation) or losing one to a crash means recomputing its map tasks. With the service on,
each executor registers its local directory here (RegisterExecutorShuffleInfo) and leaves
its files on disk when it exits; map statuses name this service's address, so reducers
fetch from it whether the writer is alive or not. The service forgets (and deletes) an
application's directories when the worker cleans the application up (ApplicationFinished).

It listens on its own port (spark.shuffle.service.port, Spark's 7337) with the worker's RPC
configuration, so it authenticates exactly as the worker does, and admits the credentials
the worker hands its executors. Trust comes from the connection: an application's
connection may register directories only for its own application (the first registration
of an application binds it to that credential's scope) and is served only files under
directories its own application registered, so one application cannot read another's
shuffle output; the cluster's daemons are served everything registered.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Any, Mapping, Optional

from ember import config
from ember.deploy.messages import FetchShuffleBlocks, RegisterExecutorShuffleInfo
from ember.rpc import RpcCallContext, RpcEndpoint, RpcEnv, UnsupportedMessageError
from ember.shuffle.reader import serve_fetch

log = logging.getLogger("ember.ExternalShuffleService")

ENDPOINT_NAME = "ExternalShuffleService"
SYSTEM_NAME = "sparkShuffleService"
MULTIPLE_WORKERS_ERROR = (
    "Starting multiple workers on one host is failed because we may launch no more than one "
    "external shuffle service on each host, please set spark.shuffle.service.enabled to "
    "false or set SPARK_WORKER_INSTANCES to 1 to resolve the conflict.")


class ShuffleServiceEndpoint(RpcEndpoint):
    """Registered executor directories per application; serves their map output."""
    app_messages = (RegisterExecutorShuffleInfo, FetchShuffleBlocks)

    def __init__(self) -> None:
        self.dirs: dict[str, dict[str, list[str]]] = {}   # app id -> executor id -> dirs
        self.scopes: dict[str, str | None] = {}   # app id -> the scope that registered it

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        scope = context.sender.scope
        if isinstance(msg, RegisterExecutorShuffleInfo):
            dirs = [os.path.realpath(d) for d in msg.localDirs]
            owner = self.scopes.get(msg.appId, scope)
            if scope is not None and owner != scope:
                context.send_failure(PermissionError(
                    f"Executor {msg.execId} may not register shuffle files of {msg.appId}: "
                    f"its connection authenticated as application {scope!r}"))
                return
            if not msg.appId or not dirs or not all(os.path.isdir(d) for d in dirs):
                context.send_failure(ValueError(
                    f"Invalid shuffle registration of executor {msg.execId}: {msg.localDirs}"))
                return
            self.dirs.setdefault(msg.appId, {})[msg.execId] = dirs
            self.scopes.setdefault(msg.appId, scope)
            log.info("Registered executor %s of %s with local dirs %s", msg.execId, msg.appId,
                     ", ".join(dirs))
            context.reply(True)
        elif isinstance(msg, FetchShuffleBlocks):
            # the ranges a MapStatus names, in map output files of scope's app only
            serve_fetch(self.rpc_env, context, msg, lambda path: self._registered(path, scope))
        else:
            context.send_failure(UnsupportedMessageError(msg, context.sender_address))

    def _registered(self, path: str, scope: str | None) -> bool:
        """Under a directory registered by `scope`'s application (any, for the cluster)."""
        return any(path.startswith(d + os.sep) for app, execs in self.dirs.items()
                   if scope is None or self.scopes.get(app) == scope
                   for dirs in execs.values() for d in dirs)

    def application_removed(self, app_id: str) -> None:
        """Forget the application and delete what its executors registered (off the loop)."""
        execs = self.dirs.pop(app_id, None)
        self.scopes.pop(app_id, None)
        if not execs:
            return
        dirs = [d for ds in execs.values() for d in ds]
        log.info("Application %s removed, cleaning up %d local dirs", app_id, len(dirs))
        self.rpc_env.run_in_executor(
            lambda: [shutil.rmtree(d, ignore_errors=True) for d in dirs])


class ExternalShuffleService:
    """The service's own RpcEnv, started and stopped by the worker daemon."""

    def __init__(self, host: str, conf: Mapping[str, Any]) -> None:
        self.host = host
        self.conf = conf
        self.port = config.read(conf, "spark.shuffle.service.port")
        self.env: Optional[RpcEnv] = None
        self.endpoint = ShuffleServiceEndpoint()

    def start(self) -> None:
        """Bind spark.shuffle.service.port; OSError/ValueError with the reason if it cannot."""
        instances = os.environ.get("SPARK_WORKER_INSTANCES", "1").strip() or "1"
        if instances.isdigit() and int(instances) > 1:
            raise ValueError(MULTIPLE_WORKERS_ERROR)
        try:
            # exactly this port (executors and reducers are told it), no retries on others
            self.env = RpcEnv.create(SYSTEM_NAME, self.host, self.port,
                                     {**self.conf, "spark.port.maxRetries": "0"})
        except OSError as e:
            raise OSError(f"Failed to start the external shuffle service on port "
                          f"{self.port}: {e.strerror or e} (is another worker on this host "
                          f"running one? {MULTIPLE_WORKERS_ERROR})") from None
        self.env.admit_app_scopes(any_scope=True)   # the credentials of the worker's executors
        self.env.setup_endpoint(ENDPOINT_NAME, self.endpoint)
        log.info("Starting shuffle service on port %d (auth enabled = %s)",
                 self.env.address.port, str(config.read(self.conf, "spark.authenticate")).lower())

    @property
    def bound_port(self) -> Optional[int]:
        return self.env.address.port if self.env is not None else None

    def application_removed(self, app_id: str) -> None:
        """Thread-safe: called from the worker's loop."""
        if self.env is not None:
            self.env.call_soon(self.endpoint.application_removed, app_id)

    def stop(self) -> None:
        if self.env is not None:
            self.env.shutdown()
            self.env = None
