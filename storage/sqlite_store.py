"""SQLite ``MetadataStore``: one WAL file, ``BEGIN IMMEDIATE`` transactions with version compare-and-set."""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from storage.chunks import ChunkLocation, ChunkTags, Tier
from storage.errors import MetadataConflictError, MetadataError, MetadataUnavailableError
from storage.metadata import ChunkRecord, MarkRecord, MarkState, SegmentRecord, SegmentStatus
from storage.metrics import METADATA_TRANSACTIONS
from storage.sqlite_files import open_sqlite

logger = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS segments (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, stream TEXT NOT NULL, status INTEGER NOT NULL,
    start_offset INTEGER NOT NULL, length INTEGER NOT NULL, first_chunk TEXT, last_chunk TEXT,
    max_rolling_length INTEGER NOT NULL, owner_epoch INTEGER NOT NULL,
    last_chunk_start_offset INTEGER NOT NULL, first_chunk_start_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, segment TEXT NOT NULL, start_offset INTEGER NOT NULL,
    length INTEGER NOT NULL, next_chunk TEXT, active INTEGER NOT NULL, mark_id TEXT,
    tags TEXT NOT NULL, locations TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS chunks_by_segment ON chunks (segment, active);
CREATE INDEX IF NOT EXISTS chunks_by_mark ON chunks (mark_id);
CREATE TABLE IF NOT EXISTS marks (
    mark_id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL);
"""

_SEGMENT_COLUMNS = ("name", "version", "stream", "status", "start_offset", "length", "first_chunk",
                    "last_chunk", "max_rolling_length", "owner_epoch", "last_chunk_start_offset",
                    "first_chunk_start_offset")
_CHUNK_COLUMNS = ("name", "version", "segment", "start_offset", "length", "next_chunk", "active", "mark_id",
                  "tags", "locations")
_MARK_COLUMNS = ("mark_id", "version", "state", "created_at")
#: Below SQLite's default bound of 32766 host parameters, so a deletion batch is one query.
_IN_BATCH = 10000


def _segment_from_row(row: Sequence[Any]) -> SegmentRecord:
    values = dict(zip(_SEGMENT_COLUMNS, row, strict=True))
    values["status"] = SegmentStatus(values["status"])
    return SegmentRecord(**values)


def _segment_values(record: SegmentRecord) -> dict[str, Any]:
    return {column: getattr(record, column) for column in _SEGMENT_COLUMNS if column != "version"} | {
        "status": int(record.status)}


_TIERS = {tier.value: tier for tier in Tier}


@functools.lru_cache(maxsize=4096)
def _tags_from_json(raw: str) -> ChunkTags:
    # The chunks of one segment share their tags, so a deletion batch parses a handful, not thousands.
    return ChunkTags(**json.loads(raw))


def _chunk_from_row(row: Sequence[Any]) -> ChunkRecord:
    name, version, segment, start_offset, length, next_chunk, active, mark_id, tags, locations = row
    return ChunkRecord(
        name=name, segment=segment, start_offset=start_offset, length=length, next_chunk=next_chunk,
        active=bool(active), mark_id=mark_id, version=version, tags=_tags_from_json(tags),
        locations=tuple(ChunkLocation(loc["binding"], _TIERS[loc["tier"]], loc["bucket"], loc["key"])
                        for loc in json.loads(locations)))


def _chunk_values(record: ChunkRecord) -> dict[str, Any]:
    tags = {"component": record.tags.component, "stream": record.tags.stream, "segment": record.tags.segment,
            "writer_epoch": record.tags.writer_epoch, "application": record.tags.application}
    locations = [{"binding": loc.binding, "tier": loc.tier.value, "bucket": loc.bucket, "key": loc.key}
                 for loc in record.locations]
    return {"name": record.name, "segment": record.segment, "start_offset": record.start_offset,
            "length": record.length, "next_chunk": record.next_chunk, "active": int(record.active),
            "mark_id": record.mark_id, "tags": json.dumps(tags, sort_keys=True),
            "locations": json.dumps(locations)}


def _mark_from_row(row: Sequence[Any]) -> MarkRecord:
    mark_id, version, state, created_at = row
    return MarkRecord(mark_id, MarkState(state), float(created_at), int(version))


class _Reader:
    """Queries shared by transactions and the store's plain readers."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def _one(self, table: str, columns: Sequence[str], key: str, value: str) -> Sequence[Any] | None:
        sql = f"SELECT {', '.join(columns)} FROM {table} WHERE {key} = ?"
        row: Sequence[Any] | None = self._conn.execute(sql, (value,)).fetchone()
        return row

    def get_segment(self, name: str) -> SegmentRecord | None:
        row = self._one("segments", _SEGMENT_COLUMNS, "name", name)
        return _segment_from_row(row) if row else None

    def get_chunk(self, name: str) -> ChunkRecord | None:
        row = self._one("chunks", _CHUNK_COLUMNS, "name", name)
        return _chunk_from_row(row) if row else None

    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]:
        wanted = list(dict.fromkeys(names))
        found: dict[str, ChunkRecord] = {}
        for start in range(0, len(wanted), _IN_BATCH):
            batch = wanted[start:start + _IN_BATCH]
            params = ", ".join("?" * len(batch))
            sql = f"SELECT {', '.join(_CHUNK_COLUMNS)} FROM chunks WHERE name IN ({params})"
            for row in self._conn.execute(sql, batch):
                record = _chunk_from_row(row)
                found[record.name] = record
        return found

    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]:
        sql = f"SELECT {', '.join(_CHUNK_COLUMNS)} FROM chunks WHERE segment = ?"
        sql += (" AND active = 1" if active_only else "") + " ORDER BY start_offset, name"
        return [_chunk_from_row(row) for row in self._conn.execute(sql, (segment,))]

    def get_mark(self, mark_id: str) -> MarkRecord | None:
        row = self._one("marks", _MARK_COLUMNS, "mark_id", mark_id)
        return _mark_from_row(row) if row else None

    def segment_names(self, prefix: str = "") -> list[str]:
        rows = self._conn.execute("SELECT name FROM segments WHERE substr(name, 1, ?) = ? ORDER BY name",
                                  (len(prefix), prefix))
        return [str(row[0]) for row in rows]


class SQLiteTransaction(_Reader):
    """A transaction of :class:`SQLiteMetadataStore`; valid only inside its ``with`` block."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._callbacks: list[Callable[[], None]] = []

    def _cas(self, table: str, key_column: str, key: str, expected: int, values: dict[str, Any]) -> int:
        row = self._conn.execute(f"SELECT version FROM {table} WHERE {key_column} = ?", (key,)).fetchone()
        actual = int(row[0]) if row else 0
        if actual != expected:
            raise MetadataConflictError(f"{table} {key!r}: expected version {expected}, found {actual}",
                                        key=key, expected=expected, actual=actual)
        values = values | {"version": expected + 1}
        if expected == 0:
            columns = ", ".join(values)
            self._conn.execute(f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(values))})",
                               list(values.values()))
        else:
            assignments = ", ".join(f"{column} = ?" for column in values)
            self._conn.execute(f"UPDATE {table} SET {assignments} WHERE {key_column} = ?",
                               [*values.values(), key])
        return expected + 1

    def put_segment(self, record: SegmentRecord, *, expected_version: int | None = None) -> SegmentRecord:
        expected = record.version if expected_version is None else expected_version
        version = self._cas("segments", "name", record.name, expected, _segment_values(record))
        return replace(record, version=version)

    def delete_segment(self, name: str, *, expected_version: int) -> None:
        row = self._conn.execute("SELECT version FROM segments WHERE name = ?", (name,)).fetchone()
        actual = int(row[0]) if row else 0
        if actual != expected_version or actual == 0:
            raise MetadataConflictError(
                f"segments {name!r}: expected version {expected_version}, found {actual}",
                key=name, expected=expected_version, actual=actual)
        self._conn.execute("DELETE FROM segments WHERE name = ?", (name,))

    def put_chunk(self, record: ChunkRecord, *, expected_version: int | None = None) -> ChunkRecord:
        expected = record.version if expected_version is None else expected_version
        version = self._cas("chunks", "name", record.name, expected, _chunk_values(record))
        return replace(record, version=version)

    def remove_chunks(self, names: Iterable[str]) -> list[str]:
        """Remove the rows of ``names`` that are inactive; active rows are kept (they are live layout)."""
        wanted = list(dict.fromkeys(names))
        removed: list[str] = []
        for start in range(0, len(wanted), _IN_BATCH):
            batch = wanted[start:start + _IN_BATCH]
            sql = f"DELETE FROM chunks WHERE active = 0 AND name IN ({', '.join('?' * len(batch))}) RETURNING name"
            removed.extend(str(row[0]) for row in self._conn.execute(sql, batch).fetchall())
        return removed

    def put_mark(self, record: MarkRecord, *, expected_version: int | None = None) -> MarkRecord:
        expected = record.version if expected_version is None else expected_version
        values = {"mark_id": record.mark_id, "state": record.state.value, "created_at": record.created_at}
        version = self._cas("marks", "mark_id", record.mark_id, expected, values)
        return replace(record, version=version)

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after this transaction commits; never when it rolls back."""
        self._callbacks.append(callback)


class SQLiteMetadataStore:
    """The default metadata store: one SQLite file in WAL mode, safe for several processes.

    Each transaction is ``BEGIN IMMEDIATE``: it takes the database's write lock up front, so reads
    inside it are consistent with its writes and concurrent writers wait up to ``busy_timeout``
    seconds, then get :class:`MetadataUnavailableError`. One connection per store, guarded by a lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0) -> None:
        self.path = os.fspath(path)
        self.transactions_committed = 0
        self._lock = threading.RLock()
        self._in_transaction = False
        self._conn = open_sqlite(self.path, _SCHEMA, busy_timeout)
        self._reader = _Reader(self._conn)

    @contextmanager
    def transaction(self) -> Iterator[SQLiteTransaction]:
        """One atomic, serializable transaction; commit on normal exit, rollback on any exception."""
        with self._lock:
            if self._in_transaction:
                raise MetadataError("nested metadata transactions are not supported")
            self._begin()
            self._in_transaction = True
            txn = SQLiteTransaction(self._conn)
            try:
                yield txn
                self._conn.execute("COMMIT")
            except BaseException as exc:
                self._rollback(exc)
                if isinstance(exc, sqlite3.Error):
                    raise _map_sqlite_error(exc) from exc
                raise
            finally:
                self._in_transaction = False
            self.transactions_committed += 1
            METADATA_TRANSACTIONS.labels("committed").inc()
        for callback in txn._callbacks:
            _run_callback(callback)

    def _begin(self) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            METADATA_TRANSACTIONS.labels("unavailable").inc()
            raise _map_sqlite_error(exc) from exc

    def _rollback(self, exc: BaseException) -> None:
        if self._conn.in_transaction:
            self._conn.execute("ROLLBACK")
        outcome = "conflict" if isinstance(exc, MetadataConflictError) else "rolled_back"
        METADATA_TRANSACTIONS.labels(outcome).inc()
        logger.debug("metadata transaction rolled back: %s", exc)

    def _read(self, query: Callable[[_Reader], Any]) -> Any:
        with self._lock:
            try:
                return query(self._reader)
            except sqlite3.Error as exc:
                raise _map_sqlite_error(exc) from exc

    def get_segment(self, name: str) -> SegmentRecord | None:
        record: SegmentRecord | None = self._read(lambda r: r.get_segment(name))
        return record

    def get_chunk(self, name: str) -> ChunkRecord | None:
        record: ChunkRecord | None = self._read(lambda r: r.get_chunk(name))
        return record

    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]:
        """Every stored chunk row among ``names`` (active or not), in one query per 10000 names."""
        wanted = list(names)
        records: dict[str, ChunkRecord] = self._read(lambda r: r.get_chunks(wanted))
        return records

    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]:
        records: list[ChunkRecord] = self._read(lambda r: r.list_chunks(segment, active_only=active_only))
        return records

    def get_mark(self, mark_id: str) -> MarkRecord | None:
        record: MarkRecord | None = self._read(lambda r: r.get_mark(mark_id))
        return record

    def segment_names(self, prefix: str = "") -> list[str]:
        names: list[str] = self._read(lambda r: r.segment_names(prefix))
        return names

    def remove_chunks(self, names: Iterable[str]) -> list[str]:
        """Remove inactive chunk rows (after their storage delete) in one transaction; returns the removed."""
        with self.transaction() as txn:
            return txn.remove_chunks(names)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _map_sqlite_error(exc: sqlite3.Error) -> MetadataError:
    if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in (
            sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return MetadataUnavailableError(f"metadata store busy: {exc}")
    return MetadataError(f"metadata store error: {exc}")


def _run_callback(callback: Callable[[], None]) -> None:
    # The transaction is already durable; a failing observer must not make it look failed.
    try:
        callback()
    except Exception:
        logger.exception("metadata on-commit callback failed")
