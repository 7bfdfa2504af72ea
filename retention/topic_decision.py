"""Consumption-based retention for a plain Kafka topic (KIP-68's "consumed log retention", never built in Kafka):
where one partition's log may start, decided from its required consumer groups' committed offsets and the
policy's limits. Pure logic: the caller reads the offsets (``list_consumer_group_offsets``,
``offsetsForTimes``, the watermarks, ``describeLogDirs``) and applies the result with ``deleteRecords``.

PDP-47's rules, with a partition as a segment of a stream that never scales:

- **the bound** is the lowest committed offset among the required groups, capped at the high watermark. A
  required group that has never committed on the partition holds it at its start: a consumer that has not
  started yet must not lose data. A group is released from holding only by the policy (by hand), never
  because Kafka expired its offsets;
- **the minimum** (``min``) always stays: the start never passes the first offset written within the last
  ``min`` (``offsetsForTimes(now − min)``);
- **the maximum** forces the start forward past a bound held back too long: to the first offset written
  within the last ``max`` (``offsetsForTimes(now − max)``), and, for ``max_bytes``, far enough that at most
  that many bytes stay (bytes per offset taken as even across the partition: ``describeLogDirs`` gives a
  partition's size, not its offsets' positions). The minimum still wins over the maximum;
- **forward only**: a start at or behind the current one changes nothing.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


class TopicRule(enum.Enum):
    """Why a partition's start moves (or does not): what ``reclaim topics retention plan`` prints."""

    EMPTY = "nothing to delete: the partition holds no record"
    AT_BOUND = "at the slowest required group's committed offset"
    HELD_BY_NEW_GROUP = "a required group has not committed on this partition: held at its start"
    NO_GROUP = "no required group: only the maximum deletes"
    KEPT_BY_MIN = "at the first record younger than the minimum, before the groups' bound"
    FORCED_BY_MAX_AGE = "the maximum age overrides the groups: at the first record younger than it"
    FORCED_BY_MAX_BYTES = "the maximum size overrides the groups: as far as keeps at most that many bytes"
    BEHIND_START = "already at or past that offset: nothing to do"


@dataclass(frozen=True)
class TopicLimits:
    """A topic's retention limits: ``min_ms`` kept always; ``max_ms`` and ``max_bytes`` (None: none) force
    the start past groups that hold data longer or larger."""

    min_ms: int = 0
    max_ms: int | None = None
    max_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.min_ms < 0:
            raise ValueError(f"the minimum must be >= 0 ms, got {self.min_ms}")
        if self.max_ms is not None and self.max_ms < self.min_ms:
            raise ValueError(f"the maximum ({self.max_ms} ms) must not be below the minimum ({self.min_ms} ms)")
        if self.max_bytes is not None and self.max_bytes < 0:
            raise ValueError(f"the maximum size must be >= 0 bytes, got {self.max_bytes}")


@dataclass(frozen=True)
class PartitionView:
    """What the brokers say of one partition now.

    ``low`` and ``high``: its log start offset and high watermark. ``committed``: each required group's
    committed offset on it (None: the group has none there). ``young_from``: ``offsetsForTimes(now − min)``,
    the first offset written within the minimum (None: no record is that young). ``old_before``:
    ``offsetsForTimes(now − max)`` (None: no record is younger than the maximum, or no maximum age).
    ``size_bytes``: the partition's size on disk (None: unknown).
    """

    partition: int
    low: int
    high: int
    committed: Mapping[str, int | None] = field(default_factory=dict)
    young_from: int | None = None
    old_before: int | None = None
    size_bytes: int | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"partition {self.partition}: log start {self.low} and high watermark {self.high} "
                             "are not 0 <= start <= end")


@dataclass(frozen=True)
class PartitionDecision:
    """Where the partition's log starts next (``start``; None: it stays where it is), the rule, and the groups
    whose committed offset made the bound (the slowest)."""

    partition: int
    start: int | None
    rule: TopicRule
    held_by: tuple[str, ...] = ()


def required_groups(groups: Iterable[str], pattern: str | None, known: Iterable[str],
                    released: Iterable[str] = ()) -> set[str]:
    """The groups that hold a topic: those named, and every known group the whole ``pattern`` matches, less the
    ``released`` ones."""
    matched = set(groups)
    if pattern is not None:
        compiled = re.compile(pattern)
        matched |= {group for group in known if compiled.fullmatch(group)}
    return matched - set(released)


def decide_partition(limits: TopicLimits, view: PartitionView, now_required: Iterable[str]) -> PartitionDecision:
    """Where ``view``'s partition may start, held by the groups ``now_required`` (see the module's rules)."""
    required = sorted(set(now_required))
    if view.high == view.low:
        return PartitionDecision(view.partition, None, TopicRule.EMPTY)
    bound, rule, held_by = _bound(view, required)
    forced, forced_rule = _forced(limits, view)
    if forced is not None and forced > bound:
        bound, rule, held_by = forced, forced_rule, ()
    young = view.high if view.young_from is None else min(view.young_from, view.high)
    if bound > young:
        bound, rule = young, TopicRule.KEPT_BY_MIN
    if bound <= view.low:
        return PartitionDecision(view.partition, None, TopicRule.BEHIND_START if rule is TopicRule.AT_BOUND
                                 else rule, held_by)
    return PartitionDecision(view.partition, bound, rule, held_by)


def _bound(view: PartitionView, required: list[str]) -> tuple[int, TopicRule, tuple[str, ...]]:
    """The lowest committed offset of the required groups, capped at the high watermark."""
    if not required:
        return view.low, TopicRule.NO_GROUP, ()
    never = tuple(group for group in required if view.committed.get(group) is None)
    if never:
        return view.low, TopicRule.HELD_BY_NEW_GROUP, never
    offsets = {group: min(max(int(view.committed[group] or 0), view.low), view.high) for group in required}
    lowest = min(offsets.values())
    return lowest, TopicRule.AT_BOUND, tuple(group for group in required if offsets[group] == lowest)


def _forced(limits: TopicLimits, view: PartitionView) -> tuple[int | None, TopicRule]:
    """How far the maximum forces the start, and by which limit (the one that goes further)."""
    by_age = None
    if limits.max_ms is not None:
        by_age = view.high if view.old_before is None else min(view.old_before, view.high)
    by_bytes = None
    if limits.max_bytes is not None and view.size_bytes is not None and view.size_bytes > limits.max_bytes:
        records = view.high - view.low
        drop = -(-(view.size_bytes - limits.max_bytes) * records // view.size_bytes)  # rounded up
        by_bytes = view.low + min(drop, records)
    if by_bytes is not None and (by_age is None or by_bytes > by_age):
        return by_bytes, TopicRule.FORCED_BY_MAX_BYTES
    return by_age, TopicRule.FORCED_BY_MAX_AGE
