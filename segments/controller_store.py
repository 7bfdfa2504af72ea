"""The store of controller metadata (streams, history, sealed lengths, transactions, pending operations),
on SQLite or PostgreSQL."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from reclaim.schemas.streams import RetentionPolicy, StreamCut, StreamCutRecord
from reclaim.segments.ids import SegmentId, TxnId
from reclaim.segments.stream_model import (
    EpochRecord,
    JournalEntry,
    JournalState,
    StreamRecord,
    StreamState,
    TxnRecord,
    TxnState,
)
from reclaim.segments.stream_plans import Operation, epoch_from_dict, epoch_to_dict, plan_from_json, plan_to_json
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.sql_base import Database, Migration, Queries, StoreBase, Transaction
from reclaim.storage.sqlite_base import SQLiteDatabase

#: The store's name in errors and in the schema-version table.
STORE = "controller store"

MIGRATIONS = (
    Migration(1, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS controller_streams (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, scope TEXT NOT NULL, stream TEXT NOT NULL,
    policy TEXT NOT NULL, state TEXT NOT NULL, active_epoch INTEGER NOT NULL, txn_counter TEXT NOT NULL,
    commit_counter INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS controller_epochs (
    stream TEXT NOT NULL, epoch INTEGER NOT NULL, record TEXT NOT NULL, PRIMARY KEY (stream, epoch));
CREATE TABLE IF NOT EXISTS controller_txns (
    stream TEXT NOT NULL, txn_id TEXT NOT NULL, version INTEGER NOT NULL, epoch INTEGER NOT NULL,
    state TEXT NOT NULL, parents TEXT NOT NULL, commit_order INTEGER, created_at REAL NOT NULL,
    PRIMARY KEY (stream, txn_id));
CREATE TABLE IF NOT EXISTS controller_operations (
    stream TEXT PRIMARY KEY, version INTEGER NOT NULL, op_id TEXT NOT NULL, plan TEXT NOT NULL,
    started_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS controller_sealed (
    stream TEXT NOT NULL, segment_id INTEGER NOT NULL, length INTEGER NOT NULL, PRIMARY KEY (stream, segment_id));
CREATE TABLE IF NOT EXISTS controller_heads (stream TEXT PRIMARY KEY, cut TEXT NOT NULL)
""",
        "postgresql": """
CREATE TABLE controller_streams (
    name TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, scope TEXT NOT NULL, stream TEXT NOT NULL,
    policy TEXT NOT NULL, state TEXT NOT NULL, active_epoch BIGINT NOT NULL, txn_counter TEXT NOT NULL,
    commit_counter BIGINT NOT NULL, created_at DOUBLE PRECISION NOT NULL);
CREATE TABLE controller_epochs (
    stream TEXT COLLATE "C" NOT NULL, epoch BIGINT NOT NULL, record TEXT NOT NULL, PRIMARY KEY (stream, epoch));
CREATE TABLE controller_txns (
    stream TEXT COLLATE "C" NOT NULL, txn_id TEXT COLLATE "C" NOT NULL, version BIGINT NOT NULL,
    epoch BIGINT NOT NULL, state TEXT NOT NULL, parents TEXT NOT NULL, commit_order BIGINT,
    created_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (stream, txn_id));
CREATE TABLE controller_operations (
    stream TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, op_id TEXT NOT NULL, plan TEXT NOT NULL,
    started_at DOUBLE PRECISION NOT NULL);
CREATE TABLE controller_sealed (
    stream TEXT COLLATE "C" NOT NULL, segment_id BIGINT NOT NULL, length BIGINT NOT NULL,
    PRIMARY KEY (stream, segment_id));
CREATE TABLE controller_heads (stream TEXT COLLATE "C" PRIMARY KEY, cut TEXT NOT NULL)
"""}),
    # The truncation journal: every truncation applied, who signed it and the record it came from.
    Migration(2, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS controller_truncations (
    stream TEXT NOT NULL, source TEXT NOT NULL, cut TEXT NOT NULL, reason TEXT NOT NULL, signer TEXT NOT NULL,
    state TEXT NOT NULL, recorded_at REAL NOT NULL, PRIMARY KEY (stream, source))
""",
        "postgresql": """
CREATE TABLE controller_truncations (
    stream TEXT COLLATE "C" NOT NULL, source TEXT COLLATE "C" NOT NULL, cut TEXT NOT NULL, reason TEXT NOT NULL,
    signer TEXT NOT NULL, state TEXT NOT NULL, recorded_at DOUBLE PRECISION NOT NULL, PRIMARY KEY (stream, source))
"""}),
    # The cuts the retention recorder took, kept for the applier's check of a truncation against the time minimum.
    Migration(3, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS controller_recorded (
    stream TEXT NOT NULL, recorded_at INTEGER NOT NULL, size INTEGER NOT NULL, cut TEXT NOT NULL,
    PRIMARY KEY (stream, recorded_at))
""",
        "postgresql": """
CREATE TABLE controller_recorded (
    stream TEXT COLLATE "C" NOT NULL, recorded_at BIGINT NOT NULL, size BIGINT NOT NULL, cut TEXT NOT NULL,
    PRIMARY KEY (stream, recorded_at))
"""}),
    # Stream incarnations: a stream created again under its name is another stream (as Kafka's topic ids). A
    # stream of an earlier version gets one now; a journal entry written before the stream it names was
    # created (a namesake's) gets none.
    Migration(4, {
        "sqlite": """
ALTER TABLE controller_streams ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
UPDATE controller_streams SET incarnation = lower(hex(randomblob(16)));
ALTER TABLE controller_truncations ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
UPDATE controller_truncations SET incarnation = COALESCE((SELECT s.incarnation FROM controller_streams s
    WHERE s.name = controller_truncations.stream AND controller_truncations.recorded_at >= s.created_at), '')
""",
        "postgresql": """
ALTER TABLE controller_streams ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
UPDATE controller_streams SET incarnation = md5(random()::text || clock_timestamp()::text || name);
ALTER TABLE controller_truncations ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
UPDATE controller_truncations SET incarnation = COALESCE((SELECT s.incarnation FROM controller_streams s
    WHERE s.name = controller_truncations.stream AND controller_truncations.recorded_at >= s.created_at), '')
"""}),
)

_STREAM_COLUMNS = ("name", "version", "scope", "stream", "policy", "state", "active_epoch", "txn_counter",
                   "commit_counter", "created_at", "incarnation")
_TXN_COLUMNS = ("stream", "txn_id", "version", "epoch", "state", "parents", "commit_order", "created_at")


def _stream_from_row(row: Sequence[Any]) -> StreamRecord:
    v = dict(zip(_STREAM_COLUMNS, row, strict=True))
    return StreamRecord(scope=v["scope"], name=v["stream"], policy=RetentionPolicy.from_avro(json.loads(v["policy"])),
                        state=StreamState(v["state"]), active_epoch=int(v["active_epoch"]),
                        txn_counter=int(v["txn_counter"]), commit_counter=int(v["commit_counter"]),
                        created_at=float(v["created_at"]), version=int(v["version"]), incarnation=v["incarnation"])


def _txn_from_row(row: Sequence[Any]) -> TxnRecord:
    v = dict(zip(_TXN_COLUMNS, row, strict=True))
    parents = tuple(SegmentId.from_value(int(p)) for p in json.loads(v["parents"]))
    return TxnRecord(stream=v["stream"], txn_id=TxnId.from_hex(v["txn_id"]), parents=parents,
                     state=TxnState(v["state"]), commit_order=v["commit_order"],
                     created_at=float(v["created_at"]), version=int(v["version"]))


def _upsert(key: Sequence[str], columns: Sequence[str]) -> str:
    """The clause that makes an INSERT of a row with ``key`` replace the stored one (both engines speak it)."""
    updates = ", ".join(f"{column} = excluded.{column}" for column in columns if column not in key)
    return f"ON CONFLICT ({', '.join(key)}) DO UPDATE SET {updates}"


_UPSERT_STREAM = _upsert(("name",), _STREAM_COLUMNS)
_UPSERT_TXN = _upsert(("stream", "txn_id"), _TXN_COLUMNS)


class _Queries(Queries):
    """Reads shared by transactions and the store's plain readers."""

    def get_stream(self, name: str) -> StreamRecord | None:
        sql = f"SELECT {', '.join(_STREAM_COLUMNS)} FROM controller_streams WHERE name = ?"
        row = self._conn.execute(sql, (name,)).fetchone()
        return _stream_from_row(row) if row else None

    def list_streams(self) -> list[StreamRecord]:
        sql = f"SELECT {', '.join(_STREAM_COLUMNS)} FROM controller_streams ORDER BY name"
        return [_stream_from_row(row) for row in self._conn.execute(sql)]

    def get_epochs(self, stream: str) -> list[EpochRecord]:
        rows = self._conn.execute("SELECT record FROM controller_epochs WHERE stream = ? ORDER BY epoch", (stream,))
        return [epoch_from_dict(json.loads(row[0])) for row in rows]

    def get_txn(self, stream: str, txn_id: TxnId) -> TxnRecord | None:
        sql = f"SELECT {', '.join(_TXN_COLUMNS)} FROM controller_txns WHERE stream = ? AND txn_id = ?"
        row = self._conn.execute(sql, (stream, txn_id.hex)).fetchone()
        return _txn_from_row(row) if row else None

    def list_txns(self, stream: str, states: Sequence[TxnState] | None = None) -> list[TxnRecord]:
        sql = f"SELECT {', '.join(_TXN_COLUMNS)} FROM controller_txns WHERE stream = ? ORDER BY txn_id"
        txns = [_txn_from_row(row) for row in self._conn.execute(sql, (stream,))]
        return [t for t in txns if states is None or t.state in states]

    def get_head(self, stream: str) -> dict[int, int] | None:
        """The cut the stream was last truncated at (segment id to offset), or None if never truncated."""
        row = self._conn.execute("SELECT cut FROM controller_heads WHERE stream = ?", (stream,)).fetchone()
        return None if row is None else {int(k): int(v) for k, v in json.loads(row[0])}

    def get_sealed_lengths(self, stream: str) -> dict[int, int]:
        """The final length of every segment of ``stream`` sealed so far, by segment id."""
        rows = self._conn.execute("SELECT segment_id, length FROM controller_sealed WHERE stream = ?", (stream,))
        return {int(segment): int(length) for segment, length in rows}

    def get_journal(self, stream: str, incarnation: str | None = None) -> list[JournalEntry]:
        """The truncation journal of the stream's ``incarnation`` (None: of every stream of that name), oldest
        first."""
        sql = ("SELECT stream, source, cut, reason, signer, state, recorded_at, incarnation FROM "
               "controller_truncations WHERE stream = ?" + ("" if incarnation is None else " AND incarnation = ?")
               + " ORDER BY recorded_at, source")
        key = (stream,) if incarnation is None else (stream, incarnation)
        return [JournalEntry(row[0], row[1], tuple((int(k), int(v)) for k, v in json.loads(row[2])), row[3], row[4],
                             JournalState(row[5]), float(row[6]), row[7]) for row in self._conn.execute(sql, key)]

    def recorded_at_or_before(self, stream: str, at_ms: int) -> StreamCutRecord | None:
        """The newest cut the recorder took of ``stream`` at or before ``at_ms``; None when it took none."""
        row = self._conn.execute("SELECT recorded_at, size, cut FROM controller_recorded WHERE stream = ? "
                                 "AND recorded_at <= ? ORDER BY recorded_at DESC LIMIT 1", (stream, at_ms)).fetchone()
        if row is None:
            return None
        cut = StreamCut.from_mapping({int(segment): int(offset) for segment, offset in json.loads(row[2])})
        return StreamCutRecord(stream, cut, int(row[0]), int(row[1]))

    def get_operation(self, stream: str) -> Operation | None:
        sql = "SELECT op_id, plan, started_at, version FROM controller_operations WHERE stream = ?"
        row = self._conn.execute(sql, (stream,)).fetchone()
        if row is None:
            return None
        return Operation(stream, str(row[0]), plan_from_json(row[1]), float(row[2]), int(row[3]))


class StreamTransaction(_Queries, Transaction):
    """One atomic unit over controller rows; valid only inside its ``with`` block."""

    def _version(self, table: str, where: str, key: Sequence[Any]) -> int:
        row = self._conn.execute(f"SELECT version FROM {table} WHERE {where}", key).fetchone()
        return int(row[0]) if row else 0

    def _check(self, table: str, key: str, expected: int, actual: int) -> None:
        if actual != expected:
            raise MetadataConflictError(f"{table} {key!r}: expected version {expected}, found {actual}",
                                        key=key, expected=expected, actual=actual)

    def put_stream(self, record: StreamRecord) -> StreamRecord:
        """Insert (``version`` 0) or update the stream row at the version it was read at."""
        self._check("controller_streams", record.qualified, record.version,
                    self._version("controller_streams", "name = ?", (record.qualified,)))
        self._conn.execute(
            f"INSERT INTO controller_streams ({', '.join(_STREAM_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            f"{_UPSERT_STREAM}",
            (record.qualified, record.version + 1, record.scope, record.name,
             json.dumps(record.policy.to_avro(), sort_keys=True), record.state.value, record.active_epoch,
             str(record.txn_counter), record.commit_counter, record.created_at, record.incarnation))
        return replace(record, version=record.version + 1)

    def put_epoch(self, stream: str, record: EpochRecord) -> None:
        """Add a history row; adding the same row again is a no-op, a different one a conflict."""
        text = json.dumps(epoch_to_dict(record), sort_keys=True)
        row = self._conn.execute("SELECT record FROM controller_epochs WHERE stream = ? AND epoch = ?",
                                 (stream, record.epoch)).fetchone()
        if row is not None and row[0] != text:
            raise MetadataConflictError(f"epoch {record.epoch} of {stream!r} exists with other segments",
                                        key=f"{stream}#{record.epoch}", expected=0, actual=1)
        if row is None:
            self._conn.execute("INSERT INTO controller_epochs VALUES (?, ?, ?)", (stream, record.epoch, text))

    def put_txn(self, record: TxnRecord) -> TxnRecord:
        """Insert (``version`` 0) or update a transaction row at the version it was read at."""
        key = (record.stream, record.txn_id.hex)
        self._check("controller_txns", f"{record.stream}#{record.txn_id}", record.version,
                    self._version("controller_txns", "stream = ? AND txn_id = ?", key))
        self._conn.execute(
            f"INSERT INTO controller_txns VALUES (?, ?, ?, ?, ?, ?, ?, ?) {_UPSERT_TXN}",
            (*key, record.version + 1, record.epoch, record.state.value,
             json.dumps([p.value for p in record.parents]), record.commit_order, record.created_at))
        return replace(record, version=record.version + 1)

    def put_operation(self, op: Operation) -> Operation:
        """Record ``op`` as the stream's pending operation; fails if another one is pending."""
        self._check("controller_operations", op.stream, 0,
                    self._version("controller_operations", "stream = ?", (op.stream,)))
        self._conn.execute("INSERT INTO controller_operations VALUES (?, ?, ?, ?, ?)",
                           (op.stream, 1, op.op_id, plan_to_json(op.plan), op.started_at))
        return replace(op, version=1)

    def renew_operation(self, stream: str, op_id: str, at: float) -> bool:
        """Record that ``op_id``'s executor is alive at ``at``; False when it is no longer pending."""
        cursor = self._conn.execute("UPDATE controller_operations SET started_at = ? WHERE stream = ? AND op_id = ?",
                                    (at, stream, op_id))
        return cursor.rowcount == 1

    def delete_operation(self, stream: str, op_id: str) -> bool:
        """Drop the pending operation if it is still ``op_id``; False when someone finished it already."""
        cursor = self._conn.execute("DELETE FROM controller_operations WHERE stream = ? AND op_id = ?",
                                    (stream, op_id))
        return cursor.rowcount == 1

    def put_sealed_lengths(self, stream: str, lengths: Mapping[int, int]) -> None:
        """Record the final lengths of sealed segments; a segment recorded already keeps its length.

        A sealed segment takes no more bytes, so a retried operation reads the same lengths again;
        the first record stands. Truncation never removes these rows, only :meth:`forget_history`.
        """
        self._conn.executemany(
            "INSERT INTO controller_sealed VALUES (?, ?, ?) ON CONFLICT (stream, segment_id) DO NOTHING",
            [(stream, segment, length) for segment, length in sorted(lengths.items())])

    def put_head(self, stream: str, cut: Mapping[int, int]) -> None:
        """Record the cut the stream is now truncated at."""
        self._conn.execute("INSERT INTO controller_heads VALUES (?, ?) "
                           "ON CONFLICT (stream) DO UPDATE SET cut = excluded.cut",
                           (stream, json.dumps(sorted(cut.items()))))

    def put_journal(self, entry: JournalEntry) -> JournalEntry | None:
        """Record ``entry`` (replacing the one from the same source); returns the one it replaced."""
        row = self._conn.execute("SELECT state FROM controller_truncations WHERE stream = ? AND source = ?",
                                 (entry.stream, entry.source)).fetchone()
        self._conn.execute(
            "INSERT INTO controller_truncations (stream, source, cut, reason, signer, state, recorded_at, incarnation) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (stream, source) DO UPDATE SET cut = excluded.cut, "
            "reason = excluded.reason, signer = excluded.signer, state = excluded.state",
            (entry.stream, entry.source, json.dumps([list(p) for p in entry.cut]), entry.reason, entry.signer,
             entry.state.value, entry.recorded_at, entry.incarnation))
        return None if row is None else replace(entry, state=JournalState(row[0]))

    def put_recorded(self, record: StreamCutRecord, keep_from_ms: int) -> None:
        """Keep a cut the recorder took; drop the stream's cuts older than the newest one at or before
        ``keep_from_ms`` (a truncation is checked against that one, never an older one)."""
        self._conn.execute("INSERT INTO controller_recorded VALUES (?, ?, ?, ?) ON CONFLICT (stream, recorded_at) "
                           "DO NOTHING", (record.stream, record.recording_time, record.recording_size,
                                          json.dumps(sorted(record.cut.as_dict().items()))))
        self._conn.execute("DELETE FROM controller_recorded WHERE stream = ? AND recorded_at < (SELECT "
                           "MAX(recorded_at) FROM controller_recorded WHERE stream = ? AND recorded_at <= ?)",
                           (record.stream, record.stream, keep_from_ms))

    def drop_journal(self, stream: str, source: str) -> None:
        self._conn.execute("DELETE FROM controller_truncations WHERE stream = ? AND source = ?", (stream, source))

    def forget_history(self, stream: str) -> None:
        """Drop a deleted stream's epochs, sealed lengths and transactions (its segments are gone already)."""
        self._conn.execute("DELETE FROM controller_epochs WHERE stream = ?", (stream,))
        self._conn.execute("DELETE FROM controller_sealed WHERE stream = ?", (stream,))
        self._conn.execute("DELETE FROM controller_heads WHERE stream = ?", (stream,))
        self._conn.execute("DELETE FROM controller_txns WHERE stream = ?", (stream,))
        self._conn.execute("DELETE FROM controller_recorded WHERE stream = ?", (stream,))


class ControllerStore(StoreBase[_Queries, StreamTransaction]):
    """Controller metadata in ``controller_*`` tables of a SQL :class:`~reclaim.storage.sql_base.Database`.

    It has connections of its own, normally to the database of the metadata store. The two stores
    do not share transactions: the controller never nests one inside the other (on SQLite the inner
    one would wait on the write lock its own thread holds) and relies on persisted intents plus
    idempotent steps instead of atomicity across them.
    """

    def __init__(self, db: Database) -> None:
        super().__init__(db, reader=_Queries, transaction=StreamTransaction)

    def get_stream(self, name: str) -> StreamRecord | None:
        return self._read(lambda q: q.get_stream(name))

    def list_streams(self) -> list[StreamRecord]:
        return self._read(lambda q: q.list_streams())

    def get_epochs(self, stream: str) -> list[EpochRecord]:
        return self._read(lambda q: q.get_epochs(stream))

    def get_txn(self, stream: str, txn_id: TxnId) -> TxnRecord | None:
        return self._read(lambda q: q.get_txn(stream, txn_id))

    def list_txns(self, stream: str, states: Sequence[TxnState] | None = None) -> list[TxnRecord]:
        return self._read(lambda q: q.list_txns(stream, states))

    def get_sealed_lengths(self, stream: str) -> dict[int, int]:
        return self._read(lambda q: q.get_sealed_lengths(stream))

    def get_operation(self, stream: str) -> Operation | None:
        return self._read(lambda q: q.get_operation(stream))

    def get_head(self, stream: str) -> dict[int, int] | None:
        return self._read(lambda q: q.get_head(stream))

    def get_journal(self, stream: str, incarnation: str | None = None) -> list[JournalEntry]:
        return self._read(lambda q: q.get_journal(stream, incarnation))

    def recorded_at_or_before(self, stream: str, at_ms: int) -> StreamCutRecord | None:
        return self._read(lambda q: q.recorded_at_or_before(stream, at_ms))


class StreamMetadataStore(ControllerStore):
    """The controller store in one SQLite file (WAL, ``BEGIN IMMEDIATE``, compare-and-set on versions),
    normally the file of the :class:`~reclaim.storage.sql_store.SQLiteMetadataStore`; safe for several processes."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0) -> None:
        self.path = os.fspath(path)
        super().__init__(SQLiteDatabase(self.path, MIGRATIONS, store=STORE, busy_timeout=busy_timeout))


class PostgresControllerStore(ControllerStore):
    """The controller store in a PostgreSQL database, normally the metadata store's (serializable
    transactions on a connection pool; see :mod:`reclaim.storage.postgres_base`)."""

    def __init__(self, url: str, *, pool_size: int = 4) -> None:
        from reclaim.storage.postgres_base import PostgresDatabase

        self.url = url
        super().__init__(PostgresDatabase(url, MIGRATIONS, store=STORE, pool_size=pool_size))


def open_controller_store(location: str | os.PathLike[str], *, pool_size: int = 4) -> ControllerStore:
    """The controller store at ``location``: a ``postgresql://`` URL, else a SQLite file's path."""
    from reclaim.storage.sql_store import is_postgres_url

    if is_postgres_url(location):
        return PostgresControllerStore(str(location), pool_size=pool_size)
    return StreamMetadataStore(location)
