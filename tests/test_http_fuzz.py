"""Property-based fuzzing (hypothesis) of the HTTP surfaces' input handling: the REST
gateway's request handlers (malformed JSON, wrong types, huge fields, any method and path)
and the UIs' query parsers (log ids, offsets and lengths, application and stage ids,
quantiles, statuses, JSON fields, kill forms). The properties: no input crashes a handler
(no 5xx other than the gateway's deliberate Spark-compatible answers, which are logged as
such, never as an unexpected failure), the server keeps serving, and invalid input changes
nothing (the master is never asked to submit or kill)."""
from __future__ import annotations

import http.client
import json
import logging
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from benchmarks.master_ui import FakeMasterUI, synthetic_state
from ember.deploy.messages import RequestKillDriver, RequestMasterState, RequestSubmitDriver
from ember.deploy.log_pages import LogRequest, LogRequestError, parse_log_request
from ember.ui import app_ui
from ember.ui.api import LiveStoreProvider, api_get
from tests.test_app_ui import app_events, store_of

pytestmark = pytest.mark.timeout(600)
FUZZ = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

text = st.text(st.characters(codec="utf-8"), max_size=40)
huge = st.integers(min_value=1_000, max_value=200_000).map(lambda n: "x" * n)
json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                        st.floats(allow_nan=False), text, huge)
json_value = st.recursive(json_scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(text, inner, max_size=4)), max_leaves=12)
URL_CHARS = st.characters(min_codepoint=33, max_codepoint=126, exclude_characters="?#/")
CREATE_FIELDS = ("action", "appArgs", "appResource", "clientSparkVersion",
                 "environmentVariables", "mainClass", "sparkProperties")


def create_like() -> st.SearchStrategy[dict[str, Any]]:
    """CreateSubmissionRequest-shaped objects with any field of any type."""
    good: dict[str, Any] = {"action": "CreateSubmissionRequest", "appArgs": [],
                            "appResource": "", "clientSparkVersion": "4.1.1",
                            "environmentVariables": {}, "mainClass": "json",
                            "sparkProperties": {"spark.master": "spark://127.0.0.1:7077"}}
    return st.dictionaries(st.sampled_from(CREATE_FIELDS + ("extra",)), json_value,
                           max_size=8).map(lambda over: {**good, **over})


def body_strategy() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=300),
        json_value.map(lambda v: json.dumps(v).encode()),
        create_like().map(lambda v: json.dumps(v).encode()),
        create_like().map(lambda v: json.dumps(v).encode()[:-1]),      # cut short
        st.just(b'{"action":"CreateSubmissionRequest"' + b',"a":[' * 5000))  # deep nesting


def exchange(port: int, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def rest():
    from ember.deploy.rest.server import StandaloneRestServer
    from ember.rpc import RpcEnv
    from tests.test_rest_server import FakeMaster
    env = RpcEnv.create("rest-fuzz", "127.0.0.1", 0, {})
    fake = FakeMaster()
    ref = env.setup_endpoint("Master", fake)
    server = StandaloneRestServer(ref, "spark://127.0.0.1:7077", {})
    server.start("127.0.0.1", 0, 0)
    yield server, fake
    server.stop()
    env.shutdown()
    env.await_termination(5)


class _Unexpected(logging.Handler):
    """Collects the REST server's `log.exception` records: an unexpected failure."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info:
            self.records.append(record)


@pytest.fixture
def unexpected():
    handler = _Unexpected()
    logger = logging.getLogger("ember.deploy.rest.StandaloneRestServer")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def _answer_is_handled(status: int, raw: bytes) -> None:
    assert status < 500 or status == 500 and json.loads(raw)["action"] == "ErrorResponse"


@FUZZ
@given(body=body_strategy(), ctype=st.sampled_from(
    ["application/json", "application/json;charset=utf-8", None, "text/plain"]))
def test_rest_create_survives_any_body(rest, unexpected, body, ctype):
    server, fake = rest
    before = sum(isinstance(m, RequestSubmitDriver) for m in fake.received)
    headers = {"Content-Type": ctype} if ctype else {}
    status, raw = exchange(server.port, "POST", "/v1/submissions/create", body, headers)
    _answer_is_handled(status, raw)
    submitted = sum(isinstance(m, RequestSubmitDriver) for m in fake.received) - before
    assert submitted == (1 if status == 200 else 0)
    if ctype == "text/plain":
        assert status == 415 and submitted == 0
    assert unexpected.records == []


@FUZZ
@given(method=st.sampled_from(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"]),
       path=st.one_of(
           st.lists(st.text(URL_CHARS, max_size=12), max_size=5).map(
               lambda p: "/" + "/".join(p)),
           st.sampled_from(["/v1/submissions/kill/", "/v1/submissions/status/",
                            "/v1/submissions/logs/", "/v1/submissions/upload",
                            "/v1/submissions/killall", "/v1/submissions/clear"]).flatmap(
               lambda base: st.text(URL_CHARS | st.just("/"), max_size=20).map(
                   lambda tail: base + tail))),
       body=st.one_of(st.none(), st.binary(max_size=64)))
def test_rest_any_method_and_path(rest, unexpected, method, path, body):
    server, fake = rest
    n = len(fake.received)
    status, raw = exchange(server.port, method, path, body,
                           {"Content-Type": "application/json"} if body else {})
    if method != "HEAD":
        _answer_is_handled(status, raw)
    # Only the routes Spark defines reach the master.
    asked = fake.received[n:]
    assert all(not isinstance(m, RequestSubmitDriver) for m in asked)
    if not path.startswith("/v1/submissions/kill"):
        assert all(not isinstance(m, RequestKillDriver) for m in asked)
    assert unexpected.records == []
    assert exchange(server.port, "GET", "/v1/submissions/readyz")[0] == 200


query_value = st.one_of(text, st.integers(-2**64, 2**64).map(str),
                        st.sampled_from(["", "-1", "0", "1e9", "nan", "..", "../..", "/etc",
                                         "stdout", "stderr", "out", "%00", "\x00"]))
log_query = st.dictionaries(
    st.sampled_from(["appId", "executorId", "driverId", "self", "logType", "offset",
                     "byteLength", "junk"]), query_value, max_size=6)


@FUZZ
@given(query=log_query)
def test_log_query_parser(tmp_path_factory, query):
    work = tmp_path_factory.getbasetemp() / "fuzz-work"
    (work / "app-1" / "0").mkdir(parents=True, exist_ok=True)
    (work / "app-1" / "0" / "stdout").write_text("hello\n")
    try:
        req = parse_log_request(str(work), query)
    except LogRequestError as e:
        assert e.status in (400, 404)
        return
    assert isinstance(req, LogRequest)
    if req.path is None:      # a work-dir log: never outside the work dir
        assert os.path.realpath(req.file).startswith(os.path.realpath(str(work)) + os.sep)
    assert req.byte_length >= 0 and (req.offset is None or req.offset >= 0)


@pytest.fixture(scope="module")
def store():
    return store_of(app_events())


api_path = st.lists(st.one_of(
    st.sampled_from(["applications", "app-1", "jobs", "stages", "executors", "allexecutors",
                     "storage", "rdd", "environment", "taskSummary", "taskList", "0", "1",
                     "-1", "99999999999999999999", "logs", "attempt"]), text), max_size=7)
api_query = st.dictionaries(st.sampled_from(
    ["status", "details", "withSummaries", "quantiles", "offset", "length", "sortBy",
     "taskStatus", "minDate", "maxDate", "limit", "junk"]), query_value, max_size=5)


@FUZZ
@given(parts=api_path, query=api_query)
def test_api_parser(store, parts, query):
    status, _ = api_get(LiveStoreProvider(store), "/" + "/".join(parts), query)
    assert status < 500


@FUZZ
@given(page=st.sampled_from(app_ui.PAGES + ("/", "/nope/", "/jobs/job", "/stages/stage")),
       query=st.dictionaries(st.sampled_from(["id", "attempt", "task.offset", "task.pageSize",
                                              "task.sort", "junk"]), query_value, max_size=4))
def test_app_ui_page_parser(store, page, query):
    status, html = app_ui.render_page(store, page, query)
    assert status in (200, 400, 404) and html.startswith("<!DOCTYPE html>")


@pytest.fixture(scope="module")
def master_ui():
    with FakeMasterUI(synthetic_state(2, 2, running_apps=1)) as ui:
        yield ui


@FUZZ
@given(path=st.sampled_from(["/app/", "/json/", "/logPage/", "/log", "/metrics/prometheus"]),
       field=st.text(URL_CHARS.filter(lambda c: c != "%"), max_size=20),
       query=st.dictionaries(st.sampled_from(["appId", "self", "logType", "offset",
                                              "byteLength", "junk"]), query_value, max_size=4),
       form=st.dictionaries(st.sampled_from(["id", "terminate", "csrf"]), query_value,
                            max_size=3),
       ctype=st.sampled_from(["application/x-www-form-urlencoded", "text/plain",
                              "multipart/form-data; boundary=x", "multipart/form-data"]),
       method=st.sampled_from(["POST", "PUT", "DELETE"]))
def test_master_ui_queries_and_kill_forms(master_ui, path, field, query, form, ctype, method):
    from urllib.parse import urlencode
    port = master_ui.ui.port
    target = path + (field if path == "/json/" else "") + "?" + urlencode(query)
    status, _ = exchange(port, "GET", target)
    assert status < 500 or status == 503       # 503: the (fake) master cannot answer
    status, _ = exchange(port, method, "/app/kill/", urlencode(form).encode(),
                         {"Content-Type": ctype})
    assert status in (400, 403)   # none of these carries the page's CSRF token
    assert [m for m in master_ui.master.asks if not isinstance(m, RequestMasterState)] == []
