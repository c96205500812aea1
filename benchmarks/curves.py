"""Cost curves: each workload at four sizes on every installed engine, as pictures.

    python -m benchmarks --curves [--engines ember,serial,pyspark,dask] [--master URL]
                                  [--curve-scale X] [--curve-limit S] [--out DIR]

Why: one number per workload hides how cost grows with the work; a curve shows whether
it grows linearly and where fixed costs dominate. Each workload runs once per size and
engine (sizes below; --curve-scale multiplies the data sizes, not task or partition
counts); every point is appended as a JSON line to DIR/curves.jsonl and one PNG per
workload (seconds against size, log-log, a line per engine) is written to DIR when
matplotlib is installed (`pip install '.[curves]'`; without it only the JSON is written).
An engine whose answer differs from serial's at a size is marked MISMATCH in the log and
makes the exit status 1.

A point an engine is expected to spend more than --curve-limit seconds on (60 by default) is
not run but recorded as "skipped" with that projection, and so are that engine's larger
sizes of the workload: PySpark's tiny tasks (~14 a second here) and its shuffle of
thousands of partitions, or Dask's tiny tasks, would otherwise keep a run of every
installed engine going for hours. The projection takes the engine's last point on the
curve and grows it with the size at the rate its last two points show, never slower than
linearly; the smallest size always runs.
"""
from __future__ import annotations

import datetime as _dt
import json
import math
import os
import time
import traceback
from pathlib import Path
from typing import Any, Callable

from benchmarks.engines import make_engine
from benchmarks.workloads import (ColdStart, IterativeCached, Join, ManyPartitions, Pi,
                                  SortByKey, TinyTasks, WarmLatency, WordCount, Workload)

DEFAULT_OUT = Path(__file__).resolve().parent / "curves"


def _scaled(cls: type[Workload], full: float) -> Callable[[float], Workload]:
    """Sizes given in the workload's own unit, as a fraction of its full scale."""
    return lambda size: cls(size / full)


# workload -> (size label, the four default sizes, size -> workload)
CURVES: dict[str, tuple[str, list[float], Callable[[float], Workload]]] = {
    "wordcount": ("MB of text", [2.5, 5, 10, 20], _scaled(WordCount, 200)),
    "pi": ("million samples", [0.5, 1, 2, 4], _scaled(Pi, 20)),
    "sort": ("thousand pairs", [50, 100, 200, 400], _scaled(SortByKey, 4000)),
    "join": ("thousand facts", [25, 50, 100, 200], _scaled(Join, 2000)),
    "partitions": ("maps = reducers", [10, 100, 1000, 10000],
                   lambda size: ManyPartitions(1.0, int(size))),
    "tiny_tasks": ("tasks", [1000, 4000, 16000, 64000], _scaled(TinyTasks, 2000)),
    "iterative": ("thousand floats", [100, 200, 400, 800], _scaled(IterativeCached, 2000)),
}
# not size-dependent: run once at full scale so the JSON holds them too
SINGLE = {"warm_latency": WarmLatency, "cold_start": ColdStart}


def _unit(wl: Workload) -> str:
    """The unit of comparable_time (tiny tasks: the job's seconds, not tasks/s)."""
    return "s" if wl.primary == "tasks_per_s" else wl.unit


def _point(wl: Workload, engine: Any) -> tuple[str, float | None, Any, str, float]:
    """(status, comparable value, result, error, wall seconds of the whole run)."""
    t0 = time.perf_counter()
    try:
        m = wl.run(engine)
    except Exception as exc:   # noqa: BLE001 - recorded, the curve goes on
        if type(exc).__name__ == "Unsupported":
            return "unsupported", None, None, str(exc), time.perf_counter() - t0
        traceback.print_exc()
        return "error", None, None, f"{type(exc).__name__}: {exc}", time.perf_counter() - t0
    value = wl.comparable_time({"seconds": m.seconds, **m.metrics})
    return "ok", value, m.result, "", time.perf_counter() - t0


def projected_seconds(done: list[tuple[float, float]], size: float) -> float | None:
    """What a point of `size` should take, from the (size, wall seconds) points already run
    on the same curve, smallest first; None before the first. The last point grown by
    (size / its size) ** k, where k is the growth the last two points show, at least 1 (a
    fixed cost that dominates the small sizes would otherwise project the large ones cheap)
    and at most 3."""
    if not done:
        return None
    last_size, last_wall = done[-1]
    k = 1.0
    if len(done) >= 2:
        (s0, w0), (s1, w1) = done[-2], done[-1]
        if s1 > s0 > 0 and w1 > w0 > 0:
            k = min(3.0, max(1.0, math.log(w1 / w0) / math.log(s1 / s0)))
    return last_wall * (size / last_size) ** k


def run_curves(engine_names: list[str], master: str, scale: float, out_dir: Path,
               dask_workers: int = 2, dask_scheduler: str | None = None,
               only: list[str] | None = None, log: Callable[[str], None] = print,
               cluster_url: str | None = None, limit: float = 60.0) -> int:
    out_dir.mkdir(parents=True, exist_ok=True)
    run_id = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ") + f"-{os.getpid()}"
    names = [n for n in CURVES if not only or n in only]
    points: list[dict[str, Any]] = []
    # keyed by the size as run (--curve-scale applies to the data sizes), which the points,
    # the log and the charts show
    workloads: dict[tuple[str, float], Workload] = {}
    for name in names:
        make = CURVES[name][2]
        for size in CURVES[name][1]:
            if name not in ("partitions", "tiny_tasks"):
                size *= scale
            wl = make(size)
            wl.prepare()
            workloads[name, size] = wl
    engines = []
    try:
        for engine_name in engine_names:
            engine = make_engine(engine_name, master, dask_workers, dask_scheduler,
                                 cluster_url)
            reason = engine.unavailable_reason()
            if reason is not None:
                log(f"skipping {engine_name}: {reason}")
                continue
            engine.start()
            engines.append(engine)
        # engines alternate point by point, so the machine's load reaches them alike
        walls: dict[tuple[str, str], list[tuple[float, float]]] = {}   # (size, wall) run
        for (name, size), wl in workloads.items():      # a workload's sizes in order
            for engine in engines:
                done = walls.setdefault((name, engine.name), [])
                projected = projected_seconds(done, size)
                if projected is not None and projected > limit:
                    status, value, result, wall = "skipped", None, None, None
                    error = shown = (f"projected {projected:.0f} s, over --curve-limit "
                                     f"{limit:g} s")
                else:
                    status, value, result, error, wall = _point(wl, engine)
                    done.append((size, wall))
                    shown = "" if value is None else f"{value:.4g} {_unit(wl)}"
                log(f"{name} {size:g} {CURVES[name][0]} on {engine.name}: {status} {shown}")
                points.append({"run_id": run_id, "workload": name, "size": size,
                               "size_label": CURVES[name][0], "engine": engine.name,
                               "master": engine.master, "params": wl.params(),
                               "status": status, "value": value, "unit": _unit(wl),
                               "wall_s": wall,
                               "result": json.loads(json.dumps(result, default=str)),
                               "error": error, "loadavg": os.getloadavg()[0]})
        for name, cls in SINGLE.items():
            if only and name not in only:
                continue
            wl = cls(1.0)
            for engine in engines:
                status, value, result, error, _wall = _point(wl, engine)
                points.append({"run_id": run_id, "workload": name, "size": None,
                               "engine": engine.name, "master": engine.master,
                               "status": status, "value": value, "unit": _unit(wl),
                               "result": result, "error": error,
                               "loadavg": os.getloadavg()[0]})
    finally:
        for engine in engines:
            engine.stop()
    failed = _check(points, workloads, log)
    with open(out_dir / "curves.jsonl", "a", encoding="utf-8") as f:
        for p in points:
            f.write(json.dumps(p, default=str) + "\n")
    for png in draw(points, out_dir, log):
        log(f"wrote {png}")
    return 1 if failed else 0


def _check(points: list[dict[str, Any]], workloads: dict, log: Callable[[str], None]) -> bool:
    serial = {(p["workload"], p["size"]): p["result"] for p in points
              if p["engine"] == "serial" and p["status"] == "ok"}
    failed = False
    for p in points:
        key = (p["workload"], p["size"])
        if p["status"] == "error":
            failed = True
        if p["status"] == "ok" and p["engine"] != "serial" and key in serial and key in workloads:
            if not workloads[key].same_result(p["result"], serial[key]):
                p["status"] = "mismatch"
                log(f"MISMATCH {p['workload']} {p['size']:g} on {p['engine']}: "
                    f"{p['result']!r} vs serial {serial[key]!r}")
                failed = True
    return failed


def draw(points: list[dict[str, Any]], out_dir: Path, log: Callable[[str], None]) -> list[Path]:
    """One log-log PNG per workload; nothing (and a note) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib is not installed (pip install '.[curves]'): JSON only, no charts")
        return []
    written = []
    for name, (label, _sizes, _make) in CURVES.items():
        mine = [p for p in points if p["workload"] == name and p["status"] == "ok"]
        if not mine:
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        for engine in dict.fromkeys(p["engine"] for p in mine):
            pts = sorted((p["size"], p["value"]) for p in mine if p["engine"] == engine)
            ax.plot([s for s, _ in pts], [v for _, v in pts], marker="o", label=engine)
        unit = mine[0]["unit"]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel(unit)
        ax.set_title(f"{name}: {unit} against size")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{name}.png"
        fig.savefig(path, dpi=100)
        plt.close(fig)
        written.append(path)
    return written
