"""spark.deploy.recoveryMode=ZOOKEEPER: the master's records, uploads and leader election in
ZooKeeper (kazoo), for standby masters that share no disk.

Layout under `spark.deploy.zookeeper.dir` (default `/spark`), as Spark's
ZooKeeperPersistenceEngine and ZooKeeperLeaderElectionAgent use it:

- `<dir>/master_status/<name>`: one znode per record (`app_<id>`, `driver_<id>`, ...), in
  the versioned data-only encoding every engine shares (`persistence.encode_record`);
  never pickle, so the store cannot run code.
- `<dir>/leader_election/latch-<guid>-<seq>`: one ephemeral sequential znode per live
  master (the guid lets it find its node after a lost answer); the lowest sequence number
  leads and its sequence number + 1 is the leadership epoch (0 means "no recovery,
  unfenced" to workers), so epochs only grow (ZooKeeper never reuses a sequence number
  under a parent, and a master that gave leadership up rejoins with a new node).
- `<dir>/app_resources/<quoted key>`: an uploaded app resource, since standbys have no
  shared disk: the bytes in chunks of 512 KiB (under ZooKeeper's 1 MB znode limit) as
  children `000000`, `000001`, ..., and on the parent a header with size, chunk count and
  SHA-256 written last. A blob without a valid header is not there; one whose bytes do not
  hash to the header is logged and treated as missing. ZooKeeper acknowledges a write only
  once a quorum holds it, so an acknowledged upload is readable by whichever master leads
  next.

Why not Spark's timeouts: Curator's 60 s session (and its LeaderLatch giving up leadership on
every SUSPENDED connection, SPARK-29861) make Spark's failover take 1-2 minutes. Here the
session is 3 s (`spark.ember.deploy.zookeeper.sessionTimeout`): a kill -9'd leader's
latch node disappears ~3 s later and a standby takes over. A connection that is only
SUSPENDED keeps leadership until the session timeout has passed without a reconnection
(Curator's session-based policy); a LOST session revokes leadership at once, and the master
re-enters the election as a standby. Nothing here ever exits the process.

Fencing: while a master leads, every record and upload it writes is a ZooKeeper transaction
that also checks its own latch node still exists, so a deposed leader (its session expired
while it was paused or partitioned) cannot write to the store; workers refuse its epoch
for launches and kills.
"""
from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
import uuid
from typing import Any, Callable, Mapping, Optional
from urllib.parse import quote

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError, KazooException, NoNodeError, NodeExistsError, NotEmptyError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry

from ember import config
from ember.deploy.master.persistence import (
    LeaderElectionAgent, PersistenceEngine, RecordError, RecoveryError, blob_key_parts,
    check_record_name, decode_record, encode_record,
)
from ember.deploy.master.uploads import UploadError

log = logging.getLogger("ember.deploy.master.ZooKeeperPersistenceEngine")
election_log = logging.getLogger("ember.deploy.master.ZooKeeperLeaderElectionAgent")

BLOB_VERSION = 1
CHUNK_BYTES = 512 * 1024
_LATCH_PREFIX = "latch-"
_CONNECT_BACKOFF_MAX_S = 30.0


class ZooKeeperUnavailable(RuntimeError):
    """The store cannot be reached now (not connected, or the request timed out)."""


class NotLeaderError(RuntimeError):
    """A write refused because this master no longer holds leadership (fencing)."""


class ZooKeeperSettings:
    """The ZooKeeper keys of a master's configuration, checked once (RecoveryError, one
    line naming the key)."""

    def __init__(self, conf: Mapping[str, Any]) -> None:
        url = str(conf.get("spark.deploy.zookeeper.url") or "").strip()
        if not url:
            raise RecoveryError("spark.deploy.zookeeper.url must be set when "
                                "spark.deploy.recoveryMode=ZOOKEEPER (e.g. 127.0.0.1:2181)")
        self.url = url
        root = str(conf.get("spark.deploy.zookeeper.dir") or "").strip() or str(
            config.read({}, "spark.deploy.zookeeper.dir"))
        if not root.startswith("/") or root != "/" and root.endswith("/") or "//" in root:
            raise RecoveryError("spark.deploy.zookeeper.dir must be an absolute ZooKeeper "
                                f"path like /spark, but was {root!r}")
        self.root = root.rstrip("/") or ""
        self.session_timeout_s = _positive(conf, "spark.ember.deploy.zookeeper.sessionTimeout")
        self.max_blob_bytes = int(_positive(conf, "spark.ember.deploy.zookeeper.maxBlobSize"))

    @property
    def status_dir(self) -> str:
        return f"{self.root}/master_status"

    @property
    def election_dir(self) -> str:
        return f"{self.root}/leader_election"

    @property
    def blob_dir(self) -> str:
        return f"{self.root}/app_resources"


def _positive(conf: Mapping[str, Any], key: str) -> float:
    """A positive number from the configuration registry (its default when unset)."""
    try:
        value = config.read(conf, key)
    except ValueError as e:
        raise RecoveryError(str(e)) from None
    if value <= 0:
        raise RecoveryError(f"{key} must be positive (e.g. 3s or 32m), but was "
                            f"{conf.get(key)!r}")
    return value


class ZooKeeperSession:
    """One kazoo client shared by a master's persistence engine and election agent.

    Connecting never blocks the master: a background thread retries with backoff (one line
    per failed attempt, naming the URL, no traceback) until the server answers; after that
    kazoo reconnects by itself and state changes are fanned out to subscribers.
    """

    def __init__(self, settings: ZooKeeperSettings) -> None:
        self.settings = settings
        self.client: Optional[KazooClient] = None
        self.connected = threading.Event()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None
        self._subscribers: list[Callable[[str], None]] = []
        self._users = 0
        # Set by the election agent: the latch node that proves leadership (None when not
        # leading); `fencing` once an agent runs, so a standby never writes.
        self.fence_path: Optional[str] = None
        self.fencing = False
        self._kazoo_log = logging.getLogger("ember.deploy.master.kazoo")
        if self._kazoo_log.level == logging.NOTSET:
            # kazoo logs every reconnection attempt; this module logs one line per outage.
            self._kazoo_log.setLevel(logging.ERROR)

    def acquire(self) -> "ZooKeeperSession":
        with self._lock:
            self._users += 1
        return self

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.close()

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """`callback(state)` with "CONNECTED", "SUSPENDED" or "LOST" (from kazoo's thread or
        the connecting thread; it must not block)."""
        with self._lock:
            self._subscribers.append(callback)
            already = self.connected.is_set()
        if already:
            callback("CONNECTED")

    def start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed.is_set():
                return
            self._thread = threading.Thread(target=self._connect_loop, daemon=True,
                                            name="zookeeper-connect")
        self._thread.start()

    def _new_client(self) -> KazooClient:
        # Reconnect quickly after an outage (at most 1 s between attempts), forever.
        retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=1.0)
        return KazooClient(hosts=self.settings.url, timeout=self.settings.session_timeout_s,
                           connection_retry=retry, logger=self._kazoo_log)

    def _connect_loop(self) -> None:
        backoff = 1.0
        attempt_timeout = max(5.0, self.settings.session_timeout_s)
        while not self._closed.is_set():
            client = self._new_client()
            try:
                client.start(timeout=attempt_timeout)
            except KazooTimeoutError:
                log.error("Cannot connect to ZooKeeper at %s (spark.deploy.zookeeper.url); "
                          "retrying in %.0f s", self.settings.url, backoff)
                self._closed.wait(backoff)
                backoff = min(backoff * 2, _CONNECT_BACKOFF_MAX_S)
                continue
            except Exception as e:  # noqa: BLE001 - a bad URL must not kill the master
                log.error("Cannot connect to ZooKeeper at %s (spark.deploy.zookeeper.url): "
                          "%s; retrying in %.0f s", self.settings.url, e, backoff)
                self._closed.wait(backoff)
                backoff = min(backoff * 2, _CONNECT_BACKOFF_MAX_S)
                continue
            with self._lock:
                if self._closed.is_set():
                    _stop_client(client)
                    return
                self.client = client
            try:
                for path in (self.settings.status_dir, self.settings.election_dir,
                             self.settings.blob_dir):
                    client.ensure_path(path)
            except KazooException as e:
                log.warning("Could not create %s in ZooKeeper yet: %s", self.settings.root, e)
            log.info("Connected to ZooKeeper at %s (session timeout %.1f s)",
                     self.settings.url, self.settings.session_timeout_s)
            client.add_listener(self._on_state)
            self.connected.set()
            self._publish("CONNECTED")
            return

    def _on_state(self, state: str) -> None:
        if state == KazooState.SUSPENDED:
            self.connected.clear()
            log.warning("Connection to ZooKeeper at %s suspended; reconnecting",
                        self.settings.url)
            self._publish("SUSPENDED")
        elif state == KazooState.LOST:
            self.connected.clear()
            if not self._closed.is_set():
                log.error("ZooKeeper session at %s lost (expired); reconnecting with a new "
                          "session", self.settings.url)
                self._publish("LOST")
        elif state == KazooState.CONNECTED:
            log.info("Reconnected to ZooKeeper at %s", self.settings.url)
            self.connected.set()
            self._publish("CONNECTED")

    def _publish(self, state: str) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(state)
            except Exception:  # noqa: BLE001
                log.exception("ZooKeeper state subscriber failed")

    def require_client(self, wait_s: float = 0.0) -> KazooClient:
        """The connected client; ZooKeeperUnavailable (one line) when there is none."""
        self.start()
        if not self.connected.wait(wait_s) or self.client is None:
            raise ZooKeeperUnavailable(f"Not connected to ZooKeeper at {self.settings.url}")
        return self.client

    def op_timeout(self) -> float:
        return max(2.0, self.settings.session_timeout_s)

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            client, self.client = self.client, None
        self.connected.clear()
        if client is not None:
            _stop_client(client)
        # A connecting thread still in its attempt stops its own client when it sees _closed;
        # the master's shutdown does not wait for it.


def _stop_client(client: KazooClient) -> None:
    try:
        client.stop()
        client.close()
    except Exception:  # noqa: BLE001 - closing an already broken client
        pass


class ZooKeeperPersistenceEngine(PersistenceEngine):
    """Spark's ZooKeeperPersistenceEngine: records as znodes, plus uploaded app resources.

    Calls are bounded: when ZooKeeper is unreachable a call raises ZooKeeperUnavailable after
    at most the operation timeout instead of blocking the master's loop for an outage.
    """

    def __init__(self, session: ZooKeeperSession) -> None:
        self.session = session.acquire()
        self.settings = session.settings
        self._closed = False
        self.session.start()

    # --- records -----------------------------------------------------------------------
    def persist(self, name: str, record: dict) -> None:
        path = f"{self.settings.status_dir}/{check_record_name(name)}"
        self._write(path, encode_record(record))

    def unpersist(self, name: str) -> None:
        path = f"{self.settings.status_dir}/{check_record_name(name)}"
        self._fenced_delete(path, recursive=False)

    def read_all(self) -> dict[str, dict]:
        client = self._client()
        out: dict[str, dict] = {}
        timeout = self.session.op_timeout()
        try:
            names = client.get_children_async(self.settings.status_dir).get(timeout=timeout)
        except NoNodeError:
            return out
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("read the records")) from None
        # Every read is sent before the first answer is awaited: one round trip, not N.
        pending = [(name, client.get_async(f"{self.settings.status_dir}/{name}"))
                   for name in sorted(names)]
        for name, answer in pending:
            try:
                data, _stat = answer.get(timeout=timeout)
            except NoNodeError:
                continue
            except KazooTimeoutError:
                raise ZooKeeperUnavailable(self._timeout_message("read " + name)) from None
            try:
                out[name] = decode_record(data)
            except RecordError as e:
                log.error("Skipping corrupt recovery record %s in ZooKeeper %s: %s", name,
                          self.settings.status_dir, e)
        return out

    # --- uploaded app resources ---------------------------------------------------------
    def put_blob(self, key: str, data: bytes) -> None:
        """Keep `data` under `key`; returns once ZooKeeper holds every chunk and the header
        (so any master elected next can serve it). A blob already stored intact is kept.
        UploadError (the one-line reason the submitter gets) when it cannot be stored."""
        try:
            self._put_blob(key, data)
        except (ZooKeeperUnavailable, NotLeaderError, KazooException) as e:
            raise UploadError(f"Could not store {key} in ZooKeeper at {self.settings.url}: "
                              f"{e or type(e).__name__}") from None

    def _put_blob(self, key: str, data: bytes) -> None:
        if len(data) > self.settings.max_blob_bytes:
            raise UploadError(
                f"Resource {key} is {len(data)} bytes, more than the "
                f"{self.settings.max_blob_bytes} bytes ZOOKEEPER recovery mode stores "
                "(spark.ember.deploy.zookeeper.maxBlobSize)")
        digest = hashlib.sha256(data).hexdigest()
        existing = self._read_header(key)
        if existing is not None and existing.get("sha256") == digest \
                and self._get_blob(key) is not None:
            return
        client = self._client()
        path = self._blob_path(key)
        timeout = self.session.op_timeout()
        # A stale or partial blob under the same key goes first, so chunks never mix.
        self._fenced_delete(path, recursive=True)
        chunks = [data[i:i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
        try:
            client.create_async(path, b"").get(timeout=timeout)
        except NodeExistsError:
            pass
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("store " + key)) from None
        try:
            for i, chunk in enumerate(chunks):
                client.create_async(f"{path}/{i:06d}", chunk).get(timeout=timeout)
        except NodeExistsError:
            raise ZooKeeperUnavailable(f"Another master is writing resource {key}") from None
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("store " + key)) from None
        header = json.dumps({"version": BLOB_VERSION, "sha256": digest, "size": len(data),
                             "chunks": len(chunks)}).encode()
        self._write(path, header)

    def get_blob(self, key: str) -> Optional[bytes]:
        """The bytes stored under `key`, verified against their SHA-256; None if there is no
        complete blob (a corrupt one is logged with its key); UploadError if ZooKeeper
        cannot be asked now."""
        try:
            return self._get_blob(key)
        except (ZooKeeperUnavailable, KazooException) as e:
            raise UploadError(f"Could not read {key} from ZooKeeper at {self.settings.url}: "
                              f"{e or type(e).__name__}") from None

    def _get_blob(self, key: str) -> Optional[bytes]:
        header = self._read_header(key)
        if header is None:
            return None
        client = self._client()
        path = self._blob_path(key)
        timeout = self.session.op_timeout()
        parts: list[bytes] = []
        try:
            for i in range(header["chunks"]):
                chunk, _ = client.get_async(f"{path}/{i:06d}").get(timeout=timeout)
                parts.append(chunk)
        except NoNodeError:
            log.error("Uploaded resource %s in ZooKeeper is missing chunk %d; ignoring it",
                      key, len(parts))
            return None
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("read " + key)) from None
        data = b"".join(parts)
        if len(data) != header["size"] or hashlib.sha256(data).hexdigest() != header["sha256"]:
            log.error("Uploaded resource %s in ZooKeeper does not match its SHA-256 %s; "
                      "ignoring it", key, header["sha256"])
            return None
        return data

    def delete_blob(self, key: str) -> None:
        """Remove the blob (header first, so a half-deleted blob is missing). Garbage
        collection only: if ZooKeeper cannot do it now, or this master no longer leads, the
        blob stays, with one line in the log."""
        try:
            self._fenced_delete(self._blob_path(key), recursive=True)
        except (ZooKeeperUnavailable, NotLeaderError, KazooException) as e:
            log.warning("Could not delete uploaded resource %s from ZooKeeper at %s: %s", key,
                        self.settings.url, e or type(e).__name__)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self.session.release()

    # --- internals ----------------------------------------------------------------------
    def _client(self) -> KazooClient:
        return self.session.require_client(wait_s=self.session.op_timeout())

    def _timeout_message(self, what: str) -> str:
        return (f"ZooKeeper at {self.settings.url} did not answer in "
                f"{self.session.op_timeout():.0f} s (could not {what})")

    def _blob_path(self, key: str) -> str:
        return f"{self.settings.blob_dir}/{quote('/'.join(blob_key_parts(key)), safe='')}"

    def _read_header(self, key: str) -> Optional[dict]:
        client = self._client()
        try:
            raw, _ = client.get_async(self._blob_path(key)).get(timeout=self.session.op_timeout())
        except NoNodeError:
            return None
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("read " + key)) from None
        if not raw:
            return None  # chunks being written, or a writer that died before the header
        try:
            header = json.loads(raw.decode())
            if header.get("version") != BLOB_VERSION:
                raise ValueError(f"unknown version {header.get('version')!r}")
            if not (isinstance(header.get("chunks"), int) and header["chunks"] >= 1
                    and isinstance(header.get("size"), int)
                    and isinstance(header.get("sha256"), str)):
                raise ValueError("missing fields")
            return header
        except (UnicodeDecodeError, ValueError, AttributeError) as e:
            log.error("Uploaded resource %s in ZooKeeper has a corrupt header (%s); ignoring "
                      "it", key, e)
            return None

    def _fence(self, client: KazooClient) -> Any:
        """A transaction that commits only while this master still leads (if fencing)."""
        txn = client.transaction()
        if self.session.fencing:
            fence = self.session.fence_path
            if fence is None:
                raise NotLeaderError("This master is not the leader; it does not write the "
                                     "recovery store")
            txn.check(fence, 0)
        return txn

    def _commit(self, txn: Any, what: str) -> list:
        try:
            results = txn.commit_async().get(timeout=self.session.op_timeout())
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message(what)) from None
        if self.session.fencing and results and isinstance(results[0],
                                                           (NoNodeError, BadVersionError)):
            raise NotLeaderError(f"Leadership lost; refused to {what}")
        return results[1:] if self.session.fencing else results

    def _write(self, path: str, data: bytes) -> None:
        client = self._client()
        for _ in range(5):
            txn = self._fence(client)
            try:
                exists = client.exists_async(path).get(timeout=self.session.op_timeout())
            except KazooTimeoutError:
                raise ZooKeeperUnavailable(self._timeout_message("write " + path)) from None
            if exists:
                txn.set_data(path, data)
            else:
                txn.create(path, data)
            results = self._commit(txn, "write " + path)
            if not any(isinstance(r, Exception) for r in results):
                return
            # Created or deleted by someone else between exists() and commit: try again.
        raise ZooKeeperUnavailable(f"Could not write {path}: it kept changing under us")

    def _fenced_delete(self, path: str, recursive: bool) -> None:
        client = self._client()
        for _ in range(5):
            txn = self._fence(client)
            txn.delete(path)
            results = self._commit(txn, "delete " + path)
            error = results[0] if results and isinstance(results[0], Exception) else None
            if error is None or isinstance(error, NoNodeError):
                return
            if isinstance(error, NotEmptyError) and recursive:
                self._delete_children(client, path)
                continue
            raise ZooKeeperUnavailable(f"Could not delete {path}: {error!r}")
        raise ZooKeeperUnavailable(f"Could not delete {path}: it kept changing under us")

    def _delete_children(self, client: KazooClient, path: str) -> None:
        # Clearing the header first makes the blob "missing" before its chunks go away.
        timeout = self.session.op_timeout()
        try:
            txn = self._fence(client)
            txn.set_data(path, b"")
            self._commit(txn, "delete " + path)
            for child in client.get_children_async(path).get(timeout=timeout):
                try:
                    client.delete_async(f"{path}/{child}").get(timeout=timeout)
                except NoNodeError:
                    pass
        except NoNodeError:
            return
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(self._timeout_message("delete " + path)) from None


class ZooKeeperLeaderElectionAgent(LeaderElectionAgent):
    """Leader election with ephemeral sequential latch nodes (Curator LeaderLatch's recipe).

    One thread runs the election from a queue of events (connection states, watches, the
    suspension deadline), so callbacks are never concurrent and come in order:
    on_elected(epoch) ... on_revoked() ... on_elected(larger epoch) ...
    """

    def __init__(self, session: ZooKeeperSession, identity: str = "") -> None:
        self.session = session.acquire()
        self.settings = session.settings
        self.identity = identity
        self.epoch: Optional[int] = None
        self._events: "queue.Queue[str]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._node: Optional[str] = None
        self._stale_node: Optional[str] = None
        self._leading = False
        self._connected = False
        self._suspended_at: Optional[float] = None
        self._timer: Optional[threading.Timer] = None
        self._stopped = False
        self._guid = uuid.uuid4().hex  # names this master's latch nodes
        self._on_elected: Callable[[int], None] = lambda epoch: None
        self._on_revoked: Callable[[], None] = lambda: None

    def start(self, on_elected: Callable[[int], None],
              on_revoked: Callable[[], None]) -> None:
        self._on_elected = on_elected
        self._on_revoked = on_revoked
        self.session.fencing = True
        election_log.info("Starting ZooKeeper LeaderElection agent")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name="zookeeper-leader-election")
        self._thread.start()
        self.session.subscribe(self._events.put)
        self.session.start()

    def stop(self) -> None:
        """Leave the election (deleting the latch node, so a standby takes over at once)."""
        if self._stopped:
            return
        self._stopped = True
        if self._thread is not None:
            self._events.put("STOP")
            self._thread.join(timeout=15)
            self._thread = None
        self.session.release()

    @property
    def is_leader(self) -> bool:
        return self._leading

    def current_leader(self) -> Optional[str]:
        """The identity (master URL) the leading master registered, if any."""
        try:
            client = self.session.require_client()
            names = self._latches(client)
            if not names:
                return None
            data, _ = client.get_async(f"{self.settings.election_dir}/{names[0]}").get(
                timeout=self.session.op_timeout())
            return data.decode(errors="replace") or None
        except (KazooException, KazooTimeoutError, ZooKeeperUnavailable):
            return None

    # --- the election thread ------------------------------------------------------------
    def _run(self) -> None:
        while True:
            event = self._events.get()
            try:
                if event == "STOP":
                    self._leave()
                    return
                self._handle(event)
            except (KazooException, KazooTimeoutError, ZooKeeperUnavailable) as e:
                election_log.warning("Leader election step failed (%s); trying again", e)
                self._retry_later()
            except Exception:  # noqa: BLE001 - the election must outlive any callback bug
                election_log.exception("Leader election step failed")
                self._retry_later()

    def _retry_later(self) -> None:
        t = threading.Timer(0.5, self._events.put, args=("CHECK",))
        t.daemon = True
        t.start()

    def _handle(self, event: str) -> None:
        if event == "CONNECTED":
            self._connected = True
            self._suspended_at = None
            self._cancel_timer()
            self._check()
        elif event == "SUSPENDED":
            self._connected = False
            if self._leading and self._suspended_at is None:
                self._suspended_at = time.monotonic()
                grace = self.settings.session_timeout_s
                election_log.warning("Keeping leadership (epoch %s) while the ZooKeeper "
                                     "connection is suspended, for at most %.1f s",
                                     self.epoch, grace)
                self._timer = threading.Timer(grace, self._events.put,
                                              args=("SUSPEND_DEADLINE",))
                self._timer.daemon = True
                self._timer.start()
        elif event == "SUSPEND_DEADLINE":
            if not self._connected and self._leading:
                # The server has expired our session by now: another master may lead.
                self._stale_node, self._node = self._node, None
                self._revoke("the ZooKeeper connection was suspended for longer than the "
                             "session timeout")
        elif event == "LOST":
            self._connected = False
            self._cancel_timer()
            self._node = None  # ephemeral: gone with the session
            if self._leading:
                self._revoke("the ZooKeeper session expired")
        elif event == "CHECK":
            if self._connected:
                self._check()
        elif event == "RELINQUISH":
            if self._leading:
                # A new node at the end of the line: another master may lead meanwhile.
                self._stale_node, self._node = self._node, None
                self._revoke("the recovery state could not be read")
                self._retry_later()

    def relinquish(self) -> None:
        self._events.put("RELINQUISH")

    def _revoke(self, why: str) -> None:
        self._leading = False
        self.session.fence_path = None
        election_log.error("We have lost leadership (epoch %s): %s; continuing as a standby",
                           self.epoch, why)
        self._on_revoked()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _latches(self, client: KazooClient) -> list[str]:
        names = client.get_children_async(self.settings.election_dir).get(
            timeout=self.session.op_timeout())
        latches = [n for n in names if n.startswith(_LATCH_PREFIX) and n[-10:].isdigit()]
        return sorted(latches, key=lambda n: int(n[-10:]))

    def _own_node(self, client: KazooClient) -> Optional[str]:
        """A latch node this session created although the create's answer was lost (a
        timeout): adopted, or it would sit first in line forever with nobody leading."""
        session_id = client.client_id[0] if client.client_id else None
        for name in self._latches(client):
            if self._guid not in name:
                continue
            path = f"{self.settings.election_dir}/{name}"
            stat = client.exists_async(path).get(timeout=self.session.op_timeout())
            if stat is not None and stat.ephemeralOwner == session_id:
                return path
        return None

    def _check(self) -> None:
        client = self.session.require_client()
        timeout = self.session.op_timeout()
        if self._stale_node is not None:
            # Leadership was given up while disconnected: the old node (if the session
            # survived after all) must not make this master lead again with an old epoch.
            try:
                client.delete_async(self._stale_node).get(timeout=timeout)
            except NoNodeError:
                pass
            self._stale_node = None
        if self._node is None:
            self._node = self._own_node(client) or client.create_async(
                f"{self.settings.election_dir}/{_LATCH_PREFIX}{self._guid}-",
                self.identity.encode(), ephemeral=True, sequence=True,
                makepath=True).get(timeout=timeout)
            election_log.info("Joined the leader election as %s", self._node)
        latches = self._latches(client)
        mine = self._node.rsplit("/", 1)[1]
        if mine not in latches:
            self._node = None  # deleted under us (session replaced): join again
            if self._leading:
                self._revoke("this master's election node disappeared")
            self._events.put("CHECK")
            return
        index = latches.index(mine)
        if index == 0:
            # Our own node deleted (by an operator, or the session replaced): CHECK again.
            if client.exists_async(self._node, watch=lambda _e: self._events.put("CHECK")).get(
                    timeout=timeout) is None:
                self._events.put("CHECK")
                return
            if not self._leading:
                self._leading = True
                self.epoch = int(mine[-10:]) + 1  # 0 means "unfenced" to receivers
                self.session.fence_path = self._node
                election_log.info("We have gained leadership (epoch %d)", self.epoch)
                self._on_elected(self.epoch)
            return
        if self._leading:
            self._revoke("another master's election node precedes this one")
        predecessor = f"{self.settings.election_dir}/{latches[index - 1]}"
        if client.exists_async(predecessor, watch=lambda _e: self._events.put("CHECK")).get(
                timeout=timeout) is None:
            self._events.put("CHECK")

    def _leave(self) -> None:
        self._cancel_timer()
        node, self._node = self._node, None
        was_leading = self._leading
        self._leading = False
        self.session.fence_path = None
        if node is not None and self.session.client is not None and self._connected:
            try:
                self.session.client.delete_async(node).get(timeout=self.session.op_timeout())
            except (KazooException, KazooTimeoutError):
                pass
        if was_leading:
            election_log.info("Left the leader election (epoch %s)", self.epoch)


def create_recovery(conf: Mapping[str, Any], *, master_url: str = "", **_: Any
                    ) -> tuple[ZooKeeperPersistenceEngine, ZooKeeperLeaderElectionAgent]:
    """The ZOOKEEPER engine and agent of one master, sharing one ZooKeeper session; the
    agent's latch node carries `master_url` (who leads). RecoveryError (one line) for a bad
    configuration; never blocks on the connection."""
    session = ZooKeeperSession(ZooKeeperSettings(conf))
    engine = ZooKeeperPersistenceEngine(session)
    agent = ZooKeeperLeaderElectionAgent(session, master_url)
    return engine, agent
