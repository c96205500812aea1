"""Test beds that ship with the package (multi-host namespaces for tests and benchmarks),
and `utils`: PySpark's `pyspark.testing.utils` for the RDD API."""
