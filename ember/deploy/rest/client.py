"""Spark's RestSubmissionClient in Python (standard library only).

Why: `spark-submit --kill/--status` and REST cluster submissions talk to the master's REST
gateway; Ember's submit tooling needs the same master-list failover and the same error
semantics (§6.6) so that it behaves like Spark against Ember and against a real Spark master:
masters are tried in order, an unreachable one is skipped, a standby's answer
(`Current state is not alive...`) is skipped, and only when every master is unreachable does
the caller get `SubmitRestConnectionException` (which triggers spark-submit's fallback to
the legacy RPC gateway).
"""
from __future__ import annotations

import hashlib
import http.client
import json
import logging
import ssl
import urllib.error
import urllib.request
from typing import Any, Callable, Mapping, NamedTuple, Optional, Union
from urllib.parse import quote

from ember.version import SPARK_VERSION
from ember.web import jws
from ember.deploy.rest.protocol import (
    PROTOCOL_VERSION, SC_UNKNOWN_PROTOCOL_VERSION, CreateSubmissionRequest,
    SubmitRestProtocolException, to_json,
)
from ember.deploy.rest.server import SHA256_HEADER, rest_secret_key

log = logging.getLogger("ember.deploy.rest.RestSubmissionClient")

SUPPORTED_MASTER_PREFIXES = ("spark://",)
DEFAULT_TIMEOUT = 10.0
TOKEN_TTL_SECONDS = 300
_STANDBY_PREFIX = "Current state is not alive"


class SubmitRestConnectionException(SubmitRestProtocolException):
    """No master could be reached (Spark's class of the same name)."""

    java_class = "org.apache.spark.deploy.rest.SubmitRestConnectionException"


class RestResponse(NamedTuple):
    """HTTP status and the response JSON (an ErrorResponse-shaped dict for errors)."""

    status: int
    body: dict[str, Any]


def bearer_token_for(conf: Mapping[str, Any]) -> Optional[str]:
    """A fresh HS256 bearer token for the master's REST gateway, or None when no key is
    configured. The key is resolved by `server.rest_secret_key`, the same function the
    server uses. The token expires after five minutes so one leaked from a log or a proxy
    is not a lasting credential; its `sub` is the local user (for Spark's ACLs)."""
    source = bearer_token_source(conf)
    return source() if source is not None else None


def bearer_token_source(conf: Mapping[str, Any]) -> Optional[Callable[[], str]]:
    """A function minting a fresh token per request (so `--follow` outlives any one
    token), or None when no key is configured."""
    from ember.web.security import current_user, mint_token
    key = rest_secret_key(conf)
    if key is None:
        return None
    user = current_user()
    return lambda: mint_token(key, user, TOKEN_TTL_SECONDS)


def _base_url(master: str, scheme: str = "http") -> str:
    """`spark://h:p` -> `http://h:p/v1/submissions` (Spark's getBaseUrl; https with TLS)."""
    for prefix in SUPPORTED_MASTER_PREFIXES:
        if master.startswith(prefix):
            return (f"{scheme}://{master[len(prefix):].rstrip('/')}/{PROTOCOL_VERSION}"
                    "/submissions")
    raise ValueError("This REST client only supports master URLs that start with one of the "
                     "following: " + ",".join(SUPPORTED_MASTER_PREFIXES))


def _is_standby(body: dict[str, Any]) -> bool:
    message = body.get("message")
    return isinstance(message, str) and message.startswith(_STANDBY_PREFIX)


class RestSubmissionClient:
    """Client of one master or an HA list (`spark://h1:p1,h2:p2`, REST ports)."""

    def __init__(self, masters: str, token: Union[None, str, Callable[[], str]] = None,
                 timeout: float = DEFAULT_TIMEOUT,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        """`token`: a bearer token, or a function minting a fresh one per request.
        `ssl_context`: talk HTTPS, verifying the server with it
        (`ember.web.security.client_ssl_context`)."""
        urls = ([f"spark://{m}" for m in masters[len("spark://"):].split(",")]
                if masters.startswith("spark://") else [masters])
        self.base_urls = [_base_url(m, "https" if ssl_context else "http") for m in urls]
        self.token = token
        self.timeout = timeout
        # Direct connections, as Spark's HttpURLConnection makes: http_proxy from the
        # environment must not see submissions or bearer tokens.
        handlers: list[Any] = [urllib.request.ProxyHandler({})]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)

    # -- public API (Spark's method names, snake_case) --------------------------------------

    def create_submission(self, app_resource: str, main_class: str, app_args: list[str],
                          spark_properties: Mapping[str, str],
                          environment_variables: Mapping[str, str]) -> RestResponse:
        """POST create to each master until one accepts (`success` true); the request is
        validated locally first, like Spark's constructSubmitRequest."""
        request = CreateSubmissionRequest(
            clientSparkVersion=SPARK_VERSION, appResource=app_resource, mainClass=main_class,
            appArgs=list(app_args), sparkProperties=dict(spark_properties),
            environmentVariables=dict(environment_variables))
        body = to_json(request).encode("utf-8")
        return self._each_master(
            lambda base: self._call("POST", f"{base}/create", body, "application/json"),
            lambda r: r.body.get("action") == "CreateSubmissionResponse"
            and r.body.get("success") is True)

    def request_submission_status(self, submission_id: str) -> RestResponse:
        """GET status from each master until one knows the driver."""
        return self._each_master(
            lambda base: self._call("GET", f"{base}/status/{quote(submission_id, safe='')}"),
            lambda r: r.body.get("action") == "SubmissionStatusResponse"
            and r.body.get("success") is True)

    def kill_submission(self, submission_id: str) -> RestResponse:
        return self._each_master(
            lambda base: self._call("POST", f"{base}/kill/{quote(submission_id, safe='')}"),
            self._answered("KillSubmissionResponse"))

    def kill_all_submissions(self) -> RestResponse:
        return self._each_master(lambda base: self._call("POST", f"{base}/killall"),
                                 self._answered("KillAllSubmissionResponse"))

    def clear(self) -> RestResponse:
        return self._each_master(lambda base: self._call("POST", f"{base}/clear"),
                                 self._answered("ClearResponse"))

    def readyz(self) -> RestResponse:
        return self._each_master(lambda base: self._call("GET", f"{base}/readyz"),
                                 self._answered("ReadyzResponse"))

    def upload(self, name: str, data: bytes) -> RestResponse:
        """Ember extension: store `data` on the master; `body["resourceUrl"]` is the
        `ember-upload://` URL to pass as app resource. Stored on the first master that
        takes it, so with an HA list the active master should come first."""
        sha = hashlib.sha256(data).hexdigest()
        return self._each_master(
            lambda base: self._call("POST", f"{base}/upload?name={quote(name, safe='')}", data,
                                    "application/octet-stream", {SHA256_HEADER: sha}),
            lambda r: r.body.get("success") is True)

    def driver_log(self, submission_id: str, log_type: str, offset: int,
                   max_bytes: int) -> RestResponse:
        """Ember extension: a page of a driver's log (`data` base64) through the master."""
        query = f"logType={quote(log_type)}&offset={offset}&maxBytes={max_bytes}"
        return self._each_master(
            lambda base: self._call("GET", f"{base}/logs/{quote(submission_id, safe='')}?"
                                           + query),
            self._answered("DriverLogResult"))

    # -- plumbing ---------------------------------------------------------------------------

    @staticmethod
    def _answered(action: str) -> Callable[[RestResponse], bool]:
        """Spark's rule for kill/killall/clear/readyz: any answer of the right type that
        does not come from a standby master ends the search."""
        return lambda r: r.body.get("action") == action and not _is_standby(r.body)

    def _each_master(self, call: Callable[[str], RestResponse],
                     done: Callable[[RestResponse], bool]) -> RestResponse:
        """Try masters in order until `done`; the last answer otherwise. Raises
        SubmitRestConnectionException only when no master could be reached at all."""
        response: Optional[RestResponse] = None
        last_error: Optional[SubmitRestConnectionException] = None
        for base in self.base_urls:
            try:
                response = call(base)
            except SubmitRestConnectionException as e:
                log.warning("Unable to connect to server %s.", base)
                last_error = e
                continue
            if done(response):
                break
        if response is None:
            raise SubmitRestConnectionException("Unable to connect to server") from last_error
        return response

    def _call(self, method: str, url: str, data: Optional[bytes] = None,
              content_type: Optional[str] = None,
              headers: Optional[Mapping[str, str]] = None) -> RestResponse:
        """One HTTP exchange with Spark's readResponse semantics."""
        if data is None and method == "POST":
            data = b""   # a bodiless POST still says Content-Length: 0
            # ... and JSON, not urllib's default form type, which the server refuses as a
            # possible cross-site request.
            content_type = content_type or "application/json"
        req = urllib.request.Request(url, data=data, method=method)
        if content_type is not None:
            req.add_header("Content-Type", content_type)
            req.add_header("charset", "utf-8")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        token = self.token() if callable(self.token) else self.token
        if token is not None:
            # Unredirected: a redirect must not carry the token elsewhere.
            req.add_unredirected_header(jws.AUTHORIZATION, f"Bearer {token}")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                return RestResponse(resp.status, self._parse_ok(resp.read()))
        except urllib.error.HTTPError as e:
            try:
                raw = e.read()
            finally:
                e.close()
            return RestResponse(e.code, self._parse_error(
                e.code, e.headers.get("Content-Type", ""), raw))
        except TimeoutError as e:
            raise SubmitRestConnectionException("No response from server") from e
        except (urllib.error.URLError, OSError) as e:
            raise SubmitRestConnectionException("Unable to connect to server") from e
        except http.client.HTTPException as e:
            raise SubmitRestProtocolException("Malformed response received from server") from e

    @staticmethod
    def _parse_ok(raw: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise SubmitRestProtocolException("Malformed response received from server") from e
        if not isinstance(body, dict) or not isinstance(body.get("action"), str):
            raise SubmitRestProtocolException("Malformed response received from server")
        return body

    @staticmethod
    def _parse_error(code: int, content_type: str, raw: bytes) -> dict[str, Any]:
        """A non-200 answer as an ErrorResponse dict: the server's JSON when it sent one,
        else its text as the message (Spark wraps the error stream the same way)."""
        text = raw.decode("utf-8", errors="replace")
        if code == 500 and "application/json" not in content_type:
            raise SubmitRestProtocolException(f"Server responded with exception:\n{text}")
        try:
            body = json.loads(text)
        except ValueError:
            body = None
        if not isinstance(body, dict):
            body = {"action": "ErrorResponse", "message": text}
        if code == SC_UNKNOWN_PROTOCOL_VERSION:
            body.setdefault("highestProtocolVersion", PROTOCOL_VERSION)
        log.error("Server responded with error:\n%s", body.get("message"))
        return body


__all__ = ["RestSubmissionClient", "RestResponse", "SubmitRestConnectionException",
           "bearer_token_for", "bearer_token_source"]
