"""RpcAddress: where an RpcEnv listens, written ``spark://host:port`` like Spark's.

Its own module so the transports and the endpoint API share it without importing the env
(which imports them); ``ember.rpc`` re-exports it.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit


@dataclass(frozen=True)
class RpcAddress:
    """Host and port of an RpcEnv. Port 0 means a client-mode env that does not listen."""

    host: str
    port: int

    @classmethod
    def from_spark_url(cls, url: str) -> "RpcAddress":
        """Parse ``spark://host:port`` (Spark's RpcAddress.fromSparkURL / extractHostPortFromSparkUrl).

        Anything else - another scheme, no host, no port, a path, query, fragment or user
        info - raises ``ValueError("Invalid master URL: <url>")``, Spark's message.
        """
        err = ValueError(f"Invalid master URL: {url}")
        if not isinstance(url, str):
            raise err
        try:
            u = urlsplit(url)
        except ValueError:
            raise err from None
        if u.scheme != "spark" or u.path or u.query or u.fragment or "?" in url or "#" in url:
            raise err
        netloc = u.netloc
        if not netloc or "@" in netloc:
            raise err
        if netloc.startswith("["):
            end = netloc.find("]")
            host, rest = netloc[1:end], netloc[end + 1:]
            if end < 0 or not rest.startswith(":"):
                raise err
            port_s = rest[1:]
        else:
            host, sep, port_s = netloc.rpartition(":")
            if not sep or ":" in host:
                raise err
        if not host or "," in host or not port_s.isdigit() or not 0 <= int(port_s) <= 65535:
            raise err
        return cls(host, int(port_s))

    @cached_property
    def host_port(self) -> str:
        """``host:port`` (IPv6 hosts in brackets). Cached: a cluster driver's offer rounds
        name each executor's address once per slot they offer."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def to_spark_url(self) -> str:
        return f"spark://{self.host_port}"

    def __str__(self) -> str:  # Spark's RpcAddress.toString is hostPort
        return self.host_port
