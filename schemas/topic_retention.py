"""A plain Kafka topic's consumption-based retention policy (KIP-68's consumed log retention, on the bus)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    AvroRecord,
    check_millis,
    get_bool,
    get_long,
    get_millis,
    get_opt_long,
    get_opt_str,
    get_str,
    get_str_array,
    get_str_map,
)

DEFAULT_STALE_AFTER_MS = 24 * 3600 * 1000
"""A required group Empty for a day is reported stale (Kafka expires an Empty group's offsets after
``offsets.retention.minutes``, 7 days by default: well before that, an operator hears of it)."""


@dataclass(frozen=True)
class TopicRetentionPolicy(AvroRecord):
    """Which consumer groups (and Spark queries) must have read a topic's records before they are deleted, and the
    limits around them: ``min_ms`` always kept, ``max_ms`` and ``max_bytes`` forced past groups that hold longer.

    ``topic_id`` binds the policy to one life of the topic: a topic deleted and created again under its name gets
    a new id, and a policy (or a replay of one) naming the old id does nothing to it. ``active`` False ends the
    policy; the latest ``updated_at`` per topic is in force.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopicRetentionPolicy")

    topic: str
    topic_id: str
    groups: tuple[str, ...]
    min_ms: int
    updated_at: int
    group_pattern: str | None = None
    released: tuple[str, ...] = ()
    spark_checkpoints: tuple[tuple[str, str], ...] = ()
    max_ms: int | None = None
    max_bytes: int | None = None
    stale_after_ms: int = DEFAULT_STALE_AFTER_MS
    active: bool = True

    def __post_init__(self) -> None:
        check_millis("updated_at", self.updated_at)
        if not self.topic:
            raise ValueError("a topic retention policy needs a topic")
        if self.min_ms < 0 or self.stale_after_ms <= 0:
            raise ValueError(f"the minimum must be >= 0 ms and stale-after > 0 ms, got {self.min_ms} and "
                             f"{self.stale_after_ms}")
        if self.max_ms is not None and self.max_ms < self.min_ms:
            raise ValueError(f"the maximum ({self.max_ms} ms) must not be below the minimum ({self.min_ms} ms)")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"the maximum size must be >= 0 bytes, got {self.max_bytes}")
        if self.group_pattern is not None:
            try:
                re.compile(self.group_pattern)
            except re.error as exc:
                raise ValueError(f"group pattern {self.group_pattern!r} is not a regular expression: {exc}") from None

    @property
    def checkpoints(self) -> dict[str, str]:
        """The Spark queries required as subscribers: name to checkpoint location."""
        return dict(self.spark_checkpoints)

    def describe(self) -> str:
        """One line: who holds the topic and the limits."""
        held = [*self.groups, *([f"groups matching {self.group_pattern!r}"] if self.group_pattern else []),
                *(f"Spark query {name}" for name, _ in self.spark_checkpoints)]
        limits = [f"min {self.min_ms} ms"]
        if self.max_ms is not None:
            limits.append(f"max {self.max_ms} ms")
        if self.max_bytes is not None:
            limits.append(f"max {self.max_bytes} bytes per partition")
        released = f"; released: {', '.join(self.released)}" if self.released else ""
        return f"held by {', '.join(held) or 'no group'}; {', '.join(limits)}{released}"

    def to_avro(self) -> dict[str, Any]:
        return {"topic": self.topic, "topic_id": self.topic_id, "groups": list(self.groups),
                "group_pattern": self.group_pattern, "released": list(self.released),
                "spark_checkpoints": dict(self.spark_checkpoints), "min_ms": self.min_ms, "max_ms": self.max_ms,
                "max_bytes": self.max_bytes, "stale_after_ms": self.stale_after_ms, "active": self.active,
                "updated_at": self.updated_at}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            topic=get_str(data, "topic"),
            topic_id=get_str(data, "topic_id"),
            groups=get_str_array(data, "groups"),
            group_pattern=get_opt_str(data, "group_pattern"),
            released=get_str_array(data, "released") if "released" in data else (),
            spark_checkpoints=tuple(sorted(get_str_map(data, "spark_checkpoints").items()))
            if "spark_checkpoints" in data else (),
            min_ms=get_long(data, "min_ms"),
            max_ms=get_opt_long(data, "max_ms"),
            max_bytes=get_opt_long(data, "max_bytes"),
            stale_after_ms=get_long(data, "stale_after_ms"),
            active=get_bool(data, "active") if "active" in data else True,
            updated_at=get_millis(data, "updated_at"),
        )
