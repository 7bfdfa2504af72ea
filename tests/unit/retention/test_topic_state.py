"""The retention job's state of one Kafka topic: policy and cuts applied in order, groups remembered, starts
emitted forward only (and again when the poller still sees them lost), one life of the topic."""

from __future__ import annotations

from dataclasses import replace

from reclaim.retention.topic_state import REEMIT_AFTER_MS, TopicRetentionState
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topic_retention import GroupCommit, TopicCut, TopicPartitionState, TopicRetentionPolicy

T0 = 1_700_000_000_000
POLICY = TopicRetentionPolicy("orders", "id-1", ("billing",), 0, T0, group_pattern="etl-.*")


def cut(at: int, groups: dict[str, dict[int, int]], starts: tuple[int, ...] = (0, 0), end: int = 100,
        topic_id: str = "id-1") -> TopicCut:
    return TopicCut("orders", topic_id, at, tuple(TopicPartitionState(p, s, end) for p, s in enumerate(starts)),
                    tuple(GroupCommit(g, "stable", StreamCut.from_mapping(o)) for g, o in groups.items()))


def starts_of(state: TopicRetentionState, now: int) -> dict[int, int] | None:
    decided = state.decide(now)
    return None if decided is None else decided.starts.as_dict()


def test_the_slowest_required_group_bounds_each_partition_and_starts_only_move_forward() -> None:
    state = TopicRetentionState("orders")
    assert state.apply(POLICY, T0) is None
    state.apply(cut(T0 + 1, {"billing": {0: 50, 1: 60}, "etl-a": {0: 30, 1: 70}, "other": {0: 0, 1: 0}}), T0 + 1)
    decided = state.decide(T0 + 1)
    assert decided is not None and decided.starts.as_dict() == {0: 30, 1: 60}
    assert dict(decided.why) == {"0": "AT_BOUND held by etl-a", "1": "AT_BOUND held by billing"}
    assert (decided.topic_id, decided.policy_updated_at) == ("id-1", T0)
    assert starts_of(state, T0 + 2) is None  # emitted already
    state.apply(cut(T0 + 3, {"billing": {0: 50, 1: 60}, "etl-a": {0: 40, 1: 70}}, starts=(30, 60)), T0 + 3)
    assert starts_of(state, T0 + 3) == {0: 40}
    # A replayed older cut changes nothing.
    state.apply(cut(T0 + 2, {"billing": {0: 90, 1: 90}, "etl-a": {0: 90, 1: 90}}), T0 + 4)
    assert starts_of(state, T0 + 4) is None


def test_a_group_the_pattern_matched_keeps_holding_after_kafka_stops_listing_it_until_released() -> None:
    state = TopicRetentionState("orders")
    state.apply(POLICY, T0)
    state.apply(cut(T0 + 1, {"billing": {0: 50, 1: 50}, "etl-a": {0: 20, 1: 20}}), T0 + 1)
    assert starts_of(state, T0 + 1) == {0: 20, 1: 20}
    # etl-a's offsets expired: it is no longer listed, and holds every partition at its start.
    state.apply(cut(T0 + 2, {"billing": {0: 80, 1: 80}}, starts=(20, 20)), T0 + 2)
    assert "etl-a" in state.required() and starts_of(state, T0 + 2) is None
    # Restored from the job's state store, it still does.
    state = TopicRetentionState.from_bytes(state.to_bytes())
    assert state.remembered == {"etl-a"} and starts_of(state, T0 + 3) is None
    released = replace(POLICY, released=("etl-a",), updated_at=T0 + 4)
    state.apply(released, T0 + 4)
    assert starts_of(state, T0 + 5) is None  # the cut held was observed before the policy: not decided on
    state.apply(cut(T0 + 5, {"billing": {0: 80, 1: 80}}, starts=(20, 20)), T0 + 5)
    assert starts_of(state, T0 + 5) == {0: 80, 1: 80}


def test_a_cut_of_another_topic_id_is_refused_and_a_new_policy_for_it_starts_afresh() -> None:
    state = TopicRetentionState("orders")
    state.apply(POLICY, T0)
    state.apply(cut(T0 + 1, {"billing": {0: 50, 1: 50}}), T0 + 1)
    assert starts_of(state, T0 + 1) == {0: 50, 1: 50}
    reborn = cut(T0 + 2, {"billing": {0: 10, 1: 10}}, topic_id="id-2")
    refused = state.apply(reborn, T0 + 2)
    assert refused is not None and refused.kind is RejectKind.WRONG_INCARNATION
    state.apply(replace(POLICY, topic_id="id-2", updated_at=T0 + 3), T0 + 3)
    assert state.emitted == {} and state.cut is None
    state.apply(replace(reborn, observed_at=T0 + 4), T0 + 4)
    assert starts_of(state, T0 + 4) == {0: 10, 1: 10}  # below the old life's starts: emitted for the new one
    # An older policy replayed (the first life's) changes nothing.
    state.apply(POLICY, T0 + 5)
    assert state.policy is not None and state.policy.topic_id == "id-2"


def test_an_ended_policy_decides_nothing_and_a_lost_delete_is_emitted_again_later() -> None:
    state = TopicRetentionState("orders")
    state.apply(POLICY, T0)
    state.apply(cut(T0 + 1, {"billing": {0: 50, 1: 50}}), T0 + 1)
    assert starts_of(state, T0 + 1) == {0: 50, 1: 50}
    # The poller still sees partition 0 at 0: before REEMIT_AFTER_MS the applier may be on its way.
    state.apply(cut(T0 + 2, {"billing": {0: 50, 1: 50}}, starts=(0, 50)), T0 + 2)
    assert starts_of(state, T0 + 2) is None
    late = T0 + 1 + REEMIT_AFTER_MS
    state.apply(cut(late, {"billing": {0: 50, 1: 50}}, starts=(0, 50)), late)
    assert starts_of(state, late) == {0: 50}
    state.apply(replace(POLICY, active=False, updated_at=late + 1), late + 1)
    state.apply(cut(late + 2, {"billing": {0: 90, 1: 90}}, starts=(50, 50)), late + 2)
    assert starts_of(state, late + 2) is None


def test_a_spark_query_and_a_group_never_committed_hold_at_the_start_and_limits_apply() -> None:
    policy = TopicRetentionPolicy("orders", "id-1", ("billing", "new"), 0, T0,
                                  spark_checkpoints=(("daily", "/cp"),), max_ms=1000)
    state = TopicRetentionState("orders")
    state.apply(policy, T0)
    observed = TopicCut("orders", "id-1", T0 + 1, (TopicPartitionState(0, 0, 100, old_before=None),),
                        (GroupCommit("billing", "empty", StreamCut.from_mapping({0: 40})),))
    state.apply(observed, T0 + 1)
    assert state.required() == {"billing", "new", "spark:daily"}
    # No record is younger than the maximum age: the maximum forces the start to the end, over every group.
    decided = state.decide(T0 + 1)
    assert decided is not None and decided.starts.as_dict() == {0: 100}
    assert dict(decided.why) == {"0": "FORCED_BY_MAX_AGE"}
