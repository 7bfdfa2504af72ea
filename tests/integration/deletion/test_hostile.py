"""Records and stores a hostile or unlucky operator produces, on the real broker and S3 endpoint:
each case once let phase 2 loop, over-count, mislabel or leak."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY

from reclaim.consumers import retry
from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.facts import Pending
from reclaim.deletion.records import pending_deletes_for
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.schemas import millis_now
from reclaim.storage.s3 import S3ChunkStorage
from tests.support.pipeline import Pipeline, outcomes, read_all

pytestmark = pytest.mark.integration

TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000


def counter(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_record_from_the_future_reaches_the_dlq_instead_of_cycling(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    live = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 1)
    # A correct record of a live chunk whose mark never commits, dated ten years ahead.
    pipeline.publisher.publish(pending_deletes_for(live, "uncommitted", millis_now() + TEN_YEARS_MS))
    worker = pipeline.worker(max_attempts=3)
    reports = pipeline.drain(worker, lambda rs: sum(r.dead_lettered for r in rs) >= 1)
    assert sum(r.retried for r in reports) == 0
    assert binding.exists(live[0].name)
    [dead] = read_all(pipeline, pipeline.topics.dlq, 1)
    headers = {k: v.decode() for k, v in dead.headers()}
    assert headers[retry.H_ERROR_CLASS] == "FutureRecord" and "future" in headers[retry.H_ERROR]


def test_outcomes_are_counted_once_when_batches_finish_together(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 30)
    pipeline.service.mark(chunks)
    before = counter("reclaim_deletion_outcomes_total", outcome="deleted")
    worker = pipeline.worker(batch_size=10)
    reports = pipeline.drain(worker, lambda rs: sum(r.received for r in rs) >= 30)
    reports.append(worker.flush())  # the batches still in flight finish together here
    assert outcomes(reports) == {"deleted": 30}
    assert counter("reclaim_deletion_outcomes_total", outcome="deleted") - before == 30


def test_an_s3_key_missing_behind_reclaims_back_is_counted_once_by_its_row(pipeline: Pipeline,
                                                                          s3_binding: S3ChunkStorage) -> None:
    """A copy with a row is counted by the cleanup that removes its row: S3 answers "deleted" for a key
    already missing, and nothing lists the bucket to tell otherwise, so every copy counts once."""
    pipeline.bindings.register(s3_binding)
    chunks = pipeline.write_chunks(s3_binding, "scope/stream/0.#epoch.0", 4)
    # Gone behind reclaim's back:
    s3_binding.client.delete_object(Bucket=s3_binding.bucket, Key=s3_binding.object_key(chunks[0].name))
    pipeline.service.mark(chunks)
    before = counter("reclaim_ledgers_deleted_total", ledger_type="offload_ledger")
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: sum(r.stored for r in rs) >= 4)
    assert outcomes(reports) == {"deleted": 4}
    assert counter("reclaim_ledgers_deleted_total", ledger_type="offload_ledger") - before == 4
    assert not any(s3_binding.exists(c.name) for c in chunks)
    assert pipeline.store.get_chunks(c.name for c in chunks) == {}


def test_copies_a_dead_worker_deleted_are_counted_once_by_the_worker_that_finishes_them(
        pipeline: Pipeline, s3_binding: S3ChunkStorage) -> None:
    pipeline.bindings.register(s3_binding)
    chunks = pipeline.write_chunks(s3_binding, "scope/stream/0.#epoch.0", 4)
    marked = pipeline.service.mark(chunks)
    # A worker deleted the copies and died before its row cleanup and its commit: rows left, objects gone,
    # nothing counted.
    records = pending_deletes_for(chunks, marked.mark_id, millis_now())
    dead = DeletionExecutor(pipeline.store, pipeline.bindings)
    dead.delete(dead.prepare([Pending(info) for info in records]))
    dead.close()
    assert all(row.locations for row in pipeline.store.get_chunks(c.name for c in chunks).values())
    before = counter("reclaim_ledgers_deleted_total", ledger_type="offload_ledger")
    worker = pipeline.worker()  # the partitions' next owner reads every record again
    reports = pipeline.drain(worker, lambda rs: sum(r.stored for r in rs) >= 4)
    assert outcomes(reports) == {"deleted": 4}
    assert counter("reclaim_ledgers_deleted_total", ledger_type="offload_ledger") - before == 4
    # The same records once more (a replay): no row, no object: already gone, counted nothing.
    pipeline.publisher.publish(records)
    reports = pipeline.drain(worker, lambda rs: sum(r.stored for r in rs) >= 4)
    assert outcomes(reports) == {"already-gone": 4}
    assert counter("reclaim_ledgers_deleted_total", ledger_type="offload_ledger") - before == 4


def test_records_read_again_cost_no_listing(pipeline: Pipeline, s3_binding: S3ChunkStorage) -> None:
    """A worker given the partitions after the records were written (a restart, a rebalance) deletes
    with one batched request and no listing or HEAD: whether a copy was deleted before is told by its
    row, not by the object store."""
    pipeline.bindings.register(s3_binding)
    chunks = pipeline.write_chunks(s3_binding, "scope/stream/0.#epoch.0", 6)
    pipeline.service.mark(chunks)
    operations = {op: counter("reclaim_storage_operations_total", binding="s3-tier2", operation=op, outcome="ok")
                  for op in ("list", "exists_many", "get_info", "exists")}
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: sum(r.stored for r in rs) >= 6)
    assert outcomes(reports) == {"deleted": 6}
    assert {op: counter("reclaim_storage_operations_total", binding="s3-tier2", operation=op, outcome="ok")
            for op in operations} == operations
    assert not any(s3_binding.exists(c.name) for c in chunks)


def test_a_corrupt_chunk_name_is_dead_lettered_as_such(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 1)
    [good] = pending_deletes_for(chunks, "m", millis_now())
    corrupt = dataclasses.replace(good, chunk_name="scope/stream/../../etc/passwd")
    pipeline.publisher.publish([corrupt])
    worker = pipeline.worker()
    pipeline.drain(worker, lambda rs: sum(r.dead_lettered for r in rs) >= 1)
    [dead] = read_all(pipeline, pipeline.topics.dlq, 1)
    headers = {k: v.decode() for k, v in dead.headers()}
    assert "invalid chunk name" in headers[retry.H_ERROR]
    assert "unknown storage binding" not in headers[retry.H_ERROR]
    assert headers[retry.H_ERROR_CLASS] == "InvalidChunkNameError"
    assert binding.exists(chunks[0].name)


def test_a_missing_bucket_never_acks_a_record_as_already_gone(pipeline: Pipeline, s3_endpoint: S3Endpoint,
                                                              unique_name: Callable[[str], str]) -> None:
    missing = S3ChunkStorage(s3_endpoint.binding_settings(unique_name("no-such-bucket")), name="s3-tier2")
    pipeline.bindings.register(missing)
    fs = pipeline.bindings.get("fs-tier2")
    [chunk] = pipeline.write_chunks(fs, "scope/stream/0.#epoch.0", 1)
    [record] = pending_deletes_for([chunk], "m", millis_now())
    # A record for the S3 binding of a chunk with no row: only a HEAD can say whether its object is there.
    name = chunk.name + "-rowless"
    on_s3 = dataclasses.replace(record, storage_binding="s3-tier2", chunk_name=name,
                                location=dataclasses.replace(record.location, key=name, bucket=missing.bucket))
    pipeline.publisher.publish([on_s3])
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: sum(r.dead_lettered for r in rs) >= 1)
    assert "already-gone" not in outcomes(reports)
    assert outcomes(reports) == {"fatal": 1}
    [dead] = read_all(pipeline, pipeline.topics.dlq, 1)
    assert dict(dead.headers())[retry.H_ERROR_CLASS] == b"StorageMisconfiguredError"
    missing.close()
