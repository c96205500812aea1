"""`pyspark.core.files` is `ember.files` (see ember.core)."""
import sys

import ember.files

sys.modules[__name__] = ember.files
