"""SQLite under reclaim's stores: one file in WAL mode, ``BEGIN IMMEDIATE`` transactions, a checkpointer."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote

from reclaim.storage.errors import MetadataError, MetadataMissingError, MetadataUnavailableError
from reclaim.storage.sql_base import SCHEMA_TABLE, Engine, Migration, migrate, tables_of

logger = logging.getLogger(__name__)

#: Below SQLite's default bound of 32766 host parameters, so a deletion batch is one query.
IN_BATCH = 10000


class SQLiteConnection:
    """A ``sqlite3`` connection as the stores' queries use it (:class:`reclaim.storage.sql_base.Connection`).

    ``select_in`` and ``delete_in`` hand back their rows as one JSON array: SQLite then returns a
    single value instead of a row at a time, and every row step releases the GIL — under a busy
    thread next to it (a worker's delete thread) taking it back cost ten times the query itself.
    Each row is the concatenation of its columns' JSON texts (``json_quote``), not ``json_array``:
    a JSON column goes in as it is stored instead of being parsed and written again (which cost
    more than the rest of the query), and the text is parsed by orjson. ``json_columns`` says how a
    column's JSON text is made when ``json_quote`` would not do (a JSON text column embedded when it
    is valid JSON, a float with every digit).
    """

    engine: Engine = "sqlite"

    def __init__(self, conn: sqlite3.Connection, json_columns: Mapping[str, str],
                 committed: Callable[[], None] = lambda: None) -> None:
        self.raw = conn
        self._json_columns = json_columns
        self._committed = committed

    def begin(self) -> None:
        # Takes the write lock up front, so reads inside the transaction agree with its writes.
        self.raw.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.raw.execute("COMMIT")
        self._committed()

    def rollback(self) -> None:
        if self.raw.in_transaction:
            self.raw.execute("ROLLBACK")

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self.raw.execute(sql, params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        return self.raw.executemany(sql, rows).rowcount

    def select_in(self, table: str, columns: Sequence[str], key: str, values: Sequence[Any]) -> list[Sequence[Any]]:
        row = " || ',' || ".join(self._json_columns.get(column, f"json_quote({column})") for column in columns)
        rows: list[Sequence[Any]] = []
        for start in range(0, len(values), IN_BATCH):
            batch = values[start:start + IN_BATCH]
            # No row matched: group_concat is NULL, and so is the whole text.
            sql = (f"SELECT '[' || group_concat('[' || {row} || ']', ',') || ']' FROM {table} "
                   f"WHERE {key} IN ({', '.join('?' * len(batch))})")
            (text,) = self.raw.execute(sql, batch).fetchone()
            if text is not None:
                rows.extend(_parsed(text, table))
        return rows

    def delete_in(self, table: str, key: str, values: Sequence[Any], where: str) -> list[Any]:
        # The keys go back as one JSON value, then one DELETE: no row-at-a-time RETURNING.
        removed: list[Any] = []
        for start in range(0, len(values), IN_BATCH):
            batch = values[start:start + IN_BATCH]
            condition = f"{where} AND {key} IN ({', '.join('?' * len(batch))})"
            (text,) = self.raw.execute(f"SELECT json_group_array({key}) FROM {table} WHERE {condition}",
                                       batch).fetchone()
            self.raw.execute(f"DELETE FROM {table} WHERE {condition}", batch)
            removed.extend(_parsed(text, table))
        return removed



def _parsed(text: str, table: str) -> list[Any]:
    """The rows of one JSON text from ``select_in`` or ``delete_in``; text that is not JSON is a database error."""
    # Imported here, not with the module: Spark executors import this module (through the segments
    # package) without using it, and their Python is not asked to have orjson.
    import orjson

    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise sqlite3.DatabaseError(f"{table}: rows not readable as JSON: {exc}") from None
    if not isinstance(parsed, list):
        raise sqlite3.DatabaseError(f"{table}: rows not read as a JSON array")
    return parsed


class SQLiteDatabase:
    """The SQLite-specific part of a store: opening the file, the transaction verbs, what an error means.

    The connection is in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``, which takes
    the write lock up front, so reads inside a transaction agree with its writes) and shared across
    threads under a lock held for a whole transaction. WAL lets readers in other processes go on
    while one writes. The schema is brought to its latest version when the store is opened with
    ``create`` (one ``BEGIN IMMEDIATE`` transaction, so two processes opening at once migrate once).
    """

    errors: tuple[type[BaseException], ...] = (sqlite3.Error,)

    def __init__(self, path: str, migrations: Sequence[Migration], *, store: str, busy_timeout: float,
                 create: bool = True, json_columns: Mapping[str, str] | None = None) -> None:
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
        self.store = store
        self._lock = threading.RLock()
        if not create:
            _require_store(path, migrations, store)
        try:
            raw = _open(path, busy_timeout)
            self.connection = SQLiteConnection(raw, json_columns or {}, committed=self._committed)
            if create:
                self._migrate(migrations)
            self.checkpointer = Checkpointer(path, store)
        except self.errors as exc:
            raise self.mapped(exc) from exc

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        raw = self.connection.raw
        raw.execute("BEGIN IMMEDIATE")
        try:
            migrate(self.connection, self.store, migrations)
        except BaseException:
            raw.execute("ROLLBACK")
            raw.close()
            raise
        raw.execute("COMMIT")

    def _committed(self) -> None:
        self.checkpointer.nudge()

    @contextmanager
    def session(self) -> Iterator[SQLiteConnection]:
        with self._lock:
            yield self.connection

    reading = session

    def mapped(self, exc: BaseException) -> MetadataError:
        """Busy or locked past the busy timeout is retryable unavailability; anything else a plain error."""
        if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in (
                sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return MetadataUnavailableError(f"{self.store} busy: {exc}")
        return MetadataError(f"{self.store} error: {exc}")

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file now, as the checkpointer thread does after commits."""
        try:
            self.checkpointer.checkpoint()
        except sqlite3.Error as exc:
            raise self.mapped(exc) from exc

    def close(self) -> None:
        with self._lock:
            # The checkpointer's connection first: the last one to close checkpoints and removes the WAL.
            self.checkpointer.close()
            self.connection.raw.close()


class Checkpointer:
    """Copies committed WAL frames into the database file on a thread of its own, so no commit waits.

    SQLite's automatic checkpoint runs inside the commit that takes the WAL past 1000 pages: that
    writer also copies the pages into the database file and syncs it, with the store's lock held.
    A store's connection has it off (``wal_autocheckpoint = 0``); each commit nudges this instead,
    and its thread runs a PASSIVE checkpoint (which neither waits for nor blocks a reader or writer)
    on a connection of its own, at most once per ``interval_s``. Durability does not depend on it:
    a commit is durable once its WAL frames are synced (``synchronous = FULL``).
    """

    def __init__(self, path: str, store: str, interval_s: float = 0.25) -> None:
        self._store = store
        self._interval_s = interval_s
        self._connection = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self._wake = threading.Condition()
        self._pending = False
        self._closed = False
        self._inherited = False
        self._thread: threading.Thread | None = None
        _CHECKPOINTERS.add(self)

    def nudge(self) -> None:
        """Ask for a checkpoint soon; starts the thread on first use."""
        with self._wake:
            if self._closed:
                return
            self._pending = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"{self._store} checkpoint", daemon=True)
                self._thread.start()
            self._wake.notify()

    def checkpoint(self) -> tuple[int, int, int]:
        """One PASSIVE checkpoint now: (1 if it could not finish, WAL frames, frames checkpointed)."""
        with _CHECKPOINTING:
            busy, frames, done = self._connection.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(busy), int(frames), int(done)

    def close(self) -> None:
        """Stop the thread (a checkpoint under way finishes) and close the connection."""
        with self._wake:
            self._closed = True
            self._wake.notify()
            thread = self._thread
        if thread is not None:
            thread.join()
        if not self._inherited:
            self._connection.close()

    def _forked(self) -> None:
        # In a forked child: the thread is gone and the connection belongs to the parent; stay idle.
        self._wake = threading.Condition()
        self._closed = self._inherited = True
        self._thread = None

    def _run(self) -> None:
        while self._next():
            try:
                self.checkpoint()
            except sqlite3.Error as exc:
                # The frames stay in the WAL, readable and durable; the next nudge tries again.
                logger.warning("%s checkpoint failed: %s", self._store, exc)

    def _next(self) -> bool:
        """Wait for a nudge, no sooner than ``interval_s`` after the last checkpoint; False once closed."""
        with self._wake:
            self._wake.wait_for(lambda: self._closed, timeout=self._interval_s)
            self._wake.wait_for(lambda: self._pending or self._closed)
            self._pending = False
            return not self._closed


#: Held while a checkpoint runs; a fork waits for it, so no child starts inside one of SQLite's calls
#: (holding its process-wide locks, with the thread that would release them left behind).
_CHECKPOINTING = threading.Lock()
_CHECKPOINTERS: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    _CHECKPOINTING.release()
    for checkpointer in list(_CHECKPOINTERS):
        checkpointer._forked()


os.register_at_fork(before=_CHECKPOINTING.acquire, after_in_parent=_CHECKPOINTING.release,
                    after_in_child=_after_fork_in_child)


def _require_store(path: str, migrations: Sequence[Migration], store: str) -> None:
    """Refuse, without creating anything, a path that is not an existing store with the migrations' tables."""
    if not os.path.isfile(path):
        raise MetadataMissingError(f"no {store} at {path}")
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            row = (conn.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE store = ?", (store,)).fetchone()
                   if SCHEMA_TABLE in tables else None)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise MetadataMissingError(f"{path} is not a readable {store}: {exc}") from exc
    missing = sorted(tables_of(migrations, "sqlite") - tables)
    if missing:
        raise MetadataMissingError(f"{path} is not a reclaim {store} (no table {missing[0]})")
    if row is not None and int(row[0]) > migrations[-1].version:
        raise MetadataMissingError(f"{path}: the {store}'s schema is at version {row[0]}, newer than this "
                                   f"reclaim knows ({migrations[-1].version}): run a reclaim that knows it")


def _open(path: str, busy_timeout: float) -> sqlite3.Connection:
    """A connection set up for reclaim (the file is made when missing)."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # A committed deletion mark or layout change must survive a power loss, not only a crash.
        conn.execute("PRAGMA synchronous = FULL")
        # Checkpoints run on the store's checkpointer thread, not inside a commit.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
    except BaseException:
        conn.close()
        raise
    return conn
