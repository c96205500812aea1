"""`ember master`, `ember start-master`, `ember stop-master`: Spark's Master command line.

Why a hand-written parser instead of argparse: Spark's `MasterArguments` has semantics
argparse does not (`-h` is `--host`, not help; an unknown argument prints the usage and exits
1, not 2), and scripts written for `spark-class org.apache.spark.deploy.master.Master` /
`sbin/start-master.sh` should work unchanged. Precedence, as in Spark: defaults <
SPARK_MASTER_HOST / SPARK_MASTER_PORT / SPARK_MASTER_WEBUI_PORT < command line, and then
`spark.master.ui.port` (properties file, SPARK_MASTER_OPTS or `--conf`) overrides the web UI
port. Beyond Spark: repeatable `--conf k=v` (wins over the properties file and
SPARK_MASTER_OPTS' `-Dk=v`; see `ember.deploy.properties`, shared with the worker and the
history server).

Every user error is one `Error: ...` line on stderr and exit code 1, never a traceback.

Entry points: `main(argv)` (foreground daemon, until SIGTERM/SIGINT/SIGHUP, then a clean
stop and exit 0), `start_main(argv)` / `stop_main(argv)` (background daemon with pid and log
files, via `ember.deploy.daemon`).
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
from dataclasses import dataclass, field
from typing import Mapping, Optional, Sequence

from ember.deploy.master.master import (
    DEFAULT_PORT, DEFAULT_WEBUI_PORT, check_port, validate_master_conf,
)
from ember.deploy.properties import PropertiesFileError, daemon_conf

log = logging.getLogger("ember.deploy.master.Master")

DAEMON_COMMAND = "ember.deploy.master.Master"
DAEMON_ARGV0 = "master"          # the daemon runs `python -m ember.cli master <options>`
READY_MARKER = "I have been elected leader!"

USAGE = """Usage: Master [options]

Options:
  -h HOST, --host HOST   Hostname to listen on
  -p PORT, --port PORT   Port to listen on (default: 7077)
  --webui-port PORT      Port for web UI (default: 8080)
  --properties-file FILE Path to a custom Spark properties file.
                         Default is conf/spark-defaults.conf.
  --conf KEY=VALUE       Set a Spark configuration property (repeatable; Ember only).
  --generate-secret      Create the cluster secret (0600, $SPARK_CONF_DIR or ~/.ember)
                         unless it exists, say how others find it, authenticate with it.
  --help                 Print this message and exit."""

START_USAGE = "Usage: ember start-master [options]\n\n" + USAGE.split("\n", 2)[2]


class MasterCliError(Exception):
    """A one-line user error: printed as `Error: <message>`, exit code 1."""


class _UsageExit(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


@dataclass
class MasterArguments:
    """The parsed command line (Spark's MasterArguments) and the resolved configuration."""
    host: str
    port: int = DEFAULT_PORT
    webui_port: int = DEFAULT_WEBUI_PORT
    properties_file: Optional[str] = None
    conf: dict[str, str] = field(default_factory=dict)
    generate_secret: bool = False


def default_host() -> str:
    """SPARK_LOCAL_HOSTNAME, else this machine's host name (start-master.sh's default)."""
    return os.environ.get("SPARK_LOCAL_HOSTNAME") or socket.gethostname()


def _int_arg(what: str, value: str) -> int:
    try:
        return check_port(what, value)
    except ValueError as e:
        raise MasterCliError(str(e)) from None


def _check_host(value: str) -> str:
    if not value or (":" in value and not (value.startswith("[") and value.endswith("]"))):
        raise MasterCliError(f"Expected hostname or IP but got {value!r}")
    return value


def parse_args(argv: Sequence[str], env: Optional[Mapping[str, str]] = None) -> MasterArguments:
    """Spark's MasterArguments: env defaults, then the command line, then the properties
    file and `spark.master.ui.port`. Raises MasterCliError (one line) or _UsageExit."""
    env = os.environ if env is None else env
    args = MasterArguments(host=env.get("SPARK_MASTER_HOST") or default_host())
    if env.get("SPARK_MASTER_PORT"):
        args.port = _int_arg("SPARK_MASTER_PORT", env["SPARK_MASTER_PORT"])
    if env.get("SPARK_MASTER_WEBUI_PORT"):
        args.webui_port = _int_arg("SPARK_MASTER_WEBUI_PORT", env["SPARK_MASTER_WEBUI_PORT"])
    cli_conf: dict[str, str] = {}
    rest = list(argv)
    while rest:
        opt = rest.pop(0)
        value: Optional[str] = None
        if opt.startswith("--") and "=" in opt:
            opt, value = opt.split("=", 1)
        if opt == "--help":
            raise _UsageExit(0)
        if opt == "--generate-secret" and value is None:
            args.generate_secret = True
            continue
        if opt not in ("-h", "--host", "-p", "--port", "--webui-port", "--properties-file",
                       "--conf"):
            print(f"Unrecognized option: {opt}" if opt.startswith("-")
                  else f"Unexpected argument: {opt}", file=sys.stderr)
            raise _UsageExit(1)
        if value is None:
            if not rest:
                print(f"Missing value for {opt}", file=sys.stderr)
                raise _UsageExit(1)
            value = rest.pop(0)
        if opt in ("-h", "--host"):
            args.host = _check_host(value)
        elif opt in ("-p", "--port"):
            args.port = _int_arg(opt, value)
        elif opt == "--webui-port":
            args.webui_port = _int_arg("--webui-port", value)
        elif opt == "--properties-file":
            args.properties_file = value
        else:
            if "=" not in value:
                raise MasterCliError(f"Invalid argument to --conf: {value} (expected KEY=VALUE)")
            k, v = value.split("=", 1)
            k = k.strip()
            if not k.startswith("spark."):
                print(f"Warning: Ignoring non-Spark config property: {k}", file=sys.stderr)
                continue
            cli_conf[k] = v
    try:
        conf = daemon_conf(env, "SPARK_MASTER_OPTS", args.properties_file, cli_conf)
    except PropertiesFileError as e:
        raise MasterCliError(f"Cannot read the properties file {e.path}: {e.reason}") from None
    except ValueError as e:
        raise MasterCliError(str(e)) from None
    if args.generate_secret:
        from ember.rpc.security import generate_secret_file, secret_instructions
        try:
            path, _ = generate_secret_file()
        except OSError as e:
            raise MasterCliError(f"Cannot write the secret file: {e.strerror or e}") from None
        print(secret_instructions(path), file=sys.stderr)
        conf.setdefault("spark.authenticate", "true")
        conf.setdefault("spark.authenticate.secret.file", path)
    args.conf = conf
    if "spark.master.ui.port" in conf:
        args.webui_port = _int_arg("spark.master.ui.port", conf["spark.master.ui.port"])
    try:
        validate_master_conf(conf)
    except ValueError as e:
        raise MasterCliError(str(e)) from None
    return args


def _parse_or_exit(argv: Sequence[str], usage: str) -> "MasterArguments | int":
    try:
        return parse_args(argv)
    except _UsageExit as u:
        print(usage, file=sys.stdout if u.code == 0 else sys.stderr)
        return u.code
    except MasterCliError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember master [options]`: run a master in the foreground until SIGTERM / SIGINT /
    SIGHUP, then stop it cleanly and return 0."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parsed = _parse_or_exit(argv, USAGE)
    if isinstance(parsed, int):
        return parsed
    args = parsed

    from ember.deploy.daemon import log_daemon_start
    from ember.util.logs import configure_logging
    configure_logging()
    log_daemon_start(log)

    stop = threading.Event()
    installed: dict[int, object] = {}
    if threading.current_thread() is threading.main_thread():
        def on_signal(signum: int, frame: object) -> None:
            name = signal.Signals(signum).name.replace("SIG", "")
            log.error("RECEIVED SIGNAL %s", name)
            stop.set()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            installed[sig] = signal.signal(sig, on_signal)
        log.info("Registering signal handler for TERM, INT, HUP")

    from ember.deploy.master.master import start_master
    try:
        try:
            handle = start_master(args.host, args.port, args.webui_port, args.conf)
        except (OSError, ValueError, RuntimeError) as e:
            print(f"Error: {e}", file=sys.stderr)
            return 1
        except Exception as e:   # e.g. RpcBindError subclasses; still one line
            print(f"Error: {type(e).__name__}: {e}", file=sys.stderr)
            return 1
        try:
            while not stop.is_set():
                stop.wait(0.5)
        finally:
            handle.stop()
        return 0
    finally:
        for sig, old in installed.items():
            signal.signal(sig, old)  # type: ignore[arg-type]


def start_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember start-master [options]` (sbin/start-master.sh): validate the options here, so a
    typo fails at once with `Error: ...`, then run `ember master` as a daemon."""
    from ember.deploy.daemon import start_daemon
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--help" in argv or (argv and argv[-1] == "-h"):
        print(START_USAGE)
        return 0
    parsed = _parse_or_exit(argv, START_USAGE)
    if isinstance(parsed, int):
        return parsed
    return start_daemon(DAEMON_COMMAND, 1, [DAEMON_ARGV0, *argv], ready_marker=READY_MARKER)


def stop_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember stop-master` (sbin/stop-master.sh): stop the daemon started by start-master."""
    from ember.deploy.daemon import daemon_signature, stop_daemon
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--help", "-h"):
        print("Usage: ember stop-master")
        return 0
    if argv:
        print(f"Unexpected argument: {argv[0]}\nUsage: ember stop-master", file=sys.stderr)
        return 1
    return stop_daemon(DAEMON_COMMAND, 1, signature=daemon_signature(argv=[DAEMON_ARGV0]))


__all__ = ["main", "start_main", "stop_main", "parse_args", "MasterArguments", "USAGE",
           "MasterCliError", "DAEMON_COMMAND"]
