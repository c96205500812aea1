"""What `ember submit --deploy-mode cluster` hands to the master: the app, resolved.

Why a module of its own: Spark's prepareSubmitEnvironment decides, before any connection,
whether a submission can work at all (a local master, a shell, a missing file) and what the
driver's command will be. Both gateways (RPC and REST) then carry the same decision, so it
lives here once, as functions that touch only the local file system.

The driver command convention, shared with the worker's DriverRunner and the driver wrapper:
`DriverWrapper {{WORKER_URL}} {{USER_JAR}} MAIN [app args]`, where MAIN is `__main__` (run
USER_JAR, a .py file, as a script) or a dotted module name (USER_JAR, a .zip/.whl/directory,
goes on sys.path first; empty USER_JAR: the module is importable on the worker). Every Spark
property travels as `-Dkey=value` in javaOpts, as in Spark.
"""
from __future__ import annotations

import io
import os
import zipfile
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from ember import fs
from ember.deploy.messages import Command, DriverDescription

DRIVER_WRAPPER_CLASS = "org.apache.spark.deploy.worker.DriverWrapper"
SCRIPT_MAIN = "__main__"
_SHELLS = {"pyspark-shell": "Spark shells", "spark-shell": "Spark shells",
           "sparkr-shell": "Spark shells", "spark-sql": "Spark SQL shell"}
_ARCHIVES = (".zip", ".whl", ".egg")
_REMOTE = ("file://", "ember-upload://")   # and every URL fsspec reads (ember.fs)
# Environment a driver inherits from its submitter (Spark: SPARK_* minus these).
# SPARK_LOCAL_IP / SPARK_LOCAL_HOSTNAME / SPARK_PUBLIC_DNS name the submitter's host: a
# driver running on a worker host must not bind or advertise them (Spark's REST server
# drops the first two; none of the three may travel).
_ENV_EXCLUDED = {"SPARK_ENV_LOADED", "SPARK_HOME", "SPARK_CONF_DIR", "SPARK_LOCAL_IP",
                 "SPARK_LOCAL_HOSTNAME", "SPARK_PUBLIC_DNS"}


class SubmitError(Exception):
    """A one-line reason the submission cannot go ahead (printed as `Error: ...`)."""


@dataclass(frozen=True)
class AppSpec:
    """The primary resource and how the driver wrapper starts it.

    `local_path` is set when the resource must be uploaded (its bytes come from here);
    otherwise `url` is what the worker fetches ("" for a module importable on the workers)."""
    main: str
    args: list[str]
    local_path: Optional[str] = None
    url: str = ""

    @property
    def upload_name(self) -> str:
        assert self.local_path is not None
        name = os.path.basename(os.path.normpath(self.local_path))
        return name + ".zip" if os.path.isdir(self.local_path) else name


def check_cluster_master(master: Optional[str]) -> str:
    """prepareSubmitEnvironment's master checks for cluster deploy mode."""
    if not master:
        raise SubmitError('Cluster deploy mode is not compatible with master "local"')
    if master.startswith("local"):
        raise SubmitError('Cluster deploy mode is not compatible with master "local"')
    if not master.startswith("spark://"):
        raise SubmitError("Master must either be yarn or start with spark, k8s, or local")
    return master


def resolve_app(app: Optional[str], main_class: Optional[str],
                app_args: Sequence[str]) -> AppSpec:
    """The primary resource and MAIN from the command line.

    - `app.py` -> run as a script; `dir`/`.zip`/`.whl` + `--class pkg.mod` -> that module;
    - `--class pkg.mod` with no resource (the first argument is not an existing path or a
      URL) -> the module is importable on the workers, every positional is an app argument;
    - URLs (file://, http(s)://, s3a://, ...) are fetched by the worker itself."""
    args = list(app_args)
    if app in _SHELLS:
        raise SubmitError(f"Cluster deploy mode is not applicable to {_SHELLS[app]}.")
    if main_class and app is not None and not _looks_like_resource(app):
        return AppSpec(main_class, [app] + args)
    if app is None:
        if main_class:
            return AppSpec(main_class, args)
        raise SubmitError("Must specify a primary resource (JAR or Python or R file)")
    if is_remote(app):
        main = main_class or (SCRIPT_MAIN if app.split("#")[0].endswith(".py") else None)
        if main is None:
            raise SubmitError(f"No main module set for {app}; please specify one with --class.")
        return AppSpec(main, args, url=app)
    path = os.path.abspath(app)
    if not os.path.exists(path):
        raise SubmitError(f"File file:{path} does not exist")
    if os.path.isdir(path) or path.endswith(_ARCHIVES):
        if not main_class:
            raise SubmitError(f"No main module set for {app}; please specify one with --class "
                              "(a module inside it whose main() or __main__ runs).")
        return AppSpec(main_class, args, local_path=path)
    if path.endswith(".R") or path.endswith(".r"):
        raise SubmitError("Cluster deploy mode is currently not supported for R applications "
                          "on standalone clusters.")
    return AppSpec(main_class or SCRIPT_MAIN, args, local_path=path)


def _looks_like_resource(text: str) -> bool:
    return is_remote(text) or os.path.exists(text) or text.endswith(
        (".py",) + _ARCHIVES)


def resource_bytes(path: str) -> bytes:
    """A file's bytes, or a directory zipped (entries relative to it, so the directory's
    contents are importable from the zip's root)."""
    if not os.path.isdir(path):
        with open(path, "rb") as f:
            return f.read()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(files):
                full = os.path.join(root, name)
                zf.write(full, os.path.relpath(full, path))
    return buf.getvalue()


def local_list_entries(value: Optional[str]) -> list[str]:
    """Entries of a comma list (--py-files, --files) that name local files to upload."""
    return [e for e in (value or "").split(",") if e and not is_remote(e)]


def is_remote(text: str) -> bool:
    """A URL the worker fetches itself (file://, s3a://, http(s)://, ...), not a local path
    the submitter uploads."""
    return text.startswith(_REMOTE) or not fs.is_local(text)


def driver_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The submitter's SPARK_* variables a driver inherits (Spark's RestSubmissionClient
    filter; the legacy client sends them all, which leaks the submitter's whole env)."""
    return {k: v for k, v in environ.items()
            if k.startswith("SPARK_") and k not in _ENV_EXCLUDED}


def driver_description(conf: Mapping[str, str], app: AppSpec, resource_url: str,
                       environment: Mapping[str, str]) -> DriverDescription:
    """Spark's ClientApp DriverDescription: memory/cores/supervise from the conf, every
    property as `-Dk=v`, the DriverWrapper command with the placeholders the worker fills."""
    from ember import config
    from ember.deploy.resources import driver_resource_requirements
    mem = config.read(conf, "spark.driver.memory")
    cores = config.read(conf, "spark.driver.cores")
    supervise = config.read(conf, "spark.driver.supervise")
    command = Command(DRIVER_WRAPPER_CLASS,
                      ["{{WORKER_URL}}", "{{USER_JAR}}", app.main, *app.args],
                      dict(environment), [], [],
                      [f"-D{k}={v}" for k, v in conf.items()])
    return DriverDescription(resource_url, mem, cores, supervise, command,
                             driver_resource_requirements(conf))
