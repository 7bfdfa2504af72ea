"""A thin producer wrapper: Avro values, delivery reports collected, nothing reported sent unless confirmed."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from confluent_kafka import KafkaError, Message, Producer

from reclaim.producers.config import Role, error_log, kafka_config
from reclaim.producers.kafka_errors import ErrorKind, FatalKafkaError, ProducerQueueFullError, classify, describe

__all__ = ["DeliveryTracker", "FatalKafkaError", "Headers", "ProducerQueueFullError", "RecordProducer"]

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]

#: How long ``send`` waits for room in a full local queue before giving up.
QUEUE_FULL_TIMEOUT_S = 30.0

# What poll/flush/produce may raise when a fatal error is served: a KafkaException, a SystemError
# when it is served while a delivery callback runs, or whatever a callback then raises (the binding
# keeps running callbacks with the first exception still set; seen as ``AttributeError: __getitem__``
# from a Counter). Any of them, once the client has a fatal error, is that fatal error.
CLIENT_ERRORS = (Exception,)


class DeliveryTracker:
    """Delivery reports of one group of sends, filled in by librdkafka's callbacks on ``poll``/``flush``.

    A failed delivery is classified: a fatal error is kept in :attr:`fatal` (the producer raises it
    from ``wait``); any other failure leaves the record unconfirmed, to be sent again later, and is
    logged once per error code, the repeats counted in :attr:`failure_counts`.
    """

    def __init__(self) -> None:
        self.sent = 0
        self.failed: dict[int, KafkaError] = {}
        self.confirmed: set[int] = set()
        self.fatal: KafkaError | None = None
        self.failure_counts: Counter[str] = Counter()

    def callback(self, index: int) -> Callable[[KafkaError | None, Message], None]:
        self.sent += 1

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            if err is None:
                self.confirmed.add(index)
                return
            self.failed[index] = err
            self._note_failure(err, msg)

        return on_delivery

    def _note_failure(self, err: KafkaError, msg: Message) -> None:
        kind = classify(err)
        if kind is ErrorKind.FATAL:
            if self.fatal is None:
                self.fatal = err
                log.error("delivery failed fatally: topic=%s error=%s", msg.topic(), describe(err))
            return
        self.failure_counts[err.name()] += 1
        if self.failure_counts[err.name()] == 1:
            level = logging.INFO if kind is ErrorKind.RETRIABLE else logging.WARNING
            log.log(level, "delivery failed: topic=%s partition=%s error=%s kind=%s (repeats are counted)",
                    msg.topic(), msg.partition(), describe(err), kind.value)

    def log_failures(self) -> None:
        """One line per error code that failed more than one delivery, with its count."""
        for name, count in sorted(self.failure_counts.items()):
            if count > 1:
                log.warning("delivery failed for %d records: error=%s", count, name)

    def unconfirmed(self) -> set[int]:
        """Indexes not confirmed: failed, or with no report at all (e.g. a flush that timed out)."""
        return set(range(self.sent)) - self.confirmed


class RecordProducer:
    """Produces raw values with keys and headers; builds the librdkafka client on first use.

    Parameters
    ----------
    bootstrap, role, overrides
        Passed to :func:`reclaim.producers.config.kafka_config`.
    queue_full_timeout_s : float
        How long :meth:`send` serves delivery reports waiting for room in a full local queue before it
        raises :class:`ProducerQueueFullError`.
    """

    def __init__(self, bootstrap: str, role: Role = "producer", overrides: Mapping[str, Any] | None = None,
                 queue_full_timeout_s: float = QUEUE_FULL_TIMEOUT_S) -> None:
        if not queue_full_timeout_s > 0:
            raise ValueError(f"queue_full_timeout_s must be positive, got {queue_full_timeout_s}")
        self._config = kafka_config(bootstrap, role, overrides)
        self.errors = error_log(self._config)
        self.queue_full_timeout_s = queue_full_timeout_s
        self._producer: Producer | None = None

    @property
    def producer(self) -> Producer:
        if self._producer is None:
            self._producer = Producer(self._config)
        return self._producer

    def raise_if_fatal(self) -> None:
        """Raise :class:`FatalKafkaError` if this producer's client hit a fatal error."""
        self.errors.raise_if_fatal()

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers: Headers | None = None,
             on_delivery: Callable[[KafkaError | None, Message], None] | None = None) -> None:
        """Queue one record; when the local queue is full, serve delivery reports until it has room.

        Raises :class:`ProducerQueueFullError` when there is no room within ``queue_full_timeout_s``,
        :class:`FatalKafkaError` when the client is unusable.
        """
        self.raise_if_fatal()
        deadline: float | None = None
        while not self._produce(topic, value, key, headers, on_delivery):
            if deadline is None:
                deadline = time.monotonic() + self.queue_full_timeout_s
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ProducerQueueFullError(topic, self.queue_full_timeout_s)
            self._poll(min(0.1, remaining))
        self._poll(0)

    def wait(self, tracker: DeliveryTracker, timeout_s: float) -> set[int]:
        """Flush and return the indexes of ``tracker`` whose delivery is not confirmed.

        Raises :class:`FatalKafkaError` when a delivery or the client failed fatally.
        """
        deadline = time.monotonic() + timeout_s
        while (tracker.unconfirmed() - set(tracker.failed) and tracker.fatal is None
               and time.monotonic() < deadline):
            self._flush(min(1.0, max(0.0, deadline - time.monotonic())))
        tracker.log_failures()
        if tracker.fatal is not None:
            self.errors.record_fatal(tracker.fatal)
        self.raise_if_fatal()
        return tracker.unconfirmed()

    def close(self, timeout_s: float = 10.0) -> None:
        """Flush what is queued and drop the client; a fatal error is logged, not raised."""
        if self._producer is not None:
            try:
                self._flush(timeout_s)
            except FatalKafkaError as exc:
                log.error("producer closed after a fatal error: %s", exc)
            self._producer = None

    def _produce(self, topic: str, value: bytes | None, key: bytes | None, headers: Headers | None,
                 on_delivery: Callable[[KafkaError | None, Message], None] | None) -> bool:
        """Queue one record; False when the local queue is full."""
        try:
            self.producer.produce(topic, value=value, key=key, headers=list(headers or ()),
                                  on_delivery=on_delivery)
        except BufferError:
            return False
        except CLIENT_ERRORS as exc:
            if self.errors.fatal_error is None:
                # produce reports only ``_FATAL``; serving events raises the fatal error with its cause.
                self._poll(0)
            self.errors.raise_if_fatal(exc)
            raise
        return True

    def _poll(self, timeout_s: float) -> None:
        try:
            self.producer.poll(timeout_s)
        except CLIENT_ERRORS as exc:
            self.errors.raise_if_fatal(exc)
            raise

    def _flush(self, timeout_s: float) -> None:
        try:
            self.producer.flush(timeout_s)
        except CLIENT_ERRORS as exc:
            self.errors.raise_if_fatal(exc)
            raise
