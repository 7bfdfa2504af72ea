"""Subscriber generations (PDP-47) and retention policy validation."""

from __future__ import annotations

import pytest

from reclaim.retention.errors import (
    GenerationAheadError,
    InvalidPolicyError,
    StaleGenerationError,
    UnknownSubscriberError,
)
from reclaim.retention.policy import Limits, limits_of
from reclaim.retention.registry import SubscriberRegistry
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType, StreamCut

CUT = StreamCut.from_mapping({0: 5})


def test_stale_generation_is_refused_and_changes_nothing() -> None:
    registry = SubscriberRegistry()
    registry.add("billing", 3)
    with pytest.raises(StaleGenerationError):
        registry.add("billing", 3)
    with pytest.raises(StaleGenerationError):
        registry.remove("billing", 2)
    assert registry.get("billing") is not None and registry.get("billing").active  # type: ignore[union-attr]


def test_re_adding_keeps_the_cut() -> None:
    registry = SubscriberRegistry()
    registry.add("billing", 1)
    registry.set_cut("billing", CUT)
    registry.add("billing", 2)
    assert registry.active_cuts() == [CUT]


def test_removed_subscriber_no_longer_holds_truncation_back() -> None:
    registry = SubscriberRegistry()
    registry.add("billing", 1)
    registry.set_cut("billing", CUT)
    registry.remove("billing", 2)
    assert registry.active_cuts() == []
    with pytest.raises(StaleGenerationError):
        registry.add("billing", 1)  # a late add of an older generation does not bring it back
    registry.add("billing", 3)
    assert registry.active_cuts() == []  # back, but its old cut is gone: it holds nothing until it publishes


def test_subscriber_that_never_published_holds_nothing_back() -> None:
    registry = SubscriberRegistry()
    registry.add("slow", 1)
    registry.add("fast", 1)
    registry.set_cut("fast", CUT)
    assert registry.active_cuts() == [CUT]


def test_cuts_are_accepted_only_at_the_current_generation() -> None:
    registry = SubscriberRegistry()
    with pytest.raises(UnknownSubscriberError, match="'ghost' was never added"):
        registry.subscribed("ghost", 1)
    registry.add("billing", 4)
    with pytest.raises(StaleGenerationError):
        registry.subscribed("billing", 3)
    with pytest.raises(GenerationAheadError, match="generation 5 is ahead of its generation 4"):
        registry.subscribed("billing", 5)
    assert registry.subscribed("billing", 4).generation == 4


def test_a_removed_subscribers_cut_is_unknown_at_its_generation_stale_before_and_ahead_after() -> None:
    registry = SubscriberRegistry()
    registry.add("billing", 1)
    registry.remove("billing", 2)
    with pytest.raises(UnknownSubscriberError, match="removed at generation 2"):
        registry.subscribed("billing", 2)
    with pytest.raises(StaleGenerationError):
        registry.subscribed("billing", 1)
    with pytest.raises(GenerationAheadError):
        registry.subscribed("billing", 3)


@pytest.mark.parametrize(("policy", "limits"), [
    (RetentionPolicy(RetentionType.NONE), None),
    (RetentionPolicy(RetentionType.TIME, None, 60_000), Limits(LimitType.TIME, 60_000, LONG_MAX)),
    (RetentionPolicy(RetentionType.SIZE, LimitType.SIZE, 10, 100), Limits(LimitType.SIZE, 10, 100)),
    (RetentionPolicy(RetentionType.CONSUMPTION), Limits(LimitType.TIME, 0, LONG_MAX, True)),
    (RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 500), Limits(LimitType.SIZE, 0, 500, True)),
])
def test_policy_limits(policy: RetentionPolicy, limits: Limits | None) -> None:
    assert limits_of(policy) == limits


@pytest.mark.parametrize(("policy", "message"), [
    (RetentionPolicy(RetentionType.TIME, None, -1), "must not be negative"),
    (RetentionPolicy(RetentionType.SIZE, None, 10, 5), "min limit 10 is above max limit 5"),
    (RetentionPolicy(RetentionType.NONE, LimitType.TIME), "takes no limits"),
    (RetentionPolicy(RetentionType.TIME, LimitType.SIZE, 5), "TIME policy cannot have SIZE limits"),
    (RetentionPolicy(RetentionType.SIZE), "needs a min limit"),
])
def test_invalid_policies_say_why(policy: RetentionPolicy, message: str) -> None:
    with pytest.raises(InvalidPolicyError, match=message):
        limits_of(policy)
