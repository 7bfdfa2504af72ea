"""PIP-186's ``getEstimatedInflightDeletionLedgerCount``: the group's lag over the deletion topics."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from reclaim.producers.config import kafka_config
from reclaim.producers.kafka_errors import ErrorKind, classify, kafka_error_of


def estimated_inflight(bootstrap: str, group_id: str, topics: Sequence[str], timeout_s: float = 10.0) -> int:
    """Records on ``topics`` that ``group_id`` has not committed past: 0 means every deletion is final.

    Reads committed offsets and high watermarks without joining the group. Errors the broker says
    will pass (e.g. a group coordinator still loading) are retried within ``timeout_s``.
    """
    retrying = Retrying(stop=stop_after_delay(timeout_s), wait=wait_exponential(multiplier=0.1, max=1.0),
                        retry=retry_if_exception(_transient), reraise=True)
    return retrying(_lag, bootstrap, group_id, topics, timeout_s)


def _transient(exc: BaseException) -> bool:
    error = kafka_error_of(exc) if isinstance(exc, KafkaException) else None
    return error is not None and classify(error) is ErrorKind.RETRIABLE


def _lag(bootstrap: str, group_id: str, topics: Sequence[str], timeout_s: float) -> int:
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": group_id, "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        partitions = [TopicPartition(topic, p) for topic in topics if topic in metadata.topics
                      for p in metadata.topics[topic].partitions]
        if not partitions:
            return 0
        lag = 0
        for tp in consumer.committed(partitions, timeout=timeout_s):
            low, high = consumer.get_watermark_offsets(tp, timeout=timeout_s, cached=False)
            position = tp.offset if tp.offset >= 0 else low
            lag += max(0, high - max(position, low))
        return lag
    finally:
        consumer.close()
