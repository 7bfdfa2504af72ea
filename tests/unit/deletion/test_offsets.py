"""Offset bookkeeping as values, property-tested: the stored offset never passes a record whose
outcome is not final; no server."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from reclaim.consumers.batches import Partition
from reclaim.consumers.offsets import Position, all_final, plan_offsets

A, B = ("t", 0), ("t.retry-10s", 1)


def test_all_final_stores_past_the_last_record() -> None:
    plan = plan_offsets([Position(A, 5, True), Position(A, 6, True), Position(B, 0, True)])
    assert dict(plan.store) == {A: 7, B: 1} and not plan.seek and plan.acked == 3


def test_gaps_in_offsets_are_fine() -> None:
    # read_committed skips transaction markers; compaction leaves holes.
    plan = plan_offsets([Position(A, 10, True), Position(A, 14, True)])
    assert dict(plan.store) == {A: 15}


def test_a_failed_reroute_stops_the_partition_there_and_seeks_back() -> None:
    plan = plan_offsets([Position(A, 1, True), Position(A, 2, False), Position(A, 3, True), Position(B, 4, True)])
    assert dict(plan.store) == {A: 2, B: 5}
    assert dict(plan.seek) == {A: 2}
    assert plan.acked == 2


def test_a_first_record_not_final_stores_nothing_for_its_partition() -> None:
    plan = plan_offsets([Position(A, 8, False), Position(A, 9, True)])
    assert not plan.store and dict(plan.seek) == {A: 8} and plan.acked == 0


def test_partitions_sought_back_earlier_are_left_alone() -> None:
    plan = plan_offsets([Position(A, 8, True), Position(B, 3, False)], dropped={A})
    assert not plan.store and dict(plan.seek) == {B: 3}


def test_order_of_arrival_does_not_matter() -> None:
    plan = plan_offsets([Position(A, 3, True), Position(A, 1, True), Position(A, 2, True)])
    assert dict(plan.store) == {A: 4}


positions = st.lists(
    st.tuples(st.sampled_from([A, B, ("t.retry-60s", 2)]), st.integers(0, 200), st.booleans()),
    max_size=60, unique_by=lambda p: (p[0], p[1]),
).map(lambda items: [Position(source, offset, final) for source, offset, final in items])


@given(positions, st.sets(st.sampled_from([A, B])))
def test_the_stored_offset_never_passes_a_record_that_is_not_final(batch: list[Position],
                                                                   dropped: set[tuple[str, int]]) -> None:
    plan = plan_offsets(batch, dropped)
    for source, stored in plan.store.items():
        assert source not in dropped
        mine = [p for p in batch if p.source == source]
        assert all(p.final for p in mine if p.offset < stored)
        # and it goes as far as it may: the record at the stored offset, if any, is not final
        assert all(not p.final for p in mine if p.offset == min((q.offset for q in mine if q.offset >= stored),
                                                                 default=-1))
    for source, seek in plan.seek.items():
        mine = [p for p in batch if p.source == source]
        assert seek == min(p.offset for p in mine if not p.final)
        assert plan.store.get(source, 0) <= seek
    kept = [p for p in batch if p.source not in dropped]
    assert plan.acked == sum(1 for p in kept if p.offset < plan.store.get(p.source, -1))
    assert set(plan.seek) == {p.source for p in kept if not p.final}



@given(st.lists(st.tuples(st.sampled_from([A, B]), st.integers(0, 1000)), unique=True, max_size=40))
def test_all_final_is_plan_offsets_of_a_batch_whose_records_are_all_final(read: list[tuple[Partition, int]]) -> None:
    assert all_final(read) == plan_offsets(Position(source, offset, True) for source, offset in read)
