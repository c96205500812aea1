"""spark.executor.pyspark.memory per task process, shared by the standalone executor and the
local driver's backend; its own module so that a local driver computes it without importing
the executor's RPC and deploy-message modules at start-up."""
from __future__ import annotations

from ember import config


def pyspark_worker_memory_mb(conf: dict[str, str]) -> int | None:
    """Each task process's share of spark.executor.pyspark.memory: divided by
    spark.executor.cores (default 1), as Spark's PythonRunner divides it."""
    total = config.read(conf, "spark.executor.pyspark.memory")
    if not total:
        return None
    return max(total // max(config.read(conf, "spark.executor.cores", 1), 1), 1)
