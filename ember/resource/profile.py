"""ResourceProfile and ResourceProfileBuilder (PySpark's pyspark.resource.profile).

Ids: as in Spark, the default profile (built from spark.executor.* / spark.task.* settings by
`ember.scheduler.resource_profiles`) is 0 and every other profile gets the next number from
one process-wide counter when it is built with a SparkContext running (PySpark then builds
the JVM profile at once), else when it is first attached to an RDD; before that `.id` raises
PySpark's RuntimeError.
"""
from __future__ import annotations

import itertools
import sys
import threading
from typing import Optional, Union

from ember.resource.requests import (ExecutorResourceRequest, ExecutorResourceRequests,
                                     TaskResourceRequest, TaskResourceRequests)

__all__ = ["ResourceProfile", "ResourceProfileBuilder", "next_profile_id"]

_ids = itertools.count(1)
_ids_lock = threading.Lock()


def next_profile_id() -> int:
    """Spark's ResourceProfile.getNextProfileId (0 is the default profile's)."""
    with _ids_lock:
        return next(_ids)


class ResourceProfile:
    """Executor and task requirements for the stage computing an RDD; immutable once built."""

    def __init__(self, _java_resource_profile: None = None,
                 _exec_req: Optional[dict[str, ExecutorResourceRequest]] = None,
                 _task_req: Optional[dict[str, TaskResourceRequest]] = None) -> None:
        self._id: Optional[int] = None
        self._lock = threading.RLock()
        self._executor_resource_requests = dict(_exec_req or {})
        self._task_resource_requests = dict(_task_req or {})

    @property
    def id(self) -> int:
        """A unique id of this ResourceProfile."""
        with self._lock:
            if self._id is None:
                raise RuntimeError("SparkContext must be created to get the profile id.")
            return self._id

    def _ensure_id(self) -> int:
        """The id, taking the next one if the profile was built without a SparkContext."""
        with self._lock:
            if self._id is None:
                self._id = next_profile_id()
            return self._id

    @property
    def taskResources(self) -> dict[str, TaskResourceRequest]:
        return dict(self._task_resource_requests)

    @property
    def executorResources(self) -> dict[str, ExecutorResourceRequest]:
        return dict(self._executor_resource_requests)

    def _is_task_profile(self) -> bool:
        """Spark builds a TaskResourceProfile when no executor resources were required."""
        return not self._executor_resource_requests


class ResourceProfileBuilder:
    """Collects executor and task requests; `build` (a property, as in PySpark) makes the
    profile."""

    def __init__(self) -> None:
        self._executor_resource_requests: dict[str, ExecutorResourceRequest] = {}
        self._task_resource_requests: dict[str, TaskResourceRequest] = {}

    def require(self, resourceRequest: Union[ExecutorResourceRequests, TaskResourceRequests]
                ) -> "ResourceProfileBuilder":
        if isinstance(resourceRequest, TaskResourceRequests):
            self._task_resource_requests.update(resourceRequest.requests)
        elif isinstance(resourceRequest, ExecutorResourceRequests):
            self._executor_resource_requests.update(resourceRequest.requests)
        else:
            raise TypeError("require() takes ExecutorResourceRequests or TaskResourceRequests, "
                            f"not {type(resourceRequest).__name__}")
        return self

    def clearExecutorResourceRequests(self) -> None:
        self._executor_resource_requests = {}

    def clearTaskResourceRequests(self) -> None:
        self._task_resource_requests = {}

    @property
    def taskResources(self) -> dict[str, TaskResourceRequest]:
        return self._task_resource_requests

    @property
    def executorResources(self) -> dict[str, ExecutorResourceRequest]:
        return self._executor_resource_requests

    @property
    def build(self) -> ResourceProfile:
        profile = ResourceProfile(_exec_req=self._executor_resource_requests,
                                  _task_req=self._task_resource_requests)
        # Looked up, not imported: the driver runtime imports this module, and no context is
        # active in a process that never imported ember.context.
        context = sys.modules.get("ember.context")
        if context is not None and context.SparkContext._active_spark_context is not None:
            profile._ensure_id()
        return profile
