"""Every branch of the truncation decision, each on its own, on a two-segment stream."""

from __future__ import annotations

import pytest

from reclaim.retention.decision import Rule, bound_cuts, decide
from reclaim.retention.lower_bound import lower_bound
from reclaim.retention.policy import Limits
from reclaim.retention.retention_set import RetentionSet
from reclaim.retention.topology import Topology
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, StreamCut, StreamCutRecord

TOPOLOGY = Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)]])
NO_BOUND = StreamCut()


def c(a: int, b: int) -> StreamCut:
    return StreamCut.from_mapping({0: a, 1: b})


def entry(a: int, b: int, at_ms: int) -> StreamCutRecord:
    return StreamCutRecord("scope/s", c(a, b), at_ms, a + b)


# Sizes 0, 100, 200, 300 recorded at 0, 1000, 2000, 3000 ms.
SET = RetentionSet.of([entry(0, 0, 0), entry(50, 50, 1000), entry(100, 100, 2000), entry(150, 150, 3000)])


def size(min_keep: int, max_keep: int = LONG_MAX, consumption: bool = False) -> Limits:
    return Limits(LimitType.SIZE, min_keep, max_keep, consumption)


def time(min_keep: int, max_keep: int = LONG_MAX, consumption: bool = False) -> Limits:
    return Limits(LimitType.TIME, min_keep, max_keep, consumption)


def test_bound_cuts_pick_newest_keeping_min_and_oldest_within_max() -> None:
    max_cut, min_cut = bound_cuts(size(150, 250), SET, lambda r: 300 - r.recording_size)
    assert min_cut is not None and max_cut is not None
    assert (min_cut.recording_size, max_cut.recording_size) == (100, 100)
    max_cut, min_cut = bound_cuts(size(50, 120), SET, lambda r: 300 - r.recording_size)
    assert (min_cut.recording_size if min_cut else None, max_cut.recording_size if max_cut else None) == (200, 200)
    max_cut, min_cut = bound_cuts(size(250, 260), SET, lambda r: 300 - r.recording_size)
    assert min_cut is max_cut and min_cut is not None and min_cut.recording_size == 0  # none within max: the min cut


def test_no_recorded_cut_no_truncation() -> None:
    assert decide(size(0), RetentionSet(), c(9, 9), 0, TOPOLOGY).rule is Rule.NO_RECORDED_CUT
    assert decide(size(1000), SET, c(9, 9), 0, TOPOLOGY) == decide(size(1000), SET, NO_BOUND, 0, TOPOLOGY)
    assert decide(size(1000), SET, NO_BOUND, 0, TOPOLOGY).cut is None


@pytest.mark.parametrize("limits", [size(150), time(1000)])
def test_empty_bound_truncates_at_min(limits: Limits) -> None:
    decision = decide(limits, SET, NO_BOUND, 3000, TOPOLOGY)
    # SIZE: of 300 bytes, the newest entry keeping 150 is the one at 100 bytes; TIME: at 3000 ms, the entry
    # of 2000 ms is the newest at least 1000 ms old.
    expected = c(50, 50) if limits.kind is LimitType.SIZE else c(100, 100)
    assert (decision.rule, decision.cut) == (Rule.EMPTY_BOUND_AT_MIN, expected)


@pytest.mark.parametrize("limits", [size(0, consumption=True), time(0, consumption=True),
                                    size(150, 300, consumption=True), time(1000, 3500, consumption=True)])
def test_consumption_with_no_subscriber_cut_keeps_everything_within_max(limits: Limits) -> None:
    # PDP-47: a stream changed to consumption retention with no subscriber "would not get truncated".
    decision = decide(limits, SET, NO_BOUND, 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.NO_CONSUMPTION_WITHIN_MAX, None)


@pytest.mark.parametrize("limits", [size(0, 120, consumption=True), time(0, 2000, consumption=True)])
def test_consumption_with_no_subscriber_cut_truncates_past_max_at_max(limits: Limits) -> None:
    # SIZE: of 300 bytes the entry at 200 is the oldest keeping at most 120; TIME: at 3500 ms the entry of
    # 2000 ms is the oldest at most 2000 ms old.
    decision = decide(limits, SET, NO_BOUND, 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.NO_CONSUMPTION_PAST_MAX_AT_MAX, c(100, 100))


def test_size_bound_keeping_less_than_min_truncates_at_min() -> None:
    decision = decide(size(150), SET, c(125, 125), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_BELOW_MIN_AT_MIN, c(50, 50))


def test_size_bound_keeping_less_than_min_and_overlapping_it_goes_before_the_bound() -> None:
    # The min cut (100, 100) overlaps the bound (0, 290): truncate at the newest entry before the bound.
    decision = decide(size(150), SET, c(0, 290), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_BELOW_MIN_BEFORE_BOUND, c(0, 0))


def test_size_bound_overlapping_every_entry_gives_nothing() -> None:
    only = RetentionSet.of([entry(100, 100, 0), entry(150, 150, 1)])
    decision = decide(size(50), only, c(0, 290), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.NO_CUT_BEFORE_BOUND, None)


def test_size_bound_within_limits_truncates_at_the_bound() -> None:
    decision = decide(size(50, 1000), SET, c(50, 50), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_AT_BOUND, c(50, 50))


def test_size_bound_keeping_min_needs_no_recorded_cut_that_keeps_min() -> None:
    # After a truncation at 100 bytes only entries at 200 and 300 bytes are left; none keeps 150, but a
    # bound at 120 bytes keeps 180: truncate there (PDP-47: at the common cut, inside the min limit).
    later = RetentionSet.of([entry(100, 100, 2000), entry(150, 150, 3000)])
    decision = decide(size(150), later, c(60, 60), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_AT_BOUND, c(60, 60))
    decision = decide(size(150, 160), later, c(60, 60), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_PAST_MAX_AT_BOUND, c(60, 60))
    decision = decide(size(150), later, c(80, 80), 0, TOPOLOGY)  # keeps 140: below min, and no entry keeps min
    assert (decision.rule, decision.cut) == (Rule.NO_RECORDED_CUT, None)


def test_size_bound_past_max_truncates_at_max() -> None:
    decision = decide(size(50, 120), SET, c(50, 50), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_PAST_MAX_AT_MAX, c(100, 100))


def test_size_bound_past_max_with_no_smaller_entry_truncates_at_the_bound() -> None:
    decision = decide(size(250, 260), SET, c(5, 5), 0, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.SIZE_PAST_MAX_AT_BOUND, c(5, 5))


def test_time_min_before_the_bound_truncates_at_min() -> None:
    # At 3500 ms the entry of 2000 ms is the newest one at least 1000 ms old.
    decision = decide(time(1000), SET, c(120, 120), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_MIN_BEFORE_BOUND_AT_MIN, c(100, 100))


def test_time_min_overlapping_the_bound_goes_before_the_bound() -> None:
    decision = decide(time(1000), SET, c(60, 200), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_MIN_OVERLAPS_BEFORE_BOUND, c(50, 50))


def test_time_bound_within_limits_truncates_at_the_bound() -> None:
    decision = decide(time(1000), SET, c(70, 70), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_AT_BOUND, c(70, 70))
    # Past the max limit there is an entry (of 0 ms), but the bound is after it.
    decision = decide(time(1000, 3000), SET, c(70, 70), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_AT_BOUND, c(70, 70))


def test_time_bound_before_the_max_cut_truncates_at_max() -> None:
    # The entry of 1000 ms is past a 2000 ms max at 3500 ms; a bound before it loses to the max cut.
    decision = decide(time(1000, 2000), SET, c(20, 20), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_PAST_MAX_AT_MAX, c(100, 100))


def test_time_bound_overlapping_the_oldest_cut_past_max_truncates_there() -> None:
    decision = decide(time(1000, 2000), SET, c(20, 80), 3500, TOPOLOGY)
    assert (decision.rule, decision.cut) == (Rule.TIME_OVERLAPS_MAX_AT_MAX_BOUND, c(50, 50))


def test_only_bound_rules_count_as_consumption() -> None:
    assert {rule for rule in Rule if rule.at_bound} == {Rule.SIZE_AT_BOUND, Rule.SIZE_PAST_MAX_AT_BOUND,
                                                        Rule.TIME_AT_BOUND}


def test_the_readme_worked_example() -> None:
    one = Topology.of([[(0, 0.0, 1.0)]])
    entries = RetentionSet.of([StreamCutRecord("s", StreamCut.from_mapping({0: n}), n, n)
                               for n in range(100, 501, 100)])
    a, b = StreamCut.from_mapping({0: 350}), StreamCut.from_mapping({0: 120})
    bound = lower_bound(one, [a, b])
    assert bound == b
    capped = decide(size(0, 100), entries, bound, 0, one)
    assert (capped.rule, capped.cut) == (Rule.SIZE_PAST_MAX_AT_MAX, StreamCut.from_mapping({0: 400}))
    uncapped = decide(size(0), entries, bound, 0, one)
    assert (uncapped.rule, uncapped.cut) == (Rule.SIZE_AT_BOUND, b)
    moved = decide(size(0), entries, lower_bound(one, [a, StreamCut.from_mapping({0: 350})]), 0, one)
    assert moved.cut == a
