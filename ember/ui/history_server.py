"""`ember history-server`: Spark's HistoryServer over an event-log directory (port 18080).

Why replay into the live UI's store: an application page in the history server must show
what the driver's UI showed, so each event log is replayed through the same listener events
into the same `AppStatusStore`, and served by the same page renderers and `/api/v1` routes
under `/history/<appId>/`. A log without an ApplicationEnd (a driver that was killed or
crashed, or is still running) is listed as incomplete and renders whatever it recorded.

Logs are re-read only when their size or modification time changed (Spark's
FsHistoryProvider polls every spark.history.fs.update.interval; here the directory is
listed on each request, which is cheap, and stores are cached).

Security (`ember.web.security`): it binds `--host`, else spark.history.ui.host, else
SPARK_LOCAL_IP, else 127.0.0.1 (never every interface unless asked: `--host 0.0.0.0`);
with spark.authenticate=true every page and `/api/v1` answer needs a bearer token or the
login cookie, checked against spark.history.ui.acls.enable / spark.history.ui.admin.acls
(Spark's history ACL keys: an application's pages and API answers are checked against
that application's own ACLs, from its event log, plus the history server's admins);
spark.ssl.historyServer.* serves HTTPS. Only regular files of
the log directory are read: symbolic links are skipped and never followed.

Configuration as in Spark's HistoryServerArguments and sbin/start-history-server.sh:
`--conf k=v` > `-Dk=v` in SPARK_HISTORY_OPTS > `--properties-file` (else spark-defaults.conf),
through `ember.deploy.properties`, the same resolution the master and the worker use.
"""
from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
import threading
from typing import Any, Mapping, Optional, Sequence
from urllib.parse import unquote

from ember import config, fs
from ember.ui.event_log import (
    EventLogInfo, is_log_dir, is_regular_file, list_event_logs, replay, resolve_log_dir,
)
from ember.ui.status_store import AppStatusStore
from ember.util.logs import configure_logging

log = logging.getLogger("ember.deploy.history.HistoryServer")

DEFAULT_PORT = config.REGISTRY["spark.history.ui.port"].default
DEFAULT_LOG_DIR = config.REGISTRY["spark.history.fs.logDirectory"].default
SERVICE_NAME = "HistoryServerUI"


class HistoryProvider:
    """The StoreProvider of `ember.ui.api`: one replayed store per event log, cached by the
    log's (size, mtime)."""

    def __init__(self, log_dir: str, conf: Optional[Mapping[str, str]] = None) -> None:
        self.log_dir = log_dir
        self.conf = dict(conf or {})
        self._cache: dict[str, tuple[tuple[int, float], AppStatusStore]] = {}
        self._lock = threading.Lock()

    def logs(self) -> list[EventLogInfo]:
        try:
            return list_event_logs(self.log_dir)
        except OSError as e:
            log.warning("Cannot list %s: %s", self.log_dir, e)
            return []

    def _load(self, info: EventLogInfo) -> Optional[AppStatusStore]:
        """The log's store; None (logged once per version of the file) for a log that
        cannot be read: one bad log must not take the others' pages down."""
        key = (info.size, info.modified)
        with self._lock:
            cached = self._cache.get(info.path)
            if cached is not None and cached[0] == key:
                return cached[1]
        store: Optional[AppStatusStore] = AppStatusStore(self.conf)
        try:
            for event in replay(info.path):
                store.on_event(event)
        except (OSError, ValueError) as e:
            log.error("Cannot replay the event log %s: %s", info.path, e)
            store = None
        with self._lock:
            self._cache[info.path] = (key, store)
        return store

    def entries(self) -> list[tuple[EventLogInfo, AppStatusStore]]:
        return [(info, store) for info in self.logs()
                if (store := self._load(info)) is not None]

    def applications(self) -> list[AppStatusStore]:
        return [store for _, store in self.entries()]

    def _find(self, app_id: Optional[str], attempt_id: Optional[str]
              ) -> Optional[tuple[EventLogInfo, AppStatusStore]]:
        for info in self.logs():
            if info.app_id == app_id:
                store = self._load(info)
                if store is not None and (attempt_id is None
                                          or store.app.get("attempt_id") == attempt_id):
                    return info, store
        return None

    def event_log_files(self, app_id: str, attempt_id: Optional[str] = None
                        ) -> Optional[list[tuple[str, Optional[str]]]]:
        """(name in the zip, path; None for a directory entry) of the app's log, as Spark's
        `.../logs` zips it (a rolling log as `<dir>/` and its files); None: no such app."""
        found = self._find(app_id, attempt_id)
        if found is None:
            return None
        path = found[0].path
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if not is_log_dir(path):
            return [(base, path)]
        return [(base + "/", None)] + [(f"{base}/{n}", fs.join(path, n))
                                      for n in sorted(fs.listdir(path))
                                      if not n.startswith(".")
                                      and is_regular_file(fs.join(path, n))]

    def store(self, app_id: Optional[str], attempt_id: Optional[str] = None
              ) -> Optional[AppStatusStore]:
        found = self._find(app_id, attempt_id)
        return found[1] if found is not None else None


def render_index(provider: HistoryProvider) -> str:
    """Spark's HistoryPage: completed applications, then incomplete ones (still running, or
    ended without an ApplicationEnd: killed or crashed drivers)."""
    from urllib.parse import quote

    from ember.web.pages import Html, esc, format_date, format_duration, link, page, table
    complete, incomplete = [], []
    for info, store in provider.entries():
        app = store.app
        start, end = app.get("start"), app.get("end")
        done = end is not None and not info.in_progress
        row = [link(f"/history/{quote(info.app_id, safe='')}/jobs/", info.app_id),
               esc(app.get("name") or ""), esc(format_date(start) if start else ""),
               esc(format_date(end) if done else ""),
               esc(format_duration((end if done else int(info.modified * 1000)) - start)
                   if start else ""),
               esc(app.get("user") or ""), esc(format_date(int(info.modified * 1000)))]
        (complete if done else incomplete).append(row)
    headers = ["App ID", "App Name", "Started", "Completed", "Duration", "Spark User",
               "Last Updated"]
    body = Html(f"<p><strong>Event log directory:</strong> {esc(provider.log_dir)}</p>"
            f"<h4>Completed applications ({len(complete)})</h4>{table(headers, complete)}"
            f"<h4>Incomplete applications ({len(incomplete)})</h4>"
            "<p>Still running, or ended without an application end event (a killed or "
            f"crashed driver).</p>{table(headers, incomplete)}")
    return page("History Server", body)


_APP_PATH = re.compile(r"^/(?:history|api/v1/applications)/([^/]+)")


def app_acls(conf: Mapping[str, str], store: AppStatusStore) -> Any:
    """Spark's HistoryServer ACLs for one application: its own view ACLs and user (from
    its event log's Spark properties), enabled by spark.history.ui.acls.enable, with the
    history server's admins (spark.history.ui.admin.acls[.groups]) added to its own."""
    from ember.web.security import Acls, current_user
    props = dict(store.environment.get("Spark Properties", []))

    def joined(key: str) -> str:
        return ",".join(v for v in (props.get(key), conf.get(f"spark.history.ui.{key[6:]}"))
                        if v)
    app_conf = {**props,
                "spark.acls.enable": str(config.read(conf, "spark.history.ui.acls.enable")),
                "spark.admin.acls": joined("spark.admin.acls"),
                "spark.admin.acls.groups": joined("spark.admin.acls.groups")}
    return Acls.from_conf(app_conf, [store.app.get("user") or "", current_user()])


class HistoryServer:
    """The aiohttp server: `/` index, `/history/<appId>/...` pages, `/api/v1`."""

    def __init__(self, log_dir: str, conf: Optional[Mapping[str, str]] = None) -> None:
        from ember.web.server import WebServerThread
        if fs.hadoop_conf(conf or {}):    # a URL log dir: its endpoint and keys
            fs.configure(conf or {})
        resolve_log_dir(log_dir)          # a missing directory fails here, before binding
        self.provider = HistoryProvider(log_dir, conf)
        self.conf = dict(conf or {})
        self.port = self.http_port = 0
        self.scheme = "http"
        self._server = WebServerThread(SERVICE_NAME)

    def start(self, host: str, port: int, max_retries: int = 16) -> int:
        from aiohttp import web

        from ember.ui.api import api_routes
        from ember.ui.app_ui import make_routes
        from ember.web.server import bind_web, security_middleware
        from ember.web.security import HttpGuard
        from ember.web.pages import html_response, ui_middleware

        async def index(request: web.Request) -> web.Response:
            return html_response(render_index(self.provider))

        guard = HttpGuard(self.conf, host, acl_prefix="spark.history.ui")

        def acls_for(request: web.Request) -> Any:
            m = _APP_PATH.match(request.path)
            store = self.provider.store(unquote(m.group(1))) if m else None
            return app_acls(self.conf, store) if store is not None else None

        app = web.Application(middlewares=[ui_middleware(log, "HistoryServer"),
                                           security_middleware(guard, acls_for=acls_for)])
        app.add_routes([web.get("/", index)] + api_routes(self.provider)
                       + make_routes(self.provider, "/history/{app_id}"))
        sock, plain, tls = bind_web(SERVICE_NAME, host, port, max_retries, self.conf,
                                    "historyServer")
        guard.tls = tls is not None
        self.port = guard.port = sock.getsockname()[1]
        self.http_port = plain.getsockname()[1] if plain is not None else self.port
        self.scheme = "https" if tls is not None else "http"
        self._server.start(sock, app, ssl_context=tls, limits=guard.limits,
                           redirect=(plain, guard) if plain is not None else None)
        log.info("Bound HistoryServer to %s, and started at %s://%s:%d", host, self.scheme,
                 "127.0.0.1" if host in ("0.0.0.0", "") else host, self.port)
        return self.port

    def stop(self) -> None:
        self._server.stop()


def _parser(prog: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog,
                                description="Serve finished (and incomplete) applications' "
                                            "UIs from their event logs.")
    p.add_argument("--host", help="address to bind (default: spark.history.ui.host, else "
                                  "SPARK_LOCAL_IP, else 127.0.0.1)")
    p.add_argument("--port", type=int, help=f"web UI port (spark.history.ui.port, default "
                                            f"{DEFAULT_PORT})")
    p.add_argument("--dir", help="event log directory (spark.history.fs.logDirectory, "
                                 f"default {DEFAULT_LOG_DIR})")
    p.add_argument("--properties-file", metavar="FILE",
                   help="a Spark properties file (default: conf/spark-defaults.conf)")
    p.add_argument("--conf", action="append", default=[], metavar="K=V",
                   help="a Spark configuration property (repeatable)")
    return p


def resolve_history_conf(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None,
                         prog: str = "ember history-server"
                         ) -> tuple[str, int, str, dict[str, str]]:
    """The command line and environment -> (log_dir, port, host, conf), as Spark's
    HistoryServerArguments: `--conf` > `-D` words of SPARK_HISTORY_OPTS > the properties file
    (`--properties-file`, else the default spark-defaults.conf; see ember.deploy.properties),
    and `--dir` / `--port` over spark.history.fs.logDirectory / spark.history.ui.port.
    ValueError (one line) for a bad --conf, properties file, SPARK_HISTORY_OPTS or port;
    argparse's own errors and --help exit as argparse does."""
    from ember.deploy.properties import daemon_conf
    env = os.environ if environ is None else environ
    args = _parser(prog).parse_args(list(argv))
    cli_conf: dict[str, str] = {}
    for pair in args.conf:
        if "=" not in pair:
            raise ValueError(f"Invalid argument to --conf: {pair}")
        k, v = pair.split("=", 1)
        cli_conf[k] = v
    conf = daemon_conf(env, "SPARK_HISTORY_OPTS", args.properties_file, cli_conf)
    config.check_unsupported(conf)
    log_dir = args.dir or config.read(conf, "spark.history.fs.logDirectory")
    if args.port is not None:
        port = args.port
    else:
        try:
            port = config.read(conf, "spark.history.ui.port")
        except ValueError:
            raise ValueError(f"Invalid spark.history.ui.port: {conf['spark.history.ui.port']!r}"
                             " (expected an integer)") from None
    host = (args.host if args.host is not None
            else conf.get("spark.history.ui.host") or env.get("SPARK_LOCAL_IP", "127.0.0.1"))
    return log_dir, port, host, conf


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember history-server [--host H] [--port P] [--dir D] [--properties-file F]
    [--conf k=v ...]`: in the foreground until SIGTERM/SIGINT. spark.history.fs.logDirectory
    and spark.history.ui.port come from --conf, SPARK_HISTORY_OPTS or the properties file."""
    try:
        log_dir, port, host, conf = resolve_history_conf(
            list(sys.argv[1:] if argv is None else argv), os.environ)
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    configure_logging(logging.INFO)
    try:
        server = HistoryServer(log_dir, conf)
        bound = server.start(host, port)
    except (OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("History server started on port %d, reading %s", bound, log_dir)
    while not stop.wait(1.0):
        pass
    server.stop()
    return 0


def start_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember start-history-server [options]` (sbin/start-history-server.sh): the same as
    `ember history-server` as a background daemon with pid and log files (the daemon inherits
    SPARK_HISTORY_OPTS). The options, configuration and log directory are checked here
    first, so that a mistake fails at once with one `Error: ...` line."""
    from ember.deploy.daemon import start_daemon
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        log_dir, _, _, conf = resolve_history_conf(argv, os.environ,
                                                   prog="ember start-history-server")
        fs.configure(conf)
        resolve_log_dir(log_dir)
    except (OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    return start_daemon("history-server", 1, ["history-server", *argv],
                        ready_marker="History server started")


def stop_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember stop-history-server` (sbin/stop-history-server.sh)."""
    from ember.deploy.daemon import daemon_signature, stop_daemon
    return stop_daemon("history-server", 1, signature=daemon_signature(argv=["history-server"]))


if __name__ == "__main__":
    sys.exit(main())
