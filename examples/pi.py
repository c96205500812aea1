"""Monte Carlo estimate of pi, Ember's port of Spark's examples/src/main/python/pi.py.

Why it exists: the smallest end-to-end program (parallelize, map, reduce) that proves a
PySpark job runs unchanged on Ember; it prints the same line as Spark's version.

Usage: pi [partitions]
"""
import sys
from operator import add
from random import random

from ember.sql import SparkSession


def inside(_: int) -> int:
    """Throw one dart at the square [-1, 1]^2; 1 if it lands in the unit circle."""
    x = random() * 2 - 1
    y = random() * 2 - 1
    return 1 if x * x + y * y <= 1 else 0


if __name__ == "__main__":
    spark = SparkSession.builder.appName("PythonPi").getOrCreate()

    partitions = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    n = 100000 * partitions

    hits = spark.sparkContext.parallelize(range(1, n + 1), partitions).map(inside).reduce(add)
    print("Pi is roughly %f" % (4.0 * hits / n))

    spark.stop()
