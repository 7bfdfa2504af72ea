"""Phase 1's record builder: one ``PendingDeleteLedgerInfo`` per copy of each chunk, all of one mark."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

from schemas.ledger import ChunkLocation as RecordLocation
from schemas.ledger import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo, ledger_id_for
from storage.chunks import ChunkLocation, Tier
from storage.metadata import ChunkRecord

#: PIP-186's ledger type follows the tier of the copy a record names.
LEDGER_TYPES = {Tier.TIER1: LedgerType.LEDGER, Tier.TIER2: LedgerType.OFFLOAD_LEDGER}


def component_of(tag: str) -> LedgerComponent:
    """The record's component for a chunk's ``component`` tag; unknown tags are segment data."""
    try:
        return LedgerComponent[tag.upper()]
    except KeyError:
        return LedgerComponent.SEGMENT


def _offload_context(chunk: ChunkRecord, location: ChunkLocation, mark_id: str) -> OffloadContext:
    # A stable uuid per (mark, copy), so a re-published record carries the same context.
    copy_id = uuid.uuid5(uuid.NAMESPACE_URL, f"reclaim:{mark_id}:{location.binding}:{location.key}")
    metadata = {"binding": location.binding, "key": location.key, "segment": chunk.segment}
    if location.bucket is not None:
        metadata["bucket"] = location.bucket
    return OffloadContext.for_uuid(copy_id, driver_name=location.binding, metadata=metadata)


def pending_deletes(chunk: ChunkRecord, mark_id: str, created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """The records that delete every copy of ``chunk`` (two when it has a tier-1 and a tier-2 copy)."""
    records = []
    for location in chunk.locations:
        ledger_type = LEDGER_TYPES[location.tier]
        records.append(PendingDeleteLedgerInfo(
            topic_name=chunk.tags.stream,
            ledger_component=component_of(chunk.tags.component),
            ledger_type=ledger_type,
            ledger_id=ledger_id_for(chunk.name),
            chunk_name=chunk.name,
            segment_name=chunk.segment,
            storage_binding=location.binding,
            location=RecordLocation(key=location.key, bucket=location.bucket),
            owner_epoch=chunk.tags.writer_epoch,
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
