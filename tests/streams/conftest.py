"""Fixtures for stream tests: a segment store with recording garbage and topology sinks, and a controller beside it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import ControllerStore, open_controller_store
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.streams import StreamController
from reclaim.segments.topology import RecordingTopologySink
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLMetadataStore, open_metadata_store
from tests.deletion.conftest import pipeline  # noqa: F401 - the real-broker deletion pipeline

#: Small enough that a few short writes roll over to new chunks.
ROLLING = 8
STREAM = "scope/orders"


@pytest.fixture
def store(metadata_location: str) -> Iterator[SQLMetadataStore]:
    """The metadata store, once on SQLite and once on PostgreSQL."""
    meta = open_metadata_store(metadata_location)
    yield meta
    meta.close()


@pytest.fixture
def fs_binding(tmp_path: Path) -> FileSystemChunkStorage:
    return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")


@pytest.fixture
def sink() -> RecordingGarbageSink:
    return RecordingGarbageSink()


@pytest.fixture
def segments(store: SQLMetadataStore, fs_binding: FileSystemChunkStorage,
             sink: RecordingGarbageSink) -> ChunkedSegmentStorage:
    return ChunkedSegmentStorage(store, fs_binding, sink, max_rolling_length=ROLLING)


@pytest.fixture
def streams_store(metadata_location: str, store: SQLMetadataStore) -> Iterator[ControllerStore]:
    """The controller store beside ``store``, in the same database."""
    controller_store = open_controller_store(metadata_location)
    yield controller_store
    controller_store.close()


@pytest.fixture
def topology_sink() -> RecordingTopologySink:
    return RecordingTopologySink()


@pytest.fixture
def controller(segments: ChunkedSegmentStorage, streams_store: ControllerStore,
               topology_sink: RecordingTopologySink) -> StreamController:
    return StreamController(segments, streams_store, topology_sink=topology_sink)
