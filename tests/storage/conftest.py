"""Fixtures for storage tests: one ``chunk_storage`` fixture parametrized over every binding."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.s3 import S3ChunkStorage
from tests.conftest import S3_SERVERS


def make_binding(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> BaseChunkStorage:
    """A fresh binding of ``kind``: "fs" under ``tmp_path``, else S3 on a new bucket of that S3 server."""
    if kind == "fs":
        return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    s3_binding_on: Callable[[str], S3ChunkStorage] = request.getfixturevalue("s3_binding_on")
    return s3_binding_on(kind)


@pytest.fixture(params=["fs", *(pytest.param(server, marks=pytest.mark.integration) for server in S3_SERVERS)])
def chunk_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseChunkStorage]:
    """Each ChunkStorage test runs on the filesystem binding and on S3, once per S3 server (moto, MinIO)."""
    binding = make_binding(request.param, request, tmp_path)
    yield binding
    binding.close()
