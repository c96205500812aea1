"""Running summary statistics for numeric RDDs (``RDD.stats()`` and friends).

PySpark computes count/mean/variance/min/max in one pass per partition and then
combines the per-partition counters on the driver.  This module provides the
counter that makes that possible: values are folded in with Welford's update and
two counters are combined with Chan et al.'s parallel formula, exactly as
``pyspark.statcounter.StatCounter`` (itself a port of Spark's Scala class) does,
so results match PySpark bit for bit.  It needs no third-party packages, except numpy for
values that are numpy arrays (element-wise statistics, as PySpark computes them).
"""

from __future__ import annotations

import copy as _copy
import math
from typing import Any, Dict, Iterable, Iterator, Optional, Union

__all__ = ["StatCounter"]


def _sqrt(x: Any) -> Any:
    # numpy.sqrt (used by PySpark when numpy is present) yields nan instead of raising.
    if not isinstance(x, (int, float)):
        import numpy
        return numpy.sqrt(x)
    if x != x or x < 0:
        return float("nan")
    return math.sqrt(x)


class StatCounter:
    """Tracks count, mean, variance (via the sum of squared deviations), min and max.

    Attribute names (``n``, ``mu``, ``m2``, ``maxValue``, ``minValue``) are PySpark's.
    Note that, as in PySpark, the mean and sum of an empty counter are ``0.0``, its
    min is ``inf``, its max ``-inf`` and its variances ``nan``.
    """

    def __init__(self, values: Optional[Iterable[float]] = None) -> None:
        self.n = 0  # number of values seen
        self.mu = 0.0  # running mean
        self.m2 = 0.0  # running sum of squared deviations from the mean
        self.maxValue = float("-inf")
        self.minValue = float("inf")
        if values is not None:
            self._merge_numbers(iter(values))

    def _merge_numbers(self, values: Iterator) -> None:
        """merge() for each value, its arithmetic inline (the same operations in the same
        order, so the same bits) while the values are plain ints and floats: a method call
        a value was half of ``StatCounter(values)``'s time. Other values (bool, numpy)
        go through merge()."""
        n, mu, m2, hi, lo = self.n, self.mu, self.m2, self.maxValue, self.minValue
        other = False
        for value in values:
            cls = value.__class__
            if cls is not float and cls is not int:
                other = True
                break
            delta = value - mu
            n += 1
            mu += delta / n
            m2 += delta * (value - mu)
            fv = float(value)
            if (fv > hi or fv != fv) and hi == hi:
                hi = fv
            if (fv < lo or fv != fv) and lo == lo:
                lo = fv
        self.n, self.mu, self.m2, self.maxValue, self.minValue = n, mu, m2, hi, lo
        if other:
            self.merge(value)
            for value in values:
                self.merge(value)

    def merge(self, value: float) -> "StatCounter":
        """Fold one value into the statistics (Welford's update); returns self."""
        delta = value - self.mu
        self.n += 1
        self.mu += delta / self.n
        self.m2 += delta * (value - self.mu)
        if not isinstance(value, (int, float)):
            # numpy arrays (vectors of features): element-wise, as PySpark's numpy.maximum
            import numpy
            self.maxValue = numpy.maximum(self.maxValue, value)
            self.minValue = numpy.minimum(self.minValue, value)
            return self
        # PySpark uses numpy.maximum/minimum: results are floats and NaN is sticky.
        fv = float(value)
        if fv > self.maxValue or fv != fv:
            if self.maxValue == self.maxValue:  # do not replace a NaN already seen
                self.maxValue = fv
        if fv < self.minValue or fv != fv:
            if self.minValue == self.minValue:
                self.minValue = fv
        return self

    def mergeStats(self, other: "StatCounter") -> "StatCounter":  # noqa: N802
        """Combine another counter into this one (Chan's parallel update); returns self."""
        if not isinstance(other, StatCounter):
            raise TypeError("Can only merge StatCounter but got %s" % type(other))
        if other is self:
            return self.mergeStats(other.copy())
        if self.n == 0:
            self.n = other.n
            self.mu = other.mu
            self.m2 = other.m2
            self.maxValue = other.maxValue
            self.minValue = other.minValue
        elif other.n != 0:
            n_total = self.n + other.n
            delta = other.mu - self.mu
            # Pick the numerically stablest form depending on the size ratio.
            if other.n * 10 < self.n:
                self.mu = self.mu + (delta * other.n) / n_total
            elif self.n * 10 < other.n:
                self.mu = other.mu - (delta * self.n) / n_total
            else:
                self.mu = (self.mu * self.n + other.mu * other.n) / n_total
            self.maxValue = _nan_max(self.maxValue, other.maxValue)
            self.minValue = _nan_min(self.minValue, other.minValue)
            self.m2 += other.m2 + (delta * delta * self.n * other.n) / n_total
            self.n = n_total
        return self

    def copy(self) -> "StatCounter":
        """An independent deep copy of this counter."""
        return _copy.deepcopy(self)

    def count(self) -> int:
        return int(self.n)

    def mean(self) -> float:
        return self.mu

    def sum(self) -> float:
        return self.n * self.mu

    def min(self) -> float:
        return self.minValue

    def max(self) -> float:
        return self.maxValue

    def variance(self) -> float:
        """Population variance (divides by N); nan when empty."""
        if self.n == 0:
            return float("nan")
        return self.m2 / self.n

    def sampleVariance(self) -> float:  # noqa: N802
        """Sample variance (divides by N-1); nan when fewer than two values."""
        if self.n <= 1:
            return float("nan")
        return self.m2 / (self.n - 1)

    def stdev(self) -> float:
        return _sqrt(self.variance())

    def sampleStdev(self) -> float:  # noqa: N802
        return _sqrt(self.sampleVariance())

    def asDict(self, sample: bool = False) -> Dict[str, Union[float, int]]:  # noqa: N802
        """The statistics as a dict.

        Faithful to PySpark, including its quirk: with the default ``sample=False``
        the ``stdev``/``variance`` entries are the *sample* (N-1) ones, and with
        ``sample=True`` they are the population ones.
        """
        return {
            "count": self.count(),
            "mean": self.mean(),
            "sum": self.sum(),
            "min": self.min(),
            "max": self.max(),
            "stdev": self.stdev() if sample else self.sampleStdev(),
            "variance": self.variance() if sample else self.sampleVariance(),
        }

    def __repr__(self) -> str:
        return "(count: %s, mean: %s, stdev: %s, max: %s, min: %s)" % (
            self.count(),
            self.mean(),
            self.stdev(),
            self.max(),
            self.min(),
        )


def _nan_max(a: Any, b: Any) -> Any:
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        import numpy
        return numpy.maximum(a, b)
    if a != a or b != b:
        return float("nan")
    return a if a >= b else b


def _nan_min(a: Any, b: Any) -> Any:
    if not (isinstance(a, (int, float)) and isinstance(b, (int, float))):
        import numpy
        return numpy.minimum(a, b)
    if a != a or b != b:
        return float("nan")
    return a if a <= b else b
