"""The `ember` command: `ember submit` (spark-submit's flags) and `ember version`.

Errors in the command line or the configuration print one line and exit non-zero; the
application itself runs as `__main__`, with its exit code passed through.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from typing import Sequence

from ember.version import __version__
from ember.shell import LOGO
from ember.util import thread_dump

BANNER = LOGO + r"""
Ember {version}: Apache Spark {spark} standalone and RDD API, in Python {py}
Type --help for more information."""


class CliError(Exception):
    """A one-line, user-facing error: printed without a traceback, exit code 1."""


def _conf_pair(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"Invalid argument to --conf: {text}")
    k, v = text.split("=", 1)
    return k.strip(), v


def submit_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ember submit",
        usage="ember submit [options] <python file> [app arguments]",
        description="Run an application (spark-submit's options).")
    p.add_argument("--master", help="spark://host:port, local, local[N], local[*], local[N,F]")
    p.add_argument("--deploy-mode", choices=["client", "cluster"], default=None)
    p.add_argument("--name", help="application name")
    p.add_argument("--class", dest="main_class", metavar="MODULE",
                   help="cluster mode: the module to run (its main() or __main__), inside "
                        "APP (a .zip/.whl/directory) or importable on the workers")
    p.add_argument("--conf", "-c", action="append", type=_conf_pair, default=[],
                   metavar="K=V", help="arbitrary Spark configuration property")
    p.add_argument("--properties-file", help="file with extra properties")
    p.add_argument("--py-files", help="comma-separated .zip/.egg/.py files for PYTHONPATH")
    p.add_argument("--files", help="comma-separated files shipped to each executor")
    p.add_argument("--archives", help="comma-separated archives (name#alias) unpacked on "
                   "the driver and each executor")
    p.add_argument("--executor-memory", help="memory per executor (e.g. 1000M, 2G)")
    p.add_argument("--executor-cores", type=int, help="cores per executor")
    p.add_argument("--total-executor-cores", type=int, help="total cores for all executors")
    p.add_argument("--driver-memory", help="memory for the driver (e.g. 1000M, 2G)")
    p.add_argument("--driver-cores", type=int, help="cores for the driver (cluster mode)")
    p.add_argument("--supervise", action="store_true", help="restart the driver on failure")
    p.add_argument("--kill", metavar="SUBMISSION_ID", help="kill a cluster-mode driver")
    p.add_argument("--status", metavar="SUBMISSION_ID",
                   help="print the state of a cluster-mode driver")
    p.add_argument("--follow", action="store_true",
                   help="cluster mode: stream the driver's output and exit with its exit code")
    p.add_argument("--verbose", "-v", action="store_true", help="print debug output")
    p.add_argument("--version", action="store_true", help="print the version and exit")
    p.add_argument("app", nargs="?", help="the application's .py file")
    p.add_argument("app_args", nargs=argparse.REMAINDER, help="arguments for the application")
    return p


def build_conf(args: argparse.Namespace) -> dict[str, str]:
    """Spark's precedence: --conf and flags > the properties file (--properties-file, else
    spark-defaults.conf under $SPARK_CONF_DIR or $SPARK_HOME/conf, as spark-submit) >
    defaults. Non-`spark.*` keys, from --conf or the file, are dropped with spark-submit's
    warning."""
    from ember.config import check_unsupported, parse_memory_mb
    from ember.deploy.properties import default_properties_file, read_properties
    props: dict[str, str] = {}
    path = args.properties_file or default_properties_file(os.environ)
    if path:
        try:
            props = read_properties(path)
        except ValueError as e:
            raise CliError(str(e)) from None
    props.update(args.conf)
    conf: dict[str, str] = {}
    for k, v in props.items():
        if not k.startswith("spark."):
            print(f"Warning: Ignoring non-Spark config property: {k}", file=sys.stderr)
            continue
        conf[k] = v
    flags = {"spark.master": args.master, "spark.app.name": args.name,
             "spark.submit.pyFiles": args.py_files, "spark.files": args.files,
             "spark.archives": args.archives,
             "spark.executor.memory": args.executor_memory,
             "spark.driver.memory": args.driver_memory,
             "spark.submit.deployMode": args.deploy_mode}
    for k, v in flags.items():
        if v is not None:
            conf[k] = v
    for k, v, what in (("spark.executor.cores", args.executor_cores, "Executor cores"),
                       ("spark.cores.max", args.total_executor_cores, "Total executor cores"),
                       ("spark.driver.cores", args.driver_cores, "Driver cores")):
        if v is not None:
            if v <= 0:
                raise CliError(f"{what} must be a positive number")
            conf[k] = str(v)
    for key, what in (("spark.executor.memory", "Executor memory"),
                      ("spark.driver.memory", "Driver memory")):
        if key in conf:
            try:
                if parse_memory_mb(conf[key]) <= 0:
                    raise ValueError
            except ValueError:
                raise CliError(f"{what} must be a positive number") from None
    if args.supervise:
        conf["spark.driver.supervise"] = "true"
    try:
        check_unsupported(conf)
    except ValueError as e:
        raise CliError(str(e)) from None
    conf.setdefault("spark.master", os.environ.get("MASTER", "local[*]"))
    if args.app or getattr(args, "main_class", None):
        conf.setdefault("spark.app.name", args.main_class or os.path.basename(args.app))
    return conf


def submit_cluster(args: argparse.Namespace, conf: dict[str, str]) -> int:
    """Cluster deploy mode: upload what the workers cannot see, hand the driver to the
    master, print its submission id, then report its status (or --follow its output)."""
    from ember.deploy import client, submission as sub
    try:
        master = sub.check_cluster_master(conf.get("spark.master"))
        app = sub.resolve_app(args.app, args.main_class, args.app_args)
        extra = {key: sub.local_list_entries(conf.get(key))
                 for key in ("spark.submit.pyFiles", "spark.files", "spark.archives")}
        for entry in (p for entries in extra.values() for p in entries):
            path = entry.partition("#")[0]        # an archive's #alias names its directory
            if not os.path.isfile(path):
                raise sub.SubmitError(f"File file:{os.path.abspath(path)} does not exist")
        conf["spark.submit.deployMode"] = "cluster"
        gateway = client.open_gateway(master, conf)
        try:
            url = app.url
            if app.local_path is not None:
                url = gateway.upload(app.upload_name, sub.resource_bytes(app.local_path))
            for key, entries in extra.items():
                uploaded = {}
                for entry in entries:
                    path, sep, alias = entry.partition("#")
                    uploaded[entry] = gateway.upload(os.path.basename(path),
                                                     sub.resource_bytes(path)) + sep + alias
                if uploaded:
                    conf[key] = ",".join(uploaded.get(e, e) for e in conf[key].split(",") if e)
            driver_id = gateway.submit(conf, app, url, sub.driver_environment(os.environ))
            print(driver_id, flush=True)
            if args.follow:
                return client.follow_log(gateway, driver_id, "stdout", True, sys.stdout.buffer)
            from ember import config
            wait = config.read(conf, "spark.standalone.submit.waitAppCompletion")
            return client.report_driver_status(gateway, driver_id, wait)
        finally:
            gateway.close()
    except sub.SubmitError as e:
        raise CliError(str(e)) from None


def kill_or_status(args: argparse.Namespace, conf: dict[str, str]) -> int:
    """`--kill ID` / `--status ID` against a spark:// master: REST first, then RPC (see
    client.ask_rest_then_rpc). Both print the block spark-submit logs (`Server responded
    with ...:` and the v1 JSON) for tools that parse it, then the readable lines. A kill the
    master refuses is reported as Spark's SparkSubmit.kill does (its message logged at
    ERROR) and, like Spark, exits 0."""
    from ember.deploy import client, submission as sub
    driver_id = args.kill if args.kill is not None else args.status
    if not driver_id:
        raise CliError("Please specify a submission to kill." if args.kill is not None
                       else "Please specify a submission to request status for.")
    try:
        master = sub.check_cluster_master(conf.get("spark.master"))
        if args.kill is not None:
            ok, message = client.ask_rest_then_rpc(
                master, conf, lambda g: g.kill(driver_id), lambda answer: answer[0])
        else:
            st = client.ask_rest_then_rpc(master, conf, lambda g: g.status(driver_id),
                                          lambda answer: answer.found)
    except sub.SubmitError as e:
        raise CliError(str(e)) from None
    if args.kill is not None:
        print(client.kill_response_json(driver_id, ok, message), flush=True)
        if ok:
            print(f"{driver_id} is killed successfully.")
        else:
            print(f"ERROR SparkSubmit: {message}", file=sys.stderr)
        return 0
    print(client.status_response_json(driver_id, st), flush=True)
    if not st.found:
        print(f"ERROR: Cluster master did not recognize {driver_id}", file=sys.stderr)
        return client.EXIT_NOT_FOUND
    print("\n".join(client.status_lines(driver_id, st)))
    if st.exit_status is not None:
        print(f"Exit code: {st.exit_status}")
    if st.exception:
        print(f"Exception from cluster was: {st.exception}")
    return 0


def logs_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ember logs", description="Print (or --follow) a "
                                "cluster-mode driver's output, fetched through the master.")
    p.add_argument("driver_id", metavar="ID")
    p.add_argument("--master", required=True, help="spark://host:port")
    p.add_argument("--follow", "-f", action="store_true",
                   help="keep streaming until the driver ends; exit with its exit code")
    p.add_argument("--stderr", action="store_true", help="the driver's stderr, not stdout")
    p.add_argument("--conf", "-c", action="append", type=_conf_pair, default=[], metavar="K=V")
    return p


def cmd_logs(argv: Sequence[str]) -> int:
    from ember.deploy import client, submission as sub
    args = logs_parser().parse_args(argv)
    conf = dict(args.conf)
    try:
        gateway = client.open_gateway(sub.check_cluster_master(args.master), conf)
        try:
            return client.follow_log(gateway, args.driver_id,
                                     "stderr" if args.stderr else "stdout", args.follow,
                                     sys.stdout.buffer)
        finally:
            gateway.close()
    except sub.SubmitError as e:
        raise CliError(str(e)) from None


def cmd_submit(argv: Sequence[str]) -> int:
    args = submit_parser().parse_args(argv)
    if args.version:
        from ember.version import SPARK_VERSION
        print(BANNER.format(version=__version__, spark=SPARK_VERSION,
                            py=".".join(map(str, sys.version_info[:3]))))
        return 0
    if args.kill and args.status:
        raise CliError("Action cannot be both KILL and REQUEST_STATUS.")
    if args.kill is not None or args.status is not None:
        return kill_or_status(args, build_conf(args))
    conf = build_conf(args)
    if (args.deploy_mode or conf.get("spark.submit.deployMode")) == "cluster":
        return submit_cluster(args, conf)
    if not args.app:
        raise CliError("Must specify a primary resource (JAR or Python or R file)")
    app = os.path.abspath(download_remote_resources(args.app, conf))
    if not os.path.isfile(app):
        raise CliError(f"File {args.app} does not exist")
    if args.verbose:
        print(f"Main class:\n{app}\nArguments:\n" + "\n".join(args.app_args), file=sys.stderr)
        from ember.redaction import redact
        print("Spark config:\n" + "\n".join(f"({k},{v})" for k, v in redact(conf, conf.items())),
              file=sys.stderr)       # secrets (S3A keys too) hidden, as spark-submit does
    return run_app(app, args.app_args, conf)


def download_remote_resources(app: str, conf: dict[str, str]) -> str:
    """Client mode, as spark-submit: a URL primary resource and URL --py-files (s3a://,
    http(s)://, ...) are downloaded to a temporary dir first, with the endpoint and keys of
    the conf; returns the app's local path and rewrites spark.submit.pyFiles to the copies.
    (--files stay URLs: SparkContext.addFile fetches them.)"""
    from ember import fs
    py_files = [f for f in (conf.get("spark.submit.pyFiles") or "").split(",") if f]
    if fs.is_local(app) and all(fs.is_local(f) for f in py_files):
        return app
    import tempfile
    from ember.deploy.worker.driver_runner import DriverLaunchError, fetch_resource
    staging = tempfile.mkdtemp(prefix="ember-submit-")
    try:
        if not fs.is_local(app):
            app = fetch_resource(app, staging, conf=conf)
        if py_files:
            conf["spark.submit.pyFiles"] = ",".join(
                f if fs.is_local(f) else fetch_resource(f, staging, conf=conf)
                for f in py_files)
    except DriverLaunchError as e:
        raise CliError(str(e)) from None
    return app


def add_py_files(conf: dict[str, str]) -> None:
    """--py-files on this process's path, as spark-submit puts them on the driver's."""
    for f in (conf.get("spark.submit.pyFiles") or "").split(","):
        if f:
            sys.path.insert(0, os.path.abspath(f) if f.endswith((".zip", ".egg", ".whl"))
                            else os.path.dirname(os.path.abspath(f)))
# Spark's SparkExitCode.OOM: the exit code of a driver that ran out of its memory
OOM_EXIT_CODE = 52


def limit_client_driver_memory(conf: dict[str, str]) -> None:
    """Client mode: --driver-memory (+ spark.driver.memoryOverhead) bounds this process, as
    the worker bounds a cluster-mode driver; past it the driver exits with the reason."""
    from ember import config
    from ember.deploy.worker.memory_watchdog import (MemoryWatchdog, exceeded_message,
                                                     memory_limit_mb)
    try:
        limit = memory_limit_mb(config.read(conf, "spark.driver.memory"),
                                config.read(conf, "spark.driver.memoryOverhead"))
    except ValueError as e:
        raise CliError(str(e)) from None

    def exceeded(rss_mb: int) -> None:
        message = exceeded_message("Driver", rss_mb, limit, "spark.driver.memory")
        print(f"ERROR {message.replace('killed by the worker', 'exiting')}",
              file=sys.stderr, flush=True)
        os._exit(OOM_EXIT_CODE)
    MemoryWatchdog(os.getpid(), limit, exceeded).start()


def run_app(app: str, app_args: list[str], conf: dict[str, str]) -> int:
    """Client mode: run the user's file as __main__ in this process with the given conf."""
    os.environ["EMBER_SPARK_CONF"] = "\n".join(f"{k}={v}" for k, v in conf.items())
    os.environ.setdefault("PYTHONHASHSEED", "0")
    add_py_files(conf)
    sys.path.insert(0, os.path.dirname(app))
    sys.argv = [app] + list(app_args)
    if conf.get("spark.driver.memory"):
        limit_client_driver_memory(conf)
    try:
        runpy.run_path(app, run_name="__main__")
    except SystemExit as e:
        from ember.deploy.driver_wrapper import system_exit_code
        return system_exit_code(e.code)
    return 0


_DAEMON_COMMANDS = {
    "master": ("ember.deploy.master.cli", "main"),
    "start-master": ("ember.deploy.master.cli", "start_main"),
    "stop-master": ("ember.deploy.master.cli", "stop_main"),
    "worker": ("ember.deploy.worker.cli", "main"),
    "start-worker": ("ember.deploy.worker.cli", "start_main"),
    "stop-worker": ("ember.deploy.worker.cli", "stop_main"),
    "decommission-worker": ("ember.deploy.worker.cli", "decommission_main"),
    "history-server": ("ember.ui.history_server", "main"),
    "start-history-server": ("ember.ui.history_server", "start_main"),
    "stop-history-server": ("ember.ui.history_server", "stop_main"),
    "token": ("ember.deploy.web_cli", "token_main"),
    "gen-cert": ("ember.deploy.web_cli", "gen_cert_main"),
}


def shell_parser() -> argparse.ArgumentParser:
    """pyspark's options (spark-submit's, less what only applies to an app file); `-c` is
    the code to run, as for `python -c`, so --conf has no short form here."""
    p = argparse.ArgumentParser(prog="ember shell", usage="ember shell [options] [-c CODE]",
                                description="An interactive Python with `sc` and `spark` "
                                            "bound to the master given (pyspark's shell).")
    p.add_argument("--master", help="spark://host:port, local, local[N], local[*] "
                                    "(default: $MASTER, else local[*])")
    p.add_argument("--deploy-mode", choices=["client", "cluster"], default=None)
    p.add_argument("--name", help="application name (default EmberShell)")
    p.add_argument("--conf", action="append", type=_conf_pair, default=[], metavar="K=V",
                   help="arbitrary Spark configuration property")
    p.add_argument("--properties-file", help="file with extra properties")
    p.add_argument("--py-files", help="comma-separated .zip/.egg/.py files for PYTHONPATH")
    p.add_argument("--files", help="comma-separated files shipped to each executor")
    p.add_argument("--archives", help="comma-separated archives (name#alias) unpacked on "
                   "the driver and each executor")
    p.add_argument("--executor-memory", help="memory per executor (e.g. 1000M, 2G)")
    p.add_argument("--executor-cores", type=int, help="cores per executor")
    p.add_argument("--total-executor-cores", type=int, help="total cores for all executors")
    p.add_argument("--driver-memory", help="memory for the driver (e.g. 1000M, 2G)")
    p.add_argument("--no-ipython", action="store_true",
                   help="the standard Python console even when IPython is installed")
    p.add_argument("-c", dest="code", metavar="CODE",
                   help="run CODE with sc and spark bound, then exit with its exit code")
    p.set_defaults(driver_cores=None, supervise=False, app=None, main_class=None)
    return p


def cmd_shell(argv: Sequence[str]) -> int:
    args = shell_parser().parse_args(argv)
    conf = build_conf(args)
    if (args.deploy_mode or conf.get("spark.submit.deployMode")) == "cluster":
        raise CliError("Cluster deploy mode is not applicable to Spark shells.")
    add_py_files(conf)
    from ember import shell
    return shell.main(conf, args.code, not args.no_ipython)


def submit_main() -> int:
    """The `spark3-submit` console script: `ember submit` under one of the names Airflow's
    SparkSubmitHook accepts (spark-submit itself stays PySpark's where both are installed)."""
    return main(["submit", *sys.argv[1:]])


def main(argv: Sequence[str] | None = None) -> int:
    thread_dump.install()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="ember", description="Ember: Spark's standalone "
                                     "cluster and RDD engine in Python.")
    parser.add_argument("command", nargs="?", help="submit | version")
    if not argv or argv[0] in ("-h", "--help"):
        parser.print_help()
        print("\ncommands:\n  submit         run an application (ember submit --help)\n"
              "  logs           a cluster-mode driver's output (ember logs --help)\n"
              "  shell          interactive Python with sc and spark (ember shell --help)\n"
              "  master         run a standalone master in the foreground\n"
              "  worker         run a standalone worker in the foreground\n"
              "  history-server serve finished applications' UIs from event logs\n"
              "  start-master / stop-master / start-worker / stop-worker /\n"
              "  start-history-server / stop-history-server\n"
              "                 the same as background daemons (pid and log files)\n"
              "  decommission-worker [--block-until-exit]\n"
              "                 drain the worker daemons (SIGPWR, spark.decommission.enabled)\n"
              "  token          a bearer token for the web UIs and REST (ember token --help)\n"
              "  gen-cert       a self-signed PEM pair for HTTPS (ember gen-cert --help)\n"
              "  version        print the version")
        return 0 if argv else 1
    cmd, rest = argv[0], argv[1:]
    try:
        if cmd == "submit":
            return cmd_submit(rest)
        if cmd == "logs":
            return cmd_logs(rest)
        if cmd == "shell":
            return cmd_shell(rest)
        if cmd in _DAEMON_COMMANDS:
            import importlib
            module, func = _DAEMON_COMMANDS[cmd]
            return getattr(importlib.import_module(module), func)(rest)
        if cmd in ("version", "--version"):
            print(f"ember {__version__}")
            return 0
        raise CliError(f"Unknown command '{cmd}' (try: ember --help)")
    except CliError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
