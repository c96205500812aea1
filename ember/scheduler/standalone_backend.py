"""StandaloneSchedulerBackend (over CoarseGrainedSchedulerBackend) for spark:// masters.

The driver's RpcEnv hosts two endpoints: CoarseGrainedScheduler, where executors register
and report task status (DriverEndpoint), and AppClient, which registers the application
with the master(s). The RPC loop is also the driver's scheduler loop (RpcLoop): a task
result is handled and the next task sent on that one thread, as in local mode.
"""
from __future__ import annotations

import logging
import os
import pickle
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from ember import config
from ember.deploy.app_client import parse_master_urls, start_app_client
from ember.deploy.messages import (DEFAULT_RESOURCE_PROFILE_ID, ApplicationDescription,
                                   BlockManagerPeer, Command, DecommissionExecutor,
                                   ExecutorDecommissioning,
                                   FetchBroadcast, FetchFile, GetPeers, UpdateBlockInfo,
                                   KillTask, LaunchTask, LaunchTasks, RecycleTaskProcesses,
                                   RegisteredExecutor,
                                   ExecutorHeartbeat, RegisterExecutor, RegisterExecutorFailed,
                                   RemoveBroadcast, RemoveExecutor, RemoveRdd, RemoveShuffle,
                                   RemoveStage,
                                   RequestToSync,
                                   ResourceProfile, RetrieveSparkAppConfig, SparkAppConfig,
                                   StatusUpdate, StatusUpdates, StopExecutor, TaskProcessLost)
from ember.rpc import RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv, UnsupportedMessageError
from ember.scheduler.backend import SchedulerBackend, WorkerOffer
from ember.scheduler.heartbeat_receiver import HeartbeatReceiver
from ember.scheduler.slot_queues import SlotQueues, queue_depth
from ember.util.event_loop import RpcLoop
from ember.scheduler.executor_allocation import (SCHEDULE_INTERVAL, AllocationSettings,
                                                 ExecutorAllocationManager, ExecutorSnapshot)
from ember.shuffle.crypto import IO_ENCRYPTION, IO_KEY, new_key_hex
from ember.scheduler.listener import ExecutorAdded, ExecutorRemoved

log = logging.getLogger("ember.scheduler.standalone")

ENDPOINT_NAME = "CoarseGrainedScheduler"
# a finished stage's RemoveStage goes with the executor's next launch, or this long after
# the stage finished when none came (the executor then drops the stage's closure)
FORGET_FLUSH_S = 1.0


@dataclass
class ExecutorData:
    executor_id: str
    ref: Any
    address: RpcAddress
    host: str
    cores: int
    seen_stages: set = field(default_factory=set)
    forgotten: list = field(default_factory=list)   # stage ids to send RemoveStage for
    rp_id: int = DEFAULT_RESOURCE_PROFILE_ID
    idle_since: float | None = None      # monotonic time it became idle; None while busy
    slots: SlotQueues = field(default_factory=lambda: SlotQueues(0))   # busy slots' tasks

    @property
    def free_slots(self) -> list[int]:
        return [s for s in range(self.cores) if s not in self.slots.running]


class DriverEndpoint(RpcEndpoint):
    """Runs on the RPC loop, which is also the driver's scheduler loop on a cluster."""

    def __init__(self, backend: "StandaloneSchedulerBackend") -> None:
        self.backend = backend
        self._channels: dict[str, int] = {}   # executor id -> the connection it registered on

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        b = self.backend
        if isinstance(msg, RegisterExecutor):
            first = msg.executorId not in b.executors
            b.register_executor(msg, context)
            if first and msg.executorId in b.executors:
                self._channels[msg.executorId] = context.sender.channel_id
        elif isinstance(msg, ExecutorHeartbeat):
            # the driver lease is renewed only on the executor's own registered connection
            known = msg.executorId in b.executors and self.speaks_for(msg.executorId,
                                                                     context.sender)
            if known:
                b.heartbeats.heartbeat(msg.executorId, time.monotonic())
            context.reply(known)
        elif isinstance(msg, RetrieveSparkAppConfig):
            context.reply(SparkAppConfig(sorted(b.app_conf().items()),
                                         resourceProfile=b.profile_message(msg.resourceProfileId)))
        elif isinstance(msg, FetchBroadcast):
            self._reply_file(context, os.path.join(b.runtime.broadcast_dir, f"broadcast_{msg.id}"))
        elif isinstance(msg, FetchFile):
            name = os.path.basename(msg.name)
            self._reply_file(context, os.path.join(b.runtime.files_dir, name))
        elif isinstance(msg, RequestToSync):
            b.barrier_request(msg, context)
        elif isinstance(msg, ExecutorDecommissioning):
            data = b.executors.get(msg.executorId)
            if data is None or data.address != context.sender_address:
                context.send_failure(ValueError(f"Unknown executor {msg.executorId}"))
                return
            b.decommission_executor(msg.executorId, "executor received the decommission signal")
            context.reply(True)
        elif isinstance(msg, GetPeers):
            context.reply(b.peers_of(msg.executorId))
        elif isinstance(msg, UpdateBlockInfo):
            data = b.executors.get(msg.executorId)
            if data is None or data.address != context.sender_address:
                context.send_failure(ValueError(f"Unknown executor {msg.executorId}"))
                return
            context.reply(b.update_block_info(data, msg))
        else:
            context.send_failure(UnsupportedMessageError(msg, context.sender_address))

    def _reply_file(self, context: RpcCallContext, path: str) -> None:
        """The file's bytes; a directory (addFile(dir, recursive=True)) as a tar of it."""
        def read() -> None:
            try:
                if os.path.isdir(path):
                    data = _tar_directory(path)
                else:
                    with open(path, "rb") as f:
                        data = f.read()
            except OSError as e:
                self.rpc_env.call_soon(context.send_failure, FileNotFoundError(str(e)))
                return
            self.rpc_env.call_soon(context.reply, data)
        self.rpc_env.run_in_executor(read)

    def speaks_for(self, executor_id: str, peer: Any) -> bool:
        """Whether `peer` (a PeerInfo) is executor_id's own registered connection."""
        return peer is not None and (peer.local or
                                     self._channels.get(executor_id) == peer.channel_id)

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        b = self.backend
        if isinstance(msg, (StatusUpdate, StatusUpdates, TaskProcessLost, RemoveExecutor)):
            if not self.speaks_for(msg.executorId, self.rpc_env.current_sender()):
                # trust by channel: only executor X's own connection speaks for X
                log.warning("Refusing %s for executor %s from %s: not that registered "
                            "executor's connection", type(msg).__name__, msg.executorId, sender)
                return
        if isinstance(msg, StatusUpdate):
            b.status_update(msg.executorId, msg.taskId, msg.state, msg.data)
        elif isinstance(msg, StatusUpdates):
            b.status_updates(msg.executorId, zip(msg.taskIds, msg.states, msg.data))
        elif isinstance(msg, TaskProcessLost):
            b.runtime.block_manager_master.remove_slot(msg.executorId, msg.slot)
        elif isinstance(msg, RemoveExecutor):
            b.executor_exiting(msg.executorId, msg.reason)
        else:
            log.warning("Unexpected message %r from %s", type(msg).__name__, sender)

    def on_disconnected(self, remote: RpcAddress) -> None:
        self.backend.address_disconnected(remote)


def _tar_directory(path: str) -> bytes:
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(path, arcname=".")
    return buf.getvalue()


def driver_host(conf: Any, masters: list[RpcAddress]) -> str:
    """The address the driver advertises to executors and the master: spark.driver.host,
    else SPARK_LOCAL_HOSTNAME / SPARK_LOCAL_IP, else the local address this host reaches the
    first master from (a UDP connect sends nothing), so a driver on another host than the
    cluster never hands its peers 127.0.0.1; loopback when the master is on loopback."""
    chosen = conf.get("spark.driver.host") or os.environ.get("SPARK_LOCAL_HOSTNAME") \
        or os.environ.get("SPARK_LOCAL_IP")
    if chosen:
        return chosen
    master = masters[0].host if masters else "127.0.0.1"
    if master in ("localhost", "") or master.startswith("127."):
        return "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((master, masters[0].port))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class StandaloneSchedulerBackend(SchedulerBackend):
    def __init__(self, runtime: Any, scheduler: Any, master: str) -> None:
        self.runtime = runtime        # the driver's DriverRuntime
        self.scheduler = scheduler
        self.masters = parse_master_urls(master)
        self._allocation: ExecutorAllocationManager | None = None
        if scheduler.rp_manager is not None and scheduler.rp_manager.dynamic_enabled:
            # Spark's validateSettings: a bad setting fails the SparkContext before it binds
            self._allocation = ExecutorAllocationManager(
                AllocationSettings.from_conf(dict(runtime.conf.getAll())),
                scheduler.rp_manager.max_tasks_per_executor)
        self.conf = runtime.conf
        self.executors: dict[str, ExecutorData] = {}
        self._slot_of: dict[int, int] = {}
        self.app_id: str | None = None
        self.total_cores = 0
        self.expected_cores = 0
        self._stopping = False
        self._registered = threading.Condition()
        self._dead_reason: str | None = None
        host = driver_host(self.conf, self.masters)
        bind = self.conf.get("spark.driver.bindAddress") or host
        port = config.read(self.conf, "spark.driver.port")
        rpc_conf = {k: v for k, v in self.conf.getAll()
                    if k.startswith(("spark.authenticate", "spark.rpc.", "spark.port.",
                                     "spark.network.", "spark.ember.rpc.",
                                     "spark.ember.network."))}
        self.rpc_env = RpcEnv.create("sparkDriver", bind, port, rpc_conf, advertise=host)
        self.loop = RpcLoop(self.rpc_env)
        self.driver_endpoint = DriverEndpoint(self)
        self.rpc_env.setup_endpoint(ENDPOINT_NAME, self.driver_endpoint)
        self.client: Any = None
        self._releasing: dict[str, str] = {}     # executor id -> why we asked to remove it
        self._decommissioning: dict[str, str] = {}   # executor id -> decommission reason
        self._decommission_enabled = config.read(self.conf, "spark.decommission.enabled")
        # executor -> host: gone (disconnected, or exited saying why) before the master's
        # report of it arrives
        self._disassociated: dict[str, str] = {}
        # executors removed as we asked (drained, released): the master's report of their
        # exit, which comes after, is no error
        self._let_go: set[str] = set()
        self._io_key: str | None = None
        self._revive_pending = False      # an offer round is queued on the loop
        self._forget_flush: Any = None    # the timer sending RemoveStage not sent yet
        self._queue_depth = queue_depth(self.conf, cluster=True)
        self.heartbeats = HeartbeatReceiver(runtime.heartbeat_settings, time.monotonic())

    # --- configuration shared with executors --------------------------------------------
    def app_conf(self) -> dict[str, str]:
        conf = dict(self.conf.getAll())
        conf["spark.app.id"] = self.app_id or ""
        conf.pop("spark.authenticate.secret", None)   # executors get it from the worker env
        if config.read(conf, IO_ENCRYPTION):
            if self._io_key is None:
                self._io_key = conf.get(IO_KEY) or new_key_hex()
            conf[IO_KEY] = self._io_key      # one key per application, drawn here
        return conf

    def _app_description(self) -> ApplicationDescription:
        addr = self.rpc_env.address
        driver_url = f"spark://{ENDPOINT_NAME}@{addr.host}:{addr.port}"
        args = ["--driver-url", driver_url, "--executor-id", "{{EXECUTOR_ID}}",
                "--hostname", "{{HOSTNAME}}", "--cores", "{{CORES}}", "--app-id",
                "{{APP_ID}}", "--worker-url", "{{WORKER_URL}}", "--resourceProfileId",
                "{{RESOURCE_PROFILE_ID}}"]
        env = {k[len("spark.executorEnv."):]: v for k, v in self.conf.getAll()
               if k.startswith("spark.executorEnv.")}
        env["PYTHONHASHSEED"] = os.environ.get("PYTHONHASHSEED", "0")
        path = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(
            path + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
        command = Command("ember.executor.backend", args, env, [], [], [])
        max_cores = config.read(self.conf, "spark.cores.max")
        initial = config.read(self.conf, "spark.dynamicAllocation.initialExecutors")
        if self._allocation is not None:
            # Spark: start with none, the allocation manager asks per profile
            if self.conf.get("spark.executor.cores") is None:
                log.warning("Dynamic allocation enabled without spark.executor.cores "
                            "explicitly set, you may get more executors allocated than "
                            "expected. It's recommended to set spark.executor.cores "
                            "explicitly. Please check SPARK-30299 for more details.")
            initial = 0
        event_log = self.runtime.event_log
        return ApplicationDescription(
            self.runtime.app_name, max_cores or None, command,
            self.runtime.ui_url or "",
            self.profile_message(DEFAULT_RESOURCE_PROFILE_ID),
            "file:" + event_log.log_dir if event_log is not None else None, None,
            initial or None, self.runtime.spark_user)

    def profile_message(self, rp_id: int) -> ResourceProfile:
        """A resource profile as the master and executors see it (an unknown id: the default)."""
        manager = self.scheduler.rp_manager
        from ember.errors import SparkException
        try:
            return manager.profile_message(rp_id)
        except SparkException:   # "ResourceProfileId N not found!"
            return manager.profile_message(DEFAULT_RESOURCE_PROFILE_ID)

    # --- lifecycle ----------------------------------------------------------------------
    def start(self) -> None:
        from ember.config import read
        self.client = start_app_client(
            self.rpc_env, self.masters, self._app_description(), self,
            read(self.conf, "spark.ember.appClient.reconnectTimeout"))
        self.client.registered.wait()
        if self.client.failed is not None:
            self.rpc_env.shutdown()
            from ember.errors import SparkException
            raise SparkException(f"Cannot register application with master "
                                 f"{','.join(m.to_spark_url() for m in self.masters)}: "
                                 f"{self.client.failed}")
        if self._allocation is not None:
            self.rpc_env.schedule_periodic(SCHEDULE_INTERVAL, SCHEDULE_INTERVAL,
                                           self._allocation_tick)
        check = self.heartbeats.settings.check_interval_s
        self.rpc_env.schedule_periodic(check, check, self._expire_dead_executors)
        starvation = config.read(self.conf, "spark.starvation.timeout")
        self._starvation = self.rpc_env.schedule_periodic(starvation, starvation,
                                                          self._warn_if_starved)
        ratio = config.read(self.conf, "spark.scheduler.minRegisteredResourcesRatio")
        wait = config.read(self.conf, "spark.scheduler.maxRegisteredResourcesWaitingTime")
        max_cores = config.read(self.conf, "spark.cores.max")
        if ratio > 0 and max_cores:
            deadline = time.monotonic() + wait
            with self._registered:
                self._registered.wait_for(
                    lambda: self.total_cores >= ratio * max_cores
                    or time.monotonic() >= deadline, timeout=wait)

    def stop(self) -> None:
        self._stopping = True
        for ex in list(self.executors.values()):
            ex.ref.send(StopExecutor())
        if self.client is not None:
            self.client.stop()
        time.sleep(0.05)            # let the last messages leave before the sockets close
        self.rpc_env.shutdown()

    def application_id(self) -> str:
        return self.app_id or ""

    def default_parallelism(self) -> int:
        return max(self.total_cores, 2)

    def is_executor_alive(self, executor_id: str) -> bool:
        return executor_id in self.executors

    # --- app client listener (RPC thread) -----------------------------------------------
    def connected(self, app_id: str) -> None:
        self.app_id = app_id

    def disconnected(self) -> None:
        log.warning("Disconnected from Spark cluster! Waiting for reconnection...")

    def dead(self, reason: str) -> None:
        self._dead_reason = reason
        if not self._stopping and self.app_id is not None:
            log.error("Application has been killed. Reason: %s", reason)
            threading.Thread(target=self.runtime.stop_context, daemon=True).start()

    def executor_added(self, exec_id: str, worker_id: str, host_port: str, cores: int,
                       memory: int) -> None:
        pass                        # it counts once the executor registers with us

    def executor_removed(self, exec_id: str, message: str, exit_status: int | None,
                         worker_host: str | None) -> None:
        caused_by_app = exit_status is not None and exit_status != 0 and worker_host is None
        self.loop.post(self.remove_executor, exec_id, message, caused_by_app, worker_host)

    def worker_removed(self, worker_id: str, host: str, message: str) -> None:
        pass

    def executor_decommissioned(self, exec_id: str, message: str,
                                worker_host: str | None) -> None:
        """The master decommissioned the executor's worker (ExecutorUpdated DECOMMISSIONED)."""
        self.loop.post(self.decommission_executor, exec_id, message or "worker decommissioned")

    # --- graceful decommission (scheduler loop) -------------------------------------------
    def decommission_executor(self, exec_id: str, reason: str) -> None:
        """Spark's decommissionExecutors: no new tasks go there; the executor migrates its
        shuffle and cached blocks to peers (spark.storage.decommission.*) and exits."""
        data = self.executors.get(exec_id)
        if data is None or exec_id in self._decommissioning:
            return
        self._decommissioning[exec_id] = reason
        log.warning("Decommissioning executor %s on %s: %s", exec_id, data.host, reason)
        data.ref.send(DecommissionExecutor())

    def peers_of(self, exec_id: str) -> list[BlockManagerPeer]:
        """Where a decommissioning executor may migrate blocks: live executors not being
        decommissioned themselves."""
        return [BlockManagerPeer(e.executor_id, e.address.host, e.address.port)
                for e in self.executors.values()
                if e.executor_id != exec_id and e.executor_id not in self._decommissioning]

    def update_block_info(self, data: ExecutorData, msg: UpdateBlockInfo) -> bool:
        """A peer now holds a migrated block: map outputs move in the tracker (Spark's
        updateMapOutput), cached blocks are added to the block master."""
        block = msg.blockId
        if block.startswith("shuffle_"):
            moved = self.runtime.map_output_tracker.move_output_file(
                block, data.executor_id, data.host, msg.path, msg.shuffleAddress,
                msg.shuffleEndpoint)
            if moved:
                log.info("Updated %d map outputs in %s: now on executor %s", moved, block,
                         data.executor_id)
            return moved > 0
        if block.startswith("rdd_"):
            try:
                rdd_id, partition = (int(x) for x in block[len("rdd_"):].split("_"))
            except ValueError:
                return False
            holders = {b.executor_id for b in self.runtime.block_manager_master.locations(rdd_id, partition)}
            self.runtime.block_manager_master.update(data.executor_id, -1, data.host,
                                         [(block, "disk", msg.memSize, msg.diskSize)])
            for old in holders & set(self._decommissioning):
                self.scheduler.block_migrated(old, data.executor_id, data.host, partition)
            return True
        return False

    # --- scheduler loop -----------------------------------------------------------------
    def register_executor(self, msg: RegisterExecutor, context: RpcCallContext) -> None:
        eid = msg.executorId
        if eid in self.executors:
            context.send_failure(ValueError(f"Duplicate executor ID: {eid}"))
            msg.executorRef.send(RegisterExecutorFailed(f"Duplicate executor ID: {eid}"))
            return
        addr = msg.executorRef.address
        data = ExecutorData(eid, msg.executorRef, addr, msg.hostname, msg.cores,
                            rp_id=msg.resourceProfileId,
                            idle_since=time.monotonic(), slots=SlotQueues(self._queue_depth))
        self.executors[eid] = data
        self.heartbeats.executor_added(eid, time.monotonic())
        with self._registered:
            self.total_cores += msg.cores
            self._registered.notify_all()
        log.info("Registered executor %s (%s) with ID %s, ResourceProfileId %d",
                 msg.executorRef, addr.host_port, eid, msg.resourceProfileId)
        self.scheduler.register_executor_resources(
            eid, msg.cores, {n: list(i.addresses) for n, i in msg.resources.items()},
            msg.resourceProfileId)
        self.scheduler.executor_added(eid)
        self.runtime.bus.post(ExecutorAdded(
            eid, msg.hostname, msg.cores, log_urls=dict(msg.logUrls),
            resources={n: list(i.addresses) for n, i in msg.resources.items()},
            resource_profile_id=msg.resourceProfileId))
        self.rpc_env.call_soon(context.reply, True)
        msg.executorRef.send(RegisteredExecutor())
        self.revive_offers()

    def remove_executor(self, exec_id: str, reason: str, caused_by_app: bool,
                        worker_host: str | None = None) -> None:
        """`worker_host`: set when the executor went with its worker (its host's shuffle
        files, external shuffle service included, are gone too)."""
        data = self.executors.pop(exec_id, None)
        self.heartbeats.executor_removed(exec_id)
        released = self._releasing.pop(exec_id, None)
        decommissioned = self._decommissioning.pop(exec_id, None)
        if self._allocation is not None:
            self._allocation.executor_removed(exec_id)
        if data is None:
            earlier = self._disassociated.pop(exec_id, None)
            if exec_id in self._let_go:     # the master's report of an exit we asked for
                self._let_go.discard(exec_id)
                log.info("Executor %s removed: %s", exec_id, reason)
                return
            if earlier is not None and reason:
                # the connection dropped before the master's report: its reason is the real
                # one (e.g. the worker killed the executor for exceeding its memory limit)
                log.error("Executor %s on %s was removed by the cluster: %s", exec_id,
                          earlier, reason)
            elif reason and not self._stopping:
                log.error("Executor %s was removed before it registered: %s", exec_id,
                          reason)
            return
        with self._registered:
            self.total_cores -= data.cores
        if (decommissioned is not None or released is not None) and \
                exec_id in self._disassociated:
            self._let_go.add(exec_id)
        if decommissioned is not None:
            reason = f"Executor decommission: {decommissioned}"
            log.warning("Removed executor %s on %s: %s", exec_id, data.host, reason)
        elif released is not None:   # however it went (killed, disconnected): we asked for it
            reason = f"Executor killed by driver: {released}"
            log.warning("Removed executor %s on %s: %s", exec_id, data.host, reason)
        else:
            log.error("Lost executor %s on %s: %s", exec_id, data.host, reason)
        self.runtime.bus.post(ExecutorRemoved(exec_id, reason))
        self.scheduler.executor_lost(exec_id, reason, caused_by_app, worker_host)
        self.revive_offers()

    def _expire_dead_executors(self) -> None:
        """Spark's expireDeadHosts: an executor silent past the timeout is killed (the
        master replaces it) and removed at once, so its tasks run elsewhere."""
        timeout_ms = round(self.heartbeats.settings.timeout_s * 1000)
        for exec_id, silent in self.heartbeats.expire(time.monotonic()):
            silent_ms = round(silent * 1000)
            log.warning("Removing executor %s with no recent heartbeats: %d ms exceeds "
                        "timeout %d ms", exec_id, silent_ms, timeout_ms)
            self.kill_executors([exec_id])   # the master drops it from the app: no report
            self.remove_executor(exec_id, f"Executor heartbeat timed out after {silent_ms} ms",
                                 True)

    def executor_exiting(self, exec_id: str, reason: str) -> None:
        """The executor's RemoveExecutor (Spark's exitExecutor): it says why it goes; the
        master's report of its exit comes after."""
        data = self.executors.get(exec_id)
        if data is not None:
            self._disassociated[exec_id] = data.host
        self.remove_executor(exec_id, reason, False)

    def address_disconnected(self, remote: RpcAddress) -> None:
        if self._stopping:
            return
        for eid, data in list(self.executors.items()):
            if data.address == remote:
                self._disassociated[eid] = data.host
                self.remove_executor(eid, "Remote RPC client disassociated. Likely due to "
                                          "containers exceeding thresholds, or network "
                                          "issues. Check driver logs for WARN messages.",
                                     False)

    def status_update(self, executor_id: str, task_id: int, state: str, result: bytes) -> None:
        self.status_updates(executor_id, ((task_id, state, result),))

    def status_updates(self, executor_id: str, updates: Iterable[tuple[int, str, bytes]]
                       ) -> None:
        """(task id, state, result) of tasks of one executor, in the order they ended; then
        one offer round if any task set has tasks to place (asked once, not per task: a
        StatusUpdates message of a busy executor holds dozens)."""
        for task_id, state, result in updates:
            self._task_ended(executor_id, task_id, state, result)
        if self.scheduler.wants_offers():
            self.revive_offers()

    def _task_ended(self, executor_id: str, task_id: int, state: str, result: bytes) -> None:
        data = self.executors.get(executor_id)
        payload, accum, metrics, blocks = pickle.loads(result)
        slot = self._slot_of.pop(task_id, None)
        self.scheduler.status_update(task_id, state, payload, accum, metrics, blocks)
        if data is not None and slot is not None:
            free, started = data.slots.ended(slot, task_id)
            if started is not None:         # the executor started it when this one ended
                self.scheduler.promote_queued(started)
            if free and not data.slots.running:
                data.idle_since = time.monotonic()

    def _request_totals(self, totals: list[tuple[int, int]]) -> bool:
        return self.client is not None and self.client.request_total_executors(
            [(self.profile_message(rp), n) for rp, n in totals])

    def _allocation_tick(self) -> None:
        """Every 100 ms under dynamic allocation (Spark's schedule()): send changed
        targets to the master and remove the executors the manager picked."""
        alloc = self._allocation
        if alloc is None or self._stopping or self.client is None:
            return
        keeps_shuffle = self.runtime.map_output_tracker.executors_with_outputs()
        cached = self.runtime.block_manager_master.executors_with_blocks()
        execs = [ExecutorSnapshot(e.executor_id, e.rp_id, e.idle_since,
                                  e.executor_id in cached, e.executor_id in keeps_shuffle)
                 for e in self.executors.values() if e.executor_id not in self._decommissioning]
        now = time.monotonic()
        decision = alloc.schedule(now, self.scheduler.tasks_needed_by_profile(), execs)
        if decision.totals and self._request_totals(decision.totals):
            alloc.totals_sent(decision.totals)
            log.info("Requesting executors per resource profile: %s",
                     ", ".join(f"{rp} -> {n}" for rp, n in decision.totals))
        if not decision.remove:
            return
        by_id = {e.executor_id: e for e in execs}
        whys = {eid: f"idle for {alloc.timeout_of(by_id[eid]):g} seconds (dynamic allocation)"
                for eid in decision.remove}
        if self._decommission_enabled:   # Spark: removal by graceful decommission
            alloc.removal_requested(decision.remove)
            for eid, why in whys.items():
                self._releasing[eid] = why
                self.decommission_executor(eid, why)
        elif self.client is not None and self.client.kill_executors(decision.remove):
            alloc.removal_requested(decision.remove)
            for eid, why in whys.items():
                self._releasing[eid] = why
                log.warning("Removing executor %s because it has been %s", eid, why)

    def _warn_if_starved(self) -> None:
        """Spark's starvation timer: until the first task launches, warn every
        spark.starvation.timeout that submitted work finds no executor to run on."""
        if self.scheduler.has_launched_task or self._stopping:
            self._starvation.cancel()
        elif self.scheduler.stage_tsms:
            log.warning("Initial job has not accepted any resources; check your cluster UI "
                        "to ensure that workers are registered and have sufficient resources")

    def revive_offers(self) -> None:
        """One offer round at the end of this turn of the loop, however many callers asked
        in it (the StatusUpdates of every executor read in one turn, a job submission), so
        the tasks of the round leave as one message per executor."""
        if not self._revive_pending:
            self._revive_pending = True
            try:
                self.rpc_env.call_soon(self._make_offers)
            except RuntimeError:             # the RPC loop is closed: nothing to offer to
                self._revive_pending = False

    def _make_offers(self) -> None:
        self._revive_pending = False
        sched = self.scheduler
        with sched.lock:
            live = [e for e in self.executors.values()
                    if e.executor_id not in self._decommissioning]
            offers = [WorkerOffer(e.executor_id, e.host, s, e.address.host_port)
                      for e in live for s in e.free_slots]
            launches: dict[str, list[tuple]] = {}
            launched = sched.resource_offers(offers) if offers else []
            self._add_launches(launched, launches)
            most = self._queue_depth and len(launched) == len(offers) and \
                sched.queueable_tasks()
            if most:
                # every free slot took a task: each busy slot may take more, to start one
                # after another (TaskSetManager.queueable says which sets may)
                queued = [WorkerOffer(e.executor_id, e.host, s, e.address.host_port, n)
                          for e in live for s, n in e.slots.room(most)]
                if queued:
                    self._add_launches(sched.resource_offers(queued), launches, queued=True)
            for eid, tasks in launches.items():
                data = self.executors[eid]
                forget, data.forgotten = data.forgotten, []
                if len(tasks) == 1 and not forget:
                    data.ref.send(LaunchTask(pickle.dumps(tasks[0], protocol=5)))
                else:
                    data.ref.send(LaunchTasks(pickle.dumps(tasks, protocol=5), forget))

    def _add_launches(self, launched: list, launches: dict[str, list[tuple]],
                      queued: bool = False) -> None:
        """Book the scheduler's picks on their slots and add them to each executor's
        LaunchTasks (a stage's closure only the first time the executor sees it)."""
        for td in launched:
            ex = self.executors[td.executor_id]
            if queued:
                ex.slots.queued(td.slot, td.task_id)
            else:
                ex.slots.started(td.slot, td.task_id)
                ex.idle_since = None
            self._slot_of[td.task_id] = td.slot
            first = td.stage_key not in ex.seen_stages
            if first:
                ex.seen_stages.add(td.stage_key)
            launches.setdefault(td.executor_id, []).append(
                (td.task_id, td.slot, td.stage_key, td.blob if first else None,
                 td.meta if first else None, td.task_bytes))

    def barrier_request(self, msg: RequestToSync, context: RpcCallContext) -> None:
        """A barrier task's RequestToSync, believed only from the executor it runs on."""
        from ember.errors import SparkException
        eid = next((e.executor_id for e in self.executors.values()
                    if e.address == context.sender_address), None)
        if eid is not None and not self.driver_endpoint.speaks_for(eid, context.sender):
            eid = None      # trust by channel: only that executor's own connection
        if eid is None:
            context.send_failure(SparkException(
                f"RequestToSync from {context.sender_address}, which is not a registered "
                "executor"))
            return
        self.scheduler.barrier_request(
            eid, msg, context.reply, lambda error: context.send_failure(SparkException(error)))

    def max_num_concurrent_tasks(self) -> int:
        return sum(e.cores for e in list(self.executors.values()))

    def kill_executors(self, ids: list[str]) -> bool:
        """Ask the master to kill these executors (exclude-on-failure); their removal
        reaches the driver as ExecutorRemoved with the master's reason."""
        return self.client is not None and self.client.kill_executors(ids)

    def kill_executors_on_host(self, host: str) -> bool:
        ids = [e.executor_id for e in list(self.executors.values()) if e.host == host]
        return bool(ids) and self.kill_executors(ids)

    def kill_task(self, task_id: int, executor_id: str, slot: int, reason: str) -> None:
        data = self.executors.get(executor_id)
        if data is not None:
            data.ref.send(KillTask(task_id, executor_id, True, reason))

    def before_cache_build(self) -> None:
        """Each executor replaces its busy task processes that hold no memory block
        (TaskProcessPool.recycle_idle); sent before the job's tasks, so it comes first."""
        held = self.runtime.block_manager_master.slots_holding_memory()
        for data in list(self.executors.values()):
            data.ref.send(RecycleTaskProcesses(sorted(held.get(data.executor_id, ()))))

    def unpersist_rdd(self, rdd_id: int) -> None:
        for data in list(self.executors.values()):
            data.ref.send(RemoveRdd(rdd_id))

    def unpersist_broadcast(self, bid: int) -> None:
        for data in list(self.executors.values()):
            data.ref.send(RemoveBroadcast(bid))

    def remove_shuffle(self, shuffle_id: int) -> None:
        for data in list(self.executors.values()):
            data.ref.send(RemoveShuffle(shuffle_id))

    def forget_stage(self, stage_id: int) -> None:
        """Each executor that has the stage's closure is told in its next launch message (at
        the latest FORGET_FLUSH_S later, in a RemoveStage): a message now would wake every
        executor at a job's end, between its last task and the caller getting the result."""
        pending = False
        for data in self.executors.values():
            if any(k[0] == stage_id for k in data.seen_stages):
                data.seen_stages = {k for k in data.seen_stages if k[0] != stage_id}
                data.forgotten.append(stage_id)
                pending = True
        if pending and self._forget_flush is None:
            self._forget_flush = self.rpc_env.schedule(FORGET_FLUSH_S, self._flush_forgotten)

    def _flush_forgotten(self) -> None:
        self._forget_flush = None
        for data in list(self.executors.values()):
            self._send_forgotten(data)

    @staticmethod
    def _send_forgotten(data: ExecutorData) -> None:
        for stage_id in data.forgotten:
            data.ref.send(RemoveStage(stage_id))
        data.forgotten.clear()
