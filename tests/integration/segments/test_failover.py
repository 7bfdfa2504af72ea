"""Failover: a higher writer epoch fences a lower one; fenced bytes never become visible."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import FencedError
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.storage.chunks import ChunkHandle, ChunkTags
from reclaim.storage.errors import MetadataConflictError
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import SQLMetadataStore


class _HookedFs(FileSystemChunkStorage):
    """A filesystem binding that runs ``hook`` once, right after the next physical write lands."""

    hook: Callable[[], object] | None = None

    def _fire(self) -> None:
        hook, self.hook = self.hook, None
        if hook is not None:
            hook()

    def write(self, handle: ChunkHandle, offset: int, data: bytes) -> int:
        written = super().write(handle, offset, data)
        self._fire()
        return written

    def create_with_content(self, chunk_name: str, data: bytes, tags: ChunkTags | None = None) -> ChunkHandle:
        handle = super().create_with_content(chunk_name, data, tags)
        self._fire()
        return handle


@pytest.fixture
def hooked(tmp_path: Path, store: SQLMetadataStore,
           sink: RecordingGarbageSink) -> tuple[ChunkedSegmentStorage, _HookedFs]:
    binding = _HookedFs(tmp_path / "hooked", name="fs-tier2")
    return ChunkedSegmentStorage(store, binding, sink, max_rolling_length=64), binding


def _assert_no_shared_chunks(segments: ChunkedSegmentStorage, segment: str) -> None:
    for chunk in segments.layout(segment):
        assert f".E-{chunk.tags.writer_epoch}-O-" in chunk.name


def test_new_epoch_fences_old_writer(segments: ChunkedSegmentStorage) -> None:
    segments.create("s/0")
    old = segments.open_write("s/0", epoch=1)
    segments.write(old, 0, b"epoch-one|")
    new = segments.open_write("s/0", epoch=2)
    with pytest.raises(FencedError) as info:
        segments.write(old, 10, b"zombie")
    assert info.value.epoch == 1 and info.value.owner_epoch == 2
    assert segments.get_info("s/0").length == 10
    segments.write(new, 10, b"epoch-two")
    assert segments.read("s/0", 0, 19) == b"epoch-one|epoch-two"
    chunks = segments.layout("s/0")
    assert [c.tags.writer_epoch for c in chunks] == [1, 1, 2, 2]
    first_new = next(c for c in chunks if c.tags.writer_epoch == 2)
    assert first_new.start_offset == 10, "the new writer never appends to the old writer's chunk"
    _assert_no_shared_chunks(segments, "s/0")
    with pytest.raises(FencedError):
        segments.open_write("s/0", epoch=1)
    fenced_ops = (lambda: segments.seal(old), lambda: segments.truncate(old, 3), lambda: segments.delete(old))
    for fenced_op in fenced_ops:
        with pytest.raises(FencedError):
            fenced_op()
    assert segments.get_info("s/0").length == 19 and not segments.get_info("s/0").sealed


def test_fence_landing_mid_write_hides_the_bytes(hooked: tuple[ChunkedSegmentStorage, _HookedFs],
                                                  sink: RecordingGarbageSink) -> None:
    segments, binding = hooked
    segments.create("s/0")
    old = segments.open_write("s/0", epoch=1)
    segments.write(old, 0, b"committed")
    first_chunk = segments.layout("s/0")[0]
    holder: dict[str, object] = {}
    binding.hook = lambda: holder.setdefault("new", segments.open_write("s/0", epoch=2))
    with pytest.raises(FencedError):
        segments.write(old, 9, b"-zombie-bytes")
    physical = binding.get_info(first_chunk.name).length
    assert physical == len(b"committed-zombie-bytes"), "the old writer did append on tier-2"
    assert segments.get_info("s/0").length == 9
    assert segments.read("s/0", 0, 9) == b"committed"
    new = segments.open_write("s/0", epoch=2)
    segments.write(new, 9, b"+new")
    assert segments.read("s/0", 0, 13) == b"committed+new"
    chunks = segments.layout("s/0")
    assert [c.tags.writer_epoch for c in chunks] == [1, 2]
    assert chunks[0].length == 9, "the layout never counts the zombie's bytes"
    _assert_no_shared_chunks(segments, "s/0")
    assert sink.collected == []


def test_fenced_new_chunk_goes_to_garbage(hooked: tuple[ChunkedSegmentStorage, _HookedFs],
                                          sink: RecordingGarbageSink, store: SQLMetadataStore) -> None:
    segments, binding = hooked
    segments.create("s/0", max_rolling_length=4)
    old = segments.open_write("s/0", epoch=1)
    segments.write(old, 0, b"full")
    binding.hook = lambda: segments.open_write("s/0", epoch=2)
    with pytest.raises(FencedError):
        segments.write(old, 4, b"next")  # rolls over: creates a new epoch-1 chunk, then loses
    assert len(sink.collected) == 1
    orphan = sink.collected[0]
    assert orphan.tags.writer_epoch == 1 and not orphan.active
    assert binding.exists(orphan.name), "its bytes wait for the deletion pipeline"
    assert orphan.name not in {c.name for c in segments.layout("s/0")}
    row = store.get_chunk(orphan.name)
    assert row is not None and not row.active


def test_truncate_racing_a_write_loses_nothing(hooked: tuple[ChunkedSegmentStorage, _HookedFs],
                                               sink: RecordingGarbageSink) -> None:
    segments, binding = hooked
    segments.create("s/0", max_rolling_length=4)
    writer = segments.open_write("s/0", epoch=1)
    segments.write(writer, 0, b"abcd")
    segments.write(writer, 4, b"ef")
    # After the bytes land but before the commit, a truncation drops the chunk being appended to.
    binding.hook = lambda: segments.truncate("s/0", 6)
    with pytest.raises(MetadataConflictError):
        segments.write(writer, 6, b"ghijk")
    assert segments.get_info("s/0").length == 6 and segments.layout("s/0") == []
    names = sink.names()
    assert len(names) == len(set(names)) == 3, "two truncated chunks and one never-committed chunk"
    assert set(binding.iter_names()) == set(names), "every chunk on tier-2 is accounted for"
    segments.write(writer, 6, b"ghijk")
    assert segments.read("s/0", 6, 5) == b"ghijk"
