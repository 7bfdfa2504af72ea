"""PIP-186's ``getEstimatedInflightDeletionLedgerCount``: the group's lag over the deletion topics."""

from __future__ import annotations

from collections.abc import Sequence

from confluent_kafka import Consumer, TopicPartition

from producers.config import kafka_config


def estimated_inflight(bootstrap: str, group_id: str, topics: Sequence[str], timeout_s: float = 10.0) -> int:
    """Records on ``topics`` that ``group_id`` has not committed past: 0 means every deletion is final.

    Reads committed offsets and high watermarks without joining the group.
    """
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
