"""A retention policy checked and read as the limits the truncation rules work with."""

from __future__ import annotations

from dataclasses import dataclass

from reclaim.retention.errors import InvalidPolicyError
from reclaim.schemas.base import LONG_MAX
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType

#: The largest TIME limit: 100 years (36,525 days) in millis. A max limit of the largest long means "no max".
MAX_TIME_LIMIT_MS = 36_525 * 24 * 60 * 60 * 1000
#: The largest SIZE limit: 2^62 bytes (4 EiB), beyond any stream, and half a long: a limit and a size of a
#: stream, added or subtracted, stay inside the long an Avro field and the job's state hold.
MAX_SIZE_LIMIT_BYTES = 2**62
#: The largest limit of each limit type, with how an operator reads it.
LIMIT_BOUNDS: dict[LimitType, tuple[int, str]] = {
    LimitType.TIME: (MAX_TIME_LIMIT_MS, "ms (100 years)"),
    LimitType.SIZE: (MAX_SIZE_LIMIT_BYTES, "bytes (2^62)"),
}


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
        When the limit type contradicts the retention type, or a limit is negative, above its type's largest
        (:data:`LIMIT_BOUNDS`) or min > max.
    """
    check_policy(policy)
    kind = limit_kind(policy)
    if kind is None:
        return None
    return Limits(kind, policy.min_limit, policy.max_limit, policy.retention_type is RetentionType.CONSUMPTION)


def limit_kind(policy: RetentionPolicy) -> LimitType | None:
    """The unit the policy's limits are in (None for NONE): its own type for TIME and SIZE, the limit type
    (TIME when none) for CONSUMPTION."""
    if policy.retention_type is RetentionType.NONE:
        return None
    if policy.retention_type is RetentionType.TIME:
        return LimitType.TIME
    if policy.retention_type is RetentionType.SIZE:
        return LimitType.SIZE
    return policy.limit_type or LimitType.TIME


def check_policy(policy: RetentionPolicy) -> None:
    """Raise :class:`InvalidPolicyError` with one line saying what is wrong with ``policy``.

    The CLI checks a policy with it before storing or publishing it, and the retention job every policy it
    reads (one of another version, or of a hostile admin, is rejected as INVALID_POLICY).
    """
    kind, limit = policy.retention_type, policy.limit_type
    if policy.min_limit < 0 or policy.max_limit < 0:
        raise InvalidPolicyError(f"limits must not be negative (min {policy.min_limit}, max {policy.max_limit})")
    _check_bounds(policy)
    if policy.min_limit > policy.max_limit:
        raise InvalidPolicyError(f"min limit {policy.min_limit} is above max limit {policy.max_limit}")
    if kind is RetentionType.NONE and (limit is not None or policy.min_limit or policy.max_limit != LONG_MAX):
        raise InvalidPolicyError("a NONE policy takes no limits")
    if kind in (RetentionType.TIME, RetentionType.SIZE) and limit is not None and limit.value != kind.value:
        raise InvalidPolicyError(f"a {kind.value} policy cannot have {limit.value} limits")
    if kind in (RetentionType.TIME, RetentionType.SIZE) and policy.min_limit == 0 and policy.max_limit == LONG_MAX:
        raise InvalidPolicyError(f"a {kind.value} policy needs a min limit (what to keep) or a max limit")


def _check_bounds(policy: RetentionPolicy) -> None:
    """Refuse a limit above its type's largest (:data:`LIMIT_BOUNDS`); a max of the largest long is no max."""
    kind = limit_kind(policy)
    if kind is None:
        return  # a NONE policy takes no limits: checked with its own message
    bound, unit = LIMIT_BOUNDS[kind]
    for name, value in (("min", policy.min_limit), ("max", policy.max_limit)):
        if value > bound and not (name == "max" and value == LONG_MAX):
            raise InvalidPolicyError(f"{name} limit {value} is above the largest {kind.value} limit, {bound} {unit}")
