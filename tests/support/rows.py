"""Chunk rows for tests of phase 1 that need a metadata store and nothing else."""

from __future__ import annotations

from pathlib import Path

from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore

SEGMENT = "scope/stream/0.#epoch.0"


def live_chunks(store: SQLiteMetadataStore, tmp_path: Path, n: int = 3) -> list[ChunkRecord]:
    """``n`` rows of one segment's chunks on a filesystem binding under ``tmp_path`` (no objects written)."""
    place = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    tags = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)
    chunks = [ChunkRecord(name=f"{SEGMENT}.E-1-O-{i}", segment=SEGMENT, start_offset=i, length=1, tags=tags,
                          locations=(place.location(f"{SEGMENT}.E-1-O-{i}"),)) for i in range(n)]
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name=SEGMENT, stream="scope/stream"))
        return [txn.put_chunk(chunk) for chunk in chunks]
