"""Naive PageRank, Ember's port of Spark's examples/src/main/python/pagerank.py.

Why it exists: an iterative job mixing a cached groupByKey result with join, flatMap and
reduceByKey on every round; prints `<url> has rank: <rank>.` for each ranked URL.

Usage: pagerank <file> <iterations>
The file holds one edge per line: `URL neighbor-URL` separated by whitespace.
"""
import re
import sys
from operator import add
from typing import Iterable, Iterator, Tuple

from ember.sql import SparkSession


def computeContribs(urls: Iterable[str], rank: float) -> Iterator[Tuple[str, float]]:
    """Split a page's rank evenly over the pages it links to."""
    targets = list(urls)
    share = rank / len(targets)
    for url in targets:
        yield url, share


def parseNeighbors(line: str) -> Tuple[str, str]:
    """`src   dst` -> (src, dst)."""
    fields = re.split(r"\s+", line)
    return fields[0], fields[1]


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("Usage: pagerank <file> <iterations>", file=sys.stderr)
        sys.exit(-1)

    print(
        "WARN: This is a naive implementation of PageRank and is given as an example!\n"
        + "Please refer to PageRank implementation provided by graphx",
        file=sys.stderr,
    )

    spark = SparkSession.builder.appName("PythonPageRank").getOrCreate()

    lines = spark.read.text(sys.argv[1]).rdd.map(lambda row: row[0])

    # url -> its (distinct) outgoing links; reused on every iteration, so cache it.
    links = lines.map(parseNeighbors).distinct().groupByKey().cache()

    # Every page that links somewhere starts with rank 1.0.
    ranks = links.map(lambda url_links: (url_links[0], 1.0))
    num_vals = ranks.count()

    for _ in range(int(sys.argv[2])):
        contribs = links.join(ranks).flatMap(
            lambda url_links_rank: computeContribs(url_links_rank[1][0], url_links_rank[1][1])
        )
        ranks = contribs.reduceByKey(add).mapValues(
            lambda rank: rank * 0.85 + (1 / num_vals) * 0.15
        )

    for link, rank in ranks.collect():
        print("%s has rank: %s." % (link, rank))

    spark.stop()
