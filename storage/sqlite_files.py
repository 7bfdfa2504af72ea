"""Opening reclaim's SQLite files the one way every store needs: WAL, full sync, busy timeout, schema."""

from __future__ import annotations

import os
import sqlite3


def open_sqlite(path: str | os.PathLike[str], schema: str, busy_timeout: float = 10.0) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``), shared across
    threads under the caller's lock, with ``schema`` (statements separated by ``;``) applied atomically."""
    conn = sqlite3.connect(os.fspath(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
    conn.execute("PRAGMA journal_mode = WAL")
    # A committed deletion mark or layout change must survive a power loss, not only a crash.
    conn.execute("PRAGMA synchronous = FULL")
    conn.execute("BEGIN IMMEDIATE")
    for statement in filter(str.strip, schema.split(";")):
        conn.execute(statement)
    conn.execute("COMMIT")
    return conn
