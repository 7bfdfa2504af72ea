"""A deletion pipeline on the real broker, with helpers that act as a user would, and what tests read back
from it (outcomes, committed offsets, lag)."""

from __future__ import annotations

import time
import urllib.request
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from reclaim.consumers.deletion_worker import BatchReport, DeletionWorker, WorkerConfig
from reclaim.consumers.lag import estimated_inflight
from reclaim.deletion.executor import DeletionExecutor, RetryPolicy
from reclaim.deletion.mark import LedgerDeletionService
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.schemas.codec import build_codec
from reclaim.security.signing import RecordVerifier
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLMetadataStore, is_postgres_url


@dataclass
class Pipeline:
    """Everything one test's deletion pipeline uses, with helpers that act as a user would."""

    bootstrap: str
    topics: TopicNames
    store: SQLMetadataStore
    bindings: StorageBindings
    group_id: str
    workers: list[DeletionWorker] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.codec = build_codec()
        self.producer = RecordProducer(self.bootstrap, "idempotent-producer")
        self.publisher = KafkaPendingDeletePublisher(self.producer, self.codec, self.topics.deletion)
        self.service = LedgerDeletionService(self.store, self.publisher)

    def write_chunks(self, binding: BaseChunkStorage, segment: str, count: int, size: int = 16,
                     stream: str = "scope/stream") -> list[ChunkRecord]:
        """Create ``count`` live chunks of ``segment`` on ``binding`` with their metadata rows."""
        chunks = []
        with self.store.transaction() as txn:
            if txn.get_segment(segment) is None:
                txn.put_segment(SegmentRecord(name=segment, stream=stream))
            for i in range(count):
                name = f"{segment}.E-1-O-{i * size}.{uuid.uuid4().hex}"
                tags = ChunkTags(component="segment", stream=stream, segment=segment, writer_epoch=1)
                binding.create_with_content(name, bytes([i % 256]) * size, tags)
                chunks.append(txn.put_chunk(ChunkRecord(name=name, segment=segment, start_offset=i * size,
                                                        length=size, tags=tags,
                                                        locations=(binding.location(name),))))
        return chunks

    def worker_env(self, fs_root: Path, **extra: str) -> dict[str, str]:
        """The environment of a ``reclaim worker`` process serving this pipeline."""
        return {
            "RECLAIM_BOOTSTRAP": self.bootstrap,
            "RECLAIM_TOPIC_PREFIX": self.topics.deletion.removesuffix("ledger-deletion"),
            "RECLAIM_RETRY_DELAYS": ",".join(str(d) for d, _ in self.topics.retries),
            self._metadata_variable: self.store.location, "RECLAIM_FS_ROOT": str(fs_root),
            "RECLAIM_GROUP_ID": self.group_id, "RECLAIM_STATE_DIR": str(fs_root.parent / "worker-state"),
            # One process, as before ``--processes``: a test of the supervisor asks for more.
            "RECLAIM_POLL_TIMEOUT_S": "0.5", "RECLAIM_PROCESSES": "1", **extra,
        }

    @property
    def _metadata_variable(self) -> str:
        return "RECLAIM_METADATA_URL" if is_postgres_url(self.store.location) else "RECLAIM_METADATA_PATH"

    def worker(self, mark_timeout_s: float = 30.0, max_attempts: int = 10, verifier: RecordVerifier | None = None,
               **config: Any) -> DeletionWorker:
        executor = DeletionExecutor(self.store, self.bindings, mark_timeout_s=mark_timeout_s,
                                    retry=RetryPolicy(attempts=2, initial_wait=0.01, max_wait=0.05))
        worker = DeletionWorker(
            WorkerConfig(bootstrap=self.bootstrap, topics=self.topics, group_id=self.group_id,
                         poll_timeout_s=0.5, max_attempts=max_attempts, **config),
            executor, self.codec, verifier=verifier)
        self.workers.append(worker)
        return worker

    def drain(self, worker: DeletionWorker, until: Callable[[list[BatchReport]], bool],
              timeout_s: float = 60.0) -> list[BatchReport]:
        """Run ``worker`` batch by batch until ``until(reports)`` holds; fail after ``timeout_s``."""
        reports: list[BatchReport] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            reports.append(worker.run_once())
            if until(reports):
                return reports
        raise AssertionError(f"pipeline did not settle in {timeout_s}s: {reports[-5:]}")

    def close(self) -> None:
        for worker in self.workers:
            worker.close()
        self.producer.close()
        self.store.close()


def outcomes(reports: Sequence[BatchReport]) -> dict[str, int]:
    """Outcome counts summed over batches, keyed by outcome value."""
    total: dict[str, int] = {}
    for report in reports:
        for outcome, n in report.outcomes.items():
            total[outcome.value] = total.get(outcome.value, 0) + n
    return total


def inflight(pipe: Pipeline) -> int:
    return estimated_inflight(pipe.bootstrap, pipe.group_id, pipe.topics.deletion_inputs)


def positions(pipe: Pipeline) -> dict[str, tuple[int, int]]:
    """The group's position on each partition of the deletion topic and its retry tiers, keyed
    ``topic[partition]``: its committed offset (the low watermark before any) and the records left to read."""
    consumer = Consumer({"bootstrap.servers": pipe.bootstrap, "group.id": pipe.group_id, "enable.auto.commit": False})
    try:
        metadata = consumer.list_topics(timeout=10)
        partitions = [TopicPartition(topic, p) for topic in pipe.topics.deletion_inputs if topic in metadata.topics
                      for p in metadata.topics[topic].partitions]
        found: dict[str, tuple[int, int]] = {}
        for tp in consumer.committed(partitions, timeout=10):
            low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            position = max(tp.offset, low)
            found[f"{tp.topic}[{tp.partition}]"] = (position, high - position)
        return found
    finally:
        consumer.close()


def wait_drained(pipe: Pipeline, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while inflight(pipe) > 0:
        assert time.monotonic() < deadline, f"backlog not drained: {inflight(pipe)} left"
        time.sleep(0.5)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        return str(response.read().decode())


def read_all(pipe: Pipeline, topic: str, expected: int, timeout_s: float = 30.0) -> list[Any]:
    consumer = Consumer({"bootstrap.servers": pipe.bootstrap, "group.id": f"reader-{topic}",
                         "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    messages: list[Any] = []
    try:
        for _ in range(int(timeout_s / 0.5)):
            messages += [m for m in consumer.consume(100, 0.5) if m.error() is None]
            if len(messages) >= expected:
                break
    finally:
        consumer.close()
    return messages


def committed_offsets(pipe: Pipeline, topic: str, partitions: int = 2) -> int:
    consumer = Consumer({"bootstrap.servers": pipe.bootstrap, "group.id": pipe.group_id})
    try:
        tps = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return sum(max(tp.offset, 0) for tp in tps)
    finally:
        consumer.close()
