"""Phase 1's record builder: one ``PendingDeleteLedgerInfo`` per copy of each chunk, all of one mark."""

from __future__ import annotations

import dataclasses
import hashlib
import operator
import secrets
import struct
import uuid
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

from reclaim.deletion.ownership import LEDGER_TYPE_OF_TIER_NAME, component_of
from reclaim.deletion.shapes import CHUNK_NAME, KEY, LEDGER_ID, UUID_LSB, UUID_MSB, holes_in, marker_long, string_bytes
from reclaim.schemas.base import check_millis
from reclaim.schemas.codec import RecordCodec, zigzag_varint
from reclaim.schemas.errors import RecordEncodeError
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
    """``_copy_uuid_after`` as Java's signed (msb, lsb), read off the digest as two longs: no 128-bit int.

    An offloaded copy has a uuid of its own (its object's name holds it): that one, as two signed longs."""
    if location.copy is not None:
        return _UUID_HALVES(bytes.fromhex(location.copy))
    hasher = prefix.copy()
    hasher.update(f"{location.binding}:{location.key}".encode())
    msb, lsb = _UUID_HALVES(hasher.digest())
    return (msb & _VERSION_CLEAR) | _VERSION_SET, (lsb & _VARIANT_BITS) - _VARIANT_SIGNED


def copy_uuid(mark_id: str, location: ChunkLocation) -> int:
    """``uuid5(NAMESPACE_URL, "reclaim:<mark>:<binding>:<key>")`` as an int: stable per (mark, copy).

    Computed from SHA-1 directly (the same value ``uuid.uuid5`` gives, without its objects), because
    phase 1 makes one per tier-2 copy. An offloaded copy's is its own uuid.
    """
    if location.copy is not None:
        return int(location.copy, 16)
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
        return [self.record(chunk, location) for location in chunk.locations]

    def record(self, chunk: ChunkRecord, location: ChunkLocation) -> PendingDeleteLedgerInfo:
        """The record that deletes the copy of ``chunk`` at ``location``."""
        tags = chunk.tags
        ledger_type = LEDGER_TYPE_OF_TIER_NAME[location.tier._name_]
        return PendingDeleteLedgerInfo.from_checked({
            "topic_name": tags.stream,
            "ledger_component": component_of(tags.component),
            "ledger_type": ledger_type,
            "ledger_id": ledger_id_for(chunk.name),
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
        })

    def copy_uuid(self, location: ChunkLocation) -> tuple[int, int]:
        """The (msb, lsb) of the copy's uuid, as its offload context holds them."""
        return _copy_uuid_halves(self._uuid_prefix, location)


def pending_deletes(chunk: ChunkRecord, mark_id: str, created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """The records that delete every copy of ``chunk`` (two when it has a tier-1 and a tier-2 copy)."""
    return _MarkBatch(mark_id, created_at_ms).records(chunk)


def pending_deletes_for(chunks: Iterable[ChunkRecord], mark_id: str,
                        created_at_ms: int) -> list[PendingDeleteLedgerInfo]:
    """All records of one mark batch, in chunk order."""
    batch = _MarkBatch(mark_id, created_at_ms)
    return [record for chunk in chunks for record in batch.records(chunk)]


class MarkRecords(Sequence[PendingDeleteLedgerInfo]):
    """The records of one mark, one per copy of each chunk in chunk order, as a sequence built on reading.

    Phase 1 sends them without building them: :meth:`encoded` writes each record's bytes from a template
    of its shape (what a segment's copies in one binding share: everything but the chunk name, the key,
    the ledger id and the copy's uuid), which is made once per shape by the codec itself and checked
    against the codec's own bytes for the first record of that shape. Only the records a caller reads (a
    publish that failed, say) are ever built.
    """

    def __init__(self, chunks: Iterable[ChunkRecord], mark_id: str, created_at_ms: int) -> None:
        self._batch = _MarkBatch(mark_id, created_at_ms)
        self._copies = [(chunk, location) for chunk in chunks for location in chunk.locations]

    def __len__(self) -> int:
        return len(self._copies)

    @overload
    def __getitem__(self, index: int) -> PendingDeleteLedgerInfo: ...

    @overload
    def __getitem__(self, index: slice) -> list[PendingDeleteLedgerInfo]: ...

    def __getitem__(self, index: int | slice) -> PendingDeleteLedgerInfo | list[PendingDeleteLedgerInfo]:
        if isinstance(index, slice):
            return [self._batch.record(chunk, location) for chunk, location in self._copies[index]]
        chunk, location = self._copies[index]
        return self._batch.record(chunk, location)

    def __iter__(self) -> Iterator[PendingDeleteLedgerInfo]:
        return (self._batch.record(chunk, location) for chunk, location in self._copies)

    def chunk_names(self) -> list[str]:
        """Each record's chunk name, in order (the key it is sent under)."""
        return [chunk.name for chunk, _ in self._copies]

    def ledger_types(self) -> list[LedgerType]:
        """Each record's ledger type, in order."""
        return [LEDGER_TYPE_OF_TIER_NAME[location.tier._name_] for _, location in self._copies]

    def encoded(self, codec: RecordCodec, topic: str) -> list[bytes]:
        """``codec.encode_all(self, topic)``, the same bytes, written from each shape's template."""
        templates: dict[tuple[int, str, str, str | None, str], _Template | None] = {}
        values: list[bytes] = []
        batch = self._batch
        shape: tuple[int, str, str, str | None, str] | None = None
        template: _Template | None = None
        for chunk, location in self._copies:
            # A segment's copies come one after the other: its shape is looked up once for all of them.
            copy_shape = (id(chunk.tags), chunk.segment, location.binding, location.bucket, location.tier._name_)
            if copy_shape != shape:
                shape = copy_shape
                template = templates.get(shape, _UNSEEN)
                if template is _UNSEEN:
                    template = templates[shape] = _Template.of(batch, chunk, location, codec, topic)
            if template is None:  # a shape the codec writes otherwise: each record through the codec
                values += codec.encode_all([batch.record(chunk, location)], topic)
            else:
                values.append(template.render(batch, chunk, location))
        return values


def mark_records(chunks: Iterable[ChunkRecord], mark_id: str, created_at_ms: int) -> MarkRecords:
    """All records of one mark batch, in chunk order, built only when read (see :class:`MarkRecords`)."""
    return MarkRecords(chunks, mark_id, created_at_ms)


_UNSEEN: Any = object()


class _Template:
    """The bytes of one shape's records with holes for what differs between them.

    ``constants`` are the bytes around the holes (one more than there are holes); ``pick`` takes the
    holes' values, in the order the holes come, from the values given in ``LEDGER_ID`` .. ``KEY`` order.
    """

    def __init__(self, constants: tuple[bytes, ...], holes: tuple[int, ...], with_uuid: bool) -> None:
        # The record's pieces in order, the holes' places empty (every other one): filled by one slice
        # assignment a record.
        self._pieces: list[bytes] = [piece for constant in constants[:-1] for piece in (constant, b"")]
        self._pieces.append(constants[-1])
        self._pick = operator.itemgetter(*holes) if len(holes) > 1 else (lambda values: (values[holes[0]],))
        self._with_uuid = with_uuid

    @classmethod
    def of(cls, batch: _MarkBatch, chunk: ChunkRecord, location: ChunkLocation, codec: RecordCodec,
           topic: str) -> _Template | None:
        """The template of the shape of ``chunk``'s copy at ``location``, or None when the codec's bytes for a
        probe of it (its varying fields set to values that occur nowhere else) do not make one that writes
        this very record as the codec does."""
        real = batch.record(chunk, location)
        probe, marks = _probe(batch, chunk, location)
        try:
            probe_bytes, real_bytes = codec.encode_all([probe, real], topic)
        except RecordEncodeError:
            return None  # the records go through the codec one by one, which says what is wrong
        shape = holes_in(probe_bytes, marks)
        if shape is None:
            return None  # two marks overlap, or none was found: no template
        constants, holes = shape
        template = cls(constants, holes, any(which in (UUID_MSB, UUID_LSB) for which in holes))
        return template if template.render(batch, chunk, location) == real_bytes else None

    def render(self, batch: _MarkBatch, chunk: ChunkRecord, location: ChunkLocation) -> bytes:
        """The bytes of the record of ``chunk``'s copy at ``location``."""
        name = chunk.name.encode()
        ledger_id = ledger_id_for(chunk.name)
        msb, lsb = batch.copy_uuid(location) if self._with_uuid else (0, 0)
        values = (zigzag_varint(ledger_id), zigzag_varint(msb), zigzag_varint(lsb),
                  zigzag_varint(len(name)) + name, string_bytes(location.key))
        pieces = self._pieces.copy()
        pieces[1::2] = self._pick(values)
        return b"".join(pieces)


def _probe(batch: _MarkBatch, chunk: ChunkRecord,
           location: ChunkLocation) -> tuple[PendingDeleteLedgerInfo, dict[int, bytes]]:
    """The record of a copy of the same shape as ``chunk``'s at ``location``, built as every record is but for
    a chunk name and a key of random letters, and with a random ledger id and copy uuid; and the bytes each
    of those values is written as."""
    token = secrets.token_hex(16)
    name, key = f"reclaim-probe-{token}-name", f"reclaim-probe-{token}-key"
    place = dataclasses.replace(location, key=key)
    record = batch.record(dataclasses.replace(chunk, name=name, locations=(place,)), place)
    ledger_id, msb, lsb = marker_long(), marker_long(), marker_long()
    fields = dict(record.__dict__, ledger_id=ledger_id)
    marks = {LEDGER_ID: zigzag_varint(ledger_id), CHUNK_NAME: string_bytes(name), KEY: string_bytes(key)}
    context = record.offload_context
    if context is not None:
        fields["offload_context"] = OffloadContext.from_checked(dict(context.__dict__, uuid_msb=msb, uuid_lsb=lsb))
        marks |= {UUID_MSB: zigzag_varint(msb), UUID_LSB: zigzag_varint(lsb)}
    return PendingDeleteLedgerInfo.from_checked(fields), marks
