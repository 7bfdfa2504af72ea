"""Segments' garbage goes through the pipeline: truncate and delete end with the chunks gone from tier-2."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from reclaim.deletion.mark import LedgerDeletionService, MarkError
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.segments.chunked import ChunkedSegmentStorage
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration


class RefusingPublisher:
    """Fault injection: a publisher whose sends are never confirmed (a broker cannot be told to
    refuse exactly one batch and then work again, so this stands in for it)."""

    def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        return list(records)


def segments(pipe: Pipeline, service: LedgerDeletionService) -> ChunkedSegmentStorage:
    return ChunkedSegmentStorage(pipe.store, pipe.bindings.get("fs-tier2"), service, max_rolling_length=100)


def test_truncate_and_delete_collect_through_the_pipeline(pipeline: Pipeline) -> None:
    storage = segments(pipeline, pipeline.service)
    binding = pipeline.bindings.get("fs-tier2")
    for name in ("scope/stream/0.#epoch.0", "scope/stream/1.#epoch.0"):
        storage.create(name, stream="scope/stream")
        handle = storage.open_write(name, epoch=1)
        storage.write(handle, 0, b"a" * 1000)
    layout0 = storage.layout("scope/stream/0.#epoch.0")
    layout1 = storage.layout("scope/stream/1.#epoch.0")
    assert len(layout0) == 10

    storage.truncate("scope/stream/0.#epoch.0", 450)  # four whole chunks fall below the offset
    storage.delete("scope/stream/1.#epoch.0")
    worker = pipeline.worker()
    pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 14)

    assert {c.name for c in layout0[:4]}.isdisjoint(binding.iter_names())
    assert {c.name for c in layout1}.isdisjoint(binding.iter_names())
    assert set(binding.iter_names()) == {c.name for c in layout0[4:]}
    assert storage.read("scope/stream/0.#epoch.0", 450, 550) == b"a" * 550


def test_a_truncate_whose_records_are_not_confirmed_changes_nothing(pipeline: Pipeline) -> None:
    refusing = LedgerDeletionService(pipeline.store, RefusingPublisher())
    storage = segments(pipeline, refusing)
    storage.create("scope/stream/0.#epoch.0", stream="scope/stream")
    storage.write(storage.open_write("scope/stream/0.#epoch.0", epoch=1), 0, b"b" * 300)
    before = storage.get_info("scope/stream/0.#epoch.0")
    with pytest.raises(MarkError):
        storage.truncate("scope/stream/0.#epoch.0", 250)
    after = storage.get_info("scope/stream/0.#epoch.0")
    assert after == before
    assert all(c.active for c in storage.layout("scope/stream/0.#epoch.0"))


def test_ten_thousand_chunks_cost_one_metadata_transaction(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 10_000, size=1)
    before = pipeline.store.transactions_committed
    result = pipeline.service.mark(chunks)
    assert pipeline.store.transactions_committed - before == 1
    assert len(result.marked) == 10_000 and result.failed == ()
    rows = pipeline.store.get_chunks(c.name for c in chunks)
    assert all(not row.active and row.mark_id == result.mark_id for row in rows.values())
    assert pipeline.store.get_mark(result.mark_id) is not None
