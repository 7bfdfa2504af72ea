"""The one base of reclaim's SQL stores, whatever the engine: transactions, typed reads, versioned schemas.

A store is a reader type (its queries), a transaction type (its queries plus its writes) and a
:class:`Database`, which is all that differs between engines: how a connection is had, how a
transaction begins and ends, which errors are the engine's own and what they mean. SQLite
(:mod:`reclaim.storage.sqlite_base`) and PostgreSQL (:mod:`reclaim.storage.postgres_base`) supply one each.

Queries are written once, with ``?`` placeholders and SQL both engines speak; the few statements
they do not share go through :class:`Connection`'s ``select_in`` and ``delete_in`` (the engines'
fastest way to read or remove rows by many keys) or name the engine (``Connection.engine``).
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, Literal, Protocol, TypeVar

from reclaim.storage.errors import MetadataConflictError, MetadataError, MetadataMissingError

logger = logging.getLogger(__name__)

#: How a transaction ended, as counted by a store's outcome hook.
Outcome = Literal["committed", "unavailable", "conflict", "rolled_back"]

Engine = Literal["sqlite", "postgresql"]


class Cursor(Protocol):
    """What a query hands back (``sqlite3.Cursor`` and ``psycopg.Cursor`` both are one)."""

    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """One engine connection as the stores' queries use it."""

    engine: Engine

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement; ``?`` marks each parameter."""
        ...

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        """Run one statement once per row of parameters; how many rows it changed in all."""
        ...

    def select_in(self, table: str, columns: Sequence[str], key: str, values: Sequence[Any]) -> list[Sequence[Any]]:
        """The ``columns`` of every row of ``table`` whose ``key`` is among ``values`` (distinct), any order."""
        ...

    def delete_in(self, table: str, key: str, values: Sequence[Any], where: str) -> list[Any]:
        """Delete the rows whose ``key`` is among ``values`` (distinct) and that match ``where``; their keys."""
        ...

    def begin(self) -> None:
        """Start a serializable transaction (see the engine for what that takes)."""
        ...

    def commit(self) -> None: ...

    def rollback(self) -> None:
        """Roll back the transaction under way, if there is one."""
        ...


class Database(Protocol):
    """The engine-specific part of a store."""

    store: str
    #: The exceptions the engine raises; the store maps each to a MetadataError.
    errors: tuple[type[BaseException], ...]

    def session(self) -> AbstractContextManager[Connection]:
        """A connection to run one transaction on, the caller's alone until the block ends."""
        ...

    def reading(self) -> AbstractContextManager[Connection]:
        """A connection to run plain reads on (each statement on its own, committed data only)."""
        ...

    def mapped(self, exc: BaseException) -> MetadataError:
        """What an engine error means to a caller: a conflict, unavailability or a plain error."""
        ...

    def close(self) -> None: ...


class Queries:
    """Base of a store's reader type: the connection its queries run on."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn


class Transaction(Queries):
    """Base of a store's transaction type; valid only inside its ``with`` block.

    A store's transaction type extends its reader type and this class, so it reads what it writes.
    """

    def __init__(self, conn: Connection) -> None:
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


class StoreBase(Generic[R, T]):
    """Serializable transactions and plain reads of one store on one :class:`Database`.

    ``transaction()`` yields a ``T`` (commit on normal exit, rollback on any exception, nesting in
    one thread refused); ``_read(query)`` runs ``query`` on an ``R`` outside any transaction and
    returns its type unchanged. Every engine error leaves as a :class:`MetadataError` naming the
    store. ``outcomes`` is told how each transaction ended (the metadata store feeds its Prometheus
    counter from it).
    """

    def __init__(self, db: Database, *, reader: type[R], transaction: type[T],
                 outcomes: Callable[[Outcome], None] = _ignore) -> None:
        self.transactions_committed = 0
        self._db = db
        self._reader_type = reader
        self._transaction_type = transaction
        self._outcomes = outcomes
        self._count_lock = threading.Lock()
        self._local = threading.local()

    @contextmanager
    def transaction(self) -> Iterator[T]:
        """One atomic, serializable transaction; commit on normal exit, rollback on any exception."""
        if getattr(self._local, "in_transaction", False):
            raise MetadataError(f"nested {self._db.store} transactions are not supported")
        self._local.in_transaction = True
        try:
            with self._session() as conn:
                self._begin(conn)
                txn = self._transaction_type(conn)
                try:
                    yield txn
                    conn.commit()
                except BaseException as exc:
                    error = self._db.mapped(exc) if isinstance(exc, self._db.errors) else exc
                    self._rollback(conn, error)
                    if error is not exc:
                        raise error from exc
                    raise
        finally:
            self._local.in_transaction = False
        with self._count_lock:
            self.transactions_committed += 1
        self._outcomes("committed")
        for callback in txn._callbacks:
            self._run_callback(callback)

    @contextmanager
    def _session(self) -> Iterator[Connection]:
        # Getting a connection can fail (a pool that cannot reach its server): unavailable, counted.
        try:
            session = self._db.session()
            conn = session.__enter__()
        except self._db.errors as exc:
            self._outcomes("unavailable")
            raise self._db.mapped(exc) from exc
        try:
            yield conn
        except BaseException as exc:
            if not session.__exit__(type(exc), exc, exc.__traceback__):
                raise
        else:
            session.__exit__(None, None, None)

    def _begin(self, conn: Connection) -> None:
        try:
            conn.begin()
        except self._db.errors as exc:
            self._outcomes("unavailable")
            raise self._db.mapped(exc) from exc

    def _rollback(self, conn: Connection, error: BaseException) -> None:
        try:
            conn.rollback()
        except self._db.errors as exc:  # a connection that broke mid-transaction: nothing was committed
            logger.debug("%s rollback failed: %s", self._db.store, exc)
        self._outcomes(_outcome_of(error))
        logger.debug("%s transaction rolled back: %s", self._db.store, error)

    def _run_callback(self, callback: Callable[[], None]) -> None:
        # The transaction is already durable; a failing observer must not make it look failed.
        try:
            callback()
        except Exception:
            logger.exception("%s on-commit callback failed", self._db.store)

    def _read(self, query: Callable[[R], V]) -> V:
        """``query`` run on the store's reader, outside any transaction."""
        try:
            with self._db.reading() as conn:
                return query(self._reader_type(conn))
        except self._db.errors as exc:
            raise self._db.mapped(exc) from exc

    def close(self) -> None:
        self._db.close()


def _outcome_of(error: BaseException) -> Outcome:
    from reclaim.storage.errors import MetadataUnavailableError

    if isinstance(error, MetadataConflictError):
        return "conflict"
    if isinstance(error, MetadataUnavailableError):
        return "unavailable"
    return "rolled_back"


# --- versioned schemas -----------------------------------------------------------------------------

#: Where every store records the schema version it is at, one row per store, in its own database.
SCHEMA_TABLE = "reclaim_schema"


@dataclass(frozen=True)
class Migration:
    """One step of a store's schema: the statements that take it from ``version - 1`` to ``version``,
    per engine (each engine's types differ: SQLite's INTEGER is 64-bit, PostgreSQL's is not)."""

    version: int
    statements: Mapping[Engine, str]

    def for_engine(self, engine: Engine) -> list[str]:
        return [s for s in self.statements[engine].split(";") if s.strip()]


def schema_version(conn: Connection, store: str) -> int | None:
    """The version ``store``'s schema is at in ``conn``'s database (None: no version recorded)."""
    row = conn.execute(f"SELECT version FROM {SCHEMA_TABLE} WHERE store = ?", (store,)).fetchone()
    return None if row is None else int(row[0])


def migrate(conn: Connection, store: str, migrations: Sequence[Migration]) -> int:
    """Bring ``store``'s schema up to the last of ``migrations``, inside the caller's transaction
    (which must exclude other migrators: SQLite's write lock, PostgreSQL's advisory lock).

    Each step runs once, in order, and the version is recorded with it; a database at a newer
    version than reclaim knows is refused (:class:`MetadataMissingError`), never downgraded.
    """
    latest = migrations[-1].version
    if [m.version for m in migrations] != list(range(1, latest + 1)):
        raise ValueError(f"{store} migrations must be numbered 1..{latest} in order")
    conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA_TABLE} (store TEXT PRIMARY KEY, version INTEGER NOT NULL)")
    current = schema_version(conn, store) or 0
    if current > latest:
        raise MetadataMissingError(f"the {store}'s schema is at version {current}, newer than this reclaim "
                                   f"knows ({latest}): run a reclaim that knows it")
    for migration in migrations[current:]:
        for statement in migration.for_engine(conn.engine):
            conn.execute(statement)
        logger.info("%s schema migrated to version %d", store, migration.version)
    if current < latest:
        conn.execute(f"INSERT INTO {SCHEMA_TABLE} (store, version) VALUES (?, ?) "
                     "ON CONFLICT (store) DO UPDATE SET version = excluded.version", (store, latest))
    return latest


_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+)|CREATE TABLE (\w+)")


def tables_of(migrations: Iterable[Migration], engine: Engine) -> set[str]:
    """The tables ``migrations`` create on ``engine``."""
    return {a or b for m in migrations for statement in m.for_engine(engine)
            for a, b in _TABLE.findall(statement)}


def distinct(values: Iterable[Any], key: str) -> list[Any]:
    """``values`` in their first order, each once; a lone string is refused (it would read as its letters)."""
    if isinstance(values, str):
        raise TypeError(f"expected an iterable of {key} values, got the single string {values!r}")
    return list(dict.fromkeys(values))
