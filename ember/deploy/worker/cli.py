"""`ember worker`, `ember start-worker`, `ember stop-worker`: Spark's Worker command line.

Why our own parser rather than argparse's defaults: Spark's Worker takes `-h` for the *host*
(`--help` is the only help flag), reads five SPARK_WORKER_* environment variables under the
flags, and a user who mistypes anything must get one line saying what is wrong - never a
traceback - and exit code 1. Sources, highest first: the flags (and repeatable `--conf k=v`,
an Ember addition), then SPARK_WORKER_* environment variables for the flags' values, and for
`spark.*` keys: `--conf`, then `-Dk=v` in SPARK_WORKER_OPTS, then the properties file
(`--properties-file`, else `$SPARK_CONF_DIR/spark-defaults.conf` or
`$SPARK_HOME/conf/spark-defaults.conf` if present), resolved by `ember.deploy.properties`
(shared with the master and the history server). `spark.worker.ui.port` overrides the web
UI port, as in Spark.

`start_main` / `stop_main` are `sbin/start-worker.sh` / `stop-worker.sh`: one background
daemon per SPARK_WORKER_INSTANCES (default 1), instance i getting web UI port
SPARK_WORKER_WEBUI_PORT+i-1 (and SPARK_WORKER_PORT+i-1 when that is set), through
`ember.deploy.daemon`.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys
from typing import Mapping, NoReturn, Optional, Sequence

from ember import config
from ember.deploy.properties import daemon_conf
from ember.util.units import MiB, parse_size
from ember.deploy.worker.worker import (WorkerDaemon, WorkerSettings, WorkerStartError,
                                        parse_standalone_master_urls)

log = logging.getLogger("ember.deploy.worker.Worker")

__all__ = ["main", "start_main", "stop_main", "parse_args", "parse_memory_string",
           "CliError", "USAGE"]

DAEMON_COMMAND = "worker"
DAEMON_MODULE = "ember.deploy.worker"
DEFAULT_WEBUI_PORT = 8081
DEFAULT_DRIVER_MEM_MB = 1024   # Spark's Utils.DEFAULT_DRIVER_MEM_MB: the memory floor
MEMORY_ERROR = "Memory is below 1MB, or missing a M/G at the end of the memory specification?"

USAGE = """Usage: ember worker [options] <master>

Master must be a URL of the form spark://hostname:port (HA: spark://h1:p1,h2:p2)

Options:
  -c CORES, --cores CORES  Number of cores to use (default: all available)
  -m MEM, --memory MEM     Amount of memory to use (e.g. 1000M, 2G)
                           (default: total RAM minus 1 GiB, at least 1 GiB)
  -d DIR, --work-dir DIR   Directory to run apps in (default: ./work)
  -h HOST, --host HOST     Hostname to listen on
  -p PORT, --port PORT     Port to listen on (default: random)
  --webui-port PORT        Port for web UI (default: 8081)
  --properties-file FILE   Path to a custom Spark properties file.
                           Default is conf/spark-defaults.conf.
  --conf KEY=VALUE         A Spark configuration property (repeatable; Ember addition)
  --help                   Print this help

Environment: SPARK_WORKER_CORES, SPARK_WORKER_MEMORY, SPARK_WORKER_PORT,
SPARK_WORKER_WEBUI_PORT, SPARK_WORKER_DIR, SPARK_WORKER_OPTS (-Dspark.x=y),
SPARK_LOCAL_IP, SPARK_LOCAL_HOSTNAME, SPARK_PUBLIC_DNS, SPARK_LOCAL_DIRS."""

START_USAGE = "Usage: ember start-worker <master> [options]\n" + USAGE.split("\n", 1)[1]


class CliError(Exception):
    """Bad command-line input: printed as one `Error: ...` line, exit code 1."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CliError(f"{message} (see ember worker --help)")


# ---------------------------------------------------------------------------------------------
# Pure parsing helpers
# ---------------------------------------------------------------------------------------------

def parse_memory_string(text: str) -> int:
    """Spark's Utils.memoryStringToMb: '1000M' -> 1000, '2g' -> 2048. A number without a
    unit counts *bytes* (so '1000' is 0 MB), as in Spark. CliError with Spark's message when
    the result is below 1 MB or the text is not a size."""
    try:
        mb = parse_size(text, "b", spaces=True) // MiB
    except ValueError:
        raise CliError(f"Invalid memory size {text!r}: {MEMORY_ERROR}") from None
    if mb <= 0:
        raise CliError(MEMORY_ERROR)
    return mb


def _parse_int(what: str, text: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise CliError(f"Invalid {what}: {text!r} (expected an integer)") from None


def _parse_port(what: str, text: str) -> int:
    port = _parse_int(what, text)
    if not 0 <= port <= 65535:
        raise CliError(f"Invalid {what}: {port} (must be between 0 and 65535)")
    return port


def _parse_cores(what: str, text: str) -> int:
    cores = _parse_int(what, text)
    if cores <= 0:
        raise CliError(f"Number of cores must be positive, but {what} is {cores}")
    return cores


def _conf_pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"Invalid argument to --conf: {text} (expected "
                                         "KEY=VALUE)")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


def default_cores() -> int:
    """All processors this process may run on (Runtime.availableProcessors)."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_memory_mb() -> int:
    """Total RAM minus 1 GiB, at least 1 GiB; 2 GiB assumed if it cannot be read."""
    try:
        import psutil
        total_mb = int(psutil.virtual_memory().total // (1 << 20))
    except Exception:
        total_mb = 2048
    return max(total_mb - 1024, DEFAULT_DRIVER_MEM_MB)


def default_host(environ: Optional[Mapping[str, str]] = None) -> str:
    """Spark's Utils.localHostName: SPARK_LOCAL_HOSTNAME, else SPARK_LOCAL_IP, else this
    machine's address - a non-loopback one if the hostname resolves to loopback."""
    env = os.environ if environ is None else environ
    for key in ("SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP"):
        if env.get(key):
            return env[key]
    hostname = socket.gethostname()
    try:
        address = socket.gethostbyname(hostname)
    except OSError:
        address = "127.0.0.1"
    if not address.startswith("127."):
        return address
    try:
        import psutil
        for name, addrs in sorted(psutil.net_if_addrs().items(), reverse=True):
            for a in addrs:
                if (a.family == socket.AF_INET and not a.address.startswith("127.")
                        and not a.address.startswith("169.254.")):
                    log.warning("Your hostname, %s, resolves to a loopback address: %s; "
                                "using %s instead (on interface %s)", hostname, address,
                                a.address, name)
                    log.warning("Set SPARK_LOCAL_IP if you need to bind to another address")
                    return a.address
    except Exception:
        pass
    return address


def _build_parser(prog: str = "ember worker") -> _Parser:
    p = _Parser(prog=prog, add_help=False, usage=USAGE)
    p.add_argument("-c", "--cores")
    p.add_argument("-m", "--memory")
    p.add_argument("-d", "--work-dir", dest="work_dir")
    p.add_argument("-h", "--host")
    p.add_argument("-p", "--port")
    p.add_argument("--webui-port", dest="webui_port")
    p.add_argument("--properties-file", dest="properties_file")
    p.add_argument("--conf", action="append", type=_conf_pair, default=[])
    p.add_argument("--help", action="store_true")
    p.add_argument("masters", nargs="*")
    return p


def parse_args(argv: Sequence[str], environ: Optional[Mapping[str, str]] = None,
               resolve_host: bool = True) -> Optional[WorkerSettings]:
    """argv + environment -> WorkerSettings (None for --help). CliError on bad input.

    Without -h and with `resolve_host=False` the host is left empty: finding this machine's
    address may log a warning, which `main` wants to do only once logging is set up."""
    env = os.environ if environ is None else environ
    args = _build_parser().parse_args(list(argv))
    if args.help:
        return None
    if not args.masters:
        raise CliError("Missing the master URL (usage: ember worker [options] <master>)")
    if len(args.masters) > 1:
        raise CliError(f"Expected exactly one master URL, got {len(args.masters)}: "
                       f"{' '.join(args.masters)} (for HA use spark://h1:p1,h2:p2)")
    try:
        masters = parse_standalone_master_urls(args.masters[0])
    except ValueError as e:
        raise CliError(str(e)) from None

    if args.cores is not None:
        cores = _parse_cores("--cores", args.cores)
    elif env.get("SPARK_WORKER_CORES"):
        cores = _parse_cores("SPARK_WORKER_CORES", env["SPARK_WORKER_CORES"])
    else:
        cores = default_cores()
    if args.memory is not None:
        memory = parse_memory_string(args.memory)
    elif env.get("SPARK_WORKER_MEMORY"):
        memory = parse_memory_string(env["SPARK_WORKER_MEMORY"])
    else:
        memory = default_memory_mb()
    if args.port is not None:
        port = _parse_port("--port", args.port)
    elif env.get("SPARK_WORKER_PORT"):
        port = _parse_port("SPARK_WORKER_PORT", env["SPARK_WORKER_PORT"])
    else:
        port = 0
    if args.webui_port is not None:
        webui_port = _parse_port("--webui-port", args.webui_port)
    elif env.get("SPARK_WORKER_WEBUI_PORT"):
        webui_port = _parse_port("SPARK_WORKER_WEBUI_PORT", env["SPARK_WORKER_WEBUI_PORT"])
    else:
        webui_port = DEFAULT_WEBUI_PORT
    work_dir = args.work_dir or env.get("SPARK_WORKER_DIR") or os.path.join(os.getcwd(), "work")

    cli_conf = {k: v for k, v in args.conf if k.startswith("spark.")}
    try:
        conf = daemon_conf(env, "SPARK_WORKER_OPTS", args.properties_file, cli_conf)
    except ValueError as e:
        raise CliError(str(e)) from None
    for k, _ in args.conf:
        if not k.startswith("spark."):
            print(f"Warning: Ignoring non-Spark config property: {k}", file=sys.stderr)
    ui_port = conf.get("spark.worker.ui.port")
    if ui_port is not None:
        webui_port = _parse_port("spark.worker.ui.port", ui_port)
    try:
        from ember.deploy.worker.config import WorkerConf
        WorkerConf.from_conf(conf)
    except ValueError as e:
        raise CliError(str(e)) from None
    host = args.host or (default_host(env) if resolve_host else "")
    return WorkerSettings(host=host, port=port, cores=cores, memory=memory, masters=masters,
                          work_dir=os.path.abspath(work_dir), web_ui_port=webui_port, conf=conf,
                          public_address=env.get("SPARK_PUBLIC_DNS") or None,
                          ui_bind_host=env.get("SPARK_LOCAL_IP") or None)


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------

def _error(msg: str) -> int:
    print(f"Error: {msg}", file=sys.stderr)
    return 1


def main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember worker [options] <master>`: run a worker in the foreground until SIGTERM,
    SIGINT or SIGHUP (exit 0, after killing its executors) or until it gives up (exit 1)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = parse_args(argv, resolve_host=False)
    except CliError as e:
        return _error(str(e))
    if settings is None:
        print(USAGE)
        return 0
    # only now: a rejected command line must print its one line and nothing else
    from ember.deploy.daemon import log_daemon_start
    from ember.util.logs import configure_logging
    configure_logging()
    log_daemon_start(log)
    if not settings.host:
        settings.host = default_host()
    daemon = WorkerDaemon(settings)
    try:
        daemon.start()
    except WorkerStartError as e:
        return _error(str(e))
    except Exception as e:   # unexpected: still one line
        return _error(f"{type(e).__name__}: {e}")

    decommission = [False]

    def on_stop_signal(signum: int, frame: object) -> None:
        daemon.request_stop(0)

    def on_decommission_signal(signum: int, frame: object) -> None:
        decommission[0] = True

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT, getattr(signal, "SIGHUP", None)):
        if sig is not None:
            previous[sig] = signal.signal(sig, on_stop_signal)
    sig_name = "SIG" + config.read(settings.conf, "spark.worker.decommission.signal").upper()
    decommission_sig = getattr(signal, sig_name, None)
    if decommission_sig is not None:
        try:
            previous[decommission_sig] = signal.signal(decommission_sig, on_decommission_signal)
        except (OSError, ValueError):
            decommission_sig = None
    code: Optional[int] = None
    try:
        while code is None:
            code = daemon.wait(0.2)
            if decommission[0]:
                decommission[0] = False
                log.info("Received %s, decommissioning", sig_name)
                from ember.deploy.messages import WorkerDecommissionSigReceived
                daemon.env.endpoint_ref(daemon.env.address, "Worker").send(  # type: ignore
                    WorkerDecommissionSigReceived())
        if code == 0:
            log.info("RECEIVED SIGNAL, shutting down the worker and its executors")
    finally:
        daemon.stop()
        for sig, handler in previous.items():
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError, TypeError):
                pass
    return code


def _instances(environ: Mapping[str, str]) -> int:
    raw = environ.get("SPARK_WORKER_INSTANCES", "").strip()
    if not raw:
        return 1
    n = _parse_int("SPARK_WORKER_INSTANCES", raw)
    if n < 1:
        raise CliError(f"SPARK_WORKER_INSTANCES must be at least 1, got {n}")
    return n


def start_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember start-worker <master> [options]` (sbin/start-worker.sh): start background
    worker daemons, pid and log files managed by ember.deploy.daemon."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or "--help" in argv or argv[-1] == "-h":
        print(START_USAGE)
        return 1
    env = os.environ
    try:
        n = _instances(env)
        parse_args(argv, resolve_host=False)   # fail fast here, not in a background log
        webui_base = _parse_port("SPARK_WORKER_WEBUI_PORT",
                                 env.get("SPARK_WORKER_WEBUI_PORT") or str(DEFAULT_WEBUI_PORT))
        port_base = (_parse_port("SPARK_WORKER_PORT", env["SPARK_WORKER_PORT"])
                     if env.get("SPARK_WORKER_PORT") else None)
    except CliError as e:
        return _error(str(e))
    from ember.deploy.daemon import start_daemon
    master, rest = argv[0], argv[1:]
    rc = 0
    for i in range(1, n + 1):
        daemon_argv = ["--webui-port", str(webui_base + i - 1)]
        if port_base is not None:
            daemon_argv += ["--port", str(port_base + i - 1)]
        daemon_argv += [master, *rest]
        rc = max(rc, start_daemon(DAEMON_COMMAND, i, daemon_argv, module=DAEMON_MODULE,
                                  ready_marker="Starting Spark worker"))
    return rc


def stop_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember stop-worker` (sbin/stop-worker.sh): stop instances 1..SPARK_WORKER_INSTANCES.
    The worker gets SIGTERM and kills its executors; SIGKILL only after EMBER_STOP_TIMEOUT
    (default 30 s here, enough for the executors' own 10 s grace period)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--help", "-h"):
        print("Usage: ember stop-worker")
        return 0
    if argv:
        return _error(f"ember stop-worker takes no arguments, got: {' '.join(argv)}")
    try:
        n = _instances(os.environ)
        raw = os.environ.get("EMBER_STOP_TIMEOUT")
        timeout = float(raw) if raw else 30.0
    except CliError as e:
        return _error(str(e))
    except ValueError:
        return _error(f"Invalid EMBER_STOP_TIMEOUT: {os.environ.get('EMBER_STOP_TIMEOUT')!r}")
    rc = 0
    for i in range(1, n + 1):
        rc = max(rc, _stop_daemon(i, timeout))
    return rc


def decommission_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember decommission-worker [--block-until-exit]` (sbin/decommission-worker.sh): SIGPWR
    to worker daemons 1..SPARK_WORKER_INSTANCES, which then drain (spark.decommission.enabled):
    no new executors, their executors migrate blocks and exit. --block-until-exit waits for
    the first instance's process to exit, as Spark's script does."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in ("--help", "-h"):
        print("Usage: ember decommission-worker [--block-until-exit]")
        return 0
    block = bool(argv) and argv[0] == "--block-until-exit"
    if argv[1 if block else 0:]:
        return _error(f"Unknown arguments: {' '.join(argv[1 if block else 0:])} "
                      "(usage: ember decommission-worker [--block-until-exit])")
    try:
        n = _instances(os.environ)
    except CliError as e:
        return _error(str(e))
    from ember.deploy.daemon import daemon_signature, decommission_daemon
    for i in range(1, n + 1):
        decommission_daemon(DAEMON_COMMAND, i, signature=daemon_signature(DAEMON_MODULE),
                            block_until_exit=block and i == 1)
    return 0


def _stop_daemon(instance: int, timeout: float) -> int:
    """Stop one worker daemon, recognising it by its command line (`-m ember.deploy.worker`)
    so that a recycled pid is never signalled."""
    from ember.deploy.daemon import daemon_signature, stop_daemon
    return stop_daemon(DAEMON_COMMAND, instance, signature=daemon_signature(DAEMON_MODULE),
                       timeout=timeout)
