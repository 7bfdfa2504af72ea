"""Round-trips one record of every schema through the broker: what ``reclaim demo`` shows first."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from confluent_kafka import Consumer

from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.samples import sample_records
from reclaim.tools.topics import TopicSpec, admin_client, create_topics


def round_trip_every_record(bootstrap: str, codec: RecordCodec, prefix: str,
                            timeout_s: float = 30.0) -> Iterator[tuple[str, int]]:
    """Produce every sample record to a scratch topic, read each back and check it decodes equal.

    Yields ``(sample name, encoded size)`` per record; raises ``AssertionError`` on any difference.
    """
    topic = f"{prefix}demo.roundtrip"
    create_topics(admin_client(bootstrap), [TopicSpec(topic, 1, {"retention.ms": "3600000"})])
    samples = sample_records()
    producer = RecordProducer(bootstrap, "idempotent-producer")
    tracker = DeliveryTracker()
    run = uuid.uuid4().hex.encode()
    for index, (name, record) in enumerate(samples.items()):
        producer.send(topic, codec.encode(record, topic), key=name.encode(), headers=[("run", run)],
                      on_delivery=tracker.callback(index))
    if producer.wait(tracker, timeout_s):
        raise AssertionError("some records were not confirmed by the broker")
    producer.close()
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": f"reclaim-demo-{run.decode()}"}))
    consumer.subscribe([topic])
    try:
        pending = dict(samples)
        for _ in range(int(timeout_s / 0.5)):
            for msg in consumer.consume(100, 0.5):
                if msg.error() is not None or dict(msg.headers() or []).get("run") != run:
                    continue
                name = (msg.key() or b"").decode()
                decoded = codec.decode(msg.value() or b"", topic)
                if decoded != pending.pop(name):
                    raise AssertionError(f"{name} came back different: {decoded}")
                yield name, len(msg.value() or b"")
            if not pending:
                return
        raise AssertionError(f"records not read back: {sorted(pending)}")
    finally:
        consumer.close()
