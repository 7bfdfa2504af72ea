"""The two-phase deletion pipeline end to end on the real broker: mark, delete, route, commit."""

from __future__ import annotations

import time

import pytest
from prometheus_client import REGISTRY

from reclaim.deletion.outcomes import Outcome
from reclaim.deletion.records import pending_deletes_for
from reclaim.schemas import millis_now
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from tests.support.pipeline import Pipeline, committed_offsets, outcomes

pytestmark = pytest.mark.integration


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_marked_chunks_are_deleted_and_offsets_committed(pipeline: Pipeline) -> None:
    marked_chunks_are_deleted_and_offsets_committed(pipeline, pipeline.bindings.get("fs-tier2"))


def test_marked_s3_chunks_are_deleted_and_offsets_committed(pipeline: Pipeline, s3_binding: S3ChunkStorage) -> None:
    pipeline.bindings.register(s3_binding)
    marked_chunks_are_deleted_and_offsets_committed(pipeline, s3_binding)


def test_marked_chunks_on_gcs_and_azure_are_deleted_and_offsets_committed(pipeline: Pipeline,
                                                                          cloud_binding: BaseChunkStorage) -> None:
    pipeline.bindings.register(cloud_binding)
    marked_chunks_are_deleted_and_offsets_committed(pipeline, cloud_binding)


def marked_chunks_are_deleted_and_offsets_committed(pipeline: Pipeline, binding: BaseChunkStorage) -> None:
    live = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 3)
    doomed = pipeline.write_chunks(binding, "scope/stream/1.#epoch.0", 40)
    deleted_before = metric("reclaim_ledgers_deleted_total", ledger_type="offload_ledger")
    tx_before = pipeline.store.transactions_committed

    result = pipeline.service.mark(doomed)
    assert result.failed == () and len(result.marked) == 40
    assert pipeline.store.transactions_committed == tx_before + 1

    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 40)
    assert outcomes(reports) == {"deleted": 40}
    assert not any(binding.exists(c.name) for c in doomed)
    assert all(binding.exists(c.name) for c in live)
    assert pipeline.store.get_chunks(c.name for c in doomed) == {}
    assert metric("reclaim_ledgers_deleted_total", ledger_type="offload_ledger") - deleted_before == 40
    worker.close()
    pipeline.workers.remove(worker)
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 40


def test_redelivery_is_harmless_and_live_chunks_survive(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    doomed = pipeline.write_chunks(binding, "scope/stream/2.#epoch.0", 5)
    live = pipeline.write_chunks(binding, "scope/stream/3.#epoch.0", 2)
    result = pipeline.service.mark(doomed)
    worker = pipeline.worker(mark_timeout_s=2)
    pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 5)
    # The same records again: nothing is left to delete, so every one is acked as already gone.
    pipeline.publisher.publish(pending_deletes_for(doomed, result.mark_id, millis_now()))
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("already-gone", 0) >= 5)
    assert outcomes(reports) == {"already-gone": 5}
    # Records for live chunks whose mark never committed delete nothing: they wait the mark timeout
    # (from phase 2's first sight of them, however old their created_at), then are acked as in use.
    pipeline.publisher.publish(pending_deletes_for(live, "never-committed", 0))
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get(Outcome.IN_USE.value, 0) >= 2)
    assert outcomes(reports).get("in-use") == 2 and set(outcomes(reports)) == {"in-use", "mark-pending"}
    assert all(binding.exists(c.name) for c in live)


def test_a_rebalance_mid_drain_loses_nothing(pipeline: Pipeline) -> None:
    """A second worker joins while the first drains: partitions move, every record ends final once."""
    binding = pipeline.bindings.get("fs-tier2")
    doomed = []
    for segment in range(4):
        batch = pipeline.write_chunks(binding, f"scope/stream/{segment}.#epoch.0", 50)
        pipeline.service.mark(batch)
        doomed += batch
    first = pipeline.worker(batch_size=20)
    reports = pipeline.drain(first, lambda rs: sum(r.stored for r in rs) >= 40)
    second = pipeline.worker(batch_size=20)
    deadline = time.monotonic() + 60
    while any(binding.exists(c.name) for c in doomed) or not second.assigned:
        assert time.monotonic() < deadline, "the two workers did not drain the backlog"
        reports += [first.run_once(), second.run_once()]
    for worker in (first, second):
        reports.append(worker.flush())  # batches still in flight when the objects were already gone
        worker.close()
        pipeline.workers.remove(worker)
    assert set(outcomes(reports)) <= {"deleted", "already-gone"}
    assert outcomes(reports).get("deleted", 0) == 200
    assert pipeline.store.get_chunks(c.name for c in doomed) == {}
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 200
