"""Stream cuts against a topology (PDP-19, PDP-24): validation, comparison across epochs, sizes between cuts."""

from __future__ import annotations

import enum
from collections.abc import Mapping

from reclaim.retention.errors import CutBehindError, CutProblem, InvalidCutError
from reclaim.retention.topology import SegmentRange, Topology
from reclaim.schemas.streams import StreamCut

#: The offset of a segment a cut has not reached yet: its predecessors are read to their end.
UNREACHED = -1


class CutComparison(enum.Enum):
    """Where one cut lies against another."""

    BEFORE = "before"
    EQUAL_OR_AFTER = "equal-or-after"
    OVERLAPS = "overlaps"


def positions(topology: Topology, cut: StreamCut) -> dict[SegmentRange, int]:
    """The cut's segments with their offsets; the empty cut is the head of the stream."""
    offsets: Mapping[int, int] = cut.as_dict() if len(cut) else topology.head().as_dict()
    return {topology.segment(segment_id): offset for segment_id, offset in offsets.items()}


#: A cut's position over some keys: a segment and the offset in it.
Position = tuple[SegmentRange, int]


def position_at(found: Mapping[SegmentRange, int], key: float) -> Position | None:
    """The cut's position over routing key ``key``: the reached segment there, else the unreached one."""
    best: Position | None = None
    for segment, offset in found.items():
        if segment.start <= key < segment.end and (best is None or best[1] == UNREACHED and offset != UNREACHED):
            best = (segment, offset)
    return best


def compare(topology: Topology, first: StreamCut, second: StreamCut) -> CutComparison:
    """Compare ``first`` with ``second`` key range by key range: the same segment by offset, others by id.

    Over the same keys the segment with the higher id is the later one (it was created in a later
    epoch). Where a cut holds both a reached segment and its unreached (-1) successor, the reached
    one is its position there. ``first`` is EQUAL_OR_AFTER when no part of it is earlier, BEFORE
    when no part is later and some part earlier, OVERLAPS when some parts are later and some earlier.
    """
    one, two = positions(topology, first), positions(topology, second)
    points = sorted({p for s in (*one, *two) for p in (s.start, s.end)})
    later = earlier = False
    for low, high in zip(points, points[1:], strict=False):
        middle = (low + high) / 2
        mine, theirs = position_at(one, middle), position_at(two, middle)
        if mine is None or theirs is None:
            continue
        if mine[0].segment_id == theirs[0].segment_id:
            order = (mine[1] > theirs[1]) - (mine[1] < theirs[1])
        else:
            order = 1 if mine[0].segment_id > theirs[0].segment_id else -1
        later = later or order > 0
        earlier = earlier or order < 0
    if earlier and not later:
        return CutComparison.BEFORE
    if earlier and later:
        return CutComparison.OVERLAPS
    return CutComparison.EQUAL_OR_AFTER


def is_at_or_after(topology: Topology, cut: StreamCut, reference: StreamCut) -> bool:
    return compare(topology, cut, reference) is CutComparison.EQUAL_OR_AFTER


def validate(topology: Topology, cut: StreamCut) -> None:
    """Raise :class:`InvalidCutError` unless ``cut`` is a position the stream can be at.

    No offset is below -1, and none is beyond its segment's length where the segment is sealed (its
    final length is known; an active segment's current length is checked by whoever knows it). Its
    reached segments must not overlap each other; every unreached (-1) segment must be newer
    than each reached segment over its keys; together they cover the key space [0, 1).
    """
    found = positions(topology, cut)
    _check_offsets(topology, found)
    reached = sorted((s for s, o in found.items() if o >= 0), key=lambda s: s.start)
    unreached = [s for s, o in found.items() if o == UNREACHED]
    for before, after in zip(reached, reached[1:], strict=False):
        if before.end > after.start:
            raise InvalidCutError(CutProblem.OVERLAP, f"segments {before.segment_id} and {after.segment_id}")
    for future in unreached:
        newer = [s.segment_id for s in reached if s.overlaps(future) and s.segment_id > future.segment_id]
        if newer:
            raise InvalidCutError(CutProblem.UNREACHED_BEFORE_REACHED,
                                  f"segment {future.segment_id} is older than {newer[0]}")
    gap = _first_gap([*reached, *unreached])
    if gap is not None:
        raise InvalidCutError(CutProblem.GAP, f"keys [{gap[0]}, {gap[1]}) are missing")
    _check_causal(topology, found)


def held_to_sealed_lengths(topology: Topology, cut: StreamCut) -> StreamCut:
    """``cut`` with each offset beyond its segment's sealed length lowered to that length; else ``cut`` itself.

    A cut past a segment's end and one at its end say the same: the whole segment was read. Only the
    sealed segments' final lengths are known here, so an active segment's offset is left as it is.

    Examples
    --------
    >>> t = Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)]], {1: 80})
    >>> held_to_sealed_lengths(t, StreamCut.from_mapping({0: 500, 1: 100})).as_dict()
    {0: 500, 1: 80}
    """
    offsets = cut.as_dict()
    held = {segment: min(offset, topology.sealed_lengths.get(segment, offset)) for segment, offset in offsets.items()}
    return cut if held == offsets else StreamCut.from_mapping(held)


def _check_offsets(topology: Topology, found: Mapping[SegmentRange, int]) -> None:
    for segment, offset in sorted(found.items(), key=lambda item: item[0].segment_id):
        if offset < UNREACHED:
            raise InvalidCutError(CutProblem.BAD_OFFSET, f"offset {offset} of segment {segment.segment_id}")
        sealed = topology.sealed_lengths.get(segment.segment_id)
        if sealed is not None and offset > sealed:
            raise InvalidCutError(CutProblem.BAD_OFFSET, f"offset {offset} is beyond sealed segment "
                                                         f"{segment.segment_id}'s length {sealed}")


def _check_causal(topology: Topology, found: Mapping[SegmentRange, int]) -> None:
    """A reader starts a segment only after every segment it descends from is read to its end.

    So no reached segment of the cut descends from another segment of it. (An unreached one may:
    it waits for the predecessors still being read.)
    """
    for segment, offset in found.items():
        if offset == UNREACHED:
            continue
        ancestors = topology.ancestors(segment.segment_id)
        for other in found:
            if other.segment_id in ancestors:
                raise InvalidCutError(CutProblem.NOT_CAUSAL,
                                      f"segment {segment.segment_id} descends from segment {other.segment_id}")


def _first_gap(segments: list[SegmentRange]) -> tuple[float, float] | None:
    covered = 0.0
    for segment in sorted(segments, key=lambda s: s.start):
        if segment.start > covered:
            return covered, segment.start
        covered = max(covered, segment.end)
    return None if covered >= 1.0 else (covered, 1.0)


def check_advances(topology: Topology, cut: StreamCut, previous: StreamCut | None, what: str) -> None:
    """Raise :class:`CutBehindError` unless ``cut`` is at or after ``previous`` (PDP-47: cuts only advance)."""
    if previous is None:
        return
    relation = compare(topology, cut, previous)
    if relation is CutComparison.BEFORE:
        raise CutBehindError(f"stream cut is before the {what}")
    if relation is CutComparison.OVERLAPS:
        raise CutBehindError(f"stream cut overlaps the {what}: it is before it over some keys")


def _span(topology: Topology, cut: StreamCut) -> dict[SegmentRange, int]:
    """Each segment of the cut with the last epoch it lives in up to the cut's newest epoch."""
    found = positions(topology, cut)
    high = max(s.epoch for s in found)
    return {s: topology.span_epoch(s.segment_id, high) for s in found}


def segments_between(topology: Topology, start: StreamCut, end: StreamCut) -> list[SegmentRange]:
    """Segments holding data between ``start`` and ``end`` (both included where they are in a cut).

    A segment is between when no segment of ``start`` over its keys is newer and no segment of
    ``end`` over its keys is older; epochs wholly between the two cuts contribute all their segments.
    """
    span_from, span_to = _span(topology, start), _span(topology, end)
    from_low, from_high = min(span_from.values()), max(span_from.values())
    to_low, to_high = min(span_to.values()), max(span_to.values())
    chosen: dict[int, SegmentRange] = {}
    for index in range(from_low, to_high + 1):
        for segment in topology.epochs[index]:
            if segment.segment_id in chosen:
                continue
            if from_high <= index <= to_low or (
                    all(s.segment_id <= segment.segment_id for s in span_from if s.overlaps(segment))
                    and all(segment.segment_id <= s.segment_id for s in span_to if s.overlaps(segment))):
                chosen[segment.segment_id] = segment
    return list(chosen.values())


def size_between(topology: Topology, start: StreamCut, end: StreamCut) -> int:
    """Bytes between two cuts (Pravega's ``sizeBetween``).

    Per segment between them: in both cuts ``end - start``; only in ``end`` its offset there; only in
    ``start`` its sealed length minus the offset there; in neither its sealed length. An unreached
    (-1) offset counts as 0, and an unknown sealed length as 0.
    """
    begin = start.as_dict() if len(start) else {}
    finish = end.as_dict()
    total = 0
    for segment in segments_between(topology, start, end):
        sealed = max(topology.sealed_lengths.get(segment.segment_id, 0), 0)
        at_start = max(begin.get(segment.segment_id, 0), 0)
        if segment.segment_id in finish:
            total += max(finish[segment.segment_id], 0) - (at_start if segment.segment_id in begin else 0)
        elif segment.segment_id in begin:
            total += sealed - at_start
        else:
            total += sealed
    return total


def size_till(topology: Topology, cut: StreamCut) -> int:
    """Bytes from the start of the stream to ``cut``."""
    return size_between(topology, StreamCut(), cut)
