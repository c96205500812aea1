"""PySpark's pyspark.cloudpickle (a vendored copy there): here the cloudpickle package Ember
pickles closures with, under the name PySpark programs import it by."""
from cloudpickle import *  # noqa: F401,F403
