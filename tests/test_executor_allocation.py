"""Spark's ExecutorAllocationManager algorithm on a manual clock (no processes)."""
from __future__ import annotations

import math

import pytest

from ember.errors import SparkException
from ember.scheduler.executor_allocation import (AllocationSettings, ExecutorAllocationManager,
                                                 ExecutorSnapshot)


def settings(**kv: str) -> AllocationSettings:
    conf = {"spark.dynamicAllocation.enabled": "true"}
    conf.update({k.replace("_", "."): v for k, v in kv.items()})
    return AllocationSettings.from_conf(conf)


def manager(per_executor: int = 1, **kv: str) -> ExecutorAllocationManager:
    return ExecutorAllocationManager(settings(**kv), lambda rp: per_executor)


def busy(n: int, rp: int = 0) -> list[ExecutorSnapshot]:
    return [ExecutorSnapshot(str(i), rp, None) for i in range(n)]


def test_initial_target_is_sent_and_held_while_initializing():
    m = manager(**{"spark_dynamicAllocation_minExecutors": "1",
                   "spark_dynamicAllocation_initialExecutors": "3"})
    d = m.schedule(0.0, {}, [])
    assert d.totals == [(0, 3)]
    m.totals_sent(d.totals)
    assert m.schedule(10.0, {}, []).totals == []          # initializing: no change


def test_exponential_ramp_up_after_the_backlog_timeouts():
    m = manager(**{"spark_dynamicAllocation_maxExecutors": "8",
                   "spark_dynamicAllocation_schedulerBacklogTimeout": "1s",
                   "spark_dynamicAllocation_sustainedSchedulerBacklogTimeout": "2s"})
    m.totals_sent(m.schedule(0.0, {}, []).totals)
    demand = {0: (100, 0)}
    targets = []
    t = 0.0
    execs: list[ExecutorSnapshot] = []
    while t <= 12.0:
        d = m.schedule(t, demand, execs)
        m.totals_sent(d.totals)
        targets.append((t, m.targets[0]))
        execs = busy(m.targets[0])          # the executors asked for arrive at once
        t = round(t + 0.5, 1)
    at = dict(targets)
    assert at[0.5] == 0                     # backlog timer not yet expired
    assert at[1.0] == 1                     # +1 after schedulerBacklogTimeout
    assert at[2.5] == 1                     # waits sustainedSchedulerBacklogTimeout
    assert at[3.0] == 3                     # +2
    assert at[5.0] == 7                     # +4
    assert at[7.0] == 8                     # +8 capped by maxExecutors
    assert at[12.0] == 8


def test_target_capped_by_max_needed_with_ratio_and_tasks_per_executor():
    m = manager(per_executor=4, **{"spark_dynamicAllocation_executorAllocationRatio": "0.5"})
    m.totals_sent(m.schedule(0.0, {}, []).totals)
    for t in range(1, 10):
        m.totals_sent(m.schedule(float(t), {0: (30, 10)}, busy(m.targets[0])).totals)
    assert m.targets[0] == math.ceil(40 * 0.5 / 4) == 5


def test_backlog_cleared_resets_the_ramp_and_target_drops_to_need():
    m = manager(**{"spark_dynamicAllocation_minExecutors": "1",
                   "spark_dynamicAllocation_maxExecutors": "10"})
    m.totals_sent(m.schedule(0.0, {}, []).totals)
    for t in (1.0, 2.0, 3.0, 4.0):
        m.schedule(t, {0: (50, 0)}, busy(m.targets[0]))
    assert m.targets[0] == 8                       # 1, then +1 at 2 s, +2 at 3 s, +4 at 4 s
    assert m.to_add[0] == 8
    m.schedule(5.5, {0: (0, 3)}, busy(8))          # nothing pending: ramp resets
    assert m.add_time is None and m.to_add[0] == 1
    assert m.targets[0] == 3                       # maxNeeded = 3 running tasks
    m.schedule(6.0, {}, busy(8))
    assert m.targets[0] == 1                       # never below minExecutors


def test_idle_executors_removed_down_to_min_and_target():
    m = manager(**{"spark_dynamicAllocation_minExecutors": "2",
                   "spark_dynamicAllocation_executorIdleTimeout": "5s"})
    m.totals_sent(m.schedule(0.0, {0: (4, 0)}, []).totals)
    execs = [ExecutorSnapshot(str(i), 0, 10.0) for i in range(4)]
    assert m.schedule(14.9, {}, execs).remove == []
    d = m.schedule(15.0, {}, execs)
    assert d.remove == ["0", "1"]                  # two kept for minExecutors
    m.removal_requested(d.remove)
    assert m.schedule(16.0, {}, execs).remove == []  # pending removal is not asked twice
    m.executor_removed("0")
    m.executor_removed("1")
    assert m.schedule(17.0, {}, execs[2:]).remove == []


def test_busy_executor_is_never_removed_and_target_protects_executors():
    m = manager(**{"spark_dynamicAllocation_executorIdleTimeout": "1s"})
    m.schedule(0.0, {0: (0, 1)}, [])
    m.targets[0] = 2
    execs = [ExecutorSnapshot("a", 0, None), ExecutorSnapshot("b", 0, 0.0),
             ExecutorSnapshot("c", 0, 0.0)]
    # one running task: maxNeeded 1 -> target 1; the idle ones go, the busy one stays
    assert m.schedule(5.0, {0: (0, 1)}, execs).remove == ["b", "c"]


def test_cached_blocks_and_shuffle_output_keep_executors():
    m = manager(**{"spark_dynamicAllocation_executorIdleTimeout": "1s"})
    m.schedule(0.0, {0: (1, 0)}, [])
    execs = [ExecutorSnapshot("cached", 0, 0.0, has_cached_blocks=True),
             ExecutorSnapshot("shuffle", 0, 0.0, has_shuffle_output=True),
             ExecutorSnapshot("plain", 0, 0.0)]
    assert m.schedule(1000.0, {}, execs).remove == ["plain"]   # both timeouts infinite

    m = manager(**{"spark_dynamicAllocation_executorIdleTimeout": "1s",
                   "spark_dynamicAllocation_cachedExecutorIdleTimeout": "30s",
                   "spark_dynamicAllocation_shuffleTracking_timeout": "10s"})
    m.schedule(0.0, {0: (1, 0)}, [])
    assert m.schedule(9.0, {}, execs).remove == ["plain"]
    m.removal_requested(["plain"])
    assert m.schedule(10.0, {}, execs).remove == ["shuffle"]
    m.removal_requested(["shuffle"])
    assert m.schedule(30.0, {}, execs).remove == ["cached"]


def test_external_shuffle_service_lets_shuffle_holders_go():
    m = manager(**{"spark_dynamicAllocation_executorIdleTimeout": "1s",
                   "spark_shuffle_service_enabled": "true"})
    m.schedule(0.0, {0: (1, 0)}, [])
    execs = [ExecutorSnapshot("shuffle", 0, 0.0, has_shuffle_output=True)]
    assert m.schedule(1.0, {}, execs).remove == ["shuffle"]


def test_an_executor_timing_out_ends_initialization():
    m = manager(**{"spark_dynamicAllocation_initialExecutors": "3",
                   "spark_dynamicAllocation_executorIdleTimeout": "2s"})
    m.totals_sent(m.schedule(0.0, {}, []).totals)
    execs = [ExecutorSnapshot(str(i), 0, 0.0) for i in range(3)]
    d = m.schedule(2.0, {}, execs)
    assert not m.initializing
    assert d.totals == [(0, 0)] and d.remove == ["0", "1", "2"]


def test_profiles_have_their_own_targets():
    m = ExecutorAllocationManager(settings(), lambda rp: {0: 4, 1: 1}[rp])
    m.totals_sent(m.schedule(0.0, {}, []).totals)
    for t in range(1, 8):
        m.totals_sent(m.schedule(float(t), {0: (8, 0), 1: (3, 0)}, []).totals)
    assert m.targets == {0: 2, 1: 3}


@pytest.mark.parametrize("conf,message", [
    ({"spark_dynamicAllocation_minExecutors": "-1"},
     "spark.dynamicAllocation.{min/max}Executors must be positive!"),
    ({"spark_dynamicAllocation_maxExecutors": "0"},
     "spark.dynamicAllocation.maxExecutors cannot be 0!"),
    ({"spark_dynamicAllocation_minExecutors": "3", "spark_dynamicAllocation_maxExecutors": "2"},
     "spark.dynamicAllocation.minExecutors (3) must be less than or equal to "
     "spark.dynamicAllocation.maxExecutors (2)!"),
    ({"spark_dynamicAllocation_schedulerBacklogTimeout": "0s"},
     "spark.dynamicAllocation.schedulerBacklogTimeout must be > 0!"),
    ({"spark_dynamicAllocation_executorAllocationRatio": "1.5"},
     "spark.dynamicAllocation.executorAllocationRatio must be > 0 and <= 1.0"),
    ({"spark_dynamicAllocation_initialExecutors": "5", "spark_dynamicAllocation_maxExecutors": "2"},
     "initial executor number 5 must between min executor number 0 and max executor "
     "number 2"),
    ({"spark_dynamicAllocation_shuffleTracking_enabled": "false"},
     "Dynamic allocation of executors requires one of the following conditions: 1) enabling "
     "external shuffle service through spark.shuffle.service.enabled."),
])
def test_spark_validation_errors(conf, message):
    with pytest.raises(SparkException) as e:
        settings(**conf)
    assert message in str(e.value)


def test_validation_accepts_service_or_shuffle_decommission_without_tracking():
    settings(spark_dynamicAllocation_shuffleTracking_enabled="false",
             spark_shuffle_service_enabled="true")
    settings(spark_dynamicAllocation_shuffleTracking_enabled="false",
             spark_decommission_enabled="true",
             spark_storage_decommission_shuffleBlocks_enabled="true")
