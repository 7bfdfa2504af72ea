"""The garbage sink: where chunks leaving a live segment layout go, in two steps — prepare, then commit."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.metadata import ChunkRecord, MetadataTransaction


def _copies(chunks: Sequence[ChunkRecord]) -> list[tuple[object, ...]]:
    # What a pending-delete record names: the chunk, its owner and every copy (not the row version).
    return [(c.name, c.segment, c.tags, c.locations) for c in chunks]


@dataclass(frozen=True)
class PreparedMark:
    """Chunks handed over under ``mark_id`` before they leave the layout; nothing is committed yet."""

    mark_id: str
    chunks: tuple[ChunkRecord, ...]
    commit_by: float | None = None
    """The ``time.monotonic()`` after which the mark may no longer be committed (None: no deadline)."""

    def covers(self, chunks: Sequence[ChunkRecord]) -> bool:
        """True when ``chunks`` are the same copies, in the same order, as those prepared."""
        return _copies(self.chunks) == _copies(chunks)

    def expired(self, now: float | None = None) -> bool:
        """True once the mark is past its commit deadline: it must not be committed (nor reused)."""
        return self.commit_by is not None and (time.monotonic() if now is None else now) > self.commit_by

    def require_covers(self, chunks: Sequence[ChunkRecord]) -> None:
        """Raise ``MetadataConflictError`` unless ``chunks`` are exactly the prepared copies."""
        if not self.covers(chunks):
            raise MetadataConflictError(f"mark {self.mark_id} was prepared for other chunks",
                                        key=self.mark_id, expected=len(self.chunks), actual=len(chunks))


def new_mark_id() -> str:
    """A new deletion mark's id: 32 random hex digits."""
    return uuid.uuid4().hex


class GarbageSink(Protocol):
    """Takes chunks out of a live layout in two steps, so no metadata lock is held across the network.

    1. ``prepare(chunks)`` runs outside any metadata transaction, before anything changes: the sink
       does whatever may be slow (phase 1 of deletion publishes the pending-delete records and waits
       for the broker) and raises if it cannot take the chunks; the layout is untouched.
    2. ``commit(txn, prepared, chunks)`` runs inside the metadata transaction that removes the chunks
       from the layout, with no network: it marks the rows inactive with ``prepared.mark_id`` (each
       at the version in ``chunks``: a compare-and-set) and adds whatever else the sink keeps, so it
       all commits or rolls back with the layout change. ``chunks`` must be the prepared copies.

    A prepared mark that never commits (a crash, a conflict, a stale plan) leaves its chunks live.
    """

    def prepare(self, chunks: Sequence[ChunkRecord]) -> PreparedMark: ...

    def commit(self, txn: MetadataTransaction, prepared: PreparedMark, chunks: Sequence[ChunkRecord]) -> None: ...


@runtime_checkable
class _BatchRetiring(Protocol):
    def retire_chunks(self, chunks: Sequence[ChunkRecord], mark_id: str) -> None: ...


def retire(txn: MetadataTransaction, chunks: Sequence[ChunkRecord], mark_id: str) -> None:
    """Mark ``chunks`` inactive with ``mark_id`` in ``txn``, each at its own version (a compare-and-set).

    One batched statement where the transaction has one, else one ``put_chunk`` per chunk. An offload of a
    retired chunk still on its way is cancelled in the same transaction (its copy is then deleted on its
    own), so an offload never switches a retired chunk and never leaves its copy behind.
    """
    if isinstance(txn, _BatchRetiring):
        txn.retire_chunks(chunks, mark_id)
    else:
        for chunk in chunks:
            txn.put_chunk(replace(chunk, active=False, mark_id=mark_id))
    txn.cancel_offloads([chunk.name for chunk in chunks])


class RecordingGarbageSink:
    """Keeps what was handed over in committed transactions only; for tests and the demo."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches: list[tuple[ChunkRecord, ...]] = []
        self.prepared = 0
        self.calls = 0

    def prepare(self, chunks: Sequence[ChunkRecord], *, mark_id: str | None = None) -> PreparedMark:
        with self._lock:
            self.prepared += 1
        return PreparedMark(mark_id or new_mark_id(), tuple(chunks))

    def commit(self, txn: MetadataTransaction, prepared: PreparedMark, chunks: Sequence[ChunkRecord]) -> None:
        prepared.require_covers(chunks)
        retire(txn, chunks, prepared.mark_id)
        batch = tuple(replace(c, active=False, mark_id=prepared.mark_id, version=c.version + 1) for c in chunks)
        with self._lock:
            self.calls += 1
        txn.on_commit(lambda: self._committed(batch))

    def _committed(self, batch: tuple[ChunkRecord, ...]) -> None:
        with self._lock:
            self.batches.append(batch)

    @property
    def collected(self) -> list[ChunkRecord]:
        """Every chunk received in committed transactions, in order."""
        with self._lock:
            return [chunk for batch in self.batches for chunk in batch]

    def names(self) -> list[str]:
        return [chunk.name for chunk in self.collected]
