"""Binding the driver's UI port (SparkContext start-up): spark.ui.port, the next free one on
a busy port, the HTTPS pair with spark.ssl.ui. Apart from ember.ui.spark_ui (the server,
which runs in the UI process) so that the driver binds without importing the server, the
REST API and the HTTP security code.
"""
from __future__ import annotations

import logging
import os
import socket
from typing import Any, Optional

from ember import config
from ember.web.ssl_options import secure_port, ssl_enabled

log = logging.getLogger("ember.ui.SparkUI")

SERVICE_NAME = "SparkUI"


def _advertised_host(conf: Any) -> str:
    """The driver's host as its peers know it (the standalone backend's choice), so the
    master's link to this UI works from other hosts; loopback for local mode."""
    master = str(conf.get("spark.master") or "")
    if not master.startswith("spark://"):
        return conf.get("spark.driver.host") or os.environ.get("SPARK_LOCAL_IP") \
            or "127.0.0.1"
    from ember.deploy.app_client import parse_master_urls
    from ember.scheduler.standalone_backend import driver_host
    return driver_host(conf, parse_master_urls(master))


def ui_bind_host(conf: Any) -> str:
    """Where the UI listens: where the driver's RPC listens (spark.driver.bindAddress, else
    the address it advertises), never every interface unless asked
    (spark.driver.bindAddress=0.0.0.0)."""
    return conf.get("spark.driver.bindAddress") or _advertised_host(conf)


def bind_ui(conf: Any) -> tuple[socket.socket, str, Optional[socket.socket]]:
    """Bind spark.ui.port (or the next free one): (the listening socket, the UI's URL, None).
    With spark.ssl.ui, as Spark: the HTTPS socket (spark.ssl.ui.port, else spark.ui.port +
    400), the https URL, and the HTTP socket on spark.ui.port, which only redirects.
    Raises OSError (Spark's 'Service SparkUI failed after N retries') when no port is free."""
    from ember.rpc.bind import bind_with_retries
    host = ui_bind_host(conf)
    port = config.read(conf, "spark.ui.port")
    retries = config.read(conf, "spark.port.maxRetries")
    redirect = None
    if ssl_enabled(conf, "ui"):
        sock = bind_with_retries(f"{SERVICE_NAME} (HTTPS)", host,
                                 secure_port(conf, "ui", port), retries)
        try:
            redirect = bind_with_retries(SERVICE_NAME, host, port, retries)
        except BaseException:
            sock.close()
            raise
        redirect.setblocking(True)
    else:
        sock = bind_with_retries(SERVICE_NAME, host, port, retries)
    sock.setblocking(True)
    public = os.environ.get("SPARK_PUBLIC_DNS") or _advertised_host(conf)
    scheme = "https" if redirect is not None else "http"
    url = f"{scheme}://{public}:{sock.getsockname()[1]}"
    log.info("Bound SparkUI to %s, and started at %s", host, url)
    return sock, url, redirect
