"""``reclaim audit`` tells live, pending, orphaned and missing chunks apart, and fails on the last two."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path

from ops.audit import audit_binding
from storage.bindings import StorageBindings
from storage.chunks import ChunkTags
from storage.filesystem import FileSystemChunkStorage
from storage.metadata import ChunkRecord, SegmentRecord
from storage.sqlite_store import SQLiteMetadataStore
from tests.cli import run_reclaim

TAGS = ChunkTags(component="segment", stream="s/a", segment="s/a/0.#epoch.0", writer_epoch=1)


def chunk(binding: FileSystemChunkStorage, name: str, **fields: object) -> ChunkRecord:
    binding.create_with_content(name, b"x", TAGS)
    return replace(ChunkRecord(name=name, segment="s/a/0.#epoch.0", start_offset=0, length=1, tags=TAGS,
                               locations=(binding.location(name),)), **fields)


def audit(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_METADATA_PATH": str(tmp_path / "m.db"),
           "RECLAIM_FS_ROOT": str(tmp_path / "tier2")}
    env.pop("RECLAIM_S3_ENDPOINT", None)
    return run_reclaim("audit", env=env, timeout=60)


def test_audit_classifies_every_object(tmp_path: Path) -> None:
    binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs-tier2")
    store = SQLiteMetadataStore(tmp_path / "m.db")
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(name="s/a/0.#epoch.0", stream="s/a"))
        txn.put_chunk(chunk(binding, "s/a/0.#epoch.0.E-1-O-0.a"))
        txn.put_chunk(chunk(binding, "s/a/0.#epoch.0.E-1-O-1.b", active=False, mark_id="m"))
    assert audit(tmp_path).returncode == 0

    binding.create_with_content("s/a/0.#epoch.0.E-1-O-2.c", b"x", TAGS)  # no row claims it
    binding.delete_many(["s/a/0.#epoch.0.E-1-O-0.a"])  # a live chunk's object is gone
    result = audit_binding(store, StorageBindings([binding]), "fs-tier2")
    assert (result.live, result.pending) == (0, 1)
    assert result.orphans == ["s/a/0.#epoch.0.E-1-O-2.c"]
    assert result.missing == ["s/a/0.#epoch.0.E-1-O-0.a"]
    cli = audit(tmp_path)
    assert cli.returncode == 1
    assert "fs-tier2: 0 live, 1 pending deletion, 1 orphans, 1 missing" in cli.stdout
    assert "orphan  s/a/0.#epoch.0.E-1-O-2.c" in cli.stdout
    store.close()
