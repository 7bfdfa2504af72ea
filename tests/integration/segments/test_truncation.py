"""Truncating a stream at a cut (PDP-19): segments before it deleted, segments in it cut, never backwards."""

from __future__ import annotations

import pytest

from reclaim.retention.errors import CutProblem, InvalidCutError
from reclaim.schemas.streams import StreamCut
from reclaim.segments.garbage import RecordingGarbageSink
from reclaim.segments.ids import SegmentId
from reclaim.segments.stream_errors import StreamBusyError, StreamNotFoundError
from reclaim.segments.stream_plans import Operation, SealPlan
from reclaim.segments.streams import StreamController
from tests.support.segments import STREAM

S0, S1 = SegmentId(0, 0), SegmentId(0, 1)
S2, S3 = SegmentId(1, 2), SegmentId(1, 3)


def name(segment: SegmentId) -> str:
    return f"{STREAM}/{segment.number}.#epoch.{segment.epoch}"


def cut(**offsets: int) -> StreamCut:
    ids = {"s0": S0, "s1": S1, "s2": S2, "s3": S3}
    return StreamCut.from_mapping({ids[k].value: v for k, v in offsets.items()})


@pytest.fixture
def scaled(controller: StreamController) -> StreamController:
    """s0 [0, .5) split into s2 [0, .25) and s3 [.25, .5) at epoch 1; s1 [.5, 1) carries over. 20 bytes each."""
    controller.create_stream("scope", "orders", 2)
    for segment in (S0, S1):
        controller.append(name(segment), b"a" * 20)
    controller.scale(STREAM, [S0], [(0.0, 0.25), (0.25, 0.5)])
    for segment in (S2, S3):
        controller.append(name(segment), b"b" * 20)
    return controller


def test_truncate_deletes_segments_before_the_cut_and_cuts_the_ones_in_it(scaled: StreamController,
                                                                       sink: RecordingGarbageSink) -> None:
    assert scaled.truncate(STREAM, cut(s1=12, s2=5, s3=0)) is True
    assert not scaled.segments.exists(name(S0))
    assert scaled.read_all(name(S1)) == b"a" * 8
    assert scaled.read_all(name(S2)) == b"b" * 15
    assert scaled.read_all(name(S3)) == b"b" * 20
    assert scaled.head(STREAM) == cut(s1=12, s2=5, s3=0)
    handed_over = {chunk.segment for chunk in sink.collected}
    assert name(S0) in handed_over and name(S1) in handed_over


def test_truncating_again_at_or_behind_the_head_is_a_no_op(scaled: StreamController,
                                                           sink: RecordingGarbageSink) -> None:
    assert scaled.truncate(STREAM, cut(s1=12, s2=5, s3=4))
    collected = len(sink.collected)
    assert scaled.truncate(STREAM, cut(s1=12, s2=5, s3=4)) is False  # a re-delivered event
    assert scaled.truncate(STREAM, cut(s0=3, s1=2)) is False  # behind the head
    assert scaled.truncate(STREAM, cut(s1=15, s2=1, s3=9)) is False  # ahead on some keys, behind on others
    assert len(sink.collected) == collected
    assert scaled.head(STREAM) == cut(s1=12, s2=5, s3=4)
    assert scaled.truncate(STREAM, cut(s1=16, s2=5, s3=4)) is True
    assert scaled.read_all(name(S1)) == b"a" * 4


def test_truncation_in_two_steps_equals_one(scaled: StreamController) -> None:
    assert scaled.truncate(STREAM, cut(s0=10, s1=10))
    assert scaled.read_all(name(S0)) == b"a" * 10
    assert scaled.truncate(STREAM, cut(s1=10, s2=0, s3=3))
    assert not scaled.segments.exists(name(S0))
    assert scaled.read_all(name(S3)) == b"b" * 17


@pytest.mark.parametrize(("bad", "problem"), [
    (cut(s0=1), CutProblem.GAP),
    (cut(s0=1, s1=1, s2=1), CutProblem.OVERLAP),
    (cut(s0=1, s1=21), CutProblem.BAD_OFFSET),
    (StreamCut.from_mapping({SegmentId(7, 9).value: 0}), CutProblem.UNKNOWN_SEGMENT),
])
def test_a_cut_that_does_not_fit_the_stream_is_refused(scaled: StreamController, bad: StreamCut,
                                                        problem: CutProblem) -> None:
    with pytest.raises(InvalidCutError) as caught:
        scaled.truncate(STREAM, bad)
    assert caught.value.problem is problem
    assert scaled.head(STREAM) == StreamCut()
    assert scaled.store.get_operation(STREAM) is None


def test_unknown_stream(controller: StreamController) -> None:
    with pytest.raises(StreamNotFoundError):
        controller.truncate("scope/nothing", cut(s0=0, s1=0))


def test_truncation_waits_for_another_operation_of_the_stream(scaled: StreamController) -> None:
    with scaled.store.transaction() as t:  # an operation in flight, as another controller would leave it
        t.put_operation(Operation(STREAM, "other", SealPlan(), scaled.ops.clock()))
    with pytest.raises(StreamBusyError) as caught:
        scaled.truncate(STREAM, cut(s1=1, s2=1, s3=1))
    assert caught.value.retryable
