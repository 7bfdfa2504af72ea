"""Constants of the segment and stream tests."""

from __future__ import annotations

#: Small enough that a few short writes roll over to new chunks.
ROLLING = 8


STREAM = "scope/orders"
