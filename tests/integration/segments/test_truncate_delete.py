"""Truncate and delete hand exactly the chunks leaving the layout to the garbage sink, in one transaction."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import BadOffsetError, SegmentNotFoundError
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import SegmentRecord
from reclaim.storage.sql_store import SQLMetadataStore, SQLTransaction


def _filled(segments: ChunkedSegmentStorage, name: str = "s/0", size: int = 30) -> None:
    segments.create(name)
    writer = segments.open_write(name, epoch=1)
    data = bytes(range(size))
    for start in range(0, size, 5):
        segments.write(writer, start, data[start:start + 5])


def test_truncate_hands_head_chunks_to_sink(segments: ChunkedSegmentStorage, store: SQLMetadataStore,
                                            sink: RecordingGarbageSink) -> None:
    _filled(segments)
    before = segments.layout("s/0")
    assert [(c.start_offset, c.length) for c in before] == [(0, 8), (8, 8), (16, 8), (24, 6)]
    committed = store.transactions_committed
    record = segments.truncate("s/0", 17)
    assert store.transactions_committed == committed + 1, "exactly one metadata transaction"
    assert sink.names() == [before[0].name, before[1].name]
    assert len(sink.batches) == 1
    assert all(not c.active for c in sink.collected)
    assert record.start_offset == 17 and record.first_chunk == before[2].name
    assert record.first_chunk_start_offset == 16
    assert [c.name for c in segments.layout("s/0")] == [before[2].name, before[3].name]
    assert segments.read("s/0", 17, 13) == bytes(range(17, 30))
    with pytest.raises(BadOffsetError):
        segments.read("s/0", 16, 1)
    rows = store.get_chunks(c.name for c in before[:2])
    assert set(rows) == {before[0].name, before[1].name}, "rows are marked inactive, not removed"
    assert not any(row.active for row in rows.values())
    assert all(segments.binding.exists(c.name) for c in before), "deleting bytes is the pipeline's job"


def test_truncate_is_idempotent(segments: ChunkedSegmentStorage, sink: RecordingGarbageSink) -> None:
    _filled(segments)
    first = segments.truncate("s/0", 16)
    assert len(sink.collected) == 2
    assert segments.truncate("s/0", 16) == first
    assert segments.truncate("s/0", 3) == first
    assert len(sink.collected) == 2, "re-running a truncation collects nothing more"
    with pytest.raises(BadOffsetError):
        segments.truncate("s/0", 31)


def test_truncate_to_the_end_then_write(segments: ChunkedSegmentStorage, sink: RecordingGarbageSink) -> None:
    _filled(segments, size=10)
    segments.truncate("s/0", 10)
    assert segments.layout("s/0") == [] and len(sink.collected) == 2
    writer = segments.open_write("s/0", epoch=1)
    segments.write(writer, 10, b"more")
    assert segments.read("s/0", 10, 4) == b"more"
    assert segments.layout("s/0")[0].start_offset == 10


def test_delete_hands_every_chunk_to_sink(segments: ChunkedSegmentStorage, store: SQLMetadataStore,
                                          sink: RecordingGarbageSink) -> None:
    _filled(segments)
    segments.truncate("s/0", 9)
    live = [c.name for c in segments.layout("s/0")]
    committed = store.transactions_committed
    segments.delete("s/0")
    assert store.transactions_committed == committed + 1
    assert [c.name for c in sink.batches[-1]] == live
    assert not segments.exists("s/0")
    record = store.get_segment("s/0")
    assert record is not None and record.deleted and record.first_chunk is None
    with pytest.raises(SegmentNotFoundError):
        segments.read("s/0", 9, 1)
    segments.delete("s/0")
    assert len(sink.batches) == 2, "deleting twice collects nothing more"
    assert store.list_chunks("s/0") == []
    segments.create("s/0")
    assert segments.get_info("s/0").length == 0, "a deleted name may be created again"


class _ConflictOnSegmentPut:
    """A transaction proxy whose segment CAS loses, as if another process had updated it first."""

    def __init__(self, txn: SQLTransaction) -> None:
        self._txn = txn

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def put_segment(self, record: SegmentRecord, *, expected_version: int | None = None) -> SegmentRecord:
        raise MetadataConflictError("injected", key=record.name, expected=record.version,
                                    actual=record.version + 1)


class _ConflictingStore:
    """Wraps a store; while armed, every transaction loses its segment compare-and-set."""

    def __init__(self, store: SQLMetadataStore) -> None:
        self._store = store
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self._store.transaction() as txn:
            yield _ConflictOnSegmentPut(txn) if self.armed else txn


@pytest.mark.parametrize("operation", [
    lambda s: s.truncate("s/0", 20),
    lambda s: s.delete("s/0"),
])
def test_conflicting_transaction_gives_sink_nothing(
        store: SQLMetadataStore, fs_binding: FileSystemChunkStorage,
        operation: Callable[[ChunkedSegmentStorage], object]) -> None:
    sink = RecordingGarbageSink()
    conflicting = _ConflictingStore(store)
    segments = ChunkedSegmentStorage(conflicting, fs_binding, sink, max_rolling_length=8)
    _filled(segments)
    before_record, before_rows = store.get_segment("s/0"), store.list_chunks("s/0")
    conflicting.armed = True
    with pytest.raises(MetadataConflictError):
        operation(segments)
    assert sink.calls == 1, "the sink was handed the chunks inside the transaction"
    assert sink.collected == [], "but the transaction rolled back, so it keeps nothing"
    assert store.get_segment("s/0") == before_record
    assert store.list_chunks("s/0") == before_rows, "chunks are still active"
    conflicting.armed = False
    operation(segments)
    assert sink.collected and all(not c.active for c in sink.collected)
