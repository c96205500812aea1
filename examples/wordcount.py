"""Word count, Ember's port of Spark's examples/src/main/python/wordcount.py.

Why it exists: the canonical shuffle program (flatMap, map, reduceByKey, collect) reading
a file through the SparkSession shim; output is one `word: count` line per distinct word.

Usage: wordcount <file>
"""
import sys
from operator import add

from ember.sql import SparkSession

if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("Usage: wordcount <file>", file=sys.stderr)
        sys.exit(-1)

    spark = SparkSession.builder.appName("PythonWordCount").getOrCreate()

    lines = spark.read.text(sys.argv[1]).rdd.map(lambda row: row[0])
    counts = (
        lines.flatMap(lambda line: line.split(" "))
        .map(lambda word: (word, 1))
        .reduceByKey(add)
    )
    for word, count in counts.collect():
        print("%s: %i" % (word, count))

    spark.stop()
