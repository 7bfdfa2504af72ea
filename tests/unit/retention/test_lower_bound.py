"""The subscribers' lower bound across split and merged epochs, by Pravega's rules, and as a property."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from reclaim.retention.cuts import CutComparison, compare, validate
from reclaim.retention.lower_bound import lower_bound
from reclaim.schemas.streams import StreamCut
from tests.support.topologies import Reader, cut, five_epochs, random_topology

T = five_epochs()


def test_no_cut_gives_no_bound() -> None:
    assert lower_bound(T, []) == StreamCut()


def test_one_cut_is_its_own_bound() -> None:
    assert lower_bound(T, [cut(S5=3, S6=1, S3=9)]) == cut(S5=3, S6=1, S3=9)


def test_same_segment_keeps_the_smaller_offset() -> None:
    assert lower_bound(T, [cut(S0=10, S1=4), cut(S0=3, S1=9)]) == cut(S0=3, S1=4)


def test_a_predecessor_evicts_its_reached_successors() -> None:
    # One subscriber is in epoch 2 (S4), the other still in epoch 0 over the same keys.
    assert lower_bound(T, [cut(S4=7, S3=5), cut(S0=20, S1=30)]) == cut(S0=20, S1=30)
    assert lower_bound(T, [cut(S0=20, S1=30), cut(S4=7, S3=5)]) == cut(S0=20, S1=30)


def test_a_reached_segment_behind_a_predecessor_in_the_bound_is_ignored() -> None:
    assert lower_bound(T, [cut(S0=20, S2=3, S3=4), cut(S5=1, S7=0)]) == cut(S0=20, S2=3, S3=4)


def test_bound_mixes_epochs_per_key_range() -> None:
    # Ahead on [0, .75) in one cut, ahead on [.75, 1) in the other: the bound takes the earlier of each.
    bound = lower_bound(T, [cut(S5=1, S6=2, S3=10), cut(S0=40, S2=6, S3=50)])
    assert bound == cut(S0=40, S2=6, S3=10)


def test_unreached_successor_stays_only_where_predecessors_leave_keys_uncovered() -> None:
    # S4 (-1) merges S0 and S2. With S0 reached in the bound, S4 is still needed for S2's keys.
    assert lower_bound(T, [cut(S0=5, S4=-1, S3=1)]) == cut(S0=5, S4=-1, S3=1)
    # Once S2 enters the bound too, S0 and S2 cover all of S4: the -1 successor is evicted.
    bound = lower_bound(T, [cut(S0=5, S4=-1, S3=1), cut(S0=9, S2=4, S3=8)])
    assert bound == cut(S0=5, S2=4, S3=1)
    # Fed the other way round, the -1 successor never enters.
    assert lower_bound(T, [cut(S0=9, S2=4, S3=8), cut(S0=5, S4=-1, S3=1)]) == bound


def test_unreached_segment_with_ranges_starting_at_the_same_point() -> None:
    # S5 [0, .25) and S4 [0, .75) start at 0: S5 is S4's successor, so S4 reached evicts S5 reached.
    assert lower_bound(T, [cut(S5=2, S6=-1, S3=3), cut(S4=6, S3=9)]) == cut(S4=6, S3=3)


def test_bound_is_valid_and_every_cut_is_at_or_after_it_in_the_fixed_example() -> None:
    cuts = [cut(S5=2, S7=0), cut(S4=10, S3=20), cut(S0=50, S2=-1, S3=-1), cut(S5=1, S6=2, S3=30)]
    bound = lower_bound(T, cuts)
    validate(T, bound)
    assert all(compare(T, c, bound) is CutComparison.EQUAL_OR_AFTER for c in cuts)
    assert bound == cut(S0=50, S2=-1, S3=-1)


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), scales=st.integers(0, 6), readers=st.integers(1, 4))
def test_random_histories_every_reader_is_at_or_after_the_bound(seed: int, scales: int, readers: int) -> None:
    rng = random.Random(seed)
    topology = random_topology(rng, scales)
    cuts = []
    for _ in range(readers):
        reader = Reader(topology, rng)
        for _ in range(rng.randint(0, 25)):
            reader.step()
        cuts.append(reader.cut())
    for c in cuts:
        validate(topology, c)
    bound = lower_bound(topology, cuts)
    validate(topology, bound)
    for c in cuts:
        assert compare(topology, c, bound) is CutComparison.EQUAL_OR_AFTER, (c, bound)


@pytest.mark.parametrize("order", [0, 1, 2])
def test_bound_does_not_depend_on_the_order_of_cuts(order: int) -> None:
    cuts = [cut(S5=2, S7=0), cut(S4=10, S3=20), cut(S0=50, S2=3, S3=40)]
    rotated = cuts[order:] + cuts[:order]
    assert lower_bound(T, rotated) == cut(S0=50, S2=3, S3=20)
