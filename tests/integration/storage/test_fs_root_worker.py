"""A worker process told to create its filesystem root does so, then stops on the broker check: a network
wait on a broker that never answers."""

from __future__ import annotations

import os
from pathlib import Path

from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import run_reclaim


def test_the_worker_creates_a_missing_root_when_told_to(tmp_path: Path) -> None:
    root = tmp_path / "fresh-volume"
    root.mkdir()
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state")}
    env.pop("RECLAIM_S3_ENDPOINT", None)
    (tmp_path / "state").mkdir()
    SQLiteMetadataStore(tmp_path / "state" / "metadata.db").close()
    # No broker answers on port 1: the worker makes its root, then stops on the broker check.
    result = run_reclaim("worker", "--bootstrap", "127.0.0.1:1", "--fs-root", str(root), "--create-fs-root",
                         env=env, timeout=60)
    assert result.returncode == 2, result.stderr
    assert "cannot reach a Kafka broker at 127.0.0.1:1" in result.stderr.splitlines()[-1]
    assert sorted(p.name for p in root.iterdir()) == ["chunks", "tags", "tmp"]
