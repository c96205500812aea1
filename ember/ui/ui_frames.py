"""The frames the driver writes to its UI process's stdin (ember.ui.ui_process explains
them): a 4-byte little-endian length, then `marshal.dumps` of a list of marshalled items;
the item kinds besides lines and packed task events. Shared by both ends, importing
nothing of Ember."""
from __future__ import annotations

import marshal
import struct

HEADER = struct.Struct("<I")
OPEN_LOG, SYNC = 2, 3       # packed task events are kinds 0 and 1
# a SYNC as the driver marshals it (version 2, as every item): the UI process finds it
# among the items it holds without unmarshalling them
SYNC_ITEM = marshal.dumps((SYNC,), 2)
