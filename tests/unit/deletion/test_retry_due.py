"""When a retry tier's record is due, and what the worker's intake does with a poll: a record is verified
before its headers are read, and no record holds its partition past its tier's delay; no server."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from confluent_kafka import TopicPartition

from reclaim.consumers.intake import Intake, Taken
from reclaim.consumers.retry import H_ATTEMPT, H_NOT_BEFORE, H_OFFSET, H_PARTITION, H_TOPIC, due_ms
from reclaim.deletion.outcomes import Outcome
from reclaim.producers.topics import TopicNames
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import REJECTED, RecordSigner, RecordVerifier

TS = 1_700_000_000_000
"""The record's own Kafka timestamp."""
READ = TS + 2_000
"""When this worker first read it."""
FAR = 2**62


@pytest.mark.parametrize(("not_before", "expected"), [
    (TS + 10_000, TS + 10_000),  # as the worker wrote it: the tier's delay after the reroute
    (TS + 3_000, TS + 3_000),  # earlier than the tier's delay: kept
    (FAR, TS + 10_000),  # far in the future: clamped
    (TS + 10_001, TS + 10_000),
    (None, TS + 10_000),  # missing or not a number: the tier's whole delay
    (-1, -1),  # in the past: due now
    (0, 0),
])
def test_a_not_before_is_clamped_to_the_tiers_delay_past_the_records_timestamp(not_before: int | None,
                                                                              expected: int) -> None:
    assert due_ms(not_before, 10, TS, READ) == expected


@pytest.mark.parametrize("timestamp", [None, -1])
def test_a_record_without_a_timestamp_counts_from_its_first_read(timestamp: int | None) -> None:
    assert due_ms(FAR, 10, timestamp, READ) == READ + 10_000


def test_a_timestamp_in_the_future_counts_from_the_first_read() -> None:
    assert due_ms(FAR, 10, FAR - 1, READ) == READ + 10_000


def test_no_record_is_due_later_than_its_tiers_delay_past_its_first_read() -> None:
    for not_before in (None, -5, 0, TS, READ + 9_999, READ + 10_001, FAR):
        for timestamp in (None, -1, 0, TS, READ, READ + 1, FAR):
            assert due_ms(not_before, 10, timestamp, READ) <= READ + 10_000


# The intake, on a poll of fake messages and a consumer that records what it is told.

TOPICS = TopicNames.for_prefix("t.", (10, 60))
TIER = TOPICS.retry_topics[0]
KEYRING = Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)])
SIGNER = RecordSigner(KEYRING, "controller")


@dataclass
class _Message:
    _topic: str
    _offset: int
    _headers: list[tuple[str, bytes]] | None
    _timestamp: int = TS
    _value: bytes = b"pending delete"
    _key: bytes = b"chunk"

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return self._key

    def value(self) -> bytes:
        return self._value

    def headers(self) -> list[tuple[str, bytes]] | None:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, self._timestamp)


@dataclass
class _Consumer:
    paused: list[tuple[str, int, int]] = field(default_factory=list)
    resumed: list[tuple[str, int]] = field(default_factory=list)

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused += [(tp.topic, tp.partition, tp.offset) for tp in tps]

    def seek(self, tp: TopicPartition) -> None:
        pass

    def resume(self, tps: list[TopicPartition]) -> None:
        self.resumed += [(tp.topic, tp.partition) for tp in tps]


def _retried(offset: int, not_before: int, signed: bool = True, timestamp: int = TS) -> _Message:
    history = [(H_ATTEMPT, b"2"), (H_TOPIC, TOPICS.deletion.encode()), (H_PARTITION, b"0"), (H_OFFSET, b"7"),
               (H_NOT_BEFORE, str(not_before).encode())]
    signature = SIGNER.headers(TOPICS.deletion, b"chunk", b"pending delete") if signed else []
    return _Message(TIER, offset, [*signature, *history], timestamp)


def _intake(consumer: _Consumer) -> Intake:
    return Intake(consumer, TOPICS, RecordVerifier(KEYRING))


def _clocked(monkeypatch: pytest.MonkeyPatch) -> tuple[_Consumer, Intake, list[float]]:
    """A fresh intake on a recording consumer, and the clock it reads (seconds, 1 s past TS), to move."""
    consumer = _Consumer()
    intake = _intake(consumer)
    clock = [TS / 1000 + 1]
    monkeypatch.setattr("reclaim.consumers.intake.time.time", lambda: clock[0])
    return consumer, intake, clock


def _take(intake: Intake, messages: list[_Message]) -> Taken:
    return intake.take(messages)


def test_an_unsigned_record_is_refused_before_its_not_before_is_read_and_holds_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _Consumer()
    refused_before = REJECTED.labels(TIER, "unsigned")._value.get()
    monkeypatch.setattr("reclaim.consumers.intake.time.time", lambda: TS / 1000 + 1)  # within the tier's delay
    taken = _take(_intake(consumer), [_retried(0, FAR, signed=False), _retried(1, TS)])
    assert consumer.paused == []
    assert [p.offset for p in taken.ready] == [1]
    [refused] = taken.refused
    assert refused.verdict.outcome is Outcome.UNAUTHENTICATED and "unsigned" in refused.verdict.reason
    # Its headers claim an origin; the dead letter names where it was read.
    assert (refused.polled.delivery.topic, refused.polled.delivery.offset, refused.polled.delivery.attempt) == (
        TIER, 0, 1)
    assert REJECTED.labels(TIER, "unsigned")._value.get() == refused_before + 1


def test_a_signed_record_with_a_far_not_before_is_held_for_its_tiers_delay_only(
        monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, intake, clock = _clocked(monkeypatch)
    taken = _take(intake, [_retried(5, FAR), _retried(6, 0)])
    assert taken.ready == [] and taken.report.held == 2
    assert consumer.paused == [(TIER, 0, 5)]
    clock[0] = TS / 1000 + 9.9
    intake.resume_due()
    assert consumer.resumed == []
    clock[0] = TS / 1000 + 10
    intake.resume_due()
    assert consumer.resumed == [(TIER, 0)]
    assert [p.offset for p in _take(intake, [_retried(5, FAR), _retried(6, 0)]).ready] == [5, 6]


def test_a_held_record_read_again_is_due_even_with_its_timestamp_far_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _Consumer()
    intake = _intake(consumer)
    clock = [TS / 1000]
    monkeypatch.setattr("reclaim.consumers.intake.time.time", lambda: clock[0])
    assert _take(intake, [_retried(5, FAR, timestamp=FAR)]).ready == []
    clock[0] += 10
    intake.resume_due()
    assert [p.offset for p in _take(intake, [_retried(5, FAR, timestamp=FAR)]).ready] == [5]


# Rebalances: librdkafka keeps a partition's pause across a revoke and a reassignment (librdkafka #1849).

def test_a_held_partition_given_back_before_it_is_due_is_held_again_then_resumed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, intake, clock = _clocked(monkeypatch)
    assert _take(intake, [_retried(5, TS + 10_000)]).ready == []
    assert intake.held == 1
    intake.revoked([(TIER, 0)])
    assert consumer.resumed == [(TIER, 0)] and intake.held == 0  # no pause is left behind
    intake.assigned([(TIER, 0), (TIER, 1)])
    assert consumer.paused[-1] == (TIER, 0, -1001) and intake.held == 1  # held again; the other one resumed
    assert consumer.resumed[-1] == (TIER, 1)
    clock[0] = TS / 1000 + 10
    intake.resume_due()
    assert consumer.resumed[-1] == (TIER, 0) and intake.held == 0


def _held_then_revoked(monkeypatch: pytest.MonkeyPatch) -> tuple[_Consumer, Intake, list[float]]:
    """An intake that held its tier's partition 0 at a record due at TS + 10 s, then lost the partition;
    the clock it reads (seconds), to move."""
    consumer, intake, clock = _clocked(monkeypatch)
    _take(intake, [_retried(5, TS + 10_000)])
    intake.revoked([(TIER, 0)])
    return consumer, intake, clock


def test_a_held_partition_given_back_after_it_is_due_is_resumed(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, intake, clock = _held_then_revoked(monkeypatch)
    clock[0] = TS / 1000 + 11
    paused = len(consumer.paused)
    intake.assigned([(TIER, 0)])
    assert consumer.resumed[-1] == (TIER, 0) and len(consumer.paused) == paused and intake.held == 0
    # Read again, it is due: the hold kept its first read, so the clamp still counts from then.
    assert [p.offset for p in _take(intake, [_retried(5, FAR, timestamp=FAR)]).ready] == [5]


def test_a_partition_this_worker_never_held_is_resumed_on_assignment() -> None:
    consumer = _Consumer()
    intake = _intake(consumer)
    intake.assigned([(TOPICS.deletion, 0), (TIER, 3)])
    assert consumer.resumed == [(TOPICS.deletion, 0), (TIER, 3)] and consumer.paused == []


def test_a_revoked_hold_is_not_resumed_while_the_partition_is_another_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, intake, clock = _held_then_revoked(monkeypatch)
    resumed = len(consumer.resumed)
    clock[0] = TS / 1000 + 20
    intake.resume_due()
    assert len(consumer.resumed) == resumed
