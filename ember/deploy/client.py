"""The cluster-mode submission client: Spark's ClientApp (RPC gateway), REST gateway, polling.

Why both gateways behind one interface: `ember submit` must work the way spark-submit does
against either the master's RPC port (legacy `ClientApp`: RequestSubmitDriver to every
master) or its REST port (RestSubmissionClient), fall back from REST to RPC when REST cannot
connect, and then do the same things whichever carried the submission: report the driver's
state with `reportDriverStatus`'s exit rules, kill it, and (beyond Spark) stream its log.

Exit codes follow Spark: -1 (255) when the master does not know the driver or the driver
has an exception, 0 once it is RUNNING unless spark.standalone.submit.waitAppCompletion is
true; waiting, a FAILED/ERROR/KILLED end is non-zero (1).
"""
from __future__ import annotations

import base64
import logging
import sys
import time
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, TextIO, TypeVar

from ember import config
from ember.deploy.messages import (
    DriverDescription, DriverLogResponse, DriverStatusResponse, RequestDriverLog,
    NOT_RECORDED_PREFIX, RequestDriverStatus, RequestKillDriver, RequestSubmitDriver,
    UploadAppResource,
)
from ember.deploy.upload_urls import sha256_hex
from ember.deploy.submission import AppSpec, SubmitError, driver_description

log = logging.getLogger("ember.deploy.Client")

FINAL_STATES = {"FINISHED", "FAILED", "ERROR", "KILLED"}
NOT_ALIVE_PREFIX = "Current state is not alive"
EXIT_NOT_FOUND = 255   # Spark's System.exit(-1)
# How long a submission that no worker has taken yet is polled before the client leaves it
# to the master (Spark's REST client polls 10 times, 1 s apart).
SUBMITTED_PATIENCE_S = 10.0


@dataclass(frozen=True)
class DriverStatus:
    found: bool
    state: Optional[str] = None
    worker_id: Optional[str] = None
    worker_host_port: Optional[str] = None
    exception: Optional[str] = None
    exit_status: Optional[int] = None
    server_spark_version: Optional[str] = None


def status_lines(driver_id: str, st: DriverStatus) -> list[str]:
    """The readable report of a found driver (ClientApp's lines). A worker is named only
    while the driver runs there: an ended driver has left its worker."""
    lines = [f"State of {driver_id} is {st.state}"]
    if st.state == "RUNNING" and st.worker_id and st.worker_host_port:
        lines.append(f"Driver running on {st.worker_host_port} ({st.worker_id})")
    return lines


def status_response_json(driver_id: str, st: DriverStatus) -> str:
    """The SubmissionStatusResponse block spark-submit --status logs (RestSubmissionClient's
    handleRestResponse), in Spark's Jackson layout, whichever gateway answered: tools such as
    Airflow's SparkSubmitHook read the `"driverState" : "X",` line of it."""
    from ember.version import SPARK_VERSION
    from ember.deploy.rest.protocol import SubmissionStatusResponse, to_json
    return "Server responded with SubmissionStatusResponse:\n" + to_json(
        SubmissionStatusResponse(
            message=(f"Exception from the cluster:\n{st.exception}"
                     if st.exception is not None else None),
            serverSparkVersion=st.server_spark_version or SPARK_VERSION, success=st.found,
            submissionId=driver_id, driverState=st.state, workerId=st.worker_id,
            workerHostPort=st.worker_host_port))


def kill_response_json(driver_id: str, ok: bool, message: str) -> str:
    """The KillSubmissionResponse block spark-submit --kill logs, whichever gateway
    answered."""
    from ember.version import SPARK_VERSION
    from ember.deploy.rest.protocol import KillSubmissionResponse, to_json
    return "Server responded with KillSubmissionResponse:\n" + to_json(
        KillSubmissionResponse(message=message,
                               serverSparkVersion=SPARK_VERSION,
                               success=ok, submissionId=driver_id))


class Gateway(Protocol):
    """What the CLI needs from a master, whichever port it speaks on."""
    url: str

    def upload(self, name: str, data: bytes) -> str: ...
    def submit(self, conf: Mapping[str, str], app: AppSpec, resource_url: str,
               environment: Mapping[str, str]) -> str: ...
    def status(self, driver_id: str) -> DriverStatus: ...
    def kill(self, driver_id: str) -> tuple[bool, str]: ...
    def log(self, driver_id: str, log_type: str, offset: int,
            max_bytes: int) -> DriverLogResponse: ...
    def close(self) -> None: ...


class RpcGateway:
    """Spark's legacy `ClientApp`: an RpcEnv "driverClient" asking the "Master" endpoint of
    every master in the URL; standby masters' answers are ignored. Beyond Spark: while no
    master answers as the leader (a failover is under way: standbys refuse with "Current
    state is not alive", the old leader does not answer), the question is asked again, for
    up to spark.rpc.askTimeout (10 s); an ask that timed out is never repeated (the master
    may have acted on it), so a submission is never made twice."""

    def __init__(self, master: str, conf: Mapping[str, str]) -> None:
        from ember.deploy.app_client import parse_master_urls
        from ember.rpc import RpcEnv
        self.url = master
        rpc_conf = {k: v for k, v in conf.items()
                    if k.startswith(("spark.authenticate", "spark.rpc.", "spark.port.",
                                     "spark.network.", "spark.ember.rpc.",
                                     "spark.ember.network."))}
        rpc_conf.setdefault("spark.rpc.askTimeout", "10s")   # ClientApp's default
        self.env = RpcEnv.create("driverClient", "127.0.0.1", 0, rpc_conf, client_mode=True)
        self.masters = [self.env.endpoint_ref(a, "Master") for a in parse_master_urls(master)]
        self.active: Any = None
        self.leader_wait = config.read(rpc_conf, "spark.rpc.askTimeout")

    def _ask_all(self, msg: Any, accept: Callable[[Any], bool],
                 sleep: Callable[[float], None] = time.sleep) -> Any:
        """Ask every master (the active one only, once known); the first answer `accept`s,
        else the last answer; SubmitError when none could be reached. Rounds in which every
        master refused as not alive or could not be reached are repeated (see the class)."""
        from ember.rpc import RpcTimeoutError
        deadline, delay = time.monotonic() + self.leader_wait, 0.1
        while True:
            refs = [self.active] if self.active is not None else self.masters
            futures = {ref.ask(msg): ref for ref in refs}
            wait_futures(list(futures))
            answers, errors, timed_out = [], [], False
            for fut, ref in futures.items():
                try:
                    answers.append((ref, fut.result()))
                except Exception as e:
                    timed_out = timed_out or isinstance(e, (RpcTimeoutError, TimeoutError))
                    errors.append(f"{ref.address.to_spark_url()}: {e}")
            for ref, answer in answers:
                if accept(answer):
                    self.active = ref
                    return answer
            self.active = None   # the leader we knew is gone or no longer leads
            waiting = all(_worth_retrying(a) for _, a in answers)
            if timed_out or not waiting or time.monotonic() + delay > deadline:
                break
            sleep(delay)
            delay = min(delay * 2, 1.0)
        if answers:
            return answers[-1][1]
        raise SubmitError("No master is available (" + "; ".join(errors) + ")")

    def upload(self, name: str, data: bytes) -> str:
        resp = self._ask_all(UploadAppResource(name, data, sha256_hex(data)),
                             lambda r: r.success)
        if not resp.success:
            raise SubmitError(f"Upload of {name} refused: {resp.message}")
        return resp.url

    def submit(self, conf: Mapping[str, str], app: AppSpec, resource_url: str,
               environment: Mapping[str, str]) -> str:
        desc: DriverDescription = driver_description(conf, app, resource_url, environment)
        resp = self._ask_all(RequestSubmitDriver(desc), lambda r: r.success)
        print(resp.message, file=sys.stderr)
        if not resp.success:
            raise SubmitError(resp.message)
        return resp.driverId

    def status(self, driver_id: str) -> DriverStatus:
        r: DriverStatusResponse = self._ask_all(
            RequestDriverStatus(driver_id),
            lambda r: not (r.exception or "").startswith(NOT_ALIVE_PREFIX))
        if not r.found and (r.exception or "").startswith(NOT_ALIVE_PREFIX):
            raise SubmitError("No master is available: " + r.exception)
        return DriverStatus(r.found, r.state.name if r.state else None, r.workerId,
                            r.workerHostPort, r.exception, r.exitStatus)

    def kill(self, driver_id: str) -> tuple[bool, str]:
        r = self._ask_all(RequestKillDriver(driver_id),
                          lambda r: not r.message.startswith(NOT_ALIVE_PREFIX))
        return r.success, r.message

    def log(self, driver_id: str, log_type: str, offset: int,
            max_bytes: int) -> DriverLogResponse:
        return self._ask_all(RequestDriverLog(driver_id, log_type, offset, max_bytes),
                             lambda r: r.found)

    def close(self) -> None:
        self.env.shutdown()


def _worth_retrying(answer: Any) -> bool:
    """A standby's (or a recovering master's) refusal, "Current state is not alive: ...", or
    a leader that could not record the request and so did nothing with it."""
    text = getattr(answer, "message", None) or getattr(answer, "exception", None) or ""
    return isinstance(text, str) and text.startswith((NOT_ALIVE_PREFIX, NOT_RECORDED_PREFIX))


class RestGateway:
    """Spark's RestSubmissionClient path, plus Ember's upload and log endpoints."""

    def __init__(self, master: str, conf: Mapping[str, str]) -> None:
        from ember.deploy.rest.client import RestSubmissionClient, bearer_token_source
        from ember.web.security import client_ssl_context
        self.url = master
        try:
            tls = client_ssl_context(conf, "standalone")
        except ValueError as e:
            raise SubmitError(str(e)) from None
        self._client = RestSubmissionClient(master, token=bearer_token_source(conf),
                                            ssl_context=tls)

    def _call(self, method: str, *args: Any) -> dict:
        """One REST exchange; a protocol or connection failure becomes a one-line
        SubmitError (the CLI prints it, never a traceback)."""
        from ember.deploy.rest.protocol import SubmitRestProtocolException
        try:
            return getattr(self._client, method)(*args).body
        except SubmitRestProtocolException as e:
            raise SubmitError(f"{self.url}: {e}") from None

    def upload(self, name: str, data: bytes) -> str:
        body = self._call("upload", name, data)
        if not body.get("success"):
            raise SubmitError(f"Upload of {name} refused: {body.get('message', '')}")
        return body["resourceUrl"]

    def submit(self, conf: Mapping[str, str], app: AppSpec, resource_url: str,
               environment: Mapping[str, str]) -> str:
        body = self._call("create_submission", resource_url, app.main, list(app.args),
                          dict(conf), dict(environment))
        message = body.get("message", "")
        if message:
            print(message, file=sys.stderr)
        if not body.get("success") or not body.get("submissionId"):
            raise SubmitError(message or "The master refused the submission")
        return body["submissionId"]

    def status(self, driver_id: str) -> DriverStatus:
        body = self._call("request_submission_status", driver_id)
        if body.get("action") == "ErrorResponse":
            raise SubmitError(body.get("message", "Error response from the master"))
        exception = None
        message = body.get("message") or ""
        if message.startswith("Exception from the cluster:"):
            exception = message.split("\n", 1)[1] if "\n" in message else message
        return DriverStatus(bool(body.get("success")), body.get("driverState"),
                            body.get("workerId"), body.get("workerHostPort"), exception,
                            body.get("exitStatus"), body.get("serverSparkVersion"))

    def kill(self, driver_id: str) -> tuple[bool, str]:
        body = self._call("kill_submission", driver_id)
        if body.get("action") != "KillSubmissionResponse":
            raise SubmitError(body.get("message", "Error response from the master"))
        return bool(body.get("success")), body.get("message", "")

    def log(self, driver_id: str, log_type: str, offset: int,
            max_bytes: int) -> DriverLogResponse:
        body = self._call("driver_log", driver_id, log_type, offset, max_bytes)
        state = body.get("driverState")
        from ember.deploy.messages import DriverState
        return DriverLogResponse(
            bool(body.get("success")), base64.b64decode(body.get("data", "")),
            int(body.get("offset", 0)), int(body.get("nextOffset", 0)),
            int(body.get("totalLength", 0)), DriverState[state] if state else None,
            body.get("exitStatus"), body.get("message", ""))

    def close(self) -> None:
        pass


def open_gateway(master: str, conf: Mapping[str, str], out: TextIO = sys.stderr) -> Gateway:
    """REST when spark.master.rest.enabled=true (the client's setting, default false, as in
    Spark), falling back to the RPC gateway when the REST server cannot be reached."""
    # SparkSubmit reads it with its own default, false: REST only when the client asks
    if config.read(conf, "spark.master.rest.enabled", False):
        gateway = RestGateway(master, conf)
        try:
            gateway._call("readyz")
            return gateway
        except SubmitError:   # nothing answered, or something that does not speak HTTP
            print(f"Master endpoint {master} was not a REST server. Falling back to legacy "
                  "submission gateway instead.", file=out)
    return RpcGateway(master, conf)


T = TypeVar("T")


def rest_first_urls(master: str, conf: Mapping[str, str]) -> list[tuple[str, bool]]:
    """Where `--status` / `--kill` look for the REST gateway before the RPC one, in order,
    each with whether its answer is final.

    Spark's spark-submit sends both to the master URL as given (its REST port, e.g.
    `spark://h:6066`, the URL Airflow's connections carry). A URL naming the RPC port
    (`spark://h:7077`) is first tried on each host's REST port (spark.master.rest.port,
    default 6066), so that polling it does not knock on the RPC port (an authenticating
    master logs every such HTTP request as a failed handshake); a derived address may be
    another process, so its "not found" or failed kill is not believed and the URL as
    given, then the RPC gateway, are asked as well."""
    from ember.deploy.rest.server import REST_PORT
    hosts = [hp.strip() for hp in master[len("spark://"):].split(",") if hp.strip()]
    given = [(master, True)]
    try:
        port = config.read(conf, REST_PORT)
    except ValueError:
        return given
    derived = [f"{hp.rsplit(':', 1)[0]}:{port}" for hp in hosts]
    if port <= 0 or derived == hosts:
        return given
    return [("spark://" + ",".join(derived), False)] + given


def ask_rest_then_rpc(master: str, conf: Mapping[str, str], ask: Callable[[Gateway], T],
                      final: Callable[[T], bool]) -> T:
    """SparkSubmit's kill/requestStatus (RestSubmissionClient for every spark:// master),
    falling back to the RPC gateway when no REST server answers, as submissions do."""
    for url, trusted in rest_first_urls(master, conf):
        try:
            answer = ask(RestGateway(url, conf))
        except SubmitError as e:   # not a REST server, not reachable, or refused us
            log.debug("REST gateway %s did not answer: %s", url, e)
            continue
        if trusted or final(answer):
            return answer
    gateway = RpcGateway(master, conf)
    try:
        return ask(gateway)
    finally:
        gateway.close()


def report_driver_status(gateway: Gateway, driver_id: str, wait_app_completion: bool,
                         out: TextIO = sys.stderr,
                         sleep: Callable[[float], None] = time.sleep) -> int:
    """Spark's ClientApp.reportDriverStatus, polling from the start instead of after 5 s and
    then every 10 s: quick while the driver is being placed, then every second."""
    delay, last, started = 0.02, None, time.monotonic()
    while True:
        st = gateway.status(driver_id)
        if not st.found:
            print(f"ERROR: Cluster master did not recognize {driver_id}", file=out)
            return EXIT_NOT_FOUND
        if (st.state, st.worker_id) != last:
            last = (st.state, st.worker_id)
            for line in status_lines(driver_id, st):
                print(line, file=out)
        if st.exception:
            print(f"Exception from cluster was: {st.exception}", file=out)
            return EXIT_NOT_FOUND
        if st.state in FINAL_STATES:
            print(f"State of driver {driver_id} is {st.state}, exiting spark-submit.", file=out)
            return 0 if st.state == "FINISHED" or not wait_app_completion else 1
        if not wait_app_completion and (
                st.state != "SUBMITTED" or time.monotonic() - started > SUBMITTED_PATIENCE_S):
            print("spark-submit not configured to wait for completion,  exiting spark-submit.",
                  file=out)
            return 0
        sleep(delay)
        delay = min(delay * 2, 1.0)


def follow_log(gateway: Gateway, driver_id: str, log_type: str, follow: bool,
               sink: Any, sleep: Callable[[float], None] = time.sleep) -> int:
    """Copy a driver's log to `sink` (a binary stream); with `follow`, keep reading until the
    driver has ended and everything it wrote is out, then return its exit code."""
    offset, delay = 0, 0.05
    while True:
        page = gateway.log(driver_id, log_type, offset, 1 << 20)
        if page.data:
            sink.write(page.data)
            sink.flush()
            offset = page.nextOffset
            delay = 0.05
        state = page.state.name if page.state is not None else None
        if not page.found:
            if state is None and "not found" in page.message:
                raise SubmitError(page.message)
            if not follow or state in FINAL_STATES:
                if state in FINAL_STATES:
                    return exit_code_of(state, page.exitStatus)
                raise SubmitError(page.message)
        elif page.nextOffset >= page.totalLength and not page.data:
            if not follow:
                return 0
            if state in FINAL_STATES:
                return exit_code_of(state, page.exitStatus)
        if page.data and page.nextOffset < page.totalLength:
            continue
        sleep(delay)
        delay = min(delay * 2, 0.5)


def exit_code_of(state: Optional[str], exit_status: Optional[int]) -> int:
    """The exit code `--follow` ends with: the driver's own, else one for its final state."""
    if exit_status is not None:
        return exit_status & 0xFF
    return {"FINISHED": 0, "KILLED": 143}.get(state or "", 1)
