"""A retention policy checked and read as the limits the truncation rules work with."""

from __future__ import annotations

from dataclasses import dataclass

from reclaim.retention.errors import InvalidPolicyError
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType


@dataclass(frozen=True)
class Limits:
    """What the truncation rules need of a policy: which rules (TIME or SIZE) and the min/max to keep.

    ``min_keep`` and ``max_keep`` are millis for TIME and bytes for SIZE. ``by_consumption`` says
    whether subscribers' cuts count: only for a CONSUMPTION policy (PDP-47: subscribers' cuts do not
    impact TIME or SIZE retention); with no subscriber's cut a CONSUMPTION stream is truncated only
    past its max.
    """

    kind: LimitType
    min_keep: int
    max_keep: int
    by_consumption: bool = False


def limits_of(policy: RetentionPolicy) -> Limits | None:
    """The policy's limits, or None for a stream that is never truncated by policy.

    TIME and SIZE keep at least ``min_limit`` (PDP-19) and at most ``max_limit``; CONSUMPTION
    truncates at the subscribers' lower bound inside its fallback limits (PDP-47), by the TIME
    rules when it names no limit type.

    Raises
    ------
    InvalidPolicyError
        When the limit type contradicts the retention type, or a limit is negative or min > max.
    """
    check_policy(policy)
    if policy.retention_type is RetentionType.NONE:
        return None
    if policy.retention_type is RetentionType.TIME:
        kind = LimitType.TIME
    elif policy.retention_type is RetentionType.SIZE:
        kind = LimitType.SIZE
    else:
        kind = policy.limit_type or LimitType.TIME
    return Limits(kind, policy.min_limit, policy.max_limit, policy.retention_type is RetentionType.CONSUMPTION)


def check_policy(policy: RetentionPolicy) -> None:
    """Raise :class:`InvalidPolicyError` with one line saying what is wrong with ``policy``."""
    kind, limit = policy.retention_type, policy.limit_type
    if policy.min_limit < 0 or policy.max_limit < 0:
        raise InvalidPolicyError(f"limits must not be negative (min {policy.min_limit}, max {policy.max_limit})")
    if policy.min_limit > policy.max_limit:
        raise InvalidPolicyError(f"min limit {policy.min_limit} is above max limit {policy.max_limit}")
    if kind is RetentionType.NONE and (limit is not None or policy.min_limit or policy.max_limit != LONG_MAX):
        raise InvalidPolicyError("a NONE policy takes no limits")
    if kind in (RetentionType.TIME, RetentionType.SIZE) and limit is not None and limit.value != kind.value:
        raise InvalidPolicyError(f"a {kind.value} policy cannot have {limit.value} limits")
    if kind in (RetentionType.TIME, RetentionType.SIZE) and policy.min_limit == 0 and policy.max_limit == LONG_MAX:
        raise InvalidPolicyError(f"a {kind.value} policy needs a min limit (what to keep) or a max limit")
