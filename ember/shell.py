"""`ember shell`: PySpark's interactive shell (python/pyspark/shell.py) on Ember.

Why a module of its own: the shell is a driver like any other, but it owns what a person at
a prompt needs: `sc` and `spark` already bound to the master given, the banner that says
where the application UI is, the console progress bar on, and a REPL (IPython when it is
installed, else the standard library's console). `ember shell -c CODE` runs CODE in the
same namespace for scripts and exits with its exit code.
"""
from __future__ import annotations

import platform
import sys
import traceback
from typing import Any, Mapping, Optional

LOGO = r"""Welcome to
   ______           __
  / ____/___ ___  / /_  ___  _____
 / __/ / __ `__ \/ __ \/ _ \/ ___/
/ /___/ / / / / / /_/ /  __/ /
\_____/_/ /_/ /_/_.___/\___/_/     version {version}
"""


def start_session(conf: Mapping[str, str]) -> dict[str, Any]:
    """The shell's namespace: a SparkSession and its SparkContext built from `conf`
    (spark-submit's precedence already applied), plus the names pyspark's shell imports."""
    from ember import SparkConf, SparkContext, StorageLevel
    from ember.sql import SparkSession
    spark_conf = SparkConf().setAll(conf.items())
    spark_conf.setIfMissing("spark.app.name", "EmberShell")
    spark_conf.setIfMissing("spark.ui.showConsoleProgress", "true")
    spark = SparkSession.builder.config(conf=spark_conf).getOrCreate()
    return {"__name__": "__main__", "spark": spark, "sc": spark.sparkContext,
            "SparkConf": SparkConf, "SparkContext": SparkContext,
            "SparkSession": SparkSession, "StorageLevel": StorageLevel}


def banner(namespace: Mapping[str, Any]) -> str:
    """pyspark's welcome: the logo, the Python, where the UI is and what is bound."""
    from ember.version import __version__
    sc = namespace["sc"]
    ui = (f"Spark context Web UI available at {sc.uiWebUrl}\n" if sc.uiWebUrl
          else "Spark context Web UI is off (spark.ui.enabled=false)\n")
    return (LOGO.format(version=__version__)
            + f"\nUsing Python version {platform.python_version()} "
              f"({', '.join(platform.python_build())})\n"
            + ui
            + f"Spark context available as 'sc' (master = {sc.master}, "
              f"app id = {sc.applicationId}).\n"
            + "SparkSession available as 'spark'.")


def run_code(code: str, namespace: dict[str, Any]) -> int:
    """`-c CODE`: the exit code is the code's own (SystemExit), 1 for an uncaught exception
    (its traceback on stderr, as `python -c` prints it), else 0."""
    from ember.deploy.driver_wrapper import system_exit_code
    try:
        exec(compile(code, "<string>", "exec"), namespace)
    except SystemExit as e:
        return system_exit_code(e.code)
    except BaseException:  # noqa: BLE001 - reported like the interpreter does
        traceback.print_exc()
        return 1
    return 0


def interact(namespace: dict[str, Any], use_ipython: bool = True) -> None:
    """IPython when importable (and wanted), else `code.interact` with readline editing."""
    if use_ipython:
        try:
            import IPython
        except ImportError:
            pass
        else:
            IPython.start_ipython(argv=["--no-banner"], user_ns=namespace)
            return
    import code
    try:
        import readline
        import rlcompleter
        readline.set_completer(rlcompleter.Completer(namespace).complete)
        readline.parse_and_bind("tab: complete")
    except ImportError:   # no readline on this platform: a plain prompt still works
        pass
    code.interact(banner="", local=namespace, exitmsg="")


def main(conf: Mapping[str, str], code: Optional[str], use_ipython: bool) -> int:
    namespace = start_session(conf)
    sc = namespace["sc"]
    try:
        if code is not None:
            return run_code(code, namespace)
        print(banner(namespace), flush=True)
        interact(namespace, use_ipython)
        return 0
    finally:
        sys.stdout.flush()
        sc.stop()
