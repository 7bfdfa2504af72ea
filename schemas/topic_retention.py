"""A plain Kafka topic's consumption-based retention policy (KIP-68's consumed log retention, on the bus)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.durations import human
from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    AvroRecord,
    check_millis,
    get_array,
    get_bool,
    get_long,
    get_millis,
    get_opt_long,
    get_opt_str,
    get_record,
    get_str,
    get_str_array,
    get_str_map,
)
from reclaim.schemas.streams import StreamCut

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
        limits = [f"min {human(self.min_ms / 1000)}"]
        if self.max_ms is not None:
            limits.append(f"max {human(self.max_ms / 1000)}")
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


@dataclass(frozen=True)
class TopicPartitionState(AvroRecord):
    """One partition as its brokers answered: start, end (high watermark), and where the policy's time limits
    fall (``offsetsForTimes``), with its size when known."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopicPartitionState")

    partition: int
    start: int
    end: int
    young_from: int | None = None
    old_before: int | None = None
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.partition < 2**31 or not 0 <= self.start <= self.end:
            raise ValueError(f"partition {self.partition}: start {self.start} and end {self.end} are not "
                             "0 <= start <= end")

    def to_avro(self) -> dict[str, Any]:
        return {"partition": self.partition, "start": self.start, "end": self.end, "young_from": self.young_from,
                "old_before": self.old_before, "size_bytes": self.size_bytes}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(get_long(data, "partition"), get_long(data, "start"), get_long(data, "end"),
                   get_opt_long(data, "young_from"), get_opt_long(data, "old_before"), get_opt_long(data, "size_bytes"))


@dataclass(frozen=True)
class GroupCommit(AvroRecord):
    """A required group's committed offsets on one topic, as a cut (partition number as segment id); a Spark query
    named through its checkpoint is ``spark:NAME``."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.GroupCommit")

    group: str
    state: str
    committed: StreamCut

    def to_avro(self) -> dict[str, Any]:
        return {"group": self.group, "state": self.state, "committed": self.committed.to_avro()}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(get_str(data, "group"), get_str(data, "state"), get_record(data, "committed", StreamCut))


@dataclass(frozen=True)
class TopicCut(AvroRecord):
    """What the topic poller saw of a topic under consumption retention at ``observed_at``: its partitions and its
    required groups' cuts. Signed by the topic-retention role; the retention job decides on the latest."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopicCut")

    topic: str
    topic_id: str
    observed_at: int
    partitions: tuple[TopicPartitionState, ...]
    groups: tuple[GroupCommit, ...] = ()

    def __post_init__(self) -> None:
        check_millis("observed_at", self.observed_at)

    def to_avro(self) -> dict[str, Any]:
        return {"topic": self.topic, "topic_id": self.topic_id, "observed_at": self.observed_at,
                "partitions": [p.to_avro() for p in self.partitions], "groups": [g.to_avro() for g in self.groups]}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(get_str(data, "topic"), get_str(data, "topic_id"), get_millis(data, "observed_at"),
                   tuple(TopicPartitionState.from_avro(p) for p in get_array(data, "partitions")),
                   tuple(GroupCommit.from_avro(g) for g in get_array(data, "groups")))


@dataclass(frozen=True)
class TopicTruncation(AvroRecord):
    """The retention job's decision: delete ``topic``'s records below ``starts`` (partition to new start offset)
    with DeleteRecords. ``why`` says, per partition, the rule and the groups that held it; the topic's id and the
    policy's version bind it to one life of the topic and one policy."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopicTruncation")

    topic: str
    topic_id: str
    starts: StreamCut
    decided_at: int
    policy_updated_at: int
    why: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        check_millis("decided_at", self.decided_at)
        check_millis("policy_updated_at", self.policy_updated_at)

    def to_avro(self) -> dict[str, Any]:
        return {"topic": self.topic, "topic_id": self.topic_id, "starts": self.starts.to_avro(),
                "why": dict(self.why), "decided_at": self.decided_at, "policy_updated_at": self.policy_updated_at}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(get_str(data, "topic"), get_str(data, "topic_id"), get_record(data, "starts", StreamCut),
                   get_millis(data, "decided_at"), get_millis(data, "policy_updated_at"),
                   tuple(sorted(get_str_map(data, "why").items())))
