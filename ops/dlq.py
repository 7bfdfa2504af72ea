"""``reclaim dlq list``: read the dead-letter topic without joining any group, one line per record."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, Message, TopicPartition

from consumers import retry
from producers.config import kafka_config
from schemas.codec import RecordCodec
from schemas.errors import RecordDecodeError
from schemas.ledger import PendingDeleteLedgerInfo


@dataclass(frozen=True)
class DeadLetter:
    """One DLQ record: where it sits, why it is there, where it came from and which chunk it names."""

    partition: int
    offset: int
    outcome: str
    error_class: str
    error: str
    attempt: str
    origin: str
    chunk: str


def read_dlq(bootstrap: str, topic: str, codec: RecordCodec, limit: int = 100,
             timeout_s: float = 5.0) -> Iterator[DeadLetter]:
    """The first ``limit`` records of the DLQ, read by assignment (no group, no commits)."""
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": "reclaim-dlq-reader",
                                                             "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(topic, timeout=timeout_s).topics.get(topic)
        if metadata is None or metadata.error is not None:
            raise ValueError(f"DLQ topic {topic!r} does not exist: run `reclaim topics create`")
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s)[1]
                for p in metadata.partitions}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in metadata.partitions])
        seen = 0
        remaining = {p for p, end in ends.items() if end > 0}
        while remaining and seen < limit:
            messages = consumer.consume(min(500, limit - seen), timeout_s)
            if not messages:
                break
            for msg in messages:
                if msg.error() is not None:
                    continue
                seen += 1
                if (msg.offset() or 0) + 1 >= ends[msg.partition() or 0]:
                    remaining.discard(msg.partition() or 0)
                yield _dead_letter(msg, codec, topic)
    finally:
        consumer.close()


def _dead_letter(msg: Message, codec: RecordCodec, topic: str) -> DeadLetter:
    raw = msg.headers() or []
    pairs = raw.items() if isinstance(raw, dict) else raw
    headers = {k: v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v or "") for k, v in pairs}
    try:
        chunk = codec.decode(msg.value() or b"", topic, PendingDeleteLedgerInfo).chunk_name
    except RecordDecodeError as exc:
        chunk = f"<undecodable: {exc.reason.value}>"
    origin = "{}[{}]@{}".format(headers.get(retry.H_TOPIC, "?"), headers.get(retry.H_PARTITION, "?"),
                                headers.get(retry.H_OFFSET, "?"))
    return DeadLetter(
        partition=msg.partition() or 0, offset=msg.offset() or 0,
        outcome=headers.get(retry.H_OUTCOME, ""), error_class=headers.get(retry.H_ERROR_CLASS, ""),
        error=headers.get(retry.H_ERROR, ""), attempt=headers.get(retry.H_ATTEMPT, ""), origin=origin, chunk=chunk,
    )
