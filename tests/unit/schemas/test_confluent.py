"""The Confluent wire format through confluent-kafka's serializers and its in-memory mock:// registry."""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reclaim.schemas import (
    DecodeReason,
    EncodeReason,
    PendingDeleteLedgerInfo,
    RecordDecodeError,
    RecordEncodeError,
    RecordSchema,
    RetentionPolicy,
    SchemaCatalog,
    StreamCut,
    build_codec,
)
from reclaim.schemas.confluent import ConfluentCodec
from reclaim.schemas.samples import CUT, full_pending_delete, minimal_pending_delete, sample_records
from tests.support.codec import evolved

TOPIC = "reclaim.ledger-deletion"


@pytest.fixture
def client() -> SchemaRegistryClient:
    return SchemaRegistryClient.new_client({"url": "mock://schemas-tests"})


@pytest.fixture
def codec(client: SchemaRegistryClient) -> ConfluentCodec:
    return ConfluentCodec(client)


def frame(schema_id: int, body: bytes = b"\x00") -> bytes:
    return struct.pack(">bI", 0, schema_id) + body


@pytest.mark.parametrize("name", sorted(sample_records()))
def test_every_record_type_round_trips_through_the_registry(codec: ConfluentCodec, name: str) -> None:
    record = sample_records()[name]
    data = codec.encode(record, TOPIC)
    assert data[0] == 0
    assert codec.decode(data, TOPIC) == record


def test_the_schema_is_registered_under_the_topic_subject(codec: ConfluentCodec, client: SchemaRegistryClient) -> None:
    data = codec.encode(full_pending_delete(), TOPIC)
    latest = client.get_latest_version(f"{TOPIC}-value")
    assert latest.schema_id == struct.unpack(">I", data[1:5])[0]
    assert latest.schema.schema_str is not None
    registered = RecordSchema.from_json(latest.schema.schema_str)
    assert registered == PendingDeleteLedgerInfo.SCHEMA


def test_a_separate_codec_on_the_same_registry_decodes(client: SchemaRegistryClient) -> None:
    data = ConfluentCodec(client).encode(minimal_pending_delete(), TOPIC)
    assert ConfluentCodec(client).decode(data, TOPIC, PendingDeleteLedgerInfo) == minimal_pending_delete()


def test_build_codec_with_a_registry_url_is_confluent() -> None:
    codec = build_codec("mock://build-codec")
    assert isinstance(codec, ConfluentCodec)
    assert codec.decode(codec.encode(CUT, TOPIC), TOPIC, StreamCut) == CUT


def test_evolution_both_ways_with_the_registry_as_schema_store(client: SchemaRegistryClient) -> None:
    newer = evolved(PendingDeleteLedgerInfo.SCHEMA, add={"name": "retry_hint", "type": "string", "default": ""})
    older = evolved(PendingDeleteLedgerInfo.SCHEMA, drop="owner_epoch")
    current = ConfluentCodec(client)
    newer_writer = ConfluentCodec(client, catalog=SchemaCatalog(overrides={PendingDeleteLedgerInfo: newer}))
    older_writer = ConfluentCodec(client, catalog=SchemaCatalog(overrides={PendingDeleteLedgerInfo: older}))

    # No registration in the reader: the registry hands it the writer schema by id.
    assert current.decode(newer_writer.encode(full_pending_delete(), TOPIC), TOPIC) == full_pending_delete()
    decoded = current.decode(older_writer.encode(full_pending_delete(), TOPIC), TOPIC, PendingDeleteLedgerInfo)
    assert decoded.owner_epoch is None and decoded.chunk_name == full_pending_delete().chunk_name
    assert (
        older_writer.decode(current.encode(full_pending_delete(), TOPIC), TOPIC, PendingDeleteLedgerInfo).owner_epoch
        is None
    )


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b"\xc3\x01" + bytes(12), DecodeReason.BAD_MARKER, "wrong marker bytes"),
        (b"\x00\x00", DecodeReason.TRUNCATED, "truncated data"),
        (b"", DecodeReason.TRUNCATED, "0 bytes"),
        (frame(987654), DecodeReason.UNKNOWN_SCHEMA, "Schema Not Found"),
    ],
)
def test_malformed_framing_names_the_reason(
    codec: ConfluentCodec, data: bytes, reason: DecodeReason, words: str
) -> None:
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data, TOPIC)
    assert caught.value.reason is reason
    assert words in str(caught.value)
    assert not caught.value.retryable


def test_a_schema_of_someone_elses_record_is_an_unknown_record_type(
    codec: ConfluentCodec, client: SchemaRegistryClient
) -> None:
    foreign = '{"type": "record", "name": "Order", "namespace": "shop", "fields": [{"name": "id", "type": "long"}]}'
    schema_id = client.register_schema("orders-value", Schema(foreign, "AVRO"))
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(frame(schema_id, b"\x02"), "orders")
    assert caught.value.reason is DecodeReason.UNKNOWN_RECORD_TYPE
    assert "unknown record type: no record type is named shop.Order" == str(caught.value)


def test_unexpected_type_and_malformed_body(codec: ConfluentCodec) -> None:
    data = codec.encode(CUT, TOPIC)
    with pytest.raises(RecordDecodeError, match="unexpected record type: expected RetentionPolicy, got StreamCut"):
        codec.decode(data, TOPIC, RetentionPolicy)
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data[:5] + b"\x04\x02", TOPIC)
    assert caught.value.reason is DecodeReason.MALFORMED_BODY


def test_encoding_an_invalid_record_names_the_field(codec: ConfluentCodec) -> None:
    record = StreamCut.from_mapping({0: 2**64})
    with pytest.raises(RecordEncodeError) as caught:
        codec.encode(record, TOPIC)
    assert caught.value.reason is EncodeReason.INVALID_RECORD
    assert "reclaim.SegmentOffset.offset" in str(caught.value)


def test_an_unreachable_registry_is_a_retryable_error() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # The port is closed again, so connecting is refused at once; no retries keep the test fast.
    codec = build_codec(f"http://127.0.0.1:{port}", registry_config={"max.retries": 0})
    with pytest.raises(RecordEncodeError) as encode_error:
        codec.encode(CUT, TOPIC)
    assert encode_error.value.reason is EncodeReason.REGISTRY_UNAVAILABLE and encode_error.value.retryable
    assert "schema registry unavailable" in str(encode_error.value)
    with pytest.raises(RecordDecodeError) as decode_error:
        codec.decode(frame(1), TOPIC)
    assert decode_error.value.reason is DecodeReason.REGISTRY_UNAVAILABLE and decode_error.value.retryable


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=120))
def test_random_framed_bytes_never_escape_the_typed_error(codec: ConfluentCodec, body: bytes) -> None:
    valid = codec.encode(full_pending_delete(), TOPIC)
    for data in (body, valid[:5] + body, valid[: len(body) % len(valid)] + body):
        try:
            codec.decode(data, TOPIC)
        except RecordDecodeError as exc:
            assert str(exc).startswith(exc.reason.value)


def test_encode_all_is_encode_of_each_record(codec: ConfluentCodec) -> None:
    records = list(sample_records().values())
    assert codec.encode_all(records, TOPIC) == [codec.encode(record, TOPIC) for record in records]
