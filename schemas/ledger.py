"""PIP-186's ``PendingDeleteLedgerInfo`` record, its nested records and enums, and ``ledger_id_for``."""

from __future__ import annotations

import enum
import hashlib
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self, TypeVar

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    AvroRecord,
    check_millis,
    get_enum,
    get_long,
    get_millis,
    get_opt_long,
    get_opt_record,
    get_opt_str,
    get_record,
    get_str,
    get_str_map,
    millis_of,
)

_LONG_MASK = 2**64 - 1
_LEDGER_ID_MASK = 2**63 - 1

_R = TypeVar("_R")


def _from_checked(cls: type[_R], fields: dict[str, Any]) -> _R:
    """An instance of the frozen dataclass ``cls`` holding ``fields`` as given, without ``__init__``.

    ``fields`` becomes the instance's own ``__dict__`` (no copy): callers hand over a dict they built
    for it and keep no reference."""
    record = object.__new__(cls)
    _set_attribute(record, "__dict__", fields)
    return record


_set_attribute = object.__setattr__


class LedgerComponent(enum.Enum):
    """Who used the chunk, as PIP-186's ``LedgerComponent``.

    SEGMENT is MANAGED_LEDGER (message data of a segment), CURSOR is MANAGED_CURSOR (a reader
    group's position data, with ``cursor_name``), SCHEMA is SCHEMA_STORAGE (with ``schema_id``).
    """

    SEGMENT = "SEGMENT"
    CURSOR = "CURSOR"
    SCHEMA = "SCHEMA"


class LedgerType(enum.Enum):
    """Which copy of a chunk a record names: LEDGER = the tier-1 copy, OFFLOAD_LEDGER = the tier-2 copy."""

    LEDGER = "LEDGER"
    OFFLOAD_LEDGER = "OFFLOAD_LEDGER"


#: The members by symbol, for a decoded record: a mapping's lookup, not ``Enum.__getitem__``'s call.
_COMPONENT_NAMED = LedgerComponent.__members__
_TYPE_NAMED = LedgerType.__members__


def ledger_id_for(chunk_name: str) -> int:
    """A stable, non-negative 63-bit id for a chunk, PIP-186's ``ledgerId``.

    The first 8 bytes of the BLAKE2b digest of the UTF-8 name, top bit cleared so it fits a
    non-negative Avro (Java) long. It is an index and a log key, not an identity: distinct names
    can collide (about 1 in 2**63 per pair), so ``chunk_name`` stays the key that decides deletion.

    Examples
    --------
    >>> ledger_id_for("scope/stream/0.#epoch.0$offset.0") == ledger_id_for("scope/stream/0.#epoch.0$offset.0")
    True
    """
    digest = hashlib.blake2b(chunk_name.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") & _LEDGER_ID_MASK


def _signed_long(value: int) -> int:
    """Two's-complement view of a 64-bit unsigned value, as Java stores a uuid's halves."""
    return value - 2**64 if value >= 2**63 else value


@dataclass(frozen=True)
class OffloadContext(AvroRecord):
    """Where a tier-2 copy lives, as PIP-186's ``OffloadContext``.

    ``metadata`` is kept as key-sorted pairs so the record stays hashable; ``metadata_dict``
    gives it back as a dict. Build one from a uuid with ``for_uuid``.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.OffloadContext")
    AVRO_ATTRIBUTES: ClassVar[bool] = True

    uuid_msb: int
    uuid_lsb: int
    driver_name: str
    metadata: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "metadata", tuple(sorted(dict(self.metadata).items())))

    @classmethod
    def from_checked(cls, fields: dict[str, Any]) -> Self:
        """Build from every field by name, ``metadata`` already key-sorted and unique; nothing is re-checked.

        ``fields`` becomes the record's own attribute dict (not copied): pass a dict built for it."""
        return _from_checked(cls, fields)

    @classmethod
    def for_uuid(cls, copy_id: uuid.UUID, driver_name: str, metadata: Mapping[str, str]) -> OffloadContext:
        """Build from the copy's uuid, split into signed halves as Java's ``UUID`` does."""
        msb, lsb = copy_id.int >> 64, copy_id.int & _LONG_MASK
        return cls(_signed_long(msb), _signed_long(lsb), driver_name, tuple(metadata.items()))

    @property
    def uuid(self) -> uuid.UUID:
        """The copy's uuid, rebuilt from the two halves."""
        return uuid.UUID(int=((self.uuid_msb & _LONG_MASK) << 64) | (self.uuid_lsb & _LONG_MASK))

    def metadata_dict(self) -> dict[str, str]:
        """The driver metadata as a fresh dict."""
        return dict(self.metadata)

    def to_avro(self) -> dict[str, Any]:
        return {
            "uuid_msb": self.uuid_msb,
            "uuid_lsb": self.uuid_lsb,
            "driver_name": self.driver_name,
            "metadata": dict(self.metadata),
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            uuid_msb=get_long(data, "uuid_msb"),
            uuid_lsb=get_long(data, "uuid_lsb"),
            driver_name=get_str(data, "driver_name"),
            metadata=tuple(get_str_map(data, "metadata").items()),
        )


@dataclass(frozen=True)
class ChunkLocation(AvroRecord):
    """Where one copy of a chunk lives in its binding: ``bucket`` (object stores) and ``key``.

    ``key`` is the object key, or the path relative to the binding root for a filesystem.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.ChunkLocation")
    AVRO_ATTRIBUTES: ClassVar[bool] = True

    key: str
    bucket: str | None = None

    @classmethod
    def from_checked(cls, fields: dict[str, Any]) -> Self:
        """Build from every field by name, as given; ``fields`` becomes the record's own (not copied)."""
        return _from_checked(cls, fields)

    def to_avro(self) -> dict[str, Any]:
        return {"bucket": self.bucket, "key": self.key}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(key=get_str(data, "key"), bucket=get_opt_str(data, "bucket"))


@dataclass(frozen=True)
class PendingDeleteLedgerInfo(AvroRecord):
    """One copy of one chunk that phase 1 removed from a live layout and phase 2 must delete.

    The first seven fields are PIP-186's; the rest are what reclaim needs to find the copy and
    to verify ownership before deleting it. A chunk with a tier-1 and a tier-2 copy gets two
    records, one per ``ledger_type``.

    Attributes
    ----------
    topic_name : str
        The stream, qualified as ``"scope/stream"``.
    ledger_component : LedgerComponent
        Who used the chunk.
    ledger_type : LedgerType
        Which copy this record names.
    ledger_id : int
        ``ledger_id_for(chunk_name)``.
    chunk_name, segment_name : str
        The chunk and the segment that owned it.
    storage_binding : str
        The name of the binding holding this copy.
    location : ChunkLocation
        Where the copy lives inside the binding.
    mark_id : str
        The phase-1 mark batch that removed the chunk from the live layout.
    created_at : int
        When phase 1 built the record, epoch millis.
    cursor_name : str or None
        The reader group, for ``CURSOR``.
    schema_id : int or None
        The schema id, for ``SCHEMA``.
    offload_context : OffloadContext or None
        Set for an ``OFFLOAD_LEDGER`` copy.
    owner_epoch : int or None
        The writer epoch that owned the segment, when tagged.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.PendingDeleteLedgerInfo")
    AVRO_ATTRIBUTES: ClassVar[bool] = True

    topic_name: str
    ledger_component: LedgerComponent
    ledger_type: LedgerType
    ledger_id: int
    chunk_name: str
    segment_name: str
    storage_binding: str
    location: ChunkLocation
    mark_id: str
    created_at: int
    cursor_name: str | None = None
    schema_id: int | None = None
    offload_context: OffloadContext | None = None
    owner_epoch: int | None = None

    def __post_init__(self) -> None:
        check_millis("created_at", self.created_at)

    @classmethod
    def from_checked(cls, fields: dict[str, Any]) -> Self:
        """Build from every field by name, with ``created_at`` already checked; ``__post_init__`` is skipped.
        ``fields`` becomes the record's own attribute dict (not copied).

        For phase 1's builder, which checks ``created_at`` once for a whole mark batch.
        """
        return _from_checked(cls, fields)

    def to_avro(self) -> dict[str, Any]:
        # Phase 1 encodes one of these per chunk copy: the enums' ``_name_`` (their plain attribute;
        # ``name`` is a property), the nested context read once.
        context = self.offload_context
        return {
            "topic_name": self.topic_name,
            "ledger_component": self.ledger_component._name_,
            "cursor_name": self.cursor_name,
            "schema_id": self.schema_id,
            "ledger_type": self.ledger_type._name_,
            "ledger_id": self.ledger_id,
            "offload_context": None if context is None else context.to_avro(),
            "chunk_name": self.chunk_name,
            "segment_name": self.segment_name,
            "storage_binding": self.storage_binding,
            "location": self.location.to_avro(),
            "owner_epoch": self.owner_epoch,
            "mark_id": self.mark_id,
            "created_at": self.created_at,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            topic_name=get_str(data, "topic_name"),
            ledger_component=get_enum(data, "ledger_component", LedgerComponent),
            cursor_name=get_opt_str(data, "cursor_name"),
            schema_id=get_opt_long(data, "schema_id"),
            ledger_type=get_enum(data, "ledger_type", LedgerType),
            ledger_id=get_long(data, "ledger_id"),
            offload_context=get_opt_record(data, "offload_context", OffloadContext),
            chunk_name=get_str(data, "chunk_name"),
            segment_name=get_str(data, "segment_name"),
            storage_binding=get_str(data, "storage_binding"),
            location=get_record(data, "location", ChunkLocation),
            owner_epoch=get_opt_long(data, "owner_epoch"),
            mark_id=get_str(data, "mark_id"),
            created_at=get_millis(data, "created_at"),
        )

    @classmethod
    def _from_datum(cls, datum: dict[str, Any]) -> Self:
        # Phase 2 decodes one of these per deletion. fastavro has checked every field's type and read
        # exactly this schema's fields, the nested records' too: its dicts become the records' own,
        # converted in place, and only the values' conversions and checks are left (no dataclass
        # __init__, no second dict).
        created_at = millis_of(datum["created_at"])
        check_millis("created_at", created_at)
        datum["created_at"] = created_at
        datum["ledger_component"] = _COMPONENT_NAMED[datum["ledger_component"]]
        datum["ledger_type"] = _TYPE_NAMED[datum["ledger_type"]]
        datum["location"] = ChunkLocation.from_checked(datum["location"])
        context = datum["offload_context"]
        if context is not None:
            context["metadata"] = tuple(sorted(context["metadata"].items()))
            datum["offload_context"] = OffloadContext.from_checked(context)
        return cls.from_checked(datum)
