"""PySpark's `pyspark.resource`: stage-level resource requests for executors and tasks.

`ResourceProfileBuilder().require(ExecutorResourceRequests()...).require(
TaskResourceRequests()...).build` gives a ResourceProfile; `rdd.withResources(profile)` makes
the stage computing that RDD run with it (see `ember.scheduler.resource_profiles`).
"""
from ember.resource.information import ResourceInformation
from ember.resource.profile import ResourceProfile, ResourceProfileBuilder
from ember.resource.requests import (ExecutorResourceRequest, ExecutorResourceRequests,
                                     TaskResourceRequest, TaskResourceRequests)

__all__ = [
    "TaskResourceRequest", "TaskResourceRequests", "ExecutorResourceRequest",
    "ExecutorResourceRequests", "ResourceProfile", "ResourceInformation",
    "ResourceProfileBuilder",
]
