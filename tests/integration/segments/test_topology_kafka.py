"""Topologies through the real broker: the controller publishes to the compacted topic, a reader decodes them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator

import pytest

from reclaim.localstack.procs import free_port
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.producers.topology import KafkaTopologyPublisher, TopologyPublishError
from reclaim.schemas import StreamTopology, TopologyState, build_codec
from reclaim.segments.chunked import ChunkedSegmentStorage
from reclaim.segments.controller_store import ControllerStore
from reclaim.segments.ids import SegmentId
from reclaim.segments.streams import StreamController
from reclaim.settings import Settings
from reclaim.tools.topics import admin_client, describe_topics, topic_specs
from tests.support.kafka_io import consume_from_start
from tests.support.segments import STREAM


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[RecordProducer]:
    made = RecordProducer(kafka_bootstrap, "idempotent-producer")
    yield made
    made.close()


@pytest.fixture
def unreachable() -> Iterator[RecordProducer]:
    """A producer whose bootstrap address has no broker behind it."""
    made = RecordProducer(f"127.0.0.1:{free_port()}", "idempotent-producer")
    yield made
    made.close(timeout_s=0)


def without_time(topology: StreamTopology) -> StreamTopology:
    return dataclasses.replace(topology, published_at=0)


@pytest.mark.integration
def test_the_controllers_topologies_land_on_the_compacted_topic_keyed_by_stream(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], unique_name: Callable[[str], str],
        segments: ChunkedSegmentStorage, streams_store: ControllerStore, producer: RecordProducer,
        unreachable: RecordProducer) -> None:
    topics = kafka_topics()
    codec = build_codec()
    failing = StreamController(segments, streams_store,
                               topology_sink=KafkaTopologyPublisher(unreachable, codec, topics.stream_topology, 1.0))
    controller = StreamController(segments, streams_store,
                                  topology_sink=KafkaTopologyPublisher(producer, codec, topics.stream_topology))
    controller.create_stream("scope", "orders", 2)
    controller.append(f"{STREAM}/0.#epoch.0", b"0123456789")
    with pytest.raises(TopologyPublishError, match="not confirmed") as caught:
        failing.scale(STREAM, [SegmentId(0, 0)], [(0.0, 0.25), (0.25, 0.5)])
    assert caught.value.retryable and caught.value.stream == STREAM
    assert controller.recover(STREAM) is not None  # the scale finishes by publishing through the broker
    controller.seal_stream(STREAM)
    controller.create_stream("scope", "other", 1)

    messages = consume_from_start(kafka_bootstrap, [topics.stream_topology], unique_name("group"), 4)

    decoded = [(m.key(), codec.decode(m.value() or b"", topics.stream_topology, StreamTopology)) for m in messages]
    orders = [topology for key, topology in decoded if key == STREAM.encode()]
    assert [(len(t.epochs), t.state) for t in orders] == [
        (1, TopologyState.ACTIVE), (2, TopologyState.ACTIVE), (2, TopologyState.SEALED)]
    assert orders[1].sealed_length_map() == {0: 10}
    assert without_time(orders[-1]) == without_time(controller.topology(STREAM))
    [other] = [topology for key, topology in decoded if key == b"scope/other"]
    assert without_time(other) == without_time(controller.topology("scope/other"))


@pytest.mark.integration
def test_the_topology_topic_is_compacted_and_the_rejects_topic_kept_like_deletions(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames]) -> None:
    topics = kafka_topics()
    prefix = topics.stream_topology.removesuffix("stream-topology")
    specs = [spec for spec in topic_specs(Settings(topic_prefix=prefix))
             if spec.name in (topics.stream_topology, topics.retention_rejects)]
    rows = {row["topic"]: row for row in describe_topics(admin_client(kafka_bootstrap), specs)}
    assert rows[topics.stream_topology]["cleanup.policy"] == "compact"
    assert rows[topics.retention_rejects]["cleanup.policy"] == "delete"
    assert rows[topics.retention_rejects]["retention.ms"] == str(Settings().deletion_retention_ms)
    assert (topics.stream_topology, topics.retention_rejects) == (f"{prefix}stream-topology",
                                                                  f"{prefix}retention-rejects")


def test_an_unconfirmed_send_is_the_typed_retryable_error(unreachable: RecordProducer) -> None:
    topology = StreamTopology(STREAM, (), (), TopologyState.DELETED, 0)
    publisher = KafkaTopologyPublisher(unreachable, build_codec(), "reclaim.stream-topology", timeout_s=0.5)
    with pytest.raises(TopologyPublishError, match="no delivery report within 0.5s") as caught:
        publisher.publish(topology)
    assert caught.value.retryable and caught.value.topic == "reclaim.stream-topology"
