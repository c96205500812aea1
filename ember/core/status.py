"""`pyspark.core.status` is `ember.status` (see ember.core)."""
import sys

import ember.status

sys.modules[__name__] = ember.status
