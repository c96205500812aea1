"""App resources the master keeps for cluster-mode drivers: `ember-upload://<sha256>/<name>`.

Why: Spark's cluster mode assumes the jar URL is reachable from every worker (HDFS, HTTP, or a
path on a shared file system). Ember's submit client runs anywhere, so it uploads the app
file (and --py-files / --files) to the master, which keeps the bytes as long as it runs;
the worker chosen for the driver fetches them back by URL and checks the SHA-256 that names
them. Content addressing makes a re-upload free and a supervised relaunch safe (the bytes
never change under a URL).

Nothing here trusts the client: names are reduced to a plain file name, the checksum is
recomputed, size is bounded - each upload (spark.ember.submit.maxUploadSize) and all of them
together (spark.ember.submit.maxTotalUploadSize: a client cannot fill the master's disk) -
and lookups only ever join a validated hex digest and a plain name under the store's
directory.
"""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import threading
from typing import Optional
from urllib.parse import quote, unquote, urlparse

SCHEME = "ember-upload"
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_TOTAL_BYTES = 1024 * 1024 * 1024
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


class AppResourceStore:
    """Content-addressed files under one directory (a fresh temporary one by default, removed
    by `close`). Thread-safe: the RPC loop and the REST thread both put and get."""

    def __init__(self, root: Optional[str] = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES) -> None:
        self._owned = root is None
        self.root = root or tempfile.mkdtemp(prefix="ember-master-uploads-")
        os.makedirs(self.root, exist_ok=True)
        self.max_bytes = max_bytes
        self.max_total_bytes = max_total_bytes
        self._sizes: dict[str, int] = {}      # "<sha256>/<name>" -> bytes held
        self._lock = threading.Lock()

    def put(self, name: str, data: bytes, sha256: Optional[str] = None) -> str:
        """Keep `data` as `name`; returns its URL. `sha256`, when given, must match."""
        check_name(name)
        if len(data) > self.max_bytes:
            raise UploadError(f"Resource {name} is {len(data)} bytes, more than the "
                              f"{self.max_bytes} bytes allowed (spark.ember.submit.maxUploadSize)")
        digest = hashlib.sha256(data).hexdigest()
        if sha256 is not None and sha256.lower() != digest:
            raise UploadError(f"Checksum mismatch for {name}: the client sent {sha256}, "
                              f"the master received {digest}")
        folder = os.path.join(self.root, digest)
        path = os.path.join(folder, name)
        with self._lock:
            key = f"{digest}/{name}"
            if key not in self._sizes:
                held = sum(self._sizes.values())
                if held + len(data) > self.max_total_bytes:
                    raise UploadError(
                        f"Resource {name} ({len(data)} bytes) would take the master's uploads "
                        f"past {self.max_total_bytes} bytes (spark.ember.submit."
                        f"maxTotalUploadSize; {held} bytes held until their drivers end)")
                self._sizes[key] = len(data)
            if not os.path.isfile(path):
                os.makedirs(folder, exist_ok=True)
                tmp = path + ".part"
                with open(tmp, "wb") as f:
                    f.write(data)
                os.replace(tmp, path)
        return upload_url(digest, name)

    def get(self, url: str) -> tuple[bytes, str]:
        """(data, sha256) of an uploaded resource; UploadError if the URL names none."""
        sha, name = parse_upload_url(url)
        try:
            with open(os.path.join(self.root, sha, name), "rb") as f:
                return f.read(), sha
        except OSError:
            raise UploadError(f"No uploaded resource {url} on this master") from None

    def close(self) -> None:
        if self._owned:
            shutil.rmtree(self.root, ignore_errors=True)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
