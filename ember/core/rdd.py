"""`pyspark.core.rdd` is `ember.rdd` (see ember.core)."""
import sys

import ember.rdd

sys.modules[__name__] = ember.rdd
