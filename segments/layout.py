"""Pure layout arithmetic for chunked segments: chunk names, chain checks, truncate/concat/read planning."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from reclaim.segments.errors import (
    BadOffsetError,
    InvalidSegmentNameError,
    SegmentNotSealedError,
    SegmentSealedError,
)
from reclaim.storage.chunks import OFFLOAD_PREFIX, validate_chunk_name
from reclaim.storage.errors import InvalidChunkNameError
from reclaim.storage.metadata import ChunkRecord, SegmentRecord

#: Room left in a 1024-byte chunk name for ``.E-<epoch>-O-<offset>.<uuid>``.
CHUNK_SUFFIX_BYTES = 96
MAX_SEGMENT_NAME_BYTES = 1024 - CHUNK_SUFFIX_BYTES
#: The suffix lands in the name's last path component, which S3 servers cap at 255 bytes.
MAX_LAST_COMPONENT_BYTES = 255 - CHUNK_SUFFIX_BYTES


def validate_segment_name(name: str) -> str:
    """Return ``name`` if chunk names can be built from it, else raise :class:`InvalidSegmentNameError`."""
    try:
        validate_chunk_name(name)
    except InvalidChunkNameError as exc:
        raise InvalidSegmentNameError(str(exc), segment=repr(name)) from exc
    if name.startswith(OFFLOAD_PREFIX):
        raise InvalidSegmentNameError(f"names under {OFFLOAD_PREFIX} are offloaded copies'", segment=name[:64])
    if len(name.encode("utf-8")) > MAX_SEGMENT_NAME_BYTES:
        raise InvalidSegmentNameError(f"longer than {MAX_SEGMENT_NAME_BYTES} bytes", segment=name[:64])
    if len(name.rpartition("/")[2].encode("utf-8")) > MAX_LAST_COMPONENT_BYTES:
        raise InvalidSegmentNameError(f"last path component longer than {MAX_LAST_COMPONENT_BYTES} bytes",
                                      segment=name[:64])
    return name


def new_chunk_name(segment: str, epoch: int, offset: int) -> str:
    """A globally unique, never reused chunk name: ``<segment>.E-<epoch>-O-<offset>.<uuid>``."""
    return f"{segment}.E-{epoch}-O-{offset}.{uuid.uuid4().hex}"


def default_stream(segment: str) -> str:
    """The stream of a qualified segment name ``scope/stream/segment`` (the name itself if unqualified)."""
    return segment.rpartition("/")[0] or segment


def layout_consistent(segment: SegmentRecord, chain: Sequence[ChunkRecord]) -> bool:
    """True when ``chain`` is exactly the contiguous chunk list the segment header describes."""
    if not chain:
        return segment.first_chunk is None and segment.last_chunk is None
    if chain[0].name != segment.first_chunk or chain[-1].name != segment.last_chunk:
        return False
    if chain[0].start_offset != segment.first_chunk_start_offset or chain[-1].end_offset != segment.length:
        return False
    return all(prev.end_offset == nxt.start_offset for prev, nxt in zip(chain, chain[1:], strict=False))


def split_for_truncate(chain: Sequence[ChunkRecord],
                       offset: int) -> tuple[list[ChunkRecord], list[ChunkRecord]]:
    """Split the chain into chunks wholly below ``offset`` (leaving the layout) and the rest."""
    dropped = [chunk for chunk in chain if chunk.end_offset <= offset]
    return dropped, list(chain[len(dropped):])


def truncated_header(segment: SegmentRecord, kept: Sequence[ChunkRecord], offset: int) -> SegmentRecord:
    """The segment header after truncating at ``offset`` with ``kept`` chunks left."""
    if kept:
        return replace(segment, start_offset=offset, first_chunk=kept[0].name,
                       first_chunk_start_offset=kept[0].start_offset)
    return replace(segment, start_offset=offset, first_chunk=None, last_chunk=None,
                   first_chunk_start_offset=offset, last_chunk_start_offset=offset)


def appended_header(segment: SegmentRecord, last: ChunkRecord, first_new: ChunkRecord | None,
                    added: int) -> SegmentRecord:
    """The header after ``added`` bytes ending in chunk ``last``; ``first_new`` is the first new chunk."""
    header = replace(segment, length=segment.length + added, last_chunk=last.name,
                     last_chunk_start_offset=last.start_offset)
    if segment.first_chunk is None and first_new is not None:
        header = replace(header, first_chunk=first_new.name, first_chunk_start_offset=first_new.start_offset)
    return header


def linked(chunks: Sequence[ChunkRecord]) -> list[ChunkRecord]:
    """``chunks`` with each ``next_chunk`` pointing at its successor (the last keeps its own)."""
    return [replace(chunk, next_chunk=nxt.name) for chunk, nxt in zip(chunks, chunks[1:], strict=False)] + (
        [chunks[-1]] if chunks else [])


def moved_for_concat(source_chain: Sequence[ChunkRecord], target: str, shift: int) -> list[ChunkRecord]:
    """The source's chunk records re-owned by ``target`` and shifted past the target's end."""
    return [replace(chunk, segment=target, start_offset=chunk.start_offset + shift) for chunk in source_chain]


def check_concat(target: SegmentRecord, source: SegmentRecord, offset: int | None) -> None:
    """Raise the typed error that forbids concatenating ``source`` onto ``target`` at ``offset``, if any."""
    if target.name == source.name:
        raise BadOffsetError("cannot concat a segment onto itself", segment=target.name)
    if target.sealed:
        raise SegmentSealedError("concat target is sealed", segment=target.name)
    if not source.sealed:
        raise SegmentNotSealedError("concat source must be sealed", segment=source.name)
    if offset is not None and offset != target.length:
        raise BadOffsetError(f"concat offset {offset} is not target length {target.length}",
                             segment=target.name)
    if source.start_offset != 0:
        raise BadOffsetError("a truncated segment cannot be a concat source", segment=source.name)


def concatenated_header(target: SegmentRecord, source: SegmentRecord,
                        moved: Sequence[ChunkRecord]) -> SegmentRecord:
    """The target header after linking ``moved`` (the source's chunks) after its own."""
    header = replace(target, length=target.length + source.length)
    if not moved:
        return header
    header = replace(header, last_chunk=moved[-1].name, last_chunk_start_offset=moved[-1].start_offset)
    if target.first_chunk is None:
        header = replace(header, first_chunk=moved[0].name, first_chunk_start_offset=moved[0].start_offset)
    return header


@dataclass(frozen=True)
class ReadSlice:
    """Read ``length`` bytes of ``chunk`` from chunk-relative ``offset``."""

    chunk: ChunkRecord
    offset: int
    length: int


def plan_read(chain: Sequence[ChunkRecord], offset: int, length: int) -> list[ReadSlice]:
    """The chunk slices that together hold segment bytes ``[offset, offset + length)``."""
    end = offset + length
    slices: list[ReadSlice] = []
    for chunk in chain:
        lo, hi = max(offset, chunk.start_offset), min(end, chunk.end_offset)
        if lo < hi:
            slices.append(ReadSlice(chunk, lo - chunk.start_offset, hi - lo))
    return slices
