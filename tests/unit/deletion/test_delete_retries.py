"""A batched delete is one request when every key's result is final, and retries only the keys that
failed transiently, every result coming back in the order of the names.

The binding is the real filesystem binding behind a fault-injecting wrapper: no real server can be made
to fail some keys of one batched delete transiently, on demand, and then recover.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.retrying import RetryPolicy
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import DeleteOutcome, DeleteResult
from reclaim.storage.errors import StorageUnavailableError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore


class FailsSomeKeysOnce:
    """Fault injection: the first ``delete_many`` fails ``failing`` transiently and deletes the rest."""

    def __init__(self, inner: FileSystemChunkStorage, failing: set[str]) -> None:
        self._inner = inner
        self._failing = failing
        self.calls: list[list[str]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def delete_many(self, names: Sequence[str], versions: Mapping[str, str] | None = None) -> list[DeleteResult]:
        self.calls.append(list(names))
        if len(self.calls) > 1:
            return self._inner.delete_many(names, versions)
        done = {r.name: r for r in self._inner.delete_many([n for n in names if n not in self._failing], versions)}
        error = StorageUnavailableError("injected: slow down", binding=self._inner.name)
        return [done[n] if n in done else DeleteResult(n, DeleteOutcome.FAILED, error) for n in names]


@pytest.mark.parametrize("failing", [set(), {"s/t/0/c3"}, {"s/t/0/c0", "s/t/0/c4"}])
def test_only_the_keys_that_failed_transiently_are_sent_again(tmp_path: Path, failing: set[str]) -> None:
    inner = FileSystemChunkStorage(tmp_path / "tier2", name="fs", create=True)
    names = [f"s/t/0/c{i}" for i in range(6)]
    for name in names:
        inner.create_with_content(name, b"x")
    binding = FailsSomeKeysOnce(inner, failing)
    bindings = StorageBindings([inner])
    bindings._by_name["fs"] = binding  # type: ignore[assignment]
    store = SQLiteMetadataStore(tmp_path / "metadata.db")
    executor = DeletionExecutor(store, bindings, retry=RetryPolicy(attempts=3, initial_wait=0.001, max_wait=0.002))
    try:
        results = executor._delete_many("fs", names)
    finally:
        executor.close()
        store.close()
    assert [r.name for r in results] == names
    assert all(r.outcome is not DeleteOutcome.FAILED for r in results)
    assert binding.calls == ([names] if not failing else [names, [n for n in names if n in failing]])
    assert not any(inner.exists(name) for name in names)
