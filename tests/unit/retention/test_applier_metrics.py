"""The truncation applier's metrics after each poll, without a broker: outcomes, consumer lag, the delay from
an event's write to its outcome, and the time of the last poll."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    TopicPartition,
)
from prometheus_client import REGISTRY

from reclaim.consumers import truncation_applier
from reclaim.consumers.truncation_applier import ApplierConfig, TruncationApplier, apply_delay_s, lag
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut, TruncationEvent, TruncationReason
from reclaim.segments.streams import StreamController
from tests.support.orders import STREAM, orders_stream

TOPIC = "t.truncation"
NOW_S = 1_800_000_000.0
CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION)


@dataclass
class Record:
    """A consumed record as :class:`confluent_kafka.Message` shows it."""

    partition_: int
    at: int
    payload: bytes
    written_ms: int

    def error(self) -> None:
        return None

    def topic(self) -> str:
        return TOPIC

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.at

    def value(self) -> bytes:
        return self.payload

    def key(self) -> bytes:
        return STREAM.encode()

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, self.written_ms


@dataclass
class FakeConsumer:
    """A consumer of two partitions that hands out ``batches`` and knows the high watermarks of its fetches."""

    batches: list[list[Record]]
    highs: dict[int, int]
    positions: dict[int, int] = field(default_factory=dict)
    stored: list[int] = field(default_factory=list)

    def subscribe(self, topics: list[str]) -> None:
        pass

    def consume(self, num_messages: int, timeout: float) -> list[Record]:
        batch = self.batches.pop(0) if self.batches else []
        for record in batch:
            self.positions[record.partition_] = record.at + 1
        return batch

    def store_offsets(self, message: Record) -> None:
        self.stored.append(message.at)

    def seek(self, tp: TopicPartition) -> None:
        self.positions[tp.partition] = tp.offset

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in sorted(self.highs)]

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, tp.partition, self.positions.get(tp.partition, OFFSET_INVALID))
                for tp in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None,
                              cached: bool = False) -> tuple[int, int] | None:
        assert cached, "the lag is read after every poll: never a request to the broker"
        return 0, self.highs[partition.partition]


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        controller.set_policy(STREAM, CONSUMPTION)
        yield controller


def event(first: int, second: int) -> bytes:
    cut = StreamCut.from_mapping({0: first, 1: second})
    decided = TruncationEvent(STREAM, cut, TruncationReason.CONSUMPTION, millis_now(), CONSUMPTION)
    return bytes(build_codec().encode(decided, TOPIC))


def applier(monkeypatch: pytest.MonkeyPatch, consumer: FakeConsumer, controller: StreamController,
            codec: Any = None) -> TruncationApplier:
    """An applier polling ``consumer`` (no Kafka client is made), at a clock that stands at ``NOW_S``."""
    monkeypatch.setattr(truncation_applier, "Consumer", lambda config: consumer)
    return TruncationApplier(ApplierConfig("127.0.0.1:9", TOPIC), controller, codec or build_codec(),
                             sleep=lambda s: None, clock=lambda: NOW_S)


def sample(name: str, **labels: str) -> float:
    """A sample of the applier's metrics; those of the lag, delay and polls are by topic."""
    if not name.startswith("reclaim_truncations_"):
        labels = {"topic": TOPIC, **labels}
    value = REGISTRY.get_sample_value(name, labels)
    assert value is not None, f"{name} {labels} is not exported"
    return value


def test_a_poll_sets_the_lag_the_delays_and_the_time_of_the_poll(monkeypatch: pytest.MonkeyPatch,
                                                                  controller: StreamController) -> None:
    written_ms = int((NOW_S - 4) * 1000)
    consumer = FakeConsumer([[Record(0, 5, event(10, 10), written_ms), Record(0, 6, event(20, 20), written_ms)]],
                            highs={0: 9, 1: 3})
    polling = applier(monkeypatch, consumer, controller)
    delays = sample("reclaim_truncation_apply_delay_seconds_count")
    delayed = sample("reclaim_truncation_apply_delay_seconds_sum")
    truncated = sample("reclaim_truncations_total", outcome="truncated")

    outcomes = polling.run_once()

    assert [o.name for o in outcomes] == ["TRUNCATED", "TRUNCATED"]
    assert sample("reclaim_truncations_total", outcome="truncated") == truncated + 2
    # Partition 0: read to offset 7 of 9. Partition 1: nothing read since it was assigned, so not counted.
    assert sample("reclaim_truncation_consumer_lag") == 2
    assert sample("reclaim_truncation_apply_delay_seconds_count") == delays + 2
    assert sample("reclaim_truncation_apply_delay_seconds_sum") == pytest.approx(delayed + 8)
    assert sample("reclaim_truncation_applier_last_poll_timestamp_seconds") == NOW_S


class RegistryDown:
    def decode(self, value: bytes, topic: str, expected: type) -> object:
        from reclaim.schemas.errors import DecodeReason, RecordDecodeError

        raise RecordDecodeError(DecodeReason.REGISTRY_UNAVAILABLE, "connection refused")


def test_an_event_to_retry_is_lag_and_no_delay(monkeypatch: pytest.MonkeyPatch,
                                                controller: StreamController) -> None:
    consumer = FakeConsumer([[Record(1, 40, event(10, 10), int(NOW_S * 1000))]], highs={1: 42})
    polling = applier(monkeypatch, consumer, controller, RegistryDown())
    delays = sample("reclaim_truncation_apply_delay_seconds_count")

    outcomes = polling.run_once()

    assert [o.name for o in outcomes] == ["RETRY"]
    assert consumer.stored == []
    assert sample("reclaim_truncation_consumer_lag") == 2  # rewound to the event: it and the next one wait
    assert sample("reclaim_truncation_apply_delay_seconds_count") == delays


def test_an_applier_with_no_partition_has_no_lag(monkeypatch: pytest.MonkeyPatch,
                                                 controller: StreamController) -> None:
    applier(monkeypatch, FakeConsumer([], highs={}), controller).run_once()
    assert sample("reclaim_truncation_consumer_lag") == 0


def test_only_a_process_that_runs_an_applier_exports_its_lag_and_polls(monkeypatch: pytest.MonkeyPatch,
                                                                        controller: StreamController) -> None:
    # Every reclaim command imports the applier's module: a worker exporting a poll time that never moves
    # would look like a stuck applier.
    def topics(name: str) -> set[str]:
        return {s.labels["topic"] for family in REGISTRY.collect() for s in family.samples if s.name == name}

    assert "t.other-truncation" not in topics("reclaim_truncation_applier_last_poll_timestamp_seconds")
    monkeypatch.setattr(truncation_applier, "Consumer", lambda config: FakeConsumer([], highs={}))
    TruncationApplier(ApplierConfig("127.0.0.1:9", "t.other-truncation"), controller, build_codec(),
                      clock=lambda: NOW_S)
    assert REGISTRY.get_sample_value("reclaim_truncation_applier_last_poll_timestamp_seconds",
                                     {"topic": "t.other-truncation"}) == NOW_S
    assert REGISTRY.get_sample_value("reclaim_truncation_consumer_lag", {"topic": "t.other-truncation"}) == 0
    assert "t.other-truncation" in topics("reclaim_truncation_apply_delay_seconds_count")


@pytest.mark.parametrize(("positions", "highs", "expected"), [
    ({("t", 0): 7, ("t", 1): 3}, {("t", 0): 9, ("t", 1): 3}, 2),
    ({("t", 0): OFFSET_INVALID}, {("t", 0): 9}, 0),  # nothing read yet: not known
    ({("t", 0): 4}, {("t", 0): OFFSET_INVALID}, 0),  # no fetch yet: not known
    ({("t", 0): 4}, {}, 0),  # the watermark query timed out
    ({("t", 0): 12}, {("t", 0): 9}, 0),  # a cached watermark older than the position
])
def test_lag_sums_what_is_known_per_partition(positions: dict[tuple[str, int], int],
                                              highs: dict[tuple[str, int], int], expected: int) -> None:
    assert lag(positions, highs) == expected


def test_the_delay_is_from_the_kafka_timestamp_and_never_negative() -> None:
    assert apply_delay_s((TIMESTAMP_CREATE_TIME, 1_000_000), 1_002.5) == 2.5
    assert apply_delay_s((TIMESTAMP_LOG_APPEND_TIME, 1_000_000), 1_000.0) == 0.0
    assert apply_delay_s((TIMESTAMP_CREATE_TIME, 2_000_000), 1_000.0) == 0.0  # the producer's clock ahead
    assert apply_delay_s((TIMESTAMP_NOT_AVAILABLE, 0), 1_000.0) is None
    assert apply_delay_s((TIMESTAMP_CREATE_TIME, -1), 1_000.0) is None
