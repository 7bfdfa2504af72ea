"""Segment names leave room for the chunk-name suffix within S3's limits; no server."""

from __future__ import annotations

import pytest

from reclaim.segments.errors import InvalidSegmentNameError
from reclaim.segments.layout import MAX_LAST_COMPONENT_BYTES, new_chunk_name, validate_segment_name
from reclaim.storage.chunks import validate_chunk_name


def test_the_longest_last_component_still_makes_valid_chunk_names() -> None:
    name = "scope/stream/" + "s" * MAX_LAST_COMPONENT_BYTES
    assert validate_segment_name(name) == name
    assert validate_chunk_name(new_chunk_name(name, 2**31 - 1, 2**63 - 1))


def test_a_last_component_with_no_room_for_the_suffix_is_refused() -> None:
    with pytest.raises(InvalidSegmentNameError, match="last path component longer than"):
        validate_segment_name("scope/stream/" + "s" * (MAX_LAST_COMPONENT_BYTES + 1))
