"""Helpers of the ``reclaim audit`` tests: chunk names, aged objects, rows and the command itself."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import replace
from pathlib import Path

from reclaim.exits import ExitCode
from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord, MarkRecord, MarkState, SegmentRecord
from reclaim.storage.sql_store import SQLMetadataStore
from tests.support.cli import run_reclaim

SEGMENT = "s/a/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream="s/a", segment=SEGMENT, writer_epoch=1)


HOUR = 3600.0


def name(i: int) -> str:
    return f"{SEGMENT}.E-1-O-{i}.c{i}"


def aged(binding: FileSystemChunkStorage, chunk: str, seconds: float) -> None:
    """Date a chunk's file ``seconds`` back, as if it had been written then."""
    then = time.time() - seconds
    os.utime(binding.data_path(chunk), (then, then))


def put(store: SQLMetadataStore, *rows: ChunkRecord, marks: tuple[MarkRecord, ...] = ()) -> None:
    with store.transaction() as txn:
        if txn.get_segment(SEGMENT) is None:
            txn.put_segment(SegmentRecord(name=SEGMENT, stream="s/a"))
        for record in rows:
            txn.put_chunk(record)
        for mark in marks:
            txn.put_mark(mark)


def chunk(binding: BaseChunkStorage | None, chunk_name: str, *, write: bool = True,
          location: ChunkLocation | None = None, **fields: object) -> ChunkRecord:
    """A chunk row (and, with ``write``, its object on ``binding``)."""
    if write and binding is not None:
        binding.create_with_content(chunk_name, b"x", TAGS)
    where = location or binding.location(chunk_name)  # type: ignore[union-attr]
    return replace(ChunkRecord(name=chunk_name, segment=SEGMENT, start_offset=0, length=1, tags=TAGS,
                               locations=(where,)), **fields)


def findings_fixture(fs: FileSystemChunkStorage, store: SQLMetadataStore) -> None:
    """One of everything the audit tells apart, on the filesystem binding."""
    old, new = time.time() - 2 * HOUR, time.time() - 60
    put(store,
        chunk(fs, name(0)),                                                    # live
        chunk(fs, name(1), active=False, mark_id="m-old"),                      # pending deletion
        chunk(fs, name(2), write=False),                                        # missing
        chunk(fs, name(3), write=False, active=False, mark_id="m-old"),         # dangling: cleanup lost
        chunk(fs, name(4), write=False, active=False, mark_id="m-new"),         # in cleanup, within the grace
        chunk(None, name(5), write=False,                                       # dangling: binding not configured
              location=ChunkLocation("old-tier2", Tier.TIER2, None, name(5))),
        marks=(MarkRecord("m-old", MarkState.COMMITTED, old), MarkRecord("m-new", MarkState.COMMITTED, new)))
    fs.create_with_content(name(6), b"x", TAGS)                                # orphan, past the grace
    aged(fs, name(6), 2 * HOUR)
    fs.create_with_content(name(7), b"x", TAGS)                                # recent: its row may be coming
    fs.create_with_content("_reclaim_layouts/s/a/0/1.json", b"{}", None)       # a layout export: not a chunk


def env_for(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    return {**env, "RECLAIM_STATE_DIR": str(tmp_path / "state"), "RECLAIM_FS_ROOT": str(tmp_path / "tier2"),
            **extra}


def run_audit(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return run_reclaim("audit", *args, env=env_for(tmp_path, **extra), timeout=120)


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == ExitCode.UNAVAILABLE, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("reclaim: error: ")
    assert result.stdout == "", "nothing is reported of an audit that could not run whole"
    return lines[0]


