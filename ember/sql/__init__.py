"""The sliver of pyspark.sql that RDD programs use: Row and a minimal SparkSession."""
from ember.sql.row import Row
from ember.sql.session import DataFrame, SparkSession

__all__ = ["Row", "SparkSession", "DataFrame", "is_remote"]


def is_remote() -> bool:
    """PySpark's check for a Spark Connect session: Ember runs the classic API only."""
    return False
