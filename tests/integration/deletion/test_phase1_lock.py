"""Phase 1 holds no metadata lock while it publishes: other writers go on while the broker hangs.

The integration test freezes a broker of its own (SIGSTOP) for longer than the publish timeout while a
segment truncate publishes, and meanwhile writes to the same metadata store. The re-plan tests need no
server: they change the segment between a truncate's read and its commit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from reclaim.deletion.mark import LedgerDeletionService, MarkError
from reclaim.localstack.kafka_broker import BrokerPorts, start_broker
from reclaim.localstack.procs import StackError, free_port, stop_pid
from reclaim.producers.pending_deletes import KafkaPendingDeletePublisher
from reclaim.producers.topics import TopicNames
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import PreparedMark, RecordingGarbageSink
from reclaim.settings import Settings
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MetadataTransaction
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.topics import admin_client, create_topics, topic_specs
from tests.support.pipeline import Pipeline, outcomes
from tests.support.servers import server_unavailable

#: Shorter than the broker stays frozen, so the truncate's publish times out while it is; long enough
#: that the other writers, which need no broker, finish well within it on a loaded machine.
PUBLISH_TIMEOUT_S = 6.0
#: Guards against a hang only; every wait below ends on an event long before it.
GUARD_S = 120.0
SEGMENT, OTHER = "scope/stream/0.#epoch.0", "scope/stream/1.#epoch.0"


@dataclass
class Broker:
    """A broker of this module's own, so freezing it disturbs no other test."""

    bootstrap: str
    proc: subprocess.Popen[bytes]

    @contextmanager
    def frozen(self) -> Iterator[None]:
        """The broker process stopped (it keeps its sockets, answers nothing) until the block ends."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        try:
            yield
        finally:
            os.kill(self.proc.pid, signal.SIGCONT)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    ports = BrokerPorts(client=free_port(), controller=free_port())
    try:
        proc = start_broker(tmp_path_factory.mktemp("frozen-kafka"), Settings.from_env().cache_dir, ports)
    except (StackError, OSError) as exc:
        server_unavailable("Kafka broker", exc)
        raise AssertionError("unreachable") from exc
    try:
        yield Broker(ports.bootstrap, proc)
    finally:
        os.kill(proc.pid, signal.SIGCONT)
        stop_pid(proc.pid)


@pytest.fixture
def pipe(broker: Broker, tmp_path: Path) -> Iterator[Pipeline]:
    prefix = f"lock-{uuid.uuid4().hex[:8]}."
    settings = Settings(topic_prefix=prefix, retry_delays=(1, 2, 4), partitions=2)
    create_topics(admin_client(broker.bootstrap), topic_specs(settings))
    fs = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    pipeline = Pipeline(broker.bootstrap, TopicNames.for_prefix(prefix, (1, 2, 4)),
                        SQLiteMetadataStore(tmp_path / "meta.db"), StorageBindings([fs]), f"{prefix}group")
    yield pipeline
    pipeline.close()


class WatchedSink:
    """Instrumentation, not a fault: the real phase-1 service, with events around its network step."""

    def __init__(self, service: LedgerDeletionService) -> None:
        self.service = service
        self.publishing = threading.Event()
        self.published = threading.Event()

    def prepare(self, chunks: Sequence[ChunkRecord]) -> PreparedMark:
        self.publishing.set()
        try:
            return self.service.prepare(chunks)
        finally:
            self.published.set()

    def commit(self, txn: MetadataTransaction, prepared: PreparedMark, chunks: Sequence[ChunkRecord]) -> None:
        self.service.commit(txn, prepared, chunks)


def filled(storage: ChunkedSegmentStorage, name: str, data: bytes) -> None:
    storage.create(name, stream="scope/stream")
    storage.write(storage.open_write(name, epoch=1), 0, data)


@pytest.mark.integration
def test_writers_go_on_while_a_truncate_waits_for_a_frozen_broker(
        pipe: Pipeline, broker: Broker, tmp_path: Path) -> None:
    publisher = KafkaPendingDeletePublisher(pipe.producer, pipe.codec, pipe.topics.deletion, PUBLISH_TIMEOUT_S)
    sink = WatchedSink(LedgerDeletionService(pipe.store, publisher))
    binding = pipe.bindings.get("fs-tier2")
    storage = ChunkedSegmentStorage(pipe.store, binding, sink, max_rolling_length=100)
    filled(storage, SEGMENT, b"a" * 1000)
    filled(storage, OTHER, b"b" * 100)
    # Another writer with its own connection to the same file, as another process would have.
    other_store = SQLiteMetadataStore(pipe.store.location)
    other = ChunkedSegmentStorage(other_store, binding, RecordingGarbageSink(), max_rolling_length=100)
    before, layout = pipe.store.get_segment(SEGMENT), storage.layout(SEGMENT)
    failure: list[BaseException] = []

    def truncate() -> None:
        try:
            storage.truncate(SEGMENT, 450)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    with broker.frozen():
        truncating = threading.Thread(target=truncate)
        truncating.start()
        assert sink.publishing.wait(GUARD_S)
        other.write(other.open_write(OTHER, epoch=2), 100, b"c" * 250)  # its own BEGIN IMMEDIATE transactions
        storage.write(storage.open_write(OTHER, epoch=3), 350, b"d" * 50)  # the truncating process's own store
        assert not sink.published.is_set(), "the other writer finished while the truncate was still publishing"
        truncating.join(GUARD_S)
    other_store.close()

    assert not truncating.is_alive()
    assert len(failure) == 1 and isinstance(failure[0], MarkError), failure
    assert pipe.store.get_segment(SEGMENT) == before, "a truncate whose records were not confirmed changes nothing"
    assert storage.layout(SEGMENT) == layout and all(chunk.active for chunk in layout)
    assert storage.read(OTHER, 0, 400) == b"b" * 100 + b"c" * 250 + b"d" * 50

    # The broker answers again: the same truncate goes through, and phase 2 deletes what it retired.
    storage.truncate(SEGMENT, 450)
    worker = pipe.worker()
    dropped = {chunk.name for chunk in layout[:4]}
    pipe.drain(worker, lambda _: dropped.isdisjoint(binding.iter_names()))
    live = {chunk.name for name in (SEGMENT, OTHER) for chunk in storage.layout(name)}
    assert set(binding.iter_names()) == live, "no live chunk deleted, no orphan left"
    assert storage.read(SEGMENT, 450, 550) == b"a" * 550


@pytest.mark.integration
def test_records_of_a_mark_that_never_committed_delete_nothing(pipe: Pipeline, broker: Broker) -> None:
    publisher = KafkaPendingDeletePublisher(pipe.producer, pipe.codec, pipe.topics.deletion, PUBLISH_TIMEOUT_S)
    binding = pipe.bindings.get("fs-tier2")
    storage = ChunkedSegmentStorage(pipe.store, binding, LedgerDeletionService(pipe.store, publisher),
                                    max_rolling_length=100)
    filled(storage, SEGMENT, b"a" * 300)
    with broker.frozen(), pytest.raises(MarkError):
        storage.truncate(SEGMENT, 250)
    # Thawed, the producer delivers the records it still held; their mark never committed.
    worker = pipe.worker(mark_timeout_s=PUBLISH_TIMEOUT_S)
    reports = pipe.drain(worker, lambda rs: outcomes(rs).get("in-use", 0) >= 2)
    assert set(outcomes(reports)) <= {"in-use", "mark-pending"}
    assert storage.read(SEGMENT, 0, 300) == b"a" * 300
    assert all(chunk.active for chunk in storage.layout(SEGMENT))


class ChangingStore:
    """Wraps a store so that another writer appends to the segment just before each transaction.

    Instrumentation, not a fault: it reproduces, deterministically, a writer that commits between a
    truncate's read and its transaction.
    """

    def __init__(self, store: SQLiteMetadataStore, writer: Callable[[], None], times: int) -> None:
        self._store, self._writer, self._left = store, writer, times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    @contextmanager
    def transaction(self) -> Iterator[MetadataTransaction]:
        if self._left > 0:
            self._left -= 1
            self._writer()
        with self._store.transaction() as txn:
            yield txn


def changing(tmp_path: Path, times: int) -> tuple[ChunkedSegmentStorage, RecordingGarbageSink, SQLiteMetadataStore]:
    store = SQLiteMetadataStore(tmp_path / "meta.db")
    binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    plain = ChunkedSegmentStorage(store, binding, RecordingGarbageSink(), max_rolling_length=8)
    filled(plain, SEGMENT, bytes(range(30)))
    writer = plain.open_write(SEGMENT, epoch=1)

    def append() -> None:
        plain.write(writer, plain.get_info(SEGMENT).length, b"+")

    sink = RecordingGarbageSink()
    wrapped = ChangingStore(store, append, times)
    return ChunkedSegmentStorage(wrapped, binding, sink, max_rolling_length=8), sink, store  # type: ignore[arg-type]


def test_a_write_between_read_and_commit_makes_the_truncate_plan_again(tmp_path: Path) -> None:
    storage, sink, store = changing(tmp_path, times=2)
    before = storage.layout(SEGMENT)
    record = storage.truncate(SEGMENT, 17)
    assert record.start_offset == 17 and record.length == 32, "both appends kept"
    assert sink.prepared == 1, "the re-plans retire the same chunks, so their records are not sent again"
    assert sink.names() == [before[0].name, before[1].name] and sink.calls == 1
    assert storage.read(SEGMENT, 17, 15) == bytes(range(17, 30)) + b"++"
    store.close()


def test_a_segment_that_keeps_changing_gives_up_and_changes_nothing(tmp_path: Path) -> None:
    storage, sink, store = changing(tmp_path, times=100)
    with pytest.raises(MetadataConflictError, match="kept changing during truncate"):
        storage.truncate(SEGMENT, 17)
    assert sink.calls == 0 and sink.collected == []
    assert store.get_segment(SEGMENT).start_offset == 0  # type: ignore[union-attr]
    assert all(chunk.active for chunk in store.list_chunks(SEGMENT))
    store.close()
