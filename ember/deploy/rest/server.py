"""Spark's StandaloneRestServer (`/v1/submissions/...`, port 6066) on aiohttp.

Why a thin layer: every protocol decision (messages, Jackson JSON, validation texts, routing,
the driver description) lives in the pure `protocol` module and the token check in `jws`;
this module only moves bytes between HTTP and the master's RPC endpoint. Like the master's
web UI it runs on its own thread and event loop (`WebServerThread`) and reaches the master
only through asks, so a slow or dead master can never stall the RPC loop, and every failure
becomes an HTTP answer instead of a crash.

Security (CVE-2018-11770 / CVE-2018-17190: a submission is remote code execution): the
server refuses to start unauthenticated on anything but a loopback address unless the user
explicitly opts in, and with a secret configured every request must carry an HS256 bearer
token with an `exp` no further than spark.ember.ui.token.maxLifetime, checked before the
request is even routed (see `rest_auth_policy`); its `sub` is checked against Spark's ACLs
(view for status, logs and readyz, modify for create, kill, clear and upload). Before that,
as for every Ember web surface (`ember.web.security`): the Host header must name this
server (DNS rebinding), a POST from a foreign Origin is refused, and so is a POST with a
content type a web page may send cross-site without a CORS preflight (text/plain, forms) -
the gateway speaks JSON (and octet-stream uploads with their checksum header). With
spark.ssl.standalone.enabled it serves HTTPS, like the master's UI.
"""
from __future__ import annotations

import asyncio
import base64
import ipaddress
import logging
import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional
from urllib.parse import unquote

from aiohttp import web

from ember import config
from ember.version import SPARK_VERSION
from ember.deploy.master.state import BACKUP_STANDALONE_MASTER_PREFIX
from ember.deploy.master.uploads import DEFAULT_MAX_BYTES, AppResourceStore
from ember.deploy.messages import (
    Command, DriverDescription, DriverLogResponse, DriverStatusResponse,
    KillAllDriversResponse, KillDriverResponse, RequestClearCompletedDriversAndApps,
    RequestDriverLog, RequestDriverStatus, RequestKillAllDrivers, RequestKillDriver,
    RequestReadyz, RequestSubmitDriver, SubmitDriverResponse, UploadAppResource,
    UploadAppResourceResponse, NOT_RECORDED_PREFIX,
)
from ember.deploy.resources import ResourceError, driver_resource_requirements
from ember.web import jws
from ember.deploy.rest.protocol import (
    BASE_CONTEXT, ClearResponse, CreateSubmissionResponse, KillAllSubmissionResponse,
    KillSubmissionResponse, ReadyzResponse, SubmissionStatusResponse, SubmitRestProtocolException,
    SubmitRestProtocolResponse, UnexpectedMessageTypeException, UnknownActionException,
    build_driver_description_fields, error_response, placeholder_env, format_exception, malformed_request_message,
    parse_request, route, to_json,
)
from ember.web.server import WebServerThread, request_done
from ember.web.security import (
    MODIFY, SAFE_METHODS, VIEW, HttpGuard, cors_simple_content_type, server_ssl_context,
    verify_token,
)
from ember.rpc import RpcEndpointRef, RpcError
from ember.rpc.bind import bind_with_retries
from ember.rpc.config import ASK_TIMEOUT, AUTH, resolve_secret

log = logging.getLogger("ember.deploy.rest.StandaloneRestServer")

SERVICE_NAME = "RestSubmissionServer"
REST_ENABLED = "spark.master.rest.enabled"
REST_PORT = "spark.master.rest.port"
REST_HOST = "spark.master.rest.host"
REST_FILTERS = "spark.master.rest.filters"
REST_ALLOW_UNAUTHENTICATED = "spark.master.rest.allowUnauthenticated"
DEFAULT_REST_PORT = config.REGISTRY[REST_PORT].default
UPLOAD_PATH = f"{BASE_CONTEXT}/upload"
LOGS_PATH = f"{BASE_CONTEXT}/logs/"
SHA256_HEADER = "X-Ember-Sha256"
JSON_CONTENT_TYPE = "application/json;charset=utf-8"  # Jetty's spelling (no space)
_HS256_MIN_KEY_BYTES = 32


# ---------------------------------------------------------------------------------------------
# Authentication policy (pure)
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RestPolicy:
    """Whether the REST server may run and how it authenticates.

    `reason` says why it is off, or warns when it runs unauthenticated on a non-loopback
    address by explicit opt-in; it is empty otherwise. `port` is the validated
    spark.master.rest.port."""

    enabled: bool
    secret_key: Optional[bytes]
    reason: str
    port: int = DEFAULT_REST_PORT


def rest_secret_key(conf: Mapping[str, Any]) -> Optional[bytes]:
    """The HMAC key REST bearer tokens are signed with, or None when none is configured.

    The one place both the server and `client.bearer_token_for` resolve it, so they cannot
    disagree. Spark's own JWSFilter setting (`spark.master.rest.filters` naming
    `org.apache.spark.ui.JWSFilter`, base64url key in `...JWSFilter.param.secretKey`) wins,
    as it is REST-specific; otherwise `spark.authenticate=true` makes the RPC secret (conf,
    secret file or `_SPARK_AUTH_SECRET`, resolved exactly as the RPC layer does) the key,
    as its UTF-8 bytes. Raises ValueError for a bad key or a missing secret."""
    filters = config.read(conf, REST_FILTERS) or []
    if jws.FILTER_CLASS in filters:
        return jws.load_secret_key(conf.get(jws.SECRET_KEY_PARAM))
    if config.read(conf, AUTH):
        return resolve_secret(conf)
    return None


def is_loopback_host(host: str) -> bool:
    """127.0.0.0/8, ::1 (also IPv4-mapped) or `localhost`. Other names are not resolved:
    a name may resolve differently at bind time, so only literal loopback counts."""
    h = host.strip().strip("[]").rstrip(".").lower()
    if h == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(h)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback


def _rest_port(conf: Mapping[str, Any]) -> int:
    raw = conf.get(REST_PORT)
    try:
        port = config.read(conf, REST_PORT)
    except ValueError:
        port = -1
    if port != 0 and not 1024 <= port <= 65535:
        raise ValueError(f"{REST_PORT} should be 0 or between 1024 and 65535, but was {raw}")
    return port


def rest_auth_policy(conf: Mapping[str, str], host: str) -> RestPolicy:
    """Decide whether the REST gateway runs on `host` (spark.master.rest.host, by default
    the master's host) and with which bearer-token key.

    Spark 4.1 turns REST on by default but has no authentication for it besides the opt-in
    JWSFilter, so an unsecured 4.1 master accepts code from anyone who can reach port 6066.
    Ember keeps the 4.1 default only where it is safe: with a key (tokens required), on a
    loopback address, or when the user explicitly accepts the risk. Raises ValueError for an
    invalid port, key or secret configuration (a misconfiguration must stop the master, not
    silently drop authentication)."""
    port = _rest_port(conf)
    if not config.read(conf, REST_ENABLED):
        return RestPolicy(False, None, f"REST submission server disabled ({REST_ENABLED}=false).",
                          port)
    key = rest_secret_key(conf)
    if key is not None:
        if len(key) < _HS256_MIN_KEY_BYTES:
            return RestPolicy(
                False, None,
                f"REST submission server disabled: spark.authenticate.secret is shorter than "
                f"{_HS256_MIN_KEY_BYTES} bytes, too weak to sign HS256 bearer tokens; use a "
                f"longer secret or set {REST_ENABLED}=false.", port)
        return RestPolicy(True, key, "", port)
    if is_loopback_host(host):
        return RestPolicy(True, None, "", port)
    if config.read(conf, REST_ALLOW_UNAUTHENTICATED):
        return RestPolicy(
            True, None,
            f"REST submission server on {host} accepts unauthenticated submissions "
            f"({REST_ALLOW_UNAUTHENTICATED}=true): anyone reaching it can run code.", port)
    return RestPolicy(
        False, None,
        f"REST submission server disabled: it would accept unauthenticated submissions on "
        f"non-loopback {host or '<all interfaces>'}; set spark.authenticate=true with "
        f"spark.authenticate.secret, bind {REST_HOST} to 127.0.0.1, or set "
        f"{REST_ALLOW_UNAUTHENTICATED}=true to accept the risk.", port)


# ---------------------------------------------------------------------------------------------
# The server
# ---------------------------------------------------------------------------------------------

@dataclass
class UploadResponse(SubmitRestProtocolResponse):
    """Ember's answer to `/upload`: the URL a CreateSubmissionRequest's appResource names."""

    # Field names are the JSON keys (Spark's REST protocol style), hence camelCase.
    resourceUrl: Optional[str] = None  # noqa: N815


@dataclass
class DriverLogResult(SubmitRestProtocolResponse):
    """Ember's answer to `/logs/<id>`: a page of a driver's stdout/stderr (base64 `data`)
    and the master's view of the driver, so `ember logs --follow` works over REST too."""

    # Field names are the JSON keys (Spark's REST protocol style), hence camelCase.
    submissionId: Optional[str] = None  # noqa: N815
    data: Optional[str] = None
    offset: Optional[int] = None
    nextOffset: Optional[int] = None  # noqa: N815
    totalLength: Optional[int] = None  # noqa: N815
    driverState: Optional[str] = None  # noqa: N815
    exitStatus: Optional[int] = None  # noqa: N815


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


class StandaloneRestServer:
    """Spark's StandaloneRestServer: REST requests in, master asks out (see module doc)."""

    def __init__(self, master_ref: RpcEndpointRef, master_rpc_url: str,
                 conf: Mapping[str, str], uploads: Optional[AppResourceStore] = None,
                 server_version: str = SPARK_VERSION) -> None:
        self.master_ref = master_ref
        self.master_rpc_url = master_rpc_url
        self.conf = conf
        self.uploads = uploads
        self.server_version = server_version
        self.port = 0
        self.max_body = uploads.max_bytes if uploads is not None else DEFAULT_MAX_BYTES
        self._ask_timeout = config.read(conf, ASK_TIMEOUT)
        self._secret_key: Optional[bytes] = None
        self.guard: Optional[HttpGuard] = None
        self.scheme = "http"
        self._server = WebServerThread("StandaloneRestServer")

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, host: str, port: int, max_retries: int) -> int:
        """Bind (Spark's startServiceOnPort retries) and serve; returns the bound port.

        Enforces `rest_auth_policy` itself so no caller can expose an unauthenticated
        gateway by mistake: ValueError(reason) when the policy says off, OSError when no
        port can be bound."""
        policy = rest_auth_policy(self.conf, host)
        if not policy.enabled:
            raise ValueError(policy.reason)
        if policy.reason:
            log.warning(policy.reason)
        self._secret_key = policy.secret_key
        tls = server_ssl_context(self.conf, "standalone")
        guard = HttpGuard(self.conf, host, key=policy.secret_key, use_cluster_secret=False,
                          tls=tls is not None)
        sock = bind_with_retries(SERVICE_NAME, host, port, max_retries)
        self.port = guard.port = sock.getsockname()[1]
        self.guard = guard
        self.scheme = "https" if tls is not None else "http"
        # +1: aiohttp refuses a body once its size reaches client_max_size.
        app = web.Application(client_max_size=self.max_body + 1)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        app.on_response_prepare.append(_hide_server_banner)
        self._server.start(sock, app, ssl_context=tls, limits=guard.limits)
        log.info("Started REST server for submitting applications on %s with port %d",
                 host, self.port)
        return self.port

    def stop(self) -> None:
        """Close the socket and connections, stop the thread. Idempotent."""
        self._server.stop()

    # -- responses --------------------------------------------------------------------------

    def _json(self, msg: SubmitRestProtocolResponse, status: int = 200) -> web.Response:
        """Spark's `sendResponse`: a reply that fails validation becomes a 500."""
        try:
            text = to_json(msg)
        except SubmitRestProtocolException as e:
            return self._error(500, "Internal server error: "
                               + format_exception(e).splitlines()[0])
        return web.Response(status=status, body=text.encode("utf-8"),
                            headers={"Content-Type": JSON_CONTENT_TYPE})

    def _error(self, status: int, message: str, highest: Optional[str] = None) -> web.Response:
        return self._json(error_response(message, self.server_version, highest), status)

    # -- dispatch ---------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            response = await self._answer(request)
        finally:
            request_done(request)
        if request.can_read_body:
            # Answered without reading the body (403, 413, ...): close the connection
            # rather than read the rest or parse it as the next request.
            response.force_close()
        return response

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        """Authentication first (JWSFilter sits in front of every servlet), then the size
        limit, then routing; any failure is an answer, never a crash of the server."""
        refused = self._refused(request)
        if refused is not None:
            return refused
        too_large = (f"Request body is larger than the {self.max_body} bytes allowed "
                     "(spark.ember.submit.maxUploadSize).")
        if (request.content_length or 0) > self.max_body:
            return self._error(413, too_large)
        try:
            return await self._handle(request)
        except web.HTTPRequestEntityTooLarge:
            return self._error(413, too_large)
        except RpcError as e:
            log.warning("Master did not answer %s %s: %s", request.method, request.path, e)
            return self._error(500, "Internal server error: " + _one_line(e))
        except Exception as e:  # noqa: BLE001 - a bug must not take the gateway down
            log.exception("Error serving %s %s", request.method, request.path)
            return self._error(500, "Internal server error: " + _one_line(e))

    def _refused(self, request: web.Request) -> Optional[web.Response]:
        """Host, Origin and content type (cross-site and DNS-rebinding requests), then the
        JWSFilter check, the token's lifetime and the ACL (see the module doc)."""
        guard = self.guard
        assert guard is not None
        headers = request.headers
        unsafe = request.method not in SAFE_METHODS
        if not guard.host_ok(headers.get("Host")):
            return self._error(403, "Host header does not name this server.")
        if unsafe and not guard.origin_ok(headers.get("Origin")):
            return self._error(403, "Cross-origin request refused.")
        if unsafe and cors_simple_content_type(headers.get("Content-Type")):
            return self._error(415, "Requests that change state must be sent as "
                                    "application/json.")
        user: Optional[str] = None
        if self._secret_key is not None:
            header = headers.get(jws.AUTHORIZATION)
            denied = jws.verify_authorization(header, self._secret_key,
                                              require_expiration=True)
            if denied is None:
                try:
                    user = verify_token(header[len("Bearer "):], self._secret_key,
                                        guard.max_lifetime)
                except ValueError as e:
                    denied = str(e)
            if denied is not None:
                return web.Response(status=jws.FORBIDDEN, text=denied,
                                    headers={"Cache-Control": jws.CACHE_CONTROL})
        denial = guard.authorize(user, MODIFY if unsafe else VIEW)
        if denial is not None:
            return self._error(403, denial.text.split(": ", 1)[-1].strip())
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw_path = request.raw_path
        if unquote(raw_path.split("?", 1)[0]).rstrip("/") == UPLOAD_PATH:
            if request.method != "POST":
                return web.Response(status=405, headers={"Allow": "POST"},
                                    text=f"HTTP method {request.method} is not supported "
                                         "by this URL")
            return await self._upload(request)
        if request.method == "GET" and raw_path.startswith(LOGS_PATH):
            return await self._logs(request, unquote(raw_path.split("?", 1)[0])[len(LOGS_PATH):])
        r = route(request.method, raw_path)
        if r.handler is None:
            if r.status == 405:
                return web.Response(status=405, text=r.message or "",
                                    headers={"Allow": ", ".join(r.allow)})
            body = r.error_response(self.server_version)
            assert body is not None
            return self._json(body, r.status)
        if r.handler == "options":
            return web.Response(status=200, headers={"Allow": ", ".join(r.allow)})
        v = self.server_version
        if r.handler == "create":
            return await self._create(request)
        if r.handler == "kill":
            assert r.submission_id is not None
            k = await self._ask(RequestKillDriver(r.submission_id), KillDriverResponse)
            return self._json(KillSubmissionResponse(
                message=k.message, serverSparkVersion=v, success=k.success,
                submissionId=r.submission_id))
        if r.handler == "killall":
            ka = await self._ask(RequestKillAllDrivers(), KillAllDriversResponse)
            return self._json(KillAllSubmissionResponse(
                message=ka.message, serverSparkVersion=v, success=ka.success))
        if r.handler == "status":
            assert r.submission_id is not None
            s = await self._ask(RequestDriverStatus(r.submission_id), DriverStatusResponse)
            return self._json(SubmissionStatusResponse(
                message=(f"Exception from the cluster:\n{s.exception}"
                         if s.exception is not None else None),
                serverSparkVersion=v, success=s.found, submissionId=r.submission_id,
                driverState=str(s.state) if s.state is not None else None,
                workerId=s.workerId, workerHostPort=s.workerHostPort))
        if r.handler == "clear":
            cleared = await self._ask(RequestClearCompletedDriversAndApps(), bool)
            return self._json(ClearResponse(message="", serverSparkVersion=v, success=cleared))
        assert r.handler == "readyz", r.handler
        if not await self._ask(RequestReadyz(), bool):
            return self._error(503, "Master is not ready.")
        return self._json(ReadyzResponse(message="", serverSparkVersion=v, success=True))

    async def _ask(self, msg: Any, expected: type) -> Any:
        """Ask the master off the RPC loop; a wrong reply type is a server error, not a
        silently wrong answer."""
        reply = await asyncio.wrap_future(self.master_ref.ask(msg, self._ask_timeout))
        if not isinstance(reply, expected):
            raise TypeError(f"Master answered {type(reply).__name__} to {type(msg).__name__}")
        return reply

    async def _create(self, request: web.Request) -> web.Response:
        """Spark's StandaloneSubmitRequestServlet: everything is parsed and validated before
        the master hears of the request, so a bad request creates nothing."""
        data = await request.read()
        try:
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError as e:
                raise SubmitRestProtocolException(f"Invalid UTF-8 in request body: {e}") \
                    from None
            req, unknown = parse_request(text)
            f = build_driver_description_fields(req, self.master_rpc_url, self.port,
                                                placeholder_env(os.environ, self.conf))
            resource_reqs = driver_resource_requirements(
                {k: v for k, v in (req.sparkProperties or {}).items() if v is not None})
        except ResourceError as e:
            return self._error(400, str(e))
        except SubmitRestProtocolException as e:   # includes Jackson-style JSON errors
            return self._error(400, malformed_request_message(e))
        except UnexpectedMessageTypeException as e:
            return self._error(400, e.message)
        except (UnknownActionException, ValueError) as e:
            # Spark lets ClassNotFoundException / NumberFormatException escape: a 500.
            return self._error(500, "Internal server error: "
                               + format_exception(e).splitlines()[0])
        desc = DriverDescription(f["jarUrl"], f["mem"], f["cores"], f["supervise"],
                                 Command(**f["command"]), resource_reqs)
        resp = await self._ask(RequestSubmitDriver(desc), SubmitDriverResponse)
        return self._json(CreateSubmissionResponse(
            message=resp.message, serverSparkVersion=self.server_version,
            success=resp.success, submissionId=resp.driverId,
            unknownFields=unknown or None))

    async def _logs(self, request: web.Request, driver_id: str) -> web.Response:
        """Ember extension: RequestDriverLog through the master (which asks the worker)."""
        q = request.query
        try:
            msg = RequestDriverLog(driver_id.split("/")[0], q.get("logType", "stdout"),
                                   int(q.get("offset", "0")), int(q.get("maxBytes", 1 << 20)))
        except ValueError:
            return self._error(400, "offset and maxBytes must be integers.")
        page = await self._ask(msg, DriverLogResponse)
        return self._json(DriverLogResult(
            message=page.message, serverSparkVersion=self.server_version, success=page.found,
            submissionId=msg.driverId, data=base64.b64encode(page.data).decode("ascii"),
            offset=page.offset, nextOffset=page.nextOffset, totalLength=page.totalLength,
            driverState=str(page.state) if page.state is not None else None,
            exitStatus=page.exitStatus))

    async def _upload(self, request: web.Request) -> web.Response:
        """Ember extension: keep an app file with the master (see `uploads`), so cluster
        mode needs no shared file system. The checksum header is mandatory: the store
        verifies it, so a truncated or altered body is refused rather than run."""
        if self.uploads is None:
            return self._error(404, "This master does not accept uploads.")
        name = request.query.get("name")
        sha = request.headers.get(SHA256_HEADER)
        if not name:
            return self._error(400, "Missing the name query parameter.")
        if not sha:
            return self._error(400, f"Missing the {SHA256_HEADER} header.")
        data = await request.read()
        # Through the master, which stores it only while it is the ALIVE leader (a standby
        # answers "Current state is not alive ..." and the client tries the next master).
        r = await self._ask(UploadAppResource(name, data, sha), UploadAppResourceResponse)
        if not r.success:
            # 503 for "ask another master" (a standby, or a store that failed), as readyz.
            retry = r.message.startswith((BACKUP_STANDALONE_MASTER_PREFIX, NOT_RECORDED_PREFIX))
            return self._error(503 if retry else 400, r.message)
        log.info("Stored uploaded resource %s (%d bytes)", r.url, len(data))
        return self._json(UploadResponse(message="", serverSparkVersion=self.server_version,
                                         success=True, resourceUrl=r.url))


async def _hide_server_banner(request: web.Request, response: web.StreamResponse) -> None:
    """No version banner (Spark hides Jetty's too)."""
    response.headers["Server"] = "Ember"


__all__ = ["StandaloneRestServer", "RestPolicy", "rest_auth_policy", "rest_secret_key",
           "is_loopback_host", "UploadResponse", "DriverLogResult"]
