"""App resources the master keeps for cluster-mode drivers: `ember-upload://<sha256>/<name>`.

Why: Spark's cluster mode assumes the jar URL is reachable from every worker (HDFS, HTTP, or a
path on a shared file system). Ember's submit client runs anywhere, so it uploads the app
file (and --py-files / --files) to the master, which keeps the bytes as long as it runs;
the worker chosen for the driver fetches them back by URL and checks the SHA-256 that names
them. Content addressing makes a re-upload free and a supervised relaunch safe (the bytes
never change under a URL).

Where the bytes live is the recovery engine's business (`PersistenceEngine.put_blob`): a
private temporary directory without recovery, the recovery directory with FILESYSTEM (so a
driver that was waiting when the master died still finds its files after a restart), and
whatever the ZooKeeper mode chooses.

Nothing here trusts the client: names are reduced to a plain file name, the checksum is
recomputed, size is bounded - each upload (spark.ember.submit.maxUploadSize) and all of them
together (spark.ember.submit.maxTotalUploadSize: a client cannot fill the master's disk) -
and lookups only ever join a validated hex digest and a plain name under the store's
directory.
"""
from __future__ import annotations

import hashlib
import logging
import threading
import time
from typing import Any, Optional

from ember.deploy.upload_urls import UploadError, check_name, parse_upload_url, upload_url

# An upload is kept at least this long after it was last put, whatever the master says: a
# client uploads first and submits next, and its driver must find the file.
KEEP_RECENT_S = 3600.0
log = logging.getLogger("ember.deploy.master.uploads")
DEFAULT_MAX_BYTES = 100 * 1024 * 1024
DEFAULT_MAX_TOTAL_BYTES = 1024 * 1024 * 1024


class AppResourceStore:
    """Content-addressed resources, kept as blobs `<sha256>/<name>` in a directory `root`, or
    in a PersistenceEngine `blobs`, or, with neither, in a private temporary directory
    removed by `close`. Thread-safe: the RPC loop and the REST thread both put and
    get."""

    def __init__(self, root: Optional[str] = None, max_bytes: int = DEFAULT_MAX_BYTES,
                 blobs: Any = None, max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES) -> None:
        from ember.deploy.master.persistence import BlackHolePersistenceEngine, BlobDirectory
        self._owned: Optional[BlackHolePersistenceEngine] = None
        if root is not None:
            directory = BlobDirectory(root)
            self._put, self._get, self._delete = directory.put, directory.get, directory.delete
        else:
            if blobs is None:
                blobs = self._owned = BlackHolePersistenceEngine()
            self._put, self._get, self._delete = blobs.put_blob, blobs.get_blob, blobs.delete_blob
        self._last_put: dict[str, float] = {}   # key -> monotonic time of its last put
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
        key = f"{digest}/{name}"
        with self._lock:
            if key not in self._sizes:
                held = sum(self._sizes.values())
                if held + len(data) > self.max_total_bytes:
                    raise UploadError(
                        f"Resource {name} ({len(data)} bytes) would take the master's uploads "
                        f"past {self.max_total_bytes} bytes (spark.ember.submit."
                        f"maxTotalUploadSize; {held} bytes held until their drivers end)")
                self._sizes[key] = len(data)
            self._last_put[key] = time.monotonic()
            if self._get(key) is None:
                self._put(key, data)
        return upload_url(digest, name)

    def get(self, url: str) -> tuple[bytes, str]:
        """(data, sha256) of an uploaded resource; UploadError if the URL names none."""
        sha, name = parse_upload_url(url)
        data = self._get(f"{sha}/{name}")
        if data is None:
            raise UploadError(f"No uploaded resource {url} on this master")
        return data, sha

    def delete(self, url: str, keep_recent_s: float = KEEP_RECENT_S) -> bool:
        """Delete a resource no driver needs any more, unless it was put in the last
        `keep_recent_s` seconds (a submission may be on its way). Returns whether it went."""
        sha, name = parse_upload_url(url)
        key = f"{sha}/{name}"
        with self._lock:
            last = self._last_put.get(key)
            if last is not None and time.monotonic() - last < keep_recent_s:
                return False
            self._last_put.pop(key, None)
            self._delete(key)
            self._sizes.pop(key, None)     # a deleted upload frees its share of the quota
        log.info("Deleted uploaded resource %s: no driver uses it any more", url)
        return True

    def close(self) -> None:
        if self._owned is not None:
            self._owned.close()
