"""The web UIs in a real browser (Debian's Chromium driven by Playwright): a 2-worker cluster
with a cluster-mode driver whose job runs while the pages are open. Screenshots of every page
go to test-artifacts/browser/."""
from __future__ import annotations

import os
import re
import shutil
import time

import pytest

from tests.cluster import ROOT, LocalCluster
from tests.test_cluster_mode import submit, write_app

pytestmark = pytest.mark.timeout(240)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = os.path.join(ROOT, "test-artifacts", "browser")
XSS = "<script>alert(1)</script>"
TASKS = 80

APP = f"""
import time
from ember import SparkConf, SparkContext
sc = SparkContext(conf=SparkConf().setAppName({XSS!r}).set("spark.executor.memory", "512m"))
print("BROWSER-DRIVER-OUT", flush=True)
print("UI", sc.uiWebUrl, flush=True)
sc.parallelize(range({TASKS}), {TASKS}).map(lambda x: time.sleep(0.4) or x).count()
print("JOB-DONE", flush=True)
time.sleep(300)
"""


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright
    os.makedirs(ARTIFACTS, exist_ok=True)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp = str(tmp_path_factory.mktemp("browser"))
    cluster = LocalCluster(os.path.join(tmp, "cluster"), workers=2, cores=2, memory="2g")
    cluster.start()
    try:
        r = submit(cluster, "--driver-memory", "512m", write_app(tmp, "ui_app.py", APP))
        assert r.returncode == 0, r.stderr
        driver_id = r.stdout.split()[0]
        d = cluster.wait_for(lambda j: any(
            d["id"] == driver_id and d["worker"] for d in j["activedrivers"]), 30)
        worker = next(d["worker"] for d in d["activedrivers"] if d["id"] == driver_id)
        worker_ui = next(w["webuiaddress"] for w in cluster.json()["workers"]
                         if w["id"] == worker)
        index = next(i for i in range(cluster.n_workers)
                     if str(cluster.worker_ui[i]) in worker_ui)
        stdout = os.path.join(cluster.workdir, f"work-{index}", driver_id, "stdout")
        deadline = time.time() + 60
        ui_url = None
        while ui_url is None:
            assert time.time() < deadline, "the driver never printed its UI address"
            try:
                m = re.search(r"^UI (http://\S+)$", open(stdout).read(), re.M)
                ui_url = m.group(1) if m else None
            except OSError:
                pass
            time.sleep(0.1)
        yield cluster, driver_id, worker_ui, ui_url
    finally:
        cluster.stop()


def open_page(browser, url: str):
    page = browser.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog):      # an alert would mean an unescaped <script> ran
        dialogs.append(dialog.message)
        dialog.dismiss()
    page.on("dialog", on_dialog)
    page.goto(url)
    return page, dialogs


def shot(page, name: str) -> None:
    page.screenshot(path=os.path.join(ARTIFACTS, f"{name}.png"), full_page=True)


def test_master_page_lists_both_workers_and_the_application(browser, running):
    cluster, driver_id, _, _ = running
    page, dialogs = open_page(browser, f"http://127.0.0.1:{cluster.master_ui}/")
    text = page.inner_text("body")
    for w in cluster.json()["workers"]:
        assert w["id"] in text
    assert XSS in text                      # shown as text ...
    assert dialogs == []                    # ... never run
    assert driver_id in text
    shot(page, "master")
    page.close()


def test_application_ui_shows_task_progress_advancing_without_reload(browser, running):
    _, _, _, ui_url = running
    page, dialogs = open_page(browser, ui_url + "/stages/")
    pattern = re.compile(rf"(\d+)/{TASKS}\b")

    def done_tasks() -> int:
        m = pattern.search(page.inner_text("body"))
        return int(m.group(1)) if m else -1

    deadline = time.time() + 30
    first = done_tasks()
    while first < 0 and time.time() < deadline:      # the stage shows up without a reload
        time.sleep(0.3)
        first = done_tasks()
    assert first >= 0, page.inner_text("body")[:2000]
    shot(page, "app-stages")
    deadline = time.time() + 30
    later = done_tasks()
    while later <= first and time.time() < deadline:
        time.sleep(0.3)
        later = done_tasks()
    assert later > first
    page.goto(ui_url + "/jobs/")
    assert XSS in page.inner_text("body") and dialogs == []
    shot(page, "app-jobs")
    for path in ("/executors/", "/storage/", "/environment/"):
        page.goto(ui_url + path)
        shot(page, "app-" + path.strip("/"))
    page.close()


def test_worker_log_page_shows_the_drivers_stdout(browser, running):
    _, driver_id, worker_ui, _ = running
    page, _ = open_page(browser, f"{worker_ui}/logPage/?driverId={driver_id}&logType=stdout")
    assert "BROWSER-DRIVER-OUT" in page.inner_text("body")
    shot(page, "worker-driver-log")
    page.goto(worker_ui + "/")
    assert driver_id in page.inner_text("body")
    shot(page, "worker")
    page.close()


# Spark's /api/v1 field names and types for what the checks below read (a JSON-schema-like
# table: field -> type); extra fields are allowed, as Spark adds fields over versions.
API_SCHEMA = {
    "applications": {"id": str, "name": str, "attempts": list},
    "jobs": {"jobId": int, "name": str, "status": str, "stageIds": list, "numTasks": int,
             "numActiveTasks": int, "numCompletedTasks": int, "numFailedTasks": int},
    "stages": {"stageId": int, "attemptId": int, "status": str, "numTasks": int,
               "numActiveTasks": int, "numCompleteTasks": int, "shuffleReadBytes": int,
               "shuffleWriteBytes": int, "name": str},
    "executors": {"id": str, "hostPort": str, "isActive": bool, "totalCores": int,
                  "activeTasks": int, "completedTasks": int, "failedTasks": int,
                  "totalShuffleRead": int, "totalShuffleWrite": int},
}


def check_schema(kind: str, items: list) -> None:
    assert isinstance(items, list) and items, kind
    for item in items:
        for field, typ in API_SCHEMA[kind].items():
            assert isinstance(item.get(field), typ), (kind, field, item)


def test_api_and_prometheus_endpoints_parse(running):
    import json
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    cluster, _, worker_ui, ui_url = running

    def get(url: str) -> str:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.read().decode()

    apps = json.loads(get(ui_url + "/api/v1/applications"))
    check_schema("applications", apps)
    app_id = apps[0]["id"]
    for kind in ("jobs", "stages", "executors"):
        check_schema(kind, json.loads(get(f"{ui_url}/api/v1/applications/{app_id}/{kind}")))
    for url in (f"http://127.0.0.1:{cluster.master_ui}/metrics/prometheus",
                worker_ui + "/metrics/prometheus", ui_url + "/metrics/prometheus"):
        families = list(text_string_to_metric_families(get(url)))
        assert families and all(f.samples for f in families), url


def test_kill_button_ends_the_driver(browser, running):     # last: it kills the driver
    cluster, driver_id, _, _ = running
    page = browser.new_page()
    page.on("dialog", lambda dialog: dialog.accept())        # the kill confirmation
    page.goto(f"http://127.0.0.1:{cluster.master_ui}/")
    form = page.locator(f"form[action*='driver/kill']:has(input[value='{driver_id}'])")
    form.locator("a, button, input[type=submit]").first.click()
    cluster.wait_for(lambda j: any(d["id"] == driver_id and d["state"] == "KILLED"
                                   for d in j["completeddrivers"]), 30)
    page.goto(f"http://127.0.0.1:{cluster.master_ui}/")
    shot(page, "master-after-kill")
    page.close()


def test_authenticated_cluster_login_form_and_kill_button(browser, tmp_path):
    """With spark.authenticate=true the browser logs in with a token (`ember token`) at the
    login form, then sees the master page and kills a driver with the kill button (its
    cookie and the form's CSRF token); without logging in it sees only the form."""
    from ember.web.security import mint_token
    secret = "a-browser-test-secret-of-at-least-32-bytes"
    auth = ["--conf", "spark.authenticate=true", "--conf",
            f"spark.authenticate.secret={secret}"]
    cluster = LocalCluster(os.path.join(str(tmp_path), "cluster"), workers=1, cores=1,
                           memory="1g", conf={"spark.authenticate": "true",
                                              "spark.authenticate.secret": secret})
    cluster.start()
    try:
        app = write_app(str(tmp_path), "sleeper.py", "import time\ntime.sleep(300)\n")
        r = submit(cluster, *auth, "--driver-memory", "256m", app)
        assert r.returncode == 0, r.stderr
        driver_id = r.stdout.split()[0]
        master = f"http://127.0.0.1:{cluster.master_ui}/"
        page = browser.new_page()
        dialogs: list[str] = []

        def on_dialog(dialog):           # only the kill confirmation may appear
            dialogs.append(dialog.message)
            dialog.accept()
        page.on("dialog", on_dialog)
        page.goto(master)
        assert driver_id not in page.inner_text("body")
        page.fill("input[name=token]", mint_token(secret.encode(), "ember-test", 600))
        page.click("input[type=submit]")
        page.wait_for_url(master)
        assert driver_id in page.inner_text("body") and dialogs == []
        shot(page, "master-after-login")
        form = page.locator(f"form[action*='driver/kill']:has(input[value='{driver_id}'])")
        form.locator("a, button, input[type=submit]").first.click()
        cluster.wait_for(lambda j: any(d["id"] == driver_id and d["state"] == "KILLED"
                                       for d in j["completeddrivers"]), 30)
        assert len(dialogs) == 1 and "kill driver" in dialogs[0]
        page.close()
    finally:
        cluster.stop()
