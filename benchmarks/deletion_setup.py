"""Setup for the deletion benchmarks (never timed): the broker, buckets, chunks and their rows, topics, read-backs."""

from __future__ import annotations

import argparse
import signal
import subprocess
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, TopicPartition

from reclaim.consumers.lag import estimated_inflight
from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
from reclaim.localstack.procs import free_port
from reclaim.localstack.s3_server import S3Endpoint, ensure_bucket, s3_client
from reclaim.producers.config import kafka_config
from reclaim.producers.kafka_errors import ErrorKind, classify, kafka_error_of
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.settings import Settings
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import ChunkTags
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MetadataStore, SegmentRecord
from reclaim.tools.topics import TopicSpec, admin_client, create_topics, topic_specs

PAYLOAD = b"c" * 64
STREAM = "bench/stream"
PARTITIONS = 4


def counts(text: str) -> list[int]:
    """A comma list of positive counts, e.g. ``5000,50000``."""
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma list of counts: {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"counts must be positive: {text!r}")
    return values


def own_broker(settings: Settings, work: Path, started: list[int]) -> str:
    """The configured broker's bootstrap, or one started here (its pid appended to ``started``)."""
    if settings.bootstrap:
        return settings.bootstrap
    ports = BrokerPorts(free_port(), free_port())
    started.append(start_broker(work / "kafka", settings.cache_dir, ports).pid)
    return ports.bootstrap


def put_objects(endpoint: S3Endpoint, bucket: str, keys: Sequence[str]) -> None:
    client = s3_client(endpoint)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda key: client.put_object(Bucket=bucket, Key=key, Body=PAYLOAD), keys))


def filled_bucket(endpoint: S3Endpoint, kind: str, n: int) -> tuple[str, list[str]]:
    """A new bucket holding ``n`` objects."""
    bucket = f"{kind}-{uuid.uuid4().hex[:8]}"
    ensure_bucket(endpoint, bucket)
    keys = [f"chunks/{i:06d}" for i in range(n)]
    put_objects(endpoint, bucket, keys)
    return bucket, keys


def new_chunks(binding: BaseChunkStorage, n: int, *, active: bool = True,
               mark_id: str | None = None) -> list[ChunkRecord]:
    """Rows of ``n`` chunks of one new segment, located in ``binding`` (neither stored nor written)."""
    segment = f"{STREAM}/{uuid.uuid4().hex[:8]}.#epoch.0"
    tags = ChunkTags(component="segment", stream=STREAM, segment=segment, writer_epoch=1)
    size = len(PAYLOAD)
    names = [f"{segment}.E-1-O-{i * size}.{uuid.uuid4().hex}" for i in range(n)]
    return [ChunkRecord(name=name, segment=segment, start_offset=i * size, length=size, tags=tags,
                        locations=(binding.location(name),), active=active, mark_id=mark_id)
            for i, name in enumerate(names)]


def store_rows(store: MetadataStore, chunks: Sequence[ChunkRecord]) -> list[ChunkRecord]:
    """Write the rows of ``chunks`` (all of one segment) and their segment in one transaction."""
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name=chunks[0].segment, stream=STREAM))
        return [txn.put_chunk(chunk) for chunk in chunks]


def created_chunks(binding: BaseChunkStorage, n: int) -> list[ChunkRecord]:
    """Rows of ``n`` chunks created through ``binding`` (with their tags, in parallel); the rows not stored."""
    chunks = new_chunks(binding, n)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda c: binding.create_with_content(c.name, PAYLOAD, c.tags), chunks))
    return chunks


def write_chunks(store: MetadataStore, binding: BaseChunkStorage, n: int) -> list[ChunkRecord]:
    """Live chunks created through ``binding`` (with their tags, in parallel), then their rows."""
    return store_rows(store, created_chunks(binding, n))


def chunk_files(binding: FileSystemChunkStorage, n: int) -> list[Path]:
    """``n`` chunks created through the filesystem binding; every file one holds: data and tag sidecar."""
    chunks = created_chunks(binding, n)
    paths = [path for c in chunks for path in (binding.data_path(c.name), binding.tags_path(c.name))]
    missing = [path for path in paths if not path.is_file()]
    assert not missing, f"the binding no longer keeps a chunk as its data file and tag sidecar: {missing[0]}"
    return paths


def fresh_topics(bootstrap: str, *, only_deletion: bool = False) -> tuple[str, TopicNames]:
    """A new topic prefix and its topics, created (only the deletion topic when ``only_deletion``)."""
    prefix = f"bench-{uuid.uuid4().hex[:8]}."
    specs = topic_specs(Settings(topic_prefix=prefix, partitions=PARTITIONS))
    topics = TopicNames.for_prefix(prefix)
    create_topics(admin_client(bootstrap), [s for s in specs if s.name == topics.deletion] if only_deletion
                  else specs)
    return prefix, topics


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    create_topics(admin_client(bootstrap), [TopicSpec(name, partitions, {})])


def connect(producer: RecordProducer, bootstrap: str, prefix: str) -> str:
    """Connect ``producer`` (with its producer id) by sending one record to a topic of its own; return it."""
    topic = f"{prefix}warm"
    create_topic(bootstrap, topic, 1)
    producer.send(topic, b"warm")
    assert producer.producer.flush(30) == 0, "the warm-up record was not delivered"
    return topic


def read_back(bootstrap: str, topic: str, n: int, timeout_s: float = 60.0) -> list[tuple[bytes, bytes]]:
    """The first ``n`` records of ``topic`` as (key, value), read without a group."""
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": f"read-{uuid.uuid4().hex[:8]}"}))
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + timeout_s
        while len(records) < n:
            assert time.monotonic() < deadline, f"read {len(records)} of {n} records back from {topic}"
            for msg in consumer.consume(1000, timeout=1.0):
                if msg.error() is None:
                    records.append((msg.key() or b"", msg.value() or b""))
        return records
    finally:
        consumer.close()


def group_lag(bootstrap: str, group: str, topics: Sequence[str]) -> int | None:
    """The group's lag over ``topics``, or None when the broker's error outlasted the reading's own
    retries but will pass (reclaim's classification of Kafka errors)."""
    try:
        return estimated_inflight(bootstrap, group, topics)
    except KafkaException as exc:
        error = kafka_error_of(exc)
        if error is not None and classify(error) is ErrorKind.RETRIABLE:
            return None
        raise


def wait_for_members(bootstrap: str, group: str, members: int, timeout_s: float = 60.0) -> None:
    """Until ``group`` is stable with ``members`` members, each holding partitions."""
    admin = admin_client(bootstrap)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        description = admin.describe_consumer_groups([group])[group].result(timeout=10)
        assigned = [m for m in description.members if m.assignment and m.assignment.topic_partitions]
        if len(assigned) == members and str(description.state).endswith("STABLE"):
            return
        time.sleep(0.2)
    raise AssertionError(f"group {group} did not settle with {members} members")


def release_and_drain(procs: Sequence[subprocess.Popen[bytes]], bootstrap: str, group: str, inputs: Sequence[str],
                      records: int, who: str) -> float:
    """Wake the stopped worker processes (SIGCONT) and time them until ``group`` has drained ``inputs``."""
    from benchmarks.worker_memory import STALL_S

    started = time.perf_counter()
    for proc in procs:
        proc.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + STALL_S + records / 100
    while group_lag(bootstrap, group, inputs) != 0:
        assert time.monotonic() < deadline, f"{who} did not drain the deletion topic"
        time.sleep(0.01)
    return time.perf_counter() - started


def stop_workers(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Terminate worker processes, stopped (SIGSTOP) or not."""
    for proc in procs:
        proc.send_signal(signal.SIGCONT)
        proc.terminate()
        proc.wait(30)
