"""Which files in a block dir an unpersist deletes, and what a failed block write leaves."""
from __future__ import annotations

import os

import pytest

from ember.storage.block_manager import is_block_file_of, write_batches


def test_an_unpersist_deletes_whole_blocks_only() -> None:
    """A temp file or a sibling's copy is in use by a running task (see
    test_engine's unpersist test); another RDD's blocks share no prefix."""
    assert is_block_file_of("rdd_3_0", 3) and is_block_file_of("rdd_3_12", 3)
    for name in ("rdd_3_0.tmp77", "rdd_3_0.for5-77", "rdd_3_0.for5-77.tmp77", "rdd_31_0",
                 "rdd_3_", "rdd_3_x"):
        assert not is_block_file_of(name, 3), name


def test_a_block_write_that_fails_leaves_no_temp_file(tmp_path) -> None:
    def values():
        yield from range(10)
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError, match="No space"):
        write_batches(str(tmp_path / "rdd_1_0"), values(), batch_size=3)
    assert os.listdir(tmp_path) == []
