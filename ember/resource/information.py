"""ResourceInformation: a resource's name and addresses (`TaskContext.resources()` values,
`sc.resources`). The same record travels in deploy messages, so it is defined there once."""
from ember.deploy.resource_messages import ResourceInformation

__all__ = ["ResourceInformation"]
