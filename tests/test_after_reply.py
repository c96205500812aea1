"""ember.util.after_reply: a task process frees sortByKey's sorted partition and a held
input after the task's result is sent, not inside the task; nothing is kept by any other
process, for sorts a task may run many of, or from one task to the next."""
from __future__ import annotations

import pytest

from ember.shuffle.external import ExternalSorter
from ember.util import after_reply

pytestmark = pytest.mark.timeout(120)


def _kept_lengths(it):
    """Consume the partition, then report what this task process keeps for after the
    reply (the lengths of the kept lists)."""
    n = sum(1 for _ in it)
    from ember.util import after_reply as kept
    yield n, sorted(len(x) for x in kept._kept)


def _kept_count(_it):
    from ember.util import after_reply as kept
    yield len(kept._kept)


def test_outside_a_task_process_nothing_is_kept():
    sorter = ExternalSorter(512)
    sorter.free_after_reply = True
    assert list(sorter.sorted([3, 1, 2])) == [1, 2, 3]
    after_reply.keep_until_reply([1])
    assert after_reply._kept == []


def test_sort_by_key_keeps_its_sorted_partition_until_the_reply(sc):
    pairs = sc.parallelize([(i * 7919 % 1000, i) for i in range(1000)], 4)
    got = pairs.sortByKey(numPartitions=2).mapPartitions(_kept_lengths).collect()
    assert sum(n for n, _ in got) == 1000
    # each task's one sorted list, whole; nothing from the task before it in that process
    assert all(kept == [n] for n, kept in got if n)
    # released once the result went out: the next tasks find nothing kept
    leftover = sc.parallelize(range(8), 8).mapPartitions(_kept_count).collect()
    assert leftover == [0] * 8


def test_a_held_input_is_kept_by_the_task_that_takes_it(sc):
    rdd = sc.parallelize(range(400), 2).map(lambda x: x * 2)      # not parallelized: held
    got = rdd.zipWithIndex().mapPartitions(_kept_lengths).collect()
    assert got == [(200, [200]), (200, [200])]


def test_sorts_a_task_runs_itself_are_not_kept(sc):
    def many_sorts(it):
        for x in it:
            list(ExternalSorter(64).sorted(range(x, 0, -1)))
        yield from _kept_count(())

    assert sc.parallelize(range(100, 120), 2).mapPartitions(many_sorts).collect() == [0, 0]
