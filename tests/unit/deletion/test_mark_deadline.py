"""Phase 1 commits a mark within its deadline or not at all (no server: a publisher that confirms all).

Phase 2 judges a record whose mark is still uncommitted after the mark timeout in use and acks it; a
mark committed after that (phase 1 stalled between its publish and its transaction) would retire
chunks that no record is left to delete.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from reclaim.deletion.mark import LedgerDeletionService, MarkError
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.segments.garbage import PreparedMark
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.rows import live_chunks


class SlowPublisher:
    """Confirms every record, taking ``seconds`` of the fake monotonic clock to do so."""

    def __init__(self, clock: list[float], seconds: float) -> None:
        self._clock = clock
        self._seconds = seconds

    def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        self._clock[0] += self._seconds
        return []


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteMetadataStore]:
    meta = SQLiteMetadataStore(tmp_path / "metadata.db")
    yield meta
    meta.close()


def service(store: SQLiteMetadataStore, clock: list[float], publish_s: float) -> LedgerDeletionService:
    return LedgerDeletionService(store, SlowPublisher(clock, publish_s), commit_within_s=150.0,
                                 monotonic=lambda: clock[0])


def test_a_mark_published_within_its_deadline_is_committed(store: SQLiteMetadataStore, tmp_path: Path) -> None:
    chunks = live_chunks(store, tmp_path)
    result = service(store, [0.0], publish_s=149.0).mark(chunks)
    assert result.marked == tuple(c.name for c in chunks) and not result.failed
    assert store.get_mark(result.mark_id) is not None
    assert not any(row.active for row in store.get_chunks(c.name for c in chunks).values())


def test_a_mark_whose_publish_outlasted_its_deadline_leaves_every_chunk_live(store: SQLiteMetadataStore,
                                                                             tmp_path: Path) -> None:
    chunks = live_chunks(store, tmp_path)
    result = service(store, [0.0], publish_s=151.0).mark(chunks)
    assert result.marked == () and result.failed == tuple(sorted(c.name for c in chunks))
    assert store.get_mark(result.mark_id) is None
    assert all(row.active and row.mark_id is None for row in store.get_chunks(c.name for c in chunks).values())


def test_a_prepared_mark_past_its_deadline_is_refused_and_the_transaction_rolls_back(
        store: SQLiteMetadataStore, tmp_path: Path) -> None:
    chunks = live_chunks(store, tmp_path)
    clock = [0.0]
    sink = service(store, clock, publish_s=1.0)
    prepared = sink.prepare(chunks)
    assert prepared.commit_by == 150.0 and not prepared.expired(clock[0])
    clock[0] = 150.5  # the process stalled between its publish and its transaction
    assert prepared.expired(clock[0])
    with pytest.raises(MarkError, match="published too long ago to commit"), store.transaction() as txn:
        sink.commit(txn, prepared, chunks)
    assert store.get_mark(prepared.mark_id) is None
    assert all(row.active for row in store.get_chunks(c.name for c in chunks).values())


def test_a_mark_without_a_deadline_never_expires() -> None:
    assert not PreparedMark("m", ()).expired(1e12)
