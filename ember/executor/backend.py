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

from ember import config, fs
from ember.deploy.fencing import MasterLease
# the executor's own messages, not all of ember.deploy.messages (its start-up time)
from ember.deploy.executor_messages import (KillTask, LaunchTask, LaunchTasks,
                                            RegisteredExecutor, RegisterExecutor,
                                            ExecutorHeartbeat, RegisterExecutorFailed,
                                            RecycleTaskProcesses, RemoveBroadcast,
                                            RemoveRdd, RemoveShuffle, RemoveStage,
                                            RetrieveSparkAppConfig, FetchShuffleBlocks,
                                            RegisterExecutorShuffleInfo, DecommissionExecutor,
                                            PutMigratedBlock, ExecutorDecommissioning,
                                            RemoveExecutor, StatusUpdate, StatusUpdates,
                                            StopExecutor, TaskProcessLost)
from ember.deploy.resource_messages import (DEFAULT_RESOURCE_PROFILE_ID, ResourceInformation,
                                            ResourceProfile)
from ember.deploy.resources import (ResourceError, ResourceRequest, discover_resource,
                                    parse_allocated)
from ember.executor.batch_scheduling import TASK_POLICY_ENV, batch_threads, task_policy
from ember.executor.decommission import (BlockSavedOnDecommissionedBlockManagerException,
                                         migrate_blocks, migrated_block_path,
                                         store_migrated_chunk)
from ember.executor.process_pool import TaskProcessPool, raw_end_without_result
from ember.executor.pyspark_memory import pyspark_worker_memory_mb
from ember.util import thread_dump
from ember.util.event_loop import RpcLoop
from ember.util.files import unlink_quietly
from ember.rpc import (RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv, RpcRemoteError,
                       UnsupportedMessageError)
from ember.shuffle.crypto import key_from_conf
from ember.shuffle.reader import serve_fetch
from ember.storage.block_manager import is_block_file_of
from ember.util.logs import configure_logging

log = logging.getLogger("ember.executor")

ENDPOINT_NAME = "Executor"
# Spark's BarrierTaskContext asks with a one-year timeout: spark.barrier.sync.timeout, enforced
# by the driver's coordinator, is what bounds a barrier call
BARRIER_ASK_TIMEOUT = 366 * 24 * 3600.0

SHUFFLE_SERVICE_ENDPOINT = "ExternalShuffleService"   # the worker's service (deploy/worker)


# Only the driver that registered this executor sends these (checked on the connection).
DRIVER_ONLY_MESSAGES: tuple[type, ...] = (
    RegisteredExecutor, RegisterExecutorFailed, LaunchTask, LaunchTasks, KillTask, RemoveStage,
    RemoveRdd, RemoveBroadcast, RemoveShuffle, RecycleTaskProcesses, StopExecutor)


class CoarseGrainedExecutorBackend(RpcEndpoint):
    def __init__(self, executor_id: str, hostname: str, cores: int, app_id: str,
                 driver_address: RpcAddress, worker_address: RpcAddress | None,
                 spark_conf: dict[str, str], work_dir: str,
                 resources: dict[str, ResourceInformation] | None = None,
                 rp_id: int = DEFAULT_RESOURCE_PROFILE_ID,
                 shuffle_service: RpcAddress | None = None,
                 task_sched_policy: int | None = None) -> None:
        self.executor_id = executor_id
        # the scheduling policy for the task processes (batch_scheduling.task_policy)
        self.task_sched_policy = task_sched_policy
        self.shuffle_service = shuffle_service   # where reducers fetch our map output
        self.resources = dict(resources or {})
        self.rp_id = rp_id
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
        self._early: list[tuple] = []    # launches that came before the pool (_launch)
        self._ended: list[tuple[int, str, bytes]] = []   # (task id, state, result) to report
        self.exited = threading.Event()
        self.exit_code = 0
        self.decommissioning = False
        self._arriving = threading.Condition()   # counts migrated blocks being written here
        self._blocks_arriving = 0
        self.lease = MasterLease(float(config.read(spark_conf,
                                                   "spark.ember.executor.driverLease")))

    # --- lifecycle ----------------------------------------------------------------------
    def on_start(self) -> None:
        self.driver = self.rpc_env.endpoint_ref(self.driver_address, "CoarseGrainedScheduler")
        log_urls = {k: v for k, v in (("stdout", os.environ.get("SPARK_LOG_URL_STDOUT")),
                                      ("stderr", os.environ.get("SPARK_LOG_URL_STDERR"))) if v}
        fut = self.driver.ask(RegisterExecutor(self.executor_id, self.self_ref, self.hostname,
                                               self.cores, log_urls, {}, self.resources,
                                               self.rp_id))

        def registered(f: Any) -> None:
            try:
                f.result()
            except Exception as e:
                self.exit(1, f"Cannot register with driver: {self.driver_address}: {e}")
        fut.add_done_callback(registered)

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        if isinstance(msg, DRIVER_ONLY_MESSAGES):
            peer = self.rpc_env.current_sender()
            if peer is None or peer.address != self.driver_address:
                # trust by channel: tasks come from the driver that registered us, never
                # from whoever else reached this port
                log.warning("Refusing %s from %s: only the driver %s may send it",
                            type(msg).__name__, sender, self.driver_address)
                return
        if isinstance(msg, RegisteredExecutor):
            log.info("Successfully registered with driver")
            self.rpc_env.run_in_executor(self._start_pool_or_exit)
            self.lease.renew(time.monotonic())
            every = min(config.read(self.conf, "spark.executor.heartbeatInterval"),
                        self.lease.lease_s / 4.0)
            self.rpc_env.schedule_periodic(every, every, self._heartbeat)
        elif isinstance(msg, RegisterExecutorFailed):
            self.exit(1, f"Slave registration failed: {msg.message}")
        elif isinstance(msg, LaunchTask):
            self._launch([pickle.loads(msg.data)])
        elif isinstance(msg, LaunchTasks):
            self._launch(pickle.loads(msg.data))
            for stage_id in msg.forgetStages:
                self._forget_stage(stage_id)
        elif isinstance(msg, KillTask):
            slot = self.task_slots.get(msg.taskId)
            if slot is not None and self.pool is not None:
                self.pool.kill(slot, msg.taskId)
        elif isinstance(msg, RemoveStage):
            self._forget_stage(msg.stageId)
        elif isinstance(msg, RecycleTaskProcesses):
            if self.pool is not None:
                self.pool.recycle_idle(set(msg.keepSlots))
        elif isinstance(msg, RemoveRdd):
            self._remove_blocks(lambda n: is_block_file_of(n, msg.rddId),
                                ("unpersist_rdd", msg.rddId))
        elif isinstance(msg, RemoveBroadcast):
            name = f"broadcast_{msg.broadcastId}"
            self._remove_blocks(lambda n: n == name, ("unpersist_broadcast", msg.broadcastId))
        elif isinstance(msg, RemoveShuffle):
            from ember.shuffle.writer import remove_shuffle_files
            if self.pool is not None:
                self.pool.broadcast(("remove_shuffle", msg.shuffleId))
            remove_shuffle_files(self.work_dir, msg.shuffleId)
        elif isinstance(msg, DecommissionExecutor):
            if not self.decommissioning:
                self.decommissioning = True
                log.info("Decommission executor %s.", self.executor_id)
                self.rpc_env.run_in_executor(self._decommission)
        elif isinstance(msg, StopExecutor):
            log.info("Driver commanded a shutdown")
            self.exit(0, "")
        else:
            log.warning("Unexpected message %r from %s", type(msg).__name__, sender)

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        if isinstance(msg, PutMigratedBlock):
            self._receive_migrated_block(msg, context)
        elif isinstance(msg, FetchShuffleBlocks):
            root = os.path.realpath(self.work_dir) + os.sep
            # the ranges a MapStatus names, in this executor's map output files only
            serve_fetch(self.rpc_env, context, msg, lambda path: path.startswith(root))
        else:
            context.send_failure(UnsupportedMessageError(msg, context.sender_address))

    def on_disconnected(self, remote: RpcAddress) -> None:
        if remote == self.driver_address:
            self.exit(1, f"Driver {remote.host_port} disassociated! Shutting down.")
        elif self.worker_address is not None and remote == self.worker_address:
            self.exit(1, f"Lost connection to worker rpc endpoint "
                         f"spark://Worker@{remote.host_port}. Exiting.")

    def _heartbeat(self) -> None:
        """Fencing: ask the driver whether it still counts on us; once it has not answered
        for the lease, its application is gone (or cut off) and nothing here may run on."""
        now = time.monotonic()
        if self.lease.expired(now):
            self.exit(1, f"Driver {self.driver_address.host_port} has not answered for "
                         f"{self.lease.silent_for(now):.1f} s (spark.ember.executor."
                         f"driverLease={self.lease.lease_s:g} s). Shutting down.")
            return
        fut = self.driver.ask(ExecutorHeartbeat(self.executor_id), timeout=self.lease.lease_s)

        def answered(f: Any) -> None:
            if not f.cancelled() and f.exception() is None and f.result() is True:
                self.rpc_env.call_soon(self.lease.renew, now)
        fut.add_done_callback(answered)

    def exit_executor(self, code: int, reason: str) -> None:
        """Spark's exitExecutor: the driver hears why (RemoveExecutor) before the executor
        goes, so the tasks it sent here run elsewhere at once and their failures say why."""
        if not self.exited.is_set():
            self.driver.send(RemoveExecutor(self.executor_id, reason))
            self.exit(code, f"Executor self-exiting due to : {reason}")

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
                    unlink_quietly(os.path.join(d, name))

    # --- graceful decommission ----------------------------------------------------------
    def _decommission(self) -> None:
        """Off the loop: wait for running tasks and for blocks other executors are migrating
        here (refused from now on), migrate blocks (Spark's BlockManagerDecommissioner),
        then exit 0."""
        while self.task_slots and not self.exited.is_set():
            time.sleep(0.05)
        with self._arriving:
            self._arriving.wait_for(lambda: not self._blocks_arriving, 120.0)
        conf = self.conf
        if config.read(conf, "spark.storage.decommission.enabled"):
            try:
                migrate_blocks(
                    self, config.read(conf, "spark.storage.decommission.shuffleBlocks.enabled"),
                    config.read(conf, "spark.storage.decommission.rddBlocks.enabled"),
                    config.read(conf,
                                "spark.storage.decommission.maxReplicationFailuresPerBlock"))
            except Exception as e:   # what did not move is recomputed: log, still exit
                log.error("Block migration of executor %s failed: %s", self.executor_id, e)
        self.exit(0, "Executor decommission: finished, exiting")

    def decommission_signal(self) -> None:
        """SIGPWR (on the loop): ask the driver to decommission us (Spark's
        ExecutorDecommissioning); it answers with DecommissionExecutor."""
        log.info("Received decommission signal; asking the driver to decommission executor "
                 "%s", self.executor_id)
        fut = self.driver.ask(ExecutorDecommissioning(self.executor_id))
        fut.add_done_callback(lambda f: f.exception() is not None and log.warning(
            "The driver refused to decommission us: %s", f.exception()))

    def shuffle_location(self) -> tuple[str, str]:
        """(address, endpoint) reducers fetch this executor's map output from."""
        if self.shuffle_service is not None:
            return self.shuffle_service.host_port, SHUFFLE_SERVICE_ENDPOINT
        addr = self.rpc_env.address
        return f"{addr.host}:{addr.port}", ENDPOINT_NAME

    def _receive_migrated_block(self, msg: PutMigratedBlock, context: RpcCallContext) -> None:
        """A chunk of a block a decommissioning executor moves here. Refused once this one
        drains too: it has listed, or is about to list, the blocks it migrates itself."""
        try:
            path = migrated_block_path(self.work_dir, msg.blockId)
        except ValueError as e:
            context.send_failure(e)
            return

        def write() -> None:
            with self._arriving:
                refused = self.decommissioning
                if not refused:
                    self._blocks_arriving += 1
            if refused:
                self.rpc_env.call_soon(context.send_failure,
                                       BlockSavedOnDecommissionedBlockManagerException(
                                           msg.blockId))
                return
            try:
                reply = store_migrated_chunk(self, path, msg)
            except Exception as e:
                self.rpc_env.call_soon(context.send_failure, e)
                return
            finally:
                with self._arriving:
                    self._blocks_arriving -= 1
                    self._arriving.notify_all()
            self.rpc_env.call_soon(context.reply, reply)
        self.rpc_env.run_in_executor(write)

    # --- tasks --------------------------------------------------------------------------
    def _start_pool_or_exit(self) -> None:
        """An executor that cannot be created (its directories or task processes: a full
        disk, say) exits, as Spark's does on RegisteredExecutor, instead of staying
        registered with tasks it will never run."""
        try:
            self._start_pool()
        except Exception as e:
            self.exit_executor(1, f"Unable to create executor due to {e}")

    def _start_pool(self) -> None:
        conf = self.conf
        memory = config.read(conf, "spark.python.worker.memory")
        exec_mem = config.read(conf, "spark.executor.memory")
        storage_mb = config.read(conf, "spark.ember.storage.memory")
        if storage_mb is None:
            storage_mb = max(32, int((exec_mem - 300) * config.read(conf, "spark.memory.fraction")))
        block_dir = os.path.join(self.work_dir, "blocks")
        files_dir = os.path.join(self.work_dir, "files")
        os.makedirs(block_dir, exist_ok=True)
        os.makedirs(files_dir, exist_ok=True)
        addr = self.rpc_env.address
        env_conf = {"executor_id": self.executor_id, "host": self.hostname,
                    "address": f"{addr.host}:{addr.port}", "local_dir": self.work_dir,
                    **({"shuffle_address": self.shuffle_service.host_port,
                        "shuffle_endpoint": SHUFFLE_SERVICE_ENDPOINT}
                       if self.shuffle_service is not None else {}),
                    "block_dir": block_dir, "memory_limit_mb": memory,
                    "storage_budget": (storage_mb // max(self.cores, 1)) << 20,
                    "files_dir": files_dir, "cwd": os.getcwd(),
                    "pyspark_memory_mb": pyspark_worker_memory_mb(conf),
                    "driver": [self.driver_address.host, self.driver_address.port],
                    "io_key": (lambda k: k.hex() if k else None)(key_from_conf(conf)),
                    "fault_handler": config.read(
                        conf, "spark.python.worker.faulthandler.enabled"),
                    "read_host_local_disk": config.read(conf, "spark.shuffle.readHostLocalDisk"),
                    "max_bytes_in_flight": config.read(conf, "spark.reducer.maxSizeInFlight") << 20,
                    "max_reqs_in_flight": config.read(conf, "spark.reducer.maxReqsInFlight"),
                    "rpc_conf": {k: v for k, v in conf.items() if k.startswith(
                        ("spark.authenticate", "spark.rpc.", "spark.network.",
                         "spark.shuffle.io."))},
                    "fs_conf": fs.hadoop_conf(conf)}
        extra = {k[len("spark.executorEnv."):]: v for k, v in conf.items()
                 if k.startswith("spark.executorEnv.")}
        if self.task_sched_policy is not None:
            extra[TASK_POLICY_ENV] = str(self.task_sched_policy)
        pool = TaskProcessPool(self.cores, env_conf, self._on_task_end, extra,
                               config.read(conf, "spark.python.task.killTimeout"),
                               on_slot_restarted=self._on_task_process_lost,
                               loop=RpcLoop(self.rpc_env), on_barrier=self._on_barrier,
                               raw_results=True, hand_back_s=config.read(
                                   conf, "spark.ember.scheduler.handBackAfter"))
        pool.start()
        self.pool = pool                  # published only once its slots exist
        self.rpc_env.call_soon(self._launch_early)

    def _launch(self, tasks: list[tuple]) -> None:
        """Tasks of a LaunchTask(s): (task id, slot, stage key, stage closure and metadata
        (only the first time this executor sees the stage), task bytes). Those that come
        before the pool is up (RegisteredExecutor and the first LaunchTask can race its
        start) wait in `_early` until _start_pool launches them, and so do any after them:
        a later LaunchTask names the stage by its key only, and before, it could run first
        and miss the closure (the task was lost and its job hung)."""
        launches = []
        for tid, slot, stage_key, blob, meta, task_bytes in tasks:
            stage_key = tuple(stage_key)
            self.task_slots[tid] = slot
            if blob is not None:
                self.stage_blobs[stage_key] = (blob, meta)   # kept until RemoveStage
            elif stage_key in self.stage_blobs:
                blob, meta = self.stage_blobs[stage_key]
            else:                   # never sent, or forgotten: a failure, never a lost task
                self._on_task_end(slot, tid, "FAILED", raw_end_without_result((
                    "SparkException", f"Executor {self.executor_id} has no closure of "
                    f"stage {stage_key[0]}.{stage_key[1]}", "", True)))
                continue
            launches.append((slot, tid, stage_key, blob, meta, task_bytes))
        if self.pool is None or self._early:
            self._early.extend(launches)
        elif launches:
            self.pool.launch_all(launches)

    def _launch_early(self) -> None:
        """On the loop, once the pool is up: the tasks that came before it, in order."""
        launches, self._early = self._early, []
        if launches:
            self.pool.launch_all(launches)

    def _forget_stage(self, stage_id: int) -> None:
        for key in [k for k in self.stage_blobs if k[0] == stage_id]:
            del self.stage_blobs[key]
        if self.pool is not None:
            self.pool.forget_stage(stage_id)

    def _on_barrier(self, slot: int, tid: int, request: Any, respond: Any) -> None:
        """Forward a barrier task's RequestToSync to the driver's coordinator; it answers
        when every task of the stage made the call (the coordinator owns the timeout)."""
        if self.task_slots.get(tid) != slot:
            respond(False, f"Task {tid} is not running on executor {self.executor_id}")
            return

        def answered(f: Any) -> None:
            try:
                respond(True, list(f.result()))
            except RpcRemoteError as e:
                respond(False, e.remote_message)
            except Exception as e:
                respond(False, f"{type(e).__name__}: {e}")
        self.driver.ask(request, timeout=BARRIER_ASK_TIMEOUT).add_done_callback(answered)

    def _on_task_end(self, slot: int, tid: int, state: str, data: bytes) -> None:
        """`data`: the task process's pickled result, forwarded to the driver as it is."""
        self.task_slots.pop(tid, None)
        self._ended.append((tid, state, data))
        if not self.task_slots:
            self._send_status_updates()     # nothing else running: nothing to wait for
        elif len(self._ended) == 1:
            self.rpc_env.call_soon(self._send_status_updates)

    def _on_task_process_lost(self, slot: int) -> None:
        """After the updates of the tasks it ended (its cached blocks died with it)."""
        self._send_status_updates()
        self.driver.send(TaskProcessLost(self.executor_id, slot))

    def _send_status_updates(self) -> None:
        """At the end of the loop's turn (or at once when no other task runs here), the
        tasks that ended in it as one message: tasks that end together cost the driver one
        wake-up and one read. Results already sent by other task processes are read first
        and go along (when that ends the last running task, its _on_task_end sends them
        all, and nothing is left here)."""
        if self.task_slots and self.pool is not None:
            self.pool.take_arrived()
        ended, self._ended = self._ended, []
        if len(ended) == 1:
            tid, state, data = ended[0]
            self.driver.send(StatusUpdate(self.executor_id, tid, state, data))
        elif ended:
            tids, states, results = (list(column) for column in zip(*ended))
            self.driver.send(StatusUpdates(self.executor_id, tids, states, results))

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
    p.add_argument("--resourcesFile")
    return p.parse_args(argv)


def executor_resources(resources_file: str | None, profile: ResourceProfile
                       ) -> dict[str, ResourceInformation]:
    """Spark's getOrDiscoverAllResourcesForResourceProfile: the addresses the worker
    assigned (the resources file), then the profile's discovery scripts for the rest; each
    must cover the profile's amount."""
    found = parse_allocated(resources_file, "spark.executor")
    for name, req in profile.getCustomExecutorResources().items():
        if name not in found:
            found[name] = discover_resource(ResourceRequest(
                "spark.executor", name, int(req.amount), req.discoveryScript, req.vendor))
        addresses = found[name].addresses
        if len(addresses) < req.amount:
            raise ResourceError(f"Resource: {name}, with addresses: {','.join(addresses)} "
                                f"is less than what the user requested: {req.amount})")
    return found


def _register_with_shuffle_service(env: RpcEnv, args: argparse.Namespace,
                                   conf: dict[str, str], work_dir: str) -> RpcAddress | None:
    """Register our local dir with the worker's external shuffle service (Spark's
    registerWithExternalShuffleServer: spark.shuffle.registration.maxAttempts tries)."""
    port = os.environ.get("SPARK_SHUFFLE_SERVICE_PORT") or config.read(
        conf, "spark.shuffle.service.port")
    address = RpcAddress(args.hostname, int(port))
    attempts = config.read(conf, "spark.shuffle.registration.maxAttempts")
    for attempt in range(1, attempts + 1):
        try:
            ref = env.setup_endpoint_ref_sync(address, SHUFFLE_SERVICE_ENDPOINT, timeout=30)
            ref.ask_sync(RegisterExecutorShuffleInfo(args.app_id, args.executor_id,
                                                     [work_dir]), timeout=30)
            return address
        except Exception as e:
            log.error("Failed to connect to external shuffle server, will retry %d more "
                      "times after waiting 5 seconds...", attempts - attempt)
            if attempt == attempts:
                log.error("Unable to register with external shuffle server due to : %s", e)
                return None
            time.sleep(5)
    return None


def _endpoint_address(url: str) -> RpcAddress:
    """spark://Name@host:port -> RpcAddress(host, port)."""
    if not url.startswith("spark://") or "@" not in url:
        raise ValueError(f"Invalid endpoint URL: {url}")
    return RpcAddress.from_spark_url("spark://" + url.split("@", 1)[1])


PROFILE_DIR_ENV = "EMBER_EXECUTOR_PROFILE_DIR"


def _profile_loop(env: RpcEnv) -> Any:
    """benchmarks/profile.py --cluster: cProfile the RPC loop thread (where LaunchTask and
    StatusUpdate are handled) when EMBER_EXECUTOR_PROFILE_DIR is set; None otherwise."""
    if not os.environ.get(PROFILE_DIR_ENV):
        return None
    import cProfile
    profiler = cProfile.Profile()
    env.call_soon(profiler.enable)
    return profiler


def main(argv: list[str] | None = None) -> int:
    configure_logging(logging.INFO)
    thread_dump.install()
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
    if boot_conf and config.read(conf, "spark.network.crypto.enabled"):
        env.require_encryption()   # shuffle fetches from other executors too
    profile_memory = cfg.resourceProfile.getExecutorMemory()
    if profile_memory:   # an executor of a stage-level profile sizes itself by the profile
        conf["spark.executor.memory"] = f"{profile_memory}m"
    try:
        resources = executor_resources(args.resourcesFile, cfg.resourceProfile)
    except ResourceError as e:
        log.error("Failed to setup executor resources: %s", e)
        env.shutdown()
        return 1
    dirs = [d for d in os.environ.get("SPARK_EXECUTOR_DIRS", "").split(os.pathsep) if d]
    root = dirs[0] if dirs else tempfile.gettempdir()
    work_dir = tempfile.mkdtemp(prefix=f"executor-{args.executor_id}-", dir=root)
    shuffle_service = None
    if config.read(conf, "spark.shuffle.service.enabled"):
        shuffle_service = _register_with_shuffle_service(env, args, conf, work_dir)
        if shuffle_service is None:
            env.shutdown()
            return 1
    own_policy = (batch_threads() if config.read(conf, "spark.ember.executor.batchScheduling")
                  else None)
    backend = CoarseGrainedExecutorBackend(
        args.executor_id, args.hostname, args.cores, args.app_id, driver_addr, worker_addr,
        conf, work_dir, resources, args.resourceProfileId, shuffle_service,
        task_policy(config.read(conf, "spark.ember.task.batchScheduling"), own_policy))
    env.setup_endpoint(ENDPOINT_NAME, backend)
    if worker_addr is not None:
        try:    # WorkerWatcher: a connection to the worker whose loss ends this executor
            env.setup_endpoint_ref_sync(worker_addr, "Worker", timeout=30)
        except Exception as e:
            backend.exit(1, f"Could not initialize connection to worker {args.worker_url}. "
                            f"Exiting. ({e})")
    profiler = _profile_loop(env)
    signal.signal(signal.SIGTERM, lambda *_: backend.exit(143, "RECEIVED SIGNAL TERM"))
    if config.read(conf, "spark.decommission.enabled") and hasattr(signal, "SIGPWR"):
        signal.signal(signal.SIGPWR, lambda *_: env.call_soon(backend.decommission_signal))
    backend.exited.wait()
    backend.shutdown()
    env.shutdown()
    if profiler is not None:
        path = os.path.join(os.environ[PROFILE_DIR_ENV], f"executor-{os.getpid()}.prof")
        profiler.dump_stats(path + ".tmp")          # complete files only: the reader polls
        os.replace(path + ".tmp", path)
    if shuffle_service is None:   # else the shuffle service serves it until the app ends
        import shutil
        shutil.rmtree(work_dir, ignore_errors=True)
    logging.shutdown()
    os._exit(backend.exit_code)


if __name__ == "__main__":
    sys.exit(main())
