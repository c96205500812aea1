"""`pyspark.core.context` is `ember.context` (see ember.core)."""
import sys

import ember.context

sys.modules[__name__] = ember.context
