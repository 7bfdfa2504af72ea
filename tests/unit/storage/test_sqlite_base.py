"""The SQLite store base: commit and rollback, nesting refused, lock contention and errors mapped."""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.storage.errors import MetadataConflictError, MetadataError, MetadataUnavailableError
from reclaim.storage.sql_base import Migration, Outcome, Queries, StoreBase, Transaction
from reclaim.storage.sqlite_base import SQLiteDatabase

_MIGRATIONS = [Migration(1, {"sqlite": "CREATE TABLE kv (key TEXT PRIMARY KEY, value INTEGER NOT NULL)"})]


class _Reader(Queries):
    def get(self, key: str) -> int | None:
        row = self._conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
        return None if row is None else int(row[0])

    def bad_query(self) -> int:
        return int(self._conn.execute("SELECT value FROM no_such_table").fetchone()[0])


class _Txn(_Reader, Transaction):
    def put(self, key: str, value: int) -> None:
        self._conn.execute("INSERT INTO kv VALUES (?, ?)", (key, value))


class _KeyValueStore(StoreBase[_Reader, _Txn]):
    """The smallest store on the base: one table of integers."""

    def __init__(self, path: Path, *, busy_timeout: float = 10.0) -> None:
        self.outcomes: list[Outcome] = []
        super().__init__(SQLiteDatabase(str(path), _MIGRATIONS, store="kv store", busy_timeout=busy_timeout),
                         reader=_Reader, transaction=_Txn, outcomes=self.outcomes.append)

    def get(self, key: str) -> int | None:
        return self._read(lambda r: r.get(key))

    def bad_query(self) -> int:
        return self._read(lambda r: r.bad_query())


@pytest.fixture
def store(tmp_path: Path) -> Iterator[_KeyValueStore]:
    kv = _KeyValueStore(tmp_path / "kv.db")
    yield kv
    kv.close()


def test_commit_persists_counts_and_runs_callbacks_after_commit(store: _KeyValueStore, tmp_path: Path) -> None:
    seen: list[int | None] = []
    with store.transaction() as txn:
        txn.put("a", 1)
        assert txn.get("a") == 1, "a transaction reads its own writes"
        # Another connection sees the row only once the commit has happened.
        txn.on_commit(lambda: seen.append(_KeyValueStore(tmp_path / "kv.db").get("a")))
    assert seen == [1]
    assert store.get("a") == 1
    assert store.transactions_committed == 1
    assert store.outcomes == ["committed"]


def test_failing_callback_is_logged_not_raised(store: _KeyValueStore, caplog: pytest.LogCaptureFixture) -> None:
    seen: list[str] = []

    def broken() -> None:
        raise RuntimeError("observer down")

    with caplog.at_level(logging.ERROR, logger="reclaim.storage.sql_base"), store.transaction() as txn:
        txn.put("a", 1)
        txn.on_commit(broken)
        txn.on_commit(lambda: seen.append("later"))
    assert seen == ["later"], "one failing callback does not stop the others"
    assert store.get("a") == 1 and store.transactions_committed == 1
    assert "kv store on-commit callback failed" in caplog.text


def test_rollback_on_exception_leaves_nothing(store: _KeyValueStore, tmp_path: Path) -> None:
    seen: list[str] = []
    with pytest.raises(ValueError, match="boom"), store.transaction() as txn:
        txn.put("a", 1)
        txn.put("b", 2)
        txn.on_commit(lambda: seen.append("committed"))
        raise ValueError("boom")
    assert store.get("a") is None and store.get("b") is None
    assert _KeyValueStore(tmp_path / "kv.db").get("a") is None, "nothing reached the file"
    assert seen == [] and store.transactions_committed == 0
    assert store.outcomes == ["rolled_back"]


def test_conflict_is_counted_as_conflict(store: _KeyValueStore) -> None:
    with pytest.raises(MetadataConflictError), store.transaction() as txn:
        txn.put("a", 1)
        raise MetadataConflictError("lost", key="a", expected=0, actual=1)
    assert store.get("a") is None
    assert store.outcomes == ["conflict"]


def test_sql_error_in_a_transaction_is_mapped_and_rolled_back(store: _KeyValueStore) -> None:
    with store.transaction() as txn:
        txn.put("a", 1)
    with pytest.raises(MetadataError, match="^kv store error: UNIQUE constraint failed") as info, \
            store.transaction() as txn:
        txn.put("b", 2)
        txn.put("a", 3)
    assert not isinstance(info.value, MetadataUnavailableError) and not info.value.retryable
    assert isinstance(info.value.__cause__, sqlite3.IntegrityError)
    assert store.get("a") == 1 and store.get("b") is None


def test_nested_transaction_is_refused_and_the_store_stays_usable(store: _KeyValueStore) -> None:
    with pytest.raises(MetadataError, match="nested kv store transactions are not supported"):
        with store.transaction() as outer:
            outer.put("a", 1)
            with store.transaction():
                pass
    assert store.get("a") is None, "the refusal rolls the outer transaction back"
    with store.transaction() as txn:
        txn.put("a", 2)
    assert store.get("a") == 2


def test_write_lock_held_elsewhere_is_unavailable_within_busy_timeout(tmp_path: Path) -> None:
    store = _KeyValueStore(tmp_path / "kv.db", busy_timeout=0.05)
    holder = sqlite3.connect(tmp_path / "kv.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(MetadataUnavailableError, match="^kv store busy: database is locked") as info:
            with store.transaction():
                pass
        assert info.value.retryable
        assert store.outcomes == ["unavailable"]
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    with store.transaction() as txn:
        txn.put("a", 1)
    assert store.get("a") == 1, "the store works again once the lock is released"
    store.close()


def test_read_errors_are_mapped(store: _KeyValueStore) -> None:
    with pytest.raises(MetadataError, match="^kv store error: no such table: no_such_table") as info:
        store.bad_query()
    assert not isinstance(info.value, MetadataUnavailableError)
    assert isinstance(info.value.__cause__, sqlite3.OperationalError)


def test_opening_while_the_write_lock_is_held_is_unavailable(tmp_path: Path) -> None:
    _KeyValueStore(tmp_path / "kv.db").close()
    holder = sqlite3.connect(tmp_path / "kv.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(MetadataUnavailableError, match="^kv store busy: database is locked"):
            _KeyValueStore(tmp_path / "kv.db", busy_timeout=0.05)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_closed_store_refuses_reads_with_a_metadata_error(tmp_path: Path) -> None:
    store = _KeyValueStore(tmp_path / "kv.db")
    store.close()
    with pytest.raises(MetadataError, match="^kv store error: Cannot operate on a closed database"):
        store.get("a")


def test_bad_open_arguments_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="busy_timeout must be >= 0 seconds, got -1"):
        _KeyValueStore(tmp_path / "kv.db", busy_timeout=-1)
    with pytest.raises(MetadataError, match="^kv store error: unable to open database file"):
        _KeyValueStore(tmp_path / "missing-dir" / "kv.db")
