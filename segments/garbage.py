"""The garbage sink: where chunks leaving a live segment layout are handed, inside the same transaction."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from storage.metadata import ChunkRecord, MetadataTransaction


class GarbageSink(Protocol):
    """Receives chunks that left a live layout, inside the metadata transaction that removed them.

    ``chunks`` are already stored inactive in ``txn`` (with their new versions). The sink may add to
    the same transaction (phase 1 of deletion sets ``mark_id`` on them and records the mark), so all
    of it commits or rolls back together. A sink must not act on the chunks before the transaction
    commits; ``txn.on_commit`` tells it when.
    """

    def collect(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord]) -> None: ...


class RecordingGarbageSink:
    """Keeps what was handed over in committed transactions only; for tests and the demo."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.batches: list[tuple[ChunkRecord, ...]] = []
        self.calls = 0

    def collect(self, txn: MetadataTransaction, chunks: Sequence[ChunkRecord]) -> None:
        batch = tuple(chunks)
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
