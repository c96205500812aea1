"""Integer sort, Ember's port of Spark's examples/src/main/python/sort.py.

Why it exists: exercises sortByKey (sampling, range partitioning, per-partition sort) and
brings the whole sorted data set back to the driver, printing one number per line.

Usage: sort <file>   (a text file of space-separated integers)
"""
import sys

from ember.sql import SparkSession

if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("Usage: sort <file>", file=sys.stderr)
        sys.exit(-1)

    spark = SparkSession.builder.appName("PythonSort").getOrCreate()

    lines = spark.read.text(sys.argv[1]).rdd.map(lambda row: row[0])
    keyed = lines.flatMap(lambda line: line.split(" ")).map(lambda tok: (int(tok), 1))
    # Collecting everything to the driver is only reasonable for a demo-sized input.
    for number, _one in keyed.sortByKey().collect():
        print(number)

    spark.stop()
