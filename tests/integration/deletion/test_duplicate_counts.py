"""Two records for the same chunk copy delete it once and count it once: one ``deleted``, the other
``already-gone`` (``reclaim_ledgers_deleted_total`` +1 for one object), on the filesystem and on S3.

S3 answers "deleted" for a key that is already gone, so its two paths are tested apart: both records
in one batch (one delete request), and the second record checked while the first one's delete is
still in flight (a later batch, checked before the earlier one's row cleanup, as the worker's pipeline
does).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.facts import Pending
from reclaim.deletion.mark import LedgerDeletionService, new_mark_id
from reclaim.deletion.outcomes import Outcome
from reclaim.deletion.records import pending_deletes_for
from reclaim.schemas import millis_now
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkTags, DeleteOutcome, DeleteResult
from reclaim.storage.errors import StorageUnavailableError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.pipeline import Pipeline, outcomes

pytestmark = pytest.mark.integration

SEGMENT = "scope/stream/0.#epoch.0"


class Marked:
    """One chunk written to ``binding``, with its row and a committed mark: its pending delete is cleared."""

    def __init__(self, tmp_path: Path, binding: BaseChunkStorage, location: str | None = None) -> None:
        self.binding = binding
        self.store = open_metadata_store(location or str(tmp_path / "metadata.db"))
        self.executor = DeletionExecutor(self.store, StorageBindings([binding]))
        tags = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)
        self.name = f"{SEGMENT}.E-1-O-0.0123456789abcdef0123456789abcdef"
        binding.create_with_content(self.name, b"x" * 16, tags)
        with self.store.transaction() as txn:
            txn.put_segment(SegmentRecord(name=SEGMENT, stream="scope/stream"))
            chunk = txn.put_chunk(ChunkRecord(name=self.name, segment=SEGMENT, start_offset=0, length=16, tags=tags,
                                              locations=(binding.location(self.name),)))
            mark_id = new_mark_id()
            LedgerDeletionService(self.store, publisher=None).commit_mark(  # type: ignore[arg-type]
                txn, [chunk], mark_id)
        (self.record,) = pending_deletes_for([chunk], mark_id, int(time.time() * 1000))

    def first_reading(self) -> Pending:
        return Pending(self.record)

    def close(self) -> None:
        self.executor.close()
        self.store.close()


def deleted_total() -> float:
    return sum(sample.value for metric in REGISTRY.collect() if metric.name == "reclaim_ledgers_deleted"
               for sample in metric.samples if sample.name == "reclaim_ledgers_deleted_total")


def both_copies_in_one_batch(marked: Marked) -> None:
    before = deleted_total()
    plan = marked.executor.prepare([marked.first_reading(), marked.first_reading()])
    verdicts = marked.executor.finish(plan, marked.executor.delete(plan))
    assert [v.outcome for v in verdicts] == [Outcome.DELETED, Outcome.ALREADY_GONE]
    assert deleted_total() - before == 1
    assert not marked.binding.exists(marked.name)
    assert marked.store.get_chunks([marked.name]) == {}


def second_checked_while_the_first_deletes(marked: Marked) -> None:
    before = deleted_total()
    first = marked.executor.prepare([marked.first_reading()])
    second = marked.executor.prepare([marked.first_reading()])  # the row is still there: cleared too
    first_verdicts = marked.executor.finish(first, marked.executor.delete(first))
    second_verdicts = marked.executor.finish(second, marked.executor.delete(second))
    assert [v.outcome for v in first_verdicts + second_verdicts] == [Outcome.DELETED, Outcome.ALREADY_GONE]
    assert deleted_total() - before == 1
    assert not marked.binding.exists(marked.name)


@pytest.fixture
def fs_marked(tmp_path: Path) -> Iterator[Marked]:
    marked = Marked(tmp_path, FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2", create=True))
    yield marked
    marked.close()


@pytest.fixture
def s3_marked(tmp_path: Path, s3_binding: S3ChunkStorage) -> Iterator[Marked]:
    marked = Marked(tmp_path, s3_binding)
    yield marked
    marked.close()


def test_two_records_of_one_copy_in_a_batch_count_one_deleted_on_the_filesystem(fs_marked: Marked) -> None:
    both_copies_in_one_batch(fs_marked)


def test_two_records_of_one_copy_in_a_batch_count_one_deleted_on_s3(s3_marked: Marked) -> None:
    both_copies_in_one_batch(s3_marked)


def test_a_record_checked_while_its_copys_delete_is_in_flight_is_already_gone_on_s3(s3_marked: Marked) -> None:
    second_checked_while_the_first_deletes(s3_marked)


def test_a_record_checked_while_its_copys_delete_is_in_flight_is_already_gone_on_the_filesystem(
        fs_marked: Marked) -> None:
    second_checked_while_the_first_deletes(fs_marked)


def test_a_failed_delete_does_not_make_a_later_record_of_the_copy_a_duplicate(fs_marked: Marked) -> None:
    """A copy is counted by the record whose cleanup removes it from its row: when the first record's
    delete fails, the record that deletes the copy later is the one counted. (The failure is handed to
    ``finish`` as the delete's result: root's unlink cannot be made to fail on demand.)"""
    first = fs_marked.executor.prepare([fs_marked.first_reading()])
    second = fs_marked.executor.prepare([fs_marked.first_reading()])
    failed = {first.batch[0].copy: DeleteResult(fs_marked.name, DeleteOutcome.FAILED,
                                                StorageUnavailableError("disk went away"))}
    assert [v.outcome for v in fs_marked.executor.finish(first, failed)] == [Outcome.RETRYABLE]
    assert [v.outcome for v in fs_marked.executor.finish(second, fs_marked.executor.delete(second))] == [
        Outcome.DELETED]


def test_a_worker_draining_every_record_twice_counts_each_object_deleted_once(pipeline: Pipeline) -> None:
    """End to end through a real broker: phase 1's records published twice (a publisher that retried a
    batch), in one batch or across batches as the worker polls them."""
    binding = pipeline.bindings.get("fs-tier2")
    chunks = pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 60)
    with pipeline.store.transaction() as txn:
        pipeline.service.commit_mark(txn, chunks, "twice-mark")
    records = pending_deletes_for(chunks, "twice-mark", millis_now())
    for _ in range(2):
        assert pipeline.publisher.publish(records) == []
    before = deleted_total()
    worker = pipeline.worker(batch_size=45)
    reports = pipeline.drain(worker, lambda rs: sum(outcomes(rs).values()) >= 120)
    assert outcomes(reports) == {"deleted": 60, "already-gone": 60}
    assert deleted_total() - before == 60
    assert not any(binding.exists(c.name) for c in chunks)


@pytest.fixture
def shared_marked(tmp_path: Path, s3_binding: S3ChunkStorage, metadata_location: str) -> Iterator[Marked]:
    """A marked S3 chunk whose metadata store (SQLite or PostgreSQL) a second worker opens too."""
    marked = Marked(tmp_path, s3_binding, metadata_location)
    yield marked
    marked.close()


def second_worker(marked: Marked, metadata_location: str) -> DeletionExecutor:
    """Another worker's executor: its own connection to the same metadata store, the same bucket."""
    return DeletionExecutor(open_metadata_store(metadata_location), StorageBindings([marked.binding]))


def test_two_workers_with_copies_of_one_record_count_one_deleted_on_s3(shared_marked: Marked,
                                                                       metadata_location: str) -> None:
    """A record re-published (``deletions stalled --resend``, ``dlq replay``) lands on another partition:
    two workers check it at once, both delete (S3 answers "deleted" twice), and their row cleanups race.
    The transaction that removes the row counts it; the other finds it gone."""
    other = second_worker(shared_marked, metadata_location)
    try:
        before = deleted_total()
        plans = [executor.prepare([shared_marked.first_reading()]) for executor in (shared_marked.executor, other)]
        results = [executor.delete(plan) for executor, plan in zip((shared_marked.executor, other), plans,
                                                                     strict=True)]
        assert all(r.outcome is DeleteOutcome.DELETED for result in results for r in result.values())
        with ThreadPoolExecutor(2) as pool:
            verdicts = list(pool.map(lambda e, p, r: e.finish(p, r), (shared_marked.executor, other), plans,
                                     results))
        assert sorted(v.outcome.value for [v] in verdicts) == ["already-gone", "deleted"]
        assert deleted_total() - before == 1
        assert shared_marked.store.get_chunks([shared_marked.name]) == {}
    finally:
        other.close()


def test_a_worker_that_died_after_its_delete_leaves_the_count_to_the_next_one_on_s3(shared_marked: Marked,
                                                                                     metadata_location: str) -> None:
    """A worker deletes the object and dies before its row cleanup; the partition's next owner reads the
    record again, finds the object gone and the row still there: it counts the copy, once."""
    before = deleted_total()
    dead = shared_marked.executor.prepare([shared_marked.first_reading()])
    shared_marked.executor.delete(dead)  # and never finish(): the process died here
    assert not shared_marked.binding.exists(shared_marked.name)
    other = second_worker(shared_marked, metadata_location)
    try:
        plan = other.prepare([shared_marked.first_reading()])
        assert [v.outcome for v in other.finish(plan, other.delete(plan))] == [Outcome.DELETED]
        assert deleted_total() - before == 1
        again = other.prepare([shared_marked.first_reading()])  # a third copy: no row, no object
        assert [v.outcome for v in other.finish(again, other.delete(again))] == [Outcome.ALREADY_GONE]
        assert deleted_total() - before == 1
    finally:
        other.close()
