"""Ember's benchmark suite: the same workloads on Ember, plain Python, PySpark and Dask.

Why it exists: Ember promises PySpark's programming model at a useful speed; the only
honest way to know is to time the classic workloads (word count, pi, sort, tiny tasks,
job latency, start-up, cached iteration) against the obvious single-process Python
program and, where installed, against PySpark and Dask, on the same machine in the same
run, checking that every engine computes the same answer. The master URL is a parameter
so the very same numbers can be taken on a `spark://host:port` cluster.

Run `python -m benchmarks --help`; see `benchmarks/runner.py` for the output formats.
"""

__all__ = ["main"]


def main(argv: "list[str] | None" = None) -> int:
    """Entry point used by `python -m benchmarks`."""
    from benchmarks.runner import main as _main

    return _main(argv)
