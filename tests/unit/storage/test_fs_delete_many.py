"""The filesystem binding's batched delete, its names shared out among its threads: one result per name, in
the order asked, each the outcome of that very name."""

from __future__ import annotations

from pathlib import Path

import pytest

from reclaim.storage.chunks import ChunkTags, DeleteOutcome
from reclaim.storage.filesystem import FileSystemChunkStorage

TAGS = ChunkTags(component="segment", stream="s/t", segment="s/t/0", writer_epoch=1)


@pytest.mark.parametrize("workers, count", [(1, 5), (4, 1), (4, 23), (8, 7)])
def test_every_name_gets_its_own_outcome_in_order(tmp_path: Path, workers: int, count: int) -> None:
    binding = FileSystemChunkStorage(tmp_path / "tier2", name="fs", delete_workers=workers)
    names = [f"s/t/0/chunk-{i}" for i in range(count)]
    present = set(names[::2])
    for name in present:
        binding.create_with_content(name, b"data", TAGS)
    asked = [*reversed(names), "s/t/0/never-written"]
    results = binding.delete_many(asked)
    assert [r.name for r in results] == asked
    assert [r.outcome for r in results] == [DeleteOutcome.DELETED if n in present else DeleteOutcome.ALREADY_GONE
                                            for n in asked]
    assert not any(binding.exists(name) for name in names)
    assert binding.delete_many([]) == []
