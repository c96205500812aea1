"""A handler for the overlap hammers of the scheduler loops (tests/test_event_loop.py,
tests/test_rpc_run_here.py): callbacks a loop runs, from its own thread or a borrowed turn,
must never be inside at once."""
from __future__ import annotations

import time


class OneAtATime:
    """Call it from every path under test; `overlaps` records each entry that found another
    call still inside, `count` the calls that completed."""

    def __init__(self) -> None:
        self.inside = 0
        self.overlaps: list[int] = []
        self.count = 0

    def __call__(self) -> None:
        self.inside += 1
        if self.inside != 1:
            self.overlaps.append(self.inside)
        time.sleep(0)                    # let other threads try to get in
        self.count += 1
        self.inside -= 1
