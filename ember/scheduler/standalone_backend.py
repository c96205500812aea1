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
from typing import Any

from ember.deploy.app_client import parse_master_urls, start_app_client
from ember.deploy.messages import (ApplicationDescription, Command, FetchBroadcast, FetchFile,
                                   KillTask, LaunchTask, RegisteredExecutor,
                                   ExecutorHeartbeat, RegisterExecutor,
                                   RegisterExecutorFailed, RemoveBroadcast,
                                   RemoveExecutor, RemoveRdd, RemoveStage,
                                   ResourceProfile, RetrieveSparkAppConfig, SparkAppConfig,
                                   StatusUpdate, StopExecutor)
from ember.rpc import RpcAddress, RpcCallContext, RpcEndpoint, RpcEnv
from ember.scheduler.backend import SchedulerBackend, WorkerOffer
from ember.scheduler.event_loop import RpcLoop
from ember.scheduler.listener import ExecutorAdded, ExecutorRemoved

log = logging.getLogger("ember.scheduler.standalone")

ENDPOINT_NAME = "CoarseGrainedScheduler"


@dataclass
class ExecutorData:
    executor_id: str
    ref: Any
    address: RpcAddress
    host: str
    cores: int
    free_slots: set[int] = field(default_factory=set)
    seen_stages: set = field(default_factory=set)


class DriverEndpoint(RpcEndpoint):
    """Runs on the RPC loop, which is also the driver's scheduler loop on a cluster."""

    def __init__(self, backend: "StandaloneSchedulerBackend") -> None:
        self.backend = backend

    def receive_and_reply(self, msg: Any, context: RpcCallContext) -> None:
        b = self.backend
        if isinstance(msg, RegisterExecutor):
            b.register_executor(msg, context)
        elif isinstance(msg, ExecutorHeartbeat):
            context.reply(msg.executorId in b.executors)
        elif isinstance(msg, RetrieveSparkAppConfig):
            context.reply(SparkAppConfig(sorted(b.app_conf().items())))
        elif isinstance(msg, FetchBroadcast):
            self._reply_file(context, os.path.join(b.sc._broadcast_dir, f"broadcast_{msg.id}"))
        elif isinstance(msg, FetchFile):
            name = os.path.basename(msg.name)
            self._reply_file(context, os.path.join(b.sc._files_dir, name))
        else:
            context.send_failure(ValueError(f"Unsupported message {type(msg).__name__}"))

    def _reply_file(self, context: RpcCallContext, path: str) -> None:
        def read() -> None:
            try:
                with open(path, "rb") as f:
                    data = f.read()
            except OSError as e:
                self.rpc_env.call_soon(context.send_failure, FileNotFoundError(str(e)))
                return
            self.rpc_env.call_soon(context.reply, data)
        self.rpc_env.run_in_executor(read)

    def receive(self, msg: Any, sender: RpcAddress) -> None:
        b = self.backend
        if isinstance(msg, StatusUpdate):
            b.status_update(msg)
        elif isinstance(msg, RemoveExecutor):
            b.remove_executor(msg.executorId, msg.reason, False)
        else:
            log.warning("Unexpected message %r from %s", type(msg).__name__, sender)

    def on_disconnected(self, remote: RpcAddress) -> None:
        self.backend.address_disconnected(remote)


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
    def __init__(self, sc: Any, scheduler: Any, master: str) -> None:
        self.sc = sc
        self.scheduler = scheduler
        self.masters = parse_master_urls(master)
        self.conf = sc._conf
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
        port = int(self.conf.get("spark.driver.port") or 0)
        rpc_conf = {k: v for k, v in self.conf.getAll()
                    if k.startswith(("spark.authenticate", "spark.rpc.", "spark.port."))}
        self.rpc_env = RpcEnv.create("sparkDriver", bind, port, rpc_conf, advertise=host)
        self.loop = RpcLoop(self.rpc_env)
        self.driver_endpoint = DriverEndpoint(self)
        self.rpc_env.setup_endpoint(ENDPOINT_NAME, self.driver_endpoint)
        self.client: Any = None

    # --- configuration shared with executors --------------------------------------------
    def app_conf(self) -> dict[str, str]:
        conf = dict(self.conf.getAll())
        conf["spark.app.id"] = self.app_id or ""
        conf.pop("spark.authenticate.secret", None)   # executors get it from the worker env
        return conf

    def _app_description(self) -> ApplicationDescription:
        from ember.config import parse_memory_mb
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
        cores = self.conf.get("spark.executor.cores")
        memory = parse_memory_mb(self.conf.get("spark.executor.memory") or "1g")
        max_cores = self.conf.get("spark.cores.max")
        initial = self.conf.get("spark.dynamicAllocation.initialExecutors")
        event_log = self.sc._event_log
        return ApplicationDescription(
            self.sc.appName, int(max_cores) if max_cores else None, command,
            self.sc.uiWebUrl or "",
            ResourceProfile.of(cores=int(cores) if cores else None, memoryMb=memory),
            "file:" + event_log.log_dir if event_log is not None else None, None,
            int(initial) if initial else None, self.sc.sparkUser())

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
        ratio = float(self.conf.get("spark.scheduler.minRegisteredResourcesRatio") or 0.0)
        wait = float((self.conf.get("spark.scheduler.maxRegisteredResourcesWaitingTime")
                      or "30s").rstrip("s"))
        max_cores = self.conf.get("spark.cores.max")
        if ratio > 0 and max_cores:
            deadline = time.monotonic() + wait
            with self._registered:
                self._registered.wait_for(
                    lambda: self.total_cores >= ratio * int(max_cores)
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
            threading.Thread(target=self.sc.stop, daemon=True).start()

    def executor_added(self, exec_id: str, worker_id: str, host_port: str, cores: int,
                       memory: int) -> None:
        pass                        # it counts once the executor registers with us

    def executor_removed(self, exec_id: str, message: str, exit_status: int | None,
                         worker_host: str | None) -> None:
        caused_by_app = exit_status is not None and exit_status != 0 and worker_host is None
        self.loop.post(self.remove_executor, exec_id, message, caused_by_app)

    def worker_removed(self, worker_id: str, host: str, message: str) -> None:
        pass

    # --- scheduler loop -----------------------------------------------------------------
    def register_executor(self, msg: RegisterExecutor, context: RpcCallContext) -> None:
        eid = msg.executorId
        if eid in self.executors:
            context.send_failure(ValueError(f"Duplicate executor ID: {eid}"))
            msg.executorRef.send(RegisterExecutorFailed(f"Duplicate executor ID: {eid}"))
            return
        addr = msg.executorRef.address
        data = ExecutorData(eid, msg.executorRef, addr, msg.hostname, msg.cores,
                            set(range(msg.cores)))
        self.executors[eid] = data
        with self._registered:
            self.total_cores += msg.cores
            self._registered.notify_all()
        log.info("Registered executor %s (%s) with ID %s, ResourceProfileId %d",
                 msg.executorRef, addr.hostPort, eid, msg.resourceProfileId)
        self.scheduler.executor_added(eid)
        self.sc._bus.post(ExecutorAdded(eid, msg.hostname, msg.cores,
                                        log_urls=dict(msg.logUrls)))
        self.rpc_env.call_soon(context.reply, True)
        msg.executorRef.send(RegisteredExecutor())
        self.revive_offers()

    def remove_executor(self, exec_id: str, reason: str, caused_by_app: bool) -> None:
        data = self.executors.pop(exec_id, None)
        if data is None:
            return
        with self._registered:
            self.total_cores -= data.cores
        log.error("Lost executor %s on %s: %s", exec_id, data.host, reason)
        self.sc._bus.post(ExecutorRemoved(exec_id, reason))
        self.scheduler.executor_lost(exec_id, reason, caused_by_app)
        self.revive_offers()

    def address_disconnected(self, remote: RpcAddress) -> None:
        if self._stopping:
            return
        for eid, data in list(self.executors.items()):
            if data.address == remote:
                self.remove_executor(eid, "Remote RPC client disassociated. Likely due to "
                                          "containers exceeding thresholds, or network "
                                          "issues. Check driver logs for WARN messages.",
                                     False)

    def status_update(self, msg: StatusUpdate) -> None:
        data = self.executors.get(msg.executorId)
        payload, accum, metrics, blocks = pickle.loads(msg.data)
        slot = self._slot_of.pop(msg.taskId, None)
        self.scheduler.status_update(msg.taskId, msg.state, payload, accum, metrics, blocks)
        if data is not None and slot is not None:
            data.free_slots.add(slot)
        self.revive_offers()

    def revive_offers(self) -> None:
        sched = self.scheduler
        with sched.lock:
            offers = [WorkerOffer(e.executor_id, e.host, s)
                      for e in self.executors.values() for s in sorted(e.free_slots)]
            if not offers:
                return
            for td in sched.resource_offers(offers):
                ex = self.executors[td.executor_id]
                ex.free_slots.discard(td.slot)
                self._slot_of[td.task_id] = td.slot
                first = td.stage_key not in ex.seen_stages
                if first:
                    ex.seen_stages.add(td.stage_key)
                ex.ref.send(LaunchTask(pickle.dumps(
                    (td.task_id, td.slot, td.stage_key, td.blob if first else None,
                     td.meta if first else None, td.task_bytes), protocol=5)))

    def kill_task(self, task_id: int, executor_id: str, slot: int, reason: str) -> None:
        data = self.executors.get(executor_id)
        if data is not None:
            data.ref.send(KillTask(task_id, executor_id, True, reason))

    def unpersist_rdd(self, rdd_id: int) -> None:
        for data in list(self.executors.values()):
            data.ref.send(RemoveRdd(rdd_id))

    def unpersist_broadcast(self, bid: int) -> None:
        for data in list(self.executors.values()):
            data.ref.send(RemoveBroadcast(bid))

    def forget_stage(self, stage_id: int) -> None:
        for data in self.executors.values():
            if any(k[0] == stage_id for k in data.seen_stages):
                data.seen_stages = {k for k in data.seen_stages if k[0] != stage_id}
                data.ref.send(RemoveStage(stage_id))
