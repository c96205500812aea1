"""Run every program in examples/ as its own process and check what it prints.

Why: the examples are the promise that a PySpark program runs unchanged on Ember; running
them end to end as a user would (`python examples/x.py args`) catches breakage anywhere in
the stack, and each output is checked against a plain-Python computation of the same data.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from random import Random

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
DATA = EXAMPLES / "data"

pytestmark = pytest.mark.timeout(120)


def run_example(
    name: str, *args: str, timeout: float = 110, conf: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if conf:  # what `ember submit --conf k=v` hands to the application
        env["EMBER_SPARK_CONF"] = "\n".join(f"{k}={v}" for k, v in conf.items())
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok_lines(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return [line for line in proc.stdout.splitlines() if line.strip()]


# --------------------------------------------------------------------------- usage errors


@pytest.mark.parametrize(
    "name, usage",
    [
        ("wordcount.py", "Usage: wordcount <file>"),
        ("sort.py", "Usage: sort <file>"),
        ("pagerank.py", "Usage: pagerank <file> <iterations>"),
        ("logistic_regression.py", "Usage: logistic_regression <file> <iterations>"),
        ("kmeans.py", "Usage: kmeans <file> <k> <convergeDist>"),
    ],
)
def test_usage_error(name: str, usage: str) -> None:
    proc = run_example(name)
    assert proc.returncode == 255  # sys.exit(-1)
    assert usage in proc.stderr.splitlines()
    assert proc.stdout == ""


# --------------------------------------------------------------------------- programs


def test_pi() -> None:
    lines = ok_lines(run_example("pi.py", "4"))
    assert len(lines) == 1
    m = re.fullmatch(r"Pi is roughly (\d+\.\d{6})", lines[0])
    assert m, lines
    assert abs(float(m.group(1)) - 3.14159) < 0.05


def test_wordcount() -> None:
    path = DATA / "words.txt"
    expected: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        expected.update(line.split(" "))
    got: dict[str, int] = {}
    for line in ok_lines(run_example("wordcount.py", str(path))):
        word, count = line.rsplit(": ", 1)
        assert word not in got, f"word printed twice: {word!r}"
        got[word] = int(count)
    assert got == dict(expected)


def test_sort() -> None:
    path = DATA / "numbers.txt"
    expected = sorted(int(tok) for line in path.read_text().splitlines() for tok in line.split(" "))
    got = [int(line) for line in ok_lines(run_example("sort.py", str(path)))]
    assert got == expected


def reference_pagerank(path: Path, iterations: int) -> dict[str, float]:
    """The example's algorithm, step by step, with dicts instead of RDDs."""
    edges = {tuple(re.split(r"\s+", line)[:2]) for line in path.read_text().splitlines()}
    links: dict[str, list[str]] = defaultdict(list)
    for src, dst in edges:
        links[src].append(dst)
    ranks = {url: 1.0 for url in links}
    num_vals = len(ranks)
    for _ in range(iterations):
        contribs: dict[str, float] = defaultdict(float)
        for url, rank in ranks.items():
            targets = links.get(url)
            if targets:  # join keeps only urls that have links
                for dst in targets:
                    contribs[dst] += rank / len(targets)
        ranks = {url: c * 0.85 + (1 / num_vals) * 0.15 for url, c in contribs.items()}
    return ranks


def test_pagerank() -> None:
    path = DATA / "pagerank_data.txt"
    proc = run_example("pagerank.py", str(path), "10")
    assert "WARN: This is a naive implementation of PageRank" in proc.stderr
    got: dict[str, float] = {}
    for line in ok_lines(proc):
        m = re.fullmatch(r"(\S+) has rank: (\S+)\.", line)
        assert m, line
        got[m.group(1)] = float(m.group(2))
    expected = reference_pagerank(path, 10)
    assert set(got) == set(expected)
    for url, rank in expected.items():
        assert got[url] == pytest.approx(rank, rel=1e-9), url


def reference_transitive_closure() -> int:
    """Same graph as the example (Random(42), 200 edges, 100 vertices), closed by BFS."""
    rand = Random(42)
    edges: set[tuple[int, int]] = set()
    while len(edges) < 200:
        src, dst = rand.randrange(0, 100), rand.randrange(0, 100)
        if src != dst:
            edges.add((src, dst))
    succ: dict[int, set[int]] = defaultdict(set)
    for src, dst in edges:
        succ[src].add(dst)
    total = 0
    for start in list(succ):
        seen: set[int] = set()
        frontier = list(succ[start])
        while frontier:
            v = frontier.pop()
            if v not in seen:
                seen.add(v)
                frontier.extend(succ.get(v, ()))
        total += len(seen)  # paths of length >= 1 from start (may include start itself)
    return total


def test_transitive_closure() -> None:
    # With PySpark's defaults every round's union + distinct doubles the partition count
    # (distinct() reduces into as many partitions as its input has), so the 14 rounds this
    # graph needs end with 2**15 partitions. Users run it with a fixed parallelism, as here
    # (`ember submit --conf spark.default.parallelism=2 ...`); the answer is the same.
    lines = ok_lines(run_example("transitive_closure.py", "2", conf={"spark.default.parallelism": "2"}))
    assert lines == [f"TC has {reference_transitive_closure()} edges"]


def test_logistic_regression() -> None:
    proc = run_example("logistic_regression.py", str(DATA / "lr_data.txt"), "3")
    assert "WARN: This is a naive implementation of Logistic Regression" in proc.stderr
    lines = ok_lines(proc)
    assert lines[0].startswith("Initial w: [")
    assert [l for l in lines if l.startswith("On iteration")] == [
        "On iteration 1",
        "On iteration 2",
        "On iteration 3",
    ]
    # numpy wraps a long vector over several lines, so "Final w" is the last line that starts one
    start = lines.index("On iteration 3") + 1
    assert lines[start].startswith("Final w: ["), lines[start:]
    final = " ".join(lines[start:])
    numbers = re.findall(r"-?\d+\.\d*(?:e[-+]\d+)?", final)
    assert len(numbers) == 10, final


def test_kmeans() -> None:
    proc = run_example("kmeans.py", str(DATA / "kmeans_data.txt"), "3", "0.01")
    assert "WARN: This is a naive implementation of KMeans Clustering" in proc.stderr
    lines = ok_lines(proc)
    final = " ".join(lines)
    assert lines[0].startswith("Final centers: [")
    assert final.count("array(") == 3, final
