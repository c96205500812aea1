"""Per-partition random samplers behind ``RDD.sample``, ``randomSplit`` and ``sampleByKey``.

Sampling must be reproducible: a lost partition that is recomputed, or the
several RDDs produced by ``randomSplit``, must see exactly the same random draws.
Like PySpark, every sampler carries one seed (drawn on the driver when the user
gives none) and each partition derives its own generator as
``random.Random(seed ^ split)`` followed by ten warm-up draws.  The sequence of
draws per element is the same as PySpark's, so a given seed selects the same
elements as PySpark does for the same partitioning.  Only the standard library
is used (no numpy).

Usage from the RDD layer::

    rdd.mapPartitionsWithIndex(RDDSampler(False, 0.1, seed).func, True)
"""

from __future__ import annotations

import math
import random
import sys
from typing import Any, Dict, Iterable, Iterator, Optional, Tuple, TypeVar

__all__ = ["RDDSamplerBase", "RDDSampler", "RDDRangeSampler", "RDDStratifiedSampler"]

T = TypeVar("T")


def _partition_random(seed: int, split: int) -> random.Random:
    """The generator for one partition: seeded by seed XOR split, then mixed."""
    rng = random.Random(seed ^ split)
    # Seeds of neighbouring partitions differ in few bits; burn a few draws.
    for _ in range(10):
        rng.randint(0, 1)
    return rng


def _poisson(rng: random.Random, mean: float) -> int:
    """Draw from Poisson(mean) without numpy.

    Small means use Knuth's multiplication method; large means count
    exponential inter-arrival times within one unit of time (log domain, so
    ``exp(-mean)`` never underflows).
    """
    if mean < 20.0:
        threshold = math.exp(-mean)
        k = 0
        p = rng.random()
        while p > threshold:
            k += 1
            p *= rng.random()
        return k
    k = 0
    t = rng.expovariate(mean)
    while t < 1.0:
        k += 1
        t += rng.expovariate(mean)
    return k


class RDDSamplerBase:
    """Seed handling and random draws shared by all samplers.

    ``func(split, iterator)`` is what the RDD layer maps over partitions.  Each
    call builds its own generator, so one sampler object may safely be used by
    several partitions at once (e.g. tasks running in threads).
    """

    def __init__(self, withReplacement: bool, seed: Optional[int] = None) -> None:  # noqa: N803
        self._seed = seed if seed is not None else random.randint(0, sys.maxsize)
        self._with_replacement = withReplacement
        self._random: Optional[random.Random] = None

    def initRandomGenerator(self, split: int) -> None:  # noqa: N802
        """Set ``self._random`` to the generator of partition ``split`` (PySpark API)."""
        self._random = _partition_random(self._seed, split)

    def getUniformSample(self) -> float:  # noqa: N802
        """Next uniform draw in [0, 1) from ``self._random``."""
        assert self._random is not None, "call initRandomGenerator(split) first"
        return self._random.random()

    def getPoissonSample(self, mean: float) -> int:  # noqa: N802
        """Next Poisson(mean) draw from ``self._random``."""
        assert self._random is not None, "call initRandomGenerator(split) first"
        return _poisson(self._random, mean)

    def func(self, split: int, iterator: Iterable[Any]) -> Iterator[Any]:
        raise NotImplementedError


class RDDSampler(RDDSamplerBase):
    """Keeps each element with probability ``fraction`` (Bernoulli), or, with
    replacement, emits each element Poisson(``fraction``) times."""

    def __init__(self, withReplacement: bool, fraction: float, seed: Optional[int] = None) -> None:  # noqa: N803
        super().__init__(withReplacement, seed)
        self._fraction = fraction

    def func(self, split: int, iterator: Iterable[T]) -> Iterator[T]:
        rng = _partition_random(self._seed, split)
        fraction = self._fraction
        if self._with_replacement:
            for obj in iterator:
                for _ in range(_poisson(rng, fraction)):
                    yield obj
        else:
            draw = rng.random
            for obj in iterator:
                if draw() < fraction:
                    yield obj


class RDDRangeSampler(RDDSamplerBase):
    """Keeps the elements whose uniform draw falls in [lowerBound, upperBound).

    ``randomSplit`` builds one of these per output RDD, all with the same seed,
    so the ranges partition the draws and every element lands in exactly one split.
    """

    def __init__(self, lowerBound: float, upperBound: float, seed: Optional[int] = None) -> None:  # noqa: N803
        super().__init__(False, seed)
        self._lower_bound = lowerBound
        self._upper_bound = upperBound

    def func(self, split: int, iterator: Iterable[T]) -> Iterator[T]:
        rng = _partition_random(self._seed, split)
        draw = rng.random
        lower, upper = self._lower_bound, self._upper_bound
        for obj in iterator:
            if lower <= draw() < upper:
                yield obj


class RDDStratifiedSampler(RDDSamplerBase):
    """Samples (key, value) pairs with a per-key fraction (``sampleByKey``).

    A key missing from ``fractions`` raises KeyError, as in PySpark.
    """

    def __init__(
        self, withReplacement: bool, fractions: Dict[Any, float], seed: Optional[int] = None  # noqa: N803
    ) -> None:
        super().__init__(withReplacement, seed)
        self._fractions = fractions

    def func(  # type: ignore[override]
        self, split: int, iterator: Iterable[Tuple[Any, Any]]
    ) -> Iterator[Tuple[Any, Any]]:
        rng = _partition_random(self._seed, split)
        fractions = self._fractions
        if self._with_replacement:
            for key, val in iterator:
                for _ in range(_poisson(rng, fractions[key])):
                    yield key, val
        else:
            draw = rng.random
            for key, val in iterator:
                if draw() < fractions[key]:
                    yield key, val
