"""Phase 1 without a server: the records built for a chunk, prepared marks, and retiring rows."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from reclaim.deletion.records import copy_uuid, pending_deletes
from reclaim.schemas.ledger import LedgerType, OffloadContext
from reclaim.segments.garbage import PreparedMark, retire
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore, SQLTransaction

SEGMENT = "scope/stream/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=3)


def chunk(i: int, *locations: ChunkLocation) -> ChunkRecord:
    name = f"{SEGMENT}.E-3-O-{i}.{uuid.UUID(int=i).hex}"
    return ChunkRecord(name=name, segment=SEGMENT, start_offset=i, length=1, tags=TAGS,
                       locations=locations or (ChunkLocation("s3-tier2", Tier.TIER2, "bucket", name),))


@pytest.mark.parametrize("location", [
    ChunkLocation("s3-tier2", Tier.TIER2, "bucket", "a/b/c"),
    ChunkLocation("fs-tier2", Tier.TIER2, None, "scope/stream/0.#epoch.0.E-1-O-0.ü"),
])
def test_the_copy_uuid_is_uuid5_of_mark_and_copy(location: ChunkLocation) -> None:
    mark_id = uuid.uuid4().hex
    expected = uuid.uuid5(uuid.NAMESPACE_URL, f"reclaim:{mark_id}:{location.binding}:{location.key}")
    assert copy_uuid(mark_id, location) == expected.int
    record = pending_deletes(chunk(0, location), mark_id, 1_700_000_000_000)[0]
    metadata = {"binding": location.binding, "key": location.key, "segment": SEGMENT}
    if location.bucket is not None:
        metadata["bucket"] = location.bucket
    assert record.offload_context == OffloadContext.for_uuid(expected, driver_name=location.binding, metadata=metadata)


def test_a_chunk_with_two_copies_gets_a_record_for_each() -> None:
    hot = ChunkLocation("fs-tier1", Tier.TIER1, None, "hot/key")
    cold = ChunkLocation("s3-tier2", Tier.TIER2, "bucket", "cold/key")
    records = pending_deletes(chunk(7, hot, cold), "mark", 1_700_000_000_000)
    assert [(r.ledger_type, r.storage_binding, r.location.key) for r in records] == [
        (LedgerType.LEDGER, "fs-tier1", "hot/key"), (LedgerType.OFFLOAD_LEDGER, "s3-tier2", "cold/key")]
    assert records[0].offload_context is None and records[1].offload_context is not None
    assert {r.ledger_id for r in records} == {records[0].ledger_id} and records[0].owner_epoch == 3


def test_a_prepared_mark_covers_the_same_copies_whatever_their_row_versions() -> None:
    chunks = (chunk(0), chunk(1))
    prepared = PreparedMark("mark", chunks)
    assert prepared.covers([replace(c, version=c.version + 4, active=False) for c in chunks])
    assert not prepared.covers(chunks[:1]), "a chunk more or less"
    assert not prepared.covers(chunks[::-1]), "another order"
    moved = replace(chunks[1], locations=(ChunkLocation("s3-tier2", Tier.TIER2, "other", chunks[1].name),))
    assert not prepared.covers([chunks[0], moved]), "a copy the records do not name"
    with pytest.raises(MetadataConflictError, match="prepared for other chunks"):
        prepared.require_covers([chunks[0], moved])


class RowByRow:
    """A transaction without the batched method, as another metadata store's might be."""

    def __init__(self, txn: SQLTransaction) -> None:
        self._txn = txn

    def __getattr__(self, name: str) -> Any:
        if name == "retire_chunks":
            raise AttributeError(name)
        return getattr(self._txn, name)


@pytest.fixture
def stored(tmp_path: Path) -> Iterator[tuple[SQLiteMetadataStore, list[ChunkRecord]]]:
    store = SQLiteMetadataStore(tmp_path / "meta.db")
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(SEGMENT, stream="scope/stream"))
        rows = [txn.put_chunk(chunk(i)) for i in range(3)]
    yield store, rows
    store.close()


@pytest.mark.parametrize("batched", [True, False])
def test_retiring_marks_each_row_at_its_version(stored: tuple[SQLiteMetadataStore, list[ChunkRecord]],
                                                 batched: bool) -> None:
    store, rows = stored
    with store.transaction() as txn:
        retire(txn if batched else RowByRow(txn), rows[:2], "mark")  # type: ignore[arg-type]
    after = store.get_chunks(c.name for c in rows)
    assert [(after[c.name].active, after[c.name].mark_id, after[c.name].version) for c in rows] == [
        (False, "mark", 2), (False, "mark", 2), (True, None, 1)]


@pytest.mark.parametrize("batched", [True, False])
def test_a_row_that_moved_since_it_was_read_retires_nothing(
        stored: tuple[SQLiteMetadataStore, list[ChunkRecord]], batched: bool) -> None:
    store, rows = stored
    with store.transaction() as txn:
        txn.put_chunk(replace(rows[1], length=2))
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        retire(txn if batched else RowByRow(txn), rows, "mark")  # type: ignore[arg-type]
    assert all(row.active and row.mark_id is None for row in store.get_chunks(c.name for c in rows).values())
