"""Phase 1's record builder: one ``PendingDeleteLedgerInfo`` per copy of each chunk, all of one mark."""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Iterable
from typing import Any

from reclaim.deletion.ownership import LEDGER_TYPE_OF_TIER_NAME, component_of
from reclaim.schemas.base import check_millis
from reclaim.schemas.ledger import ChunkLocation as RecordLocation
from reclaim.schemas.ledger import LedgerType, OffloadContext, PendingDeleteLedgerInfo, ledger_id_for
from reclaim.storage.chunks import ChunkLocation
from reclaim.storage.metadata import ChunkRecord

_UUID5_NAMESPACE = uuid.NAMESPACE_URL.bytes
# uuid5's version (5) and RFC 4122 variant bits, set over the first 16 bytes of a SHA-1 digest.
_UUID5_CLEAR = ~((0xF000 << 64) | (0xC000 << 48))
_UUID5_SET = (0x5000 << 64) | (0x8000 << 48)


def _uuid_prefix(mark_id: str) -> Any:
    """SHA-1 state after the common prefix of one mark's copy uuids; each copy adds "<binding>:<key>"."""
    return hashlib.sha1(_UUID5_NAMESPACE + f"reclaim:{mark_id}:".encode(), usedforsecurity=False)


def _copy_uuid_after(prefix: Any, location: ChunkLocation) -> int:
    hasher = prefix.copy()
    hasher.update(f"{location.binding}:{location.key}".encode())
    return (int.from_bytes(hasher.digest()[:16], "big") & _UUID5_CLEAR) | _UUID5_SET


#: A SHA-1 digest's first 16 bytes as two big-endian signed longs, the halves Java keeps of a uuid.
_UUID_HALVES = struct.Struct(">qq").unpack_from
#: uuid5's version nibble in the high half: cleared, then 5.
_VERSION_CLEAR, _VERSION_SET = ~0xF000, 0x5000
#: The low half with the RFC 4122 variant (top bits 10): its low 62 bits, less 2**63 as a signed long.
_VARIANT_BITS, _VARIANT_SIGNED = 2**62 - 1, 2**63


def _copy_uuid_halves(prefix: Any, location: ChunkLocation) -> tuple[int, int]:
    """``_copy_uuid_after`` as Java's signed (msb, lsb), read off the digest as two longs: no 128-bit int."""
    hasher = prefix.copy()
    hasher.update(f"{location.binding}:{location.key}".encode())
    msb, lsb = _UUID_HALVES(hasher.digest())
    return (msb & _VERSION_CLEAR) | _VERSION_SET, (lsb & _VARIANT_BITS) - _VARIANT_SIGNED


def copy_uuid(mark_id: str, location: ChunkLocation) -> int:
    """``uuid5(NAMESPACE_URL, "reclaim:<mark>:<binding>:<key>")`` as an int: stable per (mark, copy).

    Computed from SHA-1 directly (the same value ``uuid.uuid5`` gives, without its objects), because
    phase 1 makes one per tier-2 copy.
    """
    return _copy_uuid_after(_uuid_prefix(mark_id), location)


class _MarkBatch:
    """Builds the records of one mark: what they share is worked out, and ``created_at`` checked, once.

    The chunk rows come from the metadata store, which checked them; the records are built with
    ``from_checked`` (no per-record ``__post_init__``) and are equal to those the constructors give.
    """

    def __init__(self, mark_id: str, created_at_ms: int) -> None:
        check_millis("created_at", created_at_ms)
        self._mark_id = mark_id
        self._created_at = created_at_ms
        self._uuid_prefix = _uuid_prefix(mark_id)

    def _offload_context(self, chunk: ChunkRecord, location: ChunkLocation) -> OffloadContext:
        # A stable uuid per (mark, copy), so a re-published record carries the same context.
        msb, lsb = _copy_uuid_halves(self._uuid_prefix, location)
        # Key-sorted, as OffloadContext keeps them: binding < bucket < key < segment.
        metadata = ((("binding", location.binding), ("key", location.key), ("segment", chunk.segment))
                    if location.bucket is None else
                    (("binding", location.binding), ("bucket", location.bucket), ("key", location.key),
                     ("segment", chunk.segment)))
        return OffloadContext.from_checked({"uuid_msb": msb, "uuid_lsb": lsb,
                                            "driver_name": location.binding, "metadata": metadata})

    def records(self, chunk: ChunkRecord) -> list[PendingDeleteLedgerInfo]:
        """The records that delete every copy of ``chunk``, in the order of its locations."""
        tags = chunk.tags
        component = component_of(tags.component)
        ledger_id = ledger_id_for(chunk.name)
        records = []
        for location in chunk.locations:
            ledger_type = LEDGER_TYPE_OF_TIER_NAME[location.tier._name_]
            records.append(PendingDeleteLedgerInfo.from_checked({
                "topic_name": tags.stream,
                "ledger_component": component,
                "ledger_type": ledger_type,
                "ledger_id": ledger_id,
                "chunk_name": chunk.name,
                "segment_name": chunk.segment,
                "storage_binding": location.binding,
                "location": RecordLocation.from_checked({"key": location.key, "bucket": location.bucket}),
                "mark_id": self._mark_id,
                "created_at": self._created_at,
                "cursor_name": None,
                "schema_id": None,
                "offload_context": (self._offload_context(chunk, location)
                                    if ledger_type is LedgerType.OFFLOAD_LEDGER else None),
                "owner_epoch": tags.writer_epoch,
            }))
        return records


def pending_deletes(chunk: ChunkRecord, mark_id: str, created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """The records that delete every copy of ``chunk`` (two when it has a tier-1 and a tier-2 copy)."""
    return _MarkBatch(mark_id, created_at_ms).records(chunk)


def pending_deletes_for(chunks: Iterable[ChunkRecord], mark_id: str,
                        created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """All records of one mark batch, in chunk order."""
    batch = _MarkBatch(mark_id, created_at_ms)
    return [record for chunk in chunks for record in batch.records(chunk)]
