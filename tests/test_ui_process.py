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
