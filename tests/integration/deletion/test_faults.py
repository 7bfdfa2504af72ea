"""Phase 2 under races, forgeries, storage faults and poison records, on the real broker."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from reclaim.consumers import retry
from reclaim.consumers.deletion_worker import DeletionWorker, WorkerConfig
from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.records import pending_deletes_for
from reclaim.localstack.procs import free_port
from reclaim.producers.producer import RecordProducer
from reclaim.schemas import millis_now
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import DeleteOutcome, DeleteResult
from reclaim.storage.errors import StorageUnavailableError
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline, committed_offsets, outcomes, read_all

pytestmark = pytest.mark.integration


class FlakyBinding:
    """Fault injection: a real binding whose ``delete_many`` fails its first ``failures`` calls.

    A mock on purpose: neither the filesystem nor moto can be made to fail a delete transiently
    on demand and then recover.
    """

    def __init__(self, inner: BaseChunkStorage, failures: int) -> None:
        self._inner = inner
        self.failures = failures
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def delete_many(self, names: Sequence[str], versions: Mapping[str, str] | None = None) -> list[DeleteResult]:
        self.calls += 1
        if self.calls <= self.failures:
            error = StorageUnavailableError("injected: endpoint unavailable", binding=self._inner.name)
            return [DeleteResult(name, DeleteOutcome.FAILED, error) for name in names]
        return self._inner.delete_many(names, versions)


def flaky(pipe: Pipeline, failures: int) -> FlakyBinding:
    inner = pipe.bindings.get("fs-tier2")
    wrapper = FlakyBinding(inner, failures)
    pipe.bindings._by_name["fs-tier2"] = wrapper  # type: ignore[assignment]
    return wrapper


def test_record_read_before_its_mark_commits_is_retried_then_deleted(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 3)
    mark_id = "race-mark"
    # Phase 1 published, but its metadata transaction has not committed yet.
    assert pipeline.publisher.publish(pending_deletes_for(chunks, mark_id, millis_now())) == []
    worker = pipeline.worker(mark_timeout_s=120)
    first = pipeline.drain(worker, lambda rs: outcomes(rs).get("mark-pending", 0) >= 3)
    assert outcomes(first) == {"mark-pending": 3}
    assert all(binding.exists(c.name) for c in chunks)

    with pipeline.store.transaction() as txn:
        pipeline.service.commit_mark(txn, chunks, mark_id)
    later = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 3)
    assert outcomes(later).get("deleted") == 3
    assert not any(binding.exists(c.name) for c in chunks)


def test_mark_that_never_commits_leaves_the_chunk_intact(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 2)
    pipeline.publisher.publish(pending_deletes_for(chunks, "lost-mark", millis_now()))
    worker = pipeline.worker(mark_timeout_s=2)
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("in-use", 0) >= 2)
    assert outcomes(reports).get("in-use") == 2
    assert all(binding.exists(c.name) for c in chunks)
    assert len(pipeline.store.get_chunks(c.name for c in chunks)) == 2


def test_forged_records_delete_nothing(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    victim = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 1)
    marked = pipeline.write_chunks(binding, "scope/stream/1.#epoch.0", 1)
    with pipeline.store.transaction() as txn:
        pipeline.service.commit_mark(txn, marked, "real-mark")
    orphan = pipeline.write_chunks(binding, "scope/stream/2.#epoch.0", 1)
    pipeline.store.remove_chunks([orphan[0].name])  # an object with no row: only its tags speak for it
    forged = [
        # Another segment's name on a marked chunk.
        dataclasses.replace(pending_deletes_for(marked, "real-mark", millis_now())[0], segment_name="x/y/9.#epoch.0"),
        # An absent chunk name pointed at a live chunk's object.
        dataclasses.replace(pending_deletes_for(victim, "m", millis_now())[0],
                            chunk_name="scope/stream/0.#epoch.0.E-1-O-0.f"),
        # The orphan, claimed for another stream.
        dataclasses.replace(pending_deletes_for(orphan, "m", millis_now())[0], topic_name="other/stream"),
    ]
    pipeline.publisher.publish(forged)
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("ownership-mismatch", 0) >= 3)
    assert outcomes(reports) == {"ownership-mismatch": 3}
    assert binding.exists(victim[0].name) and binding.exists(marked[0].name) and binding.exists(orphan[0].name)


def test_transient_storage_failures_are_retried_until_deleted(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 2)
    wrapper = flaky(pipeline, failures=3)
    pipeline.service.mark(chunks)
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 2)
    assert outcomes(reports).get("retryable-error", 0) >= 2
    assert wrapper.calls >= 4
    assert not any(binding.exists(c.name) for c in chunks)


def test_persistent_failure_ends_in_the_dlq_with_reason_and_origin(pipeline: Pipeline, tmp_path: Path) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 1)
    flaky(pipeline, failures=10**6)
    pipeline.service.mark(chunks)
    worker = pipeline.worker(max_attempts=3)
    pipeline.drain(worker, lambda rs: sum(r.dead_lettered for r in rs) >= 1)
    assert binding.exists(chunks[0].name)  # never deleted, but not forgotten either
    [dead] = read_all(pipeline, pipeline.topics.dlq, 1)
    headers = {k: v.decode() for k, v in dead.headers()}
    assert headers[retry.H_ATTEMPT] == "3"
    assert headers[retry.H_TOPIC] == pipeline.topics.deletion
    assert headers[retry.H_ERROR_CLASS] == "StorageUnavailableError"
    assert "injected" in headers[retry.H_ERROR]
    assert int(headers[retry.H_OFFSET]) == 0 and retry.H_PARTITION in headers
    assert pipeline.codec.decode(dead.value(), pipeline.topics.dlq).chunk_name == chunks[0].name

    # What an operator sees: the DLQ listing names the chunk and the reason; nothing is in flight.
    env = {**os.environ, **pipeline.worker_env(tmp_path / "tier2")}
    listing = json.loads(run_reclaim("dlq", "list", "--json", env=env, timeout=60, check=True).stdout)
    [shown] = listing["records"]
    assert (shown["chunk"], shown["error_class"], shown["attempt"]) == (chunks[0].name, "StorageUnavailableError", 3)
    worker.commit()
    inflight = run_reclaim("deletions", "inflight", env=env, timeout=60, check=True).stdout
    assert inflight.strip() == "0"


def test_poison_bytes_go_to_the_dlq_and_the_worker_keeps_going(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 1)
    for poison in (b"", b"not avro at all", b"\xc3\x01" + b"\x00" * 8 + b"junk"):
        pipeline.producer.send(pipeline.topics.deletion, poison, key=chunks[0].name.encode())
    pipeline.producer.producer.flush(10)
    pipeline.service.mark(chunks)
    worker = pipeline.worker()
    reports = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 1)
    assert outcomes(reports) == {"undecodable": 3, "deleted": 1}
    dead = read_all(pipeline, pipeline.topics.dlq, 3)
    assert len(dead) == 3
    assert all(dict(m.headers())[retry.H_OUTCOME] == b"undecodable" for m in dead)
    # Where the decode gave up, as for any other error an exception stands behind.
    assert all(b"codec.py" in dict(m.headers())[retry.H_STACK] for m in dead), [m.headers() for m in dead]


def test_a_reroute_the_broker_never_confirms_is_read_again_not_acked(pipeline: Pipeline) -> None:
    """Records whose retry-tier send fails stay unacked: their partition re-reads from the first of
    them, even though the worker has already polled (and checked) later records of it."""
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 12)
    mark_id = "slow-mark"
    # Published, mark not committed: every record must go to the first retry tier.
    pipeline.publisher.publish(pending_deletes_for(chunks, mark_id, millis_now()))
    # A real fault: the worker's producer points at a port nobody listens on, so no send is confirmed.
    unreachable = RecordProducer(f"127.0.0.1:{free_port()}", "idempotent-producer", {"message.timeout.ms": 1000})
    config = WorkerConfig(bootstrap=pipeline.bootstrap, topics=pipeline.topics, group_id=pipeline.group_id,
                          batch_size=3, poll_timeout_s=0.5, delivery_timeout_s=3.0)
    stuck = DeletionWorker(config, DeletionExecutor(pipeline.store, pipeline.bindings, mark_timeout_s=120),
                           pipeline.codec, producer=unreachable)
    pipeline.workers.append(stuck)
    reports = pipeline.drain(stuck, lambda rs: sum(r.unconfirmed for r in rs) >= 6)
    reports.append(stuck.flush())
    assert sum(r.stored for r in reports) == 0
    stuck.close()
    pipeline.workers.remove(stuck)
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 0

    with pipeline.store.transaction() as txn:
        pipeline.service.commit_mark(txn, chunks, mark_id)
    worker = pipeline.worker()
    later = pipeline.drain(worker, lambda rs: outcomes(rs).get("deleted", 0) >= 12)
    later.append(worker.flush())
    assert outcomes(later) == {"deleted": 12}
    assert not any(binding.exists(c.name) for c in chunks)
    worker.commit()
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 12


class BuggyBinding(FlakyBinding):
    """Fault injection: a binding whose first ``delete_many`` raises what no storage error covers.

    A mock on purpose: it stands for a bug, which no real server can be asked to produce.
    """

    def delete_many(self, names: Sequence[str], versions: Mapping[str, str] | None = None) -> list[DeleteResult]:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError("injected: a bug in the binding")
        return self._inner.delete_many(names, versions)


def test_a_batch_that_blows_up_stores_no_offset_of_the_batches_behind_it(pipeline: Pipeline) -> None:
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 6)
    pipeline.bindings._by_name["fs-tier2"] = BuggyBinding(binding, failures=1)  # type: ignore[assignment]
    pipeline.service.mark(chunks)
    worker = pipeline.worker(batch_size=1)
    with pytest.raises(RuntimeError, match="injected"):
        pipeline.drain(worker, lambda rs: False)
    # Later batches were in flight; their offsets would pass the failed one's record: none is stored.
    worker.close()
    pipeline.workers.remove(worker)
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 0

    pipeline.bindings._by_name["fs-tier2"] = binding
    again = pipeline.worker()
    reports = pipeline.drain(again, lambda rs: sum(r.stored for r in rs) >= 6)
    assert set(outcomes(reports)) <= {"deleted", "already-gone"}
    assert not any(binding.exists(c.name) for c in chunks)
    again.commit()
    assert committed_offsets(pipeline, pipeline.topics.deletion) == 6
