"""Which records phase 2 treats as possibly handled before (no server)."""

from __future__ import annotations

from consumers.horizons import Horizons

P = ("deletions", 0)


def test_records_past_the_end_at_assignment_are_fresh_and_those_before_are_not() -> None:
    horizons = Horizons()
    horizons.assigned(P, 100)
    assert horizons.read(P, 99) is True
    assert horizons.read(P, 100) is False
    assert horizons.read(P, 5000) is False


def test_an_unreadable_end_makes_every_record_doubtful() -> None:
    horizons = Horizons()
    horizons.assigned(P, None)
    assert horizons.read(P, 10**12) is True


def test_a_partition_not_assigned_is_doubtful() -> None:
    assert Horizons().read(P, 0) is True


def test_seeking_back_makes_what_was_read_doubtful_but_not_what_follows() -> None:
    horizons = Horizons()
    horizons.assigned(P, 0)
    for offset in range(10):
        assert horizons.read(P, offset) is False
    horizons.sought_back(P)
    assert horizons.read(P, 3) is True
    assert horizons.read(P, 9) is True
    assert horizons.read(P, 10) is False


def test_a_seek_back_never_lowers_the_horizon() -> None:
    horizons = Horizons()
    horizons.assigned(P, 50)
    horizons.read(P, 3)
    horizons.sought_back(P)
    assert horizons.read(P, 49) is True


def test_a_reassigned_partition_starts_over() -> None:
    horizons = Horizons()
    horizons.assigned(P, 0)
    horizons.read(P, 7)
    horizons.sought_back(P)
    horizons.revoked(P)
    horizons.assigned(P, 20)
    assert horizons.read(P, 8) is True
    assert horizons.read(P, 20) is False
