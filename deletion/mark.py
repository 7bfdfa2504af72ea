"""Phase 1 (PIP-186's metadata phase): publish pending deletes, then one metadata transaction per batch."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from deletion import metrics
from deletion.records import pending_deletes_for
from schemas.errors import ReclaimError
from schemas.ledger import PendingDeleteLedgerInfo
from storage.metadata import ChunkRecord, MarkRecord, MarkState, MetadataStore, MetadataTransaction

log = logging.getLogger(__name__)

LayoutUpdate = Callable[[MetadataTransaction, Sequence[ChunkRecord]], None]


class PendingDeletePublisher(Protocol):
    """Sends records to the deletion topic and waits for every delivery report."""

    def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        """Send ``records``; return those whose delivery was not confirmed."""
        ...


class MarkError(ReclaimError):
    """Phase 1 could not hand every chunk to phase 2; nothing left the live layout."""

    retryable = True

    def __init__(self, message: str, failed_chunks: Sequence[str]) -> None:
        super().__init__(message)
        self.failed_chunks = tuple(failed_chunks)


@dataclass(frozen=True)
class MarkResult:
    """One mark batch: the chunks taken out of the live layout and those whose send failed (still live)."""

    mark_id: str
    marked: tuple[str, ...]
    failed: tuple[str, ...]


def new_mark_id() -> str:
    return uuid.uuid4().hex


class LedgerDeletionService:
    """Phase 1: publish one ``PendingDeleteLedgerInfo`` per chunk copy, then update metadata once.

    The metadata update marks the sent chunks inactive with the batch's ``mark_id`` and records
    the mark as committed, in the same transaction as the caller's layout change. A worker that
    reads a record before that transaction commits sees the chunk still active and the mark
    absent, and retries instead of dropping it (the race PIP-186 leaves open).
    """

    def __init__(self, store: MetadataStore, publisher: PendingDeletePublisher,
                 clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._publisher = publisher
        self._clock = clock

    def mark(self, chunks: Sequence[ChunkRecord], layout_update: LayoutUpdate | None = None) -> MarkResult:
        """Hand ``chunks`` to phase 2; chunks whose send failed stay live and are reported."""
        mark_id = new_mark_id()
        failed = self._publish(chunks, mark_id)
        sent = [chunk for chunk in chunks if chunk.name not in failed]
        if sent:
            with self._store.transaction() as txn:
                if layout_update is not None:
                    layout_update(txn, sent)
                self.commit_mark(txn, sent, mark_id)
        metrics.MARK_BATCHES.labels("partial" if failed else "complete").inc()
        return MarkResult(mark_id, tuple(c.name for c in sent), tuple(sorted(failed)))

    def collect(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord]) -> None:
        """The garbage sink of ``ChunkedSegmentStorage``: phase 1 for chunks a truncate or delete retires."""
        self.collect_in(txn, chunks)

    def collect_in(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord]) -> str:
        """Phase 1 inside a caller's transaction (a segment truncate or delete): all or nothing.

        Publishes while the caller's transaction is open; if any send fails, raises
        :class:`MarkError` so the transaction rolls back and no chunk leaves the layout. Records
        already sent then name chunks that stay active, which workers judge in use after the mark
        timeout.
        """
        mark_id = new_mark_id()
        failed = self._publish(chunks, mark_id)
        if failed:
            metrics.MARK_BATCHES.labels("failed").inc()
            raise MarkError(f"{len(failed)} of {len(chunks)} chunks not confirmed on the deletion topic",
                            sorted(failed))
        self.commit_mark(txn, chunks, mark_id)
        metrics.MARK_BATCHES.labels("complete").inc()
        return mark_id

    def commit_mark(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord], mark_id: str) -> None:
        """Mark ``chunks`` inactive with ``mark_id`` and record the mark committed, in ``txn``."""
        current = txn.get_chunks(chunk.name for chunk in chunks)
        for chunk in chunks:
            row = current.get(chunk.name, chunk)
            txn.put_chunk(replace(row, active=False, mark_id=mark_id))
        txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, self._clock()))

    def _publish(self, chunks: Sequence[ChunkRecord], mark_id: str) -> set[str]:
        records = pending_deletes_for(chunks, mark_id, int(self._clock() * 1000))
        failed_records = self._publisher.publish(records) if records else []
        failed = {record.chunk_name for record in failed_records}
        for record in records:
            if record.chunk_name not in failed:
                metrics.PENDING_DELETES_SENT.labels(record.ledger_type.name).inc()
        if failed:
            log.warning("mark %s: %d chunks not confirmed on the deletion topic; they stay live", mark_id, len(failed))
        return failed
