"""A thin producer wrapper: Avro values, delivery reports collected, nothing reported sent unless confirmed."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from producers.config import Role, kafka_config

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]


class DeliveryTracker:
    """Delivery reports of one group of sends, filled in by librdkafka's callbacks on ``poll``/``flush``."""

    def __init__(self) -> None:
        self.sent = 0
        self.failed: dict[int, KafkaError] = {}
        self.confirmed: set[int] = set()

    def callback(self, index: int) -> Callable[[KafkaError | None, Message], None]:
        self.sent += 1

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                self.failed[index] = err
                log.warning("delivery failed: topic=%s error=%s", msg.topic(), err)
            else:
                self.confirmed.add(index)

        return on_delivery

    def unconfirmed(self) -> set[int]:
        """Indexes not confirmed: failed, or with no report at all (e.g. a flush that timed out)."""
        return set(range(self.sent)) - self.confirmed


class RecordProducer:
    """Produces raw values with keys and headers; builds the librdkafka client on first use."""

    def __init__(self, bootstrap: str, role: Role = "producer", overrides: Mapping[str, Any] | None = None) -> None:
        self._config = kafka_config(bootstrap, role, overrides)
        self._producer: Producer | None = None

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._config)
        return self._producer

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None,
             on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
        """Queue one record; when the local queue is full, serve delivery reports until it has room."""
        while True:
            try:
                self.producer.produce(topic, value=value, key=key, headers=list(headers or ()),
                                      on_delivery=on_delivery)
                break
            except BufferError:
                self.producer.poll(0.1)
        self.producer.poll(0)

    def wait(self, tracker: DeliveryTracker, timeout_s: float) -> set[int]:
        """Flush and return the indexes of ``tracker`` whose delivery is not confirmed."""
        deadline = time.monotonic() + timeout_s
        while tracker.unconfirmed() - set(tracker.failed) and time.monotonic() < deadline:
            self.producer.flush(min(1.0, max(0.0, deadline - time.monotonic())))
        return tracker.unconfirmed()

    def close(self, timeout_s: float = 10.0) -> None:
        if self._producer is not None:
            self._producer.flush(timeout_s)
            self._producer = None
