"""What map and reduce sides of a shuffle agree on: map output locations and fetch failure."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MapStatus:
    """Where one map task's output lives: the executor, and the .data/.index file base path.

    `address` is the block-transfer address ("host:port") for remote fetches, served by
    the RPC endpoint `endpoint`: the executor's own, or its worker's external shuffle
    service (which outlives the executor); empty in local mode, where reducers read the
    files directly.
    """
    executor_id: str
    host: str
    path: str
    bytes_written: int
    records_written: int
    address: str = ""
    endpoint: str = "Executor"


class FetchFailedError(Exception):
    """A reducer could not get map output: the parent stage must be recomputed."""

    def __init__(self, shuffle_id: int, map_index: int, reduce_id: int,
                 status: MapStatus | None, message: str) -> None:
        super().__init__(message)
        self.shuffle_id = shuffle_id
        self.map_index = map_index
        self.reduce_id = reduce_id
        self.status = status
        self.message = message
