"""ChunkStorage contract tests, run against every binding through the ``chunk_storage`` fixture."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY

from reclaim.storage.base import BaseChunkStorage
from reclaim.storage.chunks import ChunkTags, ConcatArgument, DeleteOutcome, Tier
from reclaim.storage.errors import (
    ChunkAlreadyExistsError,
    ChunkNotFoundError,
    ChunkReadOnlyError,
    InvalidChunkNameError,
    InvalidOffsetError,
    UnsupportedOperationError,
)

TAGS = ChunkTags(component="segmentstore", stream="scope/strëam", segment="scope/strëam/0", writer_epoch=7)


def test_create_exists_info_and_tags(chunk_storage: BaseChunkStorage) -> None:
    assert not chunk_storage.exists("seg/a.E-1-O-0")
    handle = chunk_storage.create("seg/a.E-1-O-0", TAGS)
    assert handle.name == "seg/a.E-1-O-0" and not handle.read_only
    assert chunk_storage.exists("seg/a.E-1-O-0")
    info = chunk_storage.get_info("seg/a.E-1-O-0")
    assert info.length == 0
    assert info.tags == TAGS
    assert info.tags is not None and info.tags.application == "reclaim"


def test_create_twice_is_refused(chunk_storage: BaseChunkStorage) -> None:
    chunk_storage.create_with_content("c1", b"first", TAGS)
    with pytest.raises(ChunkAlreadyExistsError):
        chunk_storage.create("c1", TAGS)
    with pytest.raises(ChunkAlreadyExistsError):
        chunk_storage.create_with_content("c1", b"second", TAGS)
    assert chunk_storage.read(chunk_storage.open_read("c1"), 0, 5) == b"first"


def test_read_ranges_and_bounds(chunk_storage: BaseChunkStorage) -> None:
    chunk_storage.create_with_content("r", b"0123456789", TAGS)
    handle = chunk_storage.open_read("r")
    assert handle.read_only
    assert chunk_storage.read(handle, 0, 10) == b"0123456789"
    assert chunk_storage.read(handle, 3, 4) == b"3456"
    assert chunk_storage.read(handle, 10, 0) == b""
    with pytest.raises(InvalidOffsetError):
        chunk_storage.read(handle, 8, 5)
    with pytest.raises(InvalidOffsetError):
        chunk_storage.read(handle, 11, 0)


def test_write_follows_the_offset_contract(chunk_storage: BaseChunkStorage) -> None:
    handle = chunk_storage.create("w", TAGS)
    with pytest.raises(InvalidOffsetError):
        chunk_storage.write(handle, 3, b"abc")
    assert chunk_storage.write(handle, 0, b"abc") == 3
    if chunk_storage.supports_append:
        assert chunk_storage.write(handle, 3, b"def") == 3
        with pytest.raises(InvalidOffsetError):
            chunk_storage.write(handle, 3, b"xyz")
        expected = b"abcdef"
    else:
        with pytest.raises(InvalidOffsetError):
            chunk_storage.write(handle, 3, b"def")
        expected = b"abc"
    assert chunk_storage.read(chunk_storage.open_read("w"), 0, len(expected)) == expected
    assert chunk_storage.get_info("w").tags == TAGS, "tags must survive writes"


def test_missing_chunks_raise_not_found(chunk_storage: BaseChunkStorage) -> None:
    for call in (chunk_storage.open_read, chunk_storage.open_write, chunk_storage.get_info):
        with pytest.raises(ChunkNotFoundError):
            call("missing")
    handle = chunk_storage.create("gone", TAGS)
    chunk_storage.delete(handle)
    with pytest.raises(ChunkNotFoundError):
        chunk_storage.delete(handle)
    with pytest.raises(ChunkNotFoundError):
        chunk_storage.write(handle, 0, b"x")


def test_read_only_handle_cannot_write(chunk_storage: BaseChunkStorage) -> None:
    chunk_storage.create("ro", TAGS)
    with pytest.raises(ChunkReadOnlyError):
        chunk_storage.write(chunk_storage.open_read("ro"), 0, b"x")


def test_delete_removes_chunk_and_tags(chunk_storage: BaseChunkStorage) -> None:
    chunk_storage.create_with_content("s/one", b"1", TAGS)
    chunk_storage.delete(chunk_storage.open_write("s/one"))
    assert not chunk_storage.exists("s/one")
    assert list(chunk_storage.iter_names("s/")) == []
    chunk_storage.create_with_content("s/one-again", b"2", None)
    assert chunk_storage.get_info("s/one-again").tags is None


def test_list_by_prefix_with_pages(chunk_storage: BaseChunkStorage) -> None:
    names = [f"p/seg.E-1-O-{i}" for i in range(5)] + ["q/other", "p2"]
    for name in names:
        chunk_storage.create(name, TAGS)
    first = chunk_storage.list("p/", page_size=2)
    assert first.names == ("p/seg.E-1-O-0", "p/seg.E-1-O-1") and first.continuation
    assert list(chunk_storage.iter_names("p/")) == sorted(names[:5])
    assert list(chunk_storage.iter_names("p")) == sorted([*names[:5], "p2"])
    assert sorted(chunk_storage.iter_names()) == sorted(names)
    collected: list[str] = []
    token: str | None = None
    while True:
        page = chunk_storage.list("p/", page_size=2, continuation=token)
        collected.extend(page.names)
        if page.continuation is None:
            break
        token = page.continuation
    assert collected == sorted(names[:5])


def test_delete_many_reports_per_key(chunk_storage: BaseChunkStorage) -> None:
    for name in ("d/a", "d/b", "d/c"):
        chunk_storage.create_with_content(name, b"x", TAGS)
    results = chunk_storage.delete_many(["d/a", "d/missing", "../evil", "d/b", "d/c"])
    assert [r.name for r in results] == ["d/a", "d/missing", "../evil", "d/b", "d/c"]
    by_name = {r.name: r for r in results}
    assert by_name["d/a"].outcome is DeleteOutcome.DELETED
    assert by_name["d/missing"].ok, "a missing key counts as already gone"
    assert by_name["../evil"].outcome is DeleteOutcome.FAILED
    assert isinstance(by_name["../evil"].error, InvalidChunkNameError)
    assert list(chunk_storage.iter_names("d/")) == []


@pytest.mark.parametrize("bad", ["", "../x", "a/../b", "/abs", "a//b", "a/", ".", "a\x00b", "a\\b", "n\nl",
                                 "x" * 1025, "a/ .. /b", "x" * 256])
def test_bad_names_rejected(chunk_storage: BaseChunkStorage, bad: str) -> None:
    with pytest.raises(InvalidChunkNameError):
        chunk_storage.create(bad, TAGS)
    with pytest.raises(InvalidChunkNameError):
        chunk_storage.exists(bad)


def test_optional_verbs(chunk_storage: BaseChunkStorage) -> None:
    chunk_storage.create_with_content("t", b"hello", TAGS)
    chunk_storage.create_with_content("u", b" world!", TAGS)
    handle = chunk_storage.open_write("t")
    if not chunk_storage.supports_concat:
        with pytest.raises(UnsupportedOperationError):
            chunk_storage.concat([ConcatArgument("t", 5), ConcatArgument("u", 7)])
        with pytest.raises(UnsupportedOperationError):
            chunk_storage.truncate(handle, 2)
        return
    assert chunk_storage.concat([ConcatArgument("t", 5), ConcatArgument("u", 6)]) == 6
    assert chunk_storage.read(handle, 0, 11) == b"hello world"
    assert chunk_storage.truncate(handle, 5)
    assert chunk_storage.get_info("t").length == 5
    chunk_storage.set_read_only(handle, True)
    assert chunk_storage.get_info("t").read_only
    with pytest.raises(ChunkReadOnlyError):
        chunk_storage.write(handle, 5, b"!")
    with pytest.raises(ChunkReadOnlyError):
        chunk_storage.open_write("t")
    chunk_storage.set_read_only(handle, False)
    chunk_storage.write(handle, 5, b"!")


def test_location_and_metrics(chunk_storage: BaseChunkStorage) -> None:
    location = chunk_storage.location("seg/x")
    assert location.binding == chunk_storage.name and location.tier is Tier.TIER2
    assert location.key == "seg/x" and location.bucket == chunk_storage.bucket
    labels = {"binding": chunk_storage.name, "operation": "exists", "outcome": "ok"}
    before = REGISTRY.get_sample_value("reclaim_storage_operations_total", labels) or 0.0
    chunk_storage.exists("seg/x")
    assert REGISTRY.get_sample_value("reclaim_storage_operations_total", labels) == before + 1


def test_a_conditional_delete_removes_only_the_version_that_was_checked(chunk_storage: BaseChunkStorage) -> None:
    """GCS deletes by generation, Azure by ETag: an object written again under the name since its check is kept.
    A binding without conditional deletes reports no version, and deletes whatever the name holds."""
    chunk_storage.create_with_content("v/c0", b"first", TAGS)
    checked = chunk_storage.get_info("v/c0").version
    chunk_storage.delete(chunk_storage.open_write("v/c0"))
    chunk_storage.create_with_content("v/c0", b"second", TAGS)
    current = chunk_storage.get_info("v/c0").version
    if not chunk_storage.supports_conditional_delete:
        [result] = chunk_storage.delete_many(["v/c0"], versions={"v/c0": checked or "1"})
        assert result.outcome is DeleteOutcome.DELETED and not chunk_storage.exists("v/c0")
        return
    assert checked is not None and current is not None and current != checked
    [result] = chunk_storage.delete_many(["v/c0"], versions={"v/c0": checked})
    assert result.outcome is DeleteOutcome.CHANGED and not result.ok
    assert chunk_storage.read(chunk_storage.open_read("v/c0"), 0, 6) == b"second"
    [result] = chunk_storage.delete_many(["v/c0"], versions={"v/c0": current})
    assert result.outcome is DeleteOutcome.DELETED and not chunk_storage.exists("v/c0")
