"""BlockManagerMaster: copies of a block in two task processes of one executor are one block
to Spark's listeners (Spark's history server sums every BlockUpdated it reads)."""
from ember.storage.block_manager_master import BlockManagerMaster
from ember.storagelevel import StorageLevel


class _Collect:
    def __init__(self) -> None:
        self.events: list = []

    def post(self, event) -> None:
        self.events.append(event)


def test_a_copy_in_a_sibling_process_posts_no_second_event() -> None:
    bus = _Collect()
    master = BlockManagerMaster(bus)
    master.update("driver", 0, "localhost", [("rdd_1_0", "memory", 100, 0)])
    master.update("driver", 1, "localhost", [("rdd_1_0", "memory", 100, 0)])   # the copy
    assert len(bus.events) == 1 and bus.events[0].mem_size == 100
    assert len(master.locations(1, 0)) == 2          # both processes serve it

    master.update("driver", 0, "localhost", [("rdd_1_0", "removed", 0, 0)])
    assert len(bus.events) == 1                       # the executor still holds it
    master.remove_slot("driver", 1)                   # the last copy's process died
    assert len(bus.events) == 2
    assert bus.events[1].storage_level == StorageLevel.NONE and bus.events[1].block_name == "rdd_1_0"
    assert master.locations(1, 0) == []


def test_each_executor_reports_its_own_blocks_and_loses_them_once() -> None:
    bus = _Collect()
    master = BlockManagerMaster(bus)
    master.update("1", 0, "h1", [("rdd_2_0", "memory", 10, 0), ("rdd_2_1", "disk", 0, 7)])
    master.update("1", 1, "h1", [("rdd_2_0", "memory", 10, 0)])
    master.update("2", 0, "h2", [("rdd_2_0", "memory", 10, 0)])
    assert [(e.executor_id, e.block_name) for e in bus.events] == [
        ("1", "rdd_2_0"), ("1", "rdd_2_1"), ("2", "rdd_2_0")]
    master.remove_executor("1")
    removed = bus.events[3:]
    assert sorted(e.block_name for e in removed) == ["rdd_2_0", "rdd_2_1"]
    assert all(e.executor_id == "1" and e.storage_level == StorageLevel.NONE for e in removed)
    assert [st.executor_id for st in master.locations(2, 0)] == ["2"]
