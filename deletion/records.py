"""Phase 1's record builder: one ``PendingDeleteLedgerInfo`` per copy of each chunk, all of one mark."""

from __future__ import annotations

import functools
import hashlib
import uuid
from collections.abc import Iterable

from deletion.ownership import LEDGER_TYPES, component_of
from schemas.ledger import ChunkLocation as RecordLocation
from schemas.ledger import LedgerType, OffloadContext, PendingDeleteLedgerInfo, ledger_id_for
from storage.chunks import ChunkLocation
from storage.metadata import ChunkRecord

_UUID5_NAMESPACE = uuid.NAMESPACE_URL.bytes
_LONG_MASK = 2**64 - 1
# uuid5's version (5) and RFC 4122 variant bits, set over the first 16 bytes of a SHA-1 digest.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (0x5000 << 64) | (0x8000 << 48)


#: ``component_of`` once per distinct tag: the chunks of a batch share a handful.
_component = functools.lru_cache(maxsize=64)(component_of)


def copy_uuid(mark_id: str, location: ChunkLocation) -> int:
    """``uuid5(NAMESPACE_URL, "reclaim:<mark>:<binding>:<key>")`` as an int: stable per (mark, copy).

    Computed from SHA-1 directly (the same value ``uuid.uuid5`` gives, without its objects), because
    phase 1 makes one per tier-2 copy.
    """
    name = f"reclaim:{mark_id}:{location.binding}:{location.key}".encode()
    digest = hashlib.sha1(_UUID5_NAMESPACE + name, usedforsecurity=False).digest()
    return (int.from_bytes(digest[:16], "big") & _UUID5_CLEAR) | _UUID5_SET


def _signed(half: int) -> int:
    """Two's-complement view of a 64-bit half, as Java stores a uuid's halves."""
    return half - (1 << 64) if half >> 63 else half


def _offload_context(chunk: ChunkRecord, location: ChunkLocation, mark_id: str) -> OffloadContext:
    # A stable uuid per (mark, copy), so a re-published record carries the same context.
    copy_id = copy_uuid(mark_id, location)
    metadata = [("binding", location.binding), ("key", location.key), ("segment", chunk.segment)]
    if location.bucket is not None:
        metadata.insert(1, ("bucket", location.bucket))
    return OffloadContext(_signed(copy_id >> 64), _signed(copy_id & _LONG_MASK), location.binding, tuple(metadata))


def pending_deletes(chunk: ChunkRecord, mark_id: str, created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """The records that delete every copy of ``chunk`` (two when it has a tier-1 and a tier-2 copy)."""
    records = []
    tags = chunk.tags
    component = _component(tags.component)
    ledger_id = ledger_id_for(chunk.name)
    for location in chunk.locations:
        ledger_type = LEDGER_TYPES[location.tier]
        records.append(PendingDeleteLedgerInfo(
            topic_name=tags.stream,
            ledger_component=component,
            ledger_type=ledger_type,
            ledger_id=ledger_id,
            chunk_name=chunk.name,
            segment_name=chunk.segment,
            storage_binding=location.binding,
            location=RecordLocation(location.key, location.bucket),
            owner_epoch=tags.writer_epoch,
            mark_id=mark_id,
            created_at=created_at_ms,
            offload_context=(_offload_context(chunk, location, mark_id)
                             if ledger_type is LedgerType.OFFLOAD_LEDGER else None),
        ))
    return records


def pending_deletes_for(chunks: Iterable[ChunkRecord], mark_id: str,
                        created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """All records of one mark batch, in chunk order."""
    return [record for chunk in chunks for record in pending_deletes(chunk, mark_id, created_at_ms)]
