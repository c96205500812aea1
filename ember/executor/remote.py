"""What a task process on a cluster fetches from other processes: shuffle blocks from
other executors, broadcast values and added files from the driver.

The RPC client is created lazily, inside the task process, on the first remote fetch, so
local mode never pays for it and a forked process never shares its parent's connections.
"""
from __future__ import annotations

import os
import threading
from typing import Any

_TIMEOUT = 120.0


class RemoteFetcher:
    def __init__(self, driver: tuple[str, int], rpc_conf: dict[str, str], local_dir: str,
                 files_dir: str) -> None:
        self.driver = tuple(driver)
        self.rpc_conf = dict(rpc_conf)
        self.local_dir = local_dir
        self.files_dir = files_dir
        self._env: Any = None
        self._lock = threading.Lock()

    def _rpc(self) -> Any:
        with self._lock:
            if self._env is None:
                from ember.rpc import RpcEnv
                self._env = RpcEnv.create("taskFetcher", "127.0.0.1", 0, self.rpc_conf,
                                          client_mode=True)
            return self._env

    def _driver_ref(self) -> Any:
        from ember.rpc import RpcAddress
        return self._rpc().endpoint_ref(RpcAddress(*self.driver), "CoarseGrainedScheduler")

    def fetch_shuffle(self, status: Any, shuffle_id: int, map_index: int, reduce_id: int) -> bytes:
        from ember.deploy.messages import ShuffleBlockRequest
        from ember.rpc import RpcAddress
        host, _, port = status.address.rpartition(":")
        ref = self._rpc().endpoint_ref(RpcAddress(host, int(port)), status.endpoint)
        return ref.ask_sync(ShuffleBlockRequest(shuffle_id, status.path, reduce_id), _TIMEOUT)

    def fetch_broadcast(self, bid: int, driver_path: str) -> str:
        """Local copy of a broadcast's file, fetched from the driver once per executor."""
        from ember.deploy.messages import FetchBroadcast
        local = os.path.join(self.local_dir, f"broadcast_{bid}")
        if not os.path.exists(local):
            data = self._driver_ref().ask_sync(FetchBroadcast(bid), _TIMEOUT)
            _write_atomically(local, data)
        return local

    def ensure_files(self, names: list[str]) -> bool:
        """Fetch files added with SparkContext.addFile that this executor lacks; True if
        any arrived (so new .py/.zip files get onto sys.path)."""
        from ember.deploy.messages import FetchFile
        fetched = False
        for name in names:
            local = os.path.join(self.files_dir, name)
            if name and not os.path.exists(local):
                data = self._driver_ref().ask_sync(FetchFile(name), _TIMEOUT)
                _write_atomically(local, data)
                fetched = True
        return fetched


def _write_atomically(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)
