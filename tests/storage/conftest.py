"""Fixtures for storage tests: one ``chunk_storage`` fixture parametrized over every binding."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage.base import BaseChunkStorage
from storage.filesystem import FileSystemChunkStorage
from storage.s3 import S3ChunkStorage


def make_binding(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> BaseChunkStorage:
    """A fresh binding of ``kind`` ("fs" under ``tmp_path``, "s3" on the session's S3 endpoint)."""
    if kind == "fs":
        return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    endpoint = request.getfixturevalue("s3_endpoint")
    bucket = request.getfixturevalue("s3_bucket")
    return S3ChunkStorage(endpoint.binding_settings(bucket), name="s3-tier2")


@pytest.fixture(params=["fs", pytest.param("s3", marks=pytest.mark.integration)])
def chunk_storage(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseChunkStorage]:
    """Each ChunkStorage test runs once on the filesystem binding and once on S3 (moto)."""
    binding = make_binding(request.param, request, tmp_path)
    yield binding
    binding.close()
