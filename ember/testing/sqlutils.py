"""`pyspark.testing.sqlutils`, as far as the RDD API goes: PySpark's RDD tests take
SPARK_HOME from here. Its SQL test cases need Spark SQL, which Ember does not have."""
from __future__ import annotations

from ember.testing.utils import (SPARK_HOME, have_pandas, have_pyarrow,  # noqa: F401
                                 pandas_requirement_message, pyarrow_requirement_message)
