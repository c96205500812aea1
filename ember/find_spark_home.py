"""`pyspark.find_spark_home._find_spark_home`: where the installation lives. PySpark looks
for a Spark distribution (bin/spark-submit and jars); Ember's is the directory that holds
the `ember` package, unless SPARK_HOME names another."""
from __future__ import annotations

import os


def _find_spark_home() -> str:
    return os.environ.get("SPARK_HOME") or os.path.dirname(
        os.path.dirname(os.path.abspath(__file__)))
