"""The frames the driver writes to its UI process's stdin (ember.ui.ui_process explains
them): a 4-byte little-endian length, then `marshal.dumps(value)`; the item kinds a frame's
list holds besides lines and packed task events. Shared by both ends, importing nothing."""
from __future__ import annotations

import struct

HEADER = struct.Struct("<I")
OPEN_LOG, SYNC = 2, 3
# (START_BY_END, task id): a task start whose fields are the first ones of its successful
# end, which comes later in the same frame (packed task events are kinds 0 and 1)
START_BY_END = 4
