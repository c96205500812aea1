"""Transitive closure, Ember's port of Spark's examples/src/main/python/transitive_closure.py.

Why it exists: a fixed-point loop of join, union and distinct over a cached RDD whose
lineage grows each round; prints `TC has <n> edges` for a fixed random graph.

Usage: transitive_closure [partitions]
"""
import sys
from random import Random
from typing import Set, Tuple

from ember.sql import SparkSession

numEdges = 200
numVertices = 100
rand = Random(42)


def generateGraph() -> Set[Tuple[int, int]]:
    """200 distinct directed edges between 100 vertices, without self loops."""
    edges: Set[Tuple[int, int]] = set()
    while len(edges) < numEdges:
        src = rand.randrange(0, numVertices)
        dst = rand.randrange(0, numVertices)
        if src != dst:
            edges.add((src, dst))
    return edges


if __name__ == "__main__":
    spark = SparkSession.builder.appName("PythonTransitiveClosure").getOrCreate()
    sc = spark.sparkContext

    partitions = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    tc = sc.parallelize(generateGraph(), partitions).cache()

    # Each round extends every known path (y, z) by an edge (x, y) into (x, z). join()
    # matches on the key, so the edges are kept reversed, keyed by their destination.
    edges = tc.map(lambda src_dst: (src_dst[1], src_dst[0]))

    next_count = tc.count()
    while True:
        old_count = next_count
        # tc.join(edges) yields (y, (z, x)); keep the new path (x, z).
        new_paths = tc.join(edges).map(lambda y_zx: (y_zx[1][1], y_zx[1][0]))
        tc = tc.union(new_paths).distinct().cache()
        next_count = tc.count()
        if next_count == old_count:
            break

    print("TC has %i edges" % tc.count())

    spark.stop()
