"""Export and import of a segment's layout to and from a tier-2 object (PDP-34 backup and restore)."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.errors import LayoutImportError, SegmentExistsError
from reclaim.segments.layout import layout_consistent
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.chunks import ChunkLocation, ChunkStorage, ChunkTags, Tier
from reclaim.storage.errors import MetadataError, StorageError
from reclaim.storage.metadata import ChunkRecord, SegmentRecord, SegmentStatus

logger = logging.getLogger(__name__)

LAYOUT_FORMAT = "reclaim.segment-layout"
LAYOUT_VERSION = 1
#: Exports live under their own prefix so an orphan audit can tell them from chunks.
LAYOUT_PREFIX = "_reclaim_layouts/"
EXPORT_COMPONENT = "layout-export"

_SEGMENT_FIELDS = ("name", "stream", "start_offset", "length", "first_chunk", "last_chunk",
                   "max_rolling_length", "owner_epoch", "last_chunk_start_offset", "first_chunk_start_offset")


def layout_document(record: SegmentRecord, chain: Sequence[ChunkRecord]) -> dict[str, Any]:
    """The JSON-ready export of a segment header and its chunk list (versions are not exported)."""
    segment = {name: getattr(record, name) for name in _SEGMENT_FIELDS} | {"status": int(record.status)}
    chunks = [{
        "name": c.name, "segment": c.segment, "start_offset": c.start_offset, "length": c.length,
        "next_chunk": c.next_chunk, "tags": c.tags.to_dict(),
        "locations": [{"binding": loc.binding, "tier": loc.tier.value, "bucket": loc.bucket, "key": loc.key}
                      | ({} if loc.copy is None else {"copy": loc.copy}) for loc in c.locations],
    } for c in chain]
    return {"format": LAYOUT_FORMAT, "version": LAYOUT_VERSION, "segment": segment, "chunks": chunks}


def _chunk_from_doc(raw: dict[str, Any]) -> ChunkRecord:
    tags = ChunkTags.from_dict(raw["tags"])
    if tags is None:
        raise ValueError(f"chunk {raw.get('name')!r} has malformed tags")
    locations = tuple(ChunkLocation(loc["binding"], Tier(loc["tier"]), loc["bucket"], loc["key"], loc.get("copy"))
                      for loc in raw["locations"])
    return ChunkRecord(name=raw["name"], segment=raw["segment"], start_offset=int(raw["start_offset"]),
                       length=int(raw["length"]), tags=tags, locations=locations,
                       next_chunk=raw["next_chunk"])


def parse_layout(raw: bytes, object_name: str) -> tuple[SegmentRecord, list[ChunkRecord]]:
    """Parse an exported layout; :class:`LayoutImportError` when it is not one this code can read."""
    try:
        doc = json.loads(raw)
        if doc.get("format") != LAYOUT_FORMAT or doc.get("version") != LAYOUT_VERSION:
            raise ValueError(f"not a {LAYOUT_FORMAT} v{LAYOUT_VERSION} document")
        seg = doc["segment"]
        record = SegmentRecord(**{name: seg[name] for name in _SEGMENT_FIELDS},
                               status=SegmentStatus(int(seg["status"])) & ~SegmentStatus.DELETED)
        if not isinstance(record.max_rolling_length, int) or record.max_rolling_length <= 0:
            raise ValueError(f"max_rolling_length {record.max_rolling_length!r} is not a positive integer")
        chain = [_chunk_from_doc(chunk) for chunk in doc["chunks"]]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise LayoutImportError(f"malformed layout object {object_name!r}: {exc}", segment="?") from exc
    return record, chain


def export_layout(storage: ChunkedSegmentStorage, segment: str, *, target: ChunkStorage | None = None) -> str:
    """Write a snapshot of ``segment``'s layout to tier-2 (``target`` or the storage's binding).

    Returns the object name, ``_reclaim_layouts/<segment>/<millis>-<id>.json``.
    """
    binding = target or storage.binding
    record, chain = storage.snapshot(segment)
    name = f"{LAYOUT_PREFIX}{segment}/{int(time.time() * 1000):013d}-{uuid.uuid4().hex[:8]}.json"
    tags = ChunkTags(component=EXPORT_COMPONENT, stream=record.stream, segment=segment,
                     writer_epoch=record.owner_epoch)
    body = json.dumps(layout_document(record, chain), sort_keys=True).encode()
    binding.create_with_content(name, body, tags)
    logger.info("segment layout exported segment=%s object=%s chunks=%d", segment, name, len(chain))
    return name


def latest_export(binding: ChunkStorage, segment: str) -> str | None:
    """The newest layout export of ``segment`` in ``binding``, if any."""
    names = list(binding.iter_names(f"{LAYOUT_PREFIX}{segment}/"))
    return max(names) if names else None


def missing_chunks(bindings: StorageBindings, chain: Sequence[ChunkRecord]) -> list[str]:
    """Names of chunks some location of which is absent or shorter than the layout says."""
    missing: list[str] = []
    for chunk in chain:
        for location in chunk.locations:
            try:
                present = bindings.for_location(location).get_info(location.key).length >= chunk.length
            except StorageError:
                present = False
            if not present:
                missing.append(chunk.name)
                break
    return missing


def _read_object(binding: ChunkStorage, object_name: str) -> bytes:
    info = binding.get_info(object_name)
    return binding.read(binding.open_read(object_name), 0, info.length)


def import_layout(storage: ChunkedSegmentStorage, object_name: str, *,
                  source: ChunkStorage | None = None) -> SegmentRecord:
    """Restore a segment from an exported layout, refusing one whose chunks are missing.

    Also refused: a live segment of that name, or any of its chunk rows already in the store
    (an inactive row means the chunk was handed to deletion and must not come back to life).

    Phase 2 may be deleting some of these chunks while the import runs, so no row is written for an
    object already gone. The rows are read before the objects are looked up, and again in the
    transaction: phase 2 removes a retired row only after deleting its object, so a chunk it deletes in
    between had a row at the first read and is refused there. A chunk with no row at all can be deleted
    by a pending delete whose record its object's tags answer for (phase 2's check without a row): the
    objects are looked up again after the commit, and if one is gone the import is undone (the segment
    as it was, no chunk row) and refused. A delete already past its checks when the transaction commits
    (phase 2's request in flight) can still land after that second look: the audit reports such a
    chunk as missing.
    """
    record, chain = parse_layout(_read_object(source or storage.binding, object_name), object_name)
    if not layout_consistent(record, chain):
        raise LayoutImportError("exported chunk list does not match its header", segment=record.name)
    names = [chunk.name for chunk in chain]
    _refuse_live(storage.store.get_segment(record.name))
    _refuse_rows(storage.store.get_chunks(names), record.name)
    _refuse_missing(storage.bindings, chain, record.name)
    with storage.store.transaction() as txn:
        existing = _refuse_live(txn.get_segment(record.name))
        _refuse_rows(txn.get_chunks(names), record.name)
        written = [txn.put_chunk(replace(chunk, active=True, mark_id=None, version=0)) for chunk in chain]
        stored = txn.put_segment(replace(record, version=existing.version if existing else 0))
    gone = missing_chunks(storage.bindings, chain)
    if gone:
        undone = _undo_import(storage, stored, existing, written)
        raise LayoutImportError(
            f"{len(gone)} chunks deleted while the layout was imported: {gone[:5]}; "
            + ("the import was undone" if undone else
               "the segment changed since and was left as it is (reclaim audit reports its missing chunks)"),
            segment=record.name)
    logger.info("segment layout imported segment=%s object=%s chunks=%d", record.name, object_name,
                len(chain))
    return stored


def _refuse_live(segment: SegmentRecord | None) -> SegmentRecord | None:
    if segment is not None and not segment.deleted:
        raise SegmentExistsError("cannot import over a live segment", segment=segment.name)
    return segment


def _refuse_rows(rows: dict[str, ChunkRecord], segment: str) -> None:
    if rows:
        raise LayoutImportError(f"chunk rows exist already: {sorted(rows)[:5]}", segment=segment)


def _refuse_missing(bindings: StorageBindings, chain: Sequence[ChunkRecord], segment: str) -> None:
    missing = missing_chunks(bindings, chain)
    if missing:
        raise LayoutImportError(f"{len(missing)} chunks missing from storage: {missing[:5]}", segment=segment)


def _undo_import(storage: ChunkedSegmentStorage, stored: SegmentRecord, replaced: SegmentRecord | None,
                 written: Sequence[ChunkRecord]) -> bool:
    """Take an import back: its segment as it was before (none, or the deleted one it replaced) and no
    row of its chunks, provided nothing changed them since (False: they are left as they are)."""
    try:
        with storage.store.transaction() as txn:
            if replaced is None:
                txn.delete_segment(stored.name, expected_version=stored.version)
            else:
                txn.put_segment(replace(replaced, version=stored.version))
            for row in written:
                txn.put_chunk(replace(row, active=False))
            txn.remove_chunks(row.name for row in written)
    except MetadataError as exc:
        logger.error("segment layout import not undone segment=%s: %s", stored.name, exc)
        return False
    return True
