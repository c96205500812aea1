"""Custom resources (GPUs, FPGAs ...): `<component>.resource.<name>.*` settings, discovery
scripts and resources files, as Spark's ResourceUtils reads them.

Why one module for every component: the worker (`spark.worker`), the driver (`spark.driver`)
and each executor (`spark.executor`) find their addresses the same way - first the resources
file a cluster manager wrote (`spark.worker.resourcesFile`, an executor's `--resourcesFile`),
then a discovery script for the rest - and a mistake in either must end the process with one
line naming the script or file, never a traceback.

Formats (Spark's): a discovery script prints one ResourceInformation JSON object,
`{"name": "gpu", "addresses": ["0", "1"]}`; a resources file holds a list of allocations,
`[{"id": {"componentName": "spark.worker", "resourceName": "gpu"}, "addresses": ["0"]}]`.
"""
from __future__ import annotations

import errno
import json
import os
import subprocess
from dataclasses import dataclass
from typing import Any, Mapping, Optional

from ember.deploy.resource_messages import ResourceInformation, ResourceRequirement

RESOURCE_PREFIX = "resource"
EXAMPLE_JSON = '{"name":"gpu","addresses":["0","1"]}'
DISCOVERY_TIMEOUT_S = 120.0   # Spark waits forever; a hung script must not hang a daemon

__all__ = ["ResourceError", "ResourceRequest", "list_resource_names", "parse_resource_requests",
           "parse_resource_information", "discover_resource", "parse_allocated",
           "get_or_discover_all_resources", "write_resources_file", "RESOURCE_PREFIX",
           "driver_resource_requirements"]


class ResourceError(ValueError):
    """A resource setting, script or file is unusable (Spark's SparkException text)."""


@dataclass(frozen=True)
class ResourceRequest:
    """`amount` addresses of `name` for one component (Spark: ResourceRequest)."""
    component: str
    name: str
    amount: int
    discovery_script: str = ""
    vendor: str = ""


def list_resource_names(conf: Mapping[str, Any], component: str) -> list[str]:
    """Resource names configured under `<component>.resource.` (in first-seen order)."""
    prefix = f"{component}.{RESOURCE_PREFIX}."
    names: list[str] = []
    for key in conf:
        if key.startswith(prefix):
            rest = key[len(prefix):]
            if "." not in rest:
                raise ResourceError(f"You must specify an amount config for resource: {rest} "
                                    f"config: {prefix}{rest}")
            name = rest.split(".", 1)[0]
            if name not in names:
                names.append(name)
    return names


def _setting(conf: Mapping[str, Any], component: str, name: str, suffix: str) -> Optional[str]:
    value = conf.get(f"{component}.{RESOURCE_PREFIX}.{name}.{suffix}")
    return None if value is None else str(value)


def parse_resource_requests(conf: Mapping[str, Any], component: str) -> list[ResourceRequest]:
    """Every `<component>.resource.<name>.amount` > 0 with its script and vendor."""
    out = []
    for name in list_resource_names(conf, component):
        raw = _setting(conf, component, name, "amount")
        if raw is None:
            raise ResourceError(f"You must specify an amount for {name}")
        try:
            amount = float(raw.strip())
        except ValueError:
            raise ResourceError(f"{component}.{RESOURCE_PREFIX}.{name}.amount should be a "
                                f"number, but was {raw!r}") from None
        if amount % 1 != 0:
            raise ResourceError("Only tasks support fractional resources, please check your "
                                f"{component} settings")
        if amount > 0:
            out.append(ResourceRequest(component, name, int(amount),
                                       _setting(conf, component, name, "discoveryScript") or "",
                                       _setting(conf, component, name, "vendor") or ""))
    return out


def parse_resource_information(text: str) -> ResourceInformation:
    """Spark's ResourceInformation.parseJson, with its error text on one line."""
    try:
        obj = json.loads(text)
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ValueError("name")
        addresses = obj.get("addresses")
        if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
            raise ValueError("addresses")
        return ResourceInformation(obj["name"], list(addresses))
    except ValueError:
        shown = " ".join(str(text).split())
        raise ResourceError(f"Error parsing JSON into ResourceInformation: {shown} "
                            f"Here is a correct example: {EXAMPLE_JSON}.") from None


def discover_resource(request: ResourceRequest) -> ResourceInformation:
    """Run the request's discovery script (Spark's ResourceDiscoveryScriptPlugin)."""
    script, name = request.discovery_script, request.name
    if not script:
        raise ResourceError(f"User is expecting to use resource: {name}, but didn't specify "
                            "a discovery script!")
    if not os.path.exists(script):
        raise ResourceError(f"Resource script: {script} to discover {name} doesn't exist!")
    try:
        try:
            proc = subprocess.run([script], stdin=subprocess.DEVNULL, capture_output=True,
                                  timeout=DISCOVERY_TIMEOUT_S, cwd=os.getcwd())
        except OSError as e:
            if e.errno != errno.ENOEXEC:
                raise
            # no "#!" line: run by the shell, as Java's process launcher (Spark's) does
            proc = subprocess.run(["/bin/sh", script], stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=DISCOVERY_TIMEOUT_S,
                                  cwd=os.getcwd())
    except subprocess.TimeoutExpired:
        raise ResourceError(f"Error running the resource discovery script {script}: it did "
                            f"not finish within {DISCOVERY_TIMEOUT_S:.0f} seconds") from None
    except OSError as e:
        raise ResourceError(f"Error running the resource discovery script {script}: "
                            f"{e.strerror or e}") from None
    if proc.returncode != 0:
        raise ResourceError(f"Process List({script}) exited with code {proc.returncode}")
    try:
        info = parse_resource_information(proc.stdout.decode("utf-8", "replace"))
    except ResourceError as e:
        raise ResourceError(f"Error running the resource discovery script {script}: {e}") \
            from None
    if info.name != name:
        raise ResourceError(f"Error running the resource discovery script {script}: script "
                            f"returned resource name {info.name} and we were expecting {name}.")
    return info


def parse_allocated(resources_file: Optional[str], component: str
                    ) -> dict[str, ResourceInformation]:
    """The allocations for `component` in a resources file (none without a file)."""
    if not resources_file:
        return {}
    try:
        with open(resources_file, encoding="utf-8") as f:
            entries = json.load(f)
        out: dict[str, ResourceInformation] = {}
        for entry in entries:
            rid = entry["id"]
            addresses = entry["addresses"]
            if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
                raise ValueError("addresses")
            if rid["componentName"] == component:
                out[str(rid["resourceName"])] = ResourceInformation(str(rid["resourceName"]),
                                                                    list(addresses))
        return out
    except (OSError, ValueError, KeyError, TypeError) as e:
        detail = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise ResourceError(f"Error parsing resources file {resources_file} ({detail})") \
            from None


def get_or_discover_all_resources(conf: Mapping[str, Any], component: str,
                                  resources_file: Optional[str] = None
                                  ) -> dict[str, ResourceInformation]:
    """Spark's getOrDiscoverAllResources: the file's allocations, then the discovery script
    of every other configured resource; each must have at least the requested amount."""
    requests = parse_resource_requests(conf, component)
    found = parse_allocated(resources_file, component)
    for req in requests:
        if req.name not in found:
            found[req.name] = discover_resource(req)
    for req in requests:
        addresses = found[req.name].addresses
        if len(addresses) < req.amount:
            raise ResourceError(f"Resource: {req.name}, with addresses: {','.join(addresses)} "
                                f"is less than what the user requested: {req.amount})")
    return found


def driver_resource_requirements(conf: Mapping[str, Any]) -> list[ResourceRequirement]:
    """What a cluster-mode driver asks its worker for (Spark's parseResourceRequirements
    over spark.driver.resource.*): the master places the driver where these are free."""
    return [ResourceRequirement(r.name, r.amount)
            for r in parse_resource_requests(conf, "spark.driver")]


def write_resources_file(directory: str, component: str,
                         resources: Mapping[str, ResourceInformation]) -> str:
    """Spark's prepareResourcesFile: the allocations a child process is started with."""
    path = os.path.join(directory, f"resource-{component.replace('.', '-')}.json")
    entries = [{"id": {"componentName": component, "resourceName": name},
                "addresses": list(info.addresses)} for name, info in resources.items()]
    with open(path, "w", encoding="utf-8") as f:
        json.dump(entries, f)
    return path
