"""The vocabulary of the deploy daemons' sans-I/O cores: the events their shells feed in and
the instructions their state machines return.

Why one module: the master (`deploy/master/state.py`) and the worker
(`deploy/worker/state.py`) follow the same pattern - `state.handle(event, now) ->
instructions`, carried out in order by a thin RPC shell - and share the words for what both
do (send, reply, log, arm and cancel a timer, exit). The two packages may not import each
other, so what they share lives here, below both. Everything is plain frozen data: a test
compares instructions with ``==`` and needs no sockets, processes or clocks.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Optional, Union

INFO, WARN, ERROR = "INFO", "WARN", "ERROR"
LOG_LEVELS = {"DEBUG": logging.DEBUG, INFO: logging.INFO, WARN: logging.WARNING,
              ERROR: logging.ERROR}
"""`Log.level` (log4j's names) -> the `logging` level a shell logs it at."""


# ---------------------------------------------------------------------------------------------
# Events both shells feed
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ask:
    """A message that arrived as an ask; `request` routes the Reply back (opaque to the state)."""
    request: Any
    message: Any


@dataclass(frozen=True)
class Disconnected:
    """The connection to the remote RpcEnv at `address` was lost (Spark: onDisconnected)."""
    address: Any


# ---------------------------------------------------------------------------------------------
# Instructions both state machines return
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Send:
    """`target.send(message)`; `target` is an endpoint ref the state received earlier."""
    target: Any
    message: Any


@dataclass(frozen=True)
class Reply:
    """Answer the ask identified by `request` with `message`."""
    request: Any
    message: Any


@dataclass(frozen=True)
class ReplyFailure:
    """Fail the ask identified by `request`: the asker sees `error_type` (an exception class
    name, as it crosses the wire) with the message `error`."""
    request: Any
    error: str
    error_type: str = "SparkException"


@dataclass(frozen=True)
class Log:
    """One log line; `level` is a log4j name ("INFO", "WARN", "ERROR")."""
    level: str
    text: str


@dataclass(frozen=True)
class ScheduleTimer:
    """Feed `message` back after `delay_ms`, then every `period_ms` if set. A `key` names the
    timer so that `CancelTimer(key)` can stop it (arming a key again replaces the old one)."""
    delay_ms: int
    message: Any
    period_ms: Optional[int] = None
    key: Optional[str] = None


@dataclass(frozen=True)
class CancelTimer:
    """Stop the timer armed with `key` (nothing if there is none)."""
    key: str


@dataclass(frozen=True)
class Exit:
    """The daemon should stop and exit with `code` (Spark's System.exit)."""
    code: int


# -- the master's -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Persist:
    """Write `obj` under `key` to the recovery engine."""
    key: str
    obj: Any
    # Set on the write a reply is about to acknowledge (a registration or submission): if the
    # engine cannot write it, the shell carries out nothing after it in this batch (the reply
    # and what schedule() decided for the new entity) and feeds this event back instead.
    failure: Optional[Any] = None


@dataclass(frozen=True)
class Unpersist:
    key: str


@dataclass(frozen=True)
class DeleteUpload:
    """An `ember-upload://` resource no active driver refers to any more."""
    url: str


# -- the worker's -----------------------------------------------------------------------------

@dataclass(frozen=True)
class SendAsk:
    """`target.ask(message, timeout)`; the outcome comes back as `AskAnswered(tag, ...)`.
    `timeout` None: spark.rpc.askTimeout."""
    target: Any
    message: Any
    tag: Any
    timeout: Optional[float] = None


@dataclass(frozen=True)
class AskAnswered:
    """Event: the ask sent with `tag` was answered (`answer`) or failed (`error`)."""
    tag: Any
    answer: Any = None
    error: Optional[BaseException] = None


@dataclass(frozen=True)
class ConnectToMaster:
    """Look up the "Master" endpoint at `address` (Spark's setupEndpointRef, without a
    blocking thread); the outcome comes back as `MasterRefResolved(address, generation, ...)`."""
    address: Any
    generation: int


@dataclass(frozen=True)
class MasterRefResolved:
    """Event: the lookup of `ConnectToMaster(address, generation)` gave `ref` or `error`."""
    address: Any
    generation: int
    ref: Any = None
    error: Optional[BaseException] = None


@dataclass(frozen=True)
class LaunchExecutorRunner:
    """Create the executor's dirs and start an ExecutorRunner for it. `scope`: the
    application the executor's credential is derived for. A launch that fails comes back as
    `RunnerLaunchFailed`."""
    app_id: str
    exec_id: int
    app_desc: Any
    cores: int
    memory: int
    rp_id: int
    resources: Any
    scope: str


@dataclass(frozen=True)
class KillExecutorRunner:
    """Ask the runner of `full_id` to kill its process tree (its final state comes back as
    an `ExecutorRunnerReport`)."""
    full_id: str
    state: Any
    message: Optional[str] = None


@dataclass(frozen=True)
class LaunchDriverRunner:
    """Start a DriverRunner; a launch that fails comes back as `RunnerLaunchFailed`."""
    driver_id: str
    desc: Any
    attempt: int
    resources: Any


@dataclass(frozen=True)
class KillDriverRunner:
    """Ask the driver's runner to kill it; `fence`: SIGKILL at once (the master lease ran
    out, a master may relaunch it elsewhere)."""
    driver_id: str
    fence: bool = False


@dataclass(frozen=True)
class RunnerLaunchFailed:
    """Event: `LaunchExecutorRunner` (`full_id` "app/exec") or `LaunchDriverRunner`
    (`driver_id`) raised `error` before the runner started."""
    error: str
    full_id: Optional[str] = None
    driver_id: Optional[str] = None


@dataclass(frozen=True)
class CleanupApplication:
    """An application is gone from this worker: tell the external shuffle service and
    delete the application's local scratch dirs (spark.local.dir/executor-*)."""
    app_id: str


@dataclass(frozen=True)
class CleanupWorkDir:
    """spark.worker.cleanup: delete the sub-directories of the work dir that are not named
    in `active` and hold nothing modified within `ttl_s` seconds (a file-system scan, so the
    shell runs it off the loop)."""
    active: frozenset
    ttl_s: float


@dataclass(frozen=True)
class ServeDriverLog:
    """Answer a RequestDriverLog ask from the driver's log file; `known`: the driver runs
    or ran here (else it is served only if its dir exists)."""
    request: Any
    message: Any
    known: bool


Instruction = Union[Send, Reply, ReplyFailure, Log, ScheduleTimer, CancelTimer, Exit, Persist,
                    Unpersist, DeleteUpload, SendAsk, ConnectToMaster, LaunchExecutorRunner,
                    KillExecutorRunner, LaunchDriverRunner, KillDriverRunner, CleanupApplication,
                    CleanupWorkDir, ServeDriverLog]

__all__ = ["INFO", "WARN", "ERROR", "LOG_LEVELS", "Ask", "Disconnected", "Send", "Reply",
           "ReplyFailure", "Log", "ScheduleTimer", "CancelTimer", "Exit", "Persist", "Unpersist",
           "DeleteUpload", "SendAsk", "AskAnswered", "ConnectToMaster", "MasterRefResolved",
           "LaunchExecutorRunner", "KillExecutorRunner", "LaunchDriverRunner",
           "KillDriverRunner", "RunnerLaunchFailed", "CleanupApplication", "CleanupWorkDir",
           "ServeDriverLog", "Instruction"]
