"""Runs inside an Airflow venv (not Ember's): SparkSubmitOperator tasks against an Ember
cluster, driven the way Airflow's task runner drives them (execute, and on_kill from another
thread while execute waits), without a scheduler.

argv[1]: JSON list of scenarios, each {"name", "conn": Airflow connection JSON,
"application", "conf", "kill": bool, "spark_conf_dir": path or null}.
Prints one JSON object per scenario on stdout: name, ok, error, driver_id, status.
"""
from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time


def run(scenario: dict) -> dict:
    from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
    conn_id = "ember_" + scenario["name"]
    os.environ[f"AIRFLOW_CONN_{conn_id.upper()}"] = json.dumps(scenario["conn"])
    if scenario.get("spark_conf_dir"):
        os.environ["SPARK_CONF_DIR"] = scenario["spark_conf_dir"]
    else:
        os.environ.pop("SPARK_CONF_DIR", None)
    op = SparkSubmitOperator(task_id=scenario["name"], application=scenario["application"],
                             conn_id=conn_id, conf=scenario.get("conf") or {},
                             name=scenario["name"], status_poll_interval=1)
    result: dict = {"name": scenario["name"], "ok": False, "error": None}

    def execute() -> None:
        try:
            op.execute(context={})
            result["ok"] = True
        except BaseException as e:  # noqa: BLE001 - the task's failure is the result
            result["error"] = f"{type(e).__name__}: {e}"

    task = threading.Thread(target=execute, daemon=True)
    task.start()
    if scenario.get("kill"):
        deadline = time.time() + 60
        while task.is_alive() and time.time() < deadline:
            hook = op._hook
            if hook is not None and hook._driver_id and hook._driver_status == "RUNNING":
                break
            time.sleep(0.2)
        result["status_before_kill"] = op._hook._driver_status if op._hook else None
        op.on_kill()
    task.join(120)
    result["finished"] = not task.is_alive()
    hook = op._hook
    result["driver_id"] = hook._driver_id if hook else None
    result["status"] = hook._driver_status if hook else None
    return result


def main() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    for scenario in json.loads(sys.argv[1]):
        print(json.dumps(run(scenario)), flush=True)


if __name__ == "__main__":
    main()
