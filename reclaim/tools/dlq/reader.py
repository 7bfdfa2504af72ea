"""Reading the dead-letter topic for ``reclaim dlq``: by assignment, no group joined, nothing committed.

Every command reads the whole topic from each partition's low to its high watermark, so counts are of
every record there. Each record is handed on as it is read (:func:`scan`'s ``keep``), so a command holds
only what it keeps: of each record its filters match, the whole record (replay), what a listing shows
(list) or a brief that is counted (stats); or a few counts per partition (purge). Duplicates (one record
dead-lettered by two groups, or twice) are kept as read; :mod:`reclaim.tools.dlq.selection` counts them
and shows each record once (see its docstring).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from reclaim.exits import Unavailable, UsageError
from reclaim.producers.config import kafka_config, quiet_logger
from reclaim.schemas.codec import RecordCodec
from reclaim.services import preflight
from reclaim.settings import Settings
from reclaim.tools.dlq.records import DeadLetter, dead_letter

READ_TIMEOUT_S = 10.0
"""How long a read may go without a record before it gives up with one line."""

PREFETCH_KBYTES = 4 * 1024
"""What librdkafka fetches ahead of the reader (``queued.max.messages.kbytes``; 64 MiB by default, which
made a read of a large DLQ hold some 65 MB of records ahead of what it had handled)."""

READER_GROUP = "reclaim-dlq-reader"
"""The group id librdkafka requires of a consumer; never joined (records are read by assignment)."""

_QUIET = quiet_logger("dlq")

Held = TypeVar("Held")


@dataclass(frozen=True)
class DlqScan(Generic[Held]):
    """What ``keep`` held of the DLQ's records, of ``total`` read, and each partition's ``(low, high)``
    watermarks at the start."""

    topic: str
    letters: tuple[Held, ...]
    watermarks: dict[int, tuple[int, int]]
    total: int


def connect(settings: Settings, topics: Iterable[str]) -> str:
    """The broker address, once the broker has answered (bounded) and has every topic in ``topics``."""
    address = preflight.bootstrap(settings)
    preflight.require_topics(address, list(topics))
    return address


class Reader:
    """A consumer that reads by assignment; librdkafka's log and error events are kept off the terminal,
    the error events in :attr:`errors` for the message of a read that fails."""

    def __init__(self, address: str, group: str = READER_GROUP) -> None:
        self.errors: list[KafkaError] = []
        self.consumer = Consumer(kafka_config(address, "consumer", {
            "group.id": group, "enable.auto.commit": False, "queued.max.messages.kbytes": PREFETCH_KBYTES,
            "logger": _QUIET,
            "error_cb": self.errors.append}))

    def cause(self) -> str:
        """`` (the last error librdkafka reported)``, or nothing."""
        return f" ({self.errors[-1].str()})" if self.errors else ""

    def close(self) -> None:
        self.consumer.close()


def watermarks(consumer: Consumer, topic: str, timeout_s: float = READ_TIMEOUT_S) -> dict[int, tuple[int, int]]:
    """Each partition's ``(low, high)`` watermarks."""
    metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
    if metadata is None or metadata.error is not None:
        raise Unavailable(f"topic {topic} does not exist: run `reclaim topics create`")
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
            for p in sorted(metadata.partitions)}


def scan(address: str, topic: str, codec: RecordCodec, keep: Callable[[DeadLetter], Held | None],
         timeout_s: float = READ_TIMEOUT_S) -> DlqScan[Held]:
    """Read every record of the DLQ ``topic`` present when the read starts, each partition in offset order;
    hand each to ``keep`` as it is read and hold what it returns of it (None: nothing)."""
    kept: list[Held] = []
    total = 0

    def take(msg: Message) -> None:
        nonlocal total
        total += 1
        held = keep(letter_of(msg, codec, topic))
        if held is not None:
            kept.append(held)

    marks = read_each(address, topic, take, timeout_s)
    return DlqScan(topic, tuple(kept), marks, total)


def read_all(address: str, topic: str, timeout_s: float = READ_TIMEOUT_S
             ) -> tuple[list[Message], dict[int, tuple[int, int]]]:
    """Every record of ``topic`` present when the read starts, and the watermarks it read between."""
    read: list[Message] = []
    return read, read_each(address, topic, read.append, timeout_s)


def read_each(address: str, topic: str, take: Callable[[Message], None],
              timeout_s: float = READ_TIMEOUT_S, group: str = READER_GROUP) -> dict[int, tuple[int, int]]:
    """Hand every record of ``topic`` present when the read starts to ``take``, each partition in offset
    order, as it is read; the watermarks it read between. ``group``: the consumer's group id (never joined)."""
    reading = Reader(address, group)
    try:
        marks = watermarks(reading.consumer, topic, timeout_s)
        _read(reading, topic, marks, timeout_s, take)
        return marks
    finally:
        reading.close()


def _read(reading: Reader, topic: str, marks: dict[int, tuple[int, int]], timeout_s: float,
          take: Callable[[Message], None]) -> None:
    pending = {p: high for p, (low, high) in marks.items() if high > low}
    reading.consumer.assign([TopicPartition(topic, p, marks[p][0]) for p in pending])
    last_progress = time.monotonic()
    while pending:
        messages = reading.consumer.consume(500, 0.5)
        if messages:
            last_progress = time.monotonic()
        elif time.monotonic() - last_progress > timeout_s:
            where = ", ".join(f"partition {p} up to offset {end}" for p, end in sorted(pending.items()))
            raise Unavailable(f"reading {topic} stalled for {timeout_s:g} s before {where}{reading.cause()}: "
                              "is the broker up?")
        for msg in messages:
            partition, offset = msg.partition() or 0, msg.offset() or 0
            if _failed(msg) or partition not in pending:
                continue
            if offset < pending[partition]:
                take(msg)
            if offset + 1 >= pending[partition]:
                del pending[partition]  # records that arrive after the read started are left out


def _failed(msg: Message) -> bool:
    error = msg.error()
    if error is None:
        return False
    if error.fatal():
        raise KafkaException(error)
    return True


def letter_of(msg: Message, codec: RecordCodec, topic: str) -> DeadLetter:
    """The :class:`DeadLetter` of a record read from the DLQ ``topic``."""
    return dead_letter(topic, msg.partition() or 0, msg.offset() or 0, msg.timestamp()[1], msg.key(), msg.value(),
                       msg.headers(), codec)


class NoPartition(ValueError):
    """The topic has no such partition."""


def check_offset(marks: Mapping[int, tuple[int, int]], partition: int, offset: int, topic: str = "") -> None:
    """Raise :class:`NoPartition` (``has no partition P (it has N)``) or ValueError (``partition P [of TOPIC]
    holds offsets L to H`` / ``no records``) unless ``partition`` holds ``offset`` between ``marks``."""
    if partition not in marks:
        raise NoPartition(f"has no partition {partition} (it has {len(marks)})")
    low, high = marks[partition]
    if not low <= offset < high:
        held = f"offsets {low} to {high - 1}" if high > low else "no records"
        raise ValueError(f"partition {partition}{f' of {topic}' if topic else ''} holds {held}")


def read_one(address: str, topic: str, codec: RecordCodec, partition: int, offset: int,
             timeout_s: float = READ_TIMEOUT_S) -> DeadLetter:
    """The record at ``partition:offset``; one usage line when the DLQ holds no record there."""
    reading = Reader(address)
    try:
        marks = watermarks(reading.consumer, topic, timeout_s)
        try:
            check_offset(marks, partition, offset, topic)
        except NoPartition as exc:
            raise UsageError(f"{topic} {exc}") from None
        except ValueError as exc:
            raise UsageError(f"no record at {partition}:{offset}: {exc}") from None
        reading.consumer.assign([TopicPartition(topic, partition, offset)])
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            msg = reading.consumer.poll(0.5)
            if msg is None or _failed(msg):
                continue
            if msg.offset() != offset:
                raise UsageError(f"no record at {partition}:{offset} of {topic} (the next is at offset {msg.offset()})")
            return letter_of(msg, codec, topic)
        raise Unavailable(f"no answer reading {topic} at {partition}:{offset} within {timeout_s:g} s"
                          f"{reading.cause()}")
    finally:
        reading.close()
