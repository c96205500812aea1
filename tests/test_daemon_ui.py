"""The master and worker web UIs and their Prometheus metrics.

First fast tests without daemons (page renderers on hand-made snapshots, the kill handlers
against a fake Master endpoint, the log-request checks on a temporary work dir); then one
real cluster (master + 2 workers as processes) running a cluster-mode driver whose
application is named `<script>alert(1)</script>` and whose stdout is ~300 KB: every page
is read over HTTP (the daemons' own logs too: their stdout goes to a file), and the last
test kills the driver with the UI's kill button.
"""
from __future__ import annotations

import html
import http.client
import math
import os
import re
import time
from typing import Any, Optional
from urllib.parse import urlencode, urlsplit

import pytest

from benchmarks.master_ui import FakeMasterUI, run as run_benchmark, synthetic_state
from ember.deploy import daemon
from ember.deploy.master.http import render_app_page, render_master_page
from ember.deploy.messages import (
    ApplicationDescription, Command, DriverDescription, DriverRunnerSummary, DriverState,
    ExecutorRunnerSummary, ExecutorState, RequestKillApplication, RequestKillDriver,
    RequestMasterState, WorkerStateResponse,
)
from ember.deploy import log_pages
from ember.deploy.log_pages import (
    DEFAULT_BYTE_LENGTH, LogRequestError, parse_log_request, parse_self_log_request,
    render_log_page,
)
from ember.deploy.worker.http import render_worker_page
from ember.web.pages import PrometheusText
from tests.cluster import LocalCluster
from tests.test_cluster_mode import submit, write_app

XSS = "<script>alert(1)</script>"


# ---------------------------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------------------------

def request(url: str, method: str = "GET", form: Optional[dict] = None,
            headers: Optional[dict] = None) -> tuple[int, dict, str]:
    """One HTTP request, redirects not followed, the path sent exactly as given."""
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    body = urlencode(form).encode() if form is not None else None
    hdrs = dict(headers or {})
    if body is not None:
        hdrs["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, u.path + (f"?{u.query}" if u.query else ""), body=body,
                     headers=hdrs)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def csrf_of(page: str) -> str:
    """The CSRF token a page's kill forms carry."""
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m, "no CSRF token in the page"
    return m.group(1)


def get_ok(url: str) -> str:
    status, _, body = request(url)
    assert status == 200, (url, status, body[:500])
    return body


def hrefs(page: str) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'href="([^"]*)"', page)]


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse_prometheus(text: str) -> dict[str, dict[tuple, float]]:
    """A strict little parser of the text format: every sample's family must have had its
    HELP and TYPE lines; returns {name: {sorted label pairs: value}}."""
    helped, typed, out = set(), set(), {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            helped.add(line.split()[2])
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            assert kind in ("gauge", "counter"), line
            typed.add(name)
        else:
            m = _SAMPLE.match(line)
            assert m, f"bad sample line {line!r}"
            name, labels, value = m.groups()
            assert name in helped and name in typed, f"{name} lacks HELP/TYPE"
            pairs = []
            if labels:
                matches = list(_LABEL.finditer(labels))
                assert "".join(x.group(0) for x in matches) == labels, labels
                pairs = [(k, re.sub(r"\\(.)", lambda e: "\n" if e.group(1) == "n"
                                    else e.group(1), v)) for k, v in
                         (x.groups() for x in matches)]
            out.setdefault(name, {})[tuple(sorted(pairs))] = float(value)
    return out


def value(metrics: dict, name: str, **labels: str) -> float:
    return metrics[name][tuple(sorted(labels.items()))]


def worker_state(**overrides: Any) -> WorkerStateResponse:
    desc = ApplicationDescription(XSS, 2, Command("x"), "javascript:alert(2)", user="<b>eve")
    ddesc = DriverDescription("j", 512, 1, False,
                              Command("w", ["{{WORKER_URL}}", "{{USER_JAR}}", "<img src=x>"]))
    fields: dict[str, Any] = dict(
        host="127.0.0.1", port=7078, workerId="worker-1",
        executors=[ExecutorRunnerSummary("app-1", 0, desc, 2, 512,
                                         state=ExecutorState.RUNNING)],
        finishedExecutors=[],
        drivers=[DriverRunnerSummary("driver-1", ddesc, state=DriverState.RUNNING)],
        finishedDrivers=[DriverRunnerSummary("driver-0", ddesc, state=DriverState.ERROR,
                                             finalException="<svg onload=alert(3)>")],
        masterUrl="spark://m:7077", cores=4, memory=2048, coresUsed=3, memoryUsed=1024,
        masterWebUiUrl="http://m:8080")
    fields.update(overrides)
    return WorkerStateResponse(**fields)


# ---------------------------------------------------------------------------------------------
# Without daemons
# ---------------------------------------------------------------------------------------------

def test_prometheus_writer_escapes_label_values_and_help():
    odd = 'a"b\\c\nd'
    text = (PrometheusText()
            .add("x_total", "counter", "two\nlines \\ here", [({"k": odd}, 3), ({"k": "2"}, 1.5)])
            .add("y", "gauge", "nan", float("nan")).text())
    assert "# HELP x_total two\\nlines \\\\ here\n# TYPE x_total counter\n" in text
    m = parse_prometheus(text)
    assert value(m, "x_total", k=odd) == 3 and value(m, "x_total", k="2") == 1.5
    assert math.isnan(value(m, "y"))


def test_master_pages_escape_peer_strings():
    s = synthetic_state(2, 2, running_apps=1, completed_drivers=1, app_name=XSS)
    for doc in (render_master_page(s, f"Spark Master at {XSS}"),
                render_app_page(s, s.activeApps[0].id),
                render_app_page(s, s.completedApps[0].id)):
        assert "<script>" not in doc and "&lt;script&gt;alert(1)&lt;/script&gt;" in doc
    page = render_master_page(s, "t", history_server_url="http://hist:18080")
    assert f"http://hist:18080/history/{s.completedApps[0].id}" in hrefs(page)
    assert "http://driver-0:4040" in hrefs(page)          # running app -> its UI
    assert '<strong>Status:</strong> ALIVE (<a href="/logPage/?self&amp;logType=out">Log</a>)' \
        in page                                           # Spark 4: the master's own log
    assert "(kill)" not in render_master_page(s, "t", kill_enabled=False)


def test_worker_page_escapes_and_links():
    doc = render_worker_page(worker_state())
    for raw in (XSS, "<b>eve", "<img src=x>", "<svg onload"):
        assert raw not in doc and html.escape(raw) in doc
    links = hrefs(doc)
    assert not any(h.startswith("javascript:") for h in links)     # a peer's URL, refused
    assert "http://m:8080" in links
    assert "/logPage/?driverId=driver-1&logType=stderr" in links
    assert "/logPage/?appId=app-1&executorId=0&logType=stdout" in links
    assert "<strong>ID:</strong> " + '<a href="/logPage/?self&amp;logType=out">worker-1</a>' \
        in doc                                            # the worker's own log
    doc = render_worker_page(worker_state(workerId="<i>w"), "http://h:8081")
    assert '<strong>ID:</strong> <a href="http://h:8081/logPage/?self&amp;logType=out">' \
        "&lt;i&gt;w</a>" in doc


def kill_asks(ui: FakeMasterUI) -> list:
    return [m for m in ui.master.asks if not isinstance(m, RequestMasterState)]


def test_kill_buttons_post_only_with_kill_enabled():
    state = synthetic_state(2, 2, running_apps=1)
    app_id = state.activeApps[0].id
    with FakeMasterUI(state) as ui:
        page = get_ok(ui.url + "/")
        assert 'action="/app/kill/" method="POST"' in page and "window.confirm(" in page
        for path in ("/app/kill/", "/driver/kill/"):
            status, _, _ = request(f"{ui.url}{path}?id={app_id}&terminate=true")
            assert status == 405
        assert kill_asks(ui) == []
        token = csrf_of(page)
        # A plain POST without the page's CSRF token is refused, even with auth off.
        status, _, _ = request(ui.url + "/app/kill/", "POST",
                               {"id": app_id, "terminate": "true"})
        assert status == 403 and kill_asks(ui) == []
        status, headers, _ = request(ui.url + "/app/kill/", "POST",
                                     {"id": app_id, "terminate": "true", "csrf": token})
        assert status == 302 and headers["location"] == "/"
        status, _, _ = request(ui.url + "/driver/kill/", "POST",
                               {"id": "driver-x", "terminate": "true", "csrf": token})
        assert status == 302
        request(ui.url + "/driver/kill/", "POST", {"id": "driver-y", "csrf": token})
        status, _, _ = request(ui.url + "/app/kill/", "POST", {"id": app_id, "terminate":
                               "true", "csrf": token},
                               headers={"Origin": "http://evil.example"})
        assert status == 403
        assert kill_asks(ui) == [RequestKillApplication(app_id), RequestKillDriver("driver-x")]
    with FakeMasterUI(state, {"spark.ui.killEnabled": "false"}) as ui:
        assert "(kill)" not in get_ok(ui.url + "/")
        status, _, _ = request(ui.url + "/app/kill/", "POST",
                               {"id": app_id, "terminate": "true"})
        assert status == 403 and kill_asks(ui) == []


def test_unknown_app_is_a_404_page_and_security_headers():
    with FakeMasterUI(synthetic_state(1, 1)) as ui:
        status, headers, body = request(ui.url + "/app/?appId=%3Cscript%3Enope")
        assert status == 404 and headers["content-type"].startswith("text/html")
        assert "No running application with ID &lt;script&gt;nope" in body
        assert "<script>" not in body and "Traceback" not in body
        assert headers["x-frame-options"] == "SAMEORIGIN"
        assert headers["x-content-type-options"] == "nosniff"
        status, headers, body = request(ui.url + "/metrics/master/prometheus")
        assert status == 200 and headers["content-type"].startswith("text/plain; version=0.0.4")
        assert value(parse_prometheus(body), "ember_master_workers", state="alive") == 1


def test_log_request_stays_inside_the_work_dir(tmp_path):
    work = tmp_path / "work"
    (work / "driver-1").mkdir(parents=True)
    (work / "driver-1" / "stdout").write_text("hello")
    (work / "app-1" / "0").mkdir(parents=True)
    (work / "app-1" / "0" / "stderr").write_text("x")
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "stdout").write_text("secret")
    os.symlink(tmp_path / "secret", work / "link")
    req = parse_log_request(str(work), {"driverId": "driver-1", "logType": "stdout"})
    assert (req.offset, req.byte_length, req.name) == (None, DEFAULT_BYTE_LENGTH, "driver-1")
    assert parse_log_request(str(work), {"appId": "app-1", "executorId": "0",
                                         "logType": "stderr"}).name == "app-1/0"
    bad = [{"driverId": "..", "logType": "stdout"},
           {"driverId": "../secret", "logType": "stdout"},
           {"driverId": str(tmp_path / "secret"), "logType": "stdout"},
           {"driverId": "link", "logType": "stdout"},                    # symlink out
           {"appId": "..", "executorId": "secret", "logType": "stdout"},
           {"appId": "app-1", "executorId": "../../secret", "logType": "stdout"},
           {"driverId": ".hidden", "logType": "stdout"},
           {"driverId": "driver-1", "logType": "../stdout"},
           {"driverId": "driver-1", "appId": "app-1", "logType": "stdout"},
           {"driverId": "driver-1", "logType": "stdout", "offset": "x"},
           {"driverId": "driver-1", "logType": "stdout", "byteLength": "-1"}]
    for q in bad:
        with pytest.raises(LogRequestError) as e:
            parse_log_request(str(work), q)
        assert e.value.status == 400, q
    for q in ({"driverId": "driver-2", "logType": "stdout"},
              {"driverId": "driver-1", "logType": "stderr"}):
        with pytest.raises(LogRequestError) as e:
            parse_log_request(str(work), q)
        assert e.value.status == 404, q


def test_own_log_file_env_then_stdout(tmp_path, monkeypatch):
    log = tmp_path / "ember-me-master-1-h.out"
    log.write_text("x")
    real_readlink = os.readlink
    stdout_target = ["pipe:[42]"]

    def readlink(path, *a, **kw):
        if path == "/proc/self/fd/1":
            return stdout_target[0]
        return real_readlink(path, *a, **kw)
    monkeypatch.setattr(os, "readlink", readlink)
    monkeypatch.setenv(daemon.DAEMON_LOG_FILE_ENV, str(log))
    assert daemon.own_log_file() == str(log)
    monkeypatch.setenv(daemon.DAEMON_LOG_FILE_ENV, str(tmp_path / "gone.out"))  # not a file
    assert daemon.own_log_file() is None                          # stdout is a pipe
    stdout_target[0] = str(log)                                   # started with `> file`
    assert daemon.own_log_file() == str(log)
    monkeypatch.delenv(daemon.DAEMON_LOG_FILE_ENV)
    for target in ("/dev/null", str(tmp_path), f"{log} (deleted)", "socket:[7]"):
        stdout_target[0] = target
        assert daemon.own_log_file() is None, target


def test_start_daemon_tells_the_child_its_log_file(tmp_path, monkeypatch):
    monkeypatch.setenv("EMBER_LOG_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("EMBER_PID_DIR", str(tmp_path / "pids"))
    monkeypatch.setenv(daemon.DAEMON_LOG_FILE_ENV, "/inherited/wrong.out")
    monkeypatch.delenv("SPARK_NO_DAEMONIZE", raising=False)
    seen: dict = {}

    class FakeProc:
        pid = 999999

        def poll(self):
            return None

    def fake_popen(cmd, **kw):
        seen.update(kw)
        return FakeProc()
    monkeypatch.setattr(daemon.subprocess, "Popen", fake_popen)
    assert daemon.start_daemon("master", 1, ["master"], wait_seconds=0) == 0
    assert seen["env"][daemon.DAEMON_LOG_FILE_ENV] == daemon.log_file("master", 1)
    assert seen["env"]["EMBER_LOG_DIR"] == str(tmp_path / "logs")

    monkeypatch.setenv("SPARK_NO_DAEMONIZE", "1")       # foreground: own stdio, no log file
    monkeypatch.setattr(daemon.subprocess, "call", lambda cmd, **kw: seen.update(fg=kw) or 0)
    assert daemon.start_daemon("master", 2, ["master"], wait_seconds=0) == 0
    assert daemon.DAEMON_LOG_FILE_ENV not in seen["fg"]["env"]


def test_self_log_requests(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "ember-me-worker-1-h.out"
    log.parent.mkdir()
    log.write_bytes(b"0123456789" * 30)
    monkeypatch.setenv(daemon.DAEMON_LOG_FILE_ENV, str(log))
    work = str(tmp_path / "work")
    req = parse_log_request(work, {"self": "", "logType": "out"})
    assert (req.name, req.file, req.offset, req.byte_length) == (
        "worker", str(log), None, DEFAULT_BYTE_LENGTH)
    assert req.query(offset=0) == "self&logType=out&offset=0"
    for t in ("stdout", "stderr", "out"):                # one .out file for all three
        assert parse_self_log_request({"logType": t}, "master").file == str(log)
    req = parse_self_log_request({"self": "", "logType": "out", "offset": "100",
                                  "byteLength": "50"}, "master")
    assert (req.name, req.offset, req.byte_length) == ("master", 100, 50)
    text, start, end, total = log_pages.read_request(req)
    assert (text, start, end, total) == ("0123456789" * 5, 100, 150, 300)
    doc = render_log_page(req, text + XSS, start, end, total)
    assert "<title>out log page for master</title>" in doc
    assert "Showing 50 Bytes: 100 - 150 of 300" in doc
    assert XSS not in doc and html.escape(XSS) in doc
    links = hrefs(doc)
    assert {"/logPage/?self&logType=out&offset=50&byteLength=50",
            "/logPage/?self&logType=out&offset=150&byteLength=50",
            "/log?self&logType=out&offset=100&byteLength=50", "/"} <= set(links)
    assert "Back to Master" in doc
    for q in ({"self": "", "logType": "passwd"}, {"self": "", "logType": "out", "offset": "x"},
              {"self": "", "logType": "out", "offset": "-1"},
              {"self": "", "logType": "out", "byteLength": "1.5"},
              {"self": "", "logType": "out", "byteLength": "-5"}):
        with pytest.raises(LogRequestError) as e:
            parse_self_log_request(q, "master")
        assert e.value.status == 400, q
    with pytest.raises(LogRequestError) as e:
        parse_self_log_request({"logType": "bogus"}, "master")
    assert e.value.text == "Error: Log type must be one of stderr, stdout, out"
    with pytest.raises(LogRequestError) as e:                     # self is exclusive
        parse_log_request(work, {"self": "", "driverId": "driver-1", "logType": "out"})
    assert e.value.status == 400
    monkeypatch.setattr(daemon, "own_log_file", lambda: None)
    with pytest.raises(LogRequestError) as e:
        parse_log_request(work, {"self": "", "logType": "out"})
    assert e.value.status == 404
    assert e.value.text.startswith("Error: this worker writes no log file")


def test_master_serves_its_own_log(tmp_path, monkeypatch):
    log = tmp_path / "master.out"
    log.write_text("".join(f"line {i:04d} <b>{i}</b>\n" for i in range(8000)))  # 160 KB
    size = log.stat().st_size
    monkeypatch.setenv(daemon.DAEMON_LOG_FILE_ENV, str(log))
    with FakeMasterUI(synthetic_state(1, 1)) as ui:
        assert "/logPage/?self&logType=out" in hrefs(get_ok(ui.url + "/"))
        status, headers, page = request(ui.url + "/logPage/?self&logType=out")
        assert status == 200 and headers["content-type"].startswith("text/html")
        assert "<title>out log page for master</title>" in page
        start = size - DEFAULT_BYTE_LENGTH
        assert f"Showing {DEFAULT_BYTE_LENGTH} Bytes: {start} - {size} of {size}" in page
        assert "line 7999 &lt;b&gt;7999&lt;/b&gt;" in page and "<b>" not in page
        assert "line 0000" not in page
        page = get_ok(ui.url + "/logPage?self&logType=stderr&offset=0&byteLength=20")
        assert "Showing 20 Bytes: 0 - 20 of" in page and "line 0000 &lt;b&gt;0" in page
        status, headers, body = request(ui.url + "/log?self&logType=out&offset=10&byteLength=20")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        assert body == (f"==== Bytes 10-30 of {size} of {log} ====\n"
                        + log.read_text()[10:30])
        for query, code in [("self&logType=passwd", 400), ("self&logType=out&offset=-2", 400),
                            ("self&logType=out&byteLength=abc", 400)]:
            for path in ("/logPage/", "/log"):
                status, _, body = request(f"{ui.url}{path}?{query}")
                assert status == code and "Traceback" not in body, (path, query, body)
        status, _, body = request(ui.url + "/log?self&logType=bad")
        assert body == "Error: Log type must be one of stderr, stdout, out"
        monkeypatch.setattr(daemon, "own_log_file", lambda: None)
        for path in ("/logPage/", "/log"):
            status, _, body = request(f"{ui.url}{path}?self&logType=out")
            assert status == 404 and body == (
                "Error: this master writes no log file (it was not started by "
                "`ember start-master` and its output is not a file)")


def test_benchmark_runs():
    results = run_benchmark(workers=3, completed_apps=5, requests=2)
    assert set(results) == {"/", "/json"}
    assert all(ms > 0 and size > 0 for ms, size in results.values())


# ---------------------------------------------------------------------------------------------
# A real cluster with a cluster-mode driver
# ---------------------------------------------------------------------------------------------

UI_APP = f"""
import time
from ember import SparkConf, SparkContext
print("MARKER-FIRST", flush=True)
for i in range(3000):
    print(f"LINE {{i:06d}} " + "x" * 88)
conf = SparkConf().setAppName({XSS!r}).set("spark.executor.memory", "512m")
sc = SparkContext(conf=conf)
print("SUM", sc.parallelize(range(100), 4).sum())
print("JOB-DONE <b>bold</b>", flush=True)
while True:
    time.sleep(1)
"""
STDOUT_BYTES = len("MARKER-FIRST\n") + 3000 * 101 + len("SUM 4950\n") + len(
    "JOB-DONE <b>bold</b>\n")


class Running:
    """The cluster, the driver's id and where things are, once the app's job has run."""

    def __init__(self, cluster: LocalCluster, driver_id: str) -> None:
        self.cluster = cluster
        self.driver_id = driver_id
        self.master = f"http://127.0.0.1:{cluster.master_ui}"
        j = cluster.json()
        self.worker_uis = {w["id"]: w["webuiaddress"] for w in j["workers"]}
        d = next(d for d in j["activedrivers"] if d["id"] == driver_id)
        self.driver_worker_ui = self.worker_uis[d["worker"]]
        self.app = next(a for a in j["activeapps"] if a["name"] == XSS)


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ui")
    cluster = LocalCluster(str(tmp / "cluster"), workers=2, cores=2, memory="2g",
                           conf={"spark.worker.timeout": "8"})
    cluster.start()
    try:
        app = write_app(str(tmp), "ui_app.py", UI_APP)
        r = submit(cluster, "--driver-memory", "512m", app)
        assert r.returncode == 0, r.stderr
        driver_id = r.stdout.split()[0]
        deadline = time.time() + 90
        while not _job_done(cluster, driver_id):
            assert time.time() < deadline, cluster.json()
            time.sleep(0.2)
        cluster.wait_for(lambda j: any(a["name"] == XSS and a["state"] == "RUNNING"
                                       for a in j["activeapps"]))
        yield Running(cluster, driver_id)
    finally:
        cluster.stop()


def _job_done(cluster: LocalCluster, driver_id: str) -> bool:
    for i in range(cluster.n_workers):
        path = os.path.join(cluster.workdir, f"work-{i}", driver_id, "stdout")
        try:
            with open(path, "rb") as f:
                if b"JOB-DONE" in f.read():
                    return True
        except OSError:
            pass
    return False


def test_master_page_lists_workers_running_app_and_driver(running):
    page = get_ok(running.master + "/")
    links = hrefs(page)
    for ui in running.worker_uis.values():
        assert ui in links                                          # worker id -> its UI
    app_id = running.app["id"]
    assert f"/app/?appId={app_id}" in links
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and XSS not in page
    assert "<script>" not in page
    assert re.search(r"<strong>REST URL:</strong> spark://127\.0\.0\.1:\d+ "
                     r'<span class="rest-uri">\(cluster mode\)</span>', page)
    assert "<strong>Alive Workers:</strong> 2" in page
    assert "<strong>Cores in use:</strong> 4 Total, 4 Used" in page
    assert "<strong>Drivers:</strong> 1 Running (0 Waiting), 0 Completed" in page
    assert f"{running.driver_worker_ui}/logPage/?driverId={running.driver_id}&logType=stdout" \
        in links
    assert page.count('action="/driver/kill/"') == 1 and page.count('action="/app/kill/"') == 1


def test_app_page_lists_executors(running):
    app_id = running.app["id"]
    page = get_ok(f"{running.master}/app/?appId={app_id}")
    assert "<title>Application: &lt;script&gt;alert(1)&lt;/script&gt;</title>" in page
    assert "<script>" not in page
    assert "Executor Summary (2)" in page
    links = hrefs(page)
    execs = sorted(h for h in links if "executorId=" in h and h.endswith("logType=stdout"))
    assert [urlsplit(h).netloc for h in execs] == sorted(
        urlsplit(u).netloc for u in running.worker_uis.values())
    # the executor's stdout link works and shows its log page
    body = get_ok(execs[0])
    assert "Bytes: 0 - " in body and "stdout log page for " + app_id in body


def test_worker_pages_show_executors_and_the_driver(running):
    for worker_id, ui in running.worker_uis.items():
        page = get_ok(ui + "/")
        assert f"<strong>ID:</strong> <a href=\"{ui}/logPage/?self&amp;logType=out\">" \
            f"{worker_id}</a>" in page
        assert running.master in hrefs(page)                            # master URL link
        assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
        assert "Running Executors (1)" in page
        has_driver = ui == running.driver_worker_ui
        assert (f"/logPage/?driverId={running.driver_id}&logType=stdout" in hrefs(page)) \
            == has_driver
        assert ("Running Drivers (1)" in page) == has_driver


def test_driver_log_page_pages_by_offset(running):
    base = f"{running.driver_worker_ui}/logPage/?driverId={running.driver_id}&logType=stdout"
    page = get_ok(base)
    total = STDOUT_BYTES
    start = total - DEFAULT_BYTE_LENGTH
    assert f"Showing {DEFAULT_BYTE_LENGTH} Bytes: {start} - {total} of {total}" in page
    assert "JOB-DONE &lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold" not in page
    assert "MARKER-FIRST" not in page                   # only the last 100 KiB
    older = {h for h in hrefs(page) if "offset=" in h and "/logPage/" in h}   # pager x2
    assert older == {f"/logPage/?driverId={running.driver_id}&logType=stdout"
                     f"&offset={start - DEFAULT_BYTE_LENGTH}&byteLength={DEFAULT_BYTE_LENGTH}"}
    first = get_ok(base + "&offset=0&byteLength=1000")
    assert "Showing 1000 Bytes: 0 - 1000 of" in first and "MARKER-FIRST" in first
    assert f"/logPage/?driverId={running.driver_id}&logType=stdout&offset=1000" \
        f"&byteLength=1000" in hrefs(first)                         # next (newer) page
    raw = get_ok(f"{running.driver_worker_ui}/log?driverId={running.driver_id}"
                 "&logType=stdout&offset=13&byteLength=101")
    header, text = raw.split("\n", 1)
    assert header.startswith("==== Bytes 13-114 of ") and text == "LINE 000000 " + "x" * 88 + "\n"


def test_log_pages_refuse_paths_outside_the_work_dir(running):
    ui = running.driver_worker_ui
    for query, status in [("driverId=../../etc&logType=stdout", 400),
                          ("driverId=..%2F..%2Fetc&logType=stdout", 400),
                          ("driverId=%2Fetc&logType=stdout", 400),
                          ("appId=..&executorId=..&logType=stdout", 400),
                          (f"driverId={running.driver_id}&logType=..%2Fstdout", 400),
                          ("driverId=driver-nope&logType=stdout", 404),
                          ("appId=app-nope&executorId=0&logType=stderr", 404)]:
        for path in ("/logPage/", "/log"):
            code, _, body = request(f"{ui}{path}?{query}")
            assert code == status, (path, query, code, body)
            assert "root:" not in body and "Traceback" not in body
    code, _, _ = request(f"{running.master}/app/?appId=app-nope")
    assert code == 404


def test_daemons_serve_their_own_logs(running):
    """The cluster's daemons write to files (stdout redirected, no EMBER_DAEMON_LOG_FILE):
    the Log links of their pages open their own logs, escaped."""
    master_log = os.path.realpath(os.path.join(running.cluster.workdir, "master.log"))
    links = hrefs(get_ok(running.master + "/"))
    assert "/logPage/?self&logType=out" in links
    page = get_ok(running.master + "/logPage/?self&logType=out")
    assert "<title>out log page for master</title>" in page
    assert "I have been elected leader! New state: ALIVE" in page
    assert f"Registering app {html.escape(XSS)}" in page and XSS not in page
    raw = get_ok(running.master + "/log?self&logType=out&offset=0&byteLength=100000")
    header, text = raw.split("\n", 1)
    assert re.fullmatch(rf"==== Bytes 0-\d+ of \d+ of {re.escape(master_log)} ====", header)
    assert f"Registering app {XSS}" in text and "Starting Spark master at " in text
    ui = running.driver_worker_ui
    own = f"{ui}/logPage/?self&logType=out"
    assert own in hrefs(get_ok(ui + "/"))
    page = get_ok(own)
    assert "<title>out log page for worker</title>" in page and "Back to Worker" in page
    assert "Successfully registered with master" in page
    assert html.escape(XSS) in page and XSS not in page          # "Asked to launch executor"


def test_prometheus_metrics_match_the_json(running):
    j = running.cluster.json()
    m = parse_prometheus(get_ok(running.master + "/metrics/prometheus"))
    assert value(m, "ember_master_workers", state="alive") == j["aliveworkers"] == 2
    assert value(m, "ember_master_workers", state="dead") == 0
    assert value(m, "ember_master_cores_total") == j["cores"] == 4
    assert value(m, "ember_master_cores_used") == j["coresused"] == 4
    assert value(m, "ember_master_cores_free") == 0
    assert value(m, "ember_master_memory_total_bytes") == j["memory"] * 2 ** 20
    assert value(m, "ember_master_memory_used_bytes") == j["memoryused"] * 2 ** 20
    assert value(m, "ember_master_applications", state="running") == 1
    assert value(m, "ember_master_drivers", state="running") == 1
    assert value(m, "ember_master_executors") == 2
    for worker_id, ui in running.worker_uis.items():
        w = parse_prometheus(get_ok(ui + "/metrics/prometheus"))
        assert value(w, "ember_worker_info", worker_id=worker_id,
                     master_url=running.cluster.url) == 1
        assert value(w, "ember_worker_registered") == 1
        assert 0 <= value(w, "ember_worker_heartbeat_age_seconds") < 8   # spark.worker.timeout
        assert value(w, "ember_worker_cores_total") == 2
        assert value(w, "ember_worker_executors_running") == 1
        has_driver = ui == running.driver_worker_ui
        assert value(w, "ember_worker_drivers_running") == int(has_driver)
        assert value(w, "ember_worker_cores_used") == 2


def test_kill_button_ends_the_driver_and_get_does_not(running):   # last: kills the driver
    form = {"id": running.driver_id, "terminate": "true"}
    status, _, _ = request(f"{running.master}/driver/kill/?{urlencode(form)}")
    assert status == 405
    time.sleep(0.5)
    states = {d["id"]: d["state"] for d in running.cluster.json()["activedrivers"]}
    assert states[running.driver_id] == "RUNNING"
    form["csrf"] = csrf_of(get_ok(running.master + "/"))
    status, headers, _ = request(running.master + "/driver/kill/", "POST", form)
    assert status == 302 and headers["location"] == "/"
    running.cluster.wait_for(lambda j: any(
        d["id"] == running.driver_id and d["state"] == "KILLED" for d in j["completeddrivers"]),
        timeout=30)
