"""Consumption retention of a plain Kafka topic end to end, on the real broker, real consumer groups and the Spark
job on the test cluster: the admin's signed policy, the topic poller's signed cuts, the job's signed decisions,
the Kafka-topic applier's DeleteRecords and journal; the job restarted from its checkpoint emits nothing behind;
a forged decision and one made under an older policy are refused."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from reclaim.exits import Unavailable
from reclaim.localstack.s3_server import S3Endpoint
from reclaim.producers.producer import RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_auth import job_keys
from reclaim.retention.spark_io import RetentionTopics
from reclaim.retention.spark_job import RetentionJobConfig, run_available
from reclaim.schemas import build_codec, millis_now
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.topic_retention import TopicRetentionPolicy, TopicTruncation
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier
from reclaim.services.topic_applier import TopicApplier, TopicApplierConfig, TopicOutcome
from reclaim.services.topic_poller import TopicPoller
from reclaim.storage.s3 import S3ChunkStorage
from reclaim.storage.sql_store import SQLiteMetadataStore
from reclaim.tools.dlq.reader import read_all
from reclaim.tools.topic_retention import Checkpoints, PolicyFollower, describe_topic, observe, plan
from reclaim.tools.topics import admin_client
from tests.support.kafka_topics import HOUR_MS, commit, create_topic, produce, start_offset

pytestmark = pytest.mark.integration

KEYS = Keyring([new_key("admin-1", "admin", Algorithm.ED25519), new_key("job-1", "retention-job", Algorithm.ED25519),
                new_key("poll-1", "topic-retention", Algorithm.ED25519)])
RUN_TIMEOUT_S = 300


@dataclass
class Pipeline:
    """The four parts over one prefix's topics: the admin's publisher, the poller, the job, the applier."""

    spark: SparkSession
    bootstrap: str
    names: TopicNames
    checkpoint: str
    admin_publisher: ConfirmedPublisher
    poller: TopicPoller
    applier: TopicApplier

    def set_policy(self, policy: TopicRetentionPolicy) -> None:
        self.admin_publisher.publish(self.names.topic_retention, policy, policy.topic)

    def decide(self) -> None:
        """One pass of the poller, then one run of the job over everything on its topics."""
        self.poller.tick()
        config = RetentionJobConfig(self.bootstrap, RetentionTopics.from_names(self.names), self.checkpoint,
                                    once=True, keys=job_keys(KEYS, AuthMode.ENFORCE))
        run_available(self.spark, config, RUN_TIMEOUT_S)

    def apply(self) -> list[TopicOutcome]:
        outcomes: list[TopicOutcome] = []
        for _ in range(10):  # until the decisions on the topic now are read
            polled = self.applier.run_once()
            outcomes += polled
            if not polled and outcomes:
                break
        return outcomes

    def decisions(self) -> list[TopicTruncation]:
        messages, _ = read_all(self.bootstrap, self.names.topic_truncation)
        codec = build_codec()
        return [codec.decode(m.value() or b"", self.names.topic_truncation, TopicTruncation) for m in messages]


@pytest.fixture
def pipeline(spark: SparkSession, kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames],
             spark_checkpoint: str, tmp_path: Path) -> Iterator[Pipeline]:
    names = kafka_topics()
    codec = build_codec()
    verifier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    follower = PolicyFollower(kafka_bootstrap, names.topic_retention, codec, verifier)
    producer = RecordProducer(kafka_bootstrap, "idempotent-producer")
    admin_publisher = ConfirmedPublisher(producer, codec, signer=RecordSigner(KEYS, "admin"))
    poller = TopicPoller(admin_client(kafka_bootstrap), follower.refresh,
                         admin_publisher.signed_by(RecordSigner(KEYS, "topic-retention")), names.topic_cuts)
    store = SQLiteMetadataStore(tmp_path / "metadata.db")
    applier = TopicApplier(TopicApplierConfig(kafka_bootstrap, names.topic_truncation, names.topic_truncation_dlq,
                                              group_id=f"{names.topic_truncation}-applier", poll_timeout_s=2.0),
                           admin_client(kafka_bootstrap), store, codec, follower.refresh, verifier)
    try:
        yield Pipeline(spark, kafka_bootstrap, names, spark_checkpoint, admin_publisher, poller, applier)
    finally:
        applier.close()
        follower.close()
        producer.close()
        store.close()


def test_records_go_behind_the_slowest_group_then_the_maximum_overrides_a_stalled_one(
        pipeline: Pipeline, kafka_bootstrap: str, unique_name: Callable[[str], str], tmp_path: Path) -> None:
    admin = admin_client(kafka_bootstrap)
    topic = unique_name("orders")
    create_topic(admin, topic, 2)
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [millis_now() - 3 * HOUR_MS + i for i in range(10)])
    fast, slow = unique_name("fast"), unique_name("slow")
    commit(kafka_bootstrap, fast, topic, {0: 10, 1: 10})
    commit(kafka_bootstrap, slow, topic, {0: 4, 1: 6})
    topic_id, _ = describe_topic(admin, topic)
    policy = TopicRetentionPolicy(topic, topic_id, (fast, slow), HOUR_MS, millis_now())
    pipeline.set_policy(policy)

    pipeline.decide()
    assert [d.starts.as_dict() for d in pipeline.decisions()] == [{0: 4, 1: 6}]
    assert TopicOutcome.DELETED in pipeline.apply()
    assert (start_offset(admin, topic, 0), start_offset(admin, topic, 1)) == (4, 6)
    store = pipeline.applier.store
    journal = store.topic_truncations(topic)
    assert [(e.partition, e.old_start, e.new_start, e.why, e.signer) for e in journal] == [
        (0, 0, 4, f"AT_BOUND held by {slow}", "retention-job/job-1"),
        (1, 0, 6, f"AT_BOUND held by {slow}", "retention-job/job-1")]

    # Nothing new: the job, restarted from its checkpoint, emits nothing (behind or again).
    pipeline.decide()
    assert len(pipeline.decisions()) == 1
    # The slow group moves on; records go behind it and no further.
    commit(kafka_bootstrap, slow, topic, {0: 8, 1: 6})
    pipeline.decide()
    assert [d.starts.as_dict() for d in pipeline.decisions()][1:] == [{0: 8}]
    pipeline.apply()
    assert (start_offset(admin, topic, 0), start_offset(admin, topic, 1)) == (8, 6)

    # A stalled group holds partition 1 at 6 until a maximum of two hours forces every three-hour-old record out.
    forced = replace(policy, max_ms=2 * HOUR_MS, updated_at=millis_now())
    pipeline.set_policy(forced)
    pipeline.decide()
    assert pipeline.decisions()[-1].starts.as_dict() == {0: 10, 1: 10}
    assert dict(pipeline.decisions()[-1].why) == {"0": "FORCED_BY_MAX_AGE", "1": "FORCED_BY_MAX_AGE"}
    pipeline.apply()
    assert (start_offset(admin, topic, 0), start_offset(admin, topic, 1)) == (10, 10)


def test_a_forged_decision_and_one_made_under_an_older_policy_delete_nothing(
        pipeline: Pipeline, kafka_bootstrap: str, unique_name: Callable[[str], str]) -> None:
    admin = admin_client(kafka_bootstrap)
    topic = unique_name("clicks")
    create_topic(admin, topic, 1)
    produce(kafka_bootstrap, topic, 0, [millis_now() - HOUR_MS + i for i in range(10)])
    group = unique_name("g")
    commit(kafka_bootstrap, group, topic, {0: 10})
    topic_id, _ = describe_topic(admin, topic)
    policy = TopicRetentionPolicy(topic, topic_id, (group,), 0, millis_now())
    pipeline.set_policy(policy)
    everything = TopicTruncation(topic, topic_id, StreamCut.from_mapping({0: 10}), millis_now(), policy.updated_at)
    # Signed by the admin, not the job: refused.
    forger = pipeline.admin_publisher
    forger.publish(pipeline.names.topic_truncation, everything, topic)
    assert pipeline.apply() == [TopicOutcome.REFUSED]
    # Signed by the job, but decided under a policy since replaced by one that adds a group: refused.
    newer = replace(policy, groups=(group, unique_name("late")), updated_at=policy.updated_at + 1)
    pipeline.set_policy(newer)
    forger.signed_by(RecordSigner(KEYS, "retention-job")).publish(pipeline.names.topic_truncation, everything, topic)
    assert pipeline.apply() == [TopicOutcome.REFUSED]
    assert start_offset(admin, topic, 0) == 0
    assert pipeline.applier.store.topic_truncations(topic) == []


def test_a_real_structured_streaming_query_holds_the_topic_through_its_s3a_checkpoint(
        spark: SparkSession, kafka_bootstrap: str, spark_checkpoint: str, minio_s3: S3Endpoint,
        unique_name: Callable[[str], str]) -> None:
    admin = admin_client(kafka_bootstrap)
    topic = unique_name("events")
    create_topic(admin, topic, 2)
    for partition in (0, 1):
        produce(kafka_bootstrap, topic, partition, [millis_now() - HOUR_MS + i for i in range(10)])
    bucket = spark_checkpoint.removeprefix("s3a://").split("/", 1)[0]
    checkpoints = Checkpoints(S3ChunkStorage(minio_s3.binding_settings(bucket)).client)
    policy = TopicRetentionPolicy(topic, describe_topic(admin, topic)[0], (), 0, millis_now(),
                                  spark_checkpoints=(("etl", spark_checkpoint),))
    # A query that has run no batch yet holds the topic at its start (its checkpoint has no offsets log yet).
    with pytest.raises(Unavailable, match="no offsets/ log there"):
        checkpoints.offsets(spark_checkpoint, topic)
    # The query reads what is there now (Spark's Kafka source, its own offsets: nothing committed to Kafka).
    query = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", kafka_bootstrap)
             .option("subscribe", topic).option("startingOffsets", "earliest").load()
             .writeStream.format("noop").option("checkpointLocation", spark_checkpoint)
             .trigger(availableNow=True).start())
    assert query.awaitTermination(RUN_TIMEOUT_S) is not False
    assert checkpoints.offsets(spark_checkpoint, topic) == {0: 10, 1: 10}
    decided = plan(policy, observe(admin, policy, millis_now(), checkpoints=checkpoints))
    assert [(d.start, d.held_by) for d in decided] == [(10, ("spark:etl",)), (10, ("spark:etl",))]
