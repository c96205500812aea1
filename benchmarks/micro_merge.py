"""Micro-benchmark: ExternalMerger.mergeValues vs a plain Python dict loop.

Merges N (word, 1) pairs (Zipf-like word frequencies, as in wordcount's
map-side combine) with ``operator.add`` and prints the time of each variant
and the ratio merger / plain loop.

    .venv/bin/python benchmarks/micro_merge.py [N] [DISTINCT_WORDS] [REPEAT]
"""

from __future__ import annotations

import operator
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from ember.shuffle.external import Aggregator, ExternalMerger  # noqa: E402


def make_pairs(n: int, distinct: int, seed: int = 42) -> list[tuple[str, int]]:
    rnd = random.Random(seed)
    words = ["word%d" % i for i in range(distinct)]
    weights = [1.0 / (i + 1) for i in range(distinct)]
    return [(w, 1) for w in rnd.choices(words, weights=weights, k=n)]


def plain_loop(pairs: list[tuple[str, int]]) -> dict:
    d: dict = {}
    for k, v in pairs:
        if k in d:
            d[k] += v
        else:
            d[k] = v
    return d


def plain_get_loop(pairs: list[tuple[str, int]]) -> dict:
    d: dict = {}
    get = d.get
    for k, v in pairs:
        d[k] = get(k, 0) + v
    return d


def merger_add(pairs: list[tuple[str, int]]) -> dict:
    m = ExternalMerger(Aggregator(lambda x: x, operator.add, operator.add), memory_limit=512)
    m.mergeValues(iter(pairs))
    return dict(m.items())


def merger_lambda(pairs: list[tuple[str, int]]) -> dict:
    m = ExternalMerger(Aggregator(lambda x: x, lambda a, b: a + b, lambda a, b: a + b), memory_limit=512)
    m.mergeValues(iter(pairs))
    return dict(m.items())


def merger_generic(pairs: list[tuple[str, int]]) -> dict:
    # ``b + a`` is not recognised as addition, so mergeValue is called per record
    m = ExternalMerger(Aggregator(lambda x: x, lambda a, b: b + a, lambda a, b: b + a), memory_limit=512)
    m.mergeValues(iter(pairs))
    return dict(m.items())


def best_of(fn, pairs, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(pairs)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 5_000_000
    distinct = int(sys.argv[2]) if len(sys.argv) > 2 else 50_000
    repeat = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    pairs = make_pairs(n, distinct)
    assert merger_add(pairs) == plain_loop(pairs)
    fns = (plain_loop, plain_get_loop, merger_add, merger_lambda, merger_generic)
    results = {fn.__name__: float("inf") for fn in fns}
    # interleaved, best of ``repeat``: robust against noise from other processes
    for _ in range(repeat):
        for fn in fns:
            results[fn.__name__] = min(results[fn.__name__], best_of(fn, pairs, 1))
    for fn in fns:
        t = results[fn.__name__]
        print("%-16s %7.3f s  %6.1f ns/record" % (fn.__name__, t, t / n * 1e9))
    base = results["plain_loop"]
    print("ratio merger(operator.add) / plain loop: %.2f" % (results["merger_add"] / base))
    print("ratio merger(lambda a,b: a+b) / plain loop: %.2f" % (results["merger_lambda"] / base))
    print("ratio merger(generic function call) / plain loop: %.2f" % (results["merger_generic"] / base))


if __name__ == "__main__":
    main()
