"""A policy's limits are bounded where it is checked, for the CLI and the retention job alike."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.retention.errors import InvalidPolicyError
from reclaim.retention.policy import (
    MAX_SIZE_LIMIT_BYTES,
    MAX_TIME_LIMIT_MS,
    Limits,
    check_policy,
    limit_kind,
    limits_of,
)
from reclaim.schemas.base import LONG_MAX, LONG_MIN
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType

TIME, SIZE, CONSUMPTION = RetentionType.TIME, RetentionType.SIZE, RetentionType.CONSUMPTION


def test_the_bounds_are_100_years_of_millis_and_2_to_the_62_bytes() -> None:
    assert MAX_TIME_LIMIT_MS == timedelta(days=100 * 365.25) // timedelta(milliseconds=1) == 3_155_760_000_000
    assert MAX_SIZE_LIMIT_BYTES == 4 * 1024**6


@pytest.mark.parametrize(("policy", "limits"), [
    (RetentionPolicy(TIME, None, MAX_TIME_LIMIT_MS), Limits(LimitType.TIME, MAX_TIME_LIMIT_MS, LONG_MAX)),
    (RetentionPolicy(TIME, None, 0, MAX_TIME_LIMIT_MS), Limits(LimitType.TIME, 0, MAX_TIME_LIMIT_MS)),
    (RetentionPolicy(SIZE, None, MAX_SIZE_LIMIT_BYTES, MAX_SIZE_LIMIT_BYTES),
     Limits(LimitType.SIZE, MAX_SIZE_LIMIT_BYTES, MAX_SIZE_LIMIT_BYTES)),
    (RetentionPolicy(CONSUMPTION, LimitType.SIZE, 0, MAX_SIZE_LIMIT_BYTES),
     Limits(LimitType.SIZE, 0, MAX_SIZE_LIMIT_BYTES, True)),
    # A size above 100 years of millis is no time: a SIZE limit is bounded by bytes alone.
    (RetentionPolicy(SIZE, None, MAX_TIME_LIMIT_MS + 1), Limits(LimitType.SIZE, MAX_TIME_LIMIT_MS + 1, LONG_MAX)),
])
def test_limits_at_their_bound_and_no_max_are_accepted(policy: RetentionPolicy, limits: Limits) -> None:
    assert limits_of(policy) == limits


@pytest.mark.parametrize(("policy", "message"), [
    (RetentionPolicy(TIME, None, MAX_TIME_LIMIT_MS + 1),
     "min limit 3155760000001 is above the largest TIME limit, 3155760000000 ms (100 years)"),
    (RetentionPolicy(TIME, None, 0, LONG_MAX - 1), f"max limit {LONG_MAX - 1} is above the largest TIME limit"),
    (RetentionPolicy(CONSUMPTION, None, 0, 2**62), "max limit 4611686018427387904 is above the largest TIME limit"),
    (RetentionPolicy(CONSUMPTION, LimitType.TIME, 1, LONG_MAX - 1), "is above the largest TIME limit"),
    (RetentionPolicy(SIZE, None, MAX_SIZE_LIMIT_BYTES + 1),
     "min limit 4611686018427387905 is above the largest SIZE limit, 4611686018427387904 bytes (2^62)"),
    (RetentionPolicy(CONSUMPTION, LimitType.SIZE, 0, LONG_MAX - 1), "is above the largest SIZE limit"),
    (RetentionPolicy(SIZE, None, 2**64), "min limit 18446744073709551616 is above the largest SIZE limit"),
    (RetentionPolicy(TIME, None, 0, LONG_MAX + 1), "is above the largest TIME limit"),
    (RetentionPolicy(TIME, None, 10, -1), "must not be negative"),
    (RetentionPolicy(CONSUMPTION, None, LONG_MIN), "must not be negative"),
    (RetentionPolicy(TIME, None, 10, 9), "min limit 10 is above max limit 9"),
])
def test_limits_beyond_their_bound_are_refused_in_one_line(policy: RetentionPolicy, message: str) -> None:
    with pytest.raises(InvalidPolicyError, match=re.escape(message)) as refused:
        check_policy(policy)
    assert "\n" not in str(refused.value)


longs = st.integers(LONG_MIN, LONG_MAX)
policies = st.builds(RetentionPolicy, st.sampled_from(RetentionType), st.none() | st.sampled_from(LimitType),
                     st.one_of(longs, st.integers(0, MAX_TIME_LIMIT_MS + 1)),
                     st.one_of(longs, st.just(LONG_MAX), st.integers(0, MAX_TIME_LIMIT_MS + 1)))


@given(policies)
def test_a_policy_is_refused_or_its_limits_are_within_their_bound(policy: RetentionPolicy) -> None:
    """Whatever a StreamConfig on the bus holds (an Avro long each), a policy that passes keeps limits the
    retention job can add to any timestamp or size and still hold in a long."""
    try:
        limits = limits_of(policy)
    except InvalidPolicyError:
        return
    if limits is None:
        assert limit_kind(policy) is None
        return
    bound = MAX_TIME_LIMIT_MS if limits.kind is LimitType.TIME else MAX_SIZE_LIMIT_BYTES
    assert 0 <= limits.min_keep <= bound
    assert 0 <= limits.max_keep <= bound or limits.max_keep == LONG_MAX
