"""Stream cuts against multi-epoch topologies: comparison, validation, advancing, sizes between cuts."""

from __future__ import annotations

import pytest

from reclaim.retention.cuts import (
    CutComparison,
    check_advances,
    compare,
    segments_between,
    size_between,
    size_till,
    validate,
)
from reclaim.retention.errors import CutBehindError, CutProblem, InvalidCutError
from reclaim.schemas.streams import StreamCut
from tests.support.topologies import S0, S1, S2, S3, S4, S5, S6, S7, cut, five_epochs, scaled, sid

T = five_epochs()


@pytest.mark.parametrize(("first", "second", "expected"), [
    (cut(S0=10, S1=5), cut(S0=10, S1=5), CutComparison.EQUAL_OR_AFTER),
    (cut(S0=10, S1=5), cut(S0=10, S1=7), CutComparison.BEFORE),
    (cut(S0=11, S1=5), cut(S0=10, S1=7), CutComparison.OVERLAPS),
    # Different segments over the same keys: the higher id (a later epoch) is later, whatever the offsets.
    (cut(S0=100, S2=0, S3=0), cut(S0=100, S1=99), CutComparison.EQUAL_OR_AFTER),
    (cut(S0=100, S1=99), cut(S0=100, S2=0, S3=0), CutComparison.BEFORE),
    (cut(S4=0, S3=5), cut(S0=3, S2=40, S3=5), CutComparison.EQUAL_OR_AFTER),
    (cut(S5=1, S7=0), cut(S4=70, S3=59), CutComparison.EQUAL_OR_AFTER),
    # Ahead on part of the keys, behind on another.
    (cut(S0=1, S2=3, S3=9), cut(S4=0, S3=2), CutComparison.OVERLAPS),
    # An unreached successor is after its predecessor, at any offset.
    (cut(S0=5, S2=-1, S3=-1), cut(S0=5, S1=100), CutComparison.EQUAL_OR_AFTER),
    (cut(S0=5, S2=-1, S3=-1), cut(S0=5, S2=0, S3=0), CutComparison.BEFORE),
])
def test_compare_across_epochs(first: StreamCut, second: StreamCut, expected: CutComparison) -> None:
    assert compare(T, first, second) is expected


def test_the_empty_cut_is_the_head() -> None:
    assert compare(T, StreamCut(), cut(S0=0, S1=0)) is CutComparison.EQUAL_OR_AFTER
    assert compare(T, StreamCut(), cut(S0=1, S1=0)) is CutComparison.BEFORE


def test_compare_is_not_fooled_by_disjoint_id_ranges() -> None:
    # Every id of the second cut is above every id of the first, yet the first is not before it on all keys:
    # a shortcut on id ranges alone would call this BEFORE.
    topology = scaled(2, [([1], [(0.5, 1.0)])])
    assert compare(topology, cut(S0=9, S1=0), StreamCut.from_mapping({0: 3, sid(1, 2): 0})) is CutComparison.OVERLAPS


@pytest.mark.parametrize("valid", [
    cut(S0=0, S1=0), cut(S0=7, S2=1, S3=2), cut(S4=0, S3=0), cut(S5=1, S6=2, S3=3), cut(S5=1, S7=0),
    cut(S0=5, S2=-1, S3=-1), cut(S0=3, S2=5, S3=-1), cut(S0=5, S4=-1, S3=2), cut(S5=4, S6=3, S7=-1),
    cut(S5=2, S6=1, S3=4),
])
def test_valid_cuts(valid: StreamCut) -> None:
    validate(T, valid)


def test_a_sealed_segment_read_to_its_end_is_valid_and_an_active_one_has_no_known_end() -> None:
    validate(T, cut(S0=100, S1=100))
    validate(T, cut(S5=10**12, S7=10**12))  # active: their current length is the controller's to check


@pytest.mark.parametrize(("invalid", "problem"), [
    (StreamCut.from_mapping({0: 1, 99: 0}), CutProblem.UNKNOWN_SEGMENT),
    (cut(S0=-2, S1=0), CutProblem.BAD_OFFSET),
    # S1 was sealed at 100 bytes: a reader cannot be past its end.
    (cut(S0=5, S1=101), CutProblem.BAD_OFFSET),
    (cut(S4=81, S3=0), CutProblem.BAD_OFFSET),
    (cut(S0=1, S4=0, S3=0), CutProblem.OVERLAP),
    (cut(S0=1), CutProblem.GAP),
    (cut(S5=1, S3=2), CutProblem.GAP),
    (cut(S0=-1, S4=0, S3=0), CutProblem.UNREACHED_BEFORE_REACHED),
    # S5 is read while S2, which it descends from (through S4), is still being read.
    (cut(S5=1, S6=-1, S2=2, S3=4), CutProblem.NOT_CAUSAL),
])
def test_invalid_cuts_name_their_problem(invalid: StreamCut, problem: CutProblem) -> None:
    with pytest.raises(InvalidCutError) as caught:
        validate(T, invalid)
    assert caught.value.problem is problem
    assert problem.value in str(caught.value)


def test_ranges_that_start_at_the_same_point_overlap() -> None:
    # s2 [.5, .75) and s1 [.5, 1) start together; half-open ranges still overlap.
    with pytest.raises(InvalidCutError) as caught:
        validate(T, cut(S0=0, S1=0, S2=0))
    assert caught.value.problem is CutProblem.OVERLAP


def test_a_cut_only_advances() -> None:
    check_advances(T, cut(S0=5, S1=5), None, "previous cut")
    check_advances(T, cut(S0=5, S1=5), cut(S0=5, S1=5), "previous cut")
    check_advances(T, cut(S4=0, S3=0), cut(S0=5, S1=5), "previous cut")
    with pytest.raises(CutBehindError, match="before the previous cut"):
        check_advances(T, cut(S0=4, S1=5), cut(S0=5, S1=5), "previous cut")
    with pytest.raises(CutBehindError, match="overlaps the previous cut"):
        check_advances(T, cut(S0=6, S1=4), cut(S0=5, S1=5), "previous cut")


def test_segments_between_cuts_across_epochs() -> None:
    between = {s.segment_id for s in segments_between(T, cut(S0=10, S1=20), cut(S5=1, S7=2))}
    assert between == {S0, S1, S2, S3, S4, S5, S6, S7}
    between = {s.segment_id for s in segments_between(T, cut(S4=5, S3=5), cut(S5=1, S6=2, S3=7))}
    assert between == {S4, S3, S5, S6}


def test_size_between_counts_each_case() -> None:
    # In both cuts: to - from (S3: 9 - 5); only in `from`: sealed - from (S4: 80 - 5);
    # only in `to`: its offset (S5 1, S6 2).
    assert size_between(T, cut(S4=5, S3=5), cut(S5=1, S6=2, S3=9)) == 4 + 75 + 1 + 2
    # From a cut in epoch 1 to one in epoch 4: S0, S2 and S3 only in `from` (sealed - from), S4 and S6 in
    # neither (their sealed lengths), S5 and S7 only in `to`; S1 lies wholly before `from`.
    assert size_between(T, cut(S0=10, S2=0, S3=10), cut(S5=1, S7=2)) == (100 - 10) + 50 + (60 - 10) + 80 + 1 + 40 + 2


def test_size_till_counts_from_the_start_of_the_stream() -> None:
    assert size_till(T, cut(S0=0, S1=0)) == 0
    assert size_till(T, cut(S0=10, S1=20)) == 30
    assert size_till(T, cut(S5=1, S7=2)) == sum(SEALED_ALL) + 1 + 2


SEALED_ALL = (100, 100, 50, 80, 60, 40)
