"""Planning a stream's truncation at a cut (PDP-19): which segments go whole, which are cut, and when it is a no-op."""

from __future__ import annotations

from collections.abc import Mapping

from reclaim.retention.cuts import is_at_or_after, segments_between, validate
from reclaim.retention.errors import CutProblem, InvalidCutError
from reclaim.retention.topology import Topology
from reclaim.schemas.streams import StreamCut
from reclaim.segments.stream_model import StreamHistory
from reclaim.segments.stream_plans import TruncatePlan


def topology_of_history(history: StreamHistory, sealed_lengths: Mapping[int, int]) -> Topology:
    """Retention's view of a controller history."""
    epochs = [[(s.id.value, s.key_range.start, s.key_range.end) for s in epoch.segments] for epoch in history.epochs]
    return Topology.of(epochs, sealed_lengths)


def plan_truncation(topology: Topology, head: StreamCut | None, cut: StreamCut,
                    lengths: Mapping[int, int]) -> TruncatePlan | None:
    """The plan that moves the stream's head to ``cut``, or None when the head is at or past it already.

    Segments between the head and the cut that are not in the cut lie wholly before it and are
    deleted; segments of the cut are truncated at their offsets. A cut that is not at or after the
    head (behind it, or behind on some keys) is a no-op too: truncation never goes back.

    Raises
    ------
    InvalidCutError
        When ``cut`` is not a position of this stream, or names an offset beyond a segment's length
        (``lengths`` holds the current length of each segment of the cut).
    """
    validate(topology, cut)
    for segment, offset in cut.as_dict().items():
        if offset > lengths.get(segment, offset):
            raise InvalidCutError(CutProblem.BAD_OFFSET, f"offset {offset} is beyond segment {segment}'s length "
                                                         f"{lengths[segment]}")
    start = head if head is not None else StreamCut()
    # The empty cut is the very start of the stream: never a reason to delete anything.
    if cut == start or not len(cut) or not is_at_or_after(topology, cut, start):
        return None
    in_cut = cut.as_dict()
    doomed = tuple(sorted(s.segment_id for s in segments_between(topology, start, cut)
                          if s.segment_id not in in_cut))
    trimmed = tuple((segment, offset) for segment, offset in sorted(in_cut.items()) if offset > 0)
    if not doomed and not trimmed and head is None:
        return None  # a cut at the very start of a stream never truncated: nothing to do
    return TruncatePlan(tuple(sorted(in_cut.items())), doomed, trimmed)



