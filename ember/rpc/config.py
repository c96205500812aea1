"""The RPC layer's view of the configuration: the few `spark.*` keys it reads, parsed once.

The RpcEnv takes a plain ``dict[str, str]`` (not ember.config's registry) because it sits
below everything else; the daemons pass their resolved SparkConf entries down.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any, Mapping

from ember.rpc import security

AUTH = "spark.authenticate"
AUTH_SECRET = "spark.authenticate.secret"
AUTH_SECRET_FILE = "spark.authenticate.secret.file"
ENV_AUTH_SECRET = "_SPARK_AUTH_SECRET"     # how Spark hands the secret to child processes
ASK_TIMEOUT = "spark.rpc.askTimeout"
MAX_SIZE = "spark.rpc.message.maxSize"
CONNECT_TIMEOUT = "spark.rpc.connect.timeout"
PORT_MAX_RETRIES = "spark.port.maxRetries"
INPROCESS = "spark.ember.rpc.inprocess"
EXECUTOR_THREADS = "spark.ember.rpc.executorThreads"
HANDSHAKE_TIMEOUT = "spark.ember.rpc.handshakeTimeout"
MAX_PENDING = "spark.ember.rpc.maxPendingConnections"
INBOUND_BUDGET = "spark.ember.rpc.inboundBufferBudget"
STALLED_FRAME_TIMEOUT = "spark.ember.rpc.stalledFrameTimeout"

_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
               "d": 86400.0}
_TIME_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([a-z]*)\s*$")


def parse_time(key: str, value: Any, default_unit: str = "s") -> float:
    """Spark's time strings ("120s", "500ms", "2min", bare number = default unit) -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) * _TIME_UNITS[default_unit]
    m = _TIME_RE.match(str(value).lower())
    unit = (m.group(2) or default_unit) if m else None
    if m is None or unit not in _TIME_UNITS:
        raise ValueError(f"Invalid time string for {key}: {value!r} "
                         "(expected a number with a unit us, ms, s, m, min, h or d, e.g. 120s)")
    return float(m.group(1)) * _TIME_UNITS[unit]


def parse_bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    v = str(value).strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise ValueError(f"{key} should be boolean, but was {value}")


def _parse_number(key: str, value: Any, kind: type) -> Any:
    try:
        return kind(str(value).strip())
    except ValueError:
        raise ValueError(f"{key} should be {kind.__name__}, but was {value}") from None


def resolve_secret(conf: Mapping[str, Any]) -> bytes:
    """The shared secret: spark.authenticate.secret, else the file named by
    spark.authenticate.secret.file, else the _SPARK_AUTH_SECRET environment variable."""
    secret = conf.get(AUTH_SECRET)
    if secret:
        return str(secret).encode("utf-8")
    path = conf.get(AUTH_SECRET_FILE)
    if path:
        try:
            with open(str(path), "rb") as f:
                data = f.read()
        except OSError as e:
            raise ValueError(f"Cannot read the secret file {path} ({AUTH_SECRET_FILE}): "
                             f"{e.strerror or e}") from None
        data = data.rstrip(b"\r\n")  # `echo secret > file` must match conf "secret"
        if not data:
            raise ValueError(f"The secret file {path} ({AUTH_SECRET_FILE}) is empty")
        return data
    env = os.environ.get(ENV_AUTH_SECRET)
    if env:
        return env.encode("utf-8")
    default = security.default_secret_path()
    if os.path.isfile(default):
        return resolve_secret({AUTH_SECRET_FILE: default})
    raise ValueError("A secret key must be specified via the spark.authenticate.secret config. "
                     f"(none at the default path {default}: run `ember master "
                     "--generate-secret`, or set spark.authenticate.secret.file or "
                     f"{ENV_AUTH_SECRET})")


@dataclass(frozen=True)
class RpcConf:
    authenticate: bool = False
    secret: bytes | None = None          # key bytes (cluster secret or application key)
    scope: str | None = None             # application scope of an application credential
    mode: str = security.MODE_LOCAL_USER
    crypto: bool = False
    handshake_timeout: float = 5.0
    max_pending_connections: int = 64
    inbound_budget: int = 1 << 30
    stalled_frame_timeout: float = 30.0
    ask_timeout: float = 120.0
    max_message_size: int = 128 * 1024 * 1024
    connect_timeout: float = 10.0
    port_max_retries: int = 16
    inprocess: bool = False
    executor_threads: int = 8

    def __repr__(self) -> str:  # never print the secret
        return (f"RpcConf(mode={self.mode}, scope={self.scope}, crypto={self.crypto}, "
                f"ask_timeout={self.ask_timeout}, "
                f"max_message_size={self.max_message_size}, "
                f"connect_timeout={self.connect_timeout}, inprocess={self.inprocess})")

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None) -> "RpcConf":
        conf = conf or {}
        auth = parse_bool(AUTH, conf.get(AUTH, "false"))
        scope = None
        secret = None
        if auth:
            scope, secret = security.parse_credential(resolve_secret(conf))
            security.check_secret(secret)
        insecure = parse_bool(security.INSECURE_OPT_OUT, conf.get(
            security.INSECURE_OPT_OUT, os.environ.get(security.INSECURE_OPT_OUT_ENV, "false")))
        mode = (security.MODE_SECRET if auth else security.MODE_INSECURE if insecure
                else security.MODE_LOCAL_USER)
        crypto = parse_bool(security.CRYPTO_ENABLED, conf.get(security.CRYPTO_ENABLED, "false"))
        if crypto and not auth:
            raise ValueError(f"{security.CRYPTO_ENABLED}=true needs spark.authenticate=true "
                             "(its keys are derived from the authentication handshake)")
        budget_mb = _parse_number(INBOUND_BUDGET, conf.get(INBOUND_BUDGET, "1024"), float)
        max_mb = _parse_number(MAX_SIZE, conf.get(MAX_SIZE, "128"), float)
        if not 0 < max_mb <= 2047:
            raise ValueError(f"{MAX_SIZE} should not be greater than 2047 MB (and must be "
                             f"positive), but was {conf.get(MAX_SIZE)}")
        retries = _parse_number(PORT_MAX_RETRIES, conf.get(PORT_MAX_RETRIES, "16"), int)
        threads = _parse_number(EXECUTOR_THREADS, conf.get(EXECUTOR_THREADS, "8"), int)
        return cls(
            authenticate=auth,
            secret=secret,
            scope=scope,
            mode=mode,
            crypto=crypto,
            handshake_timeout=parse_time(HANDSHAKE_TIMEOUT, conf.get(HANDSHAKE_TIMEOUT, "5s")),
            max_pending_connections=max(1, _parse_number(
                MAX_PENDING, conf.get(MAX_PENDING, "64"), int)),
            inbound_budget=max(1 << 20, int(budget_mb * 1024 * 1024)),
            stalled_frame_timeout=parse_time(STALLED_FRAME_TIMEOUT,
                                             conf.get(STALLED_FRAME_TIMEOUT, "30s")),
            ask_timeout=parse_time(ASK_TIMEOUT, conf.get(ASK_TIMEOUT, "120s")),
            max_message_size=int(max_mb * 1024 * 1024),
            connect_timeout=parse_time(CONNECT_TIMEOUT, conf.get(CONNECT_TIMEOUT, "10s")),
            port_max_retries=max(0, retries),
            inprocess=parse_bool(INPROCESS, conf.get(INPROCESS, "false")),
            executor_threads=max(1, threads),
        )
