"""One stream's retention state: inputs folded in, refusals with reasons, decisions only when the cut advances."""

from __future__ import annotations

from reclaim.retention.stream_state import StreamRetentionState
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
from tests.support.topologies import S4, cut, five_epochs, topology_record

STREAM = "scope/orders"
CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, LONG_MAX)


def two_segments(a: int, b: int) -> StreamCut:
    return StreamCut.from_mapping({0: a, 1: b})


def state_with(policy: RetentionPolicy = CONSUMPTION) -> StreamRetentionState:
    state = StreamRetentionState(STREAM)
    assert state.apply(topology_record(STREAM, Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)]])), 0) is None
    assert state.apply(StreamConfig(STREAM, policy, 1), 0) is None
    return state


def add(state: StreamRetentionState, name: str, generation: int = 1) -> None:
    assert state.apply(SubscriberChange(STREAM, name, generation, SubscriberChangeType.ADD, 1), 0) is None


def publish(state: StreamRetentionState, name: str, at: StreamCut, generation: int = 1):  # type: ignore[no-untyped-def]
    return state.apply(SubscriberCut(STREAM, name, generation, at, 1), 0)


def record(state: StreamRetentionState, at: StreamCut, when_ms: int) -> None:
    size = sum(at.as_dict().values())
    assert state.apply(StreamCutRecord(STREAM, at, when_ms, size), when_ms) is None


def test_two_subscribers_truncate_at_their_common_cut_once() -> None:
    state = state_with()
    add(state, "billing")
    add(state, "audit")
    assert publish(state, "billing", two_segments(40, 60)) is None
    assert publish(state, "audit", two_segments(70, 30)) is None
    record(state, two_segments(100, 100), 1000)
    event = state.decide(2000)
    assert event is not None and event.cut == two_segments(40, 30) and event.reason is TruncationReason.CONSUMPTION
    assert state.decide(3000) is None  # nothing new: no second event


def test_cut_waits_for_the_slow_subscriber_then_moves_when_it_is_removed() -> None:
    state = state_with()
    add(state, "fast")
    add(state, "slow")
    publish(state, "fast", two_segments(10, 10))
    publish(state, "slow", two_segments(5, 5))
    record(state, two_segments(100, 100), 1000)
    assert state.decide(1000).cut == two_segments(5, 5)  # type: ignore[union-attr]
    publish(state, "fast", two_segments(90, 90))
    assert state.decide(1001) is None  # waits for "slow"
    assert state.apply(SubscriberChange(STREAM, "slow", 2, SubscriberChangeType.REMOVE, 2), 0) is None
    assert state.decide(1002).cut == two_segments(90, 90)  # type: ignore[union-attr]


def test_a_max_size_limit_truncates_past_a_stalled_subscriber() -> None:
    state = state_with(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 100))
    add(state, "stalled")
    publish(state, "stalled", two_segments(0, 0))
    for i in range(1, 6):
        record(state, two_segments(50 * i, 50 * i), 1000 * i)
    event = state.decide(6000)
    # 500 bytes recorded; keeping at most 100 means the entry at 400 (200, 200).
    assert event is not None and event.cut == two_segments(200, 200) and event.reason is TruncationReason.SIZE


def test_a_min_time_limit_holds_data_back_until_it_is_old_enough() -> None:
    state = state_with(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 60_000, LONG_MAX))
    add(state, "reader")
    publish(state, "reader", two_segments(80, 80))
    record(state, two_segments(50, 50), 1_000)
    assert state.decide(30_000) is None  # the only entry is 29 s old: truncating would keep less than 60 s
    event = state.decide(61_001)
    assert event is not None and event.cut == two_segments(50, 50) and event.reason is TruncationReason.TIME


def test_plain_time_retention_without_subscribers() -> None:
    state = state_with(RetentionPolicy(RetentionType.TIME, None, 10_000))
    record(state, two_segments(10, 10), 0)
    record(state, two_segments(20, 20), 5_000)
    record(state, two_segments(30, 30), 10_000)
    event = state.decide(15_000)
    assert event is not None and event.cut == two_segments(20, 20)
    assert [r.cut for r in state.retention.records] == [two_segments(30, 30)]  # entries at or before it dropped


def test_subscribers_do_not_hold_back_time_retention_once_the_policy_leaves_consumption() -> None:
    # PDP-47: after a move from consumption to time retention, subscribers' cuts "won't impact working
    # of Time/Space based retention policy": the stream keeps 10 s, not what a lagging reader left.
    state = state_with()
    add(state, "lagging")
    publish(state, "lagging", two_segments(5, 5))
    assert state.apply(StreamConfig(STREAM, RetentionPolicy(RetentionType.TIME, None, 10_000), 2), 0) is None
    record(state, two_segments(10, 10), 0)
    record(state, two_segments(20, 20), 5_000)
    record(state, two_segments(30, 30), 10_000)
    event = state.decide(15_000)
    assert event is not None and event.cut == two_segments(20, 20) and event.reason is TruncationReason.TIME


def test_consumption_keeps_everything_until_a_subscriber_publishes_a_cut() -> None:
    # PDP-47: without subscriber cuts "the Stream size can grow unbounded": a subscriber that has not
    # reported yet loses nothing, and the first cut it publishes is where truncation starts.
    state = state_with()
    record(state, two_segments(10, 10), 1_000)
    assert state.decide(2_000) is None  # no subscriber at all
    add(state, "late")
    record(state, two_segments(20, 20), 3_000)
    assert state.decide(4_000) is None  # subscribed, but silent
    publish(state, "late", two_segments(15, 15))
    event = state.decide(5_000)
    assert event is not None and event.cut == two_segments(15, 15) and event.reason is TruncationReason.CONSUMPTION


def test_refusals_name_their_kind_and_change_nothing() -> None:
    state = state_with()
    rejection = publish(state, "ghost", two_segments(1, 1))
    assert rejection is not None and rejection.kind is RejectKind.UNKNOWN_SUBSCRIBER and rejection.subscriber == "ghost"
    add(state, "billing", 2)
    assert publish(state, "billing", two_segments(1, 1), generation=1).kind is RejectKind.STALE_GENERATION
    assert publish(state, "billing", two_segments(1, 1), 3).kind is RejectKind.GENERATION_AHEAD
    assert publish(state, "billing", StreamCut.from_mapping({0: 1}), 2).kind is RejectKind.INVALID_CUT
    assert publish(state, "billing", two_segments(9, 9), 2) is None
    behind = publish(state, "billing", two_segments(8, 9), 2)
    assert behind is not None and behind.kind is RejectKind.CUT_BEHIND
    assert behind.reason == "stream cut is before the subscriber's previous cut"
    overlapping = publish(state, "billing", two_segments(10, 8), 2)
    assert overlapping is not None and overlapping.kind is RejectKind.CUT_BEHIND
    assert overlapping.reason == "stream cut overlaps the subscriber's previous cut: it is before it over some keys"
    stale = state.apply(SubscriberChange(STREAM, "billing", 1, SubscriberChangeType.REMOVE, 1), 0)
    assert stale is not None and stale.kind is RejectKind.STALE_GENERATION
    bad_policy = state.apply(StreamConfig(STREAM, RetentionPolicy(RetentionType.SIZE), 5), 0)
    assert bad_policy is not None and bad_policy.kind is RejectKind.INVALID_POLICY
    assert state.registry.active_cuts() == [two_segments(9, 9)]
    assert state.config is not None and state.config.policy == CONSUMPTION


def test_cuts_for_an_unknown_or_deleted_stream_are_refused_as_unknown_stream_before_the_subscriber_is_looked_at(
) -> None:
    # Pravega's controller answers STREAM_NOT_FOUND, SUBSCRIBER_NOT_FOUND and GENERATION_MISMATCH apart.
    state = StreamRetentionState(STREAM)
    for name in ("ghost", "billing"):
        rejection = publish(state, name, two_segments(1, 1))
        assert rejection is not None and rejection.kind is RejectKind.UNKNOWN_STREAM
        assert rejection.reason == "stream 'scope/orders' is unknown: no topology of it was published"
    recorded = state.apply(StreamCutRecord(STREAM, two_segments(1, 1), 5, 2), 5)
    assert recorded is not None and recorded.kind is RejectKind.UNKNOWN_STREAM
    deleted = state_with()
    add(deleted, "billing")
    deleted.apply(topology_record(STREAM, Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)]]), published_at=9,
                                  deleted=True), 0)
    rejection = publish(deleted, "billing", two_segments(1, 1))
    assert rejection is not None and rejection.kind is RejectKind.UNKNOWN_STREAM and "deleted" in rejection.reason


def test_each_reject_kind_of_a_subscriber_cut_is_distinct() -> None:
    state = state_with()
    add(state, "billing", 2)
    kinds = {what: publish(state, name, two_segments(1, 1), generation)
             for what, name, generation in [("never added", "ghost", 1), ("stale", "billing", 1),
                                            ("ahead", "billing", 3)]}
    assert {what: r.kind for what, r in kinds.items() if r is not None} == {
        "never added": RejectKind.UNKNOWN_SUBSCRIBER, "stale": RejectKind.STALE_GENERATION,
        "ahead": RejectKind.GENERATION_AHEAD}
    state.apply(SubscriberChange(STREAM, "billing", 4, SubscriberChangeType.REMOVE, 1), 0)
    removed = publish(state, "billing", two_segments(1, 1), 4)
    assert removed is not None and removed.kind is RejectKind.UNKNOWN_SUBSCRIBER and "removed" in removed.reason


def sealed_pair() -> Topology:
    """Epoch 0: s0 and s1; epoch 1: s1 sealed at 100 bytes and replaced by s2 over its keys."""
    return Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)], [(0, 0.0, 0.5), ((1 << 32) | 2, 0.5, 1.0)]], {1: 100})


def test_a_cut_beyond_a_sealed_segments_length_is_refused_wherever_it_enters() -> None:
    # Pravega's controller refuses such a truncation: the job must not decide one, nor let it block the
    # subscriber afterwards (an accepted impossible cut made every correct one CUT_BEHIND).
    state = StreamRetentionState(STREAM)
    assert state.apply(topology_record(STREAM, sealed_pair()), 0) is None
    assert state.apply(StreamConfig(STREAM, CONSUMPTION, 1), 0) is None
    add(state, "billing")
    beyond = StreamCut.from_mapping({0: 10, 1: 101})
    rejection = publish(state, "billing", beyond)
    assert rejection is not None and rejection.kind is RejectKind.INVALID_CUT
    assert rejection.reason == ("stream cut has an offset below -1 or beyond its segment's length: "
                                "offset 101 is beyond sealed segment 1's length 100")
    recorded = state.apply(StreamCutRecord(STREAM, beyond, 5, 111), 5)
    assert recorded is not None and recorded.kind is RejectKind.INVALID_CUT
    assert state.retention.records == () and state.registry.active_cuts() == []
    assert publish(state, "billing", StreamCut.from_mapping({0: 10, 1: 100})) is None  # read to its end: valid
    record(state, StreamCut.from_mapping({0: 20, (1 << 32) | 2: 5}), 6)
    event = state.decide(7)
    assert event is not None and event.cut == StreamCut.from_mapping({0: 10, 1: 100})


def test_a_recorded_cut_behind_the_previous_one_is_refused_and_truncates_nothing() -> None:
    state = state_with(RetentionPolicy(RetentionType.TIME, None, 0, 30_000))
    record(state, two_segments(10, 10), 10)
    backwards = state.apply(StreamCutRecord(STREAM, two_segments(5, 5), 20, 10), 20)
    assert backwards is not None and backwards.kind is RejectKind.CUT_BEHIND
    assert backwards.reason == "stream cut is before the cut recorded before it (at 10)"
    assert [r.cut for r in state.retention.records] == [two_segments(10, 10)]
    assert state.apply(StreamCutRecord(STREAM, two_segments(10, 10), 10, 20), 30) is None  # a replay: no change
    event = state.decide(40_000)
    assert event is not None and event.cut == two_segments(10, 10)
    restored = StreamRetentionState.from_bytes(state.to_bytes())  # the retention set is empty now
    again = restored.apply(StreamCutRecord(STREAM, two_segments(8, 12), 50_000, 20), 50_000)
    assert again is not None and again.kind is RejectKind.CUT_BEHIND and "overlaps" in again.reason


def test_never_emits_a_cut_behind_the_last_one_even_after_a_restore() -> None:
    state = state_with()
    add(state, "a")
    publish(state, "a", two_segments(50, 50))
    record(state, two_segments(60, 60), 1)
    assert state.decide(2) is not None
    restored = StreamRetentionState.from_bytes(state.to_bytes())
    add(restored, "b")
    publish(restored, "b", two_segments(10, 10))  # a late subscriber behind what was truncated
    record(restored, two_segments(70, 70), 3)
    assert restored.decide(4) is None
    assert restored.last_emitted == two_segments(50, 50)


def test_state_round_trips_through_bytes_across_epochs() -> None:
    state = StreamRetentionState(STREAM)
    state.apply(topology_record(STREAM, five_epochs()), 0)
    state.apply(StreamConfig(STREAM, CONSUMPTION, 1), 0)
    add(state, "reader")
    assert publish(state, "reader", cut(S5=1, S7=-1, S3=4)) is None
    state.apply(StreamCutRecord(STREAM, cut(S4=3, S3=2), 5, 500), 5)
    restored = StreamRetentionState.from_bytes(state.to_bytes())
    assert restored.to_bytes() == state.to_bytes()
    assert restored.lower_bound() == state.lower_bound() == cut(S5=1, S7=-1, S3=4)
    assert restored.topology is not None and restored.topology.sealed_lengths[S4] == 80


def test_a_deleted_stream_decides_nothing_and_a_recreated_one_starts_afresh() -> None:
    state = state_with()
    add(state, "a")
    state.apply(topology_record(STREAM, five_epochs(), published_at=5, deleted=True), 0)
    assert state.deleted and state.decide(10) is None
    state.apply(topology_record(STREAM, Topology.of([[(0, 0.0, 1.0)]]), published_at=6), 0)
    assert not state.deleted and state.registry.get("a") is None and state.config is None


def test_time_alone_changes_a_decision_only_when_an_entry_crosses_a_time_limit() -> None:
    timed = state_with(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 5_000, 60_000))
    assert timed.next_change_ms(0) is None  # nothing recorded: nothing for time to change
    record(timed, two_segments(10, 10), 1_000)
    assert timed.next_change_ms(1_000) == 6_000  # the entry turns 5 s old (the min)
    assert timed.next_change_ms(6_000) == 61_000  # then 60 s old (the max)
    assert timed.next_change_ms(61_000) == 61_001  # then older than the max
    assert timed.next_change_ms(61_001) is None
    sized = state_with(RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 100))
    record(sized, two_segments(10, 10), 1_000)
    assert sized.next_change_ms(0) is None  # size limits never change with time
    unbounded = state_with(CONSUMPTION)
    record(unbounded, two_segments(10, 10), 1_000)
    assert unbounded.next_change_ms(0) == 1_000 and unbounded.next_change_ms(1_000) is None
