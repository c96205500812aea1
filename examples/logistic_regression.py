"""Batch gradient-descent logistic regression, Ember's port of Spark's
examples/src/main/python/logistic_regression.py.

Why it exists: shows mapPartitions turning lines into one NumPy matrix per partition,
caching those matrices, and reducing NumPy gradients on each iteration.

Usage: logistic_regression <file> <iterations>
Each input line is `<label> <x1> ... <x10>` (label -1 or 1; commas also accepted).
"""
import sys
from typing import Iterable, List

import numpy as np

from ember.sql import SparkSession

D = 10  # number of features


def readPointBatch(iterator: Iterable[str]) -> List[np.ndarray]:
    """Parse all lines of a partition into a single (rows, D + 1) matrix."""
    rows = list(iterator)
    matrix = np.zeros((len(rows), D + 1))
    for i, line in enumerate(rows):
        values = [float(tok) for tok in line.replace(",", " ").split()]
        matrix[i] = np.asarray(values, dtype=np.float32)
    return [matrix]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: logistic_regression <file> <iterations>", file=sys.stderr)
        sys.exit(-1)

    print(
        """WARN: This is a naive implementation of Logistic Regression and is
      given as an example!
      Please refer to examples/src/main/python/ml/logistic_regression_with_elastic_net.py
      to see how ML's implementation is used.""",
        file=sys.stderr,
    )

    spark = SparkSession.builder.appName("PythonLR").getOrCreate()

    points = (
        spark.read.text(sys.argv[1]).rdd.map(lambda row: row[0]).mapPartitions(readPointBatch).cache()
    )
    iterations = int(sys.argv[2])

    # Start from a random weight vector in [-1, 1)^D.
    w = 2 * np.random.random(size=D) - 1
    print("Initial w: " + str(w))

    def gradient(matrix: np.ndarray, w: np.ndarray) -> np.ndarray:
        """Sum of the logistic-loss gradients of all points in one matrix."""
        Y = matrix[:, 0]
        X = matrix[:, 1:]
        return ((1.0 / (1.0 + np.exp(-Y * X.dot(w))) - 1.0) * Y * X.T).sum(1)

    def add(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        x += y
        return x

    for i in range(iterations):
        print("On iteration %i" % (i + 1))
        w -= points.map(lambda m: gradient(m, w)).reduce(add)

    print("Final w: " + str(w))

    spark.stop()
