"""PostgreSQL under reclaim's stores: a psycopg 3 connection pool, serializable transactions, retried conflicts.

Isolation. Every store transaction runs at ``SERIALIZABLE``: what a transaction read and what it
wrote then form one point in a serial order, as SQLite's ``BEGIN IMMEDIATE`` gives by letting one
writer in at a time — but writers of different rows go on together. Compare-and-set writes check
the version and write in one statement (``UPDATE … WHERE version = ?``, ``INSERT … ON CONFLICT DO
NOTHING``), so a lost update is impossible at any level; ``SERIALIZABLE`` is what keeps the reads
a transaction does not write (a segment's chunk list, a mark's state, a stream's epochs) true at its
commit, so no chunk is ever both live and marked. No statement needs ``SELECT … FOR UPDATE``.

What PostgreSQL refuses becomes a typed error: a serialization failure, a deadlock or a concurrent
insert of the same key is a :class:`~reclaim.storage.errors.MetadataConflictError` (retryable: nothing was
written, and reading again and recomputing succeeds); a server that cannot be reached, went away
or was shut down is a :class:`~reclaim.storage.errors.MetadataUnavailableError` (retryable). A connection
lost during ``COMMIT`` leaves the outcome unknown to the client; it is reported unavailable and
reclaim's steps are idempotent, so doing the step again is safe.

Plain reads run on pooled connections in autocommit mode, each statement on committed data.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus
from psycopg_pool import ConnectionPool, PoolTimeout

from reclaim.logs import LogLimiter
from reclaim.storage.errors import MetadataConflictError, MetadataError, MetadataMissingError, MetadataUnavailableError
from reclaim.storage.sql_base import SCHEMA_TABLE, Engine, Migration, migrate, schema_version

logger = logging.getLogger(__name__)


class _OncePerInterval(logging.Filter):
    """Lets a repeated line of the pool's (one per failed reconnect, several a second while the server
    is down) through once per :data:`~reclaim.logs.LOG_INTERVAL_S`, saying how many it held back."""

    def __init__(self) -> None:
        super().__init__()
        self._limiter = LogLimiter()

    def filter(self, record: logging.LogRecord) -> bool:
        held = self._limiter.admit((record.name, record.levelno, str(record.msg)))
        if held is None:
            return False
        if held:
            record.msg = f"{record.msg}{self._limiter.suffix(held)}"
        return True


logging.getLogger("psycopg.pool").addFilter(_OncePerInterval())

#: Errors after which the same transaction, run again from its reads, may succeed.
_CONFLICTS = (psycopg.errors.SerializationFailure, psycopg.errors.DeadlockDetected, psycopg.errors.UniqueViolation)
#: Errors that say the server is not there (or not for now): refused, reset, shut down, pool exhausted.
_UNAVAILABLE = (psycopg.OperationalError, psycopg.errors.AdminShutdown, psycopg.errors.CannotConnectNow,
                PoolTimeout)


def describe(url: str) -> str:
    """``host:port/database`` of a PostgreSQL URL, without its password (for messages and logs)."""
    try:
        info = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "(an unparsable PostgreSQL URL)"
    return f"{info.get('host', 'localhost')}:{info.get('port', 5432)}/{info.get('dbname', '')}"


class PostgresConnection:
    """A psycopg connection (autocommit) as the stores' queries use it
    (:class:`reclaim.storage.sql_base.Connection`)."""

    engine: Engine = "postgresql"

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.raw = conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> psycopg.Cursor[Any]:
        if not params:
            return self.raw.execute(sql)
        return self.raw.execute(_placeholders(sql), params)

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> int:
        with self.raw.cursor() as cursor:
            cursor.executemany(_placeholders(sql), rows)
            return cursor.rowcount

    def select_in(self, table: str, columns: Sequence[str], key: str, values: Sequence[Any]) -> list[Sequence[Any]]:
        if not values:
            return []
        sql = f"SELECT {', '.join(columns)} FROM {table} WHERE {key} = ANY(%s)"
        return list(self.raw.execute(sql, (list(values),)).fetchall())

    def delete_in(self, table: str, key: str, values: Sequence[Any], where: str) -> list[Any]:
        if not values:
            return []
        sql = f"DELETE FROM {table} WHERE {where} AND {key} = ANY(%s) RETURNING {key}"
        return [row[0] for row in self.raw.execute(sql, (list(values),)).fetchall()]

    def begin(self) -> None:
        self.raw.execute("BEGIN ISOLATION LEVEL SERIALIZABLE")

    def commit(self) -> None:
        self.raw.execute("COMMIT")

    def rollback(self) -> None:
        if self.raw.info.transaction_status in (TransactionStatus.INTRANS, TransactionStatus.INERROR):
            self.raw.execute("ROLLBACK")


def _placeholders(sql: str) -> str:
    """The stores' ``?`` placeholders as psycopg's ``%s`` (a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class PostgresDatabase:
    """The PostgreSQL-specific part of a store: a connection pool, the transaction verbs, what an error means.

    ``pool_size`` connections at most (``min(2, pool_size)`` kept open); a caller waits up to
    ``pool_timeout`` seconds for one, then gets :class:`MetadataUnavailableError`. Each connection is
    checked when it is handed out, so a server restart costs a reconnect, not a failed transaction.
    Opening fails within ``connect_timeout`` seconds, in one line naming the server, when it cannot
    be reached. With ``create`` the schema is brought to its latest version under an advisory lock
    (two processes starting at once migrate once); without it, a database that holds no such store
    raises :class:`MetadataMissingError` and nothing is written.
    """

    errors: tuple[type[BaseException], ...] = (psycopg.Error, PoolTimeout)

    def __init__(self, url: str, migrations: Sequence[Migration], *, store: str, create: bool = True,
                 pool_size: int = 8, pool_timeout: float = 30.0, connect_timeout: float = 10.0) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be >= 1, got {pool_size}")
        self.store = store
        self.where = describe(url)
        self._pool = ConnectionPool(url, min_size=min(2, pool_size), max_size=pool_size, open=False,
                                    timeout=pool_timeout, kwargs={"autocommit": True, **_socket_options(url)},
                                    check=ConnectionPool.check_connection, name=f"reclaim {store}")
        _probe(url, self.where, connect_timeout)
        try:
            self._pool.open(wait=True, timeout=connect_timeout)
        except PoolTimeout as exc:
            self._pool.close()
            raise MetadataUnavailableError(f"cannot reach PostgreSQL at {self.where} within {connect_timeout:g} s "
                                           f"(is it running, and are the URL's user and password right?)") from exc
        try:
            if create:
                self._migrate(migrations)
            else:
                self._require(migrations)
        except BaseException as exc:
            self._pool.close()
            if isinstance(exc, self.errors):
                raise self.mapped(exc) from exc
            raise

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        with self.session() as conn:
            # READ COMMITTED, not SERIALIZABLE: a serializable transaction's snapshot would be taken by
            # its first statement, the lock, so a migrator that waited there would not see the tables
            # the one before it committed. Each statement after the lock sees them.
            conn.raw.execute("BEGIN ISOLATION LEVEL READ COMMITTED")
            try:
                conn.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (SCHEMA_TABLE,))
                migrate(conn, self.store, migrations)
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def _require(self, migrations: Sequence[Migration]) -> None:
        with self.reading() as conn:
            row = conn.execute("SELECT to_regclass(?)", (SCHEMA_TABLE,)).fetchone()
            version = schema_version(conn, self.store) if row is not None and row[0] is not None else None
        if version is None:
            raise MetadataMissingError(f"no {self.store} in PostgreSQL at {self.where} (only writers create it)")
        if version > migrations[-1].version:
            raise MetadataMissingError(f"the {self.store} at {self.where} is at schema version {version}, newer than "
                                       f"this reclaim knows ({migrations[-1].version}): run a reclaim that knows it")

    @contextmanager
    def session(self) -> Iterator[PostgresConnection]:
        with self._pool.connection() as conn:
            yield PostgresConnection(conn)

    reading = session

    def mapped(self, exc: BaseException) -> MetadataError:
        if isinstance(exc, _CONFLICTS):
            return MetadataConflictError(f"{self.store}: a concurrent transaction conflicted ({_first_line(exc)}); "
                                         "nothing was written", key=self.store, expected=0, actual=0)
        if isinstance(exc, _UNAVAILABLE):
            return MetadataUnavailableError(f"{self.store} at PostgreSQL {self.where} unavailable: {_first_line(exc)}")
        return MetadataError(f"{self.store} error: {_first_line(exc)}")

    def close(self) -> None:
        self._pool.close()


#: libpq's socket settings: a connection whose server stops answering (a dropped link, a partition
#: that swallows packets) fails within about 30 s instead of waiting on the socket for as long as the
#: kernel's TCP retries last (a quarter of an hour), or for ever when only the answer was lost.
SOCKET_OPTIONS = {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 5,
                  "keepalives_count": 3, "tcp_user_timeout": 30_000}


def _socket_options(url: str) -> dict[str, int]:
    """:data:`SOCKET_OPTIONS` but those the URL sets itself (an operator's choice wins)."""
    given = conninfo_to_dict(url)
    return {name: value for name, value in SOCKET_OPTIONS.items() if name not in given}


def _probe(url: str, where: str, timeout: float) -> None:
    """One connection first, so that a refused connection, a wrong password or a server certificate that
    does not verify fails at once, saying so (a pool would retry it until its timeout and then say only
    that it timed out)."""
    _connect_once(url, where, timeout).close()


def login_password(url: str, timeout: float = 10.0) -> str | None:
    """The password libpq logs in to ``url`` with: the URL's own, else the one its ``passfile`` (or
    ``PGPASSFILE``, ``~/.pgpass``) holds for that server, database and user; None when it needs none.

    For a client of the same server that does not read libpq's password file (Spark's JDBC reader).
    Raises :class:`MetadataUnavailableError` like a store's first connection."""
    with _connect_once(url, describe(url), timeout) as conn:
        return conn.info.password or None


def _connect_once(url: str, where: str, timeout: float) -> psycopg.Connection[Any]:
    try:
        options = {**_socket_options(url), "connect_timeout": max(1, round(timeout))}
        return psycopg.connect(make_conninfo(url, **options), autocommit=True)
    except psycopg.Error as exc:
        raise MetadataUnavailableError(f"cannot reach PostgreSQL at {where}{_tls_said(url, exc)}: "
                                       f"{_first_line(exc)}") from exc


#: What libpq says when TLS, not the server or the password, stopped the connection.
_TLS_FAILURES = ("SSL error", "certificate", "SSL was required", "does not support SSL", "sslmode", "sslrootcert")


def _tls_said(url: str, exc: BaseException) -> str:
    """For a connection TLS refused, the URL's TLS settings (``sslmode``, ``sslrootcert``) to name in its
    error, so that a wrong CA reads as one; else ``""``. The settings hold no secret."""
    text = str(exc)
    if not any(marker in text for marker in _TLS_FAILURES):
        return ""
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return ""
    said = ", ".join(f"{name}={given[name]}" for name in ("sslmode", "sslrootcert") if given.get(name))
    return f" over TLS ({said or 'sslmode=prefer, the default'})"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
