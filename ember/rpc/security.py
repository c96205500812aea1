"""Who may talk to an RpcEnv, decided before a byte of theirs is parsed; no sockets here.

Three ways an env admits peers (`RpcConf.mode`):

- ``secret``: ``spark.authenticate=true``. The HMAC handshake proves a shared secret; every
  frame after it carries a MAC (or is AES-GCM sealed with ``spark.network.crypto.enabled``).
  A secret is either the cluster secret (daemons, the operator's clients) or an
  *application credential* ``ember-app-v1:<scope>:<hex key>`` whose key is
  HKDF-SHA256(cluster secret, scope): what workers hand to the drivers and executors they
  launch, so an application's code never holds the cluster secret and its connections are
  known to be that application's.
- ``local-user`` (the default without a secret): the env only listens on loopback, and both
  ends of every connection look the other up in the kernel's socket table
  (/proc/net/tcp): a peer owned by another Unix user is refused before its first byte is
  read. Same-user processes could read a secret file anyway, so they are the trust domain;
  this is how `make demo` and a laptop cluster stay authenticated with no set-up.
- ``insecure``: ``spark.ember.network.insecure.allowUnauthenticated=true``, the named opt-out;
  anyone who reaches the port is served (the v1 behaviour), with a warning.

A listener on a non-loopback address without a secret refuses to start unless opted out.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import secrets
import socket
import sys
import threading
from typing import Sequence

log = logging.getLogger("ember.rpc")

INSECURE_OPT_OUT = "spark.ember.network.insecure.allowUnauthenticated"
# The same opt-out for a whole cluster: daemons pass their environment on to the drivers and
# executors they launch, which read no configuration before their first connection.
INSECURE_OPT_OUT_ENV = "EMBER_NETWORK_INSECURE_ALLOW_UNAUTHENTICATED"
CRYPTO_ENABLED = "spark.network.crypto.enabled"
MIN_SECRET_BYTES = 32
APP_CREDENTIAL_PREFIX = "ember-app-v1:"
# Set by the master in an application's Command.environment: the scope its executors'
# credentials are derived for (a cluster-mode driver's own scope; absent = the app id).
SCOPE_ENV = "EMBER_AUTH_SCOPE"
SECRET_FILE_NAME = "ember-auth-secret"

MODE_SECRET = "secret"
MODE_LOCAL_USER = "local-user"
MODE_INSECURE = "insecure"

_HOW_TO_SET = ("run `ember master --generate-secret` and start every daemon and client with "
               "--conf spark.authenticate=true (the secret file is found at its default path "
               "on this machine; elsewhere set spark.authenticate.secret.file or the "
               "_SPARK_AUTH_SECRET environment variable)")


def is_loopback_host(host: str) -> bool:
    """True when every address `host` resolves to is a loopback address ("" and 0.0.0.0
    are every interface, so not)."""
    if not host:
        return False
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0].split("%")[0]).is_loopback
                               for i in infos)


def refuse_unauthenticated_listener(host: str) -> str:
    """The one-line error of a listener that would serve strangers on a network address."""
    return (f"Refusing to listen on {host or '<all interfaces>'} without authentication: "
            f"{_HOW_TO_SET}; or bind 127.0.0.1; or opt out with {INSECURE_OPT_OUT}=true")


# ------------------------------------------------------------------------------------------
# Secrets
# ------------------------------------------------------------------------------------------

def check_secret(secret: bytes, where: str = "spark.authenticate.secret") -> bytes:
    if len(secret) < MIN_SECRET_BYTES:
        raise ValueError(f"{where} is {len(secret)} bytes; at least {MIN_SECRET_BYTES} are "
                         f"required (generate one: `ember master --generate-secret`)")
    return secret


def derive_app_key(cluster_secret: bytes, scope: str) -> bytes:
    """HKDF-SHA256(cluster secret, info=scope): an application's key (32 bytes)."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=b"ember-app-secret-v1",
                info=scope.encode("utf-8")).derive(cluster_secret)


def app_credential(secret: bytes, scope: str) -> str:
    """The credential a worker gives a process of application `scope`. From an application
    credential only the same scope can be handed on (never widened)."""
    own_scope, key = parse_credential(secret)
    if own_scope is not None:
        if own_scope != scope:
            raise ValueError(f"An application credential for {own_scope!r} cannot derive "
                             f"one for {scope!r}")
        return secret.decode("utf-8")
    if not scope or ":" in scope or len(scope.encode()) > 255:
        raise ValueError(f"Invalid application scope {scope!r}")
    return f"{APP_CREDENTIAL_PREFIX}{scope}:{derive_app_key(key, scope).hex()}"


def parse_credential(secret: bytes) -> tuple[str | None, bytes]:
    """(application scope or None for the cluster secret, key bytes)."""
    if not secret.startswith(APP_CREDENTIAL_PREFIX.encode()):
        return None, secret
    body = secret[len(APP_CREDENTIAL_PREFIX):].decode("utf-8", "replace")
    scope, sep, key_hex = body.rpartition(":")
    try:
        key = bytes.fromhex(key_hex)
    except ValueError:
        key = b""
    if not sep or not scope or len(key) != 32:
        raise ValueError("Malformed application credential in the secret "
                         "(expected ember-app-v1:<scope>:<64 hex digits>)")
    return scope, key


def default_secret_path() -> str:
    """Where `ember master --generate-secret` writes and spark.authenticate=true looks when
    no secret is configured: $SPARK_CONF_DIR/ember-auth-secret, else ~/.ember/."""
    conf_dir = os.environ.get("SPARK_CONF_DIR")
    base = conf_dir if conf_dir else os.path.join(os.path.expanduser("~"), ".ember")
    return os.path.join(base, SECRET_FILE_NAME)


def generate_secret_file(path: str | None = None) -> tuple[str, bool]:
    """Create a 0600 file holding 64 random hex characters unless it exists; (path,
    created). O_EXCL, so two masters starting at once end up with the same secret."""
    path = path or default_secret_path()
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path, False
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_hex(32) + "\n")
    return path, True


def secret_instructions(path: str) -> str:
    return (f"Cluster secret in {path} (mode 0600). Start the master, workers, `ember submit` "
            f"and client-mode drivers with --conf spark.authenticate=true: on this machine "
            f"they find it there; elsewhere copy it and add --conf "
            f"spark.authenticate.secret.file=<path> or export _SPARK_AUTH_SECRET. Never pass "
            f"the secret itself on a command line.")


_warned_argv = False


def warn_secret_on_command_line(argv: Sequence[str] | None = None) -> None:
    """A secret in argv is readable by every local user (/proc/<pid>/cmdline); warn once."""
    global _warned_argv
    if _warned_argv:
        return
    args = list(sys.argv if argv is None else argv)
    if any("spark.authenticate.secret=" in a for a in args):
        _warned_argv = True
        log.warning("spark.authenticate.secret was given on the command line, where every "
                    "local user can read it (/proc/<pid>/cmdline, ps); use "
                    "spark.authenticate.secret.file or _SPARK_AUTH_SECRET instead")


_rlimit_lock = threading.Lock()
_rlimit_raised = False


def raise_open_files_limit() -> None:
    """Soft RLIMIT_NOFILE up to the hard limit, once per process (a daemon's connections and
    its children's pipes must not hit a low default first)."""
    global _rlimit_raised
    with _rlimit_lock:
        if _rlimit_raised:
            return
        _rlimit_raised = True
    try:
        import resource
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if hard == resource.RLIM_INFINITY:
            hard = 1 << 20
        if soft != resource.RLIM_INFINITY and soft < hard:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    except (ImportError, ValueError, OSError) as e:
        log.debug("Cannot raise the open-files limit: %s", e)


# ------------------------------------------------------------------------------------------
# Local-user mode: who owns the other end of a loopback connection
# ------------------------------------------------------------------------------------------

def _proc_hex(ip: str, port: int, v6: bool) -> bytes:
    addr = ipaddress.ip_address(ip.split("%")[0])
    if v6 and addr.version == 4:
        addr = ipaddress.IPv6Address("::ffff:" + str(addr))
    packed = addr.packed
    words = "".join(f"{int.from_bytes(packed[i:i + 4], 'little'):08X}"
                    for i in range(0, len(packed), 4))
    return f"{words}:{port:04X}".encode()


def socket_owner_uid(local: tuple[str, int], remote: tuple[str, int]) -> int | None:
    """Uid owning the established TCP socket whose local end is `local` and remote end
    `remote` (both on this machine), from /proc/net/tcp{,6}; None if not found."""
    try:
        is_v4 = ipaddress.ip_address(local[0].split("%")[0]).version == 4
    except ValueError:
        return None
    for name, v6 in (("/proc/net/tcp", False), ("/proc/net/tcp6", True)):
        if is_v4 is False and not v6:
            continue
        try:
            needle = (_proc_hex(local[0], local[1], v6) + b" "
                      + _proc_hex(remote[0], remote[1], v6) + b" 01 ")
        except ValueError:
            continue
        for fresh in (False, True):
            data = _socket_table(name, fresh)
            i = data.find(needle)
            if i >= 0:
                line = data[i:data.find(b"\n", i)].split()
                try:
                    return int(line[6])   # local rem st tx:rx tr:when retrnsmt uid
                except (IndexError, ValueError):
                    return None
    return None


_tables: dict[str, tuple[float, bytes]] = {}
_TABLE_TTL = 0.2


def _socket_table(name: str, fresh: bool) -> bytes:
    """/proc/net/tcp{,6}, re-read at most every 0.2 s unless `fresh` (a burst of accepted
    connections costs one read, not one each; a miss in a cached copy re-reads)."""
    import time
    now = time.monotonic()
    cached = _tables.get(name)
    if not fresh and cached is not None and now - cached[0] < _TABLE_TTL:
        return cached[1]
    try:
        with open(name, "rb") as f:
            data = f.read()
    except OSError:
        data = b""
    _tables[name] = (now, data)
    return data


def peer_is_same_user(sock_local: tuple[str, int],
                      sock_remote: tuple[str, int]) -> tuple[bool, str]:
    """(admitted?, why not): the other end of our socket must be a loopback socket of a
    process running as our own uid."""
    try:
        if not ipaddress.ip_address(sock_remote[0].split("%")[0]).is_loopback:
            return False, (f"{sock_remote[0]} is not a loopback address, so its owner cannot "
                           f"be checked; {_HOW_TO_SET}")
    except ValueError:
        return False, f"unknown peer address {sock_remote[0]!r}"
    uid = socket_owner_uid(sock_remote, sock_local)
    if uid is None:
        return False, "its socket is not in the kernel's socket table (/proc/net/tcp)"
    if uid != os.geteuid():
        return False, (f"it belongs to uid {uid}, not to this process's user ({os.geteuid()}); "
                       f"to admit other users {_HOW_TO_SET}")
    return True, ""


PICKLE_AUDIT_ENV = "EMBER_FUZZ_PICKLE_AUDIT"
_audit_installed = False


def install_pickle_audit() -> None:
    """Fuzzing instrumentation (`python -m benchmarks.fuzz`): with EMBER_FUZZ_PICKLE_AUDIT=dir
    set, count every pickle `find_class` (what any code-running pickle needs) of this
    process into dir/<pid>, so the fuzzer can show no input of its reached pickle."""
    global _audit_installed
    directory = os.environ.get(PICKLE_AUDIT_ENV)
    if not directory or _audit_installed:
        return
    _audit_installed = True
    count = [0]

    def hook(event: str, args: tuple) -> None:
        if event == "pickle.find_class":
            count[0] += 1
            where = os.environ.get(PICKLE_AUDIT_ENV)   # read each time: a harness moves it
            try:
                with open(os.path.join(where or directory, str(os.getpid())), "w") as f:
                    f.write(str(count[0]))
            except OSError:
                pass
    sys.addaudithook(hook)
