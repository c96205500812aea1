"""Ember's versions, at the bottom of the import graph.

Why a module of its own: the master, the REST gateway, the UI and the event log all report
the Spark version they speak, and reading it from `ember.context` made every daemon import the
driver runtime (and closed an import cycle through `ember.ui`). This module imports nothing.

Ember follows pip-installed PySpark: the package's version is the Spark version it
implements, so `ember.__version__`, `sc.version` and the wire's `sparkVersion` agree.
"""

# The Spark (and PySpark) version whose behaviour, messages and JSON Ember reproduces.
SPARK_VERSION = "4.1.1"

# Ember's own release (pyproject.toml's version): the same number, as with PySpark.
EMBER_VERSION = "4.1.1"

__version__ = EMBER_VERSION
