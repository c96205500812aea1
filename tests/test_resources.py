"""Custom resources and resource profiles without a cluster: PySpark's `pyspark.resource` API,
discovery scripts and resources files (real scripts in a temp dir), the driver's profile
rules, the per-executor address bookkeeping, dynamic allocation targets, and local mode
(driver resources handed to tasks, Spark's refusal of stage-level scheduling)."""
from __future__ import annotations

import json
import os
import time
from fractions import Fraction

import pytest

import ember as pyspark
from ember import SparkConf, SparkContext, TaskContext
from ember.deploy.resources import (ResourceError, discover_resource,
                                    get_or_discover_all_resources, parse_allocated,
                                    write_resources_file, ResourceRequest)
from ember.errors import SparkException
from ember.resource import (ExecutorResourceRequests, ResourceInformation, ResourceProfile,
                            ResourceProfileBuilder, TaskResourceRequests)
from ember.scheduler.resource_profiles import (MULTIPLE_PROFILES_ERROR, ExecutorResources,
                                               ResourceProfileManager, TaskRequirements)


def script(tmp_path, name: str, body: str) -> str:
    path = os.path.join(str(tmp_path), name)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n" + body + "\n")
    os.chmod(path, 0o755)
    return path


def gpu_script(tmp_path, addresses=("0", "1"), name="gpu") -> str:
    doc = json.dumps({"name": name, "addresses": list(addresses)})
    return script(tmp_path, f"discover-{name}.sh", f"echo '{doc}'")


# -- the public API -------------------------------------------------------------------------------

def test_pyspark_resource_is_reachable_through_the_package():
    assert pyspark.resource.ResourceProfileBuilder is ResourceProfileBuilder
    assert set(pyspark.resource.__all__) == {
        "TaskResourceRequest", "TaskResourceRequests", "ExecutorResourceRequest",
        "ExecutorResourceRequests", "ResourceProfile", "ResourceInformation",
        "ResourceProfileBuilder"}


def test_builder_collects_requests_like_pyspark():
    ereqs = (ExecutorResourceRequests().cores(2).memory("6g").memoryOverhead("1g")
             .pysparkMemory("2g").offheapMemory("3g").resource("gpu", 2, "testGpus",
                                                               "nvidia.com"))
    treqs = TaskResourceRequests().cpus(2).resource("gpu", 2)
    builder = ResourceProfileBuilder().require(ereqs).require(treqs)
    rp = builder.build                     # a property, as in PySpark
    assert isinstance(rp, ResourceProfile)
    ex = rp.executorResources
    assert set(ex) == {"cores", "memory", "memoryOverhead", "pyspark.memory", "offHeap", "gpu"}
    assert (ex["memory"].amount, ex["memoryOverhead"].amount, ex["pyspark.memory"].amount,
            ex["offHeap"].amount) == (6144, 1024, 2048, 3072)
    gpu = ex["gpu"]
    assert (gpu.resourceName, gpu.amount, gpu.discoveryScript, gpu.vendor) == \
        ("gpu", 2, "testGpus", "nvidia.com")
    assert rp.taskResources["cpus"].amount == 2.0
    assert isinstance(rp.taskResources["gpu"].amount, float)
    builder.clearExecutorResourceRequests()
    builder.clearTaskResourceRequests()
    assert builder.executorResources == {} and builder.taskResources == {}


def test_profile_id_needs_a_spark_context(fresh_sc):
    rp = ResourceProfileBuilder().require(TaskResourceRequests().cpus(1)).build
    with pytest.raises(RuntimeError, match="SparkContext must be created to get the profile id"):
        rp.id


def test_task_amounts_follow_sparks_fraction_rule():
    assert TaskResourceRequests().resource("gpu", 0.25).requests["gpu"].amount == 0.25
    assert TaskResourceRequests().resource("gpu", 3).requests["gpu"].amount == 3.0
    with pytest.raises(ValueError, match=r"The resource amount 0.7 must be either <= 0.5, or "
                                         r"a whole number."):
        TaskResourceRequests().resource("gpu", 0.7)
    with pytest.raises(ValueError, match="invalid format: lots"):
        ExecutorResourceRequests().memory("lots")


def test_resource_information():
    info = ResourceInformation("gpu", ["0", "1"])
    assert (info.name, info.addresses) == ("gpu", ["0", "1"])


# -- discovery scripts and resources files --------------------------------------------------------

def test_discovery_script_and_resources_file(tmp_path):
    conf = {"spark.worker.resource.gpu.amount": "2",
            "spark.worker.resource.gpu.discoveryScript": gpu_script(tmp_path),
            "spark.worker.resource.fpga.amount": "1"}
    path = os.path.join(str(tmp_path), "alloc.json")
    with open(path, "w") as f:
        json.dump([{"id": {"componentName": "spark.worker", "resourceName": "fpga"},
                    "addresses": ["f1"]},
                   {"id": {"componentName": "spark.executor", "resourceName": "gpu"},
                    "addresses": ["9"]}], f)
    found = get_or_discover_all_resources(conf, "spark.worker", path)
    assert found == {"fpga": ResourceInformation("fpga", ["f1"]),
                     "gpu": ResourceInformation("gpu", ["0", "1"])}
    out = write_resources_file(str(tmp_path), "spark.executor", {"gpu": found["gpu"]})
    assert parse_allocated(out, "spark.executor") == {"gpu": found["gpu"]}


@pytest.mark.parametrize("body,expected", [
    ("echo 'not json'", "Error running the resource discovery script {s}: Error parsing JSON "
                        "into ResourceInformation: not json Here is a correct example: "
                        '{{"name":"gpu","addresses":["0","1"]}}.'),
    ("exit 3", "Process List({s}) exited with code 3"),
    ("echo '{\"name\": \"fpga\", \"addresses\": []}'",
     "Error running the resource discovery script {s}: script returned resource name fpga "
     "and we were expecting gpu."),
    ("echo '{\"name\": \"gpu\", \"addresses\": [0]}'",
     "Error running the resource discovery script {s}: Error parsing JSON into "
     'ResourceInformation: {{"name": "gpu", "addresses": [0]}} Here is a correct example: '
     '{{"name":"gpu","addresses":["0","1"]}}.'),
])
def test_bad_discovery_scripts_give_one_line_naming_the_script(tmp_path, body, expected):
    s = script(tmp_path, "bad.sh", body)
    with pytest.raises(ResourceError) as e:
        discover_resource(ResourceRequest("spark.worker", "gpu", 1, s))
    assert str(e.value) == expected.format(s=s)
    assert "\n" not in str(e.value)


def test_a_discovery_script_without_a_shebang_runs_in_the_shell(tmp_path):
    """As Spark's, whose Java launcher hands a file the kernel will not execute (no "#!"
    line: ENOEXEC) to /bin/sh; PySpark's own tests write their scripts that way."""
    path = os.path.join(str(tmp_path), "plain.sh")
    with open(path, "w") as f:
        f.write('echo {\\"name\\": \\"gpu\\", \\"addresses\\": [\\"3\\"]}\n')
    os.chmod(path, 0o755)
    found = discover_resource(ResourceRequest("spark.driver", "gpu", 1, path))
    assert found == ResourceInformation("gpu", ["3"])


def test_missing_script_or_amount_or_addresses(tmp_path):
    with pytest.raises(ResourceError, match="Resource script: /nope/x.sh to discover gpu "
                                            "doesn't exist!"):
        discover_resource(ResourceRequest("spark.worker", "gpu", 1, "/nope/x.sh"))
    with pytest.raises(ResourceError, match="User is expecting to use resource: gpu, but "
                                            "didn't specify a discovery script!"):
        get_or_discover_all_resources({"spark.worker.resource.gpu.amount": "1"},
                                      "spark.worker")
    with pytest.raises(ResourceError, match="You must specify an amount for gpu"):
        get_or_discover_all_resources({"spark.worker.resource.gpu.vendor": "x"},
                                      "spark.worker")
    conf = {"spark.worker.resource.gpu.amount": "3",
            "spark.worker.resource.gpu.discoveryScript": gpu_script(tmp_path)}
    with pytest.raises(ResourceError, match=r"Resource: gpu, with addresses: 0,1 is less than "
                                            r"what the user requested: 3\)"):
        get_or_discover_all_resources(conf, "spark.worker")
    bad = os.path.join(str(tmp_path), "bad.json")
    with open(bad, "w") as f:
        f.write("[{]")
    with pytest.raises(ResourceError, match=f"Error parsing resources file {bad}"):
        parse_allocated(bad, "spark.worker")


# -- the driver's profile rules -------------------------------------------------------------------

def _manager(master="spark://m:7077", **conf) -> ResourceProfileManager:
    base = {"spark.executor.resource.gpu.amount": "2", "spark.task.resource.gpu.amount": "1"}
    base.update({k.replace("_", "."): v for k, v in conf.items()})
    return ResourceProfileManager(base, master)


def test_default_profile_comes_from_the_configuration():
    m = _manager(**{"spark_executor_cores": "4", "spark_task_cpus": "2"})
    rp = m.default
    assert rp.id == 0
    assert rp.executorResources["cores"].amount == 4
    assert rp.executorResources["gpu"].amount == 2
    assert rp.taskResources["cpus"].amount == 2
    assert m.task_requirements(0) == TaskRequirements(2, (("gpu", Fraction(1)),))
    assert m.max_tasks_per_executor(0) == 2


def test_profile_validation_uses_sparks_messages():
    with pytest.raises(SparkException, match="No executor resource configs were not specified "
                                             "for the following task configs: gpu"):
        ResourceProfileManager({"spark.task.resource.gpu.amount": "1"}, "local[2]")
    with pytest.raises(SparkException, match="The executor resource: gpu, amount: 2 needs to be "
                                             ">= the task resource request amount of 3.0"):
        _manager(**{"spark_task_resource_gpu_amount": "3"})
    with pytest.raises(SparkException, match=r"The number of cores per executor \(=1\) has to "
                                             r"be >= the number of cpus per task = 2."):
        _manager(**{"spark_executor_cores": "1", "spark_task_cpus": "2"})


def test_support_rules_follow_spark():
    task_only = ResourceProfileBuilder().require(TaskResourceRequests().resource("gpu", 2)).build
    with_execs = ResourceProfileBuilder().require(
        ExecutorResourceRequests().cores(1).resource("gpu", 1)).require(
        TaskResourceRequests().resource("gpu", 1)).build
    standalone = _manager()
    standalone.add(task_only)                 # reuses default executors
    assert standalone.can_be_scheduled(task_only.id, 0)
    with pytest.raises(SparkException, match="ResourceProfiles are only supported on YARN and "
                                             "Kubernetes and Standalone with dynamic allocation "
                                             "enabled."):
        standalone.add(with_execs)
    with pytest.raises(SparkException, match="TaskResourceProfiles are only supported for "
                                             "Standalone, Yarn and Kubernetes cluster for now "
                                             "when dynamic allocation is disabled."):
        _manager("local[2]").add(task_only)
    dynamic = _manager(**{"spark_dynamicAllocation_enabled": "true"})
    dynamic.add(with_execs)
    assert dynamic.can_be_scheduled(with_execs.id, with_execs.id)
    assert not dynamic.can_be_scheduled(with_execs.id, 0)
    assert dynamic.max_tasks_per_executor(with_execs.id) == 1
    assert dynamic.profile_message(with_execs.id).getCustomExecutorResources()["gpu"].amount == 1


def test_under_test_the_support_check_is_skipped_as_in_spark(monkeypatch, fresh_sc):
    """Spark skips the support check when SPARK_TESTING is set (PySpark's own test runner
    sets it; its test_profile_before_sc attaches a profile with executor requests on a
    local master) unless spark.testing.resourceProfileManager asks for it."""
    with_execs = ResourceProfileBuilder().require(
        ExecutorResourceRequests().cores(2).memory("6g").resource("gpu", 2, "x", "nvidia.com")
    ).require(TaskResourceRequests().cpus(2).resource("gpu", 2)).build
    monkeypatch.setenv("SPARK_TESTING", "1")
    _manager("local[2]").add(with_execs)
    with pytest.raises(SparkException, match="ResourceProfiles are only supported on YARN"):
        _manager("local[2]", spark_testing_resourceProfileManager="true").add(with_execs)
    sc = fresh_sc()
    rdd = sc.parallelize(range(10)).withResources(with_execs)
    assert rdd.getResourceProfile().executorResources["memory"].amount == 6144


def test_conflicting_profiles_in_one_stage():
    a = ResourceProfileBuilder().require(TaskResourceRequests().resource("gpu", 1)).build
    b = ResourceProfileBuilder().require(TaskResourceRequests().cpus(2).resource("gpu", 0.5)
                                         ).build
    with pytest.raises(ValueError, match="Multiple ResourceProfiles specified") as e:
        _manager().stage_profile([a, b])
    assert str(e.value) == MULTIPLE_PROFILES_ERROR
    merging = _manager(**{"spark_scheduler_resource_profileMergeConflicts": "true",
                          "spark_executor_cores": "4"})
    merged = merging.stage_profile([a, b])
    assert merging.task_requirements(merged) == TaskRequirements(2, (("gpu", Fraction(1)),))
    assert merging.stage_profile([b, a]) == merged      # the same merge is reused
    assert merging.stage_profile([a, a]) == a.id


def test_executor_resources_share_addresses_by_fraction():
    pool = ExecutorResources(8, {"gpu": ["1", "0"]})
    quarter = TaskRequirements(1, (("gpu", Fraction(1, 4)),))
    got = [pool.acquire(quarter) for _ in range(4)]
    assert got == [{"gpu": ["0"]}] * 4         # four tasks share address 0
    assert pool.fits(quarter)                  # address 1 is still free
    assert not pool.fits(TaskRequirements(1, (("gpu", Fraction(2)),)))
    pool.release(quarter, got[0])
    whole = TaskRequirements(1, (("gpu", Fraction(1)),))
    assert pool.acquire(whole) == {"gpu": ["1"]}
    assert not pool.fits(whole)                # address 0 is three quarters taken
    assert pool.fits(quarter)
    assert pool.free_cores == 4
    assert not ExecutorResources(1, {}).fits(TaskRequirements(2))


# -- local mode -----------------------------------------------------------------------------------

def test_local_mode_tasks_get_the_drivers_resources(fresh_sc, tmp_path):
    conf = (SparkConf().set("spark.driver.resource.gpu.amount", "2")
            .set("spark.driver.resource.gpu.discoveryScript", gpu_script(tmp_path))
            .set("spark.executor.resource.gpu.amount", "2")
            .set("spark.task.resource.gpu.amount", "1"))
    sc = fresh_sc("local[4]", conf=conf)
    assert sc.resources == {"gpu": ResourceInformation("gpu", ["0", "1"])}

    def task(i):
        ctx = TaskContext.get()
        start = time.time()
        time.sleep(0.5)
        return ctx.resources()["gpu"].addresses, start, time.time()
    out = sc.parallelize(range(4), 4).map(task).collect()
    assert all(len(addrs) == 1 and addrs[0] in ("0", "1") for addrs, _, _ in out)
    for i, (a, s1, e1) in enumerate(out):       # overlapping tasks hold different GPUs
        for b, s2, e2 in out[i + 1:]:
            if s1 < e2 and s2 < e1:
                assert a != b


def test_local_mode_task_cpus(fresh_sc):
    sc = fresh_sc("local[4]", conf=SparkConf().set("spark.task.cpus", "2"))
    assert set(sc.parallelize(range(4), 4).map(
        lambda _: TaskContext.get().cpus()).collect()) == {2}


def test_local_mode_refuses_stage_level_scheduling(fresh_sc):
    sc = fresh_sc("local[2]")
    rdd = sc.parallelize(range(4), 2)
    task_only = ResourceProfileBuilder().require(TaskResourceRequests().cpus(1)).build
    assert isinstance(task_only.id, int) and task_only.id > 0   # built with a context
    with pytest.raises(SparkException, match="TaskResourceProfiles are only supported for "
                                             "Standalone"):
        rdd.withResources(task_only)
    with_execs = ResourceProfileBuilder().require(ExecutorResourceRequests().cores(1)).build
    with pytest.raises(SparkException, match="ResourceProfiles are only supported on YARN"):
        rdd.withResources(with_execs)
    assert rdd.getResourceProfile() is None
    assert rdd.collect() == [0, 1, 2, 3]


def test_bad_driver_discovery_script_fails_the_context(fresh_sc, tmp_path):
    conf = (SparkConf().setMaster("local[1]").setAppName("bad")
            .set("spark.driver.resource.gpu.amount", "1")
            .set("spark.driver.resource.gpu.discoveryScript",
                 script(tmp_path, "bad.sh", "exit 2")))
    with pytest.raises(SparkException, match="exited with code 2"):
        SparkContext(conf=conf)
    assert SparkContext._active_spark_context is None


def test_event_log_records_resource_profiles(fresh_sc, tmp_path):
    from ember.scheduler import listener as sl
    from ember.ui.event_log import replay
    logs = tmp_path / "events"
    logs.mkdir()
    conf = (SparkConf().set("spark.eventLog.enabled", "true")
            .set("spark.eventLog.dir", str(logs)).set("spark.task.cpus", "1"))
    sc = fresh_sc("local[2]", conf=conf)
    sc.parallelize(range(4), 2).count()
    sc.stop()
    (path,) = [str(p) for p in logs.iterdir()]
    added = [e for e in replay(path) if isinstance(e, sl.ResourceProfileAdded)]
    assert [e.resource_profile_id for e in added] == [0]
    assert added[0].executor_resources["memory"] == (1024, "", "")
    assert added[0].task_resources == {"cpus": 1.0}
    with open(path) as f:
        assert any('"Event": "SparkListenerResourceProfileAdded"' in line or
                   '"Event":"SparkListenerResourceProfileAdded"' in line for line in f)
