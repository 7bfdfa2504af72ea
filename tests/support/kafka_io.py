"""Producing confirmed messages to the real broker and reading them back, for the integration tests."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from confluent_kafka import Consumer, Message

from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker, Headers, RecordProducer


@dataclass(frozen=True)
class Outgoing:
    """One message to produce: raw value bytes, key and headers."""

    topic: str
    value: bytes
    key: bytes
    headers: Headers = ()


def produce_confirmed(bootstrap: str, messages: Sequence[Outgoing], timeout_s: float = 30.0) -> None:
    """Produce ``messages`` and fail unless the broker confirms every one of them."""
    producer = RecordProducer(bootstrap, "idempotent-producer")
    tracker = DeliveryTracker()
    try:
        for index, message in enumerate(messages):
            producer.send(message.topic, message.value, key=message.key, headers=message.headers,
                          on_delivery=tracker.callback(index))
        unconfirmed = producer.wait(tracker, timeout_s)
    finally:
        producer.close()
    assert not unconfirmed, {index: str(tracker.failed.get(index, "no report")) for index in unconfirmed}


def consume_from_start(bootstrap: str, topics: Sequence[str], group_id: str, count: int,
                       timeout_s: float = 30.0) -> list[Message]:
    """Read ``count`` messages of ``topics`` as a new consumer group from the earliest offsets."""
    overrides = {"group.id": group_id, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    consumer = Consumer(kafka_config(bootstrap, "consumer", overrides))
    consumer.subscribe(list(topics))
    received: list[Message] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(received) < count and time.monotonic() < deadline:
            for message in consumer.consume(count - len(received), 0.5):
                error = message.error()
                assert error is None, f"consumer error on {message.topic()}: {error}"
                received.append(message)
    finally:
        consumer.close()
    assert len(received) == count, f"read {len(received)} of {count} messages in {timeout_s}s"
    return received
