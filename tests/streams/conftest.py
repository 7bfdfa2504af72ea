"""Fixtures for stream tests: a segment store with recording garbage and topology sinks, and a controller beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from segments.chunked import ChunkedSegmentStorage
from segments.controller_store import StreamMetadataStore
from segments.garbage import RecordingGarbageSink
from segments.streams import StreamController
from segments.topology import RecordingTopologySink
from storage.filesystem import FileSystemChunkStorage
from storage.sql_store import SQLiteMetadataStore
from tests.deletion.conftest import pipeline  # noqa: F401 - the real-broker deletion pipeline

#: Small enough that a few short writes roll over to new chunks.
ROLLING = 8
STREAM = "scope/orders"


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "metadata.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[SQLiteMetadataStore]:
    meta = SQLiteMetadataStore(db_path)
    yield meta
    meta.close()


@pytest.fixture
def fs_binding(tmp_path: Path) -> FileSystemChunkStorage:
    return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")


@pytest.fixture
def sink() -> RecordingGarbageSink:
    return RecordingGarbageSink()


@pytest.fixture
def segments(store: SQLiteMetadataStore, fs_binding: FileSystemChunkStorage,
             sink: RecordingGarbageSink) -> ChunkedSegmentStorage:
    return ChunkedSegmentStorage(store, fs_binding, sink, max_rolling_length=ROLLING)


@pytest.fixture
def streams_store(db_path: Path, store: SQLiteMetadataStore) -> Iterator[StreamMetadataStore]:
    controller_store = StreamMetadataStore(db_path)
    yield controller_store
    controller_store.close()


@pytest.fixture
def topology_sink() -> RecordingTopologySink:
    return RecordingTopologySink()


@pytest.fixture
def controller(segments: ChunkedSegmentStorage, streams_store: StreamMetadataStore,
               topology_sink: RecordingTopologySink) -> StreamController:
    return StreamController(segments, streams_store, topology_sink=topology_sink)
