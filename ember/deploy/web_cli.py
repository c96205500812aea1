"""`ember token` and `ember gen-cert`: credentials for Ember's web surfaces by hand.

Why: with `spark.authenticate=true` every UI, `/json`, `/api/v1` and REST request needs a
bearer token signed with the cluster secret; curl, scripts and browsers (through the
`/login` form) get one here, signed with the secret resolved exactly as the daemons resolve
it (`spark.authenticate.secret`, `spark.authenticate.secret.file`, `_SPARK_AUTH_SECRET`,
from `--conf`, SPARK_SUBMIT_OPTS-style `-D` words or spark-defaults.conf). And HTTPS
(`spark.ssl.<ns>.*`) needs a certificate: `gen-cert` writes a self-signed PEM pair for a
quick start (a real deployment uses its CA's).
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import socket
import sys
from typing import Optional, Sequence

from ember import config
from ember.rpc.config import parse_time


def _conf(args: argparse.Namespace) -> dict[str, str]:
    from ember.deploy.properties import daemon_conf
    cli: dict[str, str] = {}
    for pair in args.conf:
        if "=" not in pair:
            raise ValueError(f"Invalid argument to --conf: {pair}")
        k, v = pair.split("=", 1)
        cli[k] = v
    return daemon_conf(os.environ, "SPARK_SUBMIT_OPTS", args.properties_file, cli)


def token_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember token [--user NAME] [--lifetime 1h]`: print a bearer token."""
    from ember.web import jws
    from ember.deploy.rest.server import REST_FILTERS
    from ember.web.security import current_user, max_token_lifetime, mint_token
    from ember.rpc.config import resolve_secret
    p = argparse.ArgumentParser(
        prog="ember token", description="Print a bearer token for Ember's web UIs and REST "
        "gateway (curl -H \"Authorization: Bearer $(ember token)\", or paste it into a UI's "
        "/login form).")
    p.add_argument("--user", default=None, help="the identity (`sub`) checked against "
                   "Spark's ACLs (default: the current user)")
    p.add_argument("--lifetime", default="1h", help="how long it is valid (e.g. 10m, 1h; at "
                   "most spark.ember.ui.token.maxLifetime, default 1d)")
    p.add_argument("--app", default=None, metavar="SCOPE", help="sign for one "
                   "application's UI instead: a cluster-mode driver's UI takes only tokens "
                   "from its own application credential; SCOPE is its driver (submission) "
                   "id, e.g. driver-20260101000000-0000 (an application id for a scope the "
                   "master recorded as such)")
    p.add_argument("--properties-file", metavar="FILE")
    p.add_argument("--conf", action="append", default=[], metavar="K=V")
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        conf = _conf(args)
        lifetime = parse_time("--lifetime", args.lifetime)
        limit = max_token_lifetime(conf)
        if not 0 < lifetime <= limit:
            raise ValueError(f"--lifetime must be positive and at most {limit:g} s "
                             "(spark.ember.ui.token.maxLifetime)")
        filters = config.read(conf, REST_FILTERS) or []
        if args.app is not None:
            from ember.rpc.security import app_credential, parse_credential
            key = parse_credential(app_credential(resolve_secret(conf), args.app).encode())[1]
        else:
            key = (jws.load_secret_key(conf.get(jws.SECRET_KEY_PARAM))
                   if jws.FILTER_CLASS in filters else resolve_secret(conf))
    except ValueError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(mint_token(key, args.user or current_user(), lifetime))
    return 0


def gen_cert_main(argv: Optional[Sequence[str]] = None) -> int:
    """`ember gen-cert [--dir DIR] [--host NAME ...] [--days N]`: a self-signed PEM pair."""
    p = argparse.ArgumentParser(
        prog="ember gen-cert", description="Write a self-signed certificate and key (PEM) "
        "for HTTPS on Ember's web UIs and REST gateway, and print the settings using them.")
    p.add_argument("--dir", default=".", help="where to write cert.pem and key.pem")
    p.add_argument("--host", action="append", default=[], help="a name or address the "
                   "certificate is valid for (repeatable; default: localhost, 127.0.0.1, "
                   "this host's name)")
    p.add_argument("--days", type=int, default=365)
    args = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    hosts = args.host or ["localhost", "127.0.0.1", socket.gethostname()]
    try:
        cert_path, key_path = write_self_signed(args.dir, hosts, args.days)
    except (OSError, ValueError) as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    print(f"Wrote {cert_path} and {key_path} (valid {args.days} days for {', '.join(hosts)})."
          "\nAdd to spark-defaults.conf (clients trust the same file):\n"
          "  spark.ssl.enabled true\n"
          f"  spark.ssl.certChain {cert_path}\n"
          f"  spark.ssl.privateKey {key_path}\n"
          f"  spark.ssl.trustStore {cert_path}")
    return 0


def write_self_signed(directory: str, hosts: Sequence[str], days: int = 365
                      ) -> tuple[str, str]:
    """cert.pem and key.pem (0600) in `directory`: an EC P-256 key and a certificate for
    `hosts` (subject alternative names: DNS names and IP addresses)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    if days <= 0 or not hosts:
        raise ValueError("--days must be positive and at least one --host given")
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=days))
            .add_extension(x509.SubjectAlternativeName(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    os.makedirs(directory, exist_ok=True)
    cert_path = os.path.abspath(os.path.join(directory, "cert.pem"))
    key_path = os.path.abspath(os.path.join(directory, "key.pem"))
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()))
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


__all__ = ["token_main", "gen_cert_main", "write_self_signed"]
