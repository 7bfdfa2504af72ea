"""Stream incarnations in the retention job's pure core: a stream deleted and created again under its name is
another stream, and genuine records of the one deleted, replayed, change nothing of the new one (finding 1 of
issue #39, on the pure core)."""

from __future__ import annotations

import dataclasses

from reclaim.retention.stream_state import StreamRetentionState
from reclaim.retention.topology import Topology
from reclaim.schemas.base import LONG_MAX, new_incarnation
from reclaim.schemas.rejects import RejectKind
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType, StreamConfig, StreamCut, StreamCutRecord
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import StreamTopology
from tests.support.topologies import topology_record

STREAM = "scope/orders"
CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, LONG_MAX)
TWO = Topology.of([[(0, 0.0, 0.5), (1, 0.5, 1.0)]])
OLD, NEW = new_incarnation(), new_incarnation()


def at(a: int, b: int) -> StreamCut:
    return StreamCut.from_mapping({0: a, 1: b})


def topology(incarnation: str | None, published_at: int, deleted: bool = False) -> StreamTopology:
    return dataclasses.replace(topology_record(STREAM, TWO, published_at, deleted), incarnation=incarnation)


def created(incarnation: str, published_at: int = 1) -> StreamRetentionState:
    state = StreamRetentionState(STREAM)
    assert state.apply(topology(incarnation, published_at), 0) is None
    assert state.apply(StreamConfig(STREAM, CONSUMPTION, published_at, incarnation), 0) is None
    return state


def change(incarnation: str | None, name: str = "billing", generation: int = 1) -> SubscriberChange:
    return SubscriberChange(STREAM, name, generation, SubscriberChangeType.ADD, 5, incarnation)


def cut(incarnation: str | None, where: StreamCut, name: str = "billing", generation: int = 1) -> SubscriberCut:
    return SubscriberCut(STREAM, name, generation, where, 6, incarnation)


def recorded(incarnation: str | None, where: StreamCut, when_ms: int) -> StreamCutRecord:
    return StreamCutRecord(STREAM, where, when_ms, sum(where.as_dict().values()), incarnation)


def kind(rejection: object) -> RejectKind:
    assert rejection is not None
    return rejection.kind  # type: ignore[attr-defined, no-any-return]


def recreate(state: StreamRetentionState) -> None:
    """The stream deleted, then created again under its name (a new incarnation, a newer topology)."""
    assert state.apply(topology(OLD, 10, deleted=True), 0) is None
    assert state.apply(topology(NEW, 20), 0) is None
    assert state.apply(StreamConfig(STREAM, CONSUMPTION, 20, NEW), 0) is None


def test_a_subscribers_add_and_cut_replayed_into_the_stream_created_again_are_refused() -> None:
    """The finding: the old stream's genuine ADD and cut at its tail, replayed, truncated the new stream whole."""
    state = created(OLD)
    assert state.apply(change(OLD), 0) is None and state.apply(cut(OLD, at(40, 40)), 0) is None
    recreate(state)
    assert kind(state.apply(change(OLD), 0)) is RejectKind.WRONG_INCARNATION
    assert kind(state.apply(cut(OLD, at(40, 40)), 0)) is RejectKind.WRONG_INCARNATION
    assert [s.name for s in state.registry] == []
    assert state.apply(recorded(NEW, at(40, 40), 1000), 1000) is None
    assert state.decide(2000) is None  # no subscriber of the new stream holds a cut: nothing truncated


def test_a_recorded_cut_of_the_old_stream_neither_truncates_nor_blocks_the_new_one() -> None:
    state = created(OLD)
    recreate(state)
    assert kind(state.apply(recorded(OLD, at(40, 40), 5000), 5000)) is RejectKind.WRONG_INCARNATION
    assert state.apply(recorded(NEW, at(10, 10), 6000), 6000) is None  # not CUT_BEHIND the replayed one
    assert state.apply(change(NEW), 0) is None and state.apply(cut(NEW, at(10, 10)), 0) is None
    event = state.decide(7000)
    assert event is not None and event.cut == at(10, 10) and event.incarnation == NEW


def test_an_old_cut_is_not_taken_over_the_readded_subscribers_real_one() -> None:
    state = created(OLD)
    assert state.apply(change(OLD), 0) is None and state.apply(cut(OLD, at(40, 40)), 0) is None
    recreate(state)
    assert state.apply(change(NEW), 0) is None and state.apply(cut(NEW, at(5, 5)), 0) is None
    assert kind(state.apply(cut(OLD, at(40, 40)), 0)) is RejectKind.WRONG_INCARNATION
    assert state.lower_bound() == at(5, 5)


def test_a_replayed_topology_of_the_old_stream_does_not_bring_it_back() -> None:
    state = created(OLD)
    recreate(state)
    assert kind(state.apply(topology(OLD, 1), 0)) is RejectKind.WRONG_INCARNATION
    assert kind(state.apply(topology(OLD, 10, deleted=True), 0)) is RejectKind.WRONG_INCARNATION
    assert state.incarnation == NEW and not state.deleted


def test_a_record_written_before_incarnations_is_refused_only_where_incarnations_are_required() -> None:
    state = created(NEW)
    assert kind(state.apply(change(None), 0, require_incarnation=True)) is RejectKind.WRONG_INCARNATION
    assert state.apply(change(None), 0) is None  # rollout or off: taken as the current incarnation's


def test_a_stream_created_again_without_a_delete_seen_starts_over() -> None:
    """The DELETED topology was missed (compacted away): the newer topology of another incarnation still resets."""
    state = created(OLD)
    assert state.apply(change(OLD), 0) is None and state.apply(cut(OLD, at(40, 40)), 0) is None
    assert state.apply(topology(NEW, 20), 0) is None
    assert state.incarnation == NEW and [s.name for s in state.registry] == []


def test_the_incarnation_survives_the_state_store() -> None:
    state = created(OLD)
    again = StreamRetentionState.from_bytes(state.to_bytes())
    assert again.incarnation == OLD
    assert kind(again.apply(change(NEW), 0)) is RejectKind.WRONG_INCARNATION


def test_a_consumption_truncation_names_the_subscribers_whose_cuts_made_the_bound_and_their_keys() -> None:
    state = created(NEW)
    for name, key in (("billing", "billing-1"), ("audit", "audit-2")):
        assert state.apply(change(NEW, name), 0) is None
        assert state.apply(cut(NEW, at(10, 10), name), 0, signed_by=f"subscriber:{name}/{key}") is None
    assert state.apply(recorded(NEW, at(40, 40), 1000), 1000) is None
    event = state.decide(2000)
    assert event is not None and event.bound_by == ("audit (subscriber:audit/audit-2)",
                                                    "billing (subscriber:billing/billing-1)")
    again = StreamRetentionState.from_bytes(state.to_bytes())
    assert [s.signed_by for s in again.registry] == ["subscriber:audit/audit-2", "subscriber:billing/billing-1"]
