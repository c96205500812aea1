"""Binding a listening socket the way Spark's Utils.startServiceOnPort does.

The RPC server, the master's and the worker's web UIs all take a configured port and, when
it is busy, the next ones (wrapping into 1024-65535) up to spark.port.maxRetries more;
port 0 means any free port and is never retried.
"""
from __future__ import annotations

import errno
import logging
import socket

from ember.rpc.errors import RpcBindError

log = logging.getLogger("ember.rpc")


def candidate_ports(start: int, max_retries: int) -> list[int]:
    """The ports startServiceOnPort tries, in order."""
    if start == 0:
        return [0]
    return [start if i == 0 else ((start + i - 1024) % (65536 - 1024)) + 1024
            for i in range(max_retries + 1)]


def bind_with_retries(service: str, host: str, port: int, max_retries: int,
                      backlog: int = 128) -> socket.socket:
    """A non-blocking listening socket for `service`; logs like Spark. Raises RpcBindError
    (an OSError) with Spark's advice when every candidate port is taken."""
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise RpcBindError(f"Cannot resolve the host {host!r} of service '{service}': {e}") \
            from None
    infos.sort(key=lambda i: i[0] != socket.AF_INET)  # one socket, IPv4 preferred
    family, _, _, _, sockaddr = infos[0]
    ports = candidate_ports(port, max_retries)
    last: OSError | None = None
    for i, try_port in enumerate(ports):
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((sockaddr[0], try_port) + tuple(sockaddr[2:]))
            sock.listen(backlog)
            sock.setblocking(False)
        except OSError as e:
            sock.close()
            last = e
            if e.errno != errno.EADDRINUSE or i == len(ports) - 1:
                break
            log.warning("Service '%s' could not bind on port %d. Attempting port %d.",
                        service, try_port, ports[i + 1])
            continue
        log.info("Successfully started service '%s' on port %d.", service,
                 sock.getsockname()[1])
        return sock
    assert last is not None
    if last.errno == errno.EADDRINUSE and port != 0:
        raise RpcBindError(
            f"{last.strerror}: Service '{service}' failed after {max_retries} retries "
            f"(starting from {port})! Consider explicitly setting the appropriate port for "
            f"the service '{service}' (for example spark.ui.port for SparkUI) to an "
            "available port or increasing spark.port.maxRetries.")
    raise RpcBindError(f"{last.strerror or last}: Service '{service}' cannot bind on "
                       f"{host}:{port}")
