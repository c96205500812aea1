"""The frames the driver writes to its UI process's stdin (ember.ui.ui_process explains
them): a 4-byte little-endian length, then `marshal.dumps` of a list of marshalled items;
the item kinds besides lines and packed task events. Shared by both ends, importing
nothing."""
from __future__ import annotations

import struct

HEADER = struct.Struct("<I")
OPEN_LOG, SYNC = 2, 3       # packed task events are kinds 0 and 1
