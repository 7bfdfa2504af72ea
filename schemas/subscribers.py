"""PDP-47's subscriber records: membership changes and truncation cuts, both ordered by generation."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    AvroRecord,
    check_millis,
    get_enum,
    get_long,
    get_millis,
    get_opt_str,
    get_record,
    get_str,
)
from reclaim.schemas.streams import StreamCut


class SubscriberChangeType(enum.Enum):
    """Whether a reader group joins or leaves a stream's subscribers."""

    ADD = "ADD"
    REMOVE = "REMOVE"


@dataclass(frozen=True)
class SubscriberChange(AvroRecord):
    """Reader group ``subscriber`` added to or removed from ``stream``'s subscribers.

    Applied only when ``generation`` is newer than the one stored for the subscriber, so a
    late or re-delivered change is a no-op (PDP-47's add/delete subscriber generations).
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.SubscriberChange")

    stream: str
    subscriber: str
    generation: int
    change: SubscriberChangeType
    changed_at: int
    incarnation: str | None = None

    def __post_init__(self) -> None:
        check_millis("changed_at", self.changed_at)

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "subscriber": self.subscriber,
            "generation": self.generation,
            "change": self.change.name,
            "changed_at": self.changed_at,
            "incarnation": self.incarnation,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            subscriber=get_str(data, "subscriber"),
            generation=get_long(data, "generation"),
            change=get_enum(data, "change", SubscriberChangeType),
            changed_at=get_millis(data, "changed_at"),
            incarnation=get_opt_str(data, "incarnation"),
        )


@dataclass(frozen=True)
class SubscriberCut(AvroRecord):
    """A subscriber's truncation cut: it has consumed ``stream`` up to ``cut``.

    A cut with an older ``generation`` than the subscriber's is a no-op, and a subscriber's cut
    only advances.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.SubscriberCut")

    stream: str
    subscriber: str
    generation: int
    cut: StreamCut
    published_at: int
    incarnation: str | None = None

    def __post_init__(self) -> None:
        check_millis("published_at", self.published_at)

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "subscriber": self.subscriber,
            "generation": self.generation,
            "cut": self.cut.to_avro(),
            "published_at": self.published_at,
            "incarnation": self.incarnation,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            subscriber=get_str(data, "subscriber"),
            generation=get_long(data, "generation"),
            cut=get_record(data, "cut", StreamCut),
            published_at=get_millis(data, "published_at"),
            incarnation=get_opt_str(data, "incarnation"),
        )
