"""The demo's Kafka topic part: a plain topic with a fast and a slow consumer group under consumption retention;
the topic poller, the Spark retention job and the Kafka-topic applier delete its records behind the slow group,
not before; then a maximum age overrides the group once it stalls."""

from __future__ import annotations

import uuid
from dataclasses import replace

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from reclaim.demo.output import demo_settings, say, step
from reclaim.producers.config import kafka_config
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.retention.spark_job import RetentionJobConfig, run_available
from reclaim.schemas.base import millis_now
from reclaim.schemas.topic_retention import TopicRetentionPolicy
from reclaim.services import runtime
from reclaim.services.topic_applier import TopicApplier, TopicApplierConfig, TopicOutcome
from reclaim.services.topic_poller import TopicPoller
from reclaim.settings import Settings
from reclaim.tools.topic_retention import PolicyFollower, describe_topic
from reclaim.tools.topics import admin_client

HOUR_MS = 3600 * 1000
RECORDS = 20  #: per partition, written three hours ago


def show_topic_retention(settings: Settings, bootstrap: str, spark: object, job: RetentionJobConfig) -> None:
    """The Kafka topic part of the demo, on the retention job ``job`` runs (its checkpoint continues)."""
    demo = demo_settings(settings, bootstrap, "demo-topics")
    names = runtime.topic_names(demo)
    admin = admin_client(bootstrap)
    topic, fast, slow = (f"demo-{what}-{uuid.uuid4().hex[:6]}" for what in ("orders", "fast", "slow"))
    _create(admin, topic, bootstrap)
    _commit(bootstrap, fast, topic, {0: RECORDS, 1: RECORDS})
    _commit(bootstrap, slow, topic, {0: 8, 1: 5})
    step(f"consumption retention of a Kafka topic, {topic}: groups 'fast' and 'slow'")
    say(f"  {RECORDS} records per partition, three hours old; fast has read them all, slow up to 8 and 5")
    topic_id, _ = describe_topic(admin, topic)
    codec, verifier = runtime.codec(demo), runtime.record_verifier(demo)
    producer = RecordProducer(bootstrap, "idempotent-producer")
    admin_publisher = ConfirmedPublisher(producer, codec, signer=runtime.record_signer(demo, "admin"))
    follower = PolicyFollower(bootstrap, names.topic_retention, codec, verifier)
    store = runtime.metadata_store(demo)
    applier = TopicApplier(TopicApplierConfig(bootstrap, names.topic_truncation, names.topic_truncation_dlq,
                                              group_id="reclaim-demo-topic-truncation", poll_timeout_s=0.5),
                           admin, store, codec, follower.refresh, verifier)
    poller = TopicPoller(admin, follower.refresh,
                         admin_publisher.signed_by(runtime.record_signer(demo, "topic-retention")), names.topic_cuts)
    try:
        policy = TopicRetentionPolicy(topic, topic_id, (fast, slow), HOUR_MS, millis_now())
        admin_publisher.publish(names.topic_retention, policy, topic)
        say(f"  policy (signed by the admin): {policy.describe()}")
        _round(spark, job, poller, applier)
        starts = _starts(admin, topic)
        say(f"  partition starts now {starts}: deleted behind the slow group, not before")
        if starts != {0: 8, 1: 5}:
            raise AssertionError(f"expected the starts at the slow group's offsets, got {starts}")
        step("a maximum age overrides the stalled slow group")
        forced = replace(policy, max_ms=2 * HOUR_MS, updated_at=millis_now())
        admin_publisher.publish(names.topic_retention, forced, topic)
        say(f"  policy: {forced.describe()}")
        _round(spark, job, poller, applier)
        starts = _starts(admin, topic)
        say(f"  partition starts now {starts}: every record older than two hours deleted")
        if starts != {0: RECORDS, 1: RECORDS}:
            raise AssertionError(f"expected every record deleted, got {starts}")
        for entry in store.topic_truncations(topic):
            say(f"  journal: {topic}[{entry.partition}] {entry.old_start} -> {entry.new_start} ({entry.why}), "
                f"signed by {entry.signer}")
    finally:
        applier.close()
        follower.close()
        producer.close()
        store.close()


def _round(spark: object, job: RetentionJobConfig, poller: TopicPoller, applier: TopicApplier) -> None:
    """The poller's pass, a run of the job, then the applier until it has applied what the job decided."""
    cuts = poller.tick().published
    say(f"  topic poller: {len(cuts)} cut(s) published (signed with the topic-retention key)")
    batches = run_available(spark, job, timeout_s=120)  # type: ignore[arg-type]
    say(f"  retention job: {sum(b.input_rows for b in batches)} input rows, {sum(b.events for b in batches)} "
        "decision(s)")
    outcomes: list[TopicOutcome] = []
    for _ in range(40):
        outcomes += applier.run_once()
        if TopicOutcome.DELETED in outcomes:
            break
    applier.consumer.commit(asynchronous=False)
    say(f"  topic applier: {', '.join(o.value for o in outcomes) or 'nothing read'}")


def _create(admin: AdminClient, topic: str, bootstrap: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=60)
    producer = Producer(kafka_config(bootstrap, "producer", {"enable.idempotence": True}))
    written = millis_now() - 3 * HOUR_MS
    for partition in (0, 1):
        for index in range(RECORDS):
            producer.produce(topic, f"order-{index}".encode(), partition=partition, timestamp=written + index)
    if producer.flush(30):
        raise AssertionError(f"records to {topic} not delivered")


def _commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]) -> None:
    consumer = Consumer(kafka_config(bootstrap, "consumer", {"group.id": group, "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    finally:
        consumer.close()


def _starts(admin: AdminClient, topic: str) -> dict[int, int]:
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.earliest()  # type: ignore[no-untyped-call]
                                  for p in (0, 1)})
    return {tp.partition: int(f.result(timeout=30).offset) for tp, f in futures.items()}
