"""The frames the driver writes to its UI process's stdin (ember.ui.ui_process explains
them): a 4-byte little-endian length, then `marshal.dumps` of a list of marshalled items;
the item kinds besides lines and packed task events; how both ends wait to read. Shared by
both ends, importing nothing of Ember."""
from __future__ import annotations

import marshal
import select
import struct

HEADER = struct.Struct("<I")
OPEN_LOG, SYNC = 3, 4       # packed task events are kinds 0, 1 and 2
# a SYNC as the driver marshals it (version 2, as every item): the UI process finds it
# among the items it holds without unmarshalling them
SYNC_ITEM = marshal.dumps((SYNC,), 2)


def readable(fds: list[int], timeout: float | None) -> list[int]:
    """Those of `fds` ready to read within `timeout` seconds (None: no limit). Why poll, not
    select: the driver hands its UI sockets over with their numbers, which may be above
    FD_SETSIZE, and the driver's own pipes may be too."""
    waiting = select.poll()
    for f in fds:
        waiting.register(f, select.POLLIN)
    return [f for f, _ in waiting.poll(None if timeout is None else timeout * 1000)]
