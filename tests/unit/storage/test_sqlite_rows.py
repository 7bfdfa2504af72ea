"""Chunk rows read back from SQLite in one JSON text per batch: every column as written, and a row whose stored
``locations`` is not what reclaim writes refused rather than read as something else."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore

TAGS = ChunkTags(component="segment", stream="s/t", segment="s/t/0", writer_epoch=3)


def chunk(name: str, **changes: object) -> ChunkRecord:
    values: dict[str, object] = {
        "name": name, "segment": "s/t/0", "start_offset": 7, "length": 11, "tags": TAGS,
        "locations": (ChunkLocation("fs", Tier.TIER2, None, f"keys/{name}"),
                      ChunkLocation("s3", Tier.TIER2, "bucket \"b\"", f"k\\{name}\n")),
        "next_chunk": "n\u00e9xt", "active": False, "mark_id": "m-1"} | changes
    return ChunkRecord(**values)  # type: ignore[arg-type]


@pytest.fixture
def store(tmp_path: Path) -> SQLiteMetadataStore:
    store = SQLiteMetadataStore(tmp_path / "metadata.db")
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name="s/t/0", stream="s/t"))
        txn.put_chunk(chunk("c/1"))
        txn.put_chunk(chunk("c/2", next_chunk=None, mark_id=None, active=True,
                            locations=(ChunkLocation("fs", Tier.TIER1, None, "only"),)))
        txn.put_mark(MarkRecord("m-1", MarkState.COMMITTED, 1700000000.123456789))
    return store


def test_rows_come_back_as_written(store: SQLiteMetadataStore) -> None:
    rows = store.get_chunks(["c/1", "c/2", "absent"])
    assert rows == {"c/1": chunk("c/1", version=1),
                    "c/2": chunk("c/2", next_chunk=None, mark_id=None, active=True, version=1,
                                 locations=(ChunkLocation("fs", Tier.TIER1, None, "only"),))}
    assert store.get_chunks(["absent"]) == {}
    assert store.get_marks(["m-1"])["m-1"].created_at == 1700000000.123456789


@pytest.mark.parametrize("stored", [
    "not json",
    "[]",
    '[{"binding": "fs"}]',
    '{"binding": "fs", "tier": "TIER2", "bucket": null, "key": "k"}',
    # Valid JSON in the row text if it were embedded as it is: it would close this row and open another.
    '[{"binding": "fs", "tier": "TIER2", "bucket": null, "key": "k"}]], '
    '["c/1", 1, "s/t/0", 0, 1, null, 0, null, "{}", []',
])
def test_a_row_whose_locations_are_not_reclaims_is_refused(store: SQLiteMetadataStore, stored: str) -> None:
    raw = sqlite3.connect(store.path)
    with raw:
        raw.execute("UPDATE chunks SET locations = ? WHERE name = 'c/2'", (stored,))
    raw.close()
    with pytest.raises(ValueError, match="location"):
        store.get_chunks(["c/1", "c/2"])
    assert set(store.get_chunks(["c/1"])) == {"c/1"}
