"""The REST submission gateway over real HTTP (reference §6): StandaloneRestServer in front of
a fake master on a real RpcEnv, its authentication policy, uploads, and RestSubmissionClient."""
from __future__ import annotations

import http.client
import json
import socket
import time
from hashlib import sha256
from typing import Any, Iterator, Optional

import pytest

from ember.deploy.master.uploads import AppResourceStore, UploadError
from ember.deploy.messages import (
    DriverState, DriverStatusResponse, KillAllDriversResponse, KillDriverResponse,
    RequestClearCompletedDriversAndApps, RequestDriverStatus, RequestKillAllDrivers,
    RequestKillDriver, RequestReadyz, RequestSubmitDriver, SubmitDriverResponse,
    UploadAppResource, UploadAppResourceResponse,
)
from ember.web import jws
from ember.deploy.rest.client import (
    RestSubmissionClient, SubmitRestConnectionException, bearer_token_for,
)
from ember.deploy.rest.protocol import DRIVER_WRAPPER_CLASS, SubmitRestProtocolException
from ember.deploy.rest.server import StandaloneRestServer, rest_auth_policy
from ember.rpc import RpcCallContext, RpcEndpoint, RpcEnv

BASE = "/v1/submissions"
DRIVER_ID = "driver-20240101000000-0000"
STANDBY_TEXT = ("Current state is not alive: STANDBY. Can only accept driver submissions in "
                "ALIVE state.")
SECRET = "s" * 32
AUTH_CONF = {"spark.authenticate": "true", "spark.authenticate.secret": SECRET}
STANDBY = "Current state is not alive: STANDBY. Can only kill drivers in ALIVE state."
PLEASE = " Please submit requests through http://[host]:[port]/v1/submissions/..."


class FakeMaster(RpcEndpoint):
    """Answers the REST gateway's asks with canned replies and records every request.
    `fail` lists message types to fail, `silent` ones never to answer."""

    def __init__(self) -> None:
        self.received: list[Any] = []
        self.ready = True
        self.kill_message = "Kill request for driver-1 submitted"
        self.status = DriverStatusResponse(True, DriverState.RUNNING, "worker-1", "10.0.0.2:7078",
                                           None)
        self.fail: set[type] = set()
        self.silent: set[type] = set()
        self.uploads: Optional[AppResourceStore] = None

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        self.received.append(msg)
        if type(msg) in self.silent:
            return
        if type(msg) in self.fail:
            raise RuntimeError("master exploded\nwith a second line")
        if isinstance(msg, RequestSubmitDriver):
            context.reply(SubmitDriverResponse(self.self_ref, True, DRIVER_ID,
                                               f"Driver successfully submitted as {DRIVER_ID}"))
        elif isinstance(msg, RequestKillDriver):
            context.reply(KillDriverResponse(self.self_ref, msg.driverId, True,
                                             self.kill_message))
        elif isinstance(msg, RequestKillAllDrivers):
            context.reply(KillAllDriversResponse(self.self_ref, True,
                                                 "Kill request for all drivers submitted"))
        elif isinstance(msg, RequestDriverStatus):
            context.reply(self.status)
        elif isinstance(msg, RequestClearCompletedDriversAndApps):
            context.reply(True)
        elif isinstance(msg, RequestReadyz):
            context.reply(self.ready)
        elif isinstance(msg, UploadAppResource) and self.uploads is not None:
            # As the real master: stored only while ALIVE (`ready` here), UploadError refused.
            if not self.ready:
                context.reply(UploadAppResourceResponse(False, None, STANDBY_TEXT))
                return
            try:
                context.reply(UploadAppResourceResponse(
                    True, self.uploads.put(msg.name, msg.data, msg.sha256), ""))
            except UploadError as e:
                context.reply(UploadAppResourceResponse(False, None, str(e)))
        else:
            super().receive_and_reply(msg, context)


@pytest.fixture
def env() -> Iterator[RpcEnv]:
    e = RpcEnv.create("rest-test", "127.0.0.1", 0, {"spark.rpc.connect.timeout": "3s"})
    yield e
    e.shutdown()
    e.await_termination(5)


@pytest.fixture
def masters(env: RpcEnv):
    """Factory of fake master endpoints on the shared env."""
    count = [0]

    def make() -> tuple[FakeMaster, Any]:
        count[0] += 1
        fake = FakeMaster()
        return fake, env.setup_endpoint(f"Master{count[0]}", fake)

    return make


@pytest.fixture
def serve(masters):
    """Factory: a started StandaloneRestServer on 127.0.0.1 (free port) and its fake master."""
    servers: list[StandaloneRestServer] = []

    def make(conf: Optional[dict] = None, uploads: Optional[AppResourceStore] = None,
             ) -> tuple[StandaloneRestServer, FakeMaster]:
        fake, ref = masters()
        fake.uploads = uploads
        server = StandaloneRestServer(ref, "spark://127.0.0.1:7077", conf or {}, uploads)
        servers.append(server)
        server.start("127.0.0.1", 0, 0)
        return server, fake

    yield make
    for s in servers:
        s.stop()


def call(server: StandaloneRestServer, method: str, path: str, body: Any = None,
         headers: Optional[dict] = None) -> tuple[int, http.client.HTTPMessage, str]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read().decode("utf-8")
    finally:
        conn.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def create_body(port: int, **over: Any) -> str:
    """§6.3's documented curl request, aimed at the REST port, plus a few driver settings."""
    body: dict[str, Any] = {
        "action": "CreateSubmissionRequest",
        "appArgs": ["/opt/spark/examples/src/main/python/pi.py", "10"],
        "appResource": "", "clientSparkVersion": "",
        "environmentVariables": {"SPARK_LOCAL_IP": "1.2.3.4", "SPARK_FOO": "bar"},
        "mainClass": "org.apache.spark.deploy.SparkSubmit",
        "sparkProperties": {"spark.app.name": "Spark Pi", "spark.driver.cores": "2",
                            "spark.driver.memory": "2g", "spark.driver.supervise": "true",
                            "spark.driver.extraJavaOptions": "-Xss4m -Dx=y",
                            "spark.master": f"spark://master:{port}"}}
    body.update(over)
    return json.dumps(body)


# ---------------------------------------------------------------------------------------------
# Endpoints
# ---------------------------------------------------------------------------------------------

def test_create_builds_the_driver_and_answers_like_spark(serve) -> None:
    server, fake = serve()
    status, headers, text = call(server, "POST", f"{BASE}/create", create_body(server.port),
                                 {"Content-Type": "application/json"})
    assert status == 200
    assert headers["Content-Type"] == "application/json;charset=utf-8"
    assert text == ('{\n  "action" : "CreateSubmissionResponse",\n'
                    f'  "message" : "Driver successfully submitted as {DRIVER_ID}",\n'
                    '  "serverSparkVersion" : "4.1.1",\n'
                    f'  "submissionId" : "{DRIVER_ID}",\n  "success" : true\n}}')
    [msg] = fake.received
    desc = msg.driverDescription
    assert (desc.jarUrl, desc.mem, desc.cores, desc.supervise) == ("", 2048, 2, True)
    cmd = desc.command
    assert cmd.mainClass == DRIVER_WRAPPER_CLASS
    assert cmd.arguments == ["{{WORKER_URL}}", "{{USER_JAR}}",
                             "org.apache.spark.deploy.SparkSubmit", "-c",
                             "spark.app.name=Spark Pi",
                             "/opt/spark/examples/src/main/python/pi.py", "10"]
    assert cmd.environment == {"SPARK_FOO": "bar"}
    assert "-Dspark.master=spark://master:7077" in cmd.javaOpts   # REST port -> RPC port
    assert "-Dspark.driver.memory=2g" in cmd.javaOpts
    assert cmd.javaOpts[-2:] == ["-Xss4m", "-Dx=y"]


def test_create_reports_unknown_fields(serve) -> None:
    server, fake = serve()
    status, _, text = call(server, "POST", f"{BASE}/create",
                           create_body(server.port, extraField=1, appResource="app.jar"))
    assert status == 200
    assert json.loads(text)["unknownFields"] == ["extraField"]
    assert fake.received[0].driverDescription.jarUrl == "app.jar"


def test_status_kill_killall_clear(serve) -> None:
    server, fake = serve()
    status, _, text = call(server, "GET", f"{BASE}/status/{DRIVER_ID}")
    assert status == 200
    assert json.loads(text) == {
        "action": "SubmissionStatusResponse", "driverState": "RUNNING",
        "serverSparkVersion": "4.1.1", "submissionId": DRIVER_ID, "success": True,
        "workerHostPort": "10.0.0.2:7078", "workerId": "worker-1"}
    fake.status = DriverStatusResponse(True, DriverState.FAILED, None, None, "java.io.IOException")
    body = json.loads(call(server, "GET", f"{BASE}/status/{DRIVER_ID}")[2])
    assert body["message"] == "Exception from the cluster:\njava.io.IOException"
    fake.status = DriverStatusResponse(False, None, None, None, None)
    body = json.loads(call(server, "GET", f"{BASE}/status/nope")[2])
    assert body["success"] is False and "driverState" not in body

    status, _, text = call(server, "POST", f"{BASE}/kill/{DRIVER_ID}/ignored")
    assert status == 200
    assert json.loads(text) == {"action": "KillSubmissionResponse",
                                "message": "Kill request for driver-1 submitted",
                                "serverSparkVersion": "4.1.1", "submissionId": DRIVER_ID,
                                "success": True}
    assert json.loads(call(server, "POST", f"{BASE}/killall")[2]) == {
        "action": "KillAllSubmissionResponse",
        "message": "Kill request for all drivers submitted", "serverSparkVersion": "4.1.1",
        "success": True}
    assert json.loads(call(server, "POST", f"{BASE}/clear")[2]) == {
        "action": "ClearResponse", "message": "", "serverSparkVersion": "4.1.1",
        "success": True}
    assert [type(m) for m in fake.received] == [
        RequestDriverStatus, RequestDriverStatus, RequestDriverStatus, RequestKillDriver,
        RequestKillAllDrivers, RequestClearCompletedDriversAndApps]
    assert fake.received[3] == RequestKillDriver(DRIVER_ID)


def test_readyz(serve) -> None:
    server, fake = serve()
    status, _, text = call(server, "GET", f"{BASE}/readyz")
    assert (status, json.loads(text)) == (200, {"action": "ReadyzResponse", "message": "",
                                                "serverSparkVersion": "4.1.1",
                                                "success": True})
    fake.ready = False
    status, _, text = call(server, "GET", f"{BASE}/readyz")
    assert (status, json.loads(text)) == (503, {"action": "ErrorResponse",
                                                "message": "Master is not ready.",
                                                "serverSparkVersion": "4.1.1"})


MALFORMED = "Malformed request: "
BAD_REQUESTS = [
    ("POST", "/create", "{not json", 400,
     MALFORMED + "com.fasterxml.jackson.core.JsonParseException: "),
    ("POST", "/create", "", 400, MALFORMED + "com.fasterxml.jackson.databind.exc."
     "MismatchedInputException: No content to map due to end-of-input"),
    ("POST", "/create", json.dumps({"action": "CreateSubmissionRequest", "appArgs": "x"}), 400,
     MALFORMED + "com.fasterxml.jackson.databind.exc.MismatchedInputException: Cannot "
     "deserialize value of type `java.lang.String[]` from VALUE_STRING"),
    ("POST", "/create", json.dumps({"action": "CreateSubmissionRequest", "mainClass": "M",
                                    "clientSparkVersion": "4.1.1",
                                    "sparkProperties": {"spark.app.name": "a"}}), 400,
     MALFORMED + "org.apache.spark.deploy.rest.SubmitRestProtocolException: Validation of "
     "message CreateSubmissionRequest failed!\n\tCaused by: org.apache.spark.deploy.rest."
     "SubmitRestMissingFieldException: 'appResource' is missing in message "
     "CreateSubmissionRequest."),
    ("POST", "/create", json.dumps({"action": "CreateSubmissionRequest", "appResource": "a",
                                    "clientSparkVersion": "4.1.1",
                                    "sparkProperties": {"spark.app.name": "a"}}), 400,
     MALFORMED + "org.apache.spark.deploy.rest.SubmitRestMissingFieldException: "
     "Main class is missing."),
    ("POST", "/create", json.dumps({"action": "ErrorResponse", "message": "m",
                                    "serverSparkVersion": "1"}), 400,
     "Received message of unexpected type ErrorResponse."),
    ("POST", "/create", json.dumps({"action": "NoSuchRequest"}), 500,
     "Internal server error: java.lang.ClassNotFoundException: "
     "org.apache.spark.deploy.rest.NoSuchRequest"),
    ("POST", "/frobnicate", None, 400, "Missing an action: please specify one of /create, "
     "/kill, /killall, /clear, /status, or /readyz." + PLEASE),
    ("POST", "/kill", None, 400, "Submission ID is missing in kill request."),
    ("GET", "/status/", None, 400, "Submission ID is missing in status request."),
]


@pytest.mark.parametrize("method,action,body,code,message", BAD_REQUESTS)
def test_bad_requests_ask_nothing(serve, method: str, action: str, body: Optional[str],
                                  code: int, message: str) -> None:
    server, fake = serve()
    status, headers, text = call(server, method, BASE + action, body)
    reply = json.loads(text)
    assert status == code
    assert headers["Content-Type"] == "application/json;charset=utf-8"
    assert reply["action"] == "ErrorResponse" and reply["serverSparkVersion"] == "4.1.1"
    assert reply["message"].startswith(message)
    assert fake.received == []


def test_unknown_version_and_wrong_method(serve) -> None:
    server, fake = serve()
    status, _, text = call(server, "POST", "/v2/submissions/create", "{}")
    assert status == 468
    assert json.loads(text) == {"action": "ErrorResponse", "highestProtocolVersion": "v1",
                                "message": "Unknown protocol version 'v2'." + PLEASE,
                                "serverSparkVersion": "4.1.1"}
    status, headers, _ = call(server, "GET", f"{BASE}/create")
    assert (status, headers["Allow"]) == (405, "POST, OPTIONS")
    assert fake.received == []


def test_master_failure_and_timeout_are_500s(serve) -> None:
    server, fake = serve({"spark.rpc.askTimeout": "0.3s"})
    fake.fail.add(RequestKillDriver)
    fake.silent.add(RequestClearCompletedDriversAndApps)
    status, _, text = call(server, "POST", f"{BASE}/kill/{DRIVER_ID}")
    message = json.loads(text)["message"]
    assert status == 500 and "\n" not in message
    assert message.startswith("Internal server error: RpcRemoteError: ")
    status, _, text = call(server, "POST", f"{BASE}/clear")
    assert status == 500
    assert json.loads(text)["message"].startswith("Internal server error: RpcTimeoutError")
    assert call(server, "GET", f"{BASE}/readyz")[0] == 200   # still serving


# ---------------------------------------------------------------------------------------------
# Authentication
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("header,message", [
    (None, "Authorization header is missing."),
    ("Basic dXNlcjpwdw==", "Malformed Authorization header."),
    ("Bearer " + jws.sign_hs256({"sub": "x", "exp": time.time() + 60}, b"w" * 32),
     "JWT Validate Fail"),
    ("Bearer " + jws.sign_hs256({"sub": "x"}, SECRET.encode()), jws.EXPIRATION_REQUIRED),
    ("Bearer " + jws.sign_hs256({"sub": "x", "exp": time.time() + 10 * 86400},
                                SECRET.encode()), "Token lifetime exceeds "
                                                  "spark.ember.ui.token.maxLifetime"),
    ("Bearer not.a.token", "JWT Validate Fail"),
])
def test_jws_refusals_come_first(serve, header: Optional[str], message: str) -> None:
    server, fake = serve(AUTH_CONF)
    headers = {"Authorization": header} if header else {}
    for method, path in (("POST", f"{BASE}/create"), ("GET", "/v9/anything")):
        status, resp_headers, text = call(server, method, path, create_body(server.port),
                                          headers)
        assert (status, text) == (403, message)
        assert resp_headers["Cache-Control"] == "no-cache, no-store, must-revalidate"
    assert fake.received == []


def test_valid_bearer_token_is_accepted(serve) -> None:
    server, fake = serve(AUTH_CONF)
    token = bearer_token_for(AUTH_CONF)
    assert token is not None
    from ember.web.security import current_user
    claims = jws.verify_token(token, SECRET.encode())
    assert claims["sub"] == current_user() and claims["exp"] - claims["iat"] <= 300
    status, _, _ = call(server, "POST", f"{BASE}/create", create_body(server.port),
                        {"Authorization": f"Bearer {token}"})
    assert status == 200 and len(fake.received) == 1


def test_spark_jws_filter_config(serve) -> None:
    key = bytes(range(32))
    conf = {"spark.master.rest.filters": jws.FILTER_CLASS,
            jws.SECRET_KEY_PARAM: jws.b64url_encode(key)}
    server, _ = serve(conf)
    assert call(server, "GET", f"{BASE}/readyz")[0] == 403
    # A token minted for Spark works here, if it expires (Ember requires `exp`).
    token = jws.sign_hs256({"sub": "spark", "exp": int(time.time()) + 600}, key)
    assert call(server, "GET", f"{BASE}/readyz", None,
                {"Authorization": f"Bearer {token}"})[0] == 200
    client = RestSubmissionClient(f"spark://127.0.0.1:{server.port}",
                                  token=bearer_token_for(conf))
    assert client.readyz().status == 200


# ---------------------------------------------------------------------------------------------
# Policy (pure)
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("host", ["127.0.0.1", "127.1.2.3", "localhost", "::1", "[::1]",
                                  "::ffff:127.0.0.1"])
def test_policy_unauthenticated_loopback_is_allowed(host: str) -> None:
    p = rest_auth_policy({}, host)
    assert (p.enabled, p.secret_key, p.reason, p.port) == (True, None, "", 6066)


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "10.1.2.3", "master.example.com"])
def test_policy_unauthenticated_public_is_refused(host: str) -> None:
    p = rest_auth_policy({}, host)
    assert not p.enabled and p.secret_key is None
    assert "\n" not in p.reason
    for hint in ("spark.authenticate", "spark.master.rest.host",
                 "spark.master.rest.allowUnauthenticated=true"):
        assert hint in p.reason
    opted_in = rest_auth_policy({"spark.master.rest.allowUnauthenticated": "true"}, host)
    assert opted_in.enabled and opted_in.secret_key is None and opted_in.reason


def test_policy_secrets(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("_SPARK_AUTH_SECRET", raising=False)
    p = rest_auth_policy(AUTH_CONF, "0.0.0.0")
    assert (p.enabled, p.secret_key, p.reason) == (True, SECRET.encode(), "")
    secret_file = tmp_path / "secret"
    secret_file.write_text("f" * 40 + "\n")
    conf = {"spark.authenticate": "true", "spark.authenticate.secret.file": str(secret_file)}
    assert rest_auth_policy(conf, "0.0.0.0").secret_key == b"f" * 40
    monkeypatch.setenv("_SPARK_AUTH_SECRET", "e" * 32)
    assert rest_auth_policy({"spark.authenticate": "true"}, "::").secret_key == b"e" * 32
    short = rest_auth_policy({**AUTH_CONF, "spark.authenticate.secret": "short"}, "127.0.0.1")
    assert not short.enabled and "32 bytes" in short.reason
    monkeypatch.delenv("_SPARK_AUTH_SECRET")
    with pytest.raises(ValueError, match="secret key must be specified"):
        rest_auth_policy({"spark.authenticate": "true"}, "127.0.0.1")
    with pytest.raises(ValueError, match="not secure enough"):
        rest_auth_policy({"spark.master.rest.filters": jws.FILTER_CLASS,
                          jws.SECRET_KEY_PARAM: jws.b64url_encode(b"k" * 8)}, "127.0.0.1")
    assert bearer_token_for({}) is None


def test_policy_enabled_flag_and_port() -> None:
    off = rest_auth_policy({"spark.master.rest.enabled": "false"}, "127.0.0.1")
    assert not off.enabled and "spark.master.rest.enabled=false" in off.reason
    assert rest_auth_policy({"spark.master.rest.port": "0"}, "127.0.0.1").port == 0
    assert rest_auth_policy({"spark.master.rest.port": "16066"}, "127.0.0.1").port == 16066
    for bad in ("80", "65536", "-1", "abc"):
        with pytest.raises(ValueError, match="spark.master.rest.port"):
            rest_auth_policy({"spark.master.rest.port": bad}, "127.0.0.1")


def test_start_enforces_the_policy(masters) -> None:
    _, ref = masters()
    server = StandaloneRestServer(ref, "spark://127.0.0.1:7077", {})
    with pytest.raises(ValueError, match="non-loopback 0.0.0.0"):
        server.start("0.0.0.0", 0, 0)
    assert server.port == 0


# ---------------------------------------------------------------------------------------------
# Uploads (Ember extension)
# ---------------------------------------------------------------------------------------------

def upload(server: StandaloneRestServer, name: str, data: Any,
           sha: Optional[str]) -> tuple[int, dict]:
    headers = {"X-Ember-Sha256": sha} if sha else {}
    status, _, text = call(server, "POST", f"{BASE}/upload?name={name}", data, headers)
    return status, json.loads(text)


def test_upload_round_trip_and_refusals(serve, tmp_path) -> None:
    store = AppResourceStore(str(tmp_path), max_bytes=1024)
    server, fake = serve(uploads=store)
    data = b"print('hi')\n"
    status, body = upload(server, "app.py", data, sha256(data).hexdigest())
    assert status == 200
    assert body["action"] == "UploadResponse" and body["success"] is True
    assert body["message"] == "" and body["serverSparkVersion"] == "4.1.1"
    assert body["resourceUrl"] == f"ember-upload://{sha256(data).hexdigest()}/app.py"
    assert store.get(body["resourceUrl"]) == (data, sha256(data).hexdigest())

    status, body = upload(server, "app.py", data, "0" * 64)
    assert status == 400 and body["message"].startswith("Checksum mismatch for app.py")
    assert upload(server, "app.py", data, None)[1]["message"] == \
        "Missing the X-Ember-Sha256 header."
    assert upload(server, "..", data, sha256(data).hexdigest())[0] == 400
    big = b"x" * 2048
    status, body = upload(server, "big.bin", big, sha256(big).hexdigest())
    assert status == 413 and "1024 bytes" in body["message"]
    # An iterable body is sent chunked (no Content-Length): refused while reading.
    status, body = upload(server, "big.bin", iter([big[:1000], big[1000:]]),
                          sha256(big).hexdigest())
    assert status == 413
    assert call(server, "GET", f"{BASE}/upload")[0] == 405
    assert all(isinstance(m, UploadAppResource) for m in fake.received)
    # A master that is not the ALIVE leader stores nothing: the client tries the next one.
    fake.ready = False
    status, body = upload(server, "other.py", data, sha256(data).hexdigest())
    assert status == 503 and body["message"] == STANDBY_TEXT


def test_upload_without_store_and_with_client(serve, tmp_path) -> None:
    server, _ = serve()
    status, body = upload(server, "a.py", b"x", "0" * 64)
    assert status == 404 and body["action"] == "ErrorResponse"
    with_store, _ = serve(uploads=AppResourceStore(str(tmp_path)))
    resp = RestSubmissionClient(f"spark://127.0.0.1:{with_store.port}").upload("m y.py", b"abc")
    assert resp.status == 200 and resp.body["resourceUrl"].endswith("/m%20y.py")


# ---------------------------------------------------------------------------------------------
# Client
# ---------------------------------------------------------------------------------------------

def test_client_against_the_server(serve) -> None:
    server, fake = serve()
    client = RestSubmissionClient(f"spark://127.0.0.1:{server.port}")
    resp = client.create_submission("app.jar", "Main", ["1"],
                                    {"spark.app.name": "pi",
                                     "spark.master": f"spark://127.0.0.1:{server.port}"},
                                    {"SPARK_X": "1"})
    assert resp.status == 200 and resp.body["submissionId"] == DRIVER_ID
    desc = fake.received[0].driverDescription
    assert "-Dspark.master=spark://127.0.0.1:7077" in desc.command.javaOpts
    assert client.request_submission_status(DRIVER_ID).body["driverState"] == "RUNNING"
    assert client.kill_submission(DRIVER_ID).body["success"] is True
    assert client.kill_all_submissions().body["action"] == "KillAllSubmissionResponse"
    assert client.clear().body["action"] == "ClearResponse"
    assert client.readyz().body["success"] is True
    fake.ready = False
    assert client.readyz() == (503, {"action": "ErrorResponse",
                                     "message": "Master is not ready.",
                                     "serverSparkVersion": "4.1.1"})


def test_client_needs_the_token(serve) -> None:
    server, _ = serve(AUTH_CONF)
    url = f"spark://127.0.0.1:{server.port}"
    assert RestSubmissionClient(url).readyz() == (
        403, {"action": "ErrorResponse", "message": "Authorization header is missing."})
    assert RestSubmissionClient(url, token=bearer_token_for(AUTH_CONF)).readyz().status == 200


def test_client_failover(serve) -> None:
    dead = free_port()
    with pytest.raises(SubmitRestConnectionException, match="Unable to connect to server"):
        RestSubmissionClient(f"spark://127.0.0.1:{dead}").readyz()
    standby, standby_fake = serve()
    active, active_fake = serve()
    standby_fake.kill_message = STANDBY
    client = RestSubmissionClient(
        f"spark://127.0.0.1:{dead},127.0.0.1:{standby.port},127.0.0.1:{active.port}")
    resp = client.create_submission("app.jar", "Main", [], {"spark.app.name": "a"}, {})
    assert resp.status == 200 and active_fake.received == []   # the first live one accepted
    resp = client.kill_submission(DRIVER_ID)                    # the standby's answer is skipped
    assert resp.body["message"] == "Kill request for driver-1 submitted"
    assert [type(m) for m in active_fake.received] == [RequestKillDriver]
    standby_fake.status = DriverStatusResponse(False, None, None, None, None)
    assert client.request_submission_status(DRIVER_ID).body["workerId"] == "worker-1"


def test_client_url_and_response_rules() -> None:
    for bad in ("local[2]", "http://h:6066", "mesos://h:5050"):
        with pytest.raises(ValueError, match="only supports master URLs that start with one "
                                             "of the following: spark://"):
            RestSubmissionClient(bad)
    assert RestSubmissionClient("spark://a:1,b:2/").base_urls == [
        "http://a:1/v1/submissions", "http://b:2/v1/submissions"]
    with pytest.raises(SubmitRestProtocolException, match="Malformed response received"):
        RestSubmissionClient._parse_ok(b"{broken")
    with pytest.raises(SubmitRestProtocolException,
                       match="Server responded with exception:\n<html>oops"):
        RestSubmissionClient._parse_error(500, "text/html", b"<html>oops")
    assert RestSubmissionClient._parse_error(468, "application/json", b'{"action":"E"}') == {
        "action": "E", "highestProtocolVersion": "v1"}
    assert RestSubmissionClient._parse_error(405, "text/plain", b"no") == {
        "action": "ErrorResponse", "message": "no"}
