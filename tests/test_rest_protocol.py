"""Spark REST submission protocol building blocks: JSON layout, validation texts, routing,
driver-description fields and the JWSFilter check (reference §6)."""
from __future__ import annotations

import base64
import json

import pytest

from ember.web import jws
from ember.deploy.rest.protocol import (
    ClearResponse, CreateSubmissionRequest, CreateSubmissionResponse, ErrorResponse,
    JsonProcessingException, KillAllSubmissionResponse, KillSubmissionResponse, ReadyzResponse,
    SubmissionStatusResponse, SubmitRestMissingFieldException, SubmitRestProtocolException,
    UnexpectedMessageTypeException, UnknownActionException, build_driver_description_fields,
    error_response, malformed_request_message, memory_string_to_mb, parse_message,
    parse_request, replace_placeholder, route, to_json)

PLEASE = " Please submit requests through http://[host]:[port]/v1/submissions/..."

# The 4.0.0 docs' example request (§6.3)
DOC_REQUEST = ('{"action":"CreateSubmissionRequest","appArgs":["/opt/spark/examples/src/main/'
               'python/pi.py","10"],"appResource":"","clientSparkVersion":"",'
               '"environmentVariables":{},"mainClass":"org.apache.spark.deploy.SparkSubmit",'
               '"sparkProperties":{"spark.app.name":"Spark Pi","spark.driver.cores":"1",'
               '"spark.driver.memory":"1g","spark.jars":"","spark.master":'
               '"spark://master:7077"}}')


def req(**over: object) -> str:
    body: dict = {"action": "CreateSubmissionRequest", "appResource": "app.jar",
                  "mainClass": "Main", "clientSparkVersion": "4.1.1",
                  "sparkProperties": {"spark.app.name": "x"}}
    for k, v in over.items():
        if v is ...:
            body.pop(k, None)
        else:
            body[k] = v
    return json.dumps(body)


def props(**kv: str) -> str:
    p = {"spark.app.name": "x"}
    p.update({k.replace("_", "."): v for k, v in kv.items()})
    return req(sparkProperties=p)


# ------------------------------------------------------------------------------ JSON layout

def test_doc_example_response_layout() -> None:
    r = CreateSubmissionResponse(message="Driver successfully submitted as "
                                 "driver-20231124153531-0000", serverSparkVersion="4.0.0",
                                 submissionId="driver-20231124153531-0000", success=True)
    assert to_json(r) == (
        '{\n'
        '  "action" : "CreateSubmissionResponse",\n'
        '  "message" : "Driver successfully submitted as driver-20231124153531-0000",\n'
        '  "serverSparkVersion" : "4.0.0",\n'
        '  "submissionId" : "driver-20231124153531-0000",\n'
        '  "success" : true\n'
        '}')
    # same content as the docs' compact example
    assert json.loads(to_json(r)) == {
        "action": "CreateSubmissionResponse",
        "message": "Driver successfully submitted as driver-20231124153531-0000",
        "serverSparkVersion": "4.0.0", "submissionId": "driver-20231124153531-0000",
        "success": True}


def test_doc_example_request_round_trip_layout() -> None:
    msg, unknown = parse_request(DOC_REQUEST)
    assert unknown == []
    assert msg.appResource == "" and msg.mainClass == "org.apache.spark.deploy.SparkSubmit"
    assert to_json(msg) == (
        '{\n'
        '  "action" : "CreateSubmissionRequest",\n'
        '  "appArgs" : [ "/opt/spark/examples/src/main/python/pi.py", "10" ],\n'
        '  "appResource" : "",\n'
        '  "clientSparkVersion" : "",\n'
        '  "environmentVariables" : { },\n'
        '  "mainClass" : "org.apache.spark.deploy.SparkSubmit",\n'
        '  "sparkProperties" : {\n'
        '    "spark.app.name" : "Spark Pi",\n'
        '    "spark.driver.cores" : "1",\n'
        '    "spark.driver.memory" : "1g",\n'
        '    "spark.jars" : "",\n'
        '    "spark.master" : "spark://master:7077"\n'
        '  }\n'
        '}')
    compact = json.dumps(json.loads(to_json(msg)), separators=(",", ":"))
    assert compact == DOC_REQUEST


def test_keys_alphabetical_nulls_omitted_success_boolean() -> None:
    s = SubmissionStatusResponse(serverSparkVersion="4.1.1", submissionId="d", success=False,
                                 workerId="w", driverState="RUNNING")
    out = to_json(s)
    keys = [line.split('"')[1] for line in out.splitlines()[1:-1]]
    assert keys == sorted(keys) == ["action", "driverState", "serverSparkVersion",
                                    "submissionId", "success", "workerId"]
    assert '"success" : false' in out and "null" not in out and "workerHostPort" not in out
    assert to_json(ErrorResponse(message="m", serverSparkVersion="4.1.1",
                                 unknownFields=[])) == (
        '{\n  "action" : "ErrorResponse",\n  "message" : "m",\n'
        '  "serverSparkVersion" : "4.1.1",\n  "unknownFields" : [ ]\n}')


def test_string_escaping_like_jackson() -> None:
    e = ErrorResponse(message='a"b\\c\nd\x01é/', serverSparkVersion="v")
    assert '"message" : "a\\"b\\\\c\\nd\\u0001é/"' in to_json(e)


def test_every_response_action_and_validation() -> None:
    for cls in (KillAllSubmissionResponse, ClearResponse, ReadyzResponse):
        assert json.loads(to_json(cls(serverSparkVersion="v", success=True, message="")))[
            "action"] == cls.__name__
        with pytest.raises(SubmitRestProtocolException,
                           match=f"^Validation of message {cls.__name__} failed!$") as ei:
            to_json(cls(serverSparkVersion="v"))
        assert str(ei.value.__cause__) == f"'success' is missing in message {cls.__name__}."
    with pytest.raises(SubmitRestProtocolException) as ei:
        to_json(KillSubmissionResponse(serverSparkVersion="v", success=True))
    assert str(ei.value.__cause__) == \
        "'submissionId' is missing in message KillSubmissionResponse."
    with pytest.raises(SubmitRestProtocolException) as ei:
        to_json(ErrorResponse(message="m"))
    assert str(ei.value.__cause__) == "'serverSparkVersion' is missing in message ErrorResponse."


# ------------------------------------------------------------------------------ parsing errors

def _validation_cause(text: str) -> str:
    with pytest.raises(SubmitRestProtocolException) as ei:
        parse_request(text)
    assert str(ei.value) == "Validation of message CreateSubmissionRequest failed!"
    return str(ei.value.__cause__)


def test_action_missing() -> None:
    for text in ('{"appResource":"x"}', '{"action": 3}', '[1]'):
        with pytest.raises(SubmitRestMissingFieldException) as ei:
            parse_request(text)
        assert str(ei.value) == f"Action field not found in JSON:\n{text}"


def test_malformed_json_and_types() -> None:
    for text in ("{not json", "", req(appResource={"a": 1}), req(appArgs="x"),
                 req(sparkProperties=["a"])):
        with pytest.raises(JsonProcessingException) as ei:
            parse_request(text)
        assert isinstance(ei.value, SubmitRestProtocolException)
        assert malformed_request_message(ei.value).startswith(
            "Malformed request: com.fasterxml.jackson.")


def test_scalar_coercion_like_jackson() -> None:
    text = req(appArgs=["@"], sparkProperties={"spark.app.name": "x", "spark.driver.cores": 2})
    msg, _ = parse_request(text.replace('["@"]', '[1, 2.50, true]'))
    assert msg.appArgs == ["1", "2.50", "true"]
    assert msg.sparkProperties == {"spark.app.name": "x", "spark.driver.cores": "2"}


def test_missing_fields_texts() -> None:
    assert _validation_cause(req(sparkProperties=...)) == "No Spark properties set!"
    assert _validation_cause(req(appResource=...)) == \
        "'appResource' is missing in message CreateSubmissionRequest."
    assert _validation_cause(req(clientSparkVersion=...)) == \
        "'clientSparkVersion' is missing in message CreateSubmissionRequest."
    assert _validation_cause(req(sparkProperties={})) == \
        "'spark.app.name' is missing in message CreateSubmissionRequest."
    with pytest.raises(SubmitRestProtocolException) as ei:
        parse_request(req(appResource=...))
    assert isinstance(ei.value.__cause__, SubmitRestMissingFieldException)
    assert malformed_request_message(ei.value) == (
        "Malformed request: org.apache.spark.deploy.rest.SubmitRestProtocolException: "
        "Validation of message CreateSubmissionRequest failed!\n\tCaused by: "
        "org.apache.spark.deploy.rest.SubmitRestMissingFieldException: "
        "'appResource' is missing in message CreateSubmissionRequest.")


@pytest.mark.parametrize("key,kind,value", [
    ("spark.driver.supervise", "boolean", "yes"),
    ("spark.driver.cores", "numeric", "two"),
    ("spark.cores.max", "numeric", "1x"),
    ("spark.driver.memory", "memory", "1.5g"),
    ("spark.executor.memory", "memory", "lots"),
])
def test_property_type_checks(key: str, kind: str, value: str) -> None:
    text = req(sparkProperties={"spark.app.name": "x", key: value})
    assert _validation_cause(text) == \
        f"Property '{key}' expected {kind} value: actual was '{value}'."


def test_property_type_checks_accept_spark_forms() -> None:
    parse_request(req(sparkProperties={
        "spark.app.name": "x", "spark.driver.supervise": "TRUE", "spark.driver.cores": "1.5",
        "spark.cores.max": " 4 ", "spark.driver.memory": "512M",
        "spark.executor.memory": "1000"}))


def test_unexpected_type_and_unknown_action() -> None:
    text = json.dumps({"action": "KillSubmissionResponse", "serverSparkVersion": "v",
                       "submissionId": "d", "success": True})
    with pytest.raises(UnexpectedMessageTypeException) as ei:
        parse_request(text)
    assert str(ei.value) == "Received message of unexpected type KillSubmissionResponse."
    # an invalid response message fails validation first
    with pytest.raises(SubmitRestProtocolException,
                       match="^Validation of message KillSubmissionResponse failed!$"):
        parse_request(json.dumps({"action": "KillSubmissionResponse"}))
    with pytest.raises(UnknownActionException):
        parse_request(json.dumps({"action": "Nope"}))
    assert isinstance(parse_message(text), KillSubmissionResponse)


def test_unknown_fields() -> None:
    text = json.dumps({"action": "CreateSubmissionRequest", "appResource": "a",
                       "clientSparkVersion": "4", "sparkProperties": {"spark.app.name": "n"},
                       "foo": 1, "mainClass": None, "bar": {"x": 1}})
    _, unknown = parse_request(text)
    assert unknown == ["foo", "mainClass", "bar"]
    _, unknown = parse_request(req())
    assert unknown == []


# ------------------------------------------------------------------------------ routing

@pytest.mark.parametrize("method,path,handler,sid", [
    ("POST", "/v1/submissions/create", "create", None),
    ("POST", "/v1/submissions/create/extra", "create", None),
    ("POST", "/v1/submissions/kill/driver-1", "kill", "driver-1"),
    ("POST", "/v1/submissions/kill/driver-1/anything", "kill", "driver-1"),
    ("POST", "/v1/submissions/killall", "killall", None),
    ("GET", "/v1/submissions/status/driver-2", "status", "driver-2"),
    ("GET", "/v1/submissions/status/driver-2?x=1", "status", "driver-2"),
    ("POST", "/v1/submissions/clear", "clear", None),
    ("GET", "/v1/submissions/readyz", "readyz", None),
])
def test_route_handlers(method: str, path: str, handler: str, sid: str | None) -> None:
    r = route(method, path)
    assert r.ok and r.handler == handler and r.submission_id == sid and r.status == 200


@pytest.mark.parametrize("path,status,message", [
    ("/", 400, "Missing protocol version."),
    ("", 400, "Missing protocol version."),
    ("/v1", 400, "Missing the /submissions prefix."),
    ("/v1/", 400, "Missing the /submissions prefix."),
    ("/v1/submissions", 400, "Missing an action: please specify one of /create, /kill, "
     "/killall, /clear, /status, or /readyz."),
    ("/v1/submissions/bogus/x", 400, "Missing an action: please specify one of /create, "
     "/kill, /killall, /clear, /status, or /readyz."),
    ("/v2/submissions/create", 468, "Unknown protocol version 'v2'."),
    ("/v1/foo", 468, "Unknown protocol version 'v1'."),
    ("/x", 468, "Unknown protocol version 'x'."),
])
def test_route_errors(path: str, status: int, message: str) -> None:
    for method in ("GET", "POST", "DELETE"):
        r = route(method, path)
        assert not r.ok and r.status == status and r.message == message + PLEASE
        body = json.loads(to_json(r.error_response("4.1.1")))
        assert body["message"] == message + PLEASE and body["serverSparkVersion"] == "4.1.1"
        if status == 468:
            assert r.highest_protocol_version == "v1" and body["highestProtocolVersion"] == "v1"
        else:
            assert "highestProtocolVersion" not in body


def test_route_missing_ids_and_405() -> None:
    for path in ("/v1/submissions/kill", "/v1/submissions/kill/", "/v1/submissions/kill//x"):
        r = route("POST", path)
        assert (r.status, r.message) == (400, "Submission ID is missing in kill request.")
    r = route("GET", "/v1/submissions/status/")
    assert (r.status, r.message) == (400, "Submission ID is missing in status request.")
    for method, path in (("GET", "/v1/submissions/create"), ("POST", "/v1/submissions/status/d"),
                         ("GET", "/v1/submissions/kill/d"), ("POST", "/v1/submissions/readyz"),
                         ("PUT", "/v1/submissions/clear"), ("GET", "/v1/submissions/killall")):
        r = route(method, path)
        assert r.status == 405 and not r.ok and r.error_response("v") is None
    assert route("HEAD", "/v1/submissions/readyz").handler == "readyz"


# ------------------------------------------------------------------------------ driver description

def test_driver_description_defaults_and_required() -> None:
    msg = CreateSubmissionRequest(appResource="a.jar", mainClass="M", clientSparkVersion="4",
                                  sparkProperties={"spark.app.name": "n"})
    d = build_driver_description_fields(msg, "spark://m:7077", 6066, {})
    assert (d["jarUrl"], d["mem"], d["cores"], d["supervise"]) == ("a.jar", 1024, 1, False)
    assert d["master"] == "spark://m:7077"
    assert d["command"]["arguments"] == ["{{WORKER_URL}}", "{{USER_JAR}}", "M"]
    with pytest.raises(SubmitRestMissingFieldException, match="^Application jar is missing.$"):
        build_driver_description_fields(CreateSubmissionRequest(mainClass="M"), "spark://m:1",
                                        6066, {})
    with pytest.raises(SubmitRestMissingFieldException, match="^Main class is missing.$"):
        build_driver_description_fields(CreateSubmissionRequest(appResource=""), "spark://m:1",
                                        6066, {})


def test_driver_description_from_doc_request() -> None:
    msg, _ = parse_request(DOC_REQUEST)
    env = {"HOME": "/root"}
    msg.sparkProperties["spark.driver.supervise"] = "true"
    msg.sparkProperties["spark.driver.memory"] = "2g"
    msg.sparkProperties["spark.driver.cores"] = "3"
    d = build_driver_description_fields(msg, "spark://active:7077", 6066, env)
    assert (d["mem"], d["cores"], d["supervise"]) == (2048, 3, True)
    assert d["master"] == "spark://master:7077"
    assert d["command"]["arguments"] == [
        "{{WORKER_URL}}", "{{USER_JAR}}", "org.apache.spark.deploy.SparkSubmit",
        "-c", "spark.app.name=Spark Pi", "/opt/spark/examples/src/main/python/pi.py", "10"]
    assert "-Dspark.master=spark://master:7077" in d["command"]["javaOpts"]


def test_placeholders_env_filter_and_port_rewrite() -> None:
    msg = CreateSubmissionRequest(
        appResource="a", mainClass="M", clientSparkVersion="4", appArgs=["{{HOME}}"],
        sparkProperties={"spark.app.name": "n", "spark.secret": "{{TOKEN}}",
                         "spark.other": "{{UNSET}}", "spark.mixed": "x{{TOKEN}}",
                         "spark.master": "spark://h1:6066,h2:6066",
                         "spark.driver.memory": "512m"},
        environmentVariables={"A": "{{TOKEN}}", "SPARK_LOCAL_IP": "1.2.3.4",
                              "SPARK_LOCAL_HOSTNAME": "h", "SPARK_LOCAL_DIRS": "/tmp"})
    env = {"TOKEN": "s3cr3t", "HOME": "/root"}
    d = build_driver_description_fields(msg, "spark://h1:7077", 6066, env)
    assert d["sparkProperties"]["spark.secret"] == "s3cr3t"
    assert d["sparkProperties"]["spark.other"] == "{{UNSET}}"
    assert d["sparkProperties"]["spark.mixed"] == "x{{TOKEN}}"
    assert d["environment"] == {"A": "s3cr3t", "SPARK_LOCAL_DIRS": "/tmp"}
    assert d["master"] == "spark://h1:7077,h2:7077"
    assert d["sparkProperties"]["spark.master"] == "spark://h1:7077,h2:7077"
    assert d["appArgs"] == ["{{HOME}}"]  # args are not placeholders
    assert d["mem"] == 512
    assert replace_placeholder("{{TOKEN}}", env) == "s3cr3t"
    assert replace_placeholder("{{TOKEN}", env) == "{{TOKEN}"


def test_memory_string_to_mb() -> None:
    assert memory_string_to_mb("1g") == 1024
    assert memory_string_to_mb("512m") == 512
    assert memory_string_to_mb("2048k") == 2
    assert memory_string_to_mb("1048576") == 1  # bare number = bytes
    for bad in ("1.5g", "1x", "", "-1m"):
        with pytest.raises(ValueError):
            memory_string_to_mb(bad)


def test_error_response_helper() -> None:
    e = error_response("boom", "4.1.1")
    assert json.loads(to_json(e)) == {"action": "ErrorResponse", "message": "boom",
                                      "serverSparkVersion": "4.1.1"}


# ------------------------------------------------------------------------------ JWS

KEY = b"k" * 32


def test_jws_good_token() -> None:
    token = jws.sign_hs256({"sub": "ember"}, KEY)
    header = json.loads(base64.urlsafe_b64decode(token.split(".")[0] + "=="))
    assert header == {"alg": "HS256", "typ": "JWT"}
    assert jws.verify_authorization(f"Bearer {token}", KEY) is None
    assert jws.verify_token(token, KEY) == {"sub": "ember"}


def test_jws_missing_and_malformed_header() -> None:
    token = jws.sign_hs256({}, KEY)
    assert jws.verify_authorization(None, KEY) == "Authorization header is missing."
    for h in (token, f"bearer {token}", f"Basic {token}", "Bearer", ""):
        assert jws.verify_authorization(h, KEY) == "Malformed Authorization header."


def test_jws_validate_fail() -> None:
    good = jws.sign_hs256({"a": 1}, KEY)
    h, p, s = good.split(".")
    none_token = jws.sign_hs256({"a": 1}, KEY, header={"alg": "none"})
    cases = [
        jws.sign_hs256({"a": 1}, b"x" * 32),                      # wrong secret
        none_token, none_token + "AAAA",                          # alg=none
        f"{h}.{p}", f"{h}.{p}.{s}.x", "abc",                      # not three parts
        f"{h}.{p}.{s[:-2]}",                                      # truncated signature
        f"{jws.b64url_encode(b'not json')}.{p}.{s}",              # malformed header JSON
        f"{h}.{p}.{s}=",                                          # not base64url
        jws.sign_hs256({"a": 1}, KEY, header={"alg": "HS512"}),   # key too short for HS512
        jws.sign_hs256({"exp": 1}, KEY),                          # expired
        jws.sign_hs256({"nbf": 4e9}, KEY),                        # not yet valid
        "",
    ]
    for token in cases:
        assert jws.verify_authorization(f"Bearer {token}", KEY) == "JWT Validate Fail", token
    # a tampered payload with the original signature
    other = jws.b64url_encode(b'{"a":2}')
    tampered = f"{h}.{other}.{s}"
    assert jws.verify_authorization(f"Bearer {tampered}", KEY) == "JWT Validate Fail"


def test_jws_misc() -> None:
    long_key = b"z" * 64
    t = jws.sign_hs256({"exp": 4e9}, long_key, header={"alg": "HS512", "typ": "JWT"})
    assert jws.verify_authorization(f"Bearer {t}", long_key) is None
    t = jws.sign_hs256({}, KEY)
    assert jws.verify_authorization(f"Bearer {t}", KEY, require_expiration=True) == \
        "Authorization token does not carry a required expiration."
    assert jws.CACHE_CONTROL == "no-cache, no-store, must-revalidate"
    assert jws.load_secret_key(jws.b64url_encode(KEY)) == KEY
    with pytest.raises(ValueError):
        jws.load_secret_key(jws.b64url_encode(b"short"))
