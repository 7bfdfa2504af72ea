"""The subscribers' lower bound (PDP-47): the latest cut that every subscriber's cut is at or after."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from reclaim.retention.cuts import Position, position_at, positions
from reclaim.retention.topology import SegmentRange, Topology
from reclaim.schemas.streams import StreamCut


def _earlier(one: Position, other: Position) -> Position:
    """The earlier of two positions over the same keys: the older segment, or the smaller offset in one segment."""
    if one[0].segment_id != other[0].segment_id:
        return one if one[0].segment_id < other[0].segment_id else other
    return one if one[1] <= other[1] else other


def lower_bound(topology: Topology, cuts: Iterable[StreamCut]) -> StreamCut:
    """The greatest cut that each of ``cuts`` is at or after; the empty cut when there are none.

    Key range by key range, the bound takes the earliest position of any cut there; each segment it
    takes keeps the smallest offset. This is Pravega's ``computeSubscribersLowerBound`` read as a
    function of the key space, so it gives its results without depending on the order of the cuts:
    a segment in two cuts keeps the smaller offset; a reached segment evicts its successors (it is
    older over their keys); a segment whose predecessor is in the bound is left out (the predecessor
    is earlier); an unreached (-1) segment stays only over keys its predecessors leave uncovered.
    """
    found = [positions(topology, cut) for cut in cuts]
    if not found:
        return StreamCut()
    points = sorted({p for one in found for s in one for p in (s.start, s.end)})
    chosen: dict[int, int] = {}
    for low, high in zip(points, points[1:], strict=False):
        earliest = _earliest_at(found, (low + high) / 2)
        if earliest is not None:
            segment, offset = earliest
            chosen[segment.segment_id] = min(offset, chosen.get(segment.segment_id, offset))
    return StreamCut.from_mapping(chosen)


def _earliest_at(found: Sequence[dict[SegmentRange, int]], key: float) -> Position | None:
    earliest: Position | None = None
    for one in found:
        here = position_at(one, key)
        if here is not None:
            earliest = here if earliest is None else _earlier(earliest, here)
    return earliest
