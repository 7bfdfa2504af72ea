"""What the retention job writes when it rejects an input: the kind, the reason and where the input came from."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import AvroRecord, check_millis, get_enum, get_long, get_millis, get_opt_str, get_str

INT_MIN = -(2**31)
INT_MAX = 2**31 - 1


class RejectKind(enum.Enum):
    """Why the retention job rejected an input."""

    UNDECODABLE = "UNDECODABLE"
    INVALID_CUT = "INVALID_CUT"
    CUT_BEHIND = "CUT_BEHIND"
    STALE_GENERATION = "STALE_GENERATION"
    UNKNOWN_SUBSCRIBER = "UNKNOWN_SUBSCRIBER"
    INVALID_POLICY = "INVALID_POLICY"
    UNAUTHENTICATED = "UNAUTHENTICATED"
    """Not signed by a key allowed to write it (the reason names how: unsigned, bad-signature, ...)."""
    UNKNOWN_STREAM = "UNKNOWN_STREAM"
    """A cut for a stream the job has no topology of (never created, or deleted)."""
    GENERATION_AHEAD = "GENERATION_AHEAD"
    """A subscriber's cut at a generation newer than the subscriber's (its add was never seen)."""
    WRONG_INCARNATION = "WRONG_INCARNATION"
    """A record of another incarnation of the stream (one deleted, its name used again), or of none where one is
    required: a genuine record replayed into the stream created again under its name."""


@dataclass(frozen=True)
class RetentionReject(AvroRecord):
    """An input the retention job rejected, so an operator can see it and find it on its topic.

    ``stream`` is ``""`` when the input could not tell (e.g. undecodable bytes); ``subscriber`` is
    set when the input named one. ``source_partition`` is an Avro int, as Kafka partitions are.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.RetentionReject")

    stream: str
    subscriber: str | None
    kind: RejectKind
    reason: str
    source_topic: str
    source_partition: int
    source_offset: int
    rejected_at: int

    def __post_init__(self) -> None:
        if not INT_MIN <= self.source_partition <= INT_MAX:
            raise ValueError(f"source_partition does not fit an int: {self.source_partition}")
        check_millis("rejected_at", self.rejected_at)

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "subscriber": self.subscriber,
            "kind": self.kind.name,
            "reason": self.reason,
            "source_topic": self.source_topic,
            "source_partition": self.source_partition,
            "source_offset": self.source_offset,
            "rejected_at": self.rejected_at,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            subscriber=get_opt_str(data, "subscriber"),
            kind=get_enum(data, "kind", RejectKind),
            reason=get_str(data, "reason"),
            source_topic=get_str(data, "source_topic"),
            source_partition=get_long(data, "source_partition"),
            source_offset=get_long(data, "source_offset"),
            rejected_at=get_millis(data, "rejected_at"),
        )
