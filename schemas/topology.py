"""A stream's topology on the bus: its epochs (PDP-24) and the final lengths of its sealed segments."""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Self

from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import (
    AvroRecord,
    check_millis,
    get_array,
    get_enum,
    get_long,
    get_millis,
    get_opt_str,
    get_str,
)

KEY_SPACE_END = 1.0


def _get_double(data: Mapping[str, Any], name: str) -> float:
    if name not in data:
        raise ValueError(f"missing field {name!r}")
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"field {name!r} must be a number, got {type(value).__name__}")
    return float(value)


@dataclass(frozen=True)
class TopologySegment(AvroRecord):
    """One segment of an epoch: id ``epoch << 32 | number`` and the key range ``[key_start, key_end)``."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopologySegment")

    segment_id: int
    key_start: float
    key_end: float

    def __post_init__(self) -> None:
        if self.segment_id < 0:
            raise ValueError(f"segment id must not be negative, got {self.segment_id}")
        # Ints are accepted and stored as floats, so 0 and 0.0 make equal records.
        object.__setattr__(self, "key_start", float(self.key_start))
        object.__setattr__(self, "key_end", float(self.key_end))
        # Written this way round so NaN fails too.
        if not (0.0 <= self.key_start < self.key_end <= KEY_SPACE_END):
            raise ValueError(f"segment {self.segment_id}: key range [{self.key_start}, {self.key_end}) "
                             "is not inside [0, 1) or is empty")

    def to_avro(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "key_start": self.key_start, "key_end": self.key_end}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(segment_id=get_long(data, "segment_id"), key_start=_get_double(data, "key_start"),
                   key_end=_get_double(data, "key_end"))


@dataclass(frozen=True)
class TopologyEpoch(AvroRecord):
    """One epoch of the history table: its reference epoch and segments that exactly tile [0, 1).

    Segments are kept sorted by key range, so equal epochs compare equal.
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.TopologyEpoch")

    epoch: int
    reference: int
    segments: tuple[TopologySegment, ...]

    def __post_init__(self) -> None:
        ordered = tuple(sorted(self.segments, key=lambda s: (s.key_start, s.key_end)))
        object.__setattr__(self, "segments", ordered)
        if not 0 <= self.reference <= self.epoch:
            raise ValueError(f"epoch {self.epoch}: reference {self.reference} is not in [0, {self.epoch}]")
        if not ordered:
            raise ValueError(f"epoch {self.epoch} has no segments")
        if len({s.segment_id for s in ordered}) != len(ordered):
            raise ValueError(f"epoch {self.epoch} names a segment twice")
        expected = 0.0
        for segment in ordered:
            if segment.key_start != expected:
                raise ValueError(f"epoch {self.epoch}: segments do not tile [0, 1) at {expected} "
                                 f"(segment {segment.segment_id} starts at {segment.key_start})")
            expected = segment.key_end
        if expected != KEY_SPACE_END:
            raise ValueError(f"epoch {self.epoch}: segments end at {expected}, not at 1")

    def to_avro(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "reference": self.reference,
                "segments": [segment.to_avro() for segment in self.segments]}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(epoch=get_long(data, "epoch"), reference=get_long(data, "reference"),
                   segments=tuple(TopologySegment.from_avro(item) for item in get_array(data, "segments")))


@dataclass(frozen=True)
class SealedSegment(AvroRecord):
    """The final length of a sealed segment, counted from its beginning (truncation does not change it)."""

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.SealedSegment")

    segment_id: int
    length: int

    def __post_init__(self) -> None:
        if self.segment_id < 0 or self.length < 0:
            raise ValueError(f"sealed segment {self.segment_id}: id and length must not be negative, "
                             f"got length {self.length}")

    def to_avro(self) -> dict[str, Any]:
        return {"segment_id": self.segment_id, "length": self.length}

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(segment_id=get_long(data, "segment_id"), length=get_long(data, "length"))


class TopologyState(enum.Enum):
    """The stream's lifecycle state as the topology reports it."""

    ACTIVE = "ACTIVE"
    SEALED = "SEALED"
    DELETED = "DELETED"


@dataclass(frozen=True)
class StreamTopology(AvroRecord):
    """What the retention job knows of a stream's shape, published by its controller, keyed by stream.

    ``epochs`` are the history table 0..n (the last one active); ``sealed_lengths`` hold the final
    length of every segment sealed so far, sorted by segment id, each naming a segment of some
    epoch. A DELETED stream's topology may carry no epochs: its history is gone.

    Examples
    --------
    >>> whole = TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 1.0),))
    >>> topology = StreamTopology("scope/orders", (whole,), (), TopologyState.ACTIVE, 0)
    >>> topology.active_epoch.segments[0].segment_id
    0
    """

    SCHEMA: ClassVar[RecordSchema] = RecordSchema.load("reclaim.StreamTopology")

    stream: str
    epochs: tuple[TopologyEpoch, ...]
    sealed_lengths: tuple[SealedSegment, ...]
    state: TopologyState
    published_at: int
    incarnation: str | None = None

    def __post_init__(self) -> None:
        check_millis("published_at", self.published_at)
        if [e.epoch for e in self.epochs] != list(range(len(self.epochs))):
            raise ValueError(f"{self.stream}: epochs must be 0..n without gaps, got {[e.epoch for e in self.epochs]}")
        if not self.epochs and self.state is not TopologyState.DELETED:
            raise ValueError(f"{self.stream}: a {self.state.name} stream has at least one epoch")
        sealed = tuple(sorted(self.sealed_lengths, key=lambda s: s.segment_id))
        object.__setattr__(self, "sealed_lengths", sealed)
        _check_sealed(self.stream, self.epochs, sealed)

    @property
    def active_epoch(self) -> TopologyEpoch:
        """The last epoch. Raises IndexError for a deleted stream without epochs."""
        return self.epochs[-1]

    def sealed_length_map(self) -> dict[int, int]:
        """The sealed lengths as a fresh dict of segment id to length."""
        return {sealed.segment_id: sealed.length for sealed in self.sealed_lengths}

    def to_avro(self) -> dict[str, Any]:
        return {
            "stream": self.stream,
            "epochs": [epoch.to_avro() for epoch in self.epochs],
            "sealed_lengths": [sealed.to_avro() for sealed in self.sealed_lengths],
            "state": self.state.name,
            "published_at": self.published_at,
            "incarnation": self.incarnation,
        }

    @classmethod
    def _from_avro(cls, data: Mapping[str, Any]) -> Self:
        return cls(
            stream=get_str(data, "stream"),
            epochs=tuple(TopologyEpoch.from_avro(item) for item in get_array(data, "epochs")),
            sealed_lengths=tuple(SealedSegment.from_avro(item) for item in get_array(data, "sealed_lengths")),
            state=get_enum(data, "state", TopologyState),
            published_at=get_millis(data, "published_at"),
            incarnation=get_opt_str(data, "incarnation"),
        )


def _check_sealed(stream: str, epochs: Sequence[TopologyEpoch], sealed: Sequence[SealedSegment]) -> None:
    known = {segment.segment_id for epoch in epochs for segment in epoch.segments}
    for before, after in zip(sealed, sealed[1:], strict=False):
        if before.segment_id == after.segment_id:
            raise ValueError(f"{stream}: sealed segment {after.segment_id} is named twice")
    strangers = [s.segment_id for s in sealed if s.segment_id not in known]
    if strangers:
        raise ValueError(f"{stream}: sealed segments {strangers} are in no epoch")
