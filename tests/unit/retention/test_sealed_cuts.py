"""Cuts kept from before a segment sealed, held to its sealed length: no refused truncation, no stuck subscriber."""

from __future__ import annotations

from dataclasses import replace

import pytest

from reclaim.retention.cuts import held_to_sealed_lengths
from reclaim.retention.errors import InvalidCutError
from reclaim.retention.stream_state import Rejection, StreamRetentionState
from reclaim.retention.topology import Topology
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    TruncationReason,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import TopologyState
from reclaim.segments.truncation import plan_truncation
from tests.support.topologies import topology_record

STREAM = "scope/orders"
S2 = (1 << 32) | 2
TWO = [[(0, 0.0, 0.5), (1, 0.5, 1.0)]]
#: Epoch 1: segment 1 sealed at 80 bytes and replaced by S2 over its keys.
SCALED = [*TWO, [(0, 0.0, 0.5), (S2, 0.5, 1.0)]]


def at(**offsets: int) -> StreamCut:
    """``at(s0=10, s1=80, s2=-1)``."""
    return StreamCut.from_mapping({{"s0": 0, "s1": 1, "s2": S2}[name]: offset for name, offset in offsets.items()})


def stream(policy: RetentionPolicy) -> StreamRetentionState:
    """Two active segments, ``policy``, and the subscriber "billing"."""
    state = StreamRetentionState(STREAM)
    assert state.apply(topology_record(STREAM, Topology.of(TWO)), 0) is None
    assert state.apply(StreamConfig(STREAM, policy, 1), 0) is None
    assert state.apply(SubscriberChange(STREAM, "billing", 1, SubscriberChangeType.ADD, 1), 0) is None
    return state


def publish(state: StreamRetentionState, cut: StreamCut) -> Rejection | None:
    return state.apply(SubscriberCut(STREAM, "billing", 1, cut, 1), 0)


def seal(state: StreamRetentionState, epochs: list[list[tuple[int, float, float]]], sealed: dict[int, int],
         published_at: int, whole_stream: bool = False) -> None:
    record = topology_record(STREAM, Topology.of(epochs, sealed), published_at)
    assert state.apply(replace(record, state=TopologyState.SEALED) if whole_stream else record, 0) is None


def controller_accepts(cut: StreamCut, epochs: list[list[tuple[int, float, float]]],
                       lengths: dict[int, int]) -> bool:
    """Whether the controller's planner takes a truncation at ``cut`` (segments at their current ``lengths``)."""
    try:
        plan_truncation(Topology.of(epochs, lengths), None, cut, lengths)
    except InvalidCutError:
        return False
    return True


def test_a_cut_is_held_to_its_sealed_segments_length_and_active_segments_are_left_alone() -> None:
    topology = Topology.of(SCALED, {1: 80})
    assert held_to_sealed_lengths(topology, at(s0=500, s1=100)) == at(s0=500, s1=80)
    assert held_to_sealed_lengths(topology, at(s0=5, s1=80, s2=-1)) == at(s0=5, s1=80, s2=-1)
    untouched = at(s0=5, s1=70)
    assert held_to_sealed_lengths(topology, untouched) is untouched
    assert held_to_sealed_lengths(topology, StreamCut()) == StreamCut()


def test_a_cut_accepted_past_the_end_of_a_segment_that_then_seals_shorter_neither_truncates_there_nor_blocks(
) -> None:
    # The subscriber's cut names offset 100 of segment 1 while it is active (its length is the
    # controller's to know); the segment seals at 80 in a scale. Kept as it was, the bound truncated
    # at offset 100, which the controller refuses, and the subscriber's cut at the sealed end was
    # refused as CUT_BEHIND until it was removed and added again.
    state = stream(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, LONG_MAX))
    assert publish(state, at(s0=10, s1=100)) is None
    seal(state, SCALED, {1: 80}, published_at=2)
    assert state.apply(StreamCutRecord(STREAM, at(s0=30, s2=5), 1_000, 115), 1_000) is None
    event = state.decide(2_000)
    assert event is not None and controller_accepts(event.cut, SCALED, {0: 30, 1: 80, S2: 5})
    assert event.cut == at(s0=10, s1=80) and event.reason is TruncationReason.CONSUMPTION
    assert publish(state, at(s0=20, s1=80)) is None  # read to the sealed end: accepted
    behind = publish(state, at(s0=20, s1=70))  # genuinely behind what it said: still refused
    assert behind is not None and behind.kind is RejectKind.CUT_BEHIND
    assert publish(state, at(s0=25, s2=3)) is None
    assert state.registry.active_cuts() == [at(s0=25, s2=3)]


def test_a_truncation_decided_past_a_segments_sealed_end_is_decided_again_at_that_end() -> None:
    # A SIZE bound is emitted without a recorded cut at or after it, so a claim past the end of an active
    # segment reaches the controller, which refuses it. After the stream seals, the job truncates at the
    # sealed end, even though it equals the refused cut held there (and across a restore).
    state = stream(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, LONG_MAX))
    assert publish(state, at(s0=100, s1=10)) is None
    assert state.apply(StreamCutRecord(STREAM, at(s0=70, s1=60), 1_000, 130), 1_000) is None
    refused = state.decide(2_000)
    assert refused is not None and refused.cut == at(s0=100, s1=10)
    assert not controller_accepts(refused.cut, TWO, {0: 70, 1: 60})
    seal(state, TWO, {0: 80, 1: 60}, published_at=2, whole_stream=True)
    restored = StreamRetentionState.from_bytes(state.to_bytes())
    event = restored.decide(3_000)
    assert event is not None and controller_accepts(event.cut, TWO, {0: 80, 1: 60})
    assert event.cut == at(s0=80, s1=10)
    assert restored.decide(4_000) is None  # emitted once
    assert publish(restored, at(s0=80, s1=60)) is None  # read to the end of the sealed stream: accepted
    assert restored.apply(StreamCutRecord(STREAM, at(s0=80, s1=60), 5_000, 140), 5_000) is None
    last = restored.decide(6_000)
    assert last is not None and last.cut == at(s0=80, s1=60)


def test_a_recorded_cut_past_a_segments_sealed_end_is_held_there_too() -> None:
    state = stream(RetentionPolicy(RetentionType.TIME, None, 0, 60_000))
    assert state.apply(StreamCutRecord(STREAM, at(s0=10, s1=100), 1_000, 110), 1_000) is None
    seal(state, TWO, {0: 20, 1: 80}, published_at=2, whole_stream=True)
    # The stream's tail at its seal follows the held cut rather than being refused as behind it.
    assert state.apply(StreamCutRecord(STREAM, at(s0=20, s1=80), 2_000, 100), 2_000) is None
    assert [r.cut for r in state.retention.records] == [at(s0=10, s1=80), at(s0=20, s1=80)]
    event = state.decide(70_000)
    assert event is not None and controller_accepts(event.cut, TWO, {0: 20, 1: 80})


def test_a_cut_past_a_sealed_end_that_arrives_after_the_seal_is_refused_and_holds_nothing() -> None:
    state = stream(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, LONG_MAX))
    assert publish(state, at(s0=10, s1=40)) is None
    seal(state, SCALED, {1: 80}, published_at=2)
    late = publish(state, at(s0=10, s1=100))
    assert late is not None and late.kind is RejectKind.INVALID_CUT
    assert state.registry.active_cuts() == [at(s0=10, s1=40)]
    assert publish(state, at(s0=10, s1=80)) is None


@pytest.mark.parametrize("refused", [True, False])
def test_the_refused_mark_survives_a_restore(refused: bool) -> None:
    state = stream(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, LONG_MAX))
    state.last_emitted, state.last_emitted_refused = at(s0=1, s1=1), refused
    assert StreamRetentionState.from_bytes(state.to_bytes()).last_emitted_refused is refused
