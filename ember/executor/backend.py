"""The executor process (Spark's CoarseGrainedExecutorBackend) of a standalone application.

Started by a worker's ExecutorRunner; registers with the driver's CoarseGrainedScheduler
endpoint, runs LaunchTask messages on its own task processes (the same pool as local
mode), reports StatusUpdate, serves its shuffle output to other executors, and exits when
the driver or its worker goes away (WorkerWatcher fate sharing).
"""
from __future__ import annotations

import argparse
import logging
import os
import pickle
import signal
import sys
import tempfile
import threading
import time
from typing import Any

from ember import config
from ember.config import parse_memory_mb
from ember.deploy.fencing import MasterLease
from ember.deploy.messages import (KillTask, LaunchTask, RegisteredExecutor,
                                   ExecutorHeartbeat, RegisterExecutor,
                                   RegisterExecutorFailed, RemoveBroadcast,
                                   RemoveRdd, RemoveStage,
                                   RetrieveSparkAppConfig, Shutdown, ShuffleBlockRequest,
                                   StatusUpdate, StopExecutor)
from ember.executor.process_pool import TaskProcessPool
from ember.scheduler.event_loop import RpcLoop
from ember.rpc import RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv
from ember.shuffle.writer import read_index

log = logging.getLogger("ember.executor")

ENDPOINT_NAME = "Executor"


def read_shuffle_segment(map_path: str, reduce_id: int) -> bytes:
    """One reduce partition of a map output written on this executor."""
    start, end = read_index(map_path, reduce_id)
    if end <= start:
        return b""
    with open(map_path + ".data", "rb") as f:
        f.seek(start)
        return f.read(end - start)


class CoarseGrainedExecutorBackend(RpcEndpoint):
    def __init__(self, executor_id: str, hostname: str, cores: int, app_id: str,
                 driver_address: RpcAddress, worker_address: RpcAddress | None,
                 spark_conf: dict[str, str], work_dir: str) -> None:
        self.executor_id = executor_id
        self.hostname = hostname
        self.cores = cores
        self.app_id = app_id
        self.driver_address = driver_address
        self.worker_address = worker_address
        self.conf = spark_conf
        self.work_dir = work_dir
        self.pool: TaskProcessPool | None = None
        self.stage_blobs: dict[tuple, tuple[bytes, bytes]] = {}
        self.task_slots: dict[int, int] = {}
        self.exited = threading.Event()
        self.exit_code = 0
        self.lease = MasterLease(float(config.read(spark_conf,
                                                   "spark.ember.executor.driverLease")))

    # --- lifecycle ----------------------------------------------------------------------
    def on_start(self) -> None:
        self.driver = self.rpc_env.endpoint_ref(self.driver_address, "CoarseGrainedScheduler")
        log_urls = {k: v for k, v in (("stdout", os.environ.get("SPARK_LOG_URL_STDOUT")),
                                      ("stderr", os.environ.get("SPARK_LOG_URL_STDERR"))) if v}
        fut = self.driver.ask(RegisterExecutor(self.executor_id, self.self_ref, self.hostname,
                                               self.cores, log_urls))

        def registered(f: Any) -> None:
            try:
                f.result()
            except Exception as e:
                self.exit(1, f"Cannot register with driver: {self.driver_address}: {e}")
        fut.add_done_callback(registered)

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        if isinstance(msg, RegisteredExecutor):
            log.info("Successfully registered with driver")
            self.rpc_env.run_in_executor(self._start_pool)
            self.lease.renew(time.monotonic())
            every = min(10.0, self.lease.lease_s / 4.0)   # Spark's heartbeatInterval: 10 s
            self.rpc_env.schedule_periodic(every, every, self._heartbeat)
        elif isinstance(msg, RegisterExecutorFailed):
            self.exit(1, f"Slave registration failed: {msg.message}")
        elif isinstance(msg, LaunchTask):
            self._launch(msg.data)
        elif isinstance(msg, KillTask):
            slot = self.task_slots.get(msg.taskId)
            if slot is not None and self.pool is not None:
                self.pool.kill(slot, msg.taskId)
        elif isinstance(msg, RemoveStage):
            for key in [k for k in self.stage_blobs if k[0] == msg.stageId]:
                del self.stage_blobs[key]
            if self.pool is not None:
                self.pool.forget_stage(msg.stageId)
        elif isinstance(msg, RemoveRdd):
            prefix = f"rdd_{msg.rddId}_"
            self._remove_blocks(lambda n: n.startswith(prefix), ("unpersist_rdd", msg.rddId))
        elif isinstance(msg, RemoveBroadcast):
            name = f"broadcast_{msg.broadcastId}"
            self._remove_blocks(lambda n: n == name, ("unpersist_broadcast", msg.broadcastId))
        elif isinstance(msg, (StopExecutor, Shutdown)):
            log.info("Driver commanded a shutdown")
            self.exit(0, "")
        else:
            log.warning("Unexpected message %r from %s", type(msg).__name__, sender)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, ShuffleBlockRequest):
            path = os.path.realpath(msg.mapPath)
            if not path.startswith(os.path.realpath(self.work_dir) + os.sep):
                context.send_failure(ValueError(f"Invalid shuffle block path: {msg.mapPath}"))
                return

            def read() -> None:
                try:
                    data = read_shuffle_segment(path, msg.reduceId)
                except OSError as e:
                    self.rpc_env.call_soon(context.send_failure, FileNotFoundError(str(e)))
                    return
                self.rpc_env.call_soon(context.reply, data)
            self.rpc_env.run_in_executor(read)
        else:
            context.send_failure(ValueError(f"Unsupported message {type(msg).__name__}"))

    def on_disconnected(self, remote: RpcAddress) -> None:
        if remote == self.driver_address:
            self.exit(1, f"Driver {remote.hostPort} disassociated! Shutting down.")
        elif self.worker_address is not None and remote == self.worker_address:
            self.exit(1, f"Lost connection to worker rpc endpoint "
                         f"spark://Worker@{remote.hostPort}. Exiting.")

    def _heartbeat(self) -> None:
        """Fencing: ask the driver whether it still counts on us; once it has not answered
        for the lease, its application is gone (or cut off) and nothing here may run on."""
        now = time.monotonic()
        if self.lease.expired(now):
            self.exit(1, f"Driver {self.driver_address.hostPort} has not answered for "
                         f"{self.lease.silent_for(now):.1f} s (spark.ember.executor."
                         f"driverLease={self.lease.lease_s:g} s). Shutting down.")
            return
        fut = self.driver.ask(ExecutorHeartbeat(self.executor_id), timeout=self.lease.lease_s)

        def answered(f: Any) -> None:
            if not f.cancelled() and f.exception() is None and f.result() is True:
                self.rpc_env.call_soon(self.lease.renew, now)
        fut.add_done_callback(answered)

    def exit(self, code: int, reason: str) -> None:
        if self.exited.is_set():
            return
        if reason:
            (log.error if code else log.info)(reason)
        self.exit_code = code
        self.exited.set()

    def _remove_blocks(self, matches: Any, pool_msg: tuple) -> None:
        """Tell every task process to drop its copies, and delete the files on disk."""
        if self.pool is not None:
            self.pool.broadcast(pool_msg)
        for d in (os.path.join(self.work_dir, "blocks"), self.work_dir):
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                if matches(name):
                    try:
                        os.unlink(os.path.join(d, name))
                    except OSError:
                        pass

    # --- tasks --------------------------------------------------------------------------
    def _start_pool(self) -> None:
        conf = self.conf
        memory = parse_memory_mb(conf.get("spark.python.worker.memory", "512m"))
        exec_mem = parse_memory_mb(conf.get("spark.executor.memory", "1g"))
        storage = conf.get("spark.ember.storage.memory")
        storage_mb = parse_memory_mb(storage) if storage else max(
            32, int((exec_mem - 300) * float(conf.get("spark.memory.fraction", "0.6"))))
        block_dir = os.path.join(self.work_dir, "blocks")
        files_dir = os.path.join(self.work_dir, "files")
        os.makedirs(block_dir, exist_ok=True)
        os.makedirs(files_dir, exist_ok=True)
        addr = self.rpc_env.address
        env_conf = {"executor_id": self.executor_id, "host": self.hostname,
                    "address": f"{addr.host}:{addr.port}", "local_dir": self.work_dir,
                    "block_dir": block_dir, "memory_limit_mb": memory,
                    "storage_budget": (storage_mb // max(self.cores, 1)) << 20,
                    "files_dir": files_dir, "cwd": os.getcwd(),
                    "driver": [self.driver_address.host, self.driver_address.port],
                    "rpc_conf": {k: v for k, v in conf.items() if k.startswith("spark.authenticate")
                                 or k.startswith("spark.rpc.")}}
        extra = {k[len("spark.executorEnv."):]: v for k, v in conf.items()
                 if k.startswith("spark.executorEnv.")}
        pool = TaskProcessPool(self.cores, env_conf, self._on_task_end, extra,
                               float(conf.get("spark.python.task.killTimeout", "2")),
                               loop=RpcLoop(self.rpc_env))
        pool.start()
        self.pool = pool                  # published only once its slots exist

    def _launch(self, data: bytes) -> None:
        (tid, slot, stage_key, blob, meta, task_bytes) = pickle.loads(data)
        stage_key = tuple(stage_key)
        if blob is not None:
            self.stage_blobs[stage_key] = (blob, meta)   # kept until RemoveStage
        else:
            blob, meta = self.stage_blobs[stage_key]
        if self.pool is None:
            # RegisteredExecutor and the first LaunchTask can race the pool's start
            self.rpc_env.schedule(0.01, self._launch, data)
            return
        self.task_slots[tid] = slot
        self.pool.launch(slot, tid, stage_key, blob, meta, task_bytes)

    def _on_task_end(self, slot: int, tid: int, state: str, payload: Any, accum: dict,
                     metrics: dict, blocks: list) -> None:
        self.task_slots.pop(tid, None)
        try:
            data = pickle.dumps((payload, accum, metrics, blocks), protocol=5)
        except Exception as e:  # a result that cannot cross the wire
            state = "FAILED"
            data = pickle.dumps((("NotSerializableResult", str(e), "", False), {}, metrics, []))
        self.driver.send(StatusUpdate(self.executor_id, tid, state, data))

    def shutdown(self) -> None:
        if self.pool is not None:
            self.pool.stop()


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="CoarseGrainedExecutorBackend")
    p.add_argument("--driver-url", required=True)
    p.add_argument("--executor-id", required=True)
    p.add_argument("--hostname", required=True)
    p.add_argument("--cores", type=int, required=True)
    p.add_argument("--app-id", required=True)
    p.add_argument("--worker-url")
    p.add_argument("--resourceProfileId", type=int, default=0)
    return p.parse_args(argv)


def _endpoint_address(url: str) -> RpcAddress:
    """spark://Name@host:port -> RpcAddress(host, port)."""
    if not url.startswith("spark://") or "@" not in url:
        raise ValueError(f"Invalid endpoint URL: {url}")
    return RpcAddress.from_spark_url("spark://" + url.split("@", 1)[1])


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                        datefmt="%y/%m/%d %H:%M:%S")
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    driver_addr = _endpoint_address(args.driver_url)
    worker_addr = _endpoint_address(args.worker_url) if args.worker_url else None
    boot_conf: dict[str, str] = {}
    secret = os.environ.get("_SPARK_AUTH_SECRET")
    if secret:
        boot_conf = {"spark.authenticate": "true", "spark.authenticate.secret": secret}
    env = RpcEnv.create("sparkExecutor", args.hostname, 0, boot_conf)
    try:
        driver = env.setup_endpoint_ref_sync(driver_addr, "CoarseGrainedScheduler", timeout=30)
        cfg = driver.ask_sync(RetrieveSparkAppConfig(args.resourceProfileId), timeout=30)
    except Exception as e:
        log.error("Cannot reach the driver at %s: %s", args.driver_url, e)
        env.shutdown()
        return 1
    conf = {k: v for k, v in cfg.sparkProperties}
    conf.update(boot_conf)
    dirs = [d for d in os.environ.get("SPARK_EXECUTOR_DIRS", "").split(os.pathsep) if d]
    root = dirs[0] if dirs else tempfile.gettempdir()
    work_dir = tempfile.mkdtemp(prefix=f"executor-{args.executor_id}-", dir=root)
    backend = CoarseGrainedExecutorBackend(args.executor_id, args.hostname, args.cores,
                                           args.app_id, driver_addr, worker_addr, conf,
                                           work_dir)
    env.setup_endpoint(ENDPOINT_NAME, backend)
    if worker_addr is not None:
        try:    # WorkerWatcher: a connection to the worker whose loss ends this executor
            env.setup_endpoint_ref_sync(worker_addr, "Worker", timeout=30)
        except Exception as e:
            backend.exit(1, f"Could not initialize connection to worker {args.worker_url}. "
                            f"Exiting. ({e})")
    signal.signal(signal.SIGTERM, lambda *_: backend.exit(143, "RECEIVED SIGNAL TERM"))
    backend.exited.wait()
    backend.shutdown()
    env.shutdown()
    import shutil
    shutil.rmtree(work_dir, ignore_errors=True)
    logging.shutdown()
    os._exit(backend.exit_code)


if __name__ == "__main__":
    sys.exit(main())
