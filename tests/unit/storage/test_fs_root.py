"""A filesystem binding whose root is missing (a volume not mounted) is refused, never taken for empty."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from reclaim.storage.errors import StorageMisconfiguredError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import run_reclaim


def test_a_binding_that_may_not_create_its_root_refuses_an_empty_one(tmp_path: Path) -> None:
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()  # what an unmounted volume looks like: an empty directory
    binding = FileSystemChunkStorage(mount_point, create=False)
    assert list(mount_point.iterdir()) == []
    with pytest.raises(StorageMisconfiguredError, match="missing or lacks its chunks/"):
        binding.check()
    with pytest.raises(StorageMisconfiguredError):
        binding.get_info("scope/stream/0.E-1-O-0.c0")
    assert list(mount_point.iterdir()) == []


def test_a_binding_allowed_to_create_its_root_does(tmp_path: Path) -> None:
    binding = FileSystemChunkStorage(tmp_path / "fresh")
    binding.check()
    assert sorted(p.name for p in (tmp_path / "fresh").iterdir()) == ["chunks", "tags", "tmp"]


@pytest.mark.parametrize("command", [["worker", "--bootstrap", "127.0.0.1:1"], ["audit"]])
def test_worker_and_audit_stop_on_a_missing_root_and_create_nothing(tmp_path: Path, command: list[str]) -> None:
    mount_point = tmp_path / "mnt"
    mount_point.mkdir()
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state")}
    env.pop("RECLAIM_S3_ENDPOINT", None)
    (tmp_path / "state").mkdir()
    SQLiteMetadataStore(tmp_path / "state" / "metadata.db").close()  # the store a writer made
    result = run_reclaim(*command, "--fs-root", str(mount_point), env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert f"root directory '{mount_point}'" in result.stderr.splitlines()[-1]
    assert "Traceback" not in result.stderr
    assert list(mount_point.iterdir()) == []
