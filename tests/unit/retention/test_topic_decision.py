"""Where a plain Kafka topic's partition may start under consumption retention (retention/topic_decision.py):
the slowest required group holds it, a group that never committed holds it at its start, the minimum keeps
young data, the maximum (age or bytes) overrides the groups but never the minimum, and the start only moves
forward. Pure logic: the broker's answers are given."""

from __future__ import annotations

import pytest

from reclaim.retention.topic_decision import (
    PartitionView,
    TopicLimits,
    TopicRule,
    decide_partition,
    required_groups,
)

GROUPS = ("fast", "slow")


def view(**kwargs: object) -> PartitionView:
    values: dict[str, object] = {"partition": 0, "low": 100, "high": 1000,
                                 "committed": {"fast": 900, "slow": 400}}
    return PartitionView(**(values | kwargs))  # type: ignore[arg-type]


def test_the_slowest_required_group_makes_the_bound() -> None:
    decided = decide_partition(TopicLimits(), view(), GROUPS)
    assert (decided.start, decided.rule, decided.held_by) == (400, TopicRule.AT_BOUND, ("slow",))
    assert decide_partition(TopicLimits(), view(), ["fast"]).start == 900  # slow is not required


def test_a_group_that_never_committed_holds_the_partition_at_its_start() -> None:
    decided = decide_partition(TopicLimits(), view(committed={"fast": 900}), GROUPS)
    assert (decided.start, decided.rule, decided.held_by) == (None, TopicRule.HELD_BY_NEW_GROUP, ("slow",))


def test_a_committed_offset_past_the_end_is_capped_and_one_behind_the_start_changes_nothing() -> None:
    assert decide_partition(TopicLimits(), view(committed={"fast": 5000}), ["fast"]).start == 1000
    behind = decide_partition(TopicLimits(), view(committed={"fast": 50}), ["fast"])
    assert (behind.start, behind.rule) == (None, TopicRule.BEHIND_START)


def test_the_minimum_keeps_young_data_even_against_the_groups_and_the_maximum() -> None:
    kept = decide_partition(TopicLimits(min_ms=3_600_000), view(young_from=300), GROUPS)
    assert (kept.start, kept.rule) == (300, TopicRule.KEPT_BY_MIN)
    limits = TopicLimits(min_ms=3_600_000, max_ms=7_200_000, max_bytes=10)
    forced = decide_partition(limits, view(young_from=300, old_before=600, size_bytes=9000), GROUPS)
    assert (forced.start, forced.rule) == (300, TopicRule.KEPT_BY_MIN)


def test_the_maximum_age_overrides_a_stalled_group() -> None:
    limits = TopicLimits(max_ms=86_400_000)
    decided = decide_partition(limits, view(old_before=700), GROUPS)
    assert (decided.start, decided.rule, decided.held_by) == (700, TopicRule.FORCED_BY_MAX_AGE, ())
    within = decide_partition(limits, view(old_before=200), GROUPS)  # the group is past what max forces
    assert (within.start, within.rule) == (400, TopicRule.AT_BOUND)
    everything_old = decide_partition(limits, view(old_before=None), GROUPS)
    assert everything_old.start == 1000  # no record younger than the maximum


def test_the_maximum_size_forces_as_far_as_keeps_at_most_that_many_bytes() -> None:
    # 900 records in 9000 bytes: keeping 3000 bytes drops 600 records, to 700.
    decided = decide_partition(TopicLimits(max_bytes=3000), view(size_bytes=9000), GROUPS)
    assert (decided.start, decided.rule) == (700, TopicRule.FORCED_BY_MAX_BYTES)
    assert decide_partition(TopicLimits(max_bytes=9000), view(size_bytes=9000), GROUPS).start == 400
    assert decide_partition(TopicLimits(max_bytes=3000), view(size_bytes=None), GROUPS).start == 400


def test_no_required_group_deletes_only_by_the_maximum_and_an_empty_partition_nothing() -> None:
    assert decide_partition(TopicLimits(), view(), []).rule is TopicRule.NO_GROUP
    assert decide_partition(TopicLimits(), view(), []).start is None
    assert decide_partition(TopicLimits(max_ms=1000), view(old_before=500), []).start == 500
    empty = decide_partition(TopicLimits(max_ms=1000), view(low=1000, high=1000), GROUPS)
    assert (empty.start, empty.rule) == (None, TopicRule.EMPTY)


def test_required_groups_are_the_named_and_the_matched_less_the_released() -> None:
    known = ["etl-a", "etl-b", "etl", "web", "xetl-c"]
    assert required_groups(["web"], r"etl-.*", known) == {"web", "etl-a", "etl-b"}
    assert required_groups(["web"], r"etl-.*", known, released=["etl-a"]) == {"web", "etl-b"}
    assert required_groups([], None, known) == set()


def test_limits_and_views_refuse_what_cannot_be() -> None:
    with pytest.raises(ValueError, match="must not be below the minimum"):
        TopicLimits(min_ms=10, max_ms=5)
    with pytest.raises(ValueError, match=">= 0"):
        TopicLimits(min_ms=-1)
    with pytest.raises(ValueError, match="maximum size"):
        TopicLimits(max_bytes=-1)
    with pytest.raises(ValueError, match="start <= end"):
        PartitionView(0, 10, 5)
