"""Issue 11's HTTP attacks, each against a default (unauthenticated) and an authenticated
surface: binding (socket table), DNS rebinding (Host), cross-site POSTs (Origin, content
type, CSRF), missing/expired/overlong credentials, ACLs, slow clients (slowloris, connection
cap), TLS with a generated certificate, symbolic links in the history server's directory and
redaction. Real daemons on 127.0.0.1 where the attack needs one; the pure rules as unit
tests."""
from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import subprocess
import sys
import time
from typing import Optional
from urllib.parse import urlencode, urlsplit

import psutil
import pytest

from benchmarks.master_ui import FakeMasterUI, synthetic_state
from ember.deploy.messages import (
    ApplicationDescription, Command, ExecutorRunnerSummary, ExecutorState, RequestKillApplication,
    RequestMasterState, WorkerStateResponse,
)
from ember.deploy.web_cli import write_self_signed
from ember.web.security import (
    Acls, HttpGuard, allowed_hosts, mint_token, normalize_host,
    verify_token,
)
from ember.redaction import REDACTED, redact_args, redaction_pattern
from tests.cluster import LocalCluster, _env, free_port

pytestmark = pytest.mark.timeout(300)
SECRET = "an-http-test-secret-of-at-least-32-bytes!"
AUTH = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET}


def token(user: str = "ember-test", lifetime: float = 300) -> str:
    return mint_token(SECRET.encode(), user, lifetime)


def request(url: str, method: str = "GET", body: Optional[bytes] = None,
            headers: Optional[dict] = None, context: Optional[ssl.SSLContext] = None
            ) -> tuple[int, dict, str]:
    """One exchange, redirects not followed, headers sent exactly as given (Host too)."""
    u = urlsplit(url)
    conn: http.client.HTTPConnection
    if u.scheme == "https":
        conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=10, context=context)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        hdrs = dict(headers or {})
        conn.putrequest(method, u.path + (f"?{u.query}" if u.query else ""),
                        skip_host="Host" in hdrs, skip_accept_encoding=True)
        if body is not None:
            hdrs.setdefault("Content-Length", str(len(body)))
        for k, v in hdrs.items():
            conn.putheader(k, v)
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(
            "utf-8", "replace")
    finally:
        conn.close()


def bearer(user: str = "ember-test") -> dict[str, str]:
    return {"Authorization": f"Bearer {token(user)}"}


def form(fields: dict) -> tuple[bytes, dict[str, str]]:
    return urlencode(fields).encode(), {"Content-Type": "application/x-www-form-urlencoded"}


# ---------------------------------------------------------------------------------------------
# Pure rules
# ---------------------------------------------------------------------------------------------

def test_tokens_need_exp_within_the_maximum_lifetime():
    key = SECRET.encode()
    assert verify_token(mint_token(key, "alice", 60), key, 3600) == "alice"
    from ember.web import jws
    now = time.time()
    with pytest.raises(ValueError, match="expiration"):
        verify_token(jws.sign_hs256({"sub": "a"}, key), key, 3600)
    with pytest.raises(ValueError, match="lifetime"):
        verify_token(jws.sign_hs256({"sub": "a", "exp": now + 7200}, key), key, 3600)
    with pytest.raises(ValueError, match="lifetime"):       # iat far back: still too long
        verify_token(jws.sign_hs256({"sub": "a", "iat": now - 86400, "exp": now + 60}, key),
                     key, 3600)
    with pytest.raises(ValueError):                         # expired
        verify_token(jws.sign_hs256({"sub": "a", "exp": now - 1}, key), key, 3600)
    with pytest.raises(ValueError):                         # another key
        verify_token(mint_token(b"k" * 32, "a", 60), key, 3600)


def test_acls_follow_spark_security_manager():
    off = Acls.from_conf({"spark.ui.view.acls": "alice"})
    assert off.can_view("mallory") and off.can_modify("mallory")   # ACLs disabled
    conf = {"spark.acls.enable": "true", "spark.ui.view.acls": "alice",
            "spark.modify.acls": "bob", "spark.admin.acls": "root-admin",
            "spark.user": "owner"}
    a = Acls.from_conf(conf)
    assert a.can_view("alice") and not a.can_modify("alice")
    assert a.can_modify("bob") and not a.can_view("bob")
    assert a.can_view("root-admin") and a.can_modify("root-admin")     # admin: both
    assert a.can_view("owner") and a.can_modify("owner")               # the app's user
    assert not a.can_view("mallory") and not a.can_modify("mallory")
    assert a.can_view(None)          # no authentication: Spark allows (user is null)
    star = Acls.from_conf({"spark.acls.enable": "true", "spark.ui.view.acls": "*"})
    assert star.can_view("anyone") and not star.can_modify("anyone")
    import grp
    import pwd
    group = grp.getgrgid(pwd.getpwnam("root").pw_gid).gr_name
    g = Acls.from_conf({"spark.acls.enable": "true", "spark.ui.view.acls.groups": group})
    assert g.can_view("root") and not g.can_view("no-such-user-xyz")
    hist = Acls.from_conf({"spark.history.ui.acls.enable": "true",
                           "spark.history.ui.admin.acls": "ops"}, prefix="spark.history.ui")
    assert hist.can_view("ops") and not hist.can_view("dev")


def test_allowed_hosts_and_origins():
    hosts = allowed_hosts("127.0.0.1", {})
    assert hosts is not None and {"127.0.0.1", "localhost", "::1"} <= hosts
    assert "evil.example" not in hosts
    assert allowed_hosts("127.0.0.1", {"spark.ember.ui.allowedHosts": "*"}) is None
    assert "ui.example" in allowed_hosts("127.0.0.1",
                                         {"spark.ember.ui.allowedHosts": "ui.example"})
    assert normalize_host("[::1]:8080") == "::1" and normalize_host("LocalHost.:80") == \
        "localhost"
    g = HttpGuard({}, "127.0.0.1")
    g.port = 8080
    assert g.host_ok("127.0.0.1:8080") and g.host_ok("localhost")
    assert not g.host_ok("evil.example:8080") and not g.host_ok(None)
    assert g.origin_ok(None) and g.origin_ok("http://localhost:8080")
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "null", "file://",
                   "http://127.0.0.1.evil.example:8080"):
        assert not g.origin_ok(origin), origin


def test_https_port_rule_is_sparks():
    from ember.web.security import https_redirect, secure_port
    assert secure_port({}, "ui", 4040) == 4440 and secure_port({}, "ui", 0) == 0
    assert secure_port({}, "standalone", 65500) == 1388          # wraps above 65535
    assert secure_port({"spark.ssl.port": "9000", "spark.ssl.ui.port": "4443"}, "ui", 4040) \
        == 4443
    assert secure_port({"spark.ssl.port": "9000"}, "historyServer", 18080) == 9000
    assert https_redirect("[::1]:80", 8443, "/a?b=1") == "https://[::1]:8443/a?b=1"


def test_csrf_tokens_are_per_user_and_per_process():
    g, other = HttpGuard({}, "127.0.0.1"), HttpGuard({}, "127.0.0.1")
    t = g.csrf_token("alice")
    assert g.csrf_ok(t, "alice") and not g.csrf_ok(t, "bob")
    assert not other.csrf_ok(t, "alice") and not g.csrf_ok(None, "alice")


def test_redaction_of_commands_and_worker_json():
    from ember.deploy.json_protocol import worker_state_json
    from ember.deploy.worker.http import redacted_state, render_worker_page
    pattern = redaction_pattern({})
    assert redact_args(pattern, ["-Dspark.authenticate.secret=abc", "--conf",
                                 "spark.x.password=p", "plain=1"]) == [
        f"-Dspark.authenticate.secret={REDACTED}", "--conf", f"spark.x.password={REDACTED}",
        "plain=1"]
    cmd = Command("m", ["--conf", "spark.hadoop.fs.s3a.access.key=AKIA-LEAK"],
                  {"MY_TOKEN": "tok-LEAK", "SPARK_EXECUTOR_MEMORY": "1g",
                   "DB_URL": "postgres://u:password-LEAK@h"},
                  javaOpts=["-Dspark.authenticate.secret=secret-LEAK"])
    desc = ApplicationDescription("app", 1, cmd, "", user="u")
    state = WorkerStateResponse("h", 1, "w", [ExecutorRunnerSummary(
        "app-1", 0, desc, 1, 512, state=ExecutorState.RUNNING)], [], [], [], "spark://m:1", 1,
        512, 0, 0, "")
    red = redacted_state(state, pattern)
    text = json.dumps(worker_state_json(red)) + render_worker_page(red)
    assert "LEAK" not in text and "SPARK_EXECUTOR_MEMORY -> 1g" in text
    assert "LEAK" in json.dumps(worker_state_json(state))   # the raw state had them


def test_event_log_files_open_regular_files_only(tmp_path):
    from ember.ui.event_log import list_event_logs, open_regular
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:root:/root:/bin/bash\n")
    logs = tmp_path / "logs"
    logs.mkdir()
    os.symlink(secret, logs / "app-evil")
    os.mkfifo(logs / "app-fifo")
    with pytest.raises(OSError):
        open_regular(str(logs / "app-evil"))
    with pytest.raises(OSError):
        open_regular(str(logs / "app-fifo"))        # refused at once, never blocks
    assert [i.app_id for i in list_event_logs(str(logs))] == []


# ---------------------------------------------------------------------------------------------
# The master's UI in-process (real aiohttp server, fake master endpoint)
# ---------------------------------------------------------------------------------------------

def kills(ui: FakeMasterUI) -> list:
    return [m for m in ui.master.asks if not isinstance(m, RequestMasterState)]


def csrf_of(page: str) -> str:
    m = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert m, page[:300]
    return m.group(1)


def test_unauthenticated_ui_still_refuses_rebinding_and_cross_site_kills():
    state = synthetic_state(2, 2, running_apps=1)
    app_id = state.activeApps[0].id
    with FakeMasterUI(state) as ui:
        assert request(ui.url + "/")[0] == 200          # the demo needs no credentials
        status, _, text = request(ui.url + "/", headers={"Host": f"evil.example:{ui.ui.port}"})
        assert status == 403 and "Host" in text
        page = request(ui.url + "/")[2]
        body, hdrs = form({"id": app_id, "terminate": "true"})
        assert request(ui.url + "/app/kill/", "POST", body, hdrs)[0] == 403      # no CSRF
        body, hdrs = form({"id": app_id, "terminate": "true", "csrf": csrf_of(page)})
        assert request(ui.url + "/app/kill/", "POST", body,
                       {**hdrs, "Origin": f"http://evil.example:{ui.ui.port}"})[0] == 403
        assert request(ui.url + "/app/kill/", "POST", body,
                       {**hdrs, "Host": "evil.example"})[0] == 403
        assert kills(ui) == []
        status, headers, _ = request(ui.url + "/app/kill/", "POST", body,
                                     {**hdrs, "Origin": ui.url})
        assert status == 302 and kills(ui) == [RequestKillApplication(app_id)]


def test_authenticated_ui_needs_credentials_and_honours_acls():
    state = synthetic_state(2, 2, running_apps=1)
    app_id = state.activeApps[0].id
    conf = {**AUTH, "spark.acls.enable": "true", "spark.ui.view.acls": "viewer,operator",
            "spark.modify.acls": "operator", "spark.ember.ui.token.maxLifetime": "1h"}
    with FakeMasterUI(state, conf) as ui:
        for path in ("/", "/json", "/json/activeapps", f"/app/?appId={app_id}",
                     "/metrics/prometheus", "/logPage/?self&logType=out", "/log?self&logType=out"):
            status, headers, _ = request(ui.url + path)
            assert status == 401 and "Bearer" in headers["www-authenticate"], path
        status, _, page = request(ui.url + "/", headers={"Accept": "text/html"})
        assert status == 401 and 'action="/login' in page          # the login form
        key = SECRET.encode()
        from ember.web import jws
        for bad in (jws.sign_hs256({"sub": "viewer"}, key),                      # no exp
                    mint_token(key, "viewer", 2 * 3600),                         # too long
                    jws.sign_hs256({"sub": "viewer", "exp": time.time() - 5}, key),
                    mint_token(b"x" * 40, "viewer", 60)):
            assert request(ui.url + "/json", headers={"Authorization": f"Bearer {bad}"}
                           )[0] == 401
        assert request(ui.url + "/json", headers=bearer("viewer"))[0] == 200
        assert request(ui.url + "/json", headers=bearer("stranger"))[0] == 403
        # The kill button: view is not enough; modify is; no credentials at all: 401.
        page = request(ui.url + "/", headers=bearer("viewer"))[2]
        body, hdrs = form({"id": app_id, "terminate": "true", "csrf": csrf_of(page)})
        assert request(ui.url + "/app/kill/", "POST", body, hdrs)[0] == 401
        assert request(ui.url + "/app/kill/", "POST", body, {**hdrs, **bearer("viewer")}
                       )[0] == 403
        assert kills(ui) == []
        # The operator's CSRF token is its own: the viewer's page token does not do.
        assert request(ui.url + "/app/kill/", "POST", body, {**hdrs, **bearer("operator")}
                       )[0] == 403
        # The operator logs in with the form and kills with the cookie.
        login_body, login_hdrs = form({"token": token("operator")})
        status, headers, _ = request(ui.url + "/login?next=/", "POST", login_body, login_hdrs)
        assert status == 303 and headers["location"] == "/"
        cookie = headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=" in cookie
        jar = {"Cookie": cookie.split(";", 1)[0]}
        page = request(ui.url + "/", headers={**jar})[2]
        body, hdrs = form({"id": app_id, "terminate": "true", "csrf": csrf_of(page)})
        assert request(ui.url + "/app/kill/", "POST", body, {**hdrs, **jar})[0] == 302
        assert kills(ui) == [RequestKillApplication(app_id)]
        bad_login, hdrs = form({"token": "not-a-token"})
        status, headers, _ = request(ui.url + "/login", "POST", bad_login, hdrs)
        assert status == 401 and "set-cookie" not in headers


def test_slow_clients_are_dropped_and_connections_capped():
    conf = {"spark.ember.ui.headerTimeout": "1s", "spark.ember.ui.idleTimeout": "1s",
            "spark.ember.ui.maxConnections": "6"}
    with FakeMasterUI(synthetic_state(1, 1), conf) as ui:
        port = ui.ui.port
        stalled = socket.create_connection(("127.0.0.1", port), timeout=15)
        stalled.sendall(b"POST /app/kill/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/x-www-form-urlencoded\r\n"
                        b"Content-Length: 1000\r\n\r\nid=")      # then the body stalls
        t0 = time.monotonic()
        try:
            closed = stalled.recv(1000) == b""
        except OSError:
            closed = True
        assert closed and time.monotonic() - t0 < 8       # dropped after idleTimeout
        stalled.close()
        slow = socket.create_connection(("127.0.0.1", port), timeout=15)
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        t0 = time.monotonic()
        for _ in range(20):                    # a byte at a time does not keep it open
            try:
                slow.sendall(b"a")
                time.sleep(0.25)
            except OSError:
                break
        try:
            closed = slow.recv(100) == b""
        except OSError:
            closed = True
        assert closed and time.monotonic() - t0 < 8
        slow.close()
        idle = [socket.create_connection(("127.0.0.1", port), timeout=15) for _ in range(6)]
        extra = socket.create_connection(("127.0.0.1", port), timeout=15)
        extra.sendall(b"GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        try:
            refused = extra.recv(100) == b""
        except OSError:
            refused = True
        assert refused
        for s in idle + [extra]:
            s.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:      # the server recovers once they are gone
            try:
                if request(ui.url + "/json")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        else:
            pytest.fail("the UI did not serve again after the slow clients left")


def test_tls_with_a_generated_certificate(tmp_path):
    cert, key = write_self_signed(str(tmp_path), ["127.0.0.1", "localhost"])
    conf = {"spark.ssl.standalone.enabled": "true", "spark.ssl.standalone.certChain": cert,
            "spark.ssl.standalone.privateKey": key}
    with FakeMasterUI(synthetic_state(1, 1), conf) as ui:
        url = f"https://127.0.0.1:{ui.ui.port}"
        trust = ssl.create_default_context(cafile=cert)
        assert request(url + "/json", context=trust)[0] == 200
        with pytest.raises(ssl.SSLError):
            request(url + "/json", context=ssl.create_default_context())   # untrusted
        with pytest.raises((OSError, http.client.HTTPException)):
            request(f"http://127.0.0.1:{ui.ui.port}/json")                 # plain HTTP
        # Spark's HTTP port of a TLS UI: a redirect to the HTTPS port (Host still checked).
        status, headers, _ = request(f"http://127.0.0.1:{ui.ui.http_port}/json?x=1")
        assert status == 302 and headers["location"] == f"{url}/json?x=1"
        assert request(f"http://127.0.0.1:{ui.ui.http_port}/json",
                       headers={"Host": "evil.example"})[0] == 403
    with pytest.raises(ValueError, match="certChain"):
        FakeMasterUI(synthetic_state(1, 1), {"spark.ssl.enabled": "true"})


def test_rest_gateway_over_tls_with_the_client(tmp_path):
    from ember.deploy.rest.client import RestSubmissionClient, bearer_token_source
    from ember.deploy.rest.server import StandaloneRestServer
    from ember.web.security import client_ssl_context
    from ember.rpc import RpcEnv
    from tests.test_rest_server import FakeMaster
    cert, key = write_self_signed(str(tmp_path), ["127.0.0.1"])
    conf = {**AUTH, "spark.ssl.standalone.enabled": "true",
            "spark.ssl.standalone.certChain": cert, "spark.ssl.standalone.privateKey": key,
            "spark.ssl.standalone.trustStore": cert}
    env = RpcEnv.create("rest-tls", "127.0.0.1", 0, {})
    try:
        ref = env.setup_endpoint("Master", FakeMaster())
        server = StandaloneRestServer(ref, "spark://127.0.0.1:7077", conf)
        port = server.start("127.0.0.1", 0, 0)
        try:
            client = RestSubmissionClient(f"spark://127.0.0.1:{port}",
                                          token=bearer_token_source(conf),
                                          ssl_context=client_ssl_context(conf, "standalone"))
            assert client.readyz().status == 200
            assert client.request_submission_status("driver-1").status == 200
        finally:
            server.stop()
    finally:
        env.shutdown()
        env.await_termination(5)


def test_app_ui_pool_header_deadline_and_auth(tmp_path):
    """The driver's UI server (standard library, thread pool) under the same rules."""
    from ember.ui.spark_ui import SparkUI, bind_ui
    from ember.ui.status_store import AppStatusStore
    conf = {**AUTH, "spark.ui.port": "0", "spark.ember.ui.headerTimeout": "1s",
            "spark.ember.ui.maxConnections": "4"}
    sock, url, redirect = bind_ui(conf)
    assert sock.getsockname()[0] == "127.0.0.1" and url.startswith("http://127.0.0.1:")
    SparkUI(AppStatusStore(conf), sock, conf).start()
    assert request(url + "/api/v1/applications")[0] == 401
    assert request(url + "/api/v1/applications", headers=bearer())[0] == 200
    assert request(url + "/api/v1/applications",
                   headers={**bearer(), "Host": "evil.example"})[0] == 403
    assert request(url + "/jobs/", "POST", b"", bearer())[0] == 405
    body, hdrs = form({"token": token()})
    status, headers, _ = request(url + "/login?next=/jobs/", "POST", body, hdrs)
    assert status == 303 and "HttpOnly" in headers["set-cookie"]
    slow = socket.create_connection(("127.0.0.1", sock.getsockname()[1]), timeout=15)
    slow.sendall(b"GET /api/v1/applications HTTP/1.0\r\nHost: 127.0.0.1\r\n")
    t0 = time.monotonic()
    try:
        assert slow.recv(100) == b""
    except OSError:
        pass
    assert time.monotonic() - t0 < 8
    slow.close()
    assert request(url + "/api/v1/applications", headers=bearer())[0] == 200


# ---------------------------------------------------------------------------------------------
# Real daemons
# ---------------------------------------------------------------------------------------------

def _listening(pids: list[int]) -> list[tuple[int, str, int]]:
    out = []
    for pid in pids:
        try:
            procs = [psutil.Process(pid)] + psutil.Process(pid).children(recursive=True)
        except psutil.NoSuchProcess:
            continue
        for p in procs:
            try:
                conns = p.net_connections(kind="inet")
            except (psutil.NoSuchProcess, AttributeError):
                conns = p.connections(kind="inet")
            out += [(p.pid, c.laddr.ip, c.laddr.port) for c in conns
                    if c.status == psutil.CONN_LISTEN]
    return out


def _wait_listening(pid: int, port: int, timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p == port for _, _, p in _listening([pid])):
            return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {port}")


DRIVER = """
import time, sys
from ember import SparkConf, SparkContext
sc = SparkContext(conf=SparkConf().setMaster("local[1]").setAppName("bind")
                  .set("spark.driver.host", "127.0.0.1").set("spark.ui.port", "0"))
print("UI", sc.uiWebUrl, flush=True)
sys.stdin.read()
"""


def test_every_daemon_started_on_loopback_listens_only_there(tmp_path):
    logs = tmp_path / "events"
    logs.mkdir()
    hport = free_port()
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1) as c:
        history = subprocess.Popen([sys.executable, "-m", "ember.cli", "history-server",
                                    "--host", "127.0.0.1", "--port", str(hport), "--dir",
                                    str(logs)], env=_env(), stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL)
        driver = subprocess.Popen([sys.executable, "-c", DRIVER], env=_env(),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True)
        try:
            line = driver.stdout.readline()
            assert line.startswith("UI http://127.0.0.1:"), line
            ui_port = int(line.rsplit(":", 1)[1])
            _wait_listening(history.pid, hport)
            _wait_listening(driver.pid, ui_port)
            pids = [c.master.pid, c.workers[0].pid, history.pid, driver.pid]
            listening = _listening(pids)
            ports = {p for _, _, p in listening}
            assert {c.master_port, c.master_ui, c.rest_port, c.worker_ui[0], hport,
                    ui_port} <= ports
            assert all(ip == "127.0.0.1" for _, ip, _ in listening), listening
        finally:
            driver.stdin.close()
            driver.wait(30)
            history.terminate()
            history.wait(30)


def test_authenticated_cluster_refuses_strangers_and_serves_clients(tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1, conf=dict(AUTH)) as c:
        master = f"http://127.0.0.1:{c.master_ui}"
        worker = f"http://127.0.0.1:{c.worker_ui[0]}"
        rest = f"http://127.0.0.1:{c.rest_port}/v1/submissions"
        for url in (master + "/", master + "/json", master + "/metrics/prometheus",
                    master + "/logPage/?self&logType=out", worker + "/", worker + "/json",
                    worker + "/logPage/?self&logType=out", worker + "/metrics/prometheus"):
            assert request(url)[0] == 401, url
        before = c.json()
        assert request(master + "/driver/kill/", "POST", *form(
            {"id": "driver-x", "terminate": "true"}))[0] == 401
        for url in (master + "/json", worker + "/json"):
            assert request(url, headers=bearer())[0] == 200
        # REST: no token, a cross-site text/plain create, a rebinding Host: all refused.
        create = json.dumps({"action": "CreateSubmissionRequest", "appArgs": [],
                             "appResource": "", "clientSparkVersion": "4.1.1",
                             "environmentVariables": {}, "mainClass": "json",
                             "sparkProperties": {"spark.master": c.rest_url}}).encode()
        assert request(rest + "/create", "POST", create,
                       {"Content-Type": "application/json"})[0] == 403
        assert request(rest + "/create", "POST", create,
                       {"Content-Type": "text/plain", "Origin": "http://evil.example",
                        **bearer()})[0] in (403, 415)
        assert request(rest + "/create", "POST", create,
                       {"Content-Type": "application/json", "Host": f"evil.example:{c.rest_port}",
                        **bearer()})[0] == 403
        after = c.json()
        assert after["activedrivers"] == before["activedrivers"] == []
        # Ember's own clients keep working: `ember submit --status` mints its token.
        r = subprocess.run([sys.executable, "-m", "ember.cli", "submit", "--master",
                            c.rest_url, "--conf", "spark.master.rest.enabled=true",
                            "--conf", "spark.authenticate=true", "--conf",
                            f"spark.authenticate.secret={SECRET}", "--status", "driver-none"],
                           env=_env(), capture_output=True, text=True, timeout=60)
        assert "did not recognize driver-none" in r.stderr + r.stdout, r.stderr
        # `ember token` prints a token the daemons accept.
        t = subprocess.run([sys.executable, "-m", "ember.cli", "token", "--user", "alice",
                            "--lifetime", "5m"], env=_env({"_SPARK_AUTH_SECRET": SECRET}),
                           capture_output=True, text=True, timeout=60)
        assert t.returncode == 0, t.stderr
        assert request(master + "/json", headers={
            "Authorization": f"Bearer {t.stdout.strip()}"})[0] == 200


def test_default_cluster_refuses_cross_site_and_rebinding_rest(tmp_path):
    with LocalCluster(str(tmp_path / "c"), workers=1, cores=1) as c:
        rest = f"http://127.0.0.1:{c.rest_port}/v1/submissions"
        create = json.dumps({"action": "CreateSubmissionRequest", "appArgs": [],
                             "appResource": "", "clientSparkVersion": "4.1.1",
                             "environmentVariables": {}, "mainClass": "json",
                             "sparkProperties": {"spark.master": c.rest_url}}).encode()
        # A page elsewhere posting text/plain (no CORS preflight) is refused...
        assert request(rest + "/create", "POST", create, {"Content-Type": "text/plain"}
                       )[0] == 415
        assert request(rest + "/create", "POST", create,
                       {"Content-Type": "application/json",
                        "Origin": "http://evil.example"})[0] == 403
        assert request(rest + "/kill/driver-x", "POST", b"",
                       {"Origin": "http://evil.example"})[0] == 403
        # ... and so is a DNS-rebinding page (its Host is its own name).
        assert request(rest + "/create", "POST", create,
                       {"Content-Type": "application/json",
                        "Host": f"evil.example:{c.rest_port}"})[0] == 403
        assert request(f"http://127.0.0.1:{c.master_ui}/json",
                       headers={"Host": f"evil.example:{c.master_ui}"})[0] == 403
        assert c.json()["activedrivers"] == [] and c.json()["completeddrivers"] == []
        assert request(rest + "/status/driver-x")[0] == 200     # still serving


def test_history_server_skips_symlinks_out_of_its_directory(tmp_path):
    from ember.ui.history_server import HistoryServer
    secret = tmp_path / "passwd"
    secret.write_text("root:x:0:0:SECRET-LINE:/root:/bin/bash\n")
    logs = tmp_path / "events"
    logs.mkdir()
    os.symlink(secret, logs / "app-20260101000000-0000")
    rolled = logs / "eventlog_v2_app-2"
    rolled.mkdir()
    os.symlink(secret, rolled / "events_1_app-2")
    server = HistoryServer(str(logs), {})
    port = server.start("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{port}"
        status, _, index = request(base + "/")
        assert status == 200 and "app-2026" not in index and "SECRET-LINE" not in index
        assert json.loads(request(base + "/api/v1/applications")[2]) == []
        for path in ("/api/v1/applications/app-20260101000000-0000/logs",
                     "/history/app-20260101000000-0000/jobs/", "/api/v1/applications/app-2/logs"):
            status, _, text = request(base + path)
            assert status == 404 and "SECRET-LINE" not in text, path
    finally:
        server.stop()


def test_uploads_have_a_total_quota(tmp_path):
    from ember.deploy.master.uploads import AppResourceStore, UploadError
    store = AppResourceStore(str(tmp_path), max_bytes=100, max_total_bytes=150)
    url = store.put("a.py", b"a" * 100)
    assert store.put("a.py", b"a" * 100) == url           # the same file again: free
    store.put("b.py", b"b" * 50)
    with pytest.raises(UploadError, match="maxTotalUploadSize"):
        store.put("c.py", b"c")
    assert sorted(os.listdir(tmp_path)) == sorted(u.split("/")[2] for u in (
        url, store.put("b.py", b"b" * 50)))
    from ember.deploy.master.master import validate_master_conf
    with pytest.raises(ValueError, match="maxTotalUploadSize"):
        validate_master_conf({"spark.ember.submit.maxTotalUploadSize": "lots"})


def test_history_server_checks_each_applications_own_acls(tmp_path):
    """spark.history.ui.acls.enable: an app's pages follow the ACLs in its event log (its
    view ACLs and user), plus the history server's admins."""
    from ember.ui.history_server import HistoryServer
    env = {"Event": "SparkListenerEnvironmentUpdate", "JVM Information": {},
           "Spark Properties": {"spark.ui.view.acls": "alice"}, "Hadoop Properties": {},
           "System Properties": {}, "Classpath Entries": {}}
    start = {"Event": "SparkListenerApplicationStart", "App Name": "a", "App ID": "app-acl",
             "Timestamp": 1, "User": "bob"}
    (tmp_path / "app-acl").write_text(json.dumps(env) + "\n" + json.dumps(start) + "\n")
    conf = {**AUTH, "spark.history.ui.acls.enable": "true", "spark.history.ui.admin.acls": "ops"}
    server = HistoryServer(str(tmp_path), conf)
    port = server.start("127.0.0.1", 0)
    try:
        base = f"http://127.0.0.1:{port}"
        for path in ("/history/app-acl/jobs/", "/api/v1/applications/app-acl/jobs"):
            assert request(base + path)[0] == 401
            for user, status in (("alice", 200), ("bob", 200), ("ops", 200), ("eve", 403)):
                assert request(base + path, headers=bearer(user))[0] == status, (path, user)
    finally:
        server.stop()


def test_tls_for_the_application_ui_and_the_history_server(tmp_path):
    from ember.ui.history_server import HistoryServer
    from ember.ui.spark_ui import SparkUI, bind_ui
    from ember.ui.status_store import AppStatusStore
    cert, key = write_self_signed(str(tmp_path / "tls"), ["127.0.0.1"])
    trust = ssl.create_default_context(cafile=cert)
    conf = {"spark.ui.port": "0", "spark.ssl.ui.enabled": "true",
            "spark.ssl.ui.certChain": cert, "spark.ssl.ui.privateKey": key}
    sock, url, redirect = bind_ui(conf)
    assert url.startswith("https://127.0.0.1:") and redirect is not None
    SparkUI(AppStatusStore(conf), sock, conf, redirect).start()
    assert request(url + "/api/v1/applications", context=trust)[0] == 200
    status, headers, _ = request(f"http://127.0.0.1:{redirect.getsockname()[1]}/jobs/")
    assert status == 302 and headers["location"] == f"{url}/jobs/"
    (tmp_path / "events").mkdir()
    server = HistoryServer(str(tmp_path / "events"), {
        "spark.ssl.historyServer.enabled": "true", "spark.ssl.historyServer.keyStore": cert,
        "spark.ssl.historyServer.keyFile": key})
    port = server.start("127.0.0.1", 0)
    try:
        assert server.scheme == "https" and server.http_port != port
        assert request(f"https://127.0.0.1:{port}/api/v1/applications", context=trust)[0] == 200
        assert request(f"http://127.0.0.1:{server.http_port}/")[0] == 302
    finally:
        server.stop()


def test_cluster_mode_driver_ui_takes_app_tokens_only(capsys):
    """After per-application credentials: a cluster-mode driver's UI (holding only its
    application credential) verifies `ember token --app <driverId>` tokens, and refuses
    tokens signed with the cluster secret; a daemon's UI refuses the app token."""
    from ember.deploy.web_cli import token_main
    from ember.web.security import HttpGuard
    from ember.rpc.security import app_credential
    secret = "c" * 40
    scope = "driver-20260101000000-0001"
    base = ["--conf", "spark.authenticate=true", "--conf", f"spark.authenticate.secret={secret}"]

    def token(*extra: str) -> str:
        assert token_main([*base, *extra]) == 0
        return capsys.readouterr().out.strip()
    app_token, cluster_token = token("--app", scope), token()
    driver_ui = HttpGuard({"spark.authenticate": "true", "spark.authenticate.secret":
                           app_credential(secret.encode(), scope)}, "127.0.0.1")
    daemon_ui = HttpGuard({"spark.authenticate": "true", "spark.authenticate.secret": secret},
                          "127.0.0.1")
    bearer = lambda t: {"Authorization": f"Bearer {t}"}  # noqa: E731
    assert driver_ui.user(bearer(app_token))[1] is None
    assert driver_ui.user(bearer(cluster_token))[1].status == 401
    assert daemon_ui.user(bearer(cluster_token))[1] is None
    assert daemon_ui.user(bearer(app_token))[1].status == 401
    # another application's token does not open this driver's UI either
    assert driver_ui.user(bearer(token("--app", "driver-20260101000000-0002")))[1].status == 401


def test_deleting_an_upload_frees_its_share_of_the_quota():
    """i12a deletes uploads no driver needs; the total quota must count them out again."""
    from ember.deploy.master.uploads import AppResourceStore, UploadError
    store = AppResourceStore(max_bytes=100, max_total_bytes=150)
    try:
        url = store.put("a.py", b"a" * 100)
        with pytest.raises(UploadError, match="maxTotalUploadSize"):
            store.put("b.py", b"b" * 100)
        assert store.delete(url, keep_recent_s=0)
        store.put("b.py", b"b" * 100)
    finally:
        store.close()
