"""Airflow's SparkSubmitOperator / SparkSubmitHook against a real Ember cluster in cluster
deploy mode, with the newest apache-spark provider and with a 4.x one (issue 16).

The two providers talk to a standalone master differently: the newest polls and kills with
curl on the REST port (`rest-port` extra, default 6066) for a single master and with
`spark-submit --status/--kill` for an HA list; the 4.x line always runs `spark-submit
--status/--kill` with the connection's master URL and parses `"driverState" : "X",` out of
spark-submit's output. Both run Ember as `spark3-submit`. With authentication on, the
secret reaches spark3-submit only through SPARK_CONF_DIR and the connection is an HA list,
so that no unauthenticated curl is involved. Airflow lives in venvs of its own
(tests/helpers/airflow_venv.py, cached under .venv-airflow/); the tasks run in a subprocess
of that venv (tests/helpers/airflow_tasks.py), no scheduler needed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.cluster import ROOT, free_port
from tests.helpers.airflow_venv import PROVIDERS, airflow_python

pytestmark = pytest.mark.timeout(900)
FINAL = {"FINISHED", "FAILED", "ERROR", "KILLED"}

OK_APP = """\
from ember import SparkContext
sc = SparkContext(appName="airflow-ok")
assert sc.parallelize(range(100), 4).sum() == 4950
sc.stop()
"""
EXIT3_APP = "import sys\nprint('failing on purpose', flush=True)\nsys.exit(3)\n"
FOREVER_APP = "import time\nprint('up', flush=True)\ntime.sleep(300)\n"


def spark3_submit_dir(tmp: str) -> str:
    """A directory whose `spark3-submit` runs this tree's Ember: the installed console
    script when this venv has one (`make test`), else the same entry point by module."""
    installed = os.path.join(os.path.dirname(sys.executable), "spark3-submit")
    if os.path.exists(installed):
        target = f'exec "{installed}" "$@"'
    else:
        target = (f'exec "{sys.executable}" -c "import sys; from ember.cli import '
                  f'submit_main; sys.exit(submit_main())" "$@"')
    os.makedirs(tmp, exist_ok=True)
    path = os.path.join(tmp, "spark3-submit")
    with open(path, "w") as f:
        f.write(f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" {target}\n')
    os.chmod(path, 0o755)
    return tmp


def connection(host: str, port: int | None = None, **extra: str) -> dict:
    conn = {"conn_type": "spark", "host": host,
            "extra": {"deploy-mode": "cluster", "spark-binary": "spark3-submit", **extra}}
    if port is not None:
        conn["port"] = port
    return conn


SECRET = "airflow-check-secret-of-at-least-32-bytes"


@pytest.fixture(scope="module")
def auth_cluster(tmp_path_factory):
    """A 1-worker cluster with spark.authenticate: RPC and REST both need the secret. The
    worker has room for a 1g driver and a 1g executor."""
    from tests.cluster import LocalCluster
    c = LocalCluster(str(tmp_path_factory.mktemp("auth-cluster")), workers=1, cores=2,
                     memory="3g", conf={"spark.authenticate": "true", "spark.authenticate.secret": SECRET})
    c.start()
    yield c
    c.stop()


@pytest.fixture(scope="module")
def airflow_runs(cluster, auth_cluster, tmp_path_factory):
    """Runs every scenario once per provider (lazily) and caches the results."""
    tmp = tmp_path_factory.mktemp("airflow")
    apps = {}
    for name, body in (("ok", OK_APP), ("exit3", EXIT3_APP), ("forever", FOREVER_APP)):
        apps[name] = str(tmp / f"{name}.py")
        with open(apps[name], "w") as f:
            f.write(body)
    conf_dir = tmp / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text(
        f"spark.master.rest.port {cluster.rest_port}\n")
    # with authentication: the secret reaches spark3-submit (submit, --status, --kill) only
    # through its configuration directory, never through Airflow's command lines
    auth_conf_dir = tmp / "auth-conf"
    auth_conf_dir.mkdir()
    (auth_conf_dir / "spark-defaults.conf").write_text(
        f"spark.authenticate true\nspark.authenticate.secret {SECRET}\n"
        f"spark.master.rest.port {auth_cluster.rest_port}\n")
    os.chmod(auth_conf_dir / "spark-defaults.conf", 0o600)
    # the master listed twice: an HA list, so the newest provider polls and kills with
    # spark3-submit (which authenticates) instead of curl (which cannot); Ember asks a master
    # named twice once
    authed = connection(f"spark://127.0.0.1:{auth_cluster.master_port},"
                        f"127.0.0.1:{auth_cluster.master_port}")
    bin_dir = spark3_submit_dir(str(tmp / "bin"))
    rpc = connection("spark://127.0.0.1", cluster.master_port, **{
        "rest-port": str(cluster.rest_port)})
    rest = connection("spark://127.0.0.1", cluster.rest_port, **{
        "rest-port": str(cluster.rest_port)})
    dead = free_port()
    ha = connection(f"spark://127.0.0.1:{dead},127.0.0.1:{cluster.master_port}")
    scenarios = [
        {"name": "ok", "conn": rpc, "application": apps["ok"],
         "spark_conf_dir": str(conf_dir)},
        {"name": "exit3", "conn": rpc, "application": apps["exit3"],
         "spark_conf_dir": str(conf_dir)},
        # the REST URL, as Airflow's docs have it (spark://host:6066): submission over REST
        # needs spark.master.rest.enabled=true, as with spark-submit
        {"name": "kill", "conn": rest, "application": apps["forever"], "kill": True,
         "conf": {"spark.master.rest.enabled": "true"}},
        # an HA list, the first master down; no REST port known, so status falls back to RPC
        {"name": "ha", "conn": ha, "application": apps["ok"]},
        {"name": "ha_kill", "conn": ha, "application": apps["forever"], "kill": True},
        {"name": "auth_ok", "conn": authed, "application": apps["ok"],
         "spark_conf_dir": str(auth_conf_dir)},
        {"name": "auth_kill", "conn": authed, "application": apps["forever"], "kill": True,
         "spark_conf_dir": str(auth_conf_dir)},
    ]
    cache: dict[str, dict] = {}

    def auth_drivers() -> int:
        j = auth_cluster.json()
        return len(j["activedrivers"]) + len(j["completeddrivers"])

    def results(provider: str) -> dict:
        if provider not in cache:
            python, built = airflow_python(PROVIDERS[provider])
            if built:
                print(f"\nbuilt the Airflow venv for provider {PROVIDERS[provider]} "
                      f"in {built:.1f} s")
            env = {k: v for k, v in os.environ.items()
                   if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
            env.update(PATH=bin_dir + os.pathsep + env.get("PATH", ""),
                       AIRFLOW_HOME=str(tmp / f"home-{provider}"),
                       AIRFLOW__CORE__LOAD_EXAMPLES="False")
            before = auth_drivers()
            r = subprocess.run([python, os.path.join(ROOT, "tests", "helpers",
                                                     "airflow_tasks.py"),
                                json.dumps(scenarios)], capture_output=True, text=True,
                               env=env, timeout=800)
            lines = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
            cache[provider] = {x["name"]: x for x in lines}
            cache[provider]["_log"] = r.stderr[-8000:]
            cache[provider]["_auth_drivers_added"] = auth_drivers() - before
            assert r.returncode == 0, r.stderr[-8000:]
        return cache[provider]

    return results


def final_state(cluster, driver_id: str, timeout: float = 60) -> str:
    """The driver's end state on the master, asked without Airflow."""
    j = cluster.wait_for(lambda j: any(d["id"] == driver_id and d["state"] in FINAL
                                       for d in j["activedrivers"] + j["completeddrivers"]),
                         timeout)
    return next(d["state"] for d in j["activedrivers"] + j["completeddrivers"]
                if d["id"] == driver_id)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_a_succeeding_app_is_a_successful_task(airflow_runs, cluster, provider):
    r = airflow_runs(provider)["ok"]
    assert r["ok"] and r["finished"], (r, airflow_runs(provider)["_log"])
    assert r["status"] == "FINISHED"
    assert final_state(cluster, r["driver_id"]) == "FINISHED"


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_sys_exit_3_fails_the_task(airflow_runs, cluster, provider):
    r = airflow_runs(provider)["exit3"]
    assert r["finished"] and not r["ok"], (r, airflow_runs(provider)["_log"])
    assert "FAILED" in r["error"]
    assert final_state(cluster, r["driver_id"]) == "FAILED"


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_on_kill_kills_the_driver(airflow_runs, cluster, provider):
    runs = airflow_runs(provider)
    for name in ("kill", "ha_kill"):
        r = runs[name]
        assert r["status_before_kill"] == "RUNNING", (name, runs["_log"])
        assert final_state(cluster, r["driver_id"]) == "KILLED", name
        assert r["finished"] and not r["ok"] and "KILLED" in r["error"], (name, r)


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_an_ha_master_list_works(airflow_runs, cluster, provider):
    r = airflow_runs(provider)["ha"]
    assert r["ok"] and r["finished"], (r, airflow_runs(provider)["_log"])
    assert final_state(cluster, r["driver_id"]) == "FINISHED"


@pytest.mark.parametrize("provider", list(PROVIDERS))
def test_with_authentication_on(airflow_runs, auth_cluster, provider):
    runs = airflow_runs(provider)
    ok, kill = runs["auth_ok"], runs["auth_kill"]
    assert ok["ok"] and ok["finished"], (ok, runs["_log"])
    assert final_state(auth_cluster, ok["driver_id"]) == "FINISHED"
    assert kill["status_before_kill"] == "RUNNING", (kill, runs["_log"])
    assert final_state(auth_cluster, kill["driver_id"]) == "KILLED"
    assert kill["finished"] and not kill["ok"] and "KILLED" in kill["error"]
    assert runs["_auth_drivers_added"] == 2      # the master listed twice ran each once
