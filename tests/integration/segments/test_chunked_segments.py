"""ChunkedSegmentStorage operations: create, write/read across chunks, seal, concat, errors."""

from __future__ import annotations

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import (
    BadOffsetError,
    InvalidSegmentNameError,
    SegmentExistsError,
    SegmentNotFoundError,
    SegmentNotSealedError,
    SegmentSealedError,
)
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.sql_store import SQLMetadataStore

ROLLING = 8


def test_create_exists_and_info(segments: ChunkedSegmentStorage) -> None:
    assert not segments.exists("scope/stream/0")
    record = segments.create("scope/stream/0")
    assert segments.exists("scope/stream/0")
    assert record.stream == "scope/stream" and record.length == 0 and record.max_rolling_length == ROLLING
    assert segments.get_info("scope/stream/0") == record
    assert segments.binding.exists("scope/stream/0") is False, "create makes no tier-2 object"
    with pytest.raises(SegmentExistsError):
        segments.create("scope/stream/0")
    with pytest.raises(SegmentNotFoundError):
        segments.get_info("scope/stream/1")
    for bad in ("", "../up", "a\x00b", "x" * 1000):
        with pytest.raises(InvalidSegmentNameError):
            segments.create(bad)


@pytest.mark.parametrize("rolling", [0, -3])
def test_create_refuses_a_max_rolling_length_that_is_not_positive(segments: ChunkedSegmentStorage,
                                                                  rolling: int) -> None:
    # PDP-34: a large write is split into chunks of at most the segment's max rolling length; with
    # none positive the split never ends (it used to create empty chunks on tier-2 without end).
    with pytest.raises(ValueError, match="max_rolling_length"):
        segments.create("s/bad", max_rolling_length=rolling)
    assert not segments.exists("s/bad")
    assert segments.create("s/bad").max_rolling_length == ROLLING


def test_write_and_read_across_chunks(any_segments: ChunkedSegmentStorage) -> None:
    segments = any_segments
    segments.create("s/0")
    writer = segments.open_write("s/0", epoch=1)
    payload = b""
    for piece in (b"abc", b"defgh", b"ijklmnopqrstu", b"v"):
        assert segments.write(writer, len(payload), piece) == len(piece)
        payload += piece
    assert segments.get_info("s/0").length == len(payload)
    assert segments.read("s/0", 0, len(payload)) == payload
    assert segments.read("s/0", 5, 10) == payload[5:15]
    assert segments.read("s/0", len(payload), 0) == b""
    chunks = segments.layout("s/0")
    assert all(0 < c.length <= ROLLING for c in chunks)
    assert [c.start_offset for c in chunks] == sorted({c.start_offset for c in chunks})
    assert sum(c.length for c in chunks) == len(payload)
    if segments.binding.supports_append:
        assert [c.length for c in chunks] == [8, 8, 6]
    else:
        assert [c.length for c in chunks] == [3, 5, 8, 5, 1], "no append: each write is its own chunk"
    for chunk in chunks:
        assert chunk.name.startswith("s/0.E-1-O-")
        assert segments.binding.get_info(chunk.locations[0].key).tags == chunk.tags
        assert chunk.tags.writer_epoch == 1 and chunk.tags.segment == "s/0"


def test_write_offset_and_seal_rules(segments: ChunkedSegmentStorage) -> None:
    segments.create("s/0")
    writer = segments.open_write("s/0", epoch=1)
    segments.write(writer, 0, b"hello")
    with pytest.raises(BadOffsetError):
        segments.write(writer, 3, b"x")
    with pytest.raises(BadOffsetError):
        segments.read("s/0", 2, 10)
    segments.seal("s/0")
    assert segments.get_info("s/0").sealed
    with pytest.raises(SegmentSealedError):
        segments.write(writer, 5, b"x")
    assert segments.seal("s/0").sealed, "sealing twice is harmless"
    segments.unseal("s/0")
    segments.write(writer, 5, b" world")
    assert segments.read("s/0", 0, 11) == b"hello world"


def test_concat_is_metadata_only(segments: ChunkedSegmentStorage, store: SQLMetadataStore) -> None:
    for name in ("t/0", "t/txn"):
        segments.create(name)
    w_target = segments.open_write("t/0", epoch=1)
    w_source = segments.open_write("t/txn", epoch=1)
    segments.write(w_target, 0, b"0123456789")
    segments.write(w_source, 0, b"ABCDEFGHIJK")
    source_chunks = [c.name for c in segments.layout("t/txn")]
    objects_before = sorted(segments.binding.iter_names())
    with pytest.raises(SegmentNotSealedError):
        segments.concat("t/0", "t/txn")
    segments.seal("t/txn")
    with pytest.raises(BadOffsetError):
        segments.concat("t/0", "t/txn", offset=3)
    merged = segments.concat("t/0", "t/txn", offset=10)
    assert merged.length == 21
    assert sorted(segments.binding.iter_names()) == objects_before, "concat moves no bytes"
    assert not segments.exists("t/txn") and store.get_segment("t/txn") is None
    assert segments.read("t/0", 0, 21) == b"0123456789ABCDEFGHIJK"
    layout = segments.layout("t/0")
    assert [c.name for c in layout][-len(source_chunks):] == source_chunks
    assert all(c.segment == "t/0" for c in layout)
    # The target's writer rolls over instead of appending to a chunk written for the source.
    segments.write(w_target, 21, b"!")
    assert segments.layout("t/0")[-1].tags.segment == "t/0"
    assert segments.read("t/0", 18, 4) == b"IJK!"


def test_concat_refusals(segments: ChunkedSegmentStorage) -> None:
    for name in ("a", "b", "c"):
        segments.create(name)
    segments.seal("a")
    segments.seal("b")
    with pytest.raises(SegmentSealedError):
        segments.concat("a", "b")
    writer = segments.open_write("c", epoch=1)
    segments.write(writer, 0, b"xyz")
    segments.truncate("c", 1)
    segments.seal("c")
    segments.unseal("a")
    with pytest.raises(BadOffsetError):
        segments.concat("a", "c")
    with pytest.raises(SegmentNotFoundError):
        segments.concat("a", "missing")
    merged = segments.concat("a", "b")
    assert merged.length == 0 and merged.first_chunk is None


def test_concat_into_fully_truncated_target(segments: ChunkedSegmentStorage,
                                            sink: RecordingGarbageSink) -> None:
    segments.create("x")
    segments.create("y")
    wx, wy = segments.open_write("x", 1), segments.open_write("y", 1)
    segments.write(wx, 0, b"12345")
    segments.write(wy, 0, b"abc")
    segments.truncate("x", 5)
    assert segments.layout("x") == []
    segments.seal("y")
    merged = segments.concat("x", "y")
    assert merged.start_offset == 5 and merged.length == 8 and merged.first_chunk_start_offset == 5
    assert segments.read("x", 5, 3) == b"abc"
    with pytest.raises(BadOffsetError):
        segments.read("x", 4, 1)
