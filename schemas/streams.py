"""Stream cuts, retention policies and the stream-level records of PDP-19 and PDP-47."""

from __future__ import annotations

import enum
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    LONG_MAX,
    AvroRecord,
    check_millis,
    get_array,
    get_enum,
    get_long,
    get_millis,
    get_opt_enum,
    get_opt_str,
    get_record,
    get_str,
)


@dataclass(frozen=True)
class SegmentOffset(AvroRecord):
    """One position of a stream cut: ``offset`` bytes into segment ``segment_id``."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.SegmentOffset")

    segment_id: int
    offset: int

    def to_avro(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "offset": self.offset}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(segment_id=get_long(data, "segment_id"), offset=get_long(data, "offset"))


@dataclass(frozen=True)
class StreamCut(AvroRecord, Mapping[int, int]):
    """A stream cut (PDP-19): one offset per segment, a read-only mapping of segment id to offset.

    Avro map keys must be strings, so the schema holds an array of ``SegmentOffset``; the
    dataclass keeps them as a tuple sorted by segment id, which makes equal cuts compare and
    hash equal. The empty cut is the head of the stream.

    Examples
    --------
    >>> cut = StreamCut.from_mapping({1: 10, 0: 5})
    >>> cut.as_dict()
    {0: 5, 1: 10}
    >>> cut[1]
    10
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.StreamCut")

    positions: tuple[SegmentOffset, ...] = ()

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.positions, key=lambda position: position.segment_id))
        for before, after in zip(ordered, ordered[1:], strict=False):
            if before.segment_id == after.segment_id:
                raise ValueError(f"stream cut names segment {after.segment_id} twice")
        object.__setattr__(self, "positions", ordered)

    @classmethod
    def from_mapping(cls, offsets: Mapping[int, int]) -> StreamCut:
        """Build from a mapping of segment id to offset."""
        return cls(tuple(SegmentOffset(segment, offset) for segment, offset in offsets.items()))

    def as_dict(self) -> dict[int, int]:
        """The cut as a fresh dict of segment id to offset."""
        return {position.segment_id: position.offset for position in self.positions}

    def __getitem__(self, segment_id: int) -> int:
        for position in self.positions:
            if position.segment_id == segment_id:
                return position.offset
        raise KeyError(segment_id)

    def __iter__(self) -> Iterator[int]:
        return (position.segment_id for position in self.positions)

    def __len__(self) -> int:
        return len(self.positions)

    def to_avro(self) -> dict[str, Any]:
        return {"positions": [position.to_avro() for position in self.positions]}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(tuple(SegmentOffset.from_avro(item) for item in get_array(data, "positions")))


class RetentionType(enum.Enum):
    """What truncates a stream: nothing, age (PDP-19), size (PDP-19) or consumption (PDP-47)."""

    NONE = "NONE"
    TIME = "TIME"
    SIZE = "SIZE"
    CONSUMPTION = "CONSUMPTION"


class LimitType(enum.Enum):
    """The unit of a policy's min/max limits: TIME in millis, SIZE in bytes."""

    TIME = "TIME"
    SIZE = "SIZE"


@dataclass(frozen=True)
class RetentionPolicy(AvroRecord):
    """A stream's retention policy.

    For TIME and SIZE, ``limit_type`` equals the retention type and the limits bound what is kept.
    For CONSUMPTION, ``limit_type`` is the fallback type (PDP-47): truncation by subscribers'
    cuts keeps at least ``min_limit`` and at most ``max_limit``; PDP-47 allows no mix of a time
    minimum with a size maximum. Unset limits default to 0 and the largest long, as in PDP-47.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.RetentionPolicy")

    retention_type: RetentionType
    limit_type: LimitType | None = None
    min_limit: int = 0
    max_limit: int = LONG_MAX

    def describe(self) -> str:
        """The policy as a reader says it: ``consumption (fallback time): keep at least 1h, at most 7d``."""
        from reclaim.durations import human

        kind = self.retention_type.name.lower()
        if self.retention_type is RetentionType.NONE:
            return "none: nothing is truncated by retention"
        if self.retention_type is RetentionType.CONSUMPTION:
            kind += f" (fallback {self.limit_type.name.lower()})" if self.limit_type is not None else ""

        def amount(limit: int) -> str:
            if self.limit_type is LimitType.TIME:
                return human(limit / 1000)
            return f"{limit} bytes" if self.limit_type is LimitType.SIZE else str(limit)

        most = "no maximum" if self.max_limit == LONG_MAX else f"at most {amount(self.max_limit)}"
        return f"{kind}: keep at least {amount(self.min_limit)}, {most}"

    def to_avro(self) -> dict[str, Any]:
        return {
            "retention_type": self.retention_type.name,
            "limit_type": None if self.limit_type is None else self.limit_type.name,
            "min_limit": self.min_limit,
            "max_limit": self.max_limit,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            retention_type=get_enum(data, "retention_type", RetentionType),
            limit_type=get_opt_enum(data, "limit_type", LimitType),
            min_limit=get_long(data, "min_limit"),
            max_limit=get_long(data, "max_limit"),
        )


@dataclass(frozen=True)
class StreamConfig(AvroRecord):
    """A stream's retention configuration, as the retention job reads it from the config topic."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.StreamConfig")

    stream: str
    policy: RetentionPolicy
    updated_at: int
    incarnation: str | None = None

    def __post_init__(self) -> None:
        check_millis("updated_at", self.updated_at)

    def to_avro(self) -> dict[str, Any]:
        return {"stream": self.stream, "policy": self.policy.to_avro(), "updated_at": self.updated_at,
                "incarnation": self.incarnation}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            policy=get_record(data, "policy", RetentionPolicy),
            updated_at=get_millis(data, "updated_at"),
            incarnation=get_opt_str(data, "incarnation"),
        )


@dataclass(frozen=True)
class StreamCutRecord(AvroRecord):
    """One entry of a stream's retention set (PDP-19): a cut, when it was taken, the size up to it."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.StreamCutRecord")

    stream: str
    cut: StreamCut
    recording_time: int
    recording_size: int
    incarnation: str | None = None

    def __post_init__(self) -> None:
        check_millis("recording_time", self.recording_time)

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "cut": self.cut.to_avro(),
            "recording_time": self.recording_time,
            "recording_size": self.recording_size,
            "incarnation": self.incarnation,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            cut=get_record(data, "cut", StreamCut),
            recording_time=get_millis(data, "recording_time"),
            recording_size=get_long(data, "recording_size"),
            incarnation=get_opt_str(data, "incarnation"),
        )


class TruncationReason(enum.Enum):
    """What made a truncation due."""

    TIME = "TIME"
    SIZE = "SIZE"
    CONSUMPTION = "CONSUMPTION"
    MANUAL = "MANUAL"


@dataclass(frozen=True)
class TruncationEvent(AvroRecord):
    """A decision to truncate ``stream`` at ``cut``, written only when the cut advances."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TruncationEvent")

    stream: str
    cut: StreamCut
    reason: TruncationReason
    computed_at: int
    policy: RetentionPolicy
    incarnation: str | None = None
    bound_by: tuple[str, ...] = ()
    """A CONSUMPTION truncation's subscribers whose cuts made the bound, each with the key that signed its cut."""

    def __post_init__(self) -> None:
        check_millis("computed_at", self.computed_at)

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "cut": self.cut.to_avro(),
            "reason": self.reason.name,
            "computed_at": self.computed_at,
            "policy": self.policy.to_avro(),
            "incarnation": self.incarnation,
            "bound_by": list(self.bound_by),
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            cut=get_record(data, "cut", StreamCut),
            reason=get_enum(data, "reason", TruncationReason),
            computed_at=get_millis(data, "computed_at"),
            policy=get_record(data, "policy", RetentionPolicy),
            incarnation=get_opt_str(data, "incarnation"),
            bound_by=tuple(str(item) for item in data.get("bound_by") or ()),
        )
