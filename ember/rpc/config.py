"""The RPC layer's view of the configuration: the few `spark.*` keys it reads, parsed once.

The RpcEnv takes a plain ``dict[str, str]`` (the daemons pass their resolved SparkConf
entries down); the keys, their defaults and their parsers are ember.config's registry.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping

from ember import config
from ember.rpc import security
from ember.util.units import parse_duration

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


def parse_time(key: str, value: Any, default_unit: str = "s") -> float:
    """Spark's time strings ("120s", "500ms", "2min", bare number = default unit) -> seconds."""
    try:
        return parse_duration(value, default_unit, signed=False)
    except ValueError:
        raise ValueError(f"Invalid time string for {key}: {value!r} "
                         "(expected a number with a unit us, ms, s, m, min, h or d, e.g. 120s)"
                         ) from None


def parse_bool(key: str, value: Any) -> bool:
    try:
        return config.parse_bool(value)
    except ValueError:
        raise ValueError(f"{key} should be boolean, but was {value}") from None


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
        auth = config.read(conf, AUTH)
        scope = None
        secret = None
        if auth:
            scope, secret = security.parse_credential(resolve_secret(conf))
            security.check_secret(secret)
        env_opt_out = os.environ.get(security.INSECURE_OPT_OUT_ENV) or None
        insecure = config.read(conf, security.INSECURE_OPT_OUT, None if env_opt_out is None else
                               config.REGISTRY[security.INSECURE_OPT_OUT].parse_value(env_opt_out))
        mode = (security.MODE_SECRET if auth else security.MODE_INSECURE if insecure
                else security.MODE_LOCAL_USER)
        crypto = config.read(conf, security.CRYPTO_ENABLED)
        if crypto and not auth:
            raise ValueError(f"{security.CRYPTO_ENABLED}=true needs spark.authenticate=true "
                             "(its keys are derived from the authentication handshake)")
        for key in (HANDSHAKE_TIMEOUT, STALLED_FRAME_TIMEOUT, ASK_TIMEOUT, CONNECT_TIMEOUT):
            if config.read(conf, key) < 0:
                key = config.source_key(conf, key)
                raise ValueError(f"{key} should be {config.SECONDS.expected}, but was "
                                 f"{conf.get(key)!r}")
        budget_mb = config.read(conf, INBOUND_BUDGET)
        max_mb = config.read(conf, MAX_SIZE)
        if not 0 < max_mb <= 2047:
            raise ValueError(f"{MAX_SIZE} should not be greater than 2047 MB (and must be "
                             f"positive), but was {conf.get(MAX_SIZE)}")
        return cls(
            authenticate=auth,
            secret=secret,
            scope=scope,
            mode=mode,
            crypto=crypto,
            handshake_timeout=config.read(conf, HANDSHAKE_TIMEOUT),
            max_pending_connections=max(1, config.read(conf, MAX_PENDING)),
            inbound_budget=max(1 << 20, int(budget_mb * 1024 * 1024)),
            stalled_frame_timeout=config.read(conf, STALLED_FRAME_TIMEOUT),
            ask_timeout=config.read(conf, ASK_TIMEOUT),
            max_message_size=int(max_mb * 1024 * 1024),
            connect_timeout=config.read(conf, CONNECT_TIMEOUT),
            port_max_retries=max(0, config.read(conf, PORT_MAX_RETRIES)),
            inprocess=config.read(conf, INPROCESS),
            executor_threads=max(1, config.read(conf, EXECUTOR_THREADS)),
        )
