"""What a task process on a cluster fetches from other processes: shuffle blocks from
other executors, broadcast values and added files from the driver.

The RPC client is created lazily, inside the task process, on the first remote fetch, so
local mode never pays for it and a forked process never shares its parent's connections.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Callable

from ember import config
from ember.util.files import open_created
from ember.util.kill_guard import kills_deferred


class RemoteFetcher:
    def __init__(self, driver: tuple[str, int], rpc_conf: dict[str, str], local_dir: str,
                 files_dir: str) -> None:
        self.driver = tuple(driver)
        self.rpc_conf = dict(rpc_conf)
        self.fetch_timeout = config.read(rpc_conf, "spark.shuffle.io.connectionTimeout")
        self.local_dir = local_dir
        self.files_dir = files_dir
        self._env: Any = None
        self._lock = threading.Lock()
        self._entries: dict[str, str] = {}        # added file name -> entry ("dir/" for dirs)
        self._unfetchable: dict[str, str] = {}    # name -> why its fetch failed

    def _rpc(self) -> Any:
        with self._lock, kills_deferred:    # no client left half made, its thread running
            if self._env is None:
                from ember.rpc import RpcEnv
                self._env = RpcEnv.create("taskFetcher", "127.0.0.1", 0, self.rpc_conf,
                                          client_mode=True)
            return self._env

    def _driver_ref(self) -> Any:
        from ember.rpc import RpcAddress
        return self._rpc().endpoint_ref(RpcAddress(*self.driver), "CoarseGrainedScheduler")

    def fetch_shuffle(self, address: str, endpoint: str, shuffle_id: int,
                      segments: list[tuple[str, int, int]]) -> Callable[[], list[memoryview]]:
        """Ask the executor or shuffle service at `address` for segments (map output file
        base path, start, end) in one request, now; the returned function waits for the
        reply and gives one buffer per segment (so a reducer can have several requests in
        flight while it merges what came first)."""
        from ember.deploy.executor_messages import FetchShuffleBlocks
        from ember.rpc import RpcAddress, RpcTimeoutError
        host, _, port = address.rpartition(":")
        ref = self._rpc().endpoint_ref(RpcAddress(host, int(port)), endpoint)
        paths = [p for p, _s, _e in segments]
        starts = [s for _p, s, _e in segments]
        ends = [e for _p, _s, e in segments]
        reply = ref.ask(FetchShuffleBlocks(shuffle_id, paths, starts, ends),
                        self.fetch_timeout)

        def wait() -> list[memoryview]:
            try:
                data = memoryview(reply.result())
            except RpcTimeoutError:
                raise OSError(f"Connection from {address} has been quiet for "
                              f"{round(self.fetch_timeout * 1000)} ms while there are "
                              "outstanding requests. Assuming connection is dead; please adjust "
                              "spark.shuffle.io.connectionTimeout if this is wrong.") from None
            asked = sum(e - s for s, e in zip(starts, ends))
            if len(data) != asked:
                raise OSError(f"{address} sent {len(data)} bytes of shuffle {shuffle_id}, "
                              f"not the {asked} asked for")
            out, pos = [], 0
            for s, e in zip(starts, ends):
                out.append(data[pos:pos + e - s])
                pos += e - s
            return out
        return wait

    def fetch_broadcast(self, bid: int, driver_path: str) -> str:
        """Local copy of a broadcast's file, fetched from the driver once per executor."""
        from ember.deploy.executor_messages import FetchBroadcast
        local = os.path.join(self.local_dir, f"broadcast_{bid}")
        if not os.path.exists(local):
            data = self._driver_ref().ask_sync(FetchBroadcast(bid))
            _write_atomically(local, data)
        return local

    def ensure_files(self, entries: list[str]) -> bool:
        """Fetch the files added with SparkContext.addFile that this executor lacks (an entry
        ending in "/" is a directory); True if any arrived (so new .py/.zip files get onto
        sys.path). A file that cannot be fetched is not fatal here: only a task that asks
        SparkFiles.get for it fails, naming it."""
        self._entries = {e.rstrip("/"): e for e in entries if e.rstrip("/")}
        fetched = False
        for name, entry in self._entries.items():
            if name in self._unfetchable or os.path.exists(os.path.join(self.files_dir, name)):
                continue
            try:
                self._fetch_file(entry)
                fetched = True
            except Exception as e:   # noqa: BLE001 - reported to the tasks that need it
                self._unfetchable[name] = f"{type(e).__name__}: {e}"
        return fetched

    def missing_file(self, filename: str) -> None:
        """SparkFiles.get found `filename` absent: fetch the added file it belongs to now,
        or fail with an error naming it. Names never added are left alone (PySpark only
        builds the path)."""
        name = os.path.normpath(filename).split(os.sep, 1)[0]
        entry = self._entries.get(name)
        if entry is None:
            return
        try:
            self._fetch_file(entry)
        except Exception as e:   # noqa: BLE001 - becomes the task's error
            raise FileNotFoundError(
                f"File {name} added with SparkContext.addFile could not be fetched from the "
                f"driver: {type(e).__name__}: {e}") from None
        self._unfetchable.pop(name, None)

    def _fetch_file(self, entry: str) -> None:
        from ember.deploy.executor_messages import FetchFile
        name = entry.rstrip("/")
        data = self._driver_ref().ask_sync(FetchFile(name))
        local = os.path.join(self.files_dir, name)
        if entry.endswith("/"):
            _unpack_directory(local, data)
        else:
            _write_atomically(local, data)


def _unpack_directory(path: str, data: bytes) -> None:
    """Extract a directory's tar next to `path`, then rename it into place (another task
    process of this executor may win the race: its copy is the same)."""
    import io
    import shutil
    import tarfile
    tmp = f"{path}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(tmp, filter="data")
    try:
        os.rename(tmp, path)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if not os.path.isdir(path):
            raise


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open_created(tmp) as f:
        f.write(data)
    os.replace(tmp, path)
