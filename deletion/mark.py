"""Phase 1 (PIP-186's metadata phase): publish pending deletes, then one metadata transaction per batch."""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol

from reclaim.deletion import metrics
from reclaim.deletion.records import mark_records
from reclaim.errors import ReclaimError
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.segments.garbage import PreparedMark, new_mark_id, retire
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState, MetadataStore, MetadataTransaction

log = logging.getLogger(__name__)

LayoutUpdate = Callable[[MetadataTransaction, Sequence[ChunkRecord]], None]

COMMIT_WITHIN_S = 150.0
"""How long after its publish began a mark may still be committed: half of phase 2's default mark
timeout (300 s), which phase 2 counts from its first sight of a record, never before the publish."""


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


_gc_lock = threading.Lock()
_gc_pauses = 0
_gc_was_enabled = False


@contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a mark's records are built, sent and confirmed.

    A mark builds a dozen container objects per chunk copy (the record, its location and context,
    their dicts) that live until its publish returns and then go all at once by reference counting:
    none is ever in a cycle. With the collector on, every 700 of them set off a collection and each
    growth of the heap by a quarter a full one, so they were traversed again and again: half of the
    records' building, and the more the bigger the batch (profiled: 4.8 µs a record without the
    collector, 11 µs with it, at 20,000). Paused for the publish only (bounded by the publisher's
    timeout), re-enabled once the records are gone; nested and concurrent marks share one pause.
    """
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


class LedgerDeletionService:
    """Phase 1: publish one ``PendingDeleteLedgerInfo`` per chunk copy, then update metadata once.

    Publish first, commit second, and never the other way round or both at once: the records are
    confirmed by the broker before the metadata transaction that marks their chunks inactive (with
    the batch's ``mark_id``) and records the mark committed even begins, so no metadata lock is held
    while the broker is slow. A worker that reads a record before that transaction commits sees the
    chunk still active and the mark absent, and retries instead of dropping it (the race PIP-186
    leaves open); if the transaction never commits, the chunk stays live and, after the mark
    timeout, the record is judged in use and acked without deleting anything.

    It is also the :class:`~reclaim.segments.garbage.GarbageSink` of ``ChunkedSegmentStorage``: ``prepare``
    publishes, ``commit`` is the metadata part inside the segment operation's own transaction.

    A mark is committed within ``commit_within_s`` of the start of its publish, or not at all: phase 2
    judges a record of a mark still uncommitted after its mark timeout in use and acks it, so a mark
    committed later (a phase-1 process stalled between its publish and its transaction) would retire
    chunks no record is left to delete. Keep it below the workers' mark timeout (half of it by default).

    A program gets one wired to its deployment's deletion topic from :func:`reclaim.open_deletions`.
    """

    def __init__(self, store: MetadataStore, publisher: PendingDeletePublisher,
                 clock: Callable[[], float] = time.time, commit_within_s: float = COMMIT_WITHIN_S,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._publisher = publisher
        self._clock = clock
        self._commit_within_s = commit_within_s
        self._monotonic = monotonic

    def mark(self, chunks: Sequence[ChunkRecord], layout_update: LayoutUpdate | None = None) -> MarkResult:
        """Hand ``chunks`` to phase 2; chunks whose send failed stay live and are reported.

        ``layout_update`` runs in the same transaction, with the chunks whose records were confirmed.
        """
        mark_id = new_mark_id()
        commit_by = self._monotonic() + self._commit_within_s
        with _cyclic_gc_paused():
            failed = self._publish(chunks, mark_id)
        sent = [chunk for chunk in chunks if chunk.name not in failed] if failed else list(chunks)
        if sent and self._monotonic() > commit_by:
            log.warning("mark %s: published too long ago to commit (over %.0f s); its %d chunks stay live and "
                        "phase 2 acks its records as in use", mark_id, self._commit_within_s, len(sent))
            metrics.MARK_BATCHES.labels("expired").inc()
            return MarkResult(mark_id, (), tuple(sorted(c.name for c in chunks)))
        if sent:
            with self._store.transaction() as txn:
                if layout_update is not None:
                    layout_update(txn, sent)
                self.commit_mark(txn, sent, mark_id)
        metrics.MARK_BATCHES.labels("partial" if failed else "complete").inc()
        return MarkResult(mark_id, tuple(c.name for c in sent), tuple(sorted(failed)))

    def prepare(self, chunks: Sequence[ChunkRecord], *, mark_id: str | None = None) -> PreparedMark:
        """Publish the records of ``chunks`` under a new mark (or ``mark_id``: one chosen before, its records
        published again), outside any metadata transaction.

        Raises :class:`MarkError` unless the broker confirmed every record; nothing has changed then.
        """
        mark_id = mark_id or new_mark_id()
        commit_by = self._monotonic() + self._commit_within_s
        with _cyclic_gc_paused():
            failed = self._publish(chunks, mark_id)
        if failed:
            metrics.MARK_BATCHES.labels("failed").inc()
            raise MarkError(f"mark {mark_id}: {len(failed)} of {len(chunks)} chunks not confirmed on the "
                            "deletion topic; nothing left the layout", sorted(failed))
        return PreparedMark(mark_id, tuple(chunks), commit_by)

    def commit(self, txn: MetadataTransaction, prepared: PreparedMark, chunks: Sequence[ChunkRecord]) -> None:
        """The metadata half of a prepared mark, inside the caller's transaction; no network.

        Raises :class:`MarkError` (the caller's transaction rolls back) once the mark is past its
        commit deadline."""
        prepared.require_covers(chunks)
        if prepared.expired(self._monotonic()):
            metrics.MARK_BATCHES.labels("expired").inc()
            raise MarkError(f"mark {prepared.mark_id}: published too long ago to commit (over "
                            f"{self._commit_within_s:.0f} s); nothing left the layout",
                            [c.name for c in chunks])
        self.commit_mark(txn, chunks, prepared.mark_id)
        txn.on_commit(metrics.MARK_BATCHES.labels("complete").inc)

    def commit_mark(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord], mark_id: str) -> None:
        """Mark ``chunks`` inactive with ``mark_id`` and record the mark committed, in ``txn``.

        Each row must still be at the version in ``chunks`` (else ``MetadataConflictError`` and the
        transaction rolls back): a row that moved since its records were built is not retired by them.
        """
        retire(txn, chunks, mark_id)
        txn.put_mark(MarkRecord(mark_id, MarkState.COMMITTED, self._clock()))

    def _publish(self, chunks: Sequence[ChunkRecord], mark_id: str) -> set[str]:
        records = mark_records(chunks, mark_id, int(self._clock() * 1000))
        failed_records = self._publisher.publish(records) if records else []
        failed = {record.chunk_name for record in failed_records}
        # A chunk's records count as sent only when all of them were confirmed, as the chunk is marked.
        types = records.ledger_types()
        sent = Counter(types if not failed else (ledger_type for ledger_type, name in
                                                 zip(types, records.chunk_names(), strict=True) if name not in failed))
        for ledger_type, count in sent.items():
            metrics.PENDING_DELETES_SENT.labels(metrics.snake(ledger_type.name)).inc(count)
        if failed:
            log.warning("mark %s: %d chunks not confirmed on the deletion topic; they stay live", mark_id, len(failed))
        return failed
