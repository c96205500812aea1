"""K-means clustering from scratch, Ember's port of Spark's examples/src/main/python/kmeans.py.

Why it exists: an iterative job over cached NumPy vectors that uses takeSample for the
initial centers and reduceByKey to average each cluster; prints the final centers.

Usage: kmeans <file> <k> <convergeDist>
Each input line is one point: space-separated floats.
"""
import sys
from typing import List

import numpy as np

from ember.sql import SparkSession


def parseVector(line: str) -> np.ndarray:
    return np.array([float(tok) for tok in line.split(" ")])


def closestPoint(p: np.ndarray, centers: List[np.ndarray]) -> int:
    """Index of the center nearest to p (squared Euclidean distance)."""
    best_index = 0
    best_dist = float("+inf")
    for i, center in enumerate(centers):
        dist = np.sum((p - center) ** 2)
        if dist < best_dist:
            best_dist = dist
            best_index = i
    return best_index


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print("Usage: kmeans <file> <k> <convergeDist>", file=sys.stderr)
        sys.exit(-1)

    print(
        """WARN: This is a naive implementation of KMeans Clustering and is given
       as an example! Please refer to examples/src/main/python/ml/kmeans_example.py for an
       example on how to use ML's KMeans implementation.""",
        file=sys.stderr,
    )

    spark = SparkSession.builder.appName("PythonKMeans").getOrCreate()

    lines = spark.read.text(sys.argv[1]).rdd.map(lambda row: row[0])
    data = lines.map(parseVector).cache()
    K = int(sys.argv[2])
    convergeDist = float(sys.argv[3])

    kPoints = data.takeSample(False, K, 1)
    tempDist = 1.0

    while tempDist > convergeDist:
        closest = data.map(lambda p: (closestPoint(p, kPoints), (p, 1)))
        pointStats = closest.reduceByKey(
            lambda a, b: (a[0] + b[0], a[1] + b[1])
        )
        newPoints = pointStats.map(lambda st: (st[0], st[1][0] / st[1][1])).collect()

        tempDist = sum(np.sum((kPoints[iK] - p) ** 2) for (iK, p) in newPoints)

        for iK, p in newPoints:
            kPoints[iK] = p

    print("Final centers: " + str(kPoints))

    spark.stop()
