"""The cluster-mode driver process: Spark's DriverWrapper and WorkerWatcher (reference §4.5).

``python -m ember.deploy.driver_wrapper WORKER_URL USER_JAR MAIN [args...]``, started by a
worker's DriverRunner in the driver dir with the Spark properties in ``EMBER_SPARK_CONF``.

Fate sharing first: an RpcEnv "Driver" connects to the worker; if it cannot, the wrapper exits
-1 ("Could not initialize connection to worker <url>. Exiting."), and when that connection is
lost later the endpoint ``workerWatcher`` ends the process at once with -1 - a driver must not
outlive the worker that accounts for it. Then the application runs in the main thread:

- MAIN ``__main__``: USER_JAR is a .py file, run as ``__main__``;
- MAIN ``org.apache.spark.deploy.SparkSubmit`` (what Spark's REST clients send): leading
  ``-c/--conf k=v`` pairs are added to the conf, then the primary .py file and its args;
- any other MAIN: a dotted module name, with USER_JAR (.zip/.whl/.egg or a directory) first
  on sys.path: a package runs its ``__main__``; a module with a top-level
  ``if __name__ == "__main__":`` block runs as ``__main__``; otherwise it is imported and
  its ``main()``, if it has one, is called (an int it returns is the exit code); a plain
  script without either ran when it was imported, and that is its success.

Exit code: a SystemExit's code passes through; an uncaught exception prints its traceback to
stderr, leaves ``driver-exception.json`` ({"type", "message", "traceback"}) in the driver dir
for the runner's DriverStateChanged, and exits 1.

Start-up is on the critical path of every cluster-mode submission, so imports are lazy:
only what the chosen path needs is loaded.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Optional

from ember.util import thread_dump
from ember.util.logs import own_logger

USAGE = "Usage: DriverWrapper <workerUrl> <userJar> <driverMainClass> [options]"
SPARK_SUBMIT = "org.apache.spark.deploy.SparkSubmit"
EXCEPTION_FILE = "driver-exception.json"
CONF_ENV = "EMBER_SPARK_CONF"


class DriverMainError(Exception):
    """MAIN or its arguments name nothing runnable."""


def _logger() -> Any:
    """The wrapper's own logger on stderr; it leaves the root logger to the application."""
    import logging
    return own_logger("ember.deploy.DriverWrapper", logging.INFO)


def start_worker_watcher(worker_url: str, timeout: float = 30.0) -> Optional[Any]:
    """RpcEnv "Driver" (client mode: nothing to listen for) connected to the worker, with
    the ``workerWatcher`` endpoint that exits -1 when the worker's address disconnects.
    None (after logging Spark's message) if the worker cannot be reached."""
    from ember.rpc import RpcAddress, RpcEndpoint, RpcEnv
    log = _logger()

    class WorkerWatcher(RpcEndpoint):
        def __init__(self, address: RpcAddress) -> None:
            self.address = address

        def on_disconnected(self, remote: RpcAddress) -> None:
            if remote == self.address:
                log.error("Lost connection to worker rpc endpoint %s. Exiting.", worker_url)
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:
                        pass
                os._exit(-1)   # at once, whatever the application's threads are doing

    secret = os.environ.get("_SPARK_AUTH_SECRET")
    boot_conf = ({"spark.authenticate": "true", "spark.authenticate.secret": secret}
                 if secret else {})
    env = None
    try:
        if not worker_url.startswith("spark://") or "@" not in worker_url:
            raise ValueError(f"Invalid worker URL: {worker_url}")
        name, host_port = worker_url[len("spark://"):].split("@", 1)
        address = RpcAddress.from_spark_url("spark://" + host_port)
        env = RpcEnv.create("Driver", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"), 0,
                            boot_conf, client_mode=True)
        env.setup_endpoint("workerWatcher", WorkerWatcher(address))
        env.setup_endpoint_ref_sync(address, name, timeout=timeout)
        return env
    except Exception as e:
        log.error("Could not initialize connection to worker %s. Exiting. (%s)", worker_url, e)
        if env is not None:
            env.shutdown()
        return None


def _conf_from_env() -> dict[str, str]:
    conf = {}
    for line in os.environ.get(CONF_ENV, "").splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            conf[k] = v
    return conf


def _set_conf(conf: dict[str, str]) -> None:
    """Hand the conf to the application's SparkConf (which loads EMBER_SPARK_CONF)."""
    os.environ[CONF_ENV] = "\n".join(f"{k}={v}" for k, v in conf.items())


def split_submit_args(args: list[str]) -> tuple[dict[str, str], str, list[str]]:
    """SparkSubmit-style args -> (conf pairs, primary file, its args)."""
    conf: dict[str, str] = {}
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-c", "--conf"):
            if i + 1 >= len(args):
                raise DriverMainError(f"Missing value for {a}")
            pair, i = args[i + 1], i + 2
        elif a.startswith("--conf="):
            pair, i = a[len("--conf="):], i + 1
        else:
            break
        if "=" not in pair:
            raise DriverMainError(f"Spark config without '=': {pair}")
        k, v = pair.split("=", 1)
        conf[k] = v
    if i >= len(args):
        raise DriverMainError(f"{SPARK_SUBMIT} arguments name no application file")
    return conf, args[i], args[i + 1:]


def _local_primary(path: str) -> str:
    """The primary file as a local path: a file: URL's path; if it does not exist here,
    the copy the runner fetched into the driver dir (the cwd) under the same name."""
    if path.startswith("file:"):
        from urllib.parse import unquote, urlparse
        path = unquote(urlparse(path).path)
    if not os.path.exists(path) and os.path.exists(os.path.basename(path)):
        path = os.path.basename(path)
    return os.path.abspath(path)


def _add_py_files(conf: dict[str, str]) -> None:
    """--py-files on sys.path: archives themselves, .py files by their directory."""
    for f in (conf.get("spark.submit.pyFiles") or "").split(","):
        f = f.strip()
        if f:
            p = os.path.abspath(f)
            sys.path.insert(0, p if p.endswith((".zip", ".egg", ".whl")) or os.path.isdir(p)
                            else os.path.dirname(p))


def _run_file(path: str, args: list[str]) -> None:
    import runpy
    if not os.path.isfile(path):
        raise DriverMainError(f"Application file {path} does not exist")
    sys.argv = [path, *args]
    sys.path.insert(0, os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


def has_main_block(source: str) -> bool:
    """Does the module have a top-level ``if __name__ == "__main__":``?"""
    import ast
    for node in ast.parse(source).body:
        t = node.test if isinstance(node, ast.If) else None
        if (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.Eq)):
            sides = [t.left, t.comparators[0]]
            if (any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides)
                    and any(isinstance(s, ast.Constant) and s.value == "__main__"
                            for s in sides)):
                return True
    return False


def _run_module(name: str, user_jar: str, args: list[str]) -> Optional[int]:
    import importlib
    import importlib.util
    import runpy
    if user_jar:
        sys.path.insert(0, os.path.abspath(user_jar))
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise DriverMainError(f"No module named {name!r}"
                              + (f" in {user_jar}" if user_jar else ""))
    sys.argv = [spec.origin or name, *args]
    if (spec.submodule_search_locations is not None
            and importlib.util.find_spec(f"{name}.__main__") is not None):
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return None
    source = spec.loader.get_source(name) if spec.loader is not None else None
    if source is not None and has_main_block(source):
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return None
    main = getattr(importlib.import_module(name), "main", None)
    if not callable(main):
        return None       # a plain script: importing it ran it, and it succeeded
    result = main()
    return result if isinstance(result, int) and not isinstance(result, bool) else None


def run_application(user_jar: str, main: str, args: list[str]) -> Optional[int]:
    """Run the application per MAIN (see the module doc); its int result, if any."""
    conf = _conf_from_env()
    if main == SPARK_SUBMIT:
        extra, primary, args = split_submit_args(args)
        conf.update(extra)
        _set_conf(conf)
        _add_py_files(conf)
        _run_file(_local_primary(primary), args)
        return None
    _add_py_files(conf)
    if main == "__main__":
        if not user_jar:
            raise DriverMainError("MAIN __main__ needs an application file (USER_JAR)")
        _run_file(os.path.abspath(user_jar), args)
        return None
    import re
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", main):
        raise DriverMainError(f"Invalid main {main!r}: expected __main__, {SPARK_SUBMIT} "
                              "or a dotted Python module name")
    return _run_module(main, user_jar, args)


def _report_exception(e: BaseException, driver_dir: str) -> None:
    """Traceback to stderr (without the wrapper's own frames) and driver-exception.json."""
    import json
    import traceback
    tb = e.__traceback__
    here = os.path.abspath(__file__)
    while tb is not None and (tb.tb_frame.f_globals.get("__name__") == "runpy"
                              or os.path.abspath(tb.tb_frame.f_code.co_filename) == here):
        tb = tb.tb_next
    text = "".join(traceback.format_exception(type(e), e, tb))
    sys.stderr.write(text)
    sys.stderr.flush()
    doc = {"type": type(e).__name__, "message": str(e), "traceback": text}
    tmp = os.path.join(driver_dir, EXCEPTION_FILE + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, os.path.join(driver_dir, EXCEPTION_FILE))
    except OSError as err:
        _logger().warning("Cannot write %s: %s", EXCEPTION_FILE, err)


def system_exit_code(code: Any) -> int:
    """SystemExit semantics: None -> 0, an int as is, anything else printed -> 1."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def main(argv: Optional[list[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 3:
        print(USAGE, file=sys.stderr)
        return -1
    worker_url, user_jar, main_name, app_args = args[0], args[1], args[2], args[3:]
    driver_dir = os.getcwd()
    thread_dump.install()
    env = start_worker_watcher(worker_url)
    if env is None:
        return -1
    import signal
    # Spark's shutdown hooks run on SIGTERM: unwind the application (SparkContext.stop in
    # finally/atexit) instead of dying mid-write; the runner SIGKILLs after its timeout.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        code = system_exit_code(run_application(user_jar, main_name, app_args))
    except SystemExit as e:
        code = system_exit_code(e.code)
    except BaseException as e:   # noqa: BLE001 - reported, becomes exit code 1
        _report_exception(e, driver_dir)
        code = 1
    env.shutdown()
    return code


if __name__ == "__main__":
    sys.exit(main())
