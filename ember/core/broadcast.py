"""`pyspark.core.broadcast` is `ember.broadcast` (see ember.core)."""
import sys

import ember.broadcast

sys.modules[__name__] = ember.broadcast
