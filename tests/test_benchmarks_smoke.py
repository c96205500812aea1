"""Smoke test of the benchmark runner at a tiny scale.

Why: the benchmarks are run rarely and by hand, so they rot silently; this runs the real
command (`python -m benchmarks --scale 0.005 --runs 1 --engines ember,serial`) end to end
and checks that every workload produced a result on both engines and that Ember's
answers equal the plain-Python ones. A fast in-process test pins the mismatch flagging.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.runner import check_against_serial, render_table  # noqa: E402
from benchmarks.workloads import WORKLOADS  # noqa: E402


@pytest.mark.timeout(180)
def test_runner_smoke(tmp_path: Path) -> None:
    out = tmp_path / "results.jsonl"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--scale", "0.005", "--runs", "1",
         "--engines", "ember,serial", "--json", str(out)],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=175,
    )
    detail = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    records = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    by_key = {(r["workload"], r["engine"]): r for r in records}
    assert len(by_key) == len(records) == 2 * len(WORKLOADS), detail
    for name, cls in WORKLOADS.items():
        serial = by_key[(name, "serial")]
        ember = by_key[(name, "ember")]
        for rec in (serial, ember):
            assert rec["status"] == "ok", (rec, detail)
            assert len(rec["runs"]) == 1 and "result" in rec["runs"][0], rec
            assert rec["result"] is not None, rec
            assert rec["median"]["seconds"] > 0, rec
        assert cls(0.005).same_result(ember["result"], serial["result"]), (name, ember["result"], serial["result"])
        assert isinstance(ember["ratio_vs_serial"], float), ember
    assert proc.returncode == 0, detail
    assert "workload" in proc.stdout and "wordcount" in proc.stdout, detail


def test_mismatch_is_flagged() -> None:
    def rec(workload: str, engine: str, result: object, seconds: float) -> dict:
        return {"workload": workload, "engine": engine, "status": "ok", "error": None,
                "result": result, "median": {"seconds": seconds}, "value": seconds, "runs": []}

    workloads = {"pi": WORKLOADS["pi"](0.01), "sort": WORKLOADS["sort"](0.01)}
    records = [
        rec("pi", "serial", 7854, 2.0),
        rec("pi", "ember", 7853, 1.0),
        rec("sort", "serial", [10, 1, 9, True], 2.0),
        rec("sort", "ember", [10, 1, 9, True], 1.0),
    ]
    check_against_serial(records, workloads)
    assert records[1]["status"] == "mismatch" and "differs from serial" in records[1]["error"]
    assert records[3]["status"] == "ok" and records[3]["ratio_vs_serial"] == pytest.approx(0.5)
    table = render_table(records, workloads)
    assert "MISMATCH" in table and "0.50x" in table


@pytest.mark.timeout(180)
def test_curves_smoke(tmp_path: Path) -> None:
    """`--curves` writes one JSON line per workload x size x engine, all agreeing with
    serial, and a PNG per workload when matplotlib is installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--curves", "--only", "pi,sort",
         "--curve-scale", "0.02", "--engines", "ember,serial", "--out", str(tmp_path)],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=175)
    assert proc.returncode == 0, proc.stderr[-4000:]
    points = [json.loads(line) for line in (tmp_path / "curves.jsonl").read_text().splitlines()]
    assert sorted((p["workload"], p["engine"]) for p in points) == sorted(
        [(w, e) for w in ("pi", "sort") for e in ("ember", "serial") for _ in range(4)])
    assert all(p["status"] == "ok" for p in points), points
    assert len({p["size"] for p in points if p["workload"] == "pi"}) == 4
    if importlib.util.find_spec("matplotlib") is None:
        return
    assert (tmp_path / "pi.png").stat().st_size > 0 and (tmp_path / "sort.png").exists()


def test_curve_projection() -> None:
    from benchmarks.curves import projected_seconds
    assert projected_seconds([], 10) is None
    assert projected_seconds([(10, 2.0)], 100) == pytest.approx(20.0)      # linear at least
    # a fixed cost (flat start) still projects linearly, quadratic growth stays quadratic
    assert projected_seconds([(10, 1.0), (100, 1.1)], 1000) == pytest.approx(11.0)
    assert projected_seconds([(10, 0.01), (100, 1.0)], 1000) == pytest.approx(100.0)
    assert projected_seconds([(10, 0.001), (100, 10.0)], 1000) == pytest.approx(10_000.0)


def test_curves_skip_what_would_take_too_long(tmp_path: Path, monkeypatch) -> None:
    """A point projected past --curve-limit is recorded as skipped, not run, and so are the
    engine's larger sizes of that workload; the other engines run every size."""
    import benchmarks.curves as curves

    class FakeEngine:
        master = "fake"

        def __init__(self, name: str) -> None:
            self.name = name

        def unavailable_reason(self) -> None:
            return None

        def start(self) -> None:
            pass

        def stop(self) -> None:
            pass

    seconds = {"fast": lambda p: p / 1e4, "slow": lambda p: (p / 100) ** 2}   # slow: 1 s at 100
    ran = []

    def point(wl: object, engine: FakeEngine) -> tuple:
        p = wl.params()["partitions"]
        ran.append((engine.name, p))
        return "ok", seconds[engine.name](p), [1], "", seconds[engine.name](p)

    monkeypatch.setattr(curves, "make_engine", lambda name, *a: FakeEngine(name))
    monkeypatch.setattr(curves, "_point", point)
    monkeypatch.setattr(curves, "draw", lambda *a: [])
    logged: list[str] = []
    assert curves.run_curves(["fast", "slow"], "local[2]", 1.0, tmp_path, only=["partitions"],
                             log=logged.append, limit=60) == 0
    assert ran == [("fast", 10), ("slow", 10), ("fast", 100), ("slow", 100), ("fast", 1000),
                   ("fast", 10000)]
    points = [json.loads(line) for line in (tmp_path / "curves.jsonl").read_text().splitlines()]
    skipped = [(p["engine"], p["size"]) for p in points if p["status"] == "skipped"]
    assert skipped == [("slow", 1000), ("slow", 10000)]
    assert any("slow: skipped projected 10000 s, over --curve-limit 60 s" in line
               for line in logged), logged


def test_ember_cluster_engine_needs_a_cluster(capsys) -> None:
    from benchmarks.runner import parse_args
    with pytest.raises(SystemExit):
        parse_args(["--engines", "ember,ember-cluster"])
    assert "add --cluster N" in capsys.readouterr().err
    args = parse_args(["--engines", "serial,ember,ember-cluster", "--cluster", "2"])
    assert args.engine_names == ["serial", "ember", "ember-cluster"]


@pytest.mark.timeout(240)
@pytest.mark.parametrize("cluster", [0, 1], ids=["local", "cluster"])
def test_profile_smoke(cluster: int) -> None:
    """`python -m benchmarks.profile` prints the driver's main thread, its scheduler loop,
    the task processes and, on a cluster, the executors' RPC loops."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile", "tiny_tasks", "--scale", "0.05",
         "--top", "5"] + (["--cluster", str(cluster)] if cluster else []),
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = proc.stdout
    assert "== driver main thread" in out and "== driver scheduler loop" in out
    assert "task processes, merged" in out
    assert ("executors' RPC loops" in out) == bool(cluster), out[:2000]


@pytest.mark.timeout(120)
def test_cluster_path_smoke() -> None:
    """`python -m benchmarks.cluster_path --local` reports tasks/s, the CPU and context
    switches per task of the driver and the task processes, and warm latency."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.cluster_path", "--local", "--tasks", "100",
         "--runs", "1"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["tasks_per_s_median"] > 0 and result["warm_latency_ms_median"] > 0
    assert set(result["cpu_us_per_task"]) >= {"driver", "task processes"}


@pytest.mark.timeout(240)
def test_local_and_cluster_in_one_run(tmp_path: Path) -> None:
    """`--cluster 1 --engines serial,ember,ember-cluster`: Ember on local[2] and on the
    cluster in one run (the cluster's context in a process of its own), answers agreeing."""
    out = tmp_path / "results.jsonl"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--cluster", "1", "--engines",
         "serial,ember,ember-cluster", "--only", "pi,tiny_tasks,cold_start", "--scale",
         "0.005", "--runs", "1", "--json", str(out)],
        cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=230)
    assert proc.returncode == 0, proc.stderr[-4000:]
    records = [json.loads(line) for line in out.read_text().splitlines()]
    got = {(r["workload"], r["engine"]): r for r in records}
    for w in ("pi", "tiny_tasks", "cold_start"):
        assert got[(w, "ember-cluster")]["status"] == "ok", got[(w, "ember-cluster")]
        assert got[(w, "ember-cluster")]["master"].startswith("spark://")
        assert got[(w, "ember")]["master"] == "local[2]"


@pytest.mark.timeout(120)
def test_iterative_parallel_smoke() -> None:
    """`python -m benchmarks.iterative_parallel` times a pass in one plain process, in two,
    and on Ember in the same round and reports the ratios."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.iterative_parallel", "--records", "20000",
         "--rounds", "1"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ember_vs_plain_2proc_median"] > 0 and result["serial_s_median"] > 0


@pytest.mark.timeout(120)
def test_spark_perf_smoke() -> None:
    """`python -m benchmarks.spark_perf` runs spark-perf's PySpark core tests with
    spark-perf's options, scaled, and prints each test's median."""
    from benchmarks.spark_perf import TESTS, options_for
    assert options_for("SortByKey", 0.005)["num-records"] == 100_000
    assert options_for("AggregateByKeyInt", 0.005)["reduce-tasks"] == 4
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.spark_perf", "--engines", "ember", "--rounds", "1",
         "--trials", "1", "--scale", "0.0005", "--num-tasks", "20"], cwd=str(ROOT), env=env,
        capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["medians"]["ember"]) == set(TESTS)
    assert all(m[0] > 0 for m in result["medians"]["ember"].values())


def test_read_twice_smoke() -> None:
    """`python -m benchmarks.read_twice` times the operations that read their input twice
    over a parsed text file."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.read_twice", "--lines", "2000", "--partitions", "4",
         "--runs", "1"], cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=110)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(result["medians"]) == {"sortByKey", "sortBy", "zipWithIndex", "histogram",
                                      "takeSample"}


@pytest.mark.timeout(300)
def test_instructions_smoke() -> None:
    """`python -m benchmarks.instructions` counts, under valgrind, what a warm job costs the
    driver and its task processes in instructions."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.instructions", "--jobs", "5"], cwd=str(ROOT),
        env=env, capture_output=True, text=True, timeout=290)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["workload"] == "warm_job_instructions" and result["processes"] == 4
    # a warm job is hundreds of thousands of instructions in the driver, fewer in the tasks
    assert 100_000 < result["driver_per_job"] < 20_000_000
    assert 10_000 < result["task_processes_per_job"] < result["driver_per_job"]
