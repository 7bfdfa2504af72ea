"""Every record type crosses the real broker through reclaim's codecs and comes back equal, key and headers intact."""

from __future__ import annotations

import struct
from collections.abc import Callable

import pytest
from confluent_kafka import Message

from reclaim.producers.topics import TopicNames
from reclaim.schemas import (
    AvroRecord,
    PendingDeleteLedgerInfo,
    StreamConfig,
    StreamCutRecord,
    SubscriberChange,
    SubscriberCut,
    TruncationEvent,
    build_codec,
)
from reclaim.schemas.confluent import ConfluentCodec
from reclaim.schemas.samples import sample_records
from reclaim.tools.topics import TopicSpec, admin_client, create_topics
from tests.support.kafka_io import Outgoing, consume_from_start, produce_confirmed

pytestmark = pytest.mark.integration

# The topic each record type is published on; a Confluent subject is named after its topic.
HOME_TOPICS: dict[type[AvroRecord], Callable[[TopicNames], str]] = {
    PendingDeleteLedgerInfo: lambda topics: topics.deletion,
    SubscriberCut: lambda topics: topics.subscriber_cuts,
    SubscriberChange: lambda topics: topics.subscribers,
    StreamConfig: lambda topics: topics.stream_config,
    StreamCutRecord: lambda topics: topics.stream_cuts,
    TruncationEvent: lambda topics: topics.truncation,
}


def headers_for(name: str, record: AvroRecord) -> list[tuple[str, bytes]]:
    """Headers as reclaim's retry router writes them: text, binary, and one key repeated."""
    return [
        ("reclaim.record-type", type(record).__name__.encode()),
        ("reclaim.sample", name.encode()),
        ("reclaim.attempt", struct.pack(">I", 3)),
        ("reclaim.error", b"first \x00\xff"),
        ("reclaim.error", b"second"),
    ]


def by_key(messages: list[Message]) -> dict[str, Message]:
    keyed = {(message.key() or b"").decode(): message for message in messages}
    assert len(keyed) == len(messages), "a key was read twice"
    return keyed


@pytest.fixture
def records_topic(kafka_bootstrap: str, unique_name: Callable[[str], str]) -> str:
    """A fresh three-partition topic for records of every type at once."""
    topic = unique_name("records")
    create_topics(admin_client(kafka_bootstrap), [TopicSpec(topic, 3, {})])
    return topic


def test_every_record_type_round_trips_with_key_and_headers(
    kafka_bootstrap: str, records_topic: str, unique_name: Callable[[str], str]
) -> None:
    samples = sample_records()
    codec = build_codec()
    produce_confirmed(kafka_bootstrap, [
        Outgoing(records_topic, codec.encode(record, records_topic), name.encode(), headers_for(name, record))
        for name, record in samples.items()
    ])

    received = by_key(consume_from_start(kafka_bootstrap, [records_topic], unique_name("group"), len(samples)))

    assert sorted(received) == sorted(samples)
    for name, record in samples.items():
        message = received[name]
        decoded = codec.decode(message.value() or b"", records_topic, type(record))
        assert decoded == record, name
        assert message.headers() == headers_for(name, record), name


def test_null_optional_fields_stay_null_across_the_broker(
    kafka_bootstrap: str, records_topic: str, unique_name: Callable[[str], str]
) -> None:
    minimal = sample_records()["pending_delete_minimal"]
    codec = build_codec()
    produce_confirmed(kafka_bootstrap, [Outgoing(records_topic, codec.encode(minimal, records_topic), b"minimal")])

    [message] = consume_from_start(kafka_bootstrap, [records_topic], unique_name("group"), 1)

    decoded = codec.decode(message.value() or b"", records_topic, PendingDeleteLedgerInfo)
    assert decoded == minimal
    assert (decoded.cursor_name, decoded.schema_id, decoded.offload_context, decoded.owner_epoch) == (None,) * 4
    assert message.headers() is None


def test_confluent_wire_format_through_the_broker_with_a_mock_registry(
    kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], unique_name: Callable[[str], str]
) -> None:
    topics = kafka_topics()
    samples = {name: record for name, record in sample_records().items() if type(record) in HOME_TOPICS}
    assert {type(record) for record in samples.values()} == set(HOME_TOPICS)
    writer = build_codec(f"mock://{unique_name('registry')}")
    assert isinstance(writer, ConfluentCodec)
    # The consumer side has its own codec and finds writer schemas by id in the shared registry.
    reader = ConfluentCodec(writer.client)
    home = {name: HOME_TOPICS[type(record)](topics) for name, record in samples.items()}
    produce_confirmed(kafka_bootstrap, [
        Outgoing(home[name], writer.encode(record, home[name]), name.encode(), headers_for(name, record))
        for name, record in samples.items()
    ])

    received = by_key(consume_from_start(kafka_bootstrap, sorted(set(home.values())), unique_name("group"),
                                         len(samples)))

    assert sorted(received) == sorted(samples)
    for name, record in samples.items():
        message = received[name]
        value = message.value() or b""
        assert message.topic() == home[name]
        magic, schema_id = struct.unpack(">bI", value[:5])
        subject = writer.client.get_latest_version(f"{home[name]}-value")
        assert (magic, schema_id) == (0, subject.schema_id), name
        assert reader.decode(value, home[name], type(record)) == record, name
        assert message.headers() == headers_for(name, record), name
