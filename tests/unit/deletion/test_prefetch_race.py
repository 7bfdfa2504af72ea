"""Phase 1 commits a mark between the two metadata reads of a batch's prefetch: the record must still be
judged deletable (or left to wait), never "in use" — that would ack it and leak a marked chunk.

The interleaving is forced by a wrapper around a real SQLite store that commits the mark just before
the prefetch's second read: a race no server can be made to lose on demand. Found by the truncation
chaos test, where a worker reading right behind the truncation applier left chunks behind the head.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from reclaim.deletion.facts import Pending, Policy, Proceed
from reclaim.deletion.mark import LedgerDeletionService, new_mark_id
from reclaim.deletion.prefetch import Prefetcher
from reclaim.deletion.records import pending_deletes_for
from reclaim.deletion.retrying import RetryPolicy
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore

SEGMENT = "scope/stream/0.#epoch.0"


class CommitsBetweenReads:
    """A metadata store that lets phase 1 commit ``mark_id`` over ``chunks`` just before the second of
    the batch's reads (whichever it is)."""

    def __init__(self, store: SQLiteMetadataStore, chunks: list[ChunkRecord], mark_id: str) -> None:
        self._store, self._chunks, self._mark_id, self.reads = store, chunks, mark_id, 0

    def _read(self) -> None:
        self.reads += 1
        if self.reads == 2:
            with self._store.transaction() as txn:
                LedgerDeletionService(self._store, publisher=None).commit_mark(  # type: ignore[arg-type]
                    txn, self._chunks, self._mark_id)

    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]:
        self._read()
        return self._store.get_chunks(names)

    def get_marks(self, mark_ids: Iterable[str]) -> dict[str, MarkRecord]:
        self._read()
        return self._store.get_marks(mark_ids)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_a_mark_committed_between_the_prefetch_reads_is_never_judged_in_use(tmp_path: Path) -> None:
    from reclaim.deletion.verify import judge

    store = SQLiteMetadataStore(tmp_path / "metadata.db")
    binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True)
    tags = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name=SEGMENT, stream="scope/stream"))
        name = f"{SEGMENT}.E-1-O-0.0123456789abcdef0123456789abcdef"
        binding.create_with_content(name, b"x" * 16, tags)
        chunk = txn.put_chunk(ChunkRecord(name=name, segment=SEGMENT, start_offset=0, length=16, tags=tags,
                                          locations=(binding.location(name),)))
    mark_id = new_mark_id()
    (record,) = pending_deletes_for([chunk], mark_id, int(time.time() * 1000))
    racing = CommitsBetweenReads(store, [chunk], mark_id)
    prefetch = Prefetcher(racing, StorageBindings([binding]), RetryPolicy())  # type: ignore[arg-type]
    pending = Pending(record)
    facts = prefetch.gather([pending], int(time.time() * 1000))
    prefetch.close()
    assert racing.reads == 2, "the prefetch read the store twice, and the mark committed in between"
    assert judge(pending, facts, Policy(mark_timeout_ms=30_000)) is Proceed.DELETE
    store.close()
