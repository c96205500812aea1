"""Spark's SSLOptions lookups (`spark.ssl.<namespace>.*` inheriting `spark.ssl.*`) and the
HTTPS port rule. Apart from ember.web.security (which re-exports them) because every
SparkContext binds its UI port at start-up and needs only these, not the HTTP guard, tokens
and login pages.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional


def ssl_setting(conf: Mapping[str, Any], namespace: str, name: str) -> Optional[str]:
    """Spark's SSLOptions inheritance: `spark.ssl.<ns>.<name>`, else `spark.ssl.<name>`."""
    for key in (f"spark.ssl.{namespace}.{name}", f"spark.ssl.{name}"):
        value = conf.get(key)
        if value is not None and str(value).strip() != "":
            return str(value).strip()
    return None


def ssl_enabled(conf: Mapping[str, Any], namespace: str) -> bool:
    value = ssl_setting(conf, namespace, "enabled")
    if value is None:       # Spark's default; the RPC security modules load only when set
        return False
    from ember.rpc.config import parse_bool
    return parse_bool(f"spark.ssl.{namespace}.enabled", value)


def secure_port(conf: Mapping[str, Any], namespace: str, http_port: int) -> int:
    """Spark's HTTPS port (JettyUtils.startJettyServer): `spark.ssl.<ns>.port`, else the
    HTTP port + 400 (Utils.userPort: wrapping above 65535 to 1024 and up), else 0 when the
    HTTP port is 0. The HTTP port then only redirects to it."""
    raw = ssl_setting(conf, namespace, "port")
    if raw is not None:
        try:
            return int(raw)
        except ValueError:
            raise ValueError(f"spark.ssl.{namespace}.port must be an integer, but was "
                             f"{raw!r}") from None
    return (http_port + 400 - 1024) % (65536 - 1024) + 1024 if http_port > 0 else 0
