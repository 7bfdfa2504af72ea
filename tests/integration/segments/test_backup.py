"""Export a segment's layout to tier-2 and import it into a fresh metadata store (backup and restore)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.segments.backup import LAYOUT_PREFIX, export_layout, import_layout, latest_export
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import LayoutImportError, SegmentExistsError
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.chunks import ChunkHandle, ChunkInfo, ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore


def _segment_with_data(segments: ChunkedSegmentStorage) -> bytes:
    segments.create("scope/str/0")
    writer = segments.open_write("scope/str/0", epoch=3)
    data = b"the quick brown fox jumps over the lazy dog"
    for start in range(0, len(data), 10):
        segments.write(writer, start, data[start:start + 10])
    segments.truncate("scope/str/0", 12)
    return data


def _fresh(tmp_path: Path, binding: ChunkStorage, name: str) -> ChunkedSegmentStorage:
    store = SQLiteMetadataStore(tmp_path / f"{name}.db")
    return ChunkedSegmentStorage(store, binding, RecordingGarbageSink(), max_rolling_length=8)


def test_export_then_import_restores_layout(any_segments: ChunkedSegmentStorage, tmp_path: Path) -> None:
    data = _segment_with_data(any_segments)
    exported = export_layout(any_segments, "scope/str/0")
    assert exported.startswith(f"{LAYOUT_PREFIX}scope/str/0/")
    assert latest_export(any_segments.binding, "scope/str/0") == exported
    restored = _fresh(tmp_path, any_segments.binding, "restored")
    record = import_layout(restored, exported)
    original = any_segments.get_info("scope/str/0")
    assert (record.start_offset, record.length, record.owner_epoch) == (12, len(data), 3)
    assert record.first_chunk == original.first_chunk and record.last_chunk == original.last_chunk
    names = [c.name for c in any_segments.layout("scope/str/0")]
    assert [c.name for c in restored.layout("scope/str/0")] == names
    assert restored.read("scope/str/0", 12, len(data) - 12) == data[12:]
    with pytest.raises(SegmentExistsError):
        import_layout(restored, exported)


def test_import_refuses_missing_chunks(segments: ChunkedSegmentStorage, tmp_path: Path) -> None:
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    victim = segments.layout("scope/str/0")[1]
    segments.binding.delete(ChunkHandle(victim.locations[0].key, read_only=False))
    restored = _fresh(tmp_path, segments.binding, "restored")
    with pytest.raises(LayoutImportError) as info:
        import_layout(restored, exported)
    assert victim.name in str(info.value)
    assert not restored.exists("scope/str/0"), "nothing was imported"


def test_import_refuses_chunks_handed_to_deletion(segments: ChunkedSegmentStorage,
                                                  store: SQLiteMetadataStore) -> None:
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    segments.delete("scope/str/0")
    with pytest.raises(LayoutImportError):
        import_layout(segments, exported)
    assert not segments.exists("scope/str/0")



def _deleted_after_its_check(segments: ChunkedSegmentStorage, monkeypatch: pytest.MonkeyPatch,
                             delete: Callable[[str], None]) -> None:
    """Phase 2 deleting a chunk just after the import looked its object up: the moment is chosen by
    wrapping the binding's lookup, since no real server can be made to delete at an instant."""
    binding = segments.binding
    looked_up = binding.get_info
    done: set[str] = set()

    def get_info(key: str) -> ChunkInfo:
        info = looked_up(key)
        if key not in done and not key.startswith(LAYOUT_PREFIX):
            done.add(key)
            delete(key)
        return info

    monkeypatch.setattr(binding, "get_info", get_info)


def test_import_refuses_chunks_whose_retired_rows_phase_2_removes_meanwhile(
        segments: ChunkedSegmentStorage, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Handed to deletion, then phase 2 deletes each object and removes its retired row right after the
    # import found the object: rows written then would name objects already gone.
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    chain = segments.layout("scope/str/0")
    by_key = {chunk.locations[0].key: chunk.name for chunk in chain}
    segments.delete("scope/str/0")

    def phase_2(key: str) -> None:
        segments.binding.delete(ChunkHandle(key, read_only=False))
        assert store.remove_chunks([by_key[key]]) == [by_key[key]]

    _deleted_after_its_check(segments, monkeypatch, phase_2)
    with pytest.raises(LayoutImportError, match="chunk rows exist already"):
        import_layout(segments, exported)
    assert not segments.exists("scope/str/0")
    assert not any(row.active for row in store.get_chunks(by_key.values()).values()), "no row came back to life"


def test_import_is_undone_when_a_chunk_with_no_row_is_deleted_meanwhile(
        segments: ChunkedSegmentStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A fresh store has no row for any chunk: phase 2 may delete one whose object's tags answer for a
    # pending delete. The import looks again after its commit and takes itself back.
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    chain = segments.layout("scope/str/0")
    victim = chain[1].locations[0].key
    restored = _fresh(tmp_path, segments.binding, "restored")

    def phase_2(key: str) -> None:
        if key == victim:
            segments.binding.delete(ChunkHandle(key, read_only=False))

    _deleted_after_its_check(segments, monkeypatch, phase_2)
    with pytest.raises(LayoutImportError, match="deleted while the layout was imported.*undone") as info:
        import_layout(restored, exported)
    assert chain[1].name in str(info.value)
    assert not restored.exists("scope/str/0"), "the segment was taken back"
    assert restored.store.get_chunks(c.name for c in chain) == {}, "no row names a chunk, gone or not"


def test_import_over_a_deleted_segment_undone_leaves_it_deleted(
        segments: ChunkedSegmentStorage, store: SQLiteMetadataStore, monkeypatch: pytest.MonkeyPatch) -> None:
    # Deleted, its retired rows removed, its objects not (yet) deleted: the import replaces the deleted
    # segment's header; undone, the header is the deleted one again and no chunk has a row.
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    chain = segments.layout("scope/str/0")
    segments.delete("scope/str/0")
    assert set(store.remove_chunks(c.name for c in chain)) == {c.name for c in chain}
    before = store.get_segment("scope/str/0")
    assert before is not None and before.deleted
    victim = chain[-1].locations[0].key

    def phase_2(key: str) -> None:
        if key == victim:
            segments.binding.delete(ChunkHandle(key, read_only=False))

    _deleted_after_its_check(segments, monkeypatch, phase_2)
    with pytest.raises(LayoutImportError, match="undone"):
        import_layout(segments, exported)
    after = store.get_segment("scope/str/0")
    assert after is not None and after.deleted and after.length == before.length
    assert store.get_chunks(c.name for c in chain) == {}


def test_import_refuses_garbage(segments: ChunkedSegmentStorage) -> None:
    segments.binding.create_with_content(f"{LAYOUT_PREFIX}bad/1.json", b"{not json", None)
    with pytest.raises(LayoutImportError):
        import_layout(segments, f"{LAYOUT_PREFIX}bad/1.json")
    assert latest_export(segments.binding, "nothing") is None


def test_import_refuses_a_max_rolling_length_that_is_not_positive(segments: ChunkedSegmentStorage,
                                                                  tmp_path: Path) -> None:
    # A restored segment's writes split at its max rolling length (PDP-34): a non-positive one
    # would make every write create empty chunks without end, so such a layout is not imported.
    _segment_with_data(segments)
    exported = export_layout(segments, "scope/str/0")
    raw = segments.binding.read(segments.binding.open_read(exported), 0, segments.binding.get_info(exported).length)
    doc = json.loads(raw)
    doc["segment"]["max_rolling_length"] = 0
    edited = f"{LAYOUT_PREFIX}scope/str/0/edited.json"
    segments.binding.create_with_content(edited, json.dumps(doc).encode(), None)
    restored = _fresh(tmp_path, segments.binding, "restored")
    with pytest.raises(LayoutImportError, match="max_rolling_length"):
        import_layout(restored, edited)
    assert not restored.exists("scope/str/0"), "nothing was imported"
