"""Fixtures of the audit tests (test_audit, test_audit_repair): a filesystem binding and a SQLite store
in the state directory ``reclaim audit`` reads. Named as the tests name them, so kept to this folder: the
segment tests' ``store`` is another."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore


@pytest.fixture
def fs(tmp_path: Path) -> FileSystemChunkStorage:
    return FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteMetadataStore]:
    (tmp_path / "state").mkdir()
    made = SQLiteMetadataStore(tmp_path / "state" / "metadata.db")
    yield made
    made.close()
