"""Command line runner: every selected workload on every selected engine, one table.

Why: one command gives comparable numbers for Ember, plain Python, PySpark and Dask
taken on the same machine within minutes of each other, and a machine-readable record
of them. The master URL is a parameter so the same run can target `local[N]` or a
`spark://host:port` cluster.

    python -m benchmarks [--only a,b] [--runs 3] [--master local[2]]
                         [--engines ember,serial,pyspark,dask] [--json FILE] [--scale 1.0]

Output
  * stdout: a table — workload, engine, median of the runs (seconds, tasks/s or ms),
    the engine's time divided by the serial baseline's (below 1 = faster than serial),
    notes (p95, first iteration, errors).
  * --json FILE (default benchmarks/results.jsonl, appended): one JSON object per
    workload x engine with `status` (ok | error | mismatch | skipped | unsupported), the
    medians, every raw run and the `result` checksum.
Exit status 1 when any workload failed or an engine's result disagreed with serial's.
Engines that are not installed (pyspark, dask are optional) are reported as skipped.
"""
from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import statistics
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

from benchmarks.bytecode import use_installed_bytecode
from benchmarks.engines import Engine, make_engine
from benchmarks.workloads import WORKLOADS, Unsupported, Workload

DEFAULT_JSON = Path(__file__).resolve().parent / "results.jsonl"
DEFAULT_ENGINES = ("ember", "serial", "pyspark", "dask")
ALL_ENGINES = DEFAULT_ENGINES + ("ember-cluster",)


def parse_args(argv: Optional[list[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Time Ember against plain Python (and PySpark / Dask when installed).",
    )
    p.add_argument("--only", default="", help="comma-separated workloads: " + ",".join(WORKLOADS))
    p.add_argument("--runs", type=int, default=3, help="runs per workload and engine (median reported)")
    p.add_argument("--master", default="local[2]", help="master URL for ember/pyspark, e.g. spark://host:7077")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="a Spark property for the --cluster daemons and Ember's driver "
                        "(e.g. spark.authenticate=true, spark.network.crypto.enabled=true)")
    p.add_argument("--cluster", type=int, default=0, metavar="N",
                   help="start a local standalone cluster of N workers and use it as the master")
    p.add_argument("--cluster-cores", type=int, default=2, metavar="C",
                   help="cores each --cluster worker offers (2: 2 x N task slots share this "
                        "machine's cores; 1 with N = 2: as many slots as local[2])")
    p.add_argument("--engines", default=",".join(DEFAULT_ENGINES),
                   help="comma-separated: " + ",".join(ALL_ENGINES) + " (ember-cluster: Ember on "
                        "the --cluster, while ember stays on --master)")
    p.add_argument("--json", default=str(DEFAULT_JSON), help="JSON-lines file to append results to")
    p.add_argument("--scale", type=float, default=1.0, help="multiply data sizes (0.01 = quick smoke run)")
    p.add_argument("--dask-workers", type=int, default=2, help="LocalCluster worker processes (1 thread each)")
    p.add_argument("--dask-scheduler", default=None, help="use this dask scheduler instead of a LocalCluster")
    p.add_argument("--curves", action="store_true",
                   help="cost curves: each workload at 4 sizes per engine, PNG charts + JSON lines")
    p.add_argument("--curve-scale", type=float, default=1.0,
                   help="with --curves: multiply the curves' data sizes")
    p.add_argument("--curve-limit", type=float, default=60.0,
                   help="with --curves: skip a point projected to take longer (seconds), and "
                        "the engine's larger sizes of that workload")
    p.add_argument("--out", default=None, help="with --curves: output dir (default benchmarks/curves)")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.scale <= 0:
        p.error("--scale must be positive")
    if args.curve_limit <= 0:
        p.error("--curve-limit must be positive")
    args.cluster_url = None     # set once --cluster started one, for ember-cluster
    args.workloads = [w for w in args.only.split(",") if w] or list(WORKLOADS)
    unknown = [w for w in args.workloads if w not in WORKLOADS]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; choose from {', '.join(WORKLOADS)}")
    engines = [e for e in args.engines.split(",") if e]
    bad = [e for e in engines if e not in ALL_ENGINES]
    if bad or not engines:
        p.error(f"unknown engine(s) {', '.join(bad)}; choose from {', '.join(ALL_ENGINES)}")
    if "ember-cluster" in engines and not args.cluster:
        p.error("the ember-cluster engine runs on a cluster the runner starts: add --cluster N")
    # serial first: every other engine is checked against its answers
    args.engine_names = sorted(dict.fromkeys(engines), key=lambda e: e != "serial")
    return args


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def jsonable(value: Any) -> Any:
    """Normalize tuples to lists etc., so results compare the same before and after JSON."""
    return json.loads(json.dumps(value, default=str))


def median_metrics(runs: list[dict[str, Any]]) -> dict[str, float]:
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys = [k for k in keys if k != "result"]
    return {k: statistics.median(r[k] for r in runs if k in r) for k in keys}


def run_once(wl: Workload, engine: Engine, rec: dict[str, Any], i: int, runs: int) -> None:
    """Run i of one workload on one engine, added to its partial JSON record (which an
    error or Unsupported closes: later runs are skipped)."""
    if rec["status"] != "ok":
        return
    gc.collect()    # serial runs in this process: its garbage is not the next engine's cost
    try:
        m = wl.run(engine)
    except Unsupported as exc:
        rec.update(status="unsupported", error=str(exc), runs=[])
        return
    except Exception as exc:
        log(traceback.format_exc())
        rec.update(status="error", error=f"{type(exc).__name__}: {exc}")
        return
    run = {"seconds": m.seconds, **m.metrics, "result": jsonable(m.result)}
    rec["runs"].append(run)
    value = run.get(wl.primary, m.seconds)
    log(f"  [{engine.name}] {wl.name} run {i + 1}/{runs}: {format_value(value, wl.unit)}")


def finish_record(wl: Workload, rec: dict[str, Any]) -> dict[str, Any]:
    """Medians and the run-to-run consistency check of a workload's record."""
    if rec["runs"]:
        rec["median"] = median_metrics(rec["runs"])
        rec["value"] = rec["median"].get(wl.primary)
        rec["result"] = rec["runs"][0]["result"]
        if rec["status"] == "ok":
            for r in rec["runs"][1:]:
                if not wl.same_result(r["result"], rec["result"]):
                    rec.update(status="error", error=f"results differ between runs: {rec['result']!r} vs {r['result']!r}")
    return rec


def check_against_serial(records: list[dict[str, Any]], workloads: dict[str, Workload]) -> None:
    """Flag results that disagree with serial's; compute ratios vs serial."""
    serial = {r["workload"]: r for r in records if r["engine"] == "serial" and r["status"] == "ok"}
    for rec in records:
        base = serial.get(rec["workload"])
        if rec["engine"] == "serial" or base is None or rec["status"] != "ok":
            continue
        wl = workloads[rec["workload"]]
        if not wl.same_result(rec["result"], base["result"]):
            rec["status"] = "mismatch"
            rec["error"] = f"result {rec['result']!r} differs from serial's {base['result']!r}"
            continue
        base_time = wl.comparable_time(base["median"])
        mine = wl.comparable_time(rec["median"])
        rec["ratio_vs_serial"] = mine / base_time if base_time > 0 else None
        if rec["workload"] == "iterative" and base_time > 0:
            # the ideal on 2 cores: half the serial time per pass
            rec["median"]["later_vs_half_serial"] = mine / (base_time / 2)


def format_value(value: Optional[float], unit: str) -> str:
    if value is None:
        return "-"
    if unit == "tasks/s":
        return f"{value:,.0f} {unit}"
    if unit == "ms":
        return f"{value:.2f} ms" if value >= 0.1 else f"{value:.4f} ms"
    if value < 0.01:
        return f"{value * 1000:.3f} m{unit}"
    return f"{value:.3f} {unit}"


def notes_for(rec: dict[str, Any]) -> str:
    if rec["status"] != "ok":
        return f"{rec['status'].upper()}: {rec.get('error') or ''}"
    med = rec.get("median", {})
    parts = []
    if "p95_ms" in med:
        parts.append(f"p95 {format_value(med['p95_ms'], 'ms')}")
    if "first_s" in med:
        parts.append(f"first {med['first_s']:.3f} s")
    if "later_vs_half_serial" in med:
        parts.append(f"later/(serial/2) {med['later_vs_half_serial']:.2f}")
    if "pi" in med:
        parts.append(f"pi~{med['pi']:.4f}")
    if rec["workload"] in ("tiny_tasks",) and "seconds" in med:
        parts.append(f"{format_value(med['seconds'], 's')} total")
    return ", ".join(parts)


def render_table(records: list[dict[str, Any]], workloads: dict[str, Workload]) -> str:
    header = ("workload", "engine", "median", "vs serial", "notes")
    rows = [header]
    skipped: dict[str, str] = {}
    for rec in records:
        if rec["status"] == "skipped":  # one line under the table instead of a row each
            skipped.setdefault(rec["engine"], rec.get("error") or "")
            continue
        wl = workloads[rec["workload"]]
        ratio = rec.get("ratio_vs_serial")
        rows.append(
            (
                rec["workload"],
                rec["engine"],
                format_value(rec.get("value"), wl.unit) if rec["status"] in ("ok", "mismatch") else "-",
                f"{ratio:.2f}x" if isinstance(ratio, (int, float)) else ("1.00x" if rec["engine"] == "serial" and rec["status"] == "ok" else "-"),
                notes_for(rec),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(c.ljust(widths[i]) if i < 4 else c for i, c in enumerate(row)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths) + "  " + "-" * 5)
    for engine, reason in skipped.items():
        lines.append(f"(skipped {engine}: {reason})")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    # Children (local executors, cold-start processes) import this checkout and hash
    # strings the same way in every process.
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH", "")) if p)
    os.environ.setdefault("PYTHONHASHSEED", "0")
    args.bytecode = use_installed_bytecode()
    log(args.bytecode)

    cluster = None
    if args.cluster:
        import tempfile
        from ember.deploy.local_cluster import LocalCluster
        extra = dict(kv.split("=", 1) for kv in args.conf)
        if extra:   # Ember's SparkConf loads these too (the driver side)
            os.environ["EMBER_SPARK_CONF"] = "\n".join(f"{k}={v}" for k, v in extra.items())
        cluster = LocalCluster(tempfile.mkdtemp(prefix="ember-bench-cluster-"),
                               workers=args.cluster, cores=args.cluster_cores, memory="2g",
                               conf=extra).start()
        if "ember-cluster" in args.engine_names:
            args.cluster_url = cluster.url      # ember and pyspark stay on --master
        else:
            args.master = cluster.url
        log(f"started a {args.cluster}-worker x {args.cluster_cores}-core cluster at {cluster.url}")
    try:
        if args.curves:
            from benchmarks.curves import DEFAULT_OUT, run_curves
            return run_curves(args.engine_names, args.master, args.curve_scale,
                              Path(args.out) if args.out else DEFAULT_OUT,
                              args.dask_workers, args.dask_scheduler,
                              [w for w in args.only.split(",") if w], log, args.cluster_url,
                              args.curve_limit)
        return _run(args, root)
    finally:
        if cluster is not None:
            cluster.stop()


def _run(args: Any, root: str) -> int:
    workloads = {name: WORKLOADS[name](args.scale) for name in args.workloads}
    run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    common = {
        "run_id": run_id,
        "scale": args.scale,
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_start": list(os.getloadavg()),
        "bytecode": args.bytecode,
    }

    for wl in workloads.values():
        t0 = time.perf_counter()
        wl.prepare()
        if time.perf_counter() - t0 > 1:
            log(f"prepared {wl.name} input in {time.perf_counter() - t0:.1f} s")

    records: list[dict[str, Any]] = []
    started: list[tuple[Engine, dict[str, Any]]] = []
    for name in args.engine_names:
        engine = make_engine(name, args.master, args.dask_workers, args.dask_scheduler,
                             args.cluster_url)
        base = {**common, "engine": name, "master": engine.master}
        reason = engine.unavailable_reason()
        if reason is None:
            log(f"starting {name} ({engine.master or 'in-process'})")
            try:
                engine.start()
            except Exception as exc:
                log(traceback.format_exc())
                reason = f"failed to start: {type(exc).__name__}: {exc}"
                engine.stop()
                if name in ("ember", "serial"):
                    for wl in workloads.values():
                        records.append({**base, "workload": wl.name, "params": wl.params(), "status": "error", "error": reason, "runs": []})
                    continue
        if reason is not None:
            log(f"skipping {name}: {reason}")
            for wl in workloads.values():
                records.append({**base, "workload": wl.name, "params": wl.params(), "status": "skipped", "error": reason, "runs": []})
            continue
        base["engine_version"] = engine.version()
        started.append((engine, base))
    # runs alternate between engines (serial, ember, ..., serial, ember, ...), so a change
    # in the machine's load during a workload reaches every engine alike
    try:
        for wl in workloads.values():
            log(f"{wl.name}: {wl.params()}")
            recs = [{"status": "ok", "error": None, "runs": []} for _ in started]
            for i in range(args.runs):
                for (engine, _base), rec in zip(started, recs):
                    run_once(wl, engine, rec, i, args.runs)
            for (_engine, base), rec in zip(started, recs):
                records.append({**base, "workload": wl.name, "params": wl.params(),
                                "unit": wl.unit, "primary": wl.primary,
                                **finish_record(wl, rec)})
    finally:
        for engine, _base in started:
            engine.stop()

    # group the table by workload, in the order run
    order = {w: i for i, w in enumerate(workloads)}
    eng_order = {e: i for i, e in enumerate(args.engine_names)}
    records.sort(key=lambda r: (order[r["workload"]], eng_order[r["engine"]]))
    check_against_serial(records, workloads)

    if args.json:
        out = Path(args.json)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(out, "a", encoding="utf-8") as f:
            for rec in records:
                f.write(json.dumps(rec, default=str) + "\n")

    print(f"Benchmarks  master={args.master}  scale={args.scale}  runs={args.runs}  "
          f"cpus={os.cpu_count()}  python={platform.python_version()}  load average "
          f"{common['loadavg_start'][0]:.1f} at start, {os.getloadavg()[0]:.1f} at end")
    print(args.bytecode)
    print(render_table(records, workloads))
    if args.json:
        print(f"(JSON lines appended to {args.json}, run_id {run_id})")
    failed = [r for r in records if r["status"] in ("error", "mismatch")]
    for r in failed:
        log(f"FAILED {r['workload']} on {r['engine']}: {r['status']}: {r['error']}")
    return 1 if failed else 0
