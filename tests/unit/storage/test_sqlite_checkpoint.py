"""SQLite housekeeping off the commit path: the background checkpointer and the chunk table's indexes."""

from __future__ import annotations

import multiprocessing
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord, SegmentRecord
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.storage.sqlite_base import Checkpointer

SEGMENT = "scope/stream/0.#epoch.0"
TAGS = ChunkTags(component="segment", stream="scope/stream", segment=SEGMENT, writer_epoch=1)


@pytest.fixture
def writer(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    """A WAL database whose writer never checkpoints, as a store's connection is set up."""
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("CREATE TABLE t (v INTEGER)")
    yield conn
    conn.close()


def test_a_checkpoint_copies_every_committed_frame_into_the_database(writer: sqlite3.Connection,
                                                                      tmp_path: Path) -> None:
    writer.execute("BEGIN")
    writer.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(2000)])
    writer.execute("COMMIT")
    checkpointer = Checkpointer(str(tmp_path / "db"), "test store")
    try:
        busy, frames, done = checkpointer.checkpoint()
        assert busy == 0 and frames > 0 and done == frames
    finally:
        checkpointer.close()


def test_a_nudge_checkpoints_on_the_thread_and_close_stops_it(writer: sqlite3.Connection, tmp_path: Path) -> None:
    checkpointer = Checkpointer(str(tmp_path / "db"), "test store", interval_s=0.0)
    ran = threading.Event()
    real = checkpointer.checkpoint

    def observed() -> tuple[int, int, int]:
        result = real()
        ran.set()
        return result

    checkpointer.checkpoint = observed  # type: ignore[method-assign]
    writer.execute("INSERT INTO t VALUES (1)")
    checkpointer.nudge()
    assert ran.wait(30), "the checkpointer thread never ran"
    threads = [t for t in threading.enumerate() if t.name == "test store checkpoint"]
    checkpointer.close()
    assert threads and not any(t.is_alive() for t in threads)
    checkpointer.nudge()  # after close: ignored, no thread started
    assert not [t for t in threading.enumerate() if t.name == "test store checkpoint" and t.is_alive()]


def test_an_older_file_loses_the_indexes_a_retire_rewrote(tmp_path: Path) -> None:
    path = tmp_path / "meta.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.executescript("""
        CREATE TABLE chunks (name TEXT PRIMARY KEY, version INTEGER NOT NULL, segment TEXT NOT NULL,
            start_offset INTEGER NOT NULL, length INTEGER NOT NULL, next_chunk TEXT, active INTEGER NOT NULL,
            mark_id TEXT, tags TEXT NOT NULL, locations TEXT NOT NULL);
        CREATE INDEX chunks_by_segment ON chunks (segment, active);
        CREATE INDEX chunks_by_mark ON chunks (mark_id);
    """)
    old.close()
    store = SQLiteMetadataStore(path)
    try:
        rows = [ChunkRecord(name=f"{SEGMENT}.{i}", segment=SEGMENT, start_offset=10 - i, length=1, tags=TAGS,
                            locations=(ChunkLocation("fs-tier2", Tier.TIER2, None, f"k{i}"),)) for i in range(3)]
        with store.transaction() as txn:
            txn.put_segment(SegmentRecord(SEGMENT, stream="scope/stream"))
            stored = [txn.put_chunk(row) for row in rows]
        with store.transaction() as txn:
            txn.retire_chunks(stored[1:2], "mark")
        assert [c.name for c in store.list_chunks(SEGMENT)] == [rows[2].name, rows[0].name]
        assert [c.name for c in store.list_chunks(SEGMENT, active_only=False)] == [r.name for r in rows[::-1]]
    finally:
        store.close()
    check = sqlite3.connect(path)
    indexes = {name for (name,) in check.execute("SELECT name FROM sqlite_master WHERE type = 'index' "
                                                 "AND tbl_name = 'chunks' AND sql IS NOT NULL")}
    check.close()
    assert indexes == {"chunks_by_segment_offset"}


def test_a_store_closes_with_its_checkpointer(tmp_path: Path) -> None:
    store = SQLiteMetadataStore(tmp_path / "meta.db")
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord(SEGMENT, stream="scope/stream"))
    store.close()
    # The checkpointer's connection closed first, so the store's was the last: it checkpointed the
    # WAL into the file and removed it.
    assert not (tmp_path / "meta.db-wal").exists()


def _child_commits(path: str, inherited: SQLiteMetadataStore) -> None:
    inherited._sqlite.checkpointer.nudge()  # the parent's: idle in the child, no thread starts
    assert not any(t.name == "metadata store checkpoint" for t in threading.enumerate())
    store = SQLiteMetadataStore(path)
    with store.transaction() as txn:
        txn.put_segment(SegmentRecord("child/0", stream="child"))
    store.close()


def test_a_forked_child_opens_and_commits_while_the_parent_checkpoints(tmp_path: Path) -> None:
    path = str(tmp_path / "meta.db")
    store = SQLiteMetadataStore(path)
    try:
        with store.transaction() as txn:
            txn.put_segment(SegmentRecord(SEGMENT, stream="scope/stream"))
        child = multiprocessing.get_context("fork").Process(target=_child_commits, args=(path, store))
        child.start()
        child.join(60)
        assert child.exitcode == 0
        assert store.get_segment("child/0") is not None
    finally:
        store.close()
