"""Spark's JWSFilter (`org.apache.spark.ui.JWSFilter`) as a pure function.

Why: the REST gateway accepts driver submissions, i.e. remote code execution
(CVE-2018-11770, CVE-2018-17190). Spark 4.0's only authentication for it is this filter:
`spark.master.rest.filters=org.apache.spark.ui.JWSFilter` plus a base64url HMAC key in
`spark.org.apache.spark.ui.JWSFilter.param.secretKey`; requests carry
`Authorization: Bearer <header>.<payload>.<signature>` signed with HS256. Ember reproduces the
check with the standard library only (hmac/hashlib/base64, constant-time comparison) so that
tokens minted for Spark work against Ember and vice versa, and so the HTTP layer only has to
turn a non-None result into a 403 with `Cache-Control: no-cache, no-store, must-revalidate`.

What jjwt (`Jwts.parser().verifyWith(key).build().parseSignedClaims(token)`) enforces and is
mirrored here: exactly three dot-separated base64url parts, a JSON-object header whose `alg` is
an HMAC-SHA algorithm the key is long enough for (HS256 needs 256 bits, HS384 384, HS512 512;
`none` and everything else are refused), a valid signature, a JSON-object (claims) payload,
and `exp` / `nbf` claims honoured without clock skew. Every such failure is a JwtException in
Spark, answered with the deliberately vague `JWT Validate Fail`.
"""
from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
import time
from typing import Any, Callable, Optional

AUTHORIZATION = "Authorization"
CACHE_CONTROL = "no-cache, no-store, must-revalidate"
FORBIDDEN = 403

MISSING_HEADER = f"{AUTHORIZATION} header is missing."
MALFORMED_HEADER = f"Malformed {AUTHORIZATION} header."
VALIDATE_FAIL = "JWT Validate Fail"
EXPIRATION_REQUIRED = f"{AUTHORIZATION} token does not carry a required expiration."

FILTER_CLASS = "org.apache.spark.ui.JWSFilter"
SECRET_KEY_PARAM = f"spark.{FILTER_CLASS}.param.secretKey"

_ALGORITHMS: dict[str, tuple[Callable[..., Any], int]] = {
    "HS256": (hashlib.sha256, 256), "HS384": (hashlib.sha384, 384),
    "HS512": (hashlib.sha512, 512)}
_B64URL = re.compile(r"[A-Za-z0-9_-]*")


class _Invalid(Exception):
    """Any jjwt JwtException."""


def b64url_encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def b64url_decode(text: str) -> bytes:
    """Unpadded base64url (RFC 7515 §2); raises ValueError on anything else."""
    if not _B64URL.fullmatch(text) or len(text) % 4 == 1:
        raise ValueError("Illegal base64url character or length")
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as e:
        raise ValueError(str(e)) from None


def load_secret_key(param: Optional[str]) -> bytes:
    """The filter's `init`: base64url-decode the `secretKey` init parameter
    (`Decoders.BASE64URL`) and insist on >= 256 bits (`Keys.hmacShaKeyFor`, WeakKeyException).
    A ValueError here means the filter (and so the server) cannot start."""
    if param is None:
        raise ValueError("secretKey is not set")
    key = b64url_decode(param.rstrip("="))
    if len(key) * 8 < 256:
        raise ValueError(
            f"The specified key byte array is {len(key) * 8} bits which is not secure enough "
            "for any JWT HMAC-SHA algorithm.  The JWT JWA Specification (RFC 7518, Section "
            "3.2) states that keys used with HMAC-SHA algorithms MUST have a size >= 256 bits "
            "(the key size must be greater than or equal to the hash output size).")
    return key


def sign_hs256(payload: dict[str, Any], secret_key: bytes,
               header: Optional[dict[str, Any]] = None) -> str:
    """A compact JWS `<header>.<payload>.<signature>` with header `{"alg":"HS256","typ":"JWT"}`
    (or `header` verbatim, for tests of other algorithms)."""
    hdr = header if header is not None else {"alg": "HS256", "typ": "JWT"}
    alg = hdr.get("alg")
    signing_input = (b64url_encode(json.dumps(hdr, separators=(",", ":")).encode())
                     + "." + b64url_encode(json.dumps(payload, separators=(",", ":")).encode()))
    if alg in _ALGORITHMS:
        digest = _ALGORITHMS[alg][0]
        sig = b64url_encode(hmac.new(secret_key, signing_input.encode("ascii"), digest).digest())
    else:
        sig = ""
    return f"{signing_input}.{sig}"


def _json_object(part: str) -> dict[str, Any]:
    try:
        value = json.loads(b64url_decode(part).decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise _Invalid from None
    if not isinstance(value, dict):
        raise _Invalid
    return value


def _numeric_date(claims: dict[str, Any], name: str) -> Optional[float]:
    if name not in claims or claims[name] is None:
        return None
    value = claims[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Invalid
    return float(value)


def verify_token(token: str, secret_key: bytes, now: Optional[float] = None) -> dict[str, Any]:
    """jjwt's `parseSignedClaims`: the claims, or ValueError (a JwtException in Spark)."""
    try:
        return _verify(token, secret_key, time.time() if now is None else now)
    except _Invalid:
        raise ValueError(VALIDATE_FAIL) from None


def _verify(token: str, secret_key: bytes, now: float) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3:
        raise _Invalid
    header_b64, payload_b64, sig_b64 = parts
    header = _json_object(header_b64)
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in _ALGORITHMS:
        raise _Invalid  # includes "none": unsecured JWSs are refused with a verification key
    digest, bits = _ALGORITHMS[alg]
    if len(secret_key) * 8 < bits:
        raise _Invalid  # WeakKeyException
    try:
        signature = b64url_decode(sig_b64)
    except ValueError:
        raise _Invalid from None
    expected = hmac.new(secret_key, f"{header_b64}.{payload_b64}".encode("ascii"),
                        digest).digest()
    if not hmac.compare_digest(signature, expected):
        raise _Invalid
    claims = _json_object(payload_b64)
    exp = _numeric_date(claims, "exp")
    if exp is not None and now > exp:
        raise _Invalid  # ExpiredJwtException
    nbf = _numeric_date(claims, "nbf")
    if nbf is not None and now < nbf:
        raise _Invalid  # PrematureJwtException
    return claims


def verify_authorization(header: Optional[str], secret_key: bytes,
                         now: Optional[float] = None,
                         require_expiration: bool = False) -> Optional[str]:
    """JWSFilter.doFilter: None when the request may pass, else the 403 message.

    `Bearer <token>` is matched literally (case-sensitive, one space); anything after it is
    handed to the JWS parser, so a token that is not three parts is `JWT Validate Fail`, not
    `Malformed Authorization header.` (that one is for a header without the `Bearer ` prefix).
    `require_expiration` mirrors the later `param.requireExpiration=true` option."""
    if header is None:
        return MISSING_HEADER
    if not header.startswith("Bearer "):
        return MALFORMED_HEADER
    token = header[len("Bearer "):]
    try:
        claims = _verify(token, secret_key, time.time() if now is None else now)
    except _Invalid:
        return VALIDATE_FAIL
    if require_expiration and claims.get("exp") is None:
        return EXPIRATION_REQUIRED
    return None
