"""Real confluent-kafka clients under faults, with no Kafka server: an unreachable bootstrap, and
librdkafka's own mock cluster for the faults a real broker cannot be made to produce."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from reclaim.producers.config import kafka_config
from reclaim.producers.kafka_errors import (
    CommitError,
    FatalKafkaError,
    ProducerQueueFullError,
    check_committed,
    is_no_offset,
)
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.schemas import build_codec
from reclaim.schemas.streams import StreamCut
from reclaim.schemas.subscribers import SubscriberCut
from tests.support.rdkafka_mock import INIT_PRODUCER_ID, OFFSET_COMMIT, MockCluster

UNREACHABLE = "127.0.0.1:1"  # nothing listens on port 1: a real, permanent "broker down"
TOPIC = "reclaim.ledger-deletion"


@pytest.fixture
def mock_cluster() -> Iterator[MockCluster]:
    with MockCluster() as cluster:
        yield cluster


def discard(producer: RecordProducer) -> None:
    """Drop what the producer still holds, so closing it does not wait for a broker that never answers."""
    producer.producer.purge()
    producer.close(timeout_s=0)


def test_send_gives_up_on_a_full_queue_with_a_retryable_error() -> None:
    producer = RecordProducer(UNREACHABLE, "producer", {"queue.buffering.max.messages": 1},
                              queue_full_timeout_s=0.5)
    producer.send(TOPIC, b"first")  # fills the local queue: nothing can leave it
    with pytest.raises(ProducerQueueFullError) as caught:
        producer.send(TOPIC, b"second")
    assert caught.value.retryable
    assert caught.value.topic == TOPIC and caught.value.waited_s == 0.5
    discard(producer)


def test_the_queue_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="queue_full_timeout_s must be positive"):
        RecordProducer(UNREACHABLE, queue_full_timeout_s=0)


def test_error_events_of_a_real_client_reach_the_rate_limited_log(caplog: pytest.LogCaptureFixture) -> None:
    producer = RecordProducer(UNREACHABLE, "producer", {"client.id": "lonely"})
    deadline = time.monotonic() + 30
    def logged() -> list[str]:
        return [r.getMessage() for r in caplog.records if r.name == "reclaim.producers.kafka_errors"]

    with caplog.at_level(logging.WARNING, "reclaim.producers.kafka_errors"):
        while not logged() and time.monotonic() < deadline:
            producer.producer.poll(0.2)  # serves librdkafka's error events to the error_cb
    lines = logged()
    assert lines and all(line.startswith("kafka client error: client=producer lonely ") for line in lines)
    assert any("_TRANSPORT" in line or "_ALL_BROKERS_DOWN" in line for line in lines)
    assert producer.errors.fatal_error is None
    discard(producer)


def test_a_fatal_producer_error_stops_wait_and_every_later_send(mock_cluster: MockCluster) -> None:
    """The broker answers the idempotent producer's InitProducerId with CLUSTER_AUTHORIZATION_FAILED,
    which librdkafka makes fatal. A real broker cannot be made to answer so on demand (nor to fence or
    break the sequence of one producer), so the fault comes from librdkafka's own mock cluster."""
    mock_cluster.create_topic(TOPIC)
    mock_cluster.push_request_errors(INIT_PRODUCER_ID, KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    producer = RecordProducer(mock_cluster.bootstrap, "idempotent-producer")
    tracker = DeliveryTracker()
    producer.send(TOPIC, b"pending delete", key=b"chunk-1", on_delivery=tracker.callback(0))
    with pytest.raises(FatalKafkaError) as caught:
        producer.wait(tracker, timeout_s=30)
    assert not caught.value.retryable
    assert caught.value.client == "idempotent-producer"
    # The cause is named whether confluent-kafka's exception or librdkafka's FATAL log line told it first.
    assert caught.value.error.fatal() and "Cluster authorization failed" in str(caught.value)
    with pytest.raises(FatalKafkaError):
        producer.send(TOPIC, b"another", key=b"chunk-2")
    producer.close(timeout_s=0)


def test_a_publisher_lets_the_fatal_error_through_instead_of_a_retryable_one(mock_cluster: MockCluster) -> None:
    """Same fault as above (librdkafka's mock cluster, a real broker cannot produce it): a publish that
    hits a fatal error must stop the process, not be retried as an unconfirmed record."""
    mock_cluster.create_topic("reclaim.subscriber-cuts")
    mock_cluster.push_request_errors(INIT_PRODUCER_ID, KafkaError.CLUSTER_AUTHORIZATION_FAILED)
    publisher = ConfirmedPublisher(RecordProducer(mock_cluster.bootstrap, "idempotent-producer"), build_codec(),
                                   timeout_s=30)
    cut = SubscriberCut("scope/orders", "billing", 1, StreamCut.from_mapping({0: 5}), 1_700_000_000_000)
    with pytest.raises(FatalKafkaError):
        publisher.publish("reclaim.subscriber-cuts", cut, key="scope/orders#billing")
    publisher.producer.close(timeout_s=0)


def test_a_producer_on_a_healthy_cluster_confirms_and_reports_no_fatal_error(mock_cluster: MockCluster) -> None:
    mock_cluster.create_topic(TOPIC)
    producer = RecordProducer(mock_cluster.bootstrap, "idempotent-producer")
    tracker = DeliveryTracker()
    for index in range(3):
        producer.send(TOPIC, b"v", key=f"chunk-{index}".encode(), on_delivery=tracker.callback(index))
    assert producer.wait(tracker, timeout_s=30) == set()
    assert tracker.confirmed == {0, 1, 2} and producer.errors.fatal_error is None
    producer.close()


def failing_commit(cluster: MockCluster, code: int) -> tuple[KafkaError | None, list[TopicPartition]]:
    """Commit offsets 5 and 7 of two partitions while the broker refuses OffsetCommit with ``code``;
    return what the consumer's on_commit callback received."""
    cluster.create_topic(TOPIC, partitions=2)
    received: list[tuple[KafkaError | None, list[TopicPartition]]] = []
    consumer = Consumer(kafka_config(cluster.bootstrap, "consumer", {
        "group.id": "workers", "enable.auto.commit": False,
        "on_commit": lambda err, parts: received.append((err, parts))}))
    try:
        consumer.assign([TopicPartition(TOPIC, 0), TopicPartition(TOPIC, 1)])
        cluster.push_request_errors(OFFSET_COMMIT, code)
        consumer.commit(offsets=[TopicPartition(TOPIC, 0, 5), TopicPartition(TOPIC, 1, 7)], asynchronous=True)
        deadline = time.monotonic() + 30
        while not received and time.monotonic() < deadline:
            consumer.poll(0.2)
    finally:
        consumer.close()
    assert received, "no commit result within 30s"
    return received[0]


def test_check_committed_names_every_failed_partition(mock_cluster: MockCluster) -> None:
    """Per-partition commit errors come only from a broker's answer, and a real broker refuses no
    commit of a healthy group; librdkafka's mock cluster refuses it on demand."""
    _, partitions = failing_commit(mock_cluster, KafkaError.OFFSET_METADATA_TOO_LARGE)
    with pytest.raises(CommitError) as caught:
        check_committed(partitions)
    message = str(caught.value)
    assert message.startswith("commit failed for 2 partition(s): ")
    assert f"{TOPIC}[0]@5: OFFSET_METADATA_TOO_LARGE" in message
    assert f"{TOPIC}[1]@7: OFFSET_METADATA_TOO_LARGE" in message
    assert caught.value.retryable
    assert [tp.partition for tp in caught.value.failed] == [0, 1]


def test_a_synchronous_commit_of_nothing_is_no_offset_not_a_failure(mock_cluster: MockCluster) -> None:
    mock_cluster.create_topic(TOPIC)
    consumer = Consumer(kafka_config(mock_cluster.bootstrap, "consumer", {"group.id": "workers"}))
    try:
        consumer.assign([TopicPartition(TOPIC, 0)])
        with pytest.raises(KafkaException) as caught:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    assert is_no_offset(caught.value)
