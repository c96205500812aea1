"""`ember-upload://<sha256>/<name>`: the URLs of app resources kept by the master.

Why a module of its own: the submit client makes these URLs, the master's store keeps their
bytes and the worker's DriverRunner fetches them back; the URL rules (a SHA-256 host, a plain
file name) are shared by all three without the worker importing the master's package.
"""
from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote, urlparse

SCHEME = "ember-upload"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_BAD_NAME = re.compile(r"[\x00-\x1f/\\]")


class UploadError(ValueError):
    """A refused upload or lookup; the message is the one-line reason given to the client."""


def check_name(name: str) -> str:
    """A resource name as kept on disk: a plain file name, never a path."""
    if not name or name in (".", "..") or _BAD_NAME.search(name) or len(name) > 255:
        raise UploadError(f"Invalid resource name {name!r}: expected a plain file name")
    return name


def upload_url(sha256: str, name: str) -> str:
    return f"{SCHEME}://{sha256}/{quote(name)}"


def parse_upload_url(url: str) -> tuple[str, str]:
    """`ember-upload://<sha256>/<name>` -> (sha256, name); UploadError for anything else."""
    parsed = urlparse(url)
    sha = (parsed.netloc or "").lower()
    if parsed.scheme != SCHEME or not _SHA256.fullmatch(sha):
        raise UploadError(f"Not an {SCHEME} URL: {url}")
    return sha, check_name(unquote(parsed.path.lstrip("/")))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = ["SCHEME", "UploadError", "check_name", "upload_url", "parse_upload_url", "sha256_hex"]
