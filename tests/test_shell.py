"""`ember shell` as a person and a script use it, over real processes: the interactive
shell in a pseudo-terminal (IPython and the plain console; banner with the UI address,
`sc`/`spark` bound, the console progress bar), and `-c CODE` with its exit code, on
local[2] and on the 2-worker cluster."""
from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.cluster import _env
from tests.helpers.terminal import Terminal

pytestmark = pytest.mark.timeout(240)


def shell(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ember.cli", "shell", *args],
                          capture_output=True, text=True, timeout=timeout,
                          env=_env({"TERM": "dumb"}), stdin=subprocess.DEVNULL)


def banner_checks(term: Terminal, master: str) -> None:
    term.read_until(r"Welcome to")
    ui = term.read_until(r"Spark context Web UI available at (http://\S+)").group(1)
    term.read_until(re.escape(f"Spark context available as 'sc' (master = {master}, "
                              "app id = ") + r"\S+\)\.")
    term.read_until(r"SparkSession available as 'spark'\.")
    import urllib.request
    with urllib.request.urlopen(ui.rstrip("/") + "/api/v1/applications", timeout=10) as r:
        assert r.status == 200


def test_interactive_ipython_shell_on_local(tmp_path):
    pytest.importorskip("IPython")      # the test extra installs it
    term = Terminal([sys.executable, "-m", "ember.cli", "shell", "--master", "local[2]",
                     "--name", "pty-shell"])
    try:
        banner_checks(term, "local[2]")
        term.read_until(r"In \[1\]: ")
        term.type("sc.parallelize(range(10)).map(lambda x: x * 3).sum()")
        term.read_until(r"Out\[1\]: 135")
        term.type("sc.appName, spark.sparkContext is sc, "
                  "sc.getConf().get('spark.ui.showConsoleProgress')")
        term.read_until(r"Out\[2\]: \('pty-shell', True, 'true'\)")
        # a stage that runs for a while draws Spark's progress bar on the terminal
        term.type("import time; sc.parallelize(range(4), 4).map("
                  "lambda x: time.sleep(2.5) or x).count()")
        term.read_until(r"\[Stage \d+:=*>? *\(\d \+ \d\) / 4\]", timeout=90)
        term.read_until(r"Out\[3\]: 4", timeout=90)
        term.type("exit()")
        assert term.close() == 0
    finally:
        if term.proc.poll() is None:
            term.close(5)


def test_interactive_plain_console_on_the_cluster(cluster):
    term = Terminal([sys.executable, "-m", "ember.cli", "shell", "--no-ipython",
                     "--master", cluster.url, "--conf", "spark.cores.max=2"])
    try:
        banner_checks(term, cluster.url)
        term.read_until(r">>> ")
        term.type("print('SUM', sc.parallelize(range(100), 4).map(lambda x: x * 2).sum())")
        term.read_until(r"SUM 9900")
        term.type("print('APP', [a['name'] for a in __import__('json').loads(__import__("
                  "'urllib.request').request.urlopen(sc.uiWebUrl + '/api/v1/applications')"
                  ".read())])")
        term.read_until(r"APP \['EmberShell'\]")
        cluster.wait_for(lambda j: any(a["name"] == "EmberShell" for a in j["activeapps"]))
        term.type("exit()")
        assert term.close() == 0
        cluster.wait_for(lambda j: not any(a["name"] == "EmberShell"
                                           for a in j["activeapps"]))
    finally:
        if term.proc.poll() is None:
            term.close(5)


def test_c_runs_code_and_exits_with_its_code():
    r = shell("--master", "local[2]", "-c",
              "print(sc.master, sc.parallelize(range(10)).sum(), spark.sparkContext is sc)")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "local[2] 45 True"
    assert "Welcome to" not in r.stdout            # scripts get their own output only
    assert shell("-c", "import sys; sys.exit(3)").returncode == 3
    boom = shell("-c", "1/0")
    assert boom.returncode == 1 and "ZeroDivisionError: division by zero" in boom.stderr
    bad = shell("--deploy-mode", "cluster", "-c", "pass")
    assert bad.returncode == 1
    assert "Cluster deploy mode is not applicable to Spark shells." in bad.stderr


def test_c_on_the_cluster_with_conf(cluster):
    r = shell("--master", cluster.url, "--name", "shell-script", "--conf",
              "spark.cores.max=2", "-c",
              "print(sc.master, sc.appName, sc.getConf().get('spark.cores.max'), "
              "sc.parallelize(range(1000), 8).map(lambda x: x % 7).sum())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == f"{cluster.url} shell-script 2 2997"
