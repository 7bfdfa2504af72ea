"""Phase 1's batch builder without a server: its records equal those the checked constructors build."""

from __future__ import annotations

import uuid

import pytest

from reclaim.deletion.ownership import LEDGER_TYPES
from reclaim.deletion.records import pending_deletes_for
from reclaim.schemas.codec import SingleObjectCodec
from reclaim.schemas.ledger import ChunkLocation as RecordLocation
from reclaim.schemas.ledger import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo, ledger_id_for
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord

SEGMENT = "scope/stream/0.#epoch.0"
CREATED_AT = 1_700_000_000_000


def chunk(i: int, component: str, *locations: ChunkLocation) -> ChunkRecord:
    tags = ChunkTags(component=component, stream="scope/stream", segment=SEGMENT, writer_epoch=i)
    return ChunkRecord(name=f"{SEGMENT}.E-{i}-O-{i}.{uuid.UUID(int=i).hex}", segment=SEGMENT, start_offset=i,
                       length=1, tags=tags, locations=locations)


def checked(row: ChunkRecord, location: ChunkLocation, mark_id: str) -> PendingDeleteLedgerInfo:
    """The record as the dataclass constructors build it, every check run."""
    context = None
    if location.tier is Tier.TIER2:
        metadata = {"segment": row.segment, "key": location.key, "binding": location.binding}
        if location.bucket is not None:
            metadata["bucket"] = location.bucket
        copy = uuid.uuid5(uuid.NAMESPACE_URL, f"reclaim:{mark_id}:{location.binding}:{location.key}")
        context = OffloadContext.for_uuid(copy, location.binding, metadata)
    return PendingDeleteLedgerInfo(
        topic_name=row.tags.stream, ledger_component=LedgerComponent[row.tags.component.upper()],
        ledger_type=LEDGER_TYPES[location.tier], ledger_id=ledger_id_for(row.name), chunk_name=row.name,
        segment_name=row.segment, storage_binding=location.binding,
        location=RecordLocation(location.key, location.bucket), mark_id=mark_id, created_at=CREATED_AT,
        offload_context=context, owner_epoch=row.tags.writer_epoch)


ROWS = [
    chunk(1, "segment", ChunkLocation("s3-tier2", Tier.TIER2, "bucket", "prefix/a")),
    chunk(2, "cursor", ChunkLocation("fs-tier2", Tier.TIER2, None, "b/ü")),
    chunk(3, "schema", ChunkLocation("fs-tier1", Tier.TIER1, None, "hot/c"),
          ChunkLocation("s3-tier2", Tier.TIER2, "bucket", "cold/c")),
]


def test_a_batch_builds_the_records_the_checked_constructors_build() -> None:
    mark_id = uuid.uuid4().hex
    records = pending_deletes_for(ROWS, mark_id, CREATED_AT)
    expected = [checked(row, location, mark_id) for row in ROWS for location in row.locations]
    assert records == expected
    assert [hash(r) for r in records] == [hash(r) for r in expected]
    assert [r.ledger_type for r in records] == [LedgerType.OFFLOAD_LEDGER, LedgerType.OFFLOAD_LEDGER,
                                                LedgerType.LEDGER, LedgerType.OFFLOAD_LEDGER]
    codec = SingleObjectCodec()
    assert [codec.encode(r) for r in records] == [codec.encode(r) for r in expected]
    assert [codec.decode(codec.encode(r), "", PendingDeleteLedgerInfo) for r in records] == expected


@pytest.mark.parametrize("created_at", [-1, 253_402_300_800_000])
def test_a_batch_refuses_a_creation_time_out_of_range_once_for_all(created_at: int) -> None:
    with pytest.raises(ValueError, match="created_at must be epoch millis"):
        pending_deletes_for(ROWS, "mark", created_at)
