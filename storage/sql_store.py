"""The ``MetadataStore`` on SQL: segment, chunk and mark rows with version compare-and-set, on SQLite or PostgreSQL.

The queries are written once (:mod:`reclaim.storage.sql_base`); :class:`SQLiteMetadataStore` runs them on one
WAL file, :class:`PostgresMetadataStore` on a PostgreSQL database through a connection pool.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.metadata import (
    DETACHED_STATES,
    MAX_LOCATIONS,
    OPEN_STATES,
    ChunkRecord,
    LeaseRecord,
    MarkRecord,
    MarkState,
    OffloadPolicy,
    OffloadRecord,
    OffloadState,
    SegmentRecord,
    SegmentStatus,
    TopicTruncationEntry,
)
from reclaim.storage.metrics import METADATA_TRANSACTIONS
from reclaim.storage.sql_base import Database, Migration, Outcome, Queries, StoreBase, Transaction, distinct
from reclaim.storage.sqlite_base import SQLiteDatabase

#: The store's name in errors and in the schema-version table.
STORE = "metadata store"

# No index holds a column that retiring a chunk changes (active, mark_id, version): phase 1's batched
# retire then rewrites only the rows. Files made before versioned schemas had indexes on
# (segment, active) and (mark_id), which every retire rewrote and no query needs: version 1 drops
# them; list_chunks reads a segment in offset order. On PostgreSQL every number is 64-bit (BIGINT,
# DOUBLE PRECISION) as SQLite's are, and keys sort byte by byte (COLLATE "C") as SQLite's do, so a
# walk in name order agrees with an object listing's.
MIGRATIONS = (
    Migration(1, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS segments (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, stream TEXT NOT NULL, status INTEGER NOT NULL,
    start_offset INTEGER NOT NULL, length INTEGER NOT NULL, first_chunk TEXT, last_chunk TEXT,
    max_rolling_length INTEGER NOT NULL, owner_epoch INTEGER NOT NULL,
    last_chunk_start_offset INTEGER NOT NULL, first_chunk_start_offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS chunks (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, segment TEXT NOT NULL, start_offset INTEGER NOT NULL,
    length INTEGER NOT NULL, next_chunk TEXT, active INTEGER NOT NULL, mark_id TEXT,
    tags TEXT NOT NULL, locations TEXT NOT NULL);
DROP INDEX IF EXISTS chunks_by_segment;
DROP INDEX IF EXISTS chunks_by_mark;
CREATE INDEX IF NOT EXISTS chunks_by_segment_offset ON chunks (segment, start_offset);
CREATE TABLE IF NOT EXISTS marks (
    mark_id TEXT PRIMARY KEY, version INTEGER NOT NULL, state TEXT NOT NULL, created_at REAL NOT NULL)
""",
        "postgresql": """
CREATE TABLE segments (
    name TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, stream TEXT COLLATE "C" NOT NULL,
    status INTEGER NOT NULL, start_offset BIGINT NOT NULL, length BIGINT NOT NULL,
    first_chunk TEXT COLLATE "C", last_chunk TEXT COLLATE "C", max_rolling_length BIGINT NOT NULL,
    owner_epoch BIGINT NOT NULL, last_chunk_start_offset BIGINT NOT NULL,
    first_chunk_start_offset BIGINT NOT NULL);
CREATE TABLE chunks (
    name TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, segment TEXT COLLATE "C" NOT NULL,
    start_offset BIGINT NOT NULL, length BIGINT NOT NULL, next_chunk TEXT COLLATE "C",
    active INTEGER NOT NULL, mark_id TEXT COLLATE "C", tags TEXT NOT NULL, locations TEXT NOT NULL);
CREATE INDEX chunks_by_segment_offset ON chunks (segment, start_offset);
CREATE TABLE marks (
    mark_id TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, state TEXT NOT NULL,
    created_at DOUBLE PRECISION NOT NULL)
"""}),
    # Offloads (docs/concepts/offload.md): one row per copy an offload makes, from its intent until phase 2
    # deletes the copy it detached. Looked up by copy, and by chunk when a chunk is retired.
    Migration(2, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS offloads (
    copy TEXT PRIMARY KEY, version INTEGER NOT NULL, chunk TEXT NOT NULL, segment TEXT NOT NULL,
    tags TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL, length INTEGER NOT NULL,
    state TEXT NOT NULL, created_at REAL NOT NULL, deadline REAL NOT NULL, switched_at REAL, mark_id TEXT);
CREATE INDEX IF NOT EXISTS offloads_by_chunk ON offloads (chunk)
""",
        "postgresql": """
CREATE TABLE offloads (
    copy TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, chunk TEXT COLLATE "C" NOT NULL,
    segment TEXT COLLATE "C" NOT NULL, tags TEXT NOT NULL, source TEXT NOT NULL, target TEXT NOT NULL,
    length BIGINT NOT NULL, state TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL,
    deadline DOUBLE PRECISION NOT NULL, switched_at DOUBLE PRECISION, mark_id TEXT COLLATE "C");
CREATE INDEX offloads_by_chunk ON offloads (chunk)
"""}),
    # The offloader service: each stream's offload policy, and the leases its processes share streams by
    # (a member's heartbeat and a stream's owner are both leases, told apart by their names' prefixes).
    Migration(3, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS offload_policies (
    stream TEXT PRIMARY KEY, version INTEGER NOT NULL, target TEXT NOT NULL, after_bytes INTEGER,
    after_s REAL, release_after_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY, version INTEGER NOT NULL, owner TEXT NOT NULL, epoch INTEGER NOT NULL,
    expires_at REAL NOT NULL)
""",
        "postgresql": """
CREATE TABLE offload_policies (
    stream TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, target TEXT NOT NULL, after_bytes BIGINT,
    after_s DOUBLE PRECISION, release_after_s DOUBLE PRECISION NOT NULL);
CREATE TABLE leases (
    name TEXT COLLATE "C" PRIMARY KEY, version BIGINT NOT NULL, owner TEXT NOT NULL, epoch BIGINT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL)
"""}),
    # The journal of the Kafka-topic applier (docs/concepts/kafka-topics.md): one row per partition whose start a
    # DeleteRecords moved. A decision applied twice journals once (the key is the move itself).
    Migration(4, {
        "sqlite": """
CREATE TABLE IF NOT EXISTS topic_truncations (
    topic TEXT NOT NULL, topic_id TEXT NOT NULL, partition INTEGER NOT NULL, new_start INTEGER NOT NULL,
    old_start INTEGER NOT NULL, decided_at INTEGER NOT NULL, applied_at REAL NOT NULL, why TEXT NOT NULL,
    signer TEXT NOT NULL, source TEXT NOT NULL, bytes_freed INTEGER,
    PRIMARY KEY (topic, topic_id, partition, new_start))
""",
        "postgresql": """
CREATE TABLE topic_truncations (
    topic TEXT COLLATE "C" NOT NULL, topic_id TEXT COLLATE "C" NOT NULL, partition BIGINT NOT NULL,
    new_start BIGINT NOT NULL, old_start BIGINT NOT NULL, decided_at BIGINT NOT NULL,
    applied_at DOUBLE PRECISION NOT NULL, why TEXT NOT NULL, signer TEXT NOT NULL, source TEXT NOT NULL,
    bytes_freed BIGINT, PRIMARY KEY (topic, topic_id, partition, new_start))
"""}),
)

_SEGMENT_COLUMNS = ("name", "version", "stream", "status", "start_offset", "length", "first_chunk",
                    "last_chunk", "max_rolling_length", "owner_epoch", "last_chunk_start_offset",
                    "first_chunk_start_offset")
_CHUNK_COLUMNS = ("name", "version", "segment", "start_offset", "length", "next_chunk", "active", "mark_id",
                  "tags", "locations")
_MARK_COLUMNS = ("mark_id", "version", "state", "created_at")
_OFFLOAD_COLUMNS = ("copy", "version", "chunk", "segment", "tags", "source", "target", "length", "state",
                    "created_at", "deadline", "switched_at", "mark_id")
_POLICY_COLUMNS = ("stream", "version", "target", "after_bytes", "after_s", "release_after_s")
_LEASE_COLUMNS = ("name", "version", "owner", "epoch", "expires_at")
_TOPIC_TRUNCATION_COLUMNS = ("topic", "topic_id", "partition", "old_start", "new_start", "decided_at", "applied_at",
                             "why", "signer", "source", "bytes_freed")
#: How a column's JSON text is made in one of SQLite's JSON rows (``select_in``): locations as stored (valid
#: JSON, or null, which no row may hold and so is refused when read), times with every digit (SQLite's printf
#: stops at 16 significant digits unless given its ``!`` flag).
_JSON_COLUMNS = {"locations": "iif(json_valid(locations), locations, 'null')",
                 "created_at": "json_quote(printf('%!.17g', created_at))",
                 "deadline": "json_quote(printf('%!.17g', deadline))",
                 "switched_at": "iif(switched_at IS NULL, 'null', json_quote(printf('%!.17g', switched_at)))"}


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


_T = TypeVar("_T")
_new = object.__new__
_set = object.__setattr__


def _built(cls: type[_T], fields: dict[str, Any]) -> _T:
    """A frozen dataclass holding ``fields`` without its ``__init__``: a batch's lookups build a row's
    records by the thousand, and what they hold was checked when the row was written."""
    record = _new(cls)
    _set(record, "__dict__", fields)
    return record


_LOCATION_FIELDS = frozenset(("binding", "tier", "bucket", "key"))
_OFFLOADED_FIELDS = _LOCATION_FIELDS | {"copy"}


def _location(stored: Any) -> ChunkLocation:
    """One copy of a row's ``locations``: the parsed JSON object itself becomes the record's fields (an
    offloaded copy's holds its ``copy`` id too; a copy written in place has none, the field's default)."""
    if type(stored) is not dict or (stored.keys() != _LOCATION_FIELDS and (
            stored.keys() != _OFFLOADED_FIELDS or type(stored["copy"]) is not str)):
        raise ValueError(f"a chunk location is not an object of {sorted(_LOCATION_FIELDS)} (and a copy id)")
    stored["tier"] = _TIERS[stored["tier"]]
    return _built(ChunkLocation, stored)


def _location_values(location: ChunkLocation) -> dict[str, Any]:
    values = {"binding": location.binding, "tier": location.tier.value, "bucket": location.bucket,
              "key": location.key}
    return values if location.copy is None else values | {"copy": location.copy}


def _chunk_from_row(row: Sequence[Any]) -> ChunkRecord:
    name, version, segment, start_offset, length, next_chunk, active, mark_id, tags, locations = row
    if isinstance(locations, str):
        locations = json.loads(locations)
    if type(locations) is not list or not 1 <= len(locations) <= MAX_LOCATIONS:
        raise ValueError(f"chunk row {name!r} has no list of 1..{MAX_LOCATIONS} locations")
    copies = (_location(locations[0]),) if len(locations) == 1 else tuple([_location(loc) for loc in locations])
    return _built(ChunkRecord, {
        "name": name, "segment": segment, "start_offset": start_offset, "length": length, "tags": _tags_from_json(tags),
        "locations": copies, "next_chunk": next_chunk, "active": bool(active), "mark_id": mark_id, "version": version})


def _tags_json(tags: ChunkTags) -> str:
    return json.dumps({"component": tags.component, "stream": tags.stream, "segment": tags.segment,
                       "writer_epoch": tags.writer_epoch, "application": tags.application}, sort_keys=True)


def _chunk_values(record: ChunkRecord) -> dict[str, Any]:
    locations = [_location_values(loc) for loc in record.locations]
    return {"name": record.name, "segment": record.segment, "start_offset": record.start_offset,
            "length": record.length, "next_chunk": record.next_chunk, "active": int(record.active),
            "mark_id": record.mark_id, "tags": _tags_json(record.tags), "locations": json.dumps(locations)}


def _offload_from_row(row: Sequence[Any]) -> OffloadRecord:
    values = dict(zip(_OFFLOAD_COLUMNS, row, strict=True))
    return OffloadRecord(
        copy=values["copy"], chunk=values["chunk"], segment=values["segment"], tags=_tags_from_json(values["tags"]),
        source=_location(json.loads(values["source"])), target=_location(json.loads(values["target"])),
        length=int(values["length"]), state=OffloadState(values["state"]), created_at=float(values["created_at"]),
        deadline=float(values["deadline"]),
        switched_at=None if values["switched_at"] is None else float(values["switched_at"]),
        mark_id=values["mark_id"], version=int(values["version"]))


def _offload_values(record: OffloadRecord) -> dict[str, Any]:
    return {"copy": record.copy, "chunk": record.chunk, "segment": record.segment, "tags": _tags_json(record.tags),
            "source": json.dumps(_location_values(record.source)),
            "target": json.dumps(_location_values(record.target)),
            "length": record.length, "state": record.state.value, "created_at": record.created_at,
            "deadline": record.deadline, "switched_at": record.switched_at, "mark_id": record.mark_id}


def _policy_from_row(row: Sequence[Any]) -> OffloadPolicy:
    stream, version, target, after_bytes, after_s, release_after_s = row
    return OffloadPolicy(stream, target, None if after_bytes is None else int(after_bytes),
                         None if after_s is None else float(after_s), float(release_after_s), int(version))


def _lease_from_row(row: Sequence[Any]) -> LeaseRecord:
    name, version, owner, epoch, expires_at = row
    return LeaseRecord(name, owner, int(epoch), float(expires_at), int(version))


def _mark_from_row(row: Sequence[Any]) -> MarkRecord:
    mark_id, version, state, created_at = row
    return MarkRecord(mark_id, MarkState(state), float(created_at), int(version))


class _Reader(Queries):
    """Queries shared by transactions and the store's plain readers."""

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

    def _many(self, table: str, columns: Sequence[str], key: str, values: Iterable[str]) -> list[Sequence[Any]]:
        """The rows whose ``key`` is among ``values``, in the engine's fastest way (``select_in``)."""
        return self._conn.select_in(table, columns, key, distinct(values, key))

    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]:
        records = (_chunk_from_row(row) for row in self._many("chunks", _CHUNK_COLUMNS, "name", names))
        return {record.name: record for record in records}

    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]:
        sql = f"SELECT {', '.join(_CHUNK_COLUMNS)} FROM chunks WHERE segment = ?"
        sql += (" AND active = 1" if active_only else "") + " ORDER BY start_offset, name"
        return [_chunk_from_row(row) for row in self._conn.execute(sql, (segment,))]

    def chunks_after(self, after: str, limit: int) -> list[ChunkRecord]:
        sql = f"SELECT {', '.join(_CHUNK_COLUMNS)} FROM chunks WHERE name > ? ORDER BY name LIMIT ?"
        return [_chunk_from_row(row) for row in self._conn.execute(sql, (after, limit))]

    def get_mark(self, mark_id: str) -> MarkRecord | None:
        row = self._one("marks", _MARK_COLUMNS, "mark_id", mark_id)
        return _mark_from_row(row) if row else None

    def get_marks(self, mark_ids: Iterable[str]) -> dict[str, MarkRecord]:
        records = (_mark_from_row(row) for row in self._many("marks", _MARK_COLUMNS, "mark_id", mark_ids))
        return {record.mark_id: record for record in records}

    def get_offload(self, copy: str) -> OffloadRecord | None:
        row = self._one("offloads", _OFFLOAD_COLUMNS, "copy", copy)
        return _offload_from_row(row) if row else None

    def offloads_of(self, chunks: Iterable[str]) -> list[OffloadRecord]:
        return [_offload_from_row(row) for row in self._many("offloads", _OFFLOAD_COLUMNS, "chunk", chunks)]

    def offloads_after(self, after: str, limit: int) -> list[OffloadRecord]:
        sql = f"SELECT {', '.join(_OFFLOAD_COLUMNS)} FROM offloads WHERE copy > ? ORDER BY copy LIMIT ?"
        return [_offload_from_row(row) for row in self._conn.execute(sql, (after, limit))]

    def get_offload_policy(self, stream: str) -> OffloadPolicy | None:
        row = self._one("offload_policies", _POLICY_COLUMNS, "stream", stream)
        return _policy_from_row(row) if row else None

    def offload_policies(self) -> list[OffloadPolicy]:
        sql = f"SELECT {', '.join(_POLICY_COLUMNS)} FROM offload_policies ORDER BY stream"
        return [_policy_from_row(row) for row in self._conn.execute(sql)]

    def get_lease(self, name: str) -> LeaseRecord | None:
        row = self._one("leases", _LEASE_COLUMNS, "name", name)
        return _lease_from_row(row) if row else None

    def leases(self, prefix: str) -> list[LeaseRecord]:
        sql = (f"SELECT {', '.join(_LEASE_COLUMNS)} FROM leases WHERE substr(name, 1, length(?)) = ? "
               "ORDER BY name")
        return [_lease_from_row(row) for row in self._conn.execute(sql, (prefix, prefix))]

    def topic_truncations(self, topic: str) -> list[TopicTruncationEntry]:
        sql = (f"SELECT {', '.join(_TOPIC_TRUNCATION_COLUMNS)} FROM topic_truncations WHERE topic = ? "
               "ORDER BY applied_at, partition, new_start")
        return [TopicTruncationEntry(str(topic), str(topic_id), int(partition), int(old), int(new), int(decided),
                                     float(applied), str(why), str(signer), str(source),
                                     None if freed is None else int(freed))
                for topic, topic_id, partition, old, new, decided, applied, why, signer, source, freed
                in self._conn.execute(sql, (topic,))]

    def binding_names(self) -> set[str]:
        rows = self._conn.execute(_BINDING_NAMES[self._conn.engine])
        return {str(row[0]) for row in rows if row[0] is not None}

    def segment_names(self, prefix: str = "") -> list[str]:
        rows = self._conn.execute("SELECT name FROM segments WHERE substr(name, 1, length(?)) = ? ORDER BY name",
                                  (prefix, prefix))
        return [str(row[0]) for row in rows]


#: Every binding named by a chunk row's locations (a JSON array of objects), in each engine's JSON functions.
_BINDING_NAMES = {
    "sqlite": "SELECT DISTINCT json_extract(loc.value, '$.binding') FROM chunks, json_each(chunks.locations) AS loc",
    "postgresql": "SELECT DISTINCT loc ->> 'binding' FROM chunks, jsonb_array_elements(chunks.locations::jsonb) AS loc",
}


class SQLTransaction(_Reader, Transaction):
    """A transaction of the metadata store; valid only inside its ``with`` block."""

    def _cas(self, table: str, key_column: str, key: str, expected: int, values: dict[str, Any]) -> int:
        """Write the row at ``expected + 1`` if it is at ``expected`` now (0: absent), in one statement
        that checks and writes at once: a concurrent writer of the row makes it change nothing."""
        values = values | {"version": expected + 1}
        if expected == 0:
            columns = ", ".join(values)
            changed = self._conn.execute(
                f"INSERT INTO {table} ({columns}) VALUES ({', '.join('?' * len(values))}) "
                f"ON CONFLICT ({key_column}) DO NOTHING", list(values.values())).rowcount
        else:
            assignments = ", ".join(f"{column} = ?" for column in values)
            changed = self._conn.execute(f"UPDATE {table} SET {assignments} WHERE {key_column} = ? AND version = ?",
                                         [*values.values(), key, expected]).rowcount
        if changed != 1:
            row = self._conn.execute(f"SELECT version FROM {table} WHERE {key_column} = ?", (key,)).fetchone()
            actual = int(row[0]) if row else 0
            raise MetadataConflictError(f"{table} {key!r}: expected version {expected}, found {actual}",
                                        key=key, expected=expected, actual=actual)
        return expected + 1

    def put_segment(self, record: SegmentRecord, *, expected_version: int | None = None) -> SegmentRecord:
        expected = record.version if expected_version is None else expected_version
        version = self._cas("segments", "name", record.name, expected, _segment_values(record))
        return replace(record, version=version)

    def delete_segment(self, name: str, *, expected_version: int) -> None:
        changed = self._conn.execute("DELETE FROM segments WHERE name = ? AND version = ?",
                                     (name, expected_version)).rowcount if expected_version > 0 else 0
        if changed != 1:
            row = self._conn.execute("SELECT version FROM segments WHERE name = ?", (name,)).fetchone()
            actual = int(row[0]) if row else 0
            raise MetadataConflictError(
                f"segments {name!r}: expected version {expected_version}, found {actual}",
                key=name, expected=expected_version, actual=actual)

    def put_chunk(self, record: ChunkRecord, *, expected_version: int | None = None) -> ChunkRecord:
        expected = record.version if expected_version is None else expected_version
        version = self._cas("chunks", "name", record.name, expected, _chunk_values(record))
        return replace(record, version=version)

    def retire_chunks(self, chunks: Sequence[ChunkRecord], mark_id: str) -> None:
        """Mark ``chunks`` inactive with ``mark_id`` in one statement, each row at its own ``version`` (CAS)."""
        rows = [(mark_id, chunk.name, chunk.version) for chunk in chunks]
        sql = "UPDATE chunks SET active = 0, mark_id = ?, version = version + 1 WHERE name = ? AND version = ?"
        changed = self._conn.executemany(sql, rows)
        if changed != len(rows):
            raise MetadataConflictError(f"mark {mark_id}: {len(rows) - changed} of {len(rows)} chunk rows are "
                                        "absent or at another version", key=mark_id, expected=len(rows),
                                        actual=changed)

    def remove_chunks(self, names: Iterable[str]) -> list[str]:
        """Remove the rows of ``names`` that are inactive; active rows are kept (they are live layout)."""
        return [str(name) for name in self._conn.delete_in("chunks", "name", distinct(names, "name"), "active = 0")]

    def put_mark(self, record: MarkRecord, *, expected_version: int | None = None) -> MarkRecord:
        expected = record.version if expected_version is None else expected_version
        values = {"mark_id": record.mark_id, "state": record.state.value, "created_at": record.created_at}
        version = self._cas("marks", "mark_id", record.mark_id, expected, values)
        return replace(record, version=version)

    def put_offload(self, record: OffloadRecord, *, expected_version: int | None = None) -> OffloadRecord:
        expected = record.version if expected_version is None else expected_version
        version = self._cas("offloads", "copy", record.copy, expected, _offload_values(record))
        return replace(record, version=version)

    def cancel_offloads(self, chunks: Iterable[str]) -> list[str]:
        """Settle the offloads of ``chunks``, which this transaction retires: one not yet switched is
        CANCELLED (its copy is to be deleted on its own), a switched one's row goes (the retiring mark
        names both of the chunk's copies). The copies cancelled, in no order."""
        offloads = self.offloads_of(chunks)
        cancelled = [o for o in offloads if o.state in OPEN_STATES]
        for offload in cancelled:
            self.put_offload(replace(offload, state=OffloadState.CANCELLED))
        switched = [o.copy for o in offloads if o.state is OffloadState.SWITCHED]
        if switched:
            self._conn.delete_in("offloads", "copy", switched, "state = 'SWITCHED'")
        return [o.copy for o in cancelled]

    def put_offload_policy(self, record: OffloadPolicy, *,
                           expected_version: int | None = None) -> OffloadPolicy:
        expected = record.version if expected_version is None else expected_version
        values = {"stream": record.stream, "target": record.target, "after_bytes": record.after_bytes,
                  "after_s": record.after_s, "release_after_s": record.release_after_s}
        return replace(record, version=self._cas("offload_policies", "stream", record.stream, expected, values))

    def delete_offload_policy(self, stream: str) -> bool:
        return bool(self._conn.execute("DELETE FROM offload_policies WHERE stream = ?", (stream,)).rowcount)

    def journal_topic_truncation(self, entry: TopicTruncationEntry) -> bool:
        """Journal one partition's DeleteRecords; False when that same move is journaled already."""
        sql = (f"INSERT INTO topic_truncations ({', '.join(_TOPIC_TRUNCATION_COLUMNS)}) VALUES "
               f"({', '.join('?' * len(_TOPIC_TRUNCATION_COLUMNS))}) ON CONFLICT DO NOTHING")
        values = [getattr(entry, column) for column in _TOPIC_TRUNCATION_COLUMNS]
        return bool(self._conn.execute(sql, values).rowcount)

    def put_lease(self, record: LeaseRecord, *, expected_version: int | None = None) -> LeaseRecord:
        expected = record.version if expected_version is None else expected_version
        values = {"name": record.name, "owner": record.owner, "epoch": record.epoch,
                  "expires_at": record.expires_at}
        return replace(record, version=self._cas("leases", "name", record.name, expected, values))

    def delete_lease(self, name: str, *, expected_version: int) -> bool:
        """Remove the lease ``name`` if it is still at ``expected_version``."""
        sql = "DELETE FROM leases WHERE name = ? AND version = ?"
        return bool(self._conn.execute(sql, (name, expected_version)).rowcount)

    def remove_offloads(self, copies: Iterable[str]) -> list[str]:
        """Remove the offloads of ``copies`` whose detached copy phase 2 deleted; returns those removed."""
        detached = ", ".join(f"'{state.value}'" for state in DETACHED_STATES)
        return [str(copy) for copy in self._conn.delete_in("offloads", "copy", distinct(copies, "copy"),
                                                              f"state IN ({detached})")]


class SQLMetadataStore(StoreBase[_Reader, SQLTransaction]):
    """The metadata store on a SQL :class:`~reclaim.storage.sql_base.Database`; see the engines' subclasses.

    ``location`` is where it is, as :func:`open_metadata_store` takes it: a SQLite file's path or a
    ``postgresql://`` URL."""

    def __init__(self, db: Database, location: str) -> None:
        self.location = location
        super().__init__(db, reader=_Reader, transaction=SQLTransaction, outcomes=_count_outcome)

    def get_segment(self, name: str) -> SegmentRecord | None:
        return self._read(lambda r: r.get_segment(name))

    def get_chunk(self, name: str) -> ChunkRecord | None:
        return self._read(lambda r: r.get_chunk(name))

    def get_chunks(self, names: Iterable[str]) -> dict[str, ChunkRecord]:
        """Every stored chunk row among ``names`` (active or not), in one query per 10000 names."""
        wanted = distinct(names, "name")
        return self._read(lambda r: r.get_chunks(wanted))

    def list_chunks(self, segment: str, *, active_only: bool = True) -> list[ChunkRecord]:
        return self._read(lambda r: r.list_chunks(segment, active_only=active_only))

    def chunks_after(self, after: str, limit: int) -> list[ChunkRecord]:
        """Up to ``limit`` chunk rows (active or not) whose names sort after ``after``, in name order:
        every row, a page at a time (``after=""`` starts), by the primary key's index."""
        return self._read(lambda r: r.chunks_after(after, limit))

    def get_mark(self, mark_id: str) -> MarkRecord | None:
        return self._read(lambda r: r.get_mark(mark_id))

    def get_marks(self, mark_ids: Iterable[str]) -> dict[str, MarkRecord]:
        """Every stored mark among ``mark_ids``, by id, in one query per 10000 ids; absent ids are left out."""
        wanted = distinct(mark_ids, "mark_id")
        return self._read(lambda r: r.get_marks(wanted))

    def segment_names(self, prefix: str = "") -> list[str]:
        return self._read(lambda r: r.segment_names(prefix))

    def binding_names(self) -> set[str]:
        """Every storage binding some chunk row has a copy on (one scan of the chunk rows)."""
        return self._read(lambda r: r.binding_names())

    def get_offload(self, copy: str) -> OffloadRecord | None:
        return self._read(lambda r: r.get_offload(copy))

    def offloads_of(self, chunks: Iterable[str]) -> list[OffloadRecord]:
        """Every offload of the chunks ``chunks`` (any state), in one query per 10000 names."""
        wanted = distinct(chunks, "chunk")
        return self._read(lambda r: r.offloads_of(wanted))

    def offloads_after(self, after: str, limit: int) -> list[OffloadRecord]:
        """Up to ``limit`` offloads whose copy ids sort after ``after``, in copy order (``""`` starts)."""
        return self._read(lambda r: r.offloads_after(after, limit))

    def offload_policies(self) -> list[OffloadPolicy]:
        """Every stream's offload policy, in stream order."""
        return self._read(lambda r: r.offload_policies())

    def leases(self, prefix: str) -> list[LeaseRecord]:
        """Every lease whose name starts with ``prefix``, expired or not, in name order."""
        return self._read(lambda r: r.leases(prefix))

    def topic_truncations(self, topic: str) -> list[TopicTruncationEntry]:
        """The Kafka-topic applier's journal of ``topic``, oldest first."""
        return self._read(lambda r: r.topic_truncations(topic))

    def remove_chunks(self, names: Iterable[str]) -> list[str]:
        """Remove inactive chunk rows (after their storage delete) in one transaction; returns the removed."""
        with self.transaction() as txn:
            return txn.remove_chunks(names)


class SQLiteMetadataStore(SQLMetadataStore):
    """The default metadata store: one SQLite file in WAL mode, safe for several processes.

    Each transaction is ``BEGIN IMMEDIATE``: it takes the database's write lock up front, so reads
    inside it are consistent with its writes and concurrent writers wait up to ``busy_timeout``
    seconds, then get :class:`MetadataUnavailableError`. One connection per store, guarded by a lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0, create: bool = True) -> None:
        """Open (with ``create``, make or migrate) the store at ``path``; without ``create`` a path that holds
        no metadata store raises :class:`~reclaim.storage.errors.MetadataMissingError` and nothing is written."""
        self.path = os.fspath(path)
        self._sqlite = SQLiteDatabase(self.path, MIGRATIONS, store=STORE, busy_timeout=busy_timeout,
                                      create=create, json_columns=_JSON_COLUMNS)
        super().__init__(self._sqlite, self.path)

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file now, as the checkpointer thread does after commits."""
        self._sqlite.checkpoint()


class PostgresMetadataStore(SQLMetadataStore):
    """The metadata store in a PostgreSQL database (``postgresql://`` URL), shared by processes on any
    number of hosts: serializable transactions on a pool of at most ``pool_size`` connections (see
    :mod:`reclaim.storage.postgres_base` for the isolation and what each refusal becomes)."""

    def __init__(self, url: str, *, create: bool = True, pool_size: int = 8, pool_timeout: float = 30.0) -> None:
        from reclaim.storage.postgres_base import PostgresDatabase

        self.url = url
        super().__init__(PostgresDatabase(url, MIGRATIONS, store=STORE, create=create, pool_size=pool_size,
                                          pool_timeout=pool_timeout), url)


def is_postgres_url(location: str | os.PathLike[str]) -> bool:
    """Whether a metadata location names a PostgreSQL database rather than a SQLite file."""
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def open_metadata_store(location: str | os.PathLike[str], *, create: bool = True,
                        pool_size: int = 8) -> SQLMetadataStore:
    """The metadata store at ``location``: a ``postgresql://`` URL, else a SQLite file's path."""
    if is_postgres_url(location):
        return PostgresMetadataStore(str(location), create=create, pool_size=pool_size)
    return SQLiteMetadataStore(location, create=create)


def _count_outcome(outcome: Outcome) -> None:
    METADATA_TRANSACTIONS.labels(outcome).inc()
