"""Spark's v1 REST submission protocol, as pure data and functions.

Why this exists: `spark-submit --kill/--status`, `curl` scripts and Spark's own
`RestSubmissionClient` speak to the standalone master's REST gateway (port 6066) with Jackson
JSON messages. For those clients to work against Ember unchanged, Ember must produce the same
JSON layout (alphabetical keys, Jackson's INDENT_OUTPUT pretty printing, null fields omitted),
accept the same requests, and fail with the same texts and HTTP codes. Everything here is
side-effect free so the HTTP server and the client can stay thin and the behaviour can be
tested without sockets.

Sources mirrored (Spark `core/src/main/scala/org/apache/spark/deploy/rest/`):
`SubmitRestProtocolMessage/Request/Response/Exception.scala` (messages, `validate`,
`fromJson`), `RestSubmissionServer.scala` (servlet routing, `ErrorServlet`, `formatException`,
`findUnknownFields`, `parseSubmissionId`) and `StandaloneRestServer.scala`
(`buildDriverDescription`).
"""
from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Mapping, Optional
from urllib.parse import unquote

from ember import config
from ember.util.units import MiB, parse_size

PROTOCOL_VERSION = "v1"
SC_UNKNOWN_PROTOCOL_VERSION = 468
BASE_CONTEXT = f"/{PROTOCOL_VERSION}/submissions"
SPARK_SUBMIT_CLASS = "org.apache.spark.deploy.SparkSubmit"
DRIVER_WRAPPER_CLASS = "org.apache.spark.deploy.worker.DriverWrapper"
DEFAULT_MEMORY = 1024  # MB (Utils.DEFAULT_DRIVER_MEM_MB)
DEFAULT_CORES = 1
DEFAULT_SUPERVISE = False

_PKG = "org.apache.spark.deploy.rest"


# ---------------------------------------------------------------------------------------------
# Exceptions
# ---------------------------------------------------------------------------------------------

class SubmitRestProtocolException(Exception):
    """A request or response violates the protocol (Spark's SubmitRestProtocolException).

    `java_class` is the name Spark's `formatException` prints (`Throwable.toString`), so the
    server can build `Malformed request: <java_class>: <message>` exactly like Spark.
    """

    java_class: str = f"{_PKG}.SubmitRestProtocolException"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class SubmitRestMissingFieldException(SubmitRestProtocolException):
    """A required field is absent (Spark's SubmitRestMissingFieldException)."""

    java_class = f"{_PKG}.SubmitRestMissingFieldException"


class JsonProcessingException(SubmitRestProtocolException):
    """Jackson could not parse or bind the JSON. In Spark this is Jackson's own exception type,
    caught next to SubmitRestProtocolException and answered with the same 400
    `Malformed request: ...`; subclassing keeps one `except` in Ember's server."""

    java_class = "com.fasterxml.jackson.core.JsonParseException"

    def __init__(self, message: str, java_class: Optional[str] = None) -> None:
        super().__init__(message)
        if java_class is not None:
            self.java_class = java_class


class UnexpectedMessageTypeException(Exception):
    """A valid message that is not the request the endpoint expects (400, *not* prefixed
    with `Malformed request:`; Spark answers `Received message of unexpected type <T>.`)."""

    def __init__(self, message_type: str) -> None:
        self.message_type = message_type
        self.message = f"Received message of unexpected type {message_type}."
        super().__init__(self.message)


class UnknownActionException(Exception):
    """`action` names no message class. In Spark `Utils.classForName` throws
    ClassNotFoundException, which the servlet does not catch: the container answers 500."""

    java_class = "java.lang.ClassNotFoundException"

    def __init__(self, action: str) -> None:
        self.action = action
        super().__init__(f"{_PKG}.{action}")


def format_exception(e: BaseException) -> str:
    """Spark's `formatException`: `"<Throwable.toString>\\n<\\t-prefixed stack frames>"`.

    Python frames mean nothing to a Spark client, so in place of JVM frames Ember lists the
    cause chain as `\\tCaused by: <class>: <message>` lines (Spark's own text after the first
    line is free-form stack output, so clients cannot depend on it)."""
    def head(x: BaseException) -> str:
        cls = getattr(x, "java_class", None) or type(x).__name__
        msg = str(x)
        return f"{cls}: {msg}" if msg else cls

    frames: list[str] = []
    cause = e.__cause__
    while cause is not None:
        frames.append(f"\tCaused by: {head(cause)}")
        cause = cause.__cause__
    return f"{head(e)}\n" + "\n".join(frames)


def malformed_request_message(e: BaseException) -> str:
    """The ErrorResponse message of a 400 from the create endpoint."""
    return "Malformed request: " + format_exception(e)


# ---------------------------------------------------------------------------------------------
# Messages
# ---------------------------------------------------------------------------------------------

# Field kinds used for Jackson-like binding when parsing.
_STR, _BOOL, _STR_LIST, _STR_MAP = "string", "boolean", "string[]", "map"


@dataclass
class SubmitRestProtocolMessage:
    """Base of all messages: `action` (the simple class name, derived) and `message`."""

    message: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {"message": _STR}
    _abstract: ClassVar[bool] = True

    @property
    def action(self) -> str:
        return type(self).__name__

    @property
    def messageType(self) -> str:  # noqa: N802 - Spark's name
        return type(self).__name__

    def _field_kinds(self) -> dict[str, str]:
        kinds: dict[str, str] = {}
        for klass in reversed(type(self).__mro__):
            kinds.update(vars(klass).get("_kinds", {}))
        return kinds

    def _missing(self, value: Any, name: str) -> None:
        if value is None:
            raise SubmitRestMissingFieldException(
                f"'{name}' is missing in message {self.messageType}.")

    def _do_validate(self) -> None:
        pass  # `action` is derived from the class, so it can never be missing

    def validate(self) -> None:
        """Spark's `validate()`: any failure is wrapped, the cause kept as `__cause__`."""
        try:
            self._do_validate()
        except Exception as e:  # noqa: BLE001 - mirrors Spark's `case e: Exception`
            raise SubmitRestProtocolException(
                f"Validation of message {self.messageType} failed!") from e

    def to_dict(self) -> dict[str, Any]:
        """Non-null properties plus `action`, keys alphabetical (Jackson's view)."""
        out: dict[str, Any] = {"action": self.action}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is not None:
                out[f.name] = v
        return {k: out[k] for k in sorted(out)}


@dataclass
class SubmitRestProtocolRequest(SubmitRestProtocolMessage):
    clientSparkVersion: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {"clientSparkVersion": _STR}

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.clientSparkVersion, "clientSparkVersion")


@dataclass
class CreateSubmissionRequest(SubmitRestProtocolRequest):
    appResource: Optional[str] = None
    mainClass: Optional[str] = None
    appArgs: Optional[list[Optional[str]]] = None
    sparkProperties: Optional[dict[str, Optional[str]]] = None
    environmentVariables: Optional[dict[str, Optional[str]]] = None

    _kinds: ClassVar[dict[str, str]] = {
        "appResource": _STR, "mainClass": _STR, "appArgs": _STR_LIST,
        "sparkProperties": _STR_MAP, "environmentVariables": _STR_MAP}
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        if self.sparkProperties is None:
            raise SubmitRestProtocolException("No Spark properties set!")
        self._missing(self.appResource, "appResource")
        # Present in Spark's CreateSubmissionRequest.doValidate (assertPropertyIsSet).
        self._missing(self.sparkProperties.get("spark.app.name"), "spark.app.name")
        self._assert_property("spark.driver.supervise", "boolean", _scala_to_boolean)
        self._assert_property("spark.driver.cores", "numeric", _java_parse_double)
        self._assert_property("spark.cores.max", "numeric", _java_parse_double)
        self._assert_property("spark.driver.memory", "memory", memory_string_to_mb)
        self._assert_property("spark.executor.memory", "memory", memory_string_to_mb)

    def _assert_property(self, key: str, value_type: str, convert: Any) -> None:
        assert self.sparkProperties is not None
        if key not in self.sparkProperties:
            return
        value = self.sparkProperties[key]
        try:
            convert(value)
        except Exception:  # noqa: BLE001 - Scala's Try(...).getOrElse
            raise SubmitRestProtocolException(
                f"Property '{key}' expected {value_type} value: actual was '{_jstr(value)}'.") \
                from None


@dataclass
class SubmitRestProtocolResponse(SubmitRestProtocolMessage):
    serverSparkVersion: Optional[str] = None
    success: Optional[bool] = None
    unknownFields: Optional[list[Optional[str]]] = None

    _kinds: ClassVar[dict[str, str]] = {
        "serverSparkVersion": _STR, "success": _BOOL, "unknownFields": _STR_LIST}

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.serverSparkVersion, "serverSparkVersion")


@dataclass
class CreateSubmissionResponse(SubmitRestProtocolResponse):
    submissionId: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {"submissionId": _STR}
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.success, "success")


@dataclass
class KillSubmissionResponse(SubmitRestProtocolResponse):
    submissionId: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {"submissionId": _STR}
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.submissionId, "submissionId")
        self._missing(self.success, "success")


@dataclass
class KillAllSubmissionResponse(SubmitRestProtocolResponse):
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.success, "success")


@dataclass
class ClearResponse(SubmitRestProtocolResponse):
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.success, "success")


@dataclass
class ReadyzResponse(SubmitRestProtocolResponse):
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.success, "success")


@dataclass
class SubmissionStatusResponse(SubmitRestProtocolResponse):
    submissionId: Optional[str] = None
    driverState: Optional[str] = None
    workerId: Optional[str] = None
    workerHostPort: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {
        "submissionId": _STR, "driverState": _STR, "workerId": _STR, "workerHostPort": _STR}
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.submissionId, "submissionId")
        self._missing(self.success, "success")


@dataclass
class ErrorResponse(SubmitRestProtocolResponse):
    highestProtocolVersion: Optional[str] = None

    _kinds: ClassVar[dict[str, str]] = {"highestProtocolVersion": _STR}
    _abstract: ClassVar[bool] = False

    def _do_validate(self) -> None:
        super()._do_validate()
        self._missing(self.message, "message")


MESSAGE_CLASSES: dict[str, type[SubmitRestProtocolMessage]] = {
    c.__name__: c for c in (
        SubmitRestProtocolMessage, SubmitRestProtocolRequest, SubmitRestProtocolResponse,
        CreateSubmissionRequest, CreateSubmissionResponse, KillSubmissionResponse,
        KillAllSubmissionResponse, ClearResponse, ReadyzResponse, SubmissionStatusResponse,
        ErrorResponse)}


def error_response(message: str, server_spark_version: str,
                   highest_protocol_version: Optional[str] = None) -> ErrorResponse:
    """Spark's `handleError`: an ErrorResponse carrying the server version."""
    return ErrorResponse(message=message, serverSparkVersion=server_spark_version,
                         highestProtocolVersion=highest_protocol_version)


# ---------------------------------------------------------------------------------------------
# Jackson-compatible JSON output
# ---------------------------------------------------------------------------------------------

_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                  "\r": "\\r", "\t": "\\t"}
_ESCAPE_RE = re.compile(r'["\\\x00-\x1f]')


def _json_string(s: str) -> str:
    """Jackson escaping: quotes, backslash and control characters only (uppercase hex),
    non-ASCII written as is."""
    return '"' + _ESCAPE_RE.sub(
        lambda m: _SHORT_ESCAPES.get(m.group(0), "\\u%04X" % ord(m.group(0))), s) + '"'


def _write_value(v: Any, level: int, out: list[str]) -> None:
    if v is None:
        out.append("null")
    elif isinstance(v, bool):
        out.append("true" if v else "false")
    elif isinstance(v, (int, float)):
        out.append(json.dumps(v))
    elif isinstance(v, str):
        out.append(_json_string(v))
    elif isinstance(v, Mapping):
        if not v:
            out.append("{ }")
            return
        pad = "  " * (level + 1)
        out.append("{")
        first = True
        for k, item in v.items():
            out.append("\n" if first else ",\n")
            first = False
            out.append(f"{pad}{_json_string(str(k))} : ")
            _write_value(item, level + 1, out)
        out.append("\n" + "  " * level + "}")
    elif isinstance(v, (list, tuple)):
        if not v:
            out.append("[ ]")
            return
        out.append("[ ")
        for i, item in enumerate(v):
            if i:
                out.append(", ")
            _write_value(item, level, out)
        out.append(" ]")
    else:
        raise TypeError(f"cannot serialise {type(v).__name__}")


def to_json(msg: SubmitRestProtocolMessage, validate: bool = True) -> str:
    """Spark's `toJson`: validate, then Jackson with alphabetic property order, INDENT_OUTPUT
    (DefaultPrettyPrinter: two-space indent, `"k" : v`, arrays inline as `[ "a", "b" ]`,
    empty `{ }` / `[ ]`, `\\n` line feeds) and NON_ABSENT (null fields omitted).

    Map-valued fields (`sparkProperties`, `environmentVariables`) keep the dict's order:
    Jackson sorts properties, not map entries."""
    if validate:
        msg.validate()
    out: list[str] = []
    _write_value(msg.to_dict(), 0, out)
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------

class _RawNumber(str):
    """A JSON number kept as its source text (Jackson coerces numbers to strings verbatim)."""


def _reject_constant(name: str) -> Any:
    raise ValueError(f"Non-standard token '{name}'")


def _loads(text: str) -> Any:
    try:
        return json.loads(text, parse_int=_RawNumber, parse_float=_RawNumber,
                          parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        if not text.strip():
            raise JsonProcessingException(
                "No content to map due to end-of-input",
                "com.fasterxml.jackson.databind.exc.MismatchedInputException") from None
        raise JsonProcessingException(str(e)) from None


def _token(v: Any) -> str:
    if v is None:
        return "VALUE_NULL"
    if isinstance(v, bool):
        return "VALUE_TRUE" if v else "VALUE_FALSE"
    if isinstance(v, _RawNumber):
        return "VALUE_NUMBER_FLOAT" if re.search(r"[.eE]", v) else "VALUE_NUMBER_INT"
    if isinstance(v, str):
        return "VALUE_STRING"
    if isinstance(v, dict):
        return "START_OBJECT"
    return "START_ARRAY"


def _mismatch(java_type: str, v: Any, cls: str, path: str) -> JsonProcessingException:
    return JsonProcessingException(
        f"Cannot deserialize value of type `{java_type}` from {_token(v)} "
        f"(through reference chain: {_PKG}.{cls}[\"{path}\"])",
        "com.fasterxml.jackson.databind.exc.MismatchedInputException")


def _coerce_scalar_string(v: Any) -> Optional[str]:
    """Jackson's StringDeserializer: strings, numbers (source text) and booleans."""
    if v is None or isinstance(v, str):
        return None if v is None else str(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    raise TypeError


def _bind(kind: str, v: Any, cls: str, name: str) -> Any:
    try:
        if kind == _STR:
            return _coerce_scalar_string(v)
        if kind == _BOOL:
            if v is None or isinstance(v, bool):
                return v
            if isinstance(v, _RawNumber) and re.fullmatch(r"-?\d+", v):
                return int(v) != 0
            if isinstance(v, str) and not isinstance(v, _RawNumber) and \
                    v.strip() in ("true", "false"):
                return v.strip() == "true"
            raise TypeError
        if kind == _STR_LIST:
            if v is None:
                return None
            if not isinstance(v, list):
                raise TypeError
            return [_coerce_scalar_string(x) for x in v]
        if kind == _STR_MAP:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise TypeError
            return {str(k): _coerce_scalar_string(x) for k, x in v.items()}
    except TypeError:
        java = {_STR: "java.lang.String", _BOOL: "java.lang.Boolean",
                _STR_LIST: "java.lang.String[]",
                _STR_MAP: "scala.collection.immutable.Map<java.lang.String,java.lang.String>"}
        raise _mismatch(java[kind], v, cls, name) from None
    raise AssertionError(kind)


def parse_action(text: str) -> str:
    """Spark's `parseAction`: the top-level string `action`, else
    `Action field not found in JSON:\\n<json>`."""
    obj = _loads(text)
    if isinstance(obj, dict):
        action = obj.get("action")
        if isinstance(action, str) and not isinstance(action, _RawNumber):
            return str(action)
    raise SubmitRestMissingFieldException(f"Action field not found in JSON:\n{text}")


def parse_message(text: str) -> SubmitRestProtocolMessage:
    """Spark's `SubmitRestProtocolMessage.fromJson` (no validation): class from `action`,
    unknown properties ignored, scalars coerced like Jackson."""
    action = parse_action(text)
    cls = MESSAGE_CLASSES.get(action)
    if cls is None:
        raise UnknownActionException(action)
    if vars(cls).get("_abstract", True):
        raise JsonProcessingException(
            f"Cannot construct instance of `{_PKG}.{action}` (no Creators, like default "
            "constructor, exist): abstract types either need to be mapped to concrete types, "
            "have custom deserializer, or contain additional type information",
            "com.fasterxml.jackson.databind.exc.InvalidDefinitionException")
    obj = _loads(text)
    msg = cls()
    kinds = msg._field_kinds()
    for key, value in obj.items():
        if key in kinds:
            setattr(msg, key, _bind(kinds[key], value, action, key))
    return msg


def find_unknown_fields(text: str, msg: SubmitRestProtocolMessage) -> list[str]:
    """Spark's `findUnknownFields`: the json4s diff of the client's JSON against the server's
    re-serialisation keeps top-level keys the server does not write back: keys it does not
    know, and known keys whose value was `null` (omitted on output)."""
    client = _loads(text)
    if not isinstance(client, dict):
        return []
    server = msg.to_dict()
    unknown: list[str] = []
    for key, value in client.items():
        if key not in server:
            unknown.append(key)
        elif isinstance(value, dict) and isinstance(server[key], dict) and \
                any(k not in server[key] for k in value):
            unknown.append(key)  # json4s recurses into objects; deleted nested keys surface here
    return unknown


def parse_request(text: str) -> tuple[CreateSubmissionRequest, list[str]]:
    """What the create servlet does before asking the master: parse, validate, insist on a
    CreateSubmissionRequest, and compute `unknownFields`.

    Raises SubmitRestProtocolException (incl. JsonProcessingException and the missing-field
    subclass) → 400 `Malformed request: ...` (see `malformed_request_message`);
    UnexpectedMessageTypeException → 400 with its own message; UnknownActionException → 500.
    """
    msg = parse_message(text)
    msg.validate()
    if not isinstance(msg, CreateSubmissionRequest):
        raise UnexpectedMessageTypeException(msg.messageType)
    return msg, find_unknown_fields(text, msg)


# ---------------------------------------------------------------------------------------------
# Value conversions used by validation and the driver description
# ---------------------------------------------------------------------------------------------

def _jstr(v: Any) -> str:
    return "null" if v is None else str(v)


def _scala_to_boolean(v: Optional[str]) -> bool:
    """Scala's `StringOps.toBoolean`: `true`/`false` ignoring case, nothing else."""
    if v is None:
        raise ValueError("null")
    if v.lower() == "true":
        return True
    if v.lower() == "false":
        return False
    raise ValueError(f'For input string: "{v}"')


_JAVA_DOUBLE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)")


def _java_parse_double(v: Optional[str]) -> float:
    """Java's `Double.parseDouble` (decimal forms; surrounding whitespace trimmed)."""
    if v is None:
        raise ValueError("null")
    s = v.strip(" \t\n\r\x0b\x0c\x00")
    if not _JAVA_DOUBLE.fullmatch(s):
        raise ValueError(f'For input string: "{v}"')
    return float(s.rstrip("fFdD"))


def _java_parse_int(v: str) -> int:
    """Java's `Integer.parseInt` (what Scala's `toInt` calls)."""
    if not re.fullmatch(r"[+-]?\d+", v) or not -2**31 <= int(v) < 2**31:
        raise ValueError(f'For input string: "{v}"')
    return int(v)


def memory_string_to_mb(v: Optional[str]) -> int:
    """Spark's `Utils.memoryStringToMb`: `JavaUtils.byteStringAsBytes(v) / 1024 / 1024`.
    A bare number counts bytes; fractions (`1.5g`) and unknown suffixes are rejected."""
    if v is None:
        raise ValueError("null")
    return parse_size(v, "b") // MiB


# ---------------------------------------------------------------------------------------------
# Routing (RestSubmissionServer's servlet table + ErrorServlet)
# ---------------------------------------------------------------------------------------------

# action -> methods the servlet implements (only doGet / doPost are overridden in Spark)
_HANDLERS: dict[str, tuple[str, ...]] = {
    "create": ("POST",), "kill": ("POST",), "killall": ("POST",),
    "status": ("GET",), "clear": ("POST",), "readyz": ("GET",)}

_PLEASE = f" Please submit requests through http://[host]:[port]/{PROTOCOL_VERSION}/submissions/..."


@dataclass(frozen=True)
class Route:
    """Where a request goes. `handler` is set when a servlet accepts it; otherwise `status`
    and `message` (the ErrorResponse text; `highest_protocol_version` for 468) describe the
    error. `submission_id` is only meaningful for kill/status. `allow` lists the servlet's
    methods (for the 405's `Allow` header)."""

    handler: Optional[str] = None
    submission_id: Optional[str] = None
    status: int = 200
    message: Optional[str] = None
    highest_protocol_version: Optional[str] = None
    allow: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.handler is not None

    def error_response(self, server_spark_version: str) -> Optional[ErrorResponse]:
        """The ErrorResponse body for an error route (None for 405 and for handled routes:
        a 405 comes from the servlet container, not from Spark's code)."""
        if self.handler is not None or self.message is None or self.status == 405:
            return None
        return error_response(self.message, server_spark_version,
                              self.highest_protocol_version)


def parse_submission_id(path_info: Optional[str]) -> Optional[str]:
    """Spark's `parseSubmissionId`: first segment after the action, non-empty."""
    if not path_info:
        return None
    head = path_info[1:] if path_info.startswith("/") else path_info
    first = head.split("/")[0]
    return first or None


def route(method: str, path: str) -> Route:
    """Route like Jetty's servlet mappings `/v1/submissions/<action>/*` plus the catch-all
    `ErrorServlet` (`/*`, any method). The query string is ignored; the path is
    percent-decoded as the servlet's path info is."""
    method = method.upper()
    path = unquote(path.split("?", 1)[0].split("#", 1)[0]) or "/"
    for action, methods in _HANDLERS.items():
        prefix = f"{BASE_CONTEXT}/{action}"
        if path == prefix or path.startswith(prefix + "/"):
            path_info = path[len(prefix):] or None
            allowed = methods + (("HEAD",) if "GET" in methods else ()) + ("OPTIONS",)
            if method not in methods and not (method == "HEAD" and "GET" in methods):
                if method == "OPTIONS":
                    return Route(handler="options", allow=allowed)
                return Route(status=405, allow=allowed,
                             message=f"HTTP method {method} is not supported by this URL")
            submission_id = parse_submission_id(path_info)
            if action in ("kill", "status") and submission_id is None:
                return Route(status=400, allow=allowed,
                             message=f"Submission ID is missing in {action} request.")
            return Route(handler=action, allow=allowed,
                         submission_id=submission_id if action in ("kill", "status") else None)
    parts = [p for p in path.lstrip("/").split("/") if p] if path.startswith("/") else \
        [p for p in path.split("/") if p]
    if not parts:
        return Route(status=400, message="Missing protocol version." + _PLEASE)
    if parts == [PROTOCOL_VERSION]:
        return Route(status=400, message="Missing the /submissions prefix." + _PLEASE)
    if parts[0] == PROTOCOL_VERSION and parts[1] == "submissions":
        return Route(status=400, message=(
            "Missing an action: please specify one of /create, /kill, /killall, /clear, "
            "/status, or /readyz." + _PLEASE))
    return Route(status=SC_UNKNOWN_PROTOCOL_VERSION,
                 message=f"Unknown protocol version '{parts[0]}'." + _PLEASE,
                 highest_protocol_version=PROTOCOL_VERSION)


# ---------------------------------------------------------------------------------------------
# Driver description (StandaloneRestServer.buildDriverDescription, pure parts)
# ---------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"\{\{(.*)\}\}", re.DOTALL)


def replace_placeholder(value: Optional[str], env: Mapping[str, str]) -> Optional[str]:
    """A value that is exactly `{{NAME}}` becomes `env[NAME]` when NAME is set (4.0)."""
    if value is None:
        return None
    m = _PLACEHOLDER.fullmatch(value)
    if m and m.group(1) in env:
        return env[m.group(1)]
    return value


PLACEHOLDER_ALLOW_LIST = "spark.ember.rest.placeholderEnvAllowList"


def placeholder_env(environ: Mapping[str, str], conf: Mapping[str, str]) -> dict[str, str]:
    """The part of the master's environment a submission's `{{NAME}}` may read: only the
    allow-listed names (a submitted driver must not get the master's secrets copied in)."""
    names = set(config.read(conf, PLACEHOLDER_ALLOW_LIST))
    return {k: v for k, v in environ.items() if k in names}


def _extract_port(spark_url: str) -> int:
    """Port of `spark://host:port` (Utils.extractHostPortFromSparkUrl)."""
    m = re.fullmatch(r"spark://(\[[^\]]+\]|[^:/\[\]@?#]+):(\d+)", spark_url)
    if not m:
        raise ValueError(f"Invalid master URL: {spark_url}")
    return int(m.group(2))


def build_driver_description_fields(request: CreateSubmissionRequest, master_rpc_url: str,
                                    rest_port: int, env: Mapping[str, str]) -> dict[str, Any]:
    """The pure part of Spark's `buildDriverDescription`, as a plain dict the caller turns
    into Ember's `DriverDescription` / `Command`.

    Keys: jarUrl, mainClass, appArgs, mem, cores, supervise, sparkProperties (placeholders
    replaced, `spark.master` rewritten), environment (placeholders replaced,
    SPARK_LOCAL_IP/HOSTNAME dropped), master, command (mainClass=DriverWrapper, arguments,
    environment, classPathEntries, libraryPathEntries, javaOpts).

    Raises SubmitRestMissingFieldException for a missing appResource / mainClass and
    ValueError for values Spark's `toInt` / `memoryStringToMb` / `toBoolean` reject (the
    servlet does not catch those: HTTP 500)."""
    if request.appResource is None:
        raise SubmitRestMissingFieldException("Application jar is missing.")
    if request.mainClass is None:
        raise SubmitRestMissingFieldException("Main class is missing.")
    raw_props: dict[str, Optional[str]] = dict(request.sparkProperties or {})
    master_port = _extract_port(master_rpc_url)
    masters = raw_props.get("spark.master")
    updated_masters = (masters.replace(f":{rest_port}", f":{master_port}")
                       if masters is not None else master_rpc_url)
    app_args = [a for a in (request.appArgs or [])]
    environment = {k: replace_placeholder(v, env)
                   for k, v in (request.environmentVariables or {}).items()
                   if not re.fullmatch(r"SPARK_LOCAL_(IP|HOSTNAME)", k)}
    props = {k: replace_placeholder(v, env) for k, v in raw_props.items()}
    props["spark.master"] = updated_masters

    def split_path(key: str) -> list[str]:
        v = raw_props.get(key)
        return [p for p in v.split(os.pathsep)] if v else []

    def split_opts(key: str) -> list[str]:
        v = raw_props.get(key)
        return shlex.split(v) if v else []

    java_opts = ([f"-D{k}={v}" for k, v in props.items()]
                 + split_opts("spark.driver.defaultJavaOptions")
                 + split_opts("spark.driver.extraJavaOptions"))
    submit_opts: list[str] = []
    if request.mainClass == SPARK_SUBMIT_CLASS and raw_props.get("spark.app.name") is not None:
        submit_opts = ["-c", f"spark.app.name={raw_props['spark.app.name']}"]
    mem_s = raw_props.get("spark.driver.memory")
    cores_s = raw_props.get("spark.driver.cores")
    sup_s = raw_props.get("spark.driver.supervise")
    return {
        "jarUrl": request.appResource,
        "mainClass": request.mainClass,
        "appArgs": app_args,
        "mem": memory_string_to_mb(mem_s) if "spark.driver.memory" in raw_props
        else DEFAULT_MEMORY,
        "cores": _java_parse_int(cores_s) if cores_s is not None else DEFAULT_CORES,
        "supervise": _scala_to_boolean(sup_s) if sup_s is not None else DEFAULT_SUPERVISE,
        "master": updated_masters,
        "sparkProperties": props,
        "environment": environment,
        "command": {
            "mainClass": DRIVER_WRAPPER_CLASS,
            "arguments": ["{{WORKER_URL}}", "{{USER_JAR}}", request.mainClass]
            + submit_opts + app_args,
            "environment": environment,
            "classPathEntries": split_path("spark.driver.extraClassPath"),
            "libraryPathEntries": split_path("spark.driver.extraLibraryPath"),
            "javaOpts": java_opts,
        },
    }
