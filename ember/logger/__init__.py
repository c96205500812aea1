"""`pyspark.logger`: PySpark 4's structured (JSON lines) logger for applications."""
from ember.logger.logger import SPARK_LOG_SCHEMA, PySparkLogger

__all__ = ["PySparkLogger", "SPARK_LOG_SCHEMA"]
