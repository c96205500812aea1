"""The driver's UI process (ember.ui.ui_process): the driver must not depend on it."""
from __future__ import annotations

import logging
import os

from ember import SparkConf


def test_driver_outlives_its_ui_process(fresh_sc, tmp_path, caplog) -> None:
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(tmp_path)))
    sc = fresh_sc("local[2]", "ui-dies", conf)
    ui = sc.runtime.ui_process
    ui.proc.kill()
    ui.proc.wait()
    with caplog.at_level(logging.ERROR, logger="ember.ui.UiProcess"):
        assert sc.parallelize(range(100), 10).sum() == 4950
        assert sc.runtime.bus.wait_until_empty(10)
    assert "The UI process failed" in caplog.text
    assert not ui.sync(timeout=1)
    assert sc.parallelize(range(10), 2).count() == 10
    sc.stop()
    assert os.listdir(tmp_path) == [sc.applicationId]     # what was written is kept


def test_without_an_event_log_the_ui_loads_when_first_needed(fresh_sc) -> None:
    """ember.ui.ui_process_main: the UI process holds the driver's frames and imports the UI
    only when a page is asked for (or a SYNC, or after a while); the page then shows every
    event sent before."""
    import json
    import time
    import urllib.request

    import psutil

    from ember.ui.ui_process_main import FIRST_USE_WAIT
    started = time.monotonic()
    sc = fresh_sc("local[2]", "ui-lazy", SparkConf().set("spark.ui.port", "0"))
    assert sc.parallelize(range(10), 2).count() == 10
    assert sc.runtime.bus.wait_until_empty(10)
    proc = psutil.Process(sc.runtime.ui_process.proc.pid)
    if time.monotonic() - started < FIRST_USE_WAIT - 1.0:   # else it may have loaded by now
        assert proc.num_threads() == 1           # reading and holding frames, no server yet
    port = sc.uiWebUrl.rsplit(":", 1)[1]
    url = f"http://127.0.0.1:{port}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=60) as r:
        jobs = json.load(r)
    assert [(j["status"], j["numTasks"]) for j in jobs] == [("SUCCEEDED", 2)]
    assert proc.num_threads() > 1
    assert sc.runtime.ui_process.sync()
