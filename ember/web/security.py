"""Who may use an Ember web surface, decided the same way for every one of them.

Why one module for the master (8080), worker (8081), application (4040) and history (18080)
UIs and the REST gateway: each of them shows logs and configuration, and the master's and the
gateway's POSTs kill or start code, so the rules must not drift apart. The checks are pure
functions of (method, path, headers, form) so the aiohttp servers (`ember.web.server`) and
the driver's standard-library server (`ember.ui.spark_ui`, which must not import aiohttp)
run exactly the same code.

The rules, in the order `HttpGuard.check` applies them:
1. DNS rebinding: the Host header must name this daemon - its bind address and that
   address's IPs, `localhost` for a loopback bind, every local address for a wildcard
   bind, SPARK_PUBLIC_DNS / SPARK_LOCAL_HOSTNAME, its public host and
   `spark.ember.ui.allowedHosts` (`*` turns the check off). A rebinding page's requests
   carry its own name (`Host: evil.example`), so they stop here.
2. Cross-site requests: a state-changing request (not GET/HEAD/OPTIONS) whose Origin is
   not this daemon (allowed host *and* its port) is refused. The comparison never uses the
   request's own Host header, which an attacker controls.
3. Authentication, when the cluster authenticates (`spark.authenticate=true`): an HS256
   bearer token signed with the secret (the JWS of `ember.web.jws`) with a required
   `exp` no further away than `spark.ember.ui.token.maxLifetime`, or the session cookie the
   login form sets (a token of the same kind, HttpOnly, SameSite=Strict, Secure over TLS).
   The user is the token's `sub`.
4. Authorization with Spark's SecurityManager semantics (`ember.web.security.Acls`): view
   for reads, modify for state changes; admins may do both.
5. CSRF: a form POST of a UI must carry the `csrf` field of the page it came from (an HMAC
   of the user under a key private to the process), whether or not authentication is on.
"""
from __future__ import annotations

import grp
import hashlib
import hmac
import ipaddress
import os
import pwd
import secrets
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Optional
from urllib.parse import quote, urlsplit

from ember import config
from ember.web import jws
from ember.rpc.config import AUTH, parse_bool, resolve_secret
from ember.rpc.security import parse_credential
from ember.web.ssl_options import secure_port, ssl_enabled, ssl_setting

TOKEN_MAX_LIFETIME = "spark.ember.ui.token.maxLifetime"
ALLOWED_HOSTS = "spark.ember.ui.allowedHosts"
HEADER_TIMEOUT = "spark.ember.ui.headerTimeout"
IDLE_TIMEOUT = "spark.ember.ui.idleTimeout"
MAX_CONNECTIONS = "spark.ember.ui.maxConnections"
REDACTION_REGEX = "spark.redaction.regex"
MIN_KEY_BYTES = 32

CSRF_FIELD = "csrf"
LOGIN_PATH = "/login"
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
VIEW, MODIFY = "view", "modify"
_CORS_SIMPLE_TYPES = ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data")


@dataclass(frozen=True)
class Denial:
    """An answer instead of the page: HTTP status, one-line text, extra headers."""

    status: int
    text: str
    headers: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Keys and tokens
# ---------------------------------------------------------------------------------------------

def ui_secret_key(conf: Mapping[str, Any]) -> Optional[bytes]:
    """The key UI tokens and cookies are signed with: the cluster secret when
    `spark.authenticate=true` (resolved as the RPC layer does), else None (no login).
    ValueError for a missing or too short (< 32 bytes) secret: a UI must not start with
    authentication silently weaker than asked for."""
    if not config.read(conf, AUTH):
        return None
    # A cluster-mode driver (and its executors) holds only its application credential, not
    # the cluster secret: its UI verifies with the application's derived key, so a token
    # for it comes from `ember token --app <scope>` and a cluster-secret token (which would
    # open every UI) is never accepted there, nor an app-key token on a daemon's UI.
    key = parse_credential(resolve_secret(conf))[1]
    if len(key) < MIN_KEY_BYTES:
        raise ValueError(f"spark.authenticate.secret is shorter than {MIN_KEY_BYTES} bytes, too "
                         "weak to sign UI tokens; use a longer secret")
    return key


def max_token_lifetime(conf: Mapping[str, Any]) -> float:
    return config.read(conf, TOKEN_MAX_LIFETIME)


def mint_token(key: bytes, user: str, lifetime: float, now: Optional[float] = None) -> str:
    """A bearer token for `user` valid `lifetime` seconds (what `ember token` prints and what
    Ember's clients send with each request)."""
    t = int(time.time() if now is None else now)
    return jws.sign_hs256({"sub": user, "iat": t, "exp": t + max(1, int(lifetime))}, key)


def verify_token(token: str, key: bytes, max_lifetime: float,
                 now: Optional[float] = None) -> str:
    """The token's user (`sub`, "" when absent), or ValueError: bad signature, expired,
    without `exp`, or living longer than `max_lifetime` (from `iat` if present, else from
    now) - a token minted for a year is refused even while it is valid."""
    t = time.time() if now is None else now
    claims = jws.verify_token(token, key, t)
    exp = claims.get("exp")
    if exp is None:
        raise ValueError(jws.EXPIRATION_REQUIRED)
    iat = claims.get("iat")
    start = float(iat) if isinstance(iat, (int, float)) and not isinstance(iat, bool) else t
    if float(exp) - min(start, t) > max_lifetime + 1:
        raise ValueError("Token lifetime exceeds " + TOKEN_MAX_LIFETIME)
    sub = claims.get("sub", "")
    return sub if isinstance(sub, str) else ""


# ---------------------------------------------------------------------------------------------
# ACLs (Spark's SecurityManager)
# ---------------------------------------------------------------------------------------------

def _names(value: Any) -> frozenset[str]:
    return frozenset(s.strip() for s in str(value or "").split(",") if s.strip())


def user_groups(user: str) -> frozenset[str]:
    """Spark's ShellBasedGroupsMappingProvider (`id -Gn user`) without a shell: the local
    groups of `user`; empty for an unknown user."""
    try:
        pw = pwd.getpwnam(user)
        return frozenset(grp.getgrgid(g).gr_name for g in os.getgrouplist(user, pw.pw_gid))
    except (KeyError, OSError):
        return frozenset()


@dataclass(frozen=True)
class Acls:
    """Spark's SecurityManager view/modify/admin checks. `owners` are its default ACL users
    (the daemon's or application's user and spark.user): they may always view and modify."""

    enabled: bool = False
    view: frozenset[str] = frozenset()
    view_groups: frozenset[str] = frozenset()
    modify: frozenset[str] = frozenset()
    modify_groups: frozenset[str] = frozenset()

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any], owners: Iterable[str] = (),
                  prefix: str = "spark") -> "Acls":
        """`prefix` is "spark" (spark.acls.enable, spark.ui.view.acls, spark.modify.acls,
        spark.admin.acls + .groups) or "spark.history.ui" for the history server's own
        (spark.history.ui.acls.enable, spark.history.ui.admin.acls[.groups])."""
        if prefix == "spark":
            enabled = config.read(conf, "spark.acls.enable")
            admin = _names(conf.get("spark.admin.acls"))
            admin_groups = _names(conf.get("spark.admin.acls.groups"))
            view = _names(conf.get("spark.ui.view.acls"))
            view_groups = _names(conf.get("spark.ui.view.acls.groups"))
            modify = _names(conf.get("spark.modify.acls"))
            modify_groups = _names(conf.get("spark.modify.acls.groups"))
        else:
            enabled = parse_bool(f"{prefix}.acls.enable",
                                 conf.get(f"{prefix}.acls.enable", "false"))
            admin = _names(conf.get(f"{prefix}.admin.acls"))
            admin_groups = _names(conf.get(f"{prefix}.admin.acls.groups"))
            view = modify = frozenset()
            view_groups = modify_groups = frozenset()
        default = frozenset(o for o in owners if o) | _names(conf.get("spark.user"))
        return cls(enabled, admin | view | default, admin_groups | view_groups,
                   admin | modify | default, admin_groups | modify_groups)

    @staticmethod
    def _allowed(user: Optional[str], users: frozenset[str], groups: frozenset[str]) -> bool:
        if user is None or "*" in users or user in users or "*" in groups:
            return True
        return bool(groups) and not groups.isdisjoint(user_groups(user))

    def can_view(self, user: Optional[str]) -> bool:
        """checkUIViewPermissions: ACLs off, no user (no authentication), a listed user,
        `*`, or a member of a listed group."""
        return not self.enabled or self._allowed(user, self.view, self.view_groups)

    def can_modify(self, user: Optional[str]) -> bool:
        """checkModifyPermissions, the same rule over the modify (and admin) lists."""
        return not self.enabled or self._allowed(user, self.modify, self.modify_groups)


def current_user() -> str:
    """Spark's Utils.getCurrentUserName: SPARK_USER, else the process's login name."""
    user = os.environ.get("SPARK_USER")
    if user:
        return user
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


# ---------------------------------------------------------------------------------------------
# Host and Origin
# ---------------------------------------------------------------------------------------------

_WILDCARDS = ("", "0.0.0.0", "::", "*")
_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


def normalize_host(host: str) -> str:
    """`Host`-header or URL host without port, brackets or trailing dot, lower case."""
    h = host.strip().lower()
    if h.startswith("["):
        h = h[1:].split("]", 1)[0]
    elif h.count(":") == 1:
        h = h.split(":", 1)[0]
    return h.rstrip(".")


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _local_addresses() -> set[str]:
    import psutil
    names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
    for addrs in psutil.net_if_addrs().values():
        for a in addrs:
            if a.family in (socket.AF_INET, socket.AF_INET6):
                names.add(a.address.split("%", 1)[0].lower())
    return names


def allowed_hosts(bind_host: str, conf: Mapping[str, Any],
                  extra: Iterable[str] = ()) -> Optional[frozenset[str]]:
    """The names a request's Host header may carry (see the module doc); None: any."""
    configured = _names(conf.get(ALLOWED_HOSTS))
    if "*" in configured:
        return None
    names = {normalize_host(h) for h in configured}
    bind = normalize_host(bind_host)
    if bind in _WILDCARDS:
        names |= _local_addresses()
    else:
        names.add(bind)
        try:
            names |= {normalize_host(str(i[4][0]).split("%", 1)[0])
                      for i in socket.getaddrinfo(bind, None)}
        except (OSError, UnicodeError):
            pass
        if any(_is_loopback(n) for n in names):
            names |= set(_LOOPBACK_NAMES)
    for key in ("SPARK_PUBLIC_DNS", "SPARK_LOCAL_HOSTNAME", "SPARK_LOCAL_IP"):
        if os.environ.get(key):
            names.add(normalize_host(os.environ[key]))
    names |= {normalize_host(h) for h in extra if h}
    return frozenset(n for n in names if n)


# ---------------------------------------------------------------------------------------------
# TLS (spark.ssl.<namespace>.*)
# ---------------------------------------------------------------------------------------------

def server_ssl_context(conf: Mapping[str, Any], namespace: str) -> Optional[ssl.SSLContext]:
    """The TLS context of a server in `namespace` (standalone, ui, historyServer), or None
    when TLS is off there. Ember reads PEM: the certificate chain from `certChain` (Spark's
    PEM key) or `certFile`, the key from `privateKey` or `keyFile`, else `keyStore` when it is
    a PEM file holding both; `keyPassword` decrypts an encrypted key; `protocol` (TLSv1.2,
    TLSv1.3) is the minimum version. ValueError names what is missing or unreadable."""
    if not ssl_enabled(conf, namespace):
        return None
    cert = ssl_setting(conf, namespace, "certChain") or ssl_setting(conf, namespace, "certFile")
    key = ssl_setting(conf, namespace, "privateKey") or ssl_setting(conf, namespace, "keyFile")
    store = ssl_setting(conf, namespace, "keyStore")
    if cert is None:
        cert = store
        key = key or store
    if cert is None:
        raise ValueError(f"spark.ssl.{namespace}.enabled=true needs "
                         f"spark.ssl.{namespace}.certChain (or certFile) and privateKey (or "
                         "keyFile), PEM files; `ember gen-cert` makes a self-signed pair")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _min_version(ssl_setting(conf, namespace, "protocol"))
    try:
        ctx.load_cert_chain(cert, key, ssl_setting(conf, namespace, "keyPassword"))
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"Cannot load the TLS certificate {cert} / key {key} "
                         f"(spark.ssl.{namespace}.*): {e}") from None
    return ctx


def client_ssl_context(conf: Mapping[str, Any], namespace: str) -> Optional[ssl.SSLContext]:
    """The context a client of `namespace` verifies servers with: the PEM CA bundle in
    `spark.ssl.<ns>.trustStore` (else the system's CAs); None when TLS is off there."""
    if not ssl_enabled(conf, namespace):
        return None
    trust = ssl_setting(conf, namespace, "trustStore")
    try:
        ctx = ssl.create_default_context(cafile=trust)
    except (OSError, ssl.SSLError) as e:
        raise ValueError(f"Cannot load the trust store {trust} "
                         f"(spark.ssl.{namespace}.trustStore): {e}") from None
    ctx.minimum_version = _min_version(ssl_setting(conf, namespace, "protocol"))
    return ctx


def https_redirect(host_header: Optional[str], port: int, target: str) -> str:
    """Spark's createRedirectURI: `https://<the request's host>:<port><path?query>`."""
    host = normalize_host(host_header or "localhost")
    if ":" in host:
        host = f"[{host}]"
    return f"https://{host}:{port}{target}"


def _min_version(protocol: Optional[str]) -> ssl.TLSVersion:
    if protocol is None or protocol.upper() in ("TLS", "TLSV1.2"):
        return ssl.TLSVersion.TLSv1_2
    if protocol.upper() == "TLSV1.3":
        return ssl.TLSVersion.TLSv1_3
    raise ValueError(f"Unsupported spark.ssl protocol {protocol!r} (TLSv1.2 or TLSv1.3)")


# ---------------------------------------------------------------------------------------------
# Connection limits
# ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ConnectionLimits:
    """Slow-client limits of every HTTP server: a request's headers must arrive within
    `header_timeout` of its first byte (or of the previous response); a connection with no
    traffic for `idle_timeout` is closed; at most `max_connections` at once."""

    header_timeout: float = 10.0
    idle_timeout: float = 60.0
    max_connections: int = 256

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> "ConnectionLimits":
        return cls(config.read(conf, HEADER_TIMEOUT), config.read(conf, IDLE_TIMEOUT),
                   max(1, config.read(conf, MAX_CONNECTIONS)))


# ---------------------------------------------------------------------------------------------
# The guard
# ---------------------------------------------------------------------------------------------

class HttpGuard:
    """The checks of one HTTP server (see the module doc). `port` is set once bound;
    `tls` says whether it serves HTTPS (for the Origin and the cookie's Secure flag)."""

    def __init__(self, conf: Mapping[str, Any], bind_host: str, *,
                 public_hosts: Iterable[str] = (), owners: Iterable[str] = (),
                 acl_prefix: str = "spark", key: Optional[bytes] = None,
                 use_cluster_secret: bool = True, tls: bool = False) -> None:
        self.key = key if key is not None or not use_cluster_secret else ui_secret_key(conf)
        self.max_lifetime = max_token_lifetime(conf)
        self.hosts = allowed_hosts(bind_host, conf, public_hosts)
        self.acls = Acls.from_conf(conf, [current_user(), *owners], acl_prefix)
        self.limits = ConnectionLimits.from_conf(conf)
        self.tls = tls
        self.port = 0
        self._csrf_key = secrets.token_bytes(32)

    @property
    def authenticates(self) -> bool:
        return self.key is not None

    @property
    def cookie_name(self) -> str:
        return f"ember_ui_{self.port}"    # cookies ignore ports: one per server

    # -- single checks ----------------------------------------------------------------------

    def host_ok(self, host_header: Optional[str]) -> bool:
        if self.hosts is None:
            return True
        return host_header is not None and normalize_host(host_header) in self.hosts

    def origin_ok(self, origin: Optional[str]) -> bool:
        """No Origin (not a browser's cross-site request), or this server's own."""
        if origin is None:
            return True
        try:
            parts = urlsplit(origin.strip())
            port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return False     # includes "null" (sandboxed frames, file: pages)
        host_ok = self.hosts is None or normalize_host(parts.hostname) in self.hosts
        return host_ok and (self.port == 0 or port == self.port)

    def user(self, headers: Mapping[str, str]) -> tuple[Optional[str], Optional[Denial]]:
        """(user, None) when the request authenticated (user None with authentication off),
        else (None, the 401)."""
        if self.key is None:
            return None, None
        auth = headers.get(jws.AUTHORIZATION)
        token = None
        if auth is not None:
            if not auth.startswith("Bearer "):
                return None, self._unauthorized(jws.MALFORMED_HEADER)
            token = auth[len("Bearer "):].strip()
        else:
            token = _cookie(headers.get("Cookie"), self.cookie_name)
        if not token:
            return None, self._unauthorized("Authentication required: send "
                                            "`Authorization: Bearer <token>` (`ember token`) "
                                            f"or log in at {LOGIN_PATH}")
        try:
            return verify_token(token, self.key, self.max_lifetime), None
        except ValueError as e:
            return None, self._unauthorized(str(e))

    @staticmethod
    def _unauthorized(text: str) -> Denial:
        return Denial(401, f"401: {text}\n", {"WWW-Authenticate": 'Bearer realm="ember"',
                                               "Cache-Control": jws.CACHE_CONTROL})

    def authorize(self, user: Optional[str], action: str, acls: Optional[Acls] = None
                  ) -> Optional[Denial]:
        """Spark's view/modify check against `acls` (one application's, in the history
        server), else this server's."""
        acls = acls or self.acls
        ok = acls.can_modify(user) if action == MODIFY else acls.can_view(user)
        if ok:
            return None
        return Denial(403, f"403: User {user} is not authorized to {action} this resource\n")

    # -- the whole check --------------------------------------------------------------------

    def check(self, method: str, headers: Mapping[str, str], action: Optional[str] = None,
              acls: Optional[Acls] = None) -> tuple[Optional[str], Optional[Denial]]:
        """Rules 1-4 of the module doc: (user, None) when the request may go on, else
        (None, the answer). `action` defaults to view for safe methods, modify otherwise."""
        if not self.host_ok(headers.get("Host")):
            return None, Denial(403, "403: Host header does not name this server "
                                     f"(add it to {ALLOWED_HOSTS})\n")
        unsafe = method.upper() not in SAFE_METHODS
        if unsafe and not self.origin_ok(headers.get("Origin")):
            return None, Denial(403, "403: Cross-origin request refused\n")
        user, denied = self.user(headers)
        if denied is not None:
            return None, denied
        denied = self.authorize(user, action or (MODIFY if unsafe else VIEW), acls)
        return (None, denied) if denied is not None else (user, None)

    # -- CSRF -------------------------------------------------------------------------------

    def csrf_token(self, user: Optional[str]) -> str:
        return hmac.new(self._csrf_key, (user or "").encode("utf-8"),
                        hashlib.sha256).hexdigest()

    def csrf_ok(self, token: Any, user: Optional[str]) -> bool:
        return isinstance(token, str) and hmac.compare_digest(token.encode("utf-8", "replace"),
                                                              self.csrf_token(user).encode())

    # -- login ------------------------------------------------------------------------------

    def login(self, token: str) -> tuple[Optional[str], Optional[Denial]]:
        """Check a pasted token; (Set-Cookie value, None) or (None, 401)."""
        if self.key is None:
            return None, Denial(404, "404: Authentication is off\n")
        try:
            user = verify_token(token.strip(), self.key, self.max_lifetime)
        except ValueError as e:
            return None, self._unauthorized(str(e))
        lifetime = min(self.max_lifetime, 8 * 3600.0)
        session = mint_token(self.key, user, lifetime)
        secure = "; Secure" if self.tls else ""
        return (f"{self.cookie_name}={session}; Path=/; Max-Age={int(lifetime)}; HttpOnly; "
                f"SameSite=Strict{secure}"), None


def _cookie(header: Optional[str], name: str) -> Optional[str]:
    if not header:
        return None
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v.strip() or None
    return None


def login_page(next_path: str, message: str = "") -> str:
    """The login form: paste a token from `ember token`; it becomes a session cookie."""
    from html import escape
    note = f'<p class="error">{escape(message)}</p>' if message else ""
    return ('<!DOCTYPE html>\n<html><head><meta charset="utf-8"><title>Log in</title></head>'
            f'<body><h3>Log in</h3>{note}<p>This cluster authenticates '
            "(spark.authenticate=true). Paste a token made with <code>ember token "
            "--user NAME</code>.</p>"
            f'<form method="POST" action="{LOGIN_PATH}?next={escape(quote(next_path, safe="/"))}">'
            '<input type="password" name="token" size="60" autocomplete="off"> '
            '<input type="submit" value="Log in"></form></body></html>\n')


def safe_next(path: Optional[str]) -> str:
    """Where to go after logging in: a same-site path, never another site."""
    if not path or not path.startswith("/") or path.startswith("//") or "\\" in path:
        return "/"
    return path


def wants_html(headers: Mapping[str, str]) -> bool:
    return "text/html" in (headers.get("Accept") or "")


def cors_simple_content_type(content_type: Optional[str]) -> bool:
    """A content type a foreign page may POST without a CORS preflight."""
    ct = (content_type or "").split(";", 1)[0].strip().lower()
    return ct in _CORS_SIMPLE_TYPES


__all__ = ["HttpGuard", "Denial", "Acls", "ConnectionLimits", "ui_secret_key", "mint_token",
           "verify_token", "max_token_lifetime", "allowed_hosts", "normalize_host",
           "server_ssl_context", "client_ssl_context", "ssl_enabled", "ssl_setting",
           "secure_port", "https_redirect",
           "login_page", "safe_next", "wants_html", "cors_simple_content_type", "current_user",
           "CSRF_FIELD", "LOGIN_PATH", "VIEW", "MODIFY", "TOKEN_MAX_LIFETIME", "ALLOWED_HOSTS"]
