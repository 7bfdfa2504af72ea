"""The truncation decision (PDP-19, PDP-47): one pure function of policy, retention set, lower bound and time."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from reclaim.retention.cuts import CutComparison, compare, size_till
from reclaim.retention.policy import Limits
from reclaim.retention.retention_set import RetentionSet
from reclaim.retention.topology import Topology
from reclaim.schemas.streams import LimitType, StreamCut, StreamCutRecord


class Rule(enum.Enum):
    """Which branch of the rules chose the cut (or chose none); the value is what an operator reads."""

    NO_RECORDED_CUT = "no recorded cut keeps the min limit yet"
    EMPTY_BOUND_AT_MIN = "no subscriber cut: at the newest recorded cut that keeps the min limit"
    NO_CONSUMPTION_WITHIN_MAX = "consumption, no subscriber cut, nothing kept past max: nowhere"
    NO_CONSUMPTION_PAST_MAX_AT_MAX = "consumption, no subscriber cut, more than max kept: at the max cut"
    SIZE_BELOW_MIN_AT_MIN = "the bound keeps less than min: at the min cut, which is before the bound"
    SIZE_BELOW_MIN_BEFORE_BOUND = "the bound keeps less than min and overlaps the min cut: at a recorded cut before it"
    SIZE_AT_BOUND = "the bound keeps between min and max: at the bound"
    SIZE_PAST_MAX_AT_MAX = "the bound keeps more than max: at the max cut"
    SIZE_PAST_MAX_AT_BOUND = "the bound keeps more than max, but no recorded cut keeps less: at the bound"
    TIME_MIN_BEFORE_BOUND_AT_MIN = "the min cut is before the bound: at the min cut"
    TIME_MIN_OVERLAPS_BEFORE_BOUND = "the min cut overlaps the bound: at a recorded cut before the bound"
    TIME_AT_BOUND = "the bound is within the limits: at the bound"
    TIME_PAST_MAX_AT_MAX = "the bound is before the max cut: at the max cut"
    TIME_OVERLAPS_MAX_AT_MAX_BOUND = "the bound overlaps the oldest cut past max: at that cut"
    NO_CUT_BEFORE_BOUND = "no recorded cut lies before the bound"

    @property
    def at_bound(self) -> bool:
        """Whether the cut chosen is the subscribers' lower bound (a consumption-based truncation)."""
        return self in (Rule.SIZE_AT_BOUND, Rule.SIZE_PAST_MAX_AT_BOUND, Rule.TIME_AT_BOUND)


@dataclass(frozen=True)
class Decision:
    """Where to truncate (None: nowhere yet) and the rule that said so."""

    cut: StreamCut | None
    rule: Rule


def bound_cuts(limits: Limits, retention: RetentionSet, delta: Callable[[StreamCutRecord], int]
               ) -> tuple[StreamCutRecord | None, StreamCutRecord | None]:
    """``(max_cut, min_cut)``: the oldest entry keeping between min and max, and the newest keeping at least min.

    ``delta`` is what truncating at an entry would keep (millis or bytes). When no entry keeps at
    most max, the max cut is the min cut.
    """
    max_cut: StreamCutRecord | None = None
    min_cut: StreamCutRecord | None = None
    for record in retention.records:
        kept = delta(record)
        if limits.min_keep <= kept <= limits.max_keep and (max_cut is None or kept > delta(max_cut)):
            max_cut = record
        if kept >= limits.min_keep and (min_cut is None or kept < delta(min_cut)):
            min_cut = record
    return max_cut or min_cut, min_cut


def decide(limits: Limits, retention: RetentionSet, bound: StreamCut, now_ms: int, topology: Topology) -> Decision:
    """Where ``limits`` with the subscribers' lower ``bound`` (empty: no subscriber cut) truncate the stream now.

    With an empty bound, TIME and SIZE limits truncate at the min cut (PDP-19); CONSUMPTION limits
    truncate only when a recorded cut keeps more than max, at the max cut (PDP-47's fallback).
    """
    latest = retention.latest
    if latest is None:
        return Decision(None, Rule.NO_RECORDED_CUT)
    current = latest.recording_size

    def kept(record: StreamCutRecord) -> int:
        return current - record.recording_size if limits.kind is LimitType.SIZE else now_ms - record.recording_time

    max_cut, min_cut = bound_cuts(limits, retention, kept)
    if limits.kind is LimitType.SIZE and len(bound):
        # The bound's own size says whether it keeps min: it needs no recorded cut that does (Pravega).
        return _by_size(limits, retention, bound, topology, current, (max_cut, min_cut))
    if min_cut is None:
        return Decision(None, Rule.NO_RECORDED_CUT)
    if not len(bound) and limits.by_consumption:
        # PDP-47: with no subscriber cut "the Stream size can grow unbounded"; only the max limit truncates.
        if all(kept(record) <= limits.max_keep for record in retention.records):
            return Decision(None, Rule.NO_CONSUMPTION_WITHIN_MAX)
        return Decision((max_cut or min_cut).cut, Rule.NO_CONSUMPTION_PAST_MAX_AT_MAX)
    if not len(bound):
        return Decision(min_cut.cut, Rule.EMPTY_BOUND_AT_MIN)
    return _by_time(limits, retention, bound, topology, now_ms, (max_cut or min_cut, min_cut))


def _before_bound(retention: RetentionSet, bound: StreamCut, topology: Topology) -> Decision:
    index = retention.newest_at_or_before(topology, bound)
    if index is None:
        return Decision(None, Rule.NO_CUT_BEFORE_BOUND)
    return Decision(retention.records[index].cut, Rule.SIZE_BELOW_MIN_BEFORE_BOUND)


Bounds = tuple[StreamCutRecord, StreamCutRecord]
"""The max cut and the min cut, once both are known to exist."""


def _by_size(limits: Limits, retention: RetentionSet, bound: StreamCut, topology: Topology, current: int,
             bounds: tuple[StreamCutRecord | None, StreamCutRecord | None]) -> Decision:
    max_cut, min_cut = bounds
    kept_at_bound = current - size_till(topology, bound)
    if kept_at_bound < limits.min_keep:
        if min_cut is None:
            return Decision(None, Rule.NO_RECORDED_CUT)
        if compare(topology, min_cut.cut, bound) is CutComparison.BEFORE:
            return Decision(min_cut.cut, Rule.SIZE_BELOW_MIN_AT_MIN)
        return _before_bound(retention, bound, topology)
    if kept_at_bound < limits.max_keep:
        return Decision(bound, Rule.SIZE_AT_BOUND)
    if max_cut is not None and current - max_cut.recording_size < kept_at_bound:
        return Decision(max_cut.cut, Rule.SIZE_PAST_MAX_AT_MAX)
    return Decision(bound, Rule.SIZE_PAST_MAX_AT_BOUND)


def _by_time(limits: Limits, retention: RetentionSet, bound: StreamCut, topology: Topology, now_ms: int,
             bounds: Bounds) -> Decision:
    max_cut, min_cut = bounds
    relation = compare(topology, min_cut.cut, bound)
    if relation is CutComparison.BEFORE:
        return Decision(min_cut.cut, Rule.TIME_MIN_BEFORE_BOUND_AT_MIN)
    if relation is CutComparison.OVERLAPS:
        decision = _before_bound(retention, bound, topology)
        return Decision(decision.cut, Rule.TIME_MIN_OVERLAPS_BEFORE_BOUND if decision.cut else decision.rule)
    past_max = [r for r in retention.records if now_ms - r.recording_time >= limits.max_keep]
    if not past_max:
        return Decision(bound, Rule.TIME_AT_BOUND)
    max_bound = past_max[-1]
    against_max = compare(topology, bound, max_bound.cut)
    if against_max is CutComparison.EQUAL_OR_AFTER:
        return Decision(bound, Rule.TIME_AT_BOUND)
    if against_max is CutComparison.BEFORE:
        return Decision(max_cut.cut, Rule.TIME_PAST_MAX_AT_MAX)
    return Decision(max_bound.cut, Rule.TIME_OVERLAPS_MAX_AT_MAX_BOUND)
