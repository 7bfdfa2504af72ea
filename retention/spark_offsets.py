"""Where the input topics end, and whether a run of the retention job has read that far."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from reclaim.producers.config import kafka_config

Offsets = dict[str, dict[int, int]]
"""Per topic, per partition: the offset after the last record (Kafka's high watermark)."""


def topic_ends(bootstrap: str, topics: Sequence[str], timeout_s: float = 10.0) -> Offsets:
    """The high watermark of every partition of ``topics`` now; a topic that does not exist has none."""
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": "reclaim-retention-ends",
                                                             "enable.auto.commit": False}))
    try:
        metadata = consumer.list_topics(timeout=timeout_s)
        ends: Offsets = {}
        for topic in topics:
            if topic not in metadata.topics:
                continue
            ends[topic] = {}
            for partition in metadata.topics[topic].partitions:
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s,
                                                         cached=False)
                ends[topic][int(partition)] = int(high)
        return ends
    finally:
        consumer.close()


def source_offsets(end_offset: str | Mapping[str, Any] | None) -> Offsets:
    """A Kafka source's ``endOffset`` from a query progress (JSON text or already parsed) as ``Offsets``."""
    if end_offset is None:
        return {}
    parsed: Mapping[str, Any] = json.loads(end_offset) if isinstance(end_offset, str) else end_offset
    return {topic: {int(p): int(o) for p, o in partitions.items()} for topic, partitions in parsed.items()}


def reached(read: Offsets, ends: Offsets) -> bool:
    """Whether ``read`` is at or past ``ends`` on every partition that holds records."""
    return all(read.get(topic, {}).get(partition, 0) >= end
               for topic, partitions in ends.items() for partition, end in partitions.items() if end > 0)
