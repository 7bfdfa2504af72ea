"""Which polled records phase 2 handles now: each is verified before any of its headers is read, and a
retry tier's partition is held at its first record not due yet, never longer than the tier's delay.

A record that fails verification is refused at once, on whatever topic it was read: its retry headers
(attempt, origin, not-before) are not signed, so none of them is believed. Its verdict goes with the
batch like an undecodable record's, and it never holds its partition.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from reclaim.consumers.batches import BatchReport, Partition, Polled, Undecodable
from reclaim.consumers.retry import Delivery, due_ms
from reclaim.deletion import metrics
from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.producers.topics import TopicNames
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordVerifier, Unauthenticated, signature_headers

__all__ = ["Intake", "Taken"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class _Hold:
    """A retry tier's partition held at ``offset``: when its record was first read, when it is due, and
    whether the partition is paused for it now (it is not while the partition is another worker's)."""

    offset: int
    first_read_ms: float
    due_s: float
    paused: bool = True


@dataclass(frozen=True)
class Taken:
    """A poll sorted: records to check, records refused unread, and what the poll counts."""

    ready: list[Polled]
    refused: list[Undecodable]
    report: BatchReport


class Intake:
    """Verifies polled records, reads their retry history, and holds a retry tier's partition while its
    first record is not due; resumes it when it is."""

    def __init__(self, consumer: Consumer, topics: TopicNames, verifier: RecordVerifier | None = None) -> None:
        self._consumer = consumer
        self._verifier = verifier
        self._signers = signers_of(PendingDeleteLedgerInfo)
        # A retry tier's record was signed for the deletion topic it was first published to.
        self._signed_topic = topics.deletion
        self._delays = {name: delay for delay, name in topics.retries}
        # One hold per retry-tier partition this worker has held, kept when the partition goes (it may
        # come back); ``_paused``: those paused now, each assigned to this worker.
        self._holds: dict[Partition, _Hold] = {}
        self._paused: set[Partition] = set()

    def take(self, messages: Sequence[Message]) -> Taken:
        """Sort one poll's messages; a consume error is raised when fatal, logged otherwise."""
        now_ms = time.time() * 1000
        verify = self._verifier.verify if self._verifier is not None else None
        signers, signed_topic, delays = self._signers, self._signed_topic, self._delays
        ready: list[Polled] = []
        refused: list[Undecodable] = []
        held_now: set[Partition] = set()
        received: Counter[str] = Counter()
        for msg in messages:
            error = msg.error()
            if error is not None:
                _on_consume_error(error)
                continue
            topic, partition, offset = msg.topic() or "", msg.partition() or 0, msg.offset() or 0
            received[topic] += 1
            if held_now and (topic, partition) in held_now:
                continue
            key, value, headers, timestamp = msg.key(), msg.value(), msg.headers(), msg.timestamp()[1]
            signature = tuple(signature_headers(headers)) if headers else ()
            delay = delays.get(topic)
            if verify is not None:
                signed = verify(topic, key, value, signature, signers, signed_topic=signed_topic)
                if isinstance(signed, Unauthenticated):
                    refused.append(self._refused(topic, partition, offset, key, value, timestamp, signature,
                                                 signed))
                    continue
            # A record as phase 1 wrote it carries its signature only: no retry history to read.
            history = headers if headers and len(headers) > len(signature) else None
            delivery = Delivery.of(topic, partition, offset, history, timestamp)
            if delay is not None and self._holding((topic, partition), offset, delivery, delay, timestamp, now_ms):
                held_now.add((topic, partition))
                continue
            ready.append(Polled(topic, partition, offset, key, value, delivery, signature))
        for topic, count in received.items():
            metrics.MESSAGES_RECEIVED.labels(topic).inc(count)
        total = sum(received.values())
        return Taken(ready, refused, BatchReport(received=total, held=total - len(ready) - len(refused)))

    def _refused(self, topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                 timestamp: int, signature: tuple[tuple[str, bytes], ...],
                 refusal: Unauthenticated) -> Undecodable:
        """A refused record, dead-lettered as read: where it was read, not the origin its headers claim."""
        delivery = Delivery.of(topic, partition, offset, None, timestamp)
        polled = Polled(topic, partition, offset, key, value, delivery, signature)
        return Undecodable(polled, Verdict(Outcome.UNAUTHENTICATED, str(refusal), "Unauthenticated"))

    def _holding(self, source: Partition, offset: int, delivery: Delivery, delay_s: int, timestamp: int,
                 now_ms: float) -> bool:
        """Whether a retry tier's record is not due yet; if so its partition is paused at it.

        A tier is FIFO in due time, so nothing behind the record is due either. The record is due at its
        not-before clamped to the tier's delay (:func:`~reclaim.consumers.retry.due_ms`), counted from its
        first read by this worker when that is earlier than its timestamp: read again after the hold, it is
        due however far ahead its headers or timestamp point.
        """
        hold = self._holds.get(source)
        first_read_ms = hold.first_read_ms if hold is not None and hold.offset == offset else now_ms
        due = due_ms(delivery.not_before_ms, delay_s, timestamp, first_read_ms)
        if due <= now_ms:
            return False
        tp = TopicPartition(source[0], source[1], offset)
        self._consumer.pause([tp])
        self._consumer.seek(tp)
        self._holds[source] = _Hold(offset, first_read_ms, due / 1000)
        self._paused.add(source)
        metrics.RETRY_HELD.set(len(self._paused))
        return True

    def resume_due(self) -> None:
        """Resume the held partitions whose first record is due (its hold is remembered until replaced)."""
        if not self._paused:
            return
        now = time.time()
        due = [source for source in self._paused if self._holds[source].due_s <= now]
        if due:
            self._consumer.resume([TopicPartition(topic, partition) for topic, partition in due])
            self._unpause(due)

    def assigned(self, partitions: Iterable[Partition]) -> None:
        """The group gave this worker ``partitions`` (and they are assigned): each is paused if this worker
        holds it at a record not due yet, and resumed otherwise.

        librdkafka keeps a partition's pause across a revoke and a reassignment (librdkafka #1849), and a
        partition may come back that another worker held, or that this worker held in an earlier assignment:
        every one is set from this worker's own holds, never left as it was.
        """
        now = time.time()
        hold, free = [], []
        for source in partitions:
            held = self._holds.get(source)
            if held is not None and held.due_s > now:
                hold.append(source)
                self._holds[source] = replace(held, paused=True)
                self._paused.add(source)
            else:
                free.append(source)
        if free:
            self._consumer.resume([TopicPartition(topic, partition) for topic, partition in free])
        if hold:
            self._consumer.pause([TopicPartition(topic, partition) for topic, partition in hold])
        metrics.RETRY_HELD.set(len(self._paused))

    def revoked(self, partitions: Iterable[Partition]) -> None:
        """``partitions`` are no longer this worker's: those it holds are resumed before they go (no pause
        is left behind), and their holds kept, so that a partition given back is held to the same due time,
        counted from this worker's first read."""
        gone = [source for source in partitions if source in self._paused]
        if gone:
            self._consumer.resume([TopicPartition(topic, partition) for topic, partition in gone])
            self._unpause(gone)

    def _unpause(self, sources: Iterable[Partition]) -> None:
        for source in sources:
            self._holds[source] = replace(self._holds[source], paused=False)
            self._paused.discard(source)
        metrics.RETRY_HELD.set(len(self._paused))

    @property
    def held(self) -> int:
        """How many partitions this worker holds paused now."""
        return len(self._paused)


def _on_consume_error(error: KafkaError) -> None:
    if error.fatal():
        raise KafkaException(error)
    log.warning("consume error (librdkafka retries it): %s", error)
