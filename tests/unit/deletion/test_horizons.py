"""Which records phase 2 treats as possibly handled before (no server)."""

from __future__ import annotations

from typing import Any

from confluent_kafka import KafkaError, KafkaException, TopicPartition

from reclaim.consumers.horizons import Horizons, end_offset

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


class _Watermarks:
    """Answers get_watermark_offsets with the given errors first, then with ``(0, high)``."""

    def __init__(self, *errors: int, high: int = 42) -> None:
        self.errors = list(errors)
        self.high = high
        self.calls = 0

    def get_watermark_offsets(self, tp: TopicPartition, timeout: float, cached: bool) -> tuple[int, int]:
        self.calls += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 0, self.high


def test_the_end_of_a_partition_whose_leader_is_not_known_yet_is_asked_again() -> None:
    # A topic created moments ago: the first answers say "not leader"; an unknown end would make every
    # record of the partition doubtful, listed before its delete.
    consumer: Any = _Watermarks(KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE)
    assert end_offset(consumer, TopicPartition("deletions", 0)) == 42
    assert consumer.calls == 3


def test_an_end_the_broker_refuses_for_good_is_unknown_at_once() -> None:
    consumer: Any = _Watermarks(KafkaError.TOPIC_AUTHORIZATION_FAILED)
    assert end_offset(consumer, TopicPartition("deletions", 0)) is None
    assert consumer.calls == 1
