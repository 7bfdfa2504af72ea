"""The copies an executor remembers as deleted: those of its last RECENT_BATCHES finished batches, no more."""

from __future__ import annotations

from pathlib import Path

from reclaim.deletion.executor import RECENT_BATCHES, DeletionExecutor
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.sql_store import SQLiteMetadataStore


def test_a_deleted_copy_is_remembered_for_exactly_the_last_batches(tmp_path: Path) -> None:
    store = SQLiteMetadataStore(tmp_path / "metadata.db")
    executor = DeletionExecutor(store, StorageBindings())
    try:
        copy, other = ("fs", "s/t/0/a"), ("fs", "s/t/0/b")
        executor._remember({copy})
        for finished in range(1, RECENT_BATCHES + 2):
            assert executor._deleted_before(copy) is (finished <= RECENT_BATCHES), finished
            assert not executor._deleted_before(other)
            executor._remember(set())
        executor._remember({copy})  # deleted again later: remembered afresh
        assert executor._deleted_before(copy)
        for _ in range(2 * RECENT_BATCHES):
            executor._remember(set())
        assert not executor._deleted_before(copy)
        assert executor._deleted_by == {}  # forgotten entries are swept, not kept for ever
    finally:
        executor.close()
        store.close()
