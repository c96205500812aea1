"""DriverRunner: runs one cluster-mode driver for the worker and supervises it (Spark §4.4).

Why a thread per runner (like ``ExecutorRunner``): a runner downloads the app's resources and
then waits for the driver process for its whole life, restarting it when supervised; none of
that may happen on the worker's RpcEnv loop. The thread never touches worker state: it reports
the one final ``DriverStateChanged`` through ``report`` and the worker hops it onto its loop.

What a run looks like:
1. driver dir ``<workDir>/<driverId>/``;
2. the app resource (``jarUrl``) and every URL in ``spark.submit.pyFiles`` / ``spark.files``
   / ``spark.archives`` are fetched into it (``fetch_resource``: ``ember-upload://`` from the
   master through the worker's ``fetch_upload`` callable, ``http(s)://``, ``file:`` or an
   absolute path, any other URL - ``s3a://`` ... - through fsspec with the driver's
   ``spark.hadoop.*`` keys), and those properties are rewritten to the local copies (an
   archive keeps its ``#alias``);
3. ``[python, "-m", "ember.deploy.driver_wrapper", WORKER_URL, USER_JAR, MAIN, *args]`` runs
   in the driver dir with the Spark properties (the ``-Dk=v`` java opts) in
   ``EMBER_SPARK_CONF``; stdout is appended to ``<driverDir>/stdout``, stderr to
   ``<driverDir>/stderr`` after Spark's ``Launch Command: ...`` header;
4. supervised drivers are relaunched on a non-zero exit with Spark's backoff (1, 2, 4 ... s,
   back to 1 s after a run of more than 5 s) - but, unlike Spark, at most
   ``spark.driver.supervise.maxRetries`` times within ``spark.driver.supervise.window``, so a
   driver that can never start does not loop for ever; the decision is the pure
   ``Supervisor`` below, tested without processes.

The final state: exit 0 -> FINISHED, killed -> KILLED, other exit -> FAILED (with the
``Type: message`` and traceback the driver wrapper leaves in ``driver-exception.json``), any
error of the runner itself (dir, download, start) -> ERROR with its text.
"""
from __future__ import annotations

import atexit
import collections
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence
from urllib.parse import unquote, urlparse

from ember import config, fs
from ember.config import parse_memory_mb
from ember.deploy.upload_urls import SCHEME as UPLOAD_SCHEME
from ember.deploy.upload_urls import UploadError, check_name, parse_upload_url
from ember.util.units import duration_to_string
from ember.deploy.messages import (AppResourceData, DriverDescription, DriverRunnerSummary,
                                   DriverState, DriverStateChanged, ResourceInformation)
from ember.deploy.properties import parse_java_opts
from ember.deploy.resources import write_resources_file
from ember.deploy.worker.executor_runner import HEADER_RULE, GroupKiller, keep_host_env
from ember.deploy.worker.memory_watchdog import (MemoryWatchdog, exceeded_message,
                                                  memory_limit_mb)

log = logging.getLogger("ember.deploy.worker.DriverRunner")

__all__ = ["DriverRunner", "DriverLaunchError", "Supervisor", "SupervisePolicy", "Decision",
           "final_state", "supervise_policy",
           "fetch_resource", "substitute_driver_variables", "driver_command",
           "launch_header", "build_driver_environment", "read_driver_exception",
           "kill_all_drivers", "WRAPPER_MODULE", "DRIVER_WRAPPER_CLASS", "EXCEPTION_FILE"]

DRIVER_WRAPPER_CLASS = "org.apache.spark.deploy.worker.DriverWrapper"
WRAPPER_MODULE = "ember.deploy.driver_wrapper"
EXCEPTION_FILE = "driver-exception.json"
MAX_RETRIES_KEY = "spark.driver.supervise.maxRetries"
WINDOW_KEY = "spark.driver.supervise.window"
TERMINATE_TIMEOUT_KEY = "spark.worker.driverTerminateTimeout"
_RESOURCE_KEYS = ("spark.submit.pyFiles", "spark.files", "spark.archives")
# names of the runner's own files in the driver dir: a resource must not overwrite them
_RESERVED_NAMES = {"stdout", "stderr", EXCEPTION_FILE}
_SHA256 = re.compile(r"[0-9a-f]{64}")
_SECOND_WAIT = 10.0   # Spark waits this long again after destroyForcibly


class DriverLaunchError(OSError):
    """The runner could not prepare or start the driver; the message is the ERROR text."""


# ---------------------------------------------------------------------------------------------
# Supervision: pure decisions
# ---------------------------------------------------------------------------------------------

def final_state(exit_code: Optional[int], killed: bool) -> DriverState:
    """Spark's DriverRunner.prepareAndRunDriver: 0 -> FINISHED, killed -> KILLED, else FAILED."""
    if exit_code == 0:
        return DriverState.FINISHED
    return DriverState.KILLED if killed else DriverState.FAILED


@dataclass(frozen=True)
class SupervisePolicy:
    """How a driver is supervised. Defaults are Spark's (1 s first wait, a run of more than
    5 s counts as successful) plus Ember's retry limit (10 restarts within 1 h)."""
    supervise: bool
    max_retries: int = 10
    window: float = 3600.0
    initial_wait: float = 1.0
    successful_run: float = 5.0


@dataclass(frozen=True)
class Decision:
    """What to do after the driver process exited: relaunch after `wait` seconds, or stop
    (with `give_up` set to the FAILED reason when the retry limit was hit)."""
    relaunch: bool
    wait: float = 0.0
    give_up: Optional[str] = None


class Supervisor:
    """Spark's runCommandWithRetry loop as a state machine without processes or clock.

    ``after_exit`` is called once per exit with the run's duration and the current time;
    the backoff doubles per relaunch and resets after a successful-looking run, and
    restarts are counted in a sliding window for the retry limit."""

    def __init__(self, driver_id: str, policy: SupervisePolicy) -> None:
        self.driver_id = driver_id
        self.policy = policy
        self.wait = policy.initial_wait
        self.restarts: collections.deque[float] = collections.deque()

    def after_exit(self, exit_code: int, killed: bool, run_seconds: float,
                   now: float) -> Decision:
        p = self.policy
        if not (p.supervise and exit_code != 0 and not killed):
            return Decision(False)
        if run_seconds > p.successful_run:
            self.wait = p.initial_wait
        while self.restarts and self.restarts[0] <= now - p.window:
            self.restarts.popleft()
        if len(self.restarts) >= p.max_retries:
            return Decision(False, give_up=(
                f"Driver {self.driver_id} was restarted {len(self.restarts)} times within "
                f"{duration_to_string(p.window)} ({MAX_RETRIES_KEY}={p.max_retries}); giving up. "
                f"Last exit code: {exit_code}"))
        self.restarts.append(now)
        wait, self.wait = self.wait, self.wait * 2
        return Decision(True, wait)


def supervise_policy(supervise: bool, props: Mapping[str, str],
                     worker_conf: Mapping[str, str], initial_wait: float = 1.0
                     ) -> SupervisePolicy:
    """The retry limit from the driver's properties, else the worker's conf, else the
    defaults. ValueError names a bad key (the driver is then reported ERROR)."""
    conf = {**worker_conf, **{k: props[k] for k in (MAX_RETRIES_KEY, WINDOW_KEY)
                              if props.get(k) is not None}}

    def read(key: str, valid: Callable[[Any], bool], rule: str) -> Any:
        entry = config.REGISTRY[key]
        try:
            value = entry.read(conf)
        except ValueError:
            rule = f"should be {entry.type.expected}"
            value = None
        if value is None or not valid(value):
            raise ValueError(f"Invalid value for {key}: {conf[key]!r} ({rule})")
        return value
    retries = read(MAX_RETRIES_KEY, lambda n: n >= 0, "must not be negative")
    window = read(WINDOW_KEY, lambda w: w > 0, "must be positive")
    return SupervisePolicy(supervise, retries, window, initial_wait)


# ---------------------------------------------------------------------------------------------
# Resources
# ---------------------------------------------------------------------------------------------

def _local_name(name: str, what: str, url: str) -> str:
    try:
        check_name(name)
    except UploadError:
        raise DriverLaunchError(f"Cannot fetch {what} {url}: its name {name!r} is not a "
                                "plain file name") from None
    if name in _RESERVED_NAMES:
        raise DriverLaunchError(f"Cannot fetch {what} {url}: the name {name} is reserved for "
                                "the driver's logs")
    return name


def _expected_sha(fragment: str, url: str) -> Optional[str]:
    """The checksum a ``#sha256=<hex>`` fragment asks for (other fragments mean nothing)."""
    if not fragment.startswith("sha256="):
        return None
    sha = fragment[len("sha256="):].lower()
    if not _SHA256.fullmatch(sha):
        raise DriverLaunchError(f"Invalid sha256 fragment in {url}: expected 64 hex digits")
    return sha


def _check_sha(expected: Optional[str], actual: str, name: str, url: str) -> None:
    if expected is not None and expected != actual:
        raise DriverLaunchError(f"Checksum mismatch for {name} from {url}: expected sha256 "
                                f"{expected}, got {actual}")


def _write_verified(chunks: Iterable[bytes], dest: str, expected: Optional[str], name: str,
                    url: str) -> None:
    """Write the chunks to `dest` atomically, hashing them; nothing is left if the
    checksum differs (a later relaunch must not find a bad file in place)."""
    digest = hashlib.sha256()
    tmp = f"{dest}.part"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
        _check_sha(expected, digest.hexdigest(), name, url)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def fetch_resource(url: str, dest_dir: str,
                   fetch_upload: Optional[Callable[[str], AppResourceData]] = None, *,
                   what: str = "file", timeout: float = 60.0,
                   conf: Optional[Mapping[str, str]] = None) -> str:
    """Fetch `url` into `dest_dir` and return the local absolute path.

    ``ember-upload://<sha256>/<name>`` is asked of the master through `fetch_upload` and
    must hash to the URL's digest; ``http(s)://`` is downloaded; ``file:`` URLs and
    absolute paths are copied (directories too); any other URL (``s3a://``, ``gs://``, ...)
    is read through fsspec with the endpoint and keys of `conf`'s ``spark.hadoop.*`` (the
    driver's properties). A ``#sha256=<hex>`` fragment of a URL is verified.
    DriverLaunchError, in Spark's words where Spark has some."""
    dest_dir = os.path.abspath(dest_dir)
    if url.startswith(UPLOAD_SCHEME + "://"):
        try:
            sha, name = parse_upload_url(url)
        except UploadError as e:
            raise DriverLaunchError(str(e)) from None
        name = _local_name(name, what, url)
        if fetch_upload is None:
            raise DriverLaunchError(f"Cannot fetch {url}: no master to fetch it from")
        try:
            reply = fetch_upload(url)
        except Exception as e:
            raise DriverLaunchError(
                f"Can not find expected {what} {name} which should have been loaded in "
                f"{dest_dir} (fetching {url} from the master failed: {e})") from None
        if not reply.found:
            raise DriverLaunchError(
                f"Can not find expected {what} {name} which should have been loaded in "
                f"{dest_dir} (the master has no {url}: {reply.message})")
        _write_verified([bytes(reply.data)], os.path.join(dest_dir, name), sha, name, url)
        return os.path.join(dest_dir, name)

    parsed = urlparse(url)
    if parsed.scheme in ("http", "https"):
        name = _local_name(os.path.basename(unquote(parsed.path)), what, url)
        expected = _expected_sha(parsed.fragment, url)
        dest = os.path.join(dest_dir, name)
        try:
            with urllib.request.urlopen(parsed._replace(fragment="").geturl(),
                                        timeout=timeout) as r:
                _write_verified(iter(lambda: r.read(1 << 20), b""), dest, expected, name, url)
        except DriverLaunchError:
            raise
        except Exception as e:
            raise DriverLaunchError(
                f"Can not find expected {what} {name} which should have been loaded in "
                f"{dest_dir} (download of {url} failed: {e})") from None
        return dest

    if not fs.is_local(url):
        return _fetch_fsspec(parsed, url, dest_dir, what, conf or {})

    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise DriverLaunchError(f"Cannot fetch {url}: a file URL must name a local path")
        src, expected = unquote(parsed.path), _expected_sha(parsed.fragment, url)
    elif os.path.isabs(url):
        src, expected = url, None
    else:
        raise DriverLaunchError(f"Cannot fetch {what} {url}: unsupported URL (expected "
                                f"{UPLOAD_SCHEME}://, http(s)://, file:, another URL such as "
                                "s3a:// or an absolute path)")
    name = _local_name(os.path.basename(src.rstrip("/")), what, url)
    dest = os.path.join(dest_dir, name)
    if not os.path.exists(src):
        raise DriverLaunchError(f"Can not find expected {what} {name} which should have "
                                f"been loaded in {dest_dir} ({src} does not exist)")
    if os.path.realpath(src) == os.path.realpath(dest):
        return dest
    if os.path.isdir(src):
        if expected is not None:
            raise DriverLaunchError(f"Cannot verify the sha256 of {url}: it is a directory")
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(src, dest, symlinks=True)
        return dest
    with open(src, "rb") as f:
        _write_verified(iter(lambda: f.read(1 << 20), b""), dest, expected, name, url)
    return dest


def _fetch_fsspec(parsed: Any, url: str, dest_dir: str, what: str,
                  conf: Mapping[str, str]) -> str:
    name = _local_name(os.path.basename(unquote(parsed.path).rstrip("/")), what, url)
    expected = _expected_sha(parsed.fragment, url)
    dest = os.path.join(dest_dir, name)
    try:
        with fs.open_file(parsed._replace(fragment="").geturl(), "rb", conf) as f:
            _write_verified(iter(lambda: f.read(1 << 20), b""), dest, expected, name, url)
    except DriverLaunchError:
        raise
    except Exception as e:
        raise DriverLaunchError(
            f"Can not find expected {what} {name} which should have been loaded in "
            f"{dest_dir} (download of {url} failed: {type(e).__name__}: {e})") from None
    return dest


# ---------------------------------------------------------------------------------------------
# The command and its environment
# ---------------------------------------------------------------------------------------------

def substitute_driver_variables(arguments: Sequence[str], *, worker_url: str,
                                user_jar: str) -> list[str]:
    """Spark's DriverRunner substitution: whole-argument ``{{WORKER_URL}}``/``{{USER_JAR}}``."""
    values = {"{{WORKER_URL}}": worker_url, "{{USER_JAR}}": user_jar}
    return [values.get(a, a) for a in arguments]


def _check_main_class(desc: DriverDescription) -> None:
    """Only Spark's DriverWrapper main class is accepted: a description cannot start
    another program."""
    if desc.command.mainClass != DRIVER_WRAPPER_CLASS:
        raise DriverLaunchError(f"Invalid driver main class {desc.command.mainClass!r}: "
                                f"expected {DRIVER_WRAPPER_CLASS}")


def driver_command(desc: DriverDescription, arguments: Sequence[str],
                   python: Optional[str] = None) -> list[str]:
    """``[python, "-m", "ember.deploy.driver_wrapper", *arguments]``."""
    _check_main_class(desc)
    return [python or sys.executable, "-m", WRAPPER_MODULE, *[str(a) for a in arguments]]


def launch_header(cmd: Sequence[str]) -> str:
    """What each (re)launch appends to the driver's stderr file, as Spark writes it."""
    formatted = '"' + '" "'.join(cmd) + '"'
    return f"Launch Command: {formatted}\n{HEADER_RULE}\n\n"


def build_driver_environment(base_env: Mapping[str, str], command_env: Mapping[str, str],
                             spark_conf: Mapping[str, str], *, stdout_url: str,
                             stderr_url: str, auth_secret: Optional[str] = None
                             ) -> dict[str, str]:
    """The driver's environment: the worker's, the submitted ``Command.environment``, then
    the Spark properties as ``EMBER_SPARK_CONF`` (k=v lines, what SparkConf loads), the log
    URLs, PYTHONHASHSEED (0 unless the submitter chose one: executors hash like the driver)
    and the worker's RPC secret as _SPARK_AUTH_SECRET (never on a command line)."""
    env = {str(k): str(v) for k, v in base_env.items()}
    env.update({str(k): str(v) for k, v in command_env.items()})
    keep_host_env(env, base_env)
    env["EMBER_SPARK_CONF"] = "\n".join(f"{k}={v}" for k, v in spark_conf.items())
    env["SPARK_DRIVER_LOG_URL_STDOUT"] = stdout_url
    env["SPARK_DRIVER_LOG_URL_STDERR"] = stderr_url
    env["PYTHONHASHSEED"] = str(command_env.get("PYTHONHASHSEED", "0"))
    if auth_secret:
        env["_SPARK_AUTH_SECRET"] = auth_secret
    else:
        env.pop("_SPARK_AUTH_SECRET", None)
    return env


def read_driver_exception(driver_dir: str) -> Optional[str]:
    """``Type: message\\n<traceback>`` from the wrapper's driver-exception.json, if any."""
    try:
        with open(os.path.join(driver_dir, EXCEPTION_FILE), encoding="utf-8") as f:
            doc = json.load(f)
        text = f"{doc.get('type', 'Exception')}: {doc.get('message', '')}"
        tb = doc.get("traceback")
        return f"{text}\n{tb}" if tb else text
    except (OSError, ValueError, AttributeError):
        return None


# ---------------------------------------------------------------------------------------------
# The runner
# ---------------------------------------------------------------------------------------------

# Every runner whose driver may still be alive, so nothing outlives the worker's interpreter.
_LIVE: "weakref.WeakSet[DriverRunner]" = weakref.WeakSet()
_LIVE_LOCK = threading.Lock()


def kill_all_drivers(timeout: Optional[float] = None) -> None:
    """Kill every live driver of this process and wait for them (Spark's shutdown hook)."""
    with _LIVE_LOCK:
        runners = list(_LIVE)
    for r in runners:
        r.kill()
    for r in runners:
        r.join(timeout if timeout is not None else r.terminate_timeout + _SECOND_WAIT + 5)


atexit.register(kill_all_drivers)


class DriverRunner:
    """One cluster-mode driver on this worker (Spark's DriverRunner).

    ``start()`` returns at once; the runner thread prepares, runs and (if supervised)
    relaunches the driver, then reports exactly one ``DriverStateChanged`` through
    `report`. `fetch_upload` answers ``ember-upload://`` URLs (a blocking ask to the master,
    called on the runner thread). `initial_backoff` exists for tests only.
    """

    def __init__(self, driver_id: str, desc: DriverDescription, *, work_dir: str,
                 worker_url: str, host: str, web_ui_url: str,
                 report: Callable[[DriverStateChanged], None],
                 fetch_upload: Optional[Callable[[str], AppResourceData]] = None,
                 worker_conf: Optional[Mapping[str, str]] = None,
                 auth_secret: Optional[str] = None, attempt: int = 1,
                 resources: Optional[dict[str, ResourceInformation]] = None,
                 base_env: Optional[Mapping[str, str]] = None,
                 initial_backoff: float = 1.0) -> None:
        self.driver_id = driver_id
        self.driver_desc = desc
        self.attempt = attempt
        self.resources = dict(resources or {})
        self.work_dir = os.path.abspath(work_dir)
        self.driver_dir = os.path.join(self.work_dir, driver_id)
        self.worker_url = worker_url
        self.host = host
        self.web_ui_url = web_ui_url
        self.worker_conf = dict(worker_conf or {})
        self.terminate_timeout = config.read(self.worker_conf, TERMINATE_TIMEOUT_KEY)
        self.state = DriverState.SUBMITTED
        self.final_exception: Optional[str] = None
        self.exit_status: Optional[int] = None
        self._report = report
        self._fetch_upload = fetch_upload
        self._auth_secret = auth_secret
        self._base_env = base_env
        self._initial_backoff = initial_backoff
        self._lock = threading.Lock()
        self._killed = threading.Event()
        self._process: Optional[subprocess.Popen] = None
        self._group = GroupKiller(f"driver {self.driver_id}", self.terminate_timeout)
        self._thread: Optional[threading.Thread] = None
        self._done = threading.Event()
        self._memory_exceeded: Optional[str] = None

    # -- views ------------------------------------------------------------------------------

    @property
    def cores(self) -> int:
        return self.driver_desc.cores

    @property
    def memory(self) -> int:
        return self.driver_desc.mem

    @property
    def pid(self) -> Optional[int]:
        p = self._process
        return p.pid if p is not None else None

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def summary(self) -> DriverRunnerSummary:
        return DriverRunnerSummary(self.driver_id, self.driver_desc, dict(self.resources),
                                   self.state, self.final_exception)

    def log_url(self, log_type: str) -> str:
        return f"{self.web_ui_url}/logPage/?driverId={self.driver_id}&logType={log_type}"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Start the runner thread (everything else happens there)."""
        with _LIVE_LOCK:
            _LIVE.add(self)
        self.state = DriverState.RUNNING
        self._thread = threading.Thread(target=self._prepare_and_run,
                                        name=f"DriverRunner for {self.driver_id}", daemon=True)
        self._thread.start()

    def kill(self, fence: bool = False) -> None:
        """Spark's DriverRunner.kill: mark killed and terminate the driver's process group
        (SIGTERM, then SIGKILL after spark.worker.driverTerminateTimeout). Returns at once
        (safe on the worker's loop); the runner thread reports KILLED. `fence`: the master
        lease expired, a relaunch may start soon elsewhere: SIGKILL at once, no grace."""
        with self._lock:
            if fence:
                self._group.terminate_timeout = 0.0
            if self._killed.is_set() or self._done.is_set():
                return
            self._killed.set()
            if self._process is not None:   # else not running: the runner thread checks
                self._group.kill(self._process)

    def join(self, timeout: Optional[float] = None) -> bool:
        """Wait until the runner has reported its final state; True if it has."""
        return self._done.wait(timeout)

    # -- the runner thread -----------------------------------------------------------------

    def _prepare_and_run(self) -> None:
        state, exception = DriverState.ERROR, None
        try:
            cmd, env, policy = self._prepare()
            state, exception = self._run_with_retry(cmd, env, policy)
        except Exception as e:
            exception = str(e) if isinstance(e, DriverLaunchError) else f"{type(e).__name__}: {e}"
            log.error("Error running driver %s: %s", self.driver_id, exception,
                      exc_info=not isinstance(e, (OSError, ValueError)))
            state = DriverState.ERROR
            proc = self._process
            if proc is not None and proc.poll() is None:   # Spark: kill, then ERROR
                proc.kill()
                proc.wait()
        self.state, self.final_exception = state, exception
        with _LIVE_LOCK:
            _LIVE.discard(self)
        self._done.set()
        try:
            self._report(DriverStateChanged(self.driver_id, state, exception, self.exit_status,
                                            self.attempt))
        except Exception:
            log.exception("Cannot report %s of driver %s", state, self.driver_id)

    def _prepare(self) -> tuple[list[str], dict[str, str], SupervisePolicy]:
        """Driver dir, resources, command and environment (Spark's prepareAndRunDriver)."""
        if (not re.fullmatch(r"[A-Za-z0-9._-]+", self.driver_id)
                or self.driver_id in (".", "..")):
            raise DriverLaunchError(f"Failed to create directory {self.driver_dir} (invalid "
                                    f"driver id {self.driver_id!r})")
        try:
            os.makedirs(self.driver_dir, exist_ok=True)
        except OSError as e:
            raise DriverLaunchError(f"Failed to create directory {self.driver_dir}: "
                                    f"{e.strerror or e}") from None
        desc = self.driver_desc
        _check_main_class(desc)   # before fetching anything for it
        props = parse_java_opts(desc.command.javaOpts)
        policy = supervise_policy(desc.supervise, props, self.worker_conf,
                                  self._initial_backoff)
        user_jar = (fetch_resource(desc.jarUrl, self.driver_dir, self._fetch_upload,
                                   what="jar", conf=props) if desc.jarUrl else "")
        for key in _RESOURCE_KEYS:
            entries = [e.strip() for e in props.get(key, "").split(",") if e.strip()]
            fetched = []
            for entry in entries:       # an archive's #alias names its directory: kept
                url, sep, alias = (entry.partition("#") if key == "spark.archives"
                                   else (entry, "", ""))
                fetched.append(fetch_resource(url, self.driver_dir, self._fetch_upload,
                                              conf=props) + sep + alias)
            if fetched:
                props[key] = ",".join(fetched)
        props["spark.submit.deployMode"] = "cluster"
        props["spark.driver.host"] = self.host
        if self.resources:   # Spark: -Dspark.driver.resourcesFile=<the assigned addresses>
            props["spark.driver.resourcesFile"] = write_resources_file(
                self.driver_dir, "spark.driver", self.resources)
        if self._auth_secret:   # the worker's secret reaches the driver via the environment
            props.pop("spark.authenticate.secret", None)
            # a submitter's secret file names the cluster secret (and may not exist here):
            # it would win over the application credential in the environment
            props.pop("spark.authenticate.secret.file", None)
        cmd = driver_command(desc, substitute_driver_variables(
            desc.command.arguments, worker_url=self.worker_url, user_jar=user_jar))
        env = build_driver_environment(
            os.environ if self._base_env is None else self._base_env,
            desc.command.environment, props, stdout_url=self.log_url("stdout"),
            stderr_url=self.log_url("stderr"), auth_secret=self._auth_secret)
        return cmd, env, policy

    def _run_with_retry(self, cmd: list[str], env: dict[str, str], policy: SupervisePolicy
                        ) -> tuple[DriverState, Optional[str]]:
        """Spark's runCommandWithRetry plus the retry limit; -> (final state, exception)."""
        supervisor = Supervisor(self.driver_id, policy)
        while True:
            if self._killed.is_set():
                return DriverState.KILLED, None
            started = time.monotonic()
            code = self._run_once(cmd, env)
            if code is None:   # killed before the process started
                return DriverState.KILLED, None
            self.exit_status = code
            exception = self._memory_exceeded or read_driver_exception(self.driver_dir)
            decision = supervisor.after_exit(code, self._killed.is_set(),
                                             time.monotonic() - started, time.monotonic())
            if decision.give_up is not None:
                log.warning("%s", decision.give_up)
                return DriverState.FAILED, (decision.give_up + (f"\n{exception}"
                                                                if exception else ""))
            if not decision.relaunch:
                state = final_state(code, self._killed.is_set())
                return state, exception if state == DriverState.FAILED else None
            log.info("Command exited with status %d, re-launching after %s s.", code,
                     f"{decision.wait:g}")
            self._killed.wait(decision.wait)   # a kill ends the backoff at once

    def _run_once(self, cmd: list[str], env: dict[str, str]) -> Optional[int]:
        """Start the driver once, wait for it; its exit code (None if killed first)."""
        try:
            os.unlink(os.path.join(self.driver_dir, EXCEPTION_FILE))
        except FileNotFoundError:
            pass
        log.info("Launch Command: %s", " ".join(f'"{c}"' for c in cmd))
        with open(os.path.join(self.driver_dir, "stdout"), "ab") as out, \
                open(os.path.join(self.driver_dir, "stderr"), "ab") as err:
            err.write(launch_header(cmd).encode("utf-8"))
            err.flush()
            with self._lock:
                if self._killed.is_set():
                    return None
                self._group.reset()
                proc = self._process = subprocess.Popen(
                    cmd, cwd=self.driver_dir, env=env, stdin=subprocess.DEVNULL, stdout=out,
                    stderr=err, close_fds=True, start_new_session=(os.name == "posix"))
                self._memory_exceeded = None
        watchdog = self._memory_watchdog(proc)
        try:
            return self._group.wait(proc)
        finally:
            watchdog.stop()

    def _memory_watchdog(self, proc: subprocess.Popen) -> MemoryWatchdog:
        """--driver-memory (+ spark.driver.memoryOverhead) enforced on the driver process."""
        overhead = None
        for opt in self.driver_desc.command.javaOpts:
            if opt.startswith("-Dspark.driver.memoryOverhead="):
                try:
                    overhead = parse_memory_mb(opt.split("=", 1)[1])
                except ValueError:
                    pass
        limit = memory_limit_mb(self.driver_desc.mem, overhead)

        def exceeded(rss_mb: int) -> None:
            message = exceeded_message(f"Driver {self.driver_id}", rss_mb, limit,
                                       "spark.driver.memory")
            log.warning("%s", message)
            self._memory_exceeded = message
            self._group.kill(proc)
        return MemoryWatchdog(proc.pid, limit, exceeded).start()
