"""Plain Kafka topics and consumer groups on the real broker, as a user has them: for consumption retention's
tests (reclaim.tools.topic_retention)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from reclaim.producers.config import kafka_config

HOUR_MS = 3600 * 1000


def create_topic(admin: AdminClient, topic: str, partitions: int, config: Mapping[str, str] | None = None) -> None:
    """Create ``topic`` and wait until the broker answers for it."""
    futures = admin.create_topics([NewTopic(topic, partitions, 1, config=dict(config or {}))])
    futures[topic].result(timeout=60)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.2)
    raise AssertionError(f"topic {topic} not ready in 30 s")


def produce(bootstrap: str, topic: str, partition: int, timestamps_ms: Iterable[int]) -> None:
    """One small record per timestamp on ``partition``, each with that CreateTime, all confirmed."""
    producer = Producer(kafka_config(bootstrap, "producer", {"enable.idempotence": True}))
    failed: list[str] = []
    for index, stamp in enumerate(timestamps_ms):
        producer.produce(topic, f"r{index}".encode(), partition=partition, timestamp=stamp,
                         on_delivery=lambda err, _msg: failed.append(str(err)) if err else None)
    assert producer.flush(30) == 0 and not failed, failed


def commit(bootstrap: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    """``group`` commits ``offsets`` on ``topic`` as a consumer that has read up to them would (no member stays:
    the group is Empty afterwards, as one whose consumers are down)."""
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def start_offset(admin: AdminClient, topic: str, partition: int) -> int:
    """The partition's log start offset now."""
    from confluent_kafka.admin import OffsetSpec

    future = admin.list_offsets({TopicPartition(topic, partition): OffsetSpec.earliest()})
    return int(next(iter(future.values())).result(timeout=30).offset)
