"""Fixtures for segment tests: a metadata store, a recording garbage sink and segment storages."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLMetadataStore, open_metadata_store
from tests.conftest import S3_SERVERS

#: Small enough that a few short writes roll over to new chunks.
ROLLING = 8


@pytest.fixture
def store(metadata_location: str) -> Iterator[SQLMetadataStore]:
    """The metadata store, once on SQLite and once on PostgreSQL."""
    meta = open_metadata_store(metadata_location)
    yield meta
    meta.close()


@pytest.fixture
def sink() -> RecordingGarbageSink:
    return RecordingGarbageSink()


@pytest.fixture
def fs_binding(tmp_path: Path) -> FileSystemChunkStorage:
    return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")


@pytest.fixture(params=["fs", *(pytest.param(server, marks=pytest.mark.integration) for server in S3_SERVERS)])
def any_binding(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseChunkStorage]:
    """The same binding matrix as ``tests/storage``: filesystem, and S3 on each of the session's S3 servers."""
    if request.param == "fs":
        binding: BaseChunkStorage = FileSystemChunkStorage(tmp_path / "tier2-any", name="fs-tier2")
    else:
        binding = request.getfixturevalue("s3_binding_on")(request.param)
    yield binding
    binding.close()


@pytest.fixture
def segments(store: SQLMetadataStore, fs_binding: FileSystemChunkStorage,
             sink: RecordingGarbageSink) -> ChunkedSegmentStorage:
    return ChunkedSegmentStorage(store, fs_binding, sink, max_rolling_length=ROLLING)


@pytest.fixture
def any_segments(store: SQLMetadataStore, any_binding: BaseChunkStorage,
                 sink: RecordingGarbageSink) -> ChunkedSegmentStorage:
    return ChunkedSegmentStorage(store, any_binding, sink, max_rolling_length=ROLLING)
