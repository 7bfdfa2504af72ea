"""The one base of reclaim's SQLite stores: opening the file, transactions, typed reads, error mapping."""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, Literal, TypeVar
from urllib.parse import quote

from storage.errors import MetadataConflictError, MetadataError, MetadataMissingError, MetadataUnavailableError

logger = logging.getLogger(__name__)

#: How a transaction ended, as counted by a store's outcome hook.
Outcome = Literal["committed", "unavailable", "conflict", "rolled_back"]


class Queries:
    """Base of a store's reader type: the connection its queries run on."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn


class Transaction(Queries):
    """Base of a store's transaction type; valid only inside its ``with`` block.

    A store's transaction type extends its reader type and this class, so it reads what it writes.
    """

    def __init__(self, conn: sqlite3.Connection) -> None:
        super().__init__(conn)
        self._callbacks: list[Callable[[], None]] = []

    def on_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback`` after this transaction commits; never when it rolls back."""
        self._callbacks.append(callback)


R = TypeVar("R", bound=Queries)
T = TypeVar("T", bound=Transaction)
V = TypeVar("V")


def _ignore(outcome: Outcome) -> None:
    del outcome


class SQLiteStoreBase(Generic[R, T]):
    """One connection to one SQLite file, guarded by a lock, with serializable transactions.

    ``transaction()`` yields a ``T`` (commit on normal exit, rollback on any exception, nesting
    refused); ``_read(query)`` runs ``query`` on the store's ``R`` and returns its type unchanged.
    Every engine error leaves as a :class:`MetadataError` naming ``store``. ``outcomes`` is told how
    each transaction ended (the metadata store feeds its Prometheus counter from it).

    Everything engine-specific is in :class:`SQLiteDatabase`; a store on another engine would supply
    the same verbs (open, begin, commit, rollback, which errors are its own and how they map) and
    keep this shape.
    """

    def __init__(self, path: str | os.PathLike[str], schema: str, *, store: str, reader: type[R],
                 transaction: type[T], busy_timeout: float = 10.0,
                 outcomes: Callable[[Outcome], None] = _ignore, create: bool = True) -> None:
        self.path = os.fspath(path)
        self.transactions_committed = 0
        self._db = SQLiteDatabase(self.path, schema, store=store, busy_timeout=busy_timeout, create=create)
        self._transaction_type = transaction
        self._outcomes = outcomes
        self._lock = threading.RLock()
        self._in_transaction = False
        self._reader = reader(self._db.connection)

    @contextmanager
    def transaction(self) -> Iterator[T]:
        """One atomic, serializable transaction; commit on normal exit, rollback on any exception."""
        with self._lock:
            if self._in_transaction:
                raise MetadataError(f"nested {self._db.store} transactions are not supported")
            self._begin()
            self._in_transaction = True
            txn = self._transaction_type(self._db.connection)
            try:
                yield txn
                self._db.commit()
            except BaseException as exc:
                self._rollback(exc)
                if isinstance(exc, self._db.errors):
                    raise self._db.mapped(exc) from exc
                raise
            finally:
                self._in_transaction = False
            self.transactions_committed += 1
            self._outcomes("committed")
        for callback in txn._callbacks:
            self._run_callback(callback)

    def _begin(self) -> None:
        try:
            self._db.begin()
        except self._db.errors as exc:
            self._outcomes("unavailable")
            raise self._db.mapped(exc) from exc

    def _rollback(self, exc: BaseException) -> None:
        self._db.rollback()
        self._outcomes("conflict" if isinstance(exc, MetadataConflictError) else "rolled_back")
        logger.debug("%s transaction rolled back: %s", self._db.store, exc)

    def _run_callback(self, callback: Callable[[], None]) -> None:
        # The transaction is already durable; a failing observer must not make it look failed.
        try:
            callback()
        except Exception:
            logger.exception("%s on-commit callback failed", self._db.store)

    def _read(self, query: Callable[[R], V]) -> V:
        """``query`` run on the store's reader under the lock, outside any transaction."""
        with self._lock:
            try:
                return query(self._reader)
            except self._db.errors as exc:
                raise self._db.mapped(exc) from exc

    def checkpoint(self) -> None:
        """Copy what the WAL holds into the database file now, as the checkpointer thread does after commits."""
        try:
            self._db.checkpointer.checkpoint()
        except self._db.errors as exc:
            raise self._db.mapped(exc) from exc

    def close(self) -> None:
        with self._lock:
            self._db.close()


class SQLiteDatabase:
    """The SQLite-specific part of a store: opening the file, the transaction verbs, what an error means.

    The connection is in autocommit mode (transactions are explicit ``BEGIN IMMEDIATE``, which takes
    the write lock up front, so reads inside a transaction agree with its writes) and shared across
    threads under the store's lock. WAL lets readers in other processes go on while one writes.
    """

    #: The exceptions the engine raises; the store maps each to a MetadataError.
    errors: tuple[type[Exception], ...] = (sqlite3.Error,)

    def __init__(self, path: str, schema: str, *, store: str, busy_timeout: float, create: bool = True) -> None:
        if busy_timeout < 0:
            raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
        self.store = store
        if not create:
            _require_store(path, schema, store)
        try:
            self.connection = _open(path, schema, busy_timeout, create)
            self.checkpointer = Checkpointer(path, store)
        except self.errors as exc:
            raise self.mapped(exc) from exc

    def begin(self) -> None:
        self.connection.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self.connection.execute("COMMIT")
        self.checkpointer.nudge()

    def rollback(self) -> None:
        if self.connection.in_transaction:
            self.connection.execute("ROLLBACK")

    def mapped(self, exc: Exception) -> MetadataError:
        """Busy or locked past the busy timeout is retryable unavailability; anything else a plain error."""
        if isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode in (
                sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return MetadataUnavailableError(f"{self.store} busy: {exc}")
        return MetadataError(f"{self.store} error: {exc}")

    def close(self) -> None:
        # The checkpointer's connection first: the last one to close checkpoints and removes the WAL.
        self.checkpointer.close()
        self.connection.close()


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


def _require_store(path: str, schema: str, store: str) -> None:
    """Refuse, without creating anything, a path that is not an existing store with ``schema``'s tables."""
    if not os.path.isfile(path):
        raise MetadataMissingError(f"no {store} at {path}")
    try:
        conn = sqlite3.connect(f"file:{quote(os.path.abspath(path))}?mode=ro", uri=True)
        try:
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise MetadataMissingError(f"{path} is not a readable {store}: {exc}") from exc
    missing = sorted(set(_TABLE.findall(schema)) - tables)
    if missing:
        raise MetadataMissingError(f"{path} is not a reclaim {store} (no table {missing[0]})")


_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)")


def _open(path: str, schema: str, busy_timeout: float, create: bool = True) -> sqlite3.Connection:
    """A connection set up for reclaim; with ``create``, the schema is applied (and the file made) first."""
    conn = sqlite3.connect(path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        # A committed deletion mark or layout change must survive a power loss, not only a crash.
        conn.execute("PRAGMA synchronous = FULL")
        # Checkpoints run on the store's checkpointer thread, not inside a commit.
        conn.execute("PRAGMA wal_autocheckpoint = 0")
        if create:
            # The schema (statements separated by ";") is applied atomically.
            conn.execute("BEGIN IMMEDIATE")
            for statement in filter(str.strip, schema.split(";")):
                conn.execute(statement)
            conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn
