"""Streams and scaling: epoch 0 splits the key space, scales keep a consistent history, successors/predecessors."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.ids import SegmentId
from reclaim.segments.stream_errors import (
    InvalidScaleError,
    StreamExistsError,
    StreamNotFoundError,
    StreamNotSealedError,
    StreamSealedError,
)
from reclaim.segments.stream_model import KeyRange, StreamHistory, StreamSegment, StreamState, initial_epoch, plan_scale
from reclaim.segments.streams import StreamController
from tests.support.segments import STREAM


def ids(segments: Iterable[StreamSegment]) -> list[str]:
    return [str(s.id) for s in segments]


def assert_consistent(history: StreamHistory) -> None:
    """Every epoch tiles [0, 1) exactly; numbers are unique per epoch; references point at fresh epochs."""
    for epoch in history.epochs:
        ranges = sorted(s.key_range for s in epoch.segments)
        assert ranges[0].start == 0.0 and ranges[-1].end == 1.0
        assert all(a.end == b.start for a, b in zip(ranges, ranges[1:], strict=False))
        assert len({s.id.number for s in epoch.segments}) == len(epoch.segments)
        reference = history.at(epoch.reference)
        assert not reference.is_duplicate and reference.epoch <= epoch.epoch
        for segment in epoch.segments:
            assert segment.id.epoch <= epoch.epoch
    for segment in history.all_segments():
        for successor in history.successors(segment.id):
            assert segment.id in [p.id for p in history.predecessors(successor.id)]


def test_create_stream_splits_the_key_space_evenly(controller: StreamController,
                                                   segments: ChunkedSegmentStorage) -> None:
    policy = RetentionPolicy(RetentionType.SIZE, LimitType.SIZE, 10, 1000)
    record = controller.create_stream("scope", "orders", 4, policy)
    assert record.qualified == STREAM and record.policy == policy and record.state is StreamState.ACTIVE
    active = controller.active_segments(STREAM)
    assert [s.key_range for s in active] == [KeyRange(0, 0.25), KeyRange(0.25, 0.5), KeyRange(0.5, 0.75),
                                             KeyRange(0.75, 1.0)]
    assert ids(active) == ["0.#epoch.0", "1.#epoch.0", "2.#epoch.0", "3.#epoch.0"]
    assert all(segments.exists(f"{STREAM}/{s.id}") for s in active)
    assert segments.get_info(f"{STREAM}/0.#epoch.0").stream == STREAM
    assert controller.get_stream(STREAM).policy == policy
    assert controller.create_stream("scope", "orders", 4).version == record.version  # a retry
    with pytest.raises(StreamExistsError):
        controller.create_stream("scope", "orders", 3)


def test_split_merge_and_several_epochs(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 2)
    s0, s1 = (s.id for s in controller.active_segments(STREAM))
    e1 = controller.scale(STREAM, [s0], [(0.0, 0.25), (0.25, 0.5)])  # split
    assert (e1.epoch, e1.reference) == (1, 1)
    assert ids(e1.segments) == ["2.#epoch.1", "3.#epoch.1", "1.#epoch.0"]
    s2, s3 = SegmentId(epoch=1, number=2), SegmentId(epoch=1, number=3)
    e2 = controller.scale(STREAM, [s3, s1], [(0.25, 1.0)])  # merge
    assert ids(e2.segments) == ["2.#epoch.1", "4.#epoch.2"]
    s4 = SegmentId(epoch=2, number=4)
    e3 = controller.scale(STREAM, [s2, s4], [(0.0, 0.6), (0.6, 1.0)])  # boundaries move
    assert ids(e3.segments) == ["5.#epoch.3", "6.#epoch.3"]

    history = controller.history(STREAM)
    assert [e.epoch for e in history.epochs] == [0, 1, 2, 3]
    assert_consistent(history)
    assert ids(controller.successors(STREAM, s0)) == ["2.#epoch.1", "3.#epoch.1"]
    assert ids(controller.successors(STREAM, s1)) == ["4.#epoch.2"]
    assert ids(controller.predecessors(STREAM, s4)) == ["3.#epoch.1", "1.#epoch.0"]
    assert ids(controller.successors(STREAM, s2)) == ["5.#epoch.3"]
    assert ids(controller.successors(STREAM, s4)) == ["5.#epoch.3", "6.#epoch.3"]
    assert ids(controller.predecessors(STREAM, SegmentId(epoch=3, number=5))) == ["2.#epoch.1", "4.#epoch.2"]
    assert controller.predecessors(STREAM, s0) == [] and controller.successors(STREAM, e3.segments[0].id) == []
    assert controller.key_range(STREAM, s1) == KeyRange(0.5, 1.0)
    assert history.span(s1) == (0, 1)
    assert ids(controller.segments_at(STREAM, 1)) == ["2.#epoch.1", "3.#epoch.1", "1.#epoch.0"]
    for sealed in (s0, s1, s2, s3, s4):
        assert controller.segments.get_info(controller.segment_name(STREAM, sealed)).sealed
    assert not any(controller.segments.get_info(controller.segment_name(STREAM, s.id)).sealed for s in e3.segments)


def test_a_completed_scale_retried_returns_its_epoch(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 1)
    first = controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.5), (0.5, 1.0)])
    again = controller.scale(STREAM, [SegmentId(0, 0).value], [(0.5, 1.0), (0.0, 0.5)])
    assert again == first and len(controller.history(STREAM).epochs) == 2


@pytest.mark.parametrize("seal, ranges, why", [
    ([SegmentId(0, 0)], [(0.0, 0.4)], "do not exactly cover"),
    ([SegmentId(0, 0)], [(0.0, 0.3), (0.3, 0.6)], "do not exactly cover"),
    ([SegmentId(0, 0)], [(0.0, 0.3), (0.2, 0.5)], "overlap"),
    ([SegmentId(0, 0)], [(0.0, 0.25), (0.3, 0.5)], "do not exactly cover"),
    ([SegmentId(0, 0), SegmentId(0, 0)], [(0.0, 0.5)], "twice"),
    ([SegmentId(0, 7)], [(0.0, 0.5)], "not active"),
    ([SegmentId(0, 0)], [(0.5, 0.5)], "empty"),
    ([SegmentId(0, 0)], [(-0.5, 0.5)], "inside"),
    ([], [(0.0, 0.5)], "at least one"),
])
def test_bad_scales_are_rejected_and_change_nothing(controller: StreamController, seal: list[SegmentId],
                                                    ranges: list[tuple[float, float]], why: str) -> None:
    controller.create_stream("scope", "orders", 2)
    with pytest.raises(InvalidScaleError, match=why):
        controller.scale(STREAM, seal, ranges)
    assert len(controller.history(STREAM).epochs) == 1
    assert controller.store.get_operation(STREAM) is None


def test_non_adjacent_segments_scale_when_ranges_cover_them(controller: StreamController) -> None:
    controller.create_stream("scope", "orders", 4)
    epoch = controller.scale(STREAM, [SegmentId(0, 0), SegmentId(0, 2)], [(0.0, 0.25), (0.5, 0.6), (0.6, 0.75)])
    assert_consistent(controller.history(STREAM))
    assert len(epoch.segments) == 5


def test_seal_and_delete_stream(controller: StreamController, sink: RecordingGarbageSink) -> None:
    controller.create_stream("scope", "orders", 2)
    for segment in controller.active_segments(STREAM):
        controller.append(controller.segment_name(STREAM, segment.id), b"x" * 20)
    controller.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    with pytest.raises(StreamNotSealedError):
        controller.delete_stream(STREAM)
    assert controller.seal_stream(STREAM).state is StreamState.SEALED
    assert all(controller.segments.get_info(controller.segment_name(STREAM, s.id)).sealed
               for s in controller.active_segments(STREAM))
    with pytest.raises(StreamSealedError):
        controller.scale(STREAM, [SegmentId(1, 2)], [(0.0, 0.25)])
    with pytest.raises(StreamSealedError):
        controller.create_txn(STREAM)
    names = [controller.segment_name(STREAM, s.id) for s in controller.history(STREAM).all_segments()]
    chunks = [c.name for n in names for c in controller.segments.layout(n)]
    controller.delete_stream(STREAM)
    controller.delete_stream(STREAM)  # harmless
    assert not any(controller.segments.exists(n) for n in names)
    assert sorted(sink.names()) == sorted(chunks)
    with pytest.raises(StreamNotFoundError):
        controller.history(STREAM)
    controller.create_stream("scope", "orders", 1)  # the name may be reused
    assert ids(controller.active_segments(STREAM)) == ["0.#epoch.0"]


@st.composite
def scale_steps(draw: st.DrawFn) -> list[tuple[int, int, float]]:
    """(segment index, how many neighbours to merge, split point) per scale."""
    return draw(st.lists(st.tuples(st.integers(0, 50), st.integers(1, 3), st.floats(0.05, 0.95)),
                         min_size=1, max_size=12))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), scale_steps())
def test_random_scale_sequences_keep_a_consistent_history(initial: int, steps: list[tuple[int, int, float]]) -> None:
    history = StreamHistory([initial_epoch(initial)])
    for index, width, fraction in steps:
        active = sorted(history.active.segments, key=lambda s: s.key_range)
        start = index % len(active)
        chosen = active[start:start + width]
        lo, hi = chosen[0].key_range.start, chosen[-1].key_range.end
        cut = lo + (hi - lo) * fraction
        ranges = [(lo, hi)] if width > 1 and fraction < 0.5 else [(lo, cut), (cut, hi)]
        if cut in (lo, hi):
            continue
        epoch = plan_scale(history, [s.id for s in chosen], ranges)
        history = StreamHistory([*history.epochs, epoch])
        assert_consistent(history)
        for sealed in chosen:
            assert {s.id for s in history.successors(sealed.id)} <= set(epoch.segment_ids)
