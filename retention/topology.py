"""A stream's topology as retention sees it: every epoch's segments with their key ranges, and sealed lengths."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from reclaim.retention.errors import CutProblem, InvalidCutError
from reclaim.schemas.streams import StreamCut

EPOCH_SHIFT = 32


@dataclass(frozen=True)
class SegmentRange:
    """A segment (PDP-24 id ``epoch << 32 | number``) and the half-open key range ``[start, end)`` it owns."""

    segment_id: int
    start: float
    end: float

    @property
    def epoch(self) -> int:
        """The epoch the segment was created in (the high half of its id)."""
        return self.segment_id >> EPOCH_SHIFT

    def overlaps(self, other: SegmentRange) -> bool:
        return self.start < other.end and other.start < self.end


class Topology:
    """Epochs ``0..n`` of one stream, each a tuple of segments, and the final length of each sealed segment.

    Segments keep their id across the epochs they live in; the id's high half is the epoch that
    created them, so of two segments over overlapping keys the one with the higher id is the later.

    Examples
    --------
    >>> t = Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)], [(0, 0.0, 0.5), ((1 << 32) | 2, 0.5, 1.0)]])
    >>> [s.segment_id for s in t.successors(1)]
    [4294967298]
    """

    def __init__(self, epochs: Sequence[Sequence[SegmentRange]], sealed_lengths: Mapping[int, int] | None = None
                 ) -> None:
        if not epochs:
            raise ValueError("a topology has at least epoch 0")
        self.epochs: tuple[tuple[SegmentRange, ...], ...] = tuple(
            tuple(sorted(epoch, key=lambda s: s.start)) for epoch in epochs)
        self.sealed_lengths: dict[int, int] = dict(sealed_lengths or {})
        self._segments: dict[int, SegmentRange] = {}
        self._first: dict[int, int] = {}
        self._last: dict[int, int] = {}
        self._ancestors: dict[int, frozenset[int]] = {}
        for index, epoch in enumerate(self.epochs):
            for segment in epoch:
                self._segments.setdefault(segment.segment_id, segment)
                self._first.setdefault(segment.segment_id, index)
                self._last[segment.segment_id] = index

    @classmethod
    def of(cls, epochs: Iterable[Iterable[tuple[int, float, float]]],
           sealed_lengths: Mapping[int, int] | None = None) -> Topology:
        """Build from plain ``(segment_id, start, end)`` triples, epoch by epoch."""
        return cls([[SegmentRange(i, float(s), float(e)) for i, s, e in epoch] for epoch in epochs], sealed_lengths)

    @property
    def latest_epoch(self) -> int:
        return len(self.epochs) - 1

    def knows(self, segment_id: int) -> bool:
        return segment_id in self._segments

    def segment(self, segment_id: int) -> SegmentRange:
        try:
            return self._segments[segment_id]
        except KeyError:
            raise InvalidCutError(CutProblem.UNKNOWN_SEGMENT, f"segment {segment_id}") from None

    def span_epoch(self, segment_id: int, high: int) -> int:
        """The last epoch not after ``high`` that holds the segment (PDP-24's stream-cut span)."""
        return min(self._last[segment_id], max(high, self._first[segment_id]))

    def successors(self, segment_id: int) -> list[SegmentRange]:
        """The segments of the epoch after the segment's last one that overlap it (none while it is active)."""
        last = self._last[segment_id]
        if last == self.latest_epoch:
            return []
        own = self._segments[segment_id]
        return [s for s in self.epochs[last + 1] if s.overlaps(own) and s.segment_id != segment_id]

    def predecessors(self, segment_id: int) -> list[SegmentRange]:
        """The segments of the epoch before the one that created the segment, over its keys (none in epoch 0)."""
        first = self._first[segment_id]
        if first == 0:
            return []
        own = self._segments[segment_id]
        return [s for s in self.epochs[first - 1] if s.overlaps(own)]

    def ancestors(self, segment_id: int) -> frozenset[int]:
        """Every segment the segment descends from, through predecessors of predecessors."""
        cached = self._ancestors.get(segment_id)
        if cached is None:
            found: set[int] = set()
            for parent in self.predecessors(segment_id):
                found.add(parent.segment_id)
                found |= self.ancestors(parent.segment_id)
            cached = self._ancestors[segment_id] = frozenset(found)
        return cached

    def is_active(self, segment_id: int) -> bool:
        return self._last[segment_id] == self.latest_epoch

    def head(self) -> StreamCut:
        """The cut at the very start of the stream: epoch 0's segments at offset 0."""
        return StreamCut.from_mapping({s.segment_id: 0 for s in self.epochs[0]})

    def tail(self, lengths: Mapping[int, int]) -> StreamCut:
        """The cut at the end of the active segments, given their current lengths."""
        return StreamCut.from_mapping({s.segment_id: lengths[s.segment_id] for s in self.epochs[-1]})

    def segments_between_epochs(self, low: int, high: int) -> list[SegmentRange]:
        """Every segment living in some epoch from ``low`` to ``high``, each once."""
        seen: dict[int, SegmentRange] = {}
        for epoch in self.epochs[max(low, 0):high + 1]:
            for segment in epoch:
                seen.setdefault(segment.segment_id, segment)
        return list(seen.values())
