"""The engines a workload can run on, behind one small interface.

Why: the runner should not care whether a workload runs in this process (serial), on an
Ember or PySpark SparkContext (same RDD API, so the same workload code), or on a Dask
cluster. Each engine knows how to tell whether it is installed, start and stop its
context once per benchmark run (so jobs are measured on a warm context, as in a real
application), and write the tiny program used to measure its cold start.
"""
from __future__ import annotations

import importlib
import importlib.util
import logging
import os
from typing import Any, Optional

from benchmarks import kernels


class Engine:
    """Base class: `kind` selects the workload method (serial / rdd / dask)."""

    name: str = "?"
    kind: str = "?"
    master: Optional[str] = None

    def unavailable_reason(self) -> Optional[str]:
        """None when the engine can run here, else a one-line reason it cannot."""
        return None

    def start(self) -> None:
        """Create the context / cluster; called once before the engine's workloads."""

    def stop(self) -> None:
        """Tear down what start() created; must be safe to call after a failed start."""

    def version(self) -> Optional[str]:
        return None

    def cold_start_code(self) -> str:
        """Source of a program that starts the engine, counts 10 numbers, prints the
        count and shuts down; it gets the master URL (or address) as argv[1]."""
        raise NotImplementedError

    def cold_start_arg(self) -> str:
        return self.master or ""


class SerialEngine(Engine):
    """Plain single-process Python: the baseline every other engine is compared with."""

    name = "serial"
    kind = "serial"

    def version(self) -> Optional[str]:
        import platform

        return platform.python_version()

    def cold_start_code(self) -> str:
        return "print(len(list(range(10))))\n"


class RddEngine(Engine):
    """A PySpark-API engine: `ember` (the default) or the real `pyspark`."""

    kind = "rdd"

    def __init__(self, module: str, master: str) -> None:
        self.name = module
        self.module = module
        self.master = master
        self.sc: Any = None
        self._mod: Any = None

    def unavailable_reason(self) -> Optional[str]:
        if importlib.util.find_spec(self.module) is None:
            hint = " (optional: pip install pyspark)" if self.module == "pyspark" else ""
            return f"{self.module} is not installed{hint}"
        return None

    def _register_kernels_by_value(self) -> None:
        # Executors of a spark:// cluster cannot import this checkout: ship the task
        # functions by value instead of by module reference.
        try:
            import cloudpickle

            cloudpickle.register_pickle_by_value(kernels)
        except Exception:  # pragma: no cover - old cloudpickle
            pass
        if self.module == "pyspark":
            try:
                from pyspark import cloudpickle as bundled  # type: ignore[import-not-found]

                bundled.register_pickle_by_value(kernels)
            except Exception:  # pragma: no cover - depends on the pyspark version
                pass

    def start(self) -> None:
        self._register_kernels_by_value()
        self._mod = importlib.import_module(self.module)
        conf = self._mod.SparkConf().setMaster(self.master).setAppName(f"{self.module}-benchmarks")
        if self.module == "pyspark":
            conf.set("spark.ui.showConsoleProgress", "false")
        self.sc = self._mod.SparkContext(conf=conf)
        try:
            self.sc.setLogLevel("WARN")
        except Exception:
            pass
        # One throw-away job: executors started, worker processes warm, imports done.
        self.sc.parallelize(range(4), 2).count()

    def stop(self) -> None:
        if self.sc is not None:
            try:
                self.sc.stop()
            finally:
                self.sc = None

    def version(self) -> Optional[str]:
        if self.sc is not None:
            try:
                return str(self.sc.version)
            except Exception:
                pass
        mod = self._mod
        return getattr(mod, "__version__", None) if mod is not None else None

    def cold_start_code(self) -> str:
        return (
            "import sys\n"
            f"from {self.module} import SparkConf, SparkContext\n"
            "conf = SparkConf().setMaster(sys.argv[1]).setAppName('cold-start')\n"
            "sc = SparkContext(conf=conf)\n"
            "print(sc.parallelize(range(10)).count())\n"
            "sc.stop()\n"
        )


class DaskEngine(Engine):
    """dask.bag on a distributed LocalCluster (N worker processes x 1 thread), or on an
    existing scheduler when an address is given."""

    name = "dask"
    kind = "dask"

    def __init__(self, workers: int = 2, scheduler: Optional[str] = None) -> None:
        self.workers = workers
        self.scheduler = scheduler
        self.master = scheduler or f"LocalCluster({workers}x1, processes)"
        self.client: Any = None
        self.cluster: Any = None

    def unavailable_reason(self) -> Optional[str]:
        for mod in ("dask", "distributed"):
            if importlib.util.find_spec(mod) is None:
                return f"{mod} is not installed (optional: pip install '.[bench]')"
        try:
            import dask.bag  # noqa: F401  (needs toolz etc.)
            import distributed  # noqa: F401
        except Exception as exc:  # pragma: no cover - broken install
            return f"dask is installed but does not import: {exc}"
        return None

    def start(self) -> None:
        try:
            import cloudpickle

            cloudpickle.register_pickle_by_value(kernels)
        except Exception:  # pragma: no cover
            pass
        from distributed import Client, LocalCluster

        if self.scheduler:
            self.client = Client(self.scheduler)
        else:
            self.cluster = LocalCluster(
                n_workers=self.workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
        import dask.bag as db

        db.from_sequence(range(4), npartitions=2).count().compute()

    def stop(self) -> None:
        for obj in (self.client, self.cluster):
            if obj is not None:
                try:
                    obj.close()
                except Exception:
                    pass
        self.client = self.cluster = None

    def version(self) -> Optional[str]:
        try:
            import dask

            return dask.__version__
        except Exception:
            return None

    def cold_start_arg(self) -> str:
        return self.scheduler or str(self.workers)

    def cold_start_code(self) -> str:
        return (
            "import logging, sys\n"
            "import dask.bag as db\n"
            "from distributed import Client, LocalCluster\n"
            "if __name__ == '__main__':\n"
            "    arg = sys.argv[1]\n"
            "    if arg.isdigit():\n"
            "        cluster = LocalCluster(n_workers=int(arg), threads_per_worker=1,\n"
            "                               processes=True, dashboard_address=None,\n"
            "                               silence_logs=logging.ERROR)\n"
            "        client = Client(cluster)\n"
            "    else:\n"
            "        cluster, client = None, Client(arg)\n"
            "    print(db.from_sequence(range(10), npartitions=2).count().compute())\n"
            "    client.close()\n"
            "    if cluster is not None:\n"
            "        cluster.close()\n"
        )


class ProcessEngine(Engine):
    """An engine in a process of its own (benchmarks/engine_process.py): every engine but
    serial runs this way. Each run sends the prepared workload (pickled) there and gets its
    Measurement back; the timing happens in that process, around the job only.

    Why: engines in one interpreter share its GIL and its signal handlers. A Dask
    LocalCluster's scheduler, in the process that made it, wakes its IO-loop thread ~150
    times a second and took the GIL from Ember's driver: local tiny tasks ran 21,500/s
    beside it against 39,000/s alone. PySpark's context installs its own SIGINT handler.
    And Ember, like PySpark, allows one SparkContext per process, so `ember` (local[2])
    and `ember-cluster` need a process each anyway."""

    kind = "process"

    def __init__(self, name: str, args: list[str]) -> None:
        self.name = name
        self.args = args
        self._twin = engine_from_args(args)    # the same engine, for what needs no process
        self.master = self._twin.master
        self._proc: Any = None
        self._version: Optional[str] = None

    def unavailable_reason(self) -> Optional[str]:
        return self._twin.unavailable_reason()

    def start(self) -> None:
        import subprocess
        import sys
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.engine_process", *self.args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env())
        self._version = self.call(None)

    def call(self, workload: Any) -> Any:
        """Run a workload there (None: just report the engine's version)."""
        import pickle
        assert self._proc is not None, "engine not started"
        pickle.dump(workload, self._proc.stdin)
        self._proc.stdin.flush()
        ok, value = pickle.load(self._proc.stdout)
        if not ok:
            raise value
        return value

    def stop(self) -> None:
        if self._proc is not None:
            try:
                self._proc.stdin.close()
                self._proc.wait(60)
            except Exception:
                self._proc.kill()
            self._proc = None

    def version(self) -> Optional[str]:
        return self._version

    def cold_start_code(self) -> str:
        return self._twin.cold_start_code()

    def cold_start_arg(self) -> str:
        return self._twin.cold_start_arg()


def engine_from_args(args: list[str]) -> Engine:
    """The in-process engine a ProcessEngine's process runs: `ember|pyspark MASTER` or
    `dask WORKERS [SCHEDULER]`."""
    if args[0] == "dask":
        return DaskEngine(int(args[1]), args[2] if len(args) > 2 and args[2] else None)
    return RddEngine(args[0], args[1])


def make_engine(name: str, master: str, dask_workers: int = 2, dask_scheduler: Optional[str] = None,
                cluster_url: Optional[str] = None) -> Engine:
    """Engine object for a name given on the command line. `ember-cluster` is Ember on the
    standalone cluster the runner started (`cluster_url`), beside `ember` on `master`, so
    local mode and the cluster are measured in one run."""
    if name == "serial":
        return SerialEngine()
    if name in ("ember", "pyspark"):
        return ProcessEngine(name, [name, master])
    if name == "ember-cluster":
        if not cluster_url:
            raise ValueError("the ember-cluster engine needs a cluster: --cluster N")
        return ProcessEngine(name, ["ember", cluster_url])
    if name == "dask":
        return ProcessEngine(name, ["dask", str(dask_workers), dask_scheduler or ""])
    raise ValueError(f"unknown engine {name!r}: choose from ember, ember-cluster, serial, pyspark, dask")


def child_env() -> dict[str, str]:
    """Environment for subprocesses: this checkout importable, hashing reproducible."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONHASHSEED", "0")
    return env
