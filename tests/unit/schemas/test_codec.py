"""Avro single-object encoding: round trips, the wire format, schema evolution and typed errors."""

from __future__ import annotations

import dataclasses
import io
from typing import Any

import pytest
from fastavro import schemaless_reader, schemaless_writer

from reclaim.errors import ReclaimError
from reclaim.schemas import (
    DecodeReason,
    EncodeReason,
    PendingDeleteLedgerInfo,
    RecordDecodeError,
    RecordEncodeError,
    RecordSchema,
    RetentionPolicy,
    SchemaCatalog,
    SchemaError,
    SingleObjectCodec,
    StreamCut,
    TruncationEvent,
    TruncationReason,
    build_codec,
)
from reclaim.schemas.catalog import read_body
from reclaim.schemas.ledger import LedgerComponent, LedgerType
from reclaim.schemas.samples import CUT, NOW, POLICY, full_pending_delete, minimal_pending_delete, sample_records
from tests.support.codec import evolved

TOPIC = "reclaim.ledger-deletion"


def crc64_avro(data: bytes) -> int:
    """The Avro spec's reference CRC-64-AVRO (Rabin) fingerprint, as an independent oracle."""
    empty = 0xC15D213AA4D7A795
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (empty & -(fp & 1))
        table.append(fp)
    fp = empty
    for byte in data:
        fp = (fp >> 8) ^ table[(fp ^ byte) & 0xFF]
    return fp


def framed(schema: RecordSchema, datum: dict[str, Any]) -> bytes:
    """Single-object bytes written straight with fastavro, bypassing the dataclasses' checks."""
    out = io.BytesIO(b"\xc3\x01" + schema.fingerprint)
    out.seek(0, io.SEEK_END)
    schemaless_writer(out, schema.parsed, datum)
    return out.getvalue()


@pytest.fixture
def codec() -> SingleObjectCodec:
    return SingleObjectCodec()


@pytest.mark.parametrize("name", sorted(sample_records()))
def test_every_record_type_round_trips(codec: SingleObjectCodec, name: str) -> None:
    record = sample_records()[name]
    assert codec.decode(codec.encode(record, TOPIC), TOPIC) == record


def test_decode_with_expected_type_returns_that_type(codec: SingleObjectCodec) -> None:
    record: PendingDeleteLedgerInfo = codec.decode(
        codec.encode(full_pending_delete(), TOPIC), TOPIC, PendingDeleteLedgerInfo
    )
    assert record.offload_context is not None and record.offload_context.driver_name == "s3"


def test_wire_format_is_marker_fingerprint_then_plain_avro_body(codec: SingleObjectCodec) -> None:
    record = minimal_pending_delete()
    data = codec.encode(record, TOPIC)
    schema = PendingDeleteLedgerInfo.SCHEMA
    assert data[:2] == b"\xc3\x01"
    expected = crc64_avro(schema.canonical_form.encode("utf-8"))
    assert int.from_bytes(data[2:10], "little") == expected
    body = schemaless_reader(io.BytesIO(data[10:]), schema.parsed, None)
    assert isinstance(body, dict) and body["chunk_name"] == record.chunk_name


def test_canonical_form_ignores_docs_so_doc_edits_keep_the_fingerprint() -> None:
    variant = PendingDeleteLedgerInfo.SCHEMA.to_dict()
    variant["doc"] = "reworded"
    assert RecordSchema.from_dict(variant).fingerprint == PendingDeleteLedgerInfo.SCHEMA.fingerprint


def test_build_codec_without_registry_is_single_object() -> None:
    assert isinstance(build_codec(None), SingleObjectCodec)


# -- schema evolution --------------------------------------------------------------------------


def test_reader_with_an_added_defaulted_field_reads_old_records() -> None:
    old = evolved(PendingDeleteLedgerInfo.SCHEMA, drop="owner_epoch")
    old_writer = SingleObjectCodec(SchemaCatalog(overrides={PendingDeleteLedgerInfo: old}))
    data = old_writer.encode(full_pending_delete(), TOPIC)
    assert data[2:10] == old.fingerprint != PendingDeleteLedgerInfo.SCHEMA.fingerprint

    reader = SingleObjectCodec()
    reader.register_writer_schema(old)
    decoded = reader.decode(data, TOPIC, PendingDeleteLedgerInfo)
    assert decoded.owner_epoch is None
    assert decoded == dataclasses.replace(full_pending_delete(), owner_epoch=None)


def test_added_fields_with_non_null_defaults_take_their_defaults() -> None:
    old = evolved(evolved(RetentionPolicy.SCHEMA, drop="min_limit"), drop="max_limit")
    data = SingleObjectCodec(SchemaCatalog(overrides={RetentionPolicy: old})).encode(POLICY, TOPIC)
    decoded = SingleObjectCodec(SchemaCatalog(writer_schemas=[old])).decode(data, TOPIC, RetentionPolicy)
    assert (decoded.min_limit, decoded.max_limit) == (0, 2**63 - 1)
    assert decoded.retention_type is POLICY.retention_type and decoded.limit_type is POLICY.limit_type


def test_old_reader_reads_records_of_a_newer_schema() -> None:
    newer = evolved(PendingDeleteLedgerInfo.SCHEMA, add={"name": "retry_hint", "type": "string", "default": "none"})
    data = SingleObjectCodec(SchemaCatalog(overrides={PendingDeleteLedgerInfo: newer})).encode(
        full_pending_delete(), TOPIC
    )
    old_reader = SingleObjectCodec(SchemaCatalog(writer_schemas=[newer]))
    assert old_reader.decode(data, TOPIC) == full_pending_delete()


def test_a_newer_schema_nobody_registered_is_an_unknown_fingerprint() -> None:
    newer = evolved(TruncationEvent.SCHEMA, add={"name": "note", "type": "string", "default": ""})
    event = TruncationEvent("s/t", CUT, TruncationReason.MANUAL, NOW, POLICY)
    data = SingleObjectCodec(SchemaCatalog(overrides={TruncationEvent: newer})).encode(event, TOPIC)
    with pytest.raises(RecordDecodeError) as caught:
        SingleObjectCodec().decode(data, TOPIC)
    assert caught.value.reason is DecodeReason.UNKNOWN_SCHEMA
    assert "unknown writer schema" in str(caught.value) and newer.fingerprint.hex() in str(caught.value)
    assert not caught.value.retryable


def test_an_incompatible_change_is_a_schema_mismatch() -> None:
    retyped = evolved(
        evolved(StreamCut.SCHEMA, drop="positions"),
        add={"name": "positions", "type": {"type": "array", "items": "string"}},
    )
    data = framed(retyped, {"positions": ["0:0"]})
    with pytest.raises(RecordDecodeError) as caught:
        SingleObjectCodec(SchemaCatalog(writer_schemas=[retyped])).decode(data, TOPIC)
    assert caught.value.reason is DecodeReason.SCHEMA_MISMATCH
    assert "cannot be resolved" in str(caught.value)


def test_catalog_rejects_schemas_of_unknown_records() -> None:
    stranger = RecordSchema.from_dict({"type": "record", "name": "Stranger", "namespace": "x", "fields": []})
    with pytest.raises(SchemaError, match="no record type is named x.Stranger"):
        SchemaCatalog(writer_schemas=[stranger])
    with pytest.raises(SchemaError, match="does not belong to RetentionPolicy"):
        SchemaCatalog(overrides={RetentionPolicy: StreamCut.SCHEMA})


def test_invalid_schemas_are_schema_errors() -> None:
    with pytest.raises(SchemaError, match="invalid Avro schema"):
        RecordSchema.from_dict({"type": "record", "name": "Bad", "fields": [{"name": "a", "type": "nope"}]})
    with pytest.raises(SchemaError, match="not JSON"):
        RecordSchema.from_json("{")
    with pytest.raises(SchemaError, match="not an Avro record schema"):
        RecordSchema.from_dict({"type": "enum", "name": "E", "symbols": ["A"]})
    with pytest.raises(SchemaError, match="cannot load schema reclaim.Missing"):
        RecordSchema.load("reclaim.Missing")


# -- typed errors, each naming its reason ------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "reason", "words"),
    [
        (b"", DecodeReason.TRUNCATED, "0 bytes, shorter than the 10-byte header"),
        (b"\xc3", DecodeReason.TRUNCATED, "truncated data"),
        (b"\xc3\x01\x00\x01", DecodeReason.TRUNCATED, "4 bytes"),
        (b"\x00\x00\x00\x00\x01\x02", DecodeReason.BAD_MARKER, "wrong marker bytes: expected c301, got 0000"),
        (b"{}", DecodeReason.BAD_MARKER, "got 7b7d"),
        (b"\xc3\x01" + bytes(8) + b"\x02", DecodeReason.UNKNOWN_SCHEMA, "fingerprint 0000000000000000"),
    ],
)
def test_malformed_headers_name_the_reason(
    codec: SingleObjectCodec, data: bytes, reason: DecodeReason, words: str
) -> None:
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data, TOPIC)
    assert caught.value.reason is reason
    assert words in str(caught.value)
    assert isinstance(caught.value, SchemaError) and isinstance(caught.value, ReclaimError)


def test_truncated_body_is_truncated(codec: SingleObjectCodec) -> None:
    data = codec.encode(full_pending_delete(), TOPIC)
    with pytest.raises(RecordDecodeError, match="truncated data: reclaim.PendingDeleteLedgerInfo body ends early"):
        codec.decode(data[:-5], TOPIC)


def test_trailing_bytes_are_rejected(codec: SingleObjectCodec) -> None:
    data = codec.encode(CUT, TOPIC)
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data + b"\x00", TOPIC)
    assert caught.value.reason is DecodeReason.TRAILING_BYTES
    assert "trailing bytes after the record" in str(caught.value)


def test_a_garbled_body_is_malformed(codec: SingleObjectCodec) -> None:
    header = codec.encode(minimal_pending_delete(), TOPIC)[:10]
    # Length prefix 2 then an invalid UTF-8 pair for topic_name.
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(header + b"\x04\xff\xfe" + bytes(40), TOPIC)
    assert caught.value.reason is DecodeReason.MALFORMED_BODY
    assert "malformed Avro body" in str(caught.value)


def test_values_that_cannot_build_the_dataclass_are_invalid_records(codec: SingleObjectCodec) -> None:
    duplicate = framed(
        StreamCut.SCHEMA, {"positions": [{"segment_id": 3, "offset": 0}, {"segment_id": 3, "offset": 1}]}
    )
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(duplicate, TOPIC)
    assert caught.value.reason is DecodeReason.INVALID_RECORD
    assert "invalid record values: reclaim.StreamCut: stream cut names segment 3 twice" == str(caught.value)


def test_an_enum_symbol_the_code_lacks_is_an_invalid_record() -> None:
    # The reader's catalog schema knows the symbol but the Python enum does not: the dataclass check catches it.
    widened = RetentionPolicy.SCHEMA.to_dict()
    widened["fields"][0]["type"]["symbols"].append("FOREVER")
    schema = RecordSchema.from_dict(widened)
    data = framed(schema, {**POLICY.to_avro(), "retention_type": "FOREVER"})
    codec = SingleObjectCodec(SchemaCatalog(overrides={RetentionPolicy: schema}))
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data, TOPIC)
    assert caught.value.reason is DecodeReason.INVALID_RECORD
    assert "'FOREVER' is not a RetentionType symbol" in str(caught.value)


@pytest.mark.parametrize("record", [minimal_pending_delete(), full_pending_delete()], ids=["minimal", "full"])
def test_the_trusted_read_of_a_pending_delete_builds_what_the_checked_one_does(
        codec: SingleObjectCodec, record: PendingDeleteLedgerInfo) -> None:
    def datum() -> dict[str, Any]:  # from_datum takes its datum over: each read its own
        schema = PendingDeleteLedgerInfo.SCHEMA
        return read_body(codec.encode(record, TOPIC)[10:], schema, schema)

    trusted = PendingDeleteLedgerInfo.from_datum(datum())
    assert trusted == PendingDeleteLedgerInfo.from_avro(datum()) == record
    # The datum's dicts became the records' own: each holds exactly its dataclass's fields.
    for value in (trusted, trusted.location, trusted.offload_context):
        if value is not None:
            assert set(vars(value)) == {field.name for field in dataclasses.fields(value)}


def test_the_trusted_read_still_checks_values(codec: SingleObjectCodec) -> None:
    before_epoch = framed(PendingDeleteLedgerInfo.SCHEMA, {**minimal_pending_delete().to_avro(), "created_at": -5})
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(before_epoch, TOPIC)
    assert caught.value.reason is DecodeReason.INVALID_RECORD
    assert "created_at must be epoch millis" in str(caught.value)


def test_the_enums_a_trusted_read_converts_have_exactly_the_schema_symbols() -> None:
    # What makes skipping the re-checks safe: no symbol fastavro can return is unknown to the code.
    fields = {f["name"]: f["type"] for f in PendingDeleteLedgerInfo.SCHEMA.to_dict()["fields"]}
    assert fields["ledger_type"]["symbols"] == list(LedgerType.__members__)
    assert fields["ledger_component"]["symbols"] == list(LedgerComponent.__members__)


def test_unexpected_type_names_both_types(codec: SingleObjectCodec) -> None:
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(codec.encode(CUT, TOPIC), TOPIC, PendingDeleteLedgerInfo)
    assert caught.value.reason is DecodeReason.UNEXPECTED_TYPE
    assert "unexpected record type: expected PendingDeleteLedgerInfo, got StreamCut" == str(caught.value)


def test_a_header_seen_before_still_has_its_type_checked(codec: SingleObjectCodec) -> None:
    # The second decode finds the header remembered from the first: the expected type is still checked.
    data = codec.encode(CUT, TOPIC)
    assert codec.decode(data, TOPIC) == CUT
    with pytest.raises(RecordDecodeError) as caught:
        codec.decode(data, TOPIC, PendingDeleteLedgerInfo)
    assert caught.value.reason is DecodeReason.UNEXPECTED_TYPE


def test_unknown_fingerprints_are_refused_every_time_and_not_remembered(codec: SingleObjectCodec) -> None:
    # Only a registered fingerprint's header is remembered, so records with made-up ones (anyone who can
    # write to the topic can send them) cannot grow what the codec keeps.
    body = codec.encode(CUT, TOPIC)[10:]
    for n in range(1000):
        with pytest.raises(RecordDecodeError) as caught:
            codec.decode(b"\xc3\x01" + n.to_bytes(8, "little") + body, TOPIC)
        assert caught.value.reason is DecodeReason.UNKNOWN_SCHEMA
    assert codec.decode(codec.encode(CUT, TOPIC), TOPIC) == CUT
    assert len(codec._headers) == 1  # white-box: the one registered header seen


def test_decoding_a_null_value_is_a_typed_error(codec: SingleObjectCodec) -> None:
    with pytest.raises(RecordDecodeError, match="expected bytes, got NoneType"):
        codec.decode(None, TOPIC)  # type: ignore[call-overload]


def test_encoding_a_value_outside_its_avro_type_names_the_field(codec: SingleObjectCodec) -> None:
    record = dataclasses.replace(minimal_pending_delete(), ledger_id=2**64)
    with pytest.raises(RecordEncodeError) as caught:
        codec.encode(record, TOPIC)
    assert caught.value.reason is EncodeReason.INVALID_RECORD
    assert "record does not match its schema" in str(caught.value)
    assert "reclaim.PendingDeleteLedgerInfo.ledger_id" in str(caught.value)


def test_encoding_a_wrongly_typed_field_names_it(codec: SingleObjectCodec) -> None:
    record = dataclasses.replace(minimal_pending_delete(), mark_id=7)  # type: ignore[arg-type]
    with pytest.raises(RecordEncodeError, match="PendingDeleteLedgerInfo.mark_id"):
        codec.encode(record, TOPIC)


def test_encoding_something_that_is_not_a_record(codec: SingleObjectCodec) -> None:
    with pytest.raises(RecordEncodeError) as caught:
        codec.encode({"stream": "s"}, TOPIC)  # type: ignore[arg-type]
    assert caught.value.reason is EncodeReason.NOT_A_RECORD
    assert "not a reclaim record" in str(caught.value)
