"""What an audit reads: objects listed with size and modification time a page at a time, an exact
existence check for many names, and the metadata store's chunk rows paged in name order."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from reclaim.storage import s3 as s3_module
from reclaim.storage import s3_listing
from reclaim.storage.base import BaseChunkStorage, StoredObject
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.errors import StorageMisconfiguredError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.metadata import ChunkRecord
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore

TAGS = ChunkTags(component="c", stream="s", segment="s/0", writer_epoch=1)
NAMES = ["a/b/seg.E-1-O-0", "a/b/seg.E-1-O-10", "a/c/x", "a.c", "a/b.c", "top"]


def listed(binding: BaseChunkStorage, prefix: str = "", page_size: int = 1000) -> list[list[StoredObject]]:
    return list(binding.iter_object_pages(prefix, page_size=page_size))


def test_every_object_with_its_size_and_time_in_bounded_pages(chunk_storage: BaseChunkStorage) -> None:
    before = time.time()
    for i, name in enumerate(NAMES):
        chunk_storage.create_with_content(name, b"x" * i, TAGS)
    after = time.time()
    pages = listed(chunk_storage, page_size=4)
    assert [len(page) for page in pages] == [4, 2]
    objects = {obj.name: obj for page in pages for obj in page}
    assert sorted(objects) == sorted(NAMES)
    assert all(objects[name].size == i for i, name in enumerate(NAMES))
    # S3's LastModified has whole seconds.
    assert all(before - 1 <= obj.modified <= after + 1 for obj in objects.values())
    assert [obj.name for obj in chunk_storage.iter_objects()] == [obj.name for page in pages for obj in page]
    if isinstance(chunk_storage, S3ChunkStorage):
        assert [obj.name for obj in objects.values()] == sorted(NAMES), "S3 lists in name order"


def test_a_prefix_selects_and_an_empty_binding_lists_nothing(chunk_storage: BaseChunkStorage) -> None:
    assert listed(chunk_storage) == []
    for name in NAMES:
        chunk_storage.create_with_content(name, b"", TAGS)
    assert sorted(obj.name for obj in chunk_storage.iter_objects("a/b")) == ["a/b.c", "a/b/seg.E-1-O-0",
                                                                            "a/b/seg.E-1-O-10"]
    assert sorted(obj.name for obj in chunk_storage.iter_objects("a/b/")) == ["a/b/seg.E-1-O-0",
                                                                             "a/b/seg.E-1-O-10"]
    assert [obj.name for obj in chunk_storage.iter_objects("nothing/")] == []
    with pytest.raises(ValueError, match="page_size"):
        listed(chunk_storage, page_size=1001)


def test_exists_many_answers_every_name(chunk_storage: BaseChunkStorage) -> None:
    for name in NAMES:
        chunk_storage.create_with_content(name, b"", TAGS)
    asked = [*NAMES, "a/b/seg.E-1-O-5", "a/missing", "zzz", "../bad", "", "top"]
    assert chunk_storage.exists_many(asked) == set(NAMES)
    assert chunk_storage.exists_many([]) == set()


def test_the_filesystem_reports_each_file_modification_time(tmp_path: Path) -> None:
    binding = FileSystemChunkStorage(tmp_path / "tier2")
    binding.create_with_content("s/old", b"abc", TAGS)
    os.utime(binding.data_path("s/old"), (1_000_000_000, 1_000_000_000))
    assert list(binding.iter_objects()) == [StoredObject("s/old", 3, 1_000_000_000.0)]


def test_the_filesystem_walk_refuses_a_missing_root_and_creates_nothing(tmp_path: Path) -> None:
    binding = FileSystemChunkStorage(tmp_path / "unmounted", create=False)
    with pytest.raises(StorageMisconfiguredError, match="missing or lacks its chunks/"):
        listed(binding)
    assert not (tmp_path / "unmounted").exists()


def test_the_filesystem_walk_skips_what_is_deleted_while_it_runs(tmp_path: Path) -> None:
    binding = FileSystemChunkStorage(tmp_path / "tier2")
    names = [f"s/{d}/c{i}" for d in range(3) for i in range(4)]
    for name in names:
        binding.create_with_content(name, b"", TAGS)
    pages = binding.iter_object_pages(page_size=1)
    first = next(pages)[0].name
    binding.delete_many([name for name in names if name != first])  # prunes the emptied directories too
    assert list(pages) == []


@pytest.mark.integration
def test_s3_exists_many_heads_the_names_a_budgeted_listing_did_not_reach(
        s3_binding: S3ChunkStorage, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real objects between the asked names exhaust a small listing budget (page size and budget are
    lowered so the test needs dozens of objects, not thousands): what the listing did not reach is still
    answered exactly, by HEAD."""
    between = [f"g/k-{i:03d}" for i in range(40)]
    for name in ["g/a", *between, "g/zz-present"]:
        s3_binding.create_with_content(name, b"", None)
    monkeypatch.setattr(s3_module, "MAX_PAGE_SIZE", 5)
    monkeypatch.setattr(s3_listing, "MIN_BUDGET", 5)
    monkeypatch.setattr(s3_listing, "BUDGET_PER_KEY", 1)
    asked = ["g/a", "g/zz-missing", "g/zz-present"]
    assert s3_binding.exists_many(asked) == {"g/a", "g/zz-present"}


def row(name: str, binding: str = "fs-tier2") -> ChunkRecord:
    return ChunkRecord(name=name, segment="s/0", start_offset=0, length=1, tags=TAGS,
                       locations=(ChunkLocation(binding, Tier.TIER2, None, name),))


def test_the_store_pages_every_chunk_row_in_name_order(tmp_path: Path) -> None:
    store = SQLiteMetadataStore(tmp_path / "m.db")
    names = ["b/1", "a/2", "a/10", "c", "a.c", "é"]
    with store.transaction() as txn:
        for name in names:
            txn.put_chunk(row(name))
        txn.retire_chunks([txn.get_chunk("c")], "mark")  # type: ignore[list-item]
    pages, after = [], ""
    while page := store.chunks_after(after, 4):
        pages.append([r.name for r in page])
        after = page[-1].name
    assert pages == [["a.c", "a/10", "a/2", "b/1"], ["c", "é"]]
    assert [r.active for r in store.chunks_after("b/1", 1)] == [False]
    store.close()
