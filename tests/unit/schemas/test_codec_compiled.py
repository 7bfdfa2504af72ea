"""The codec's compiled encoder writes exactly fastavro's bytes, and leaves every other datum to fastavro."""

from __future__ import annotations

import dataclasses
import io

import pytest
from fastavro import schemaless_writer
from hypothesis import given, settings

from reclaim.schemas import AvroRecord, EncodeReason, RecordEncodeError, SingleObjectCodec
from reclaim.schemas.catalog import record_datum
from reclaim.schemas.codec import SINGLE_OBJECT_MARKER, _NotFast, _zigzag_varint, compile_encoder
from reclaim.schemas.samples import full_pending_delete, minimal_pending_delete, sample_records
from reclaim.schemas.topology import TopologySegment
from tests.support.strategies import longs, records

CODEC = SingleObjectCodec()


def fastavro_encoding(record: AvroRecord) -> bytes:
    """The checked path: fastavro validates the datum, then writes it."""
    schema = CODEC.catalog.schema_for(type(record))
    out = io.BytesIO()
    out.write(SINGLE_OBJECT_MARKER + schema.fingerprint)
    schemaless_writer(out, schema.parsed, record_datum(record, schema))
    return out.getvalue()


def compiled_body(record: AvroRecord) -> bytes:
    schema = CODEC.catalog.schema_for(type(record))
    encoder = compile_encoder(schema.parsed)
    assert encoder is not None, f"{schema.name} uses a construct the compiled encoder does not cover"
    return encoder(record.to_avro())


@pytest.mark.parametrize("name", sorted(sample_records()))
def test_every_record_type_compiles_to_fastavros_bytes(name: str) -> None:
    record = sample_records()[name]
    assert SINGLE_OBJECT_MARKER + CODEC.catalog.schema_for(type(record)).fingerprint + compiled_body(record) \
        == fastavro_encoding(record)
    assert CODEC.encode(record) == fastavro_encoding(record)


@settings(max_examples=300, deadline=None)
@given(records)
def test_any_valid_record_compiles_to_fastavros_bytes(record: AvroRecord) -> None:
    assert CODEC.encode(record) == fastavro_encoding(record)
    assert fastavro_encoding(record).endswith(compiled_body(record))


def test_a_value_of_another_python_type_is_left_to_fastavro() -> None:
    # fastavro writes an int in a double field; the compiled encoder takes only floats and hands it over.
    segment = TopologySegment(5, 0.0, 1.0)
    object.__setattr__(segment, "key_end", 1)
    with pytest.raises(_NotFast):
        compiled_body(segment)
    assert CODEC.encode(segment) == fastavro_encoding(TopologySegment(5, 0.0, 1.0))


def test_an_invalid_value_still_names_the_field() -> None:
    record = dataclasses.replace(minimal_pending_delete(), ledger_id=-(2**63) - 1)
    with pytest.raises(RecordEncodeError) as caught:
        CODEC.encode(record)
    assert caught.value.reason is EncodeReason.INVALID_RECORD
    assert "reclaim.PendingDeleteLedgerInfo.ledger_id" in str(caught.value)


def test_schemas_with_other_unions_are_not_compiled() -> None:
    schema = {"type": "record", "name": "x.Both", "fields": [{"name": "v", "type": ["null", "string", "long"]}]}
    assert compile_encoder(schema) is None
    assert compile_encoder({"type": "record", "name": "x.Dec", "fields": [
        {"name": "v", "type": {"type": "bytes", "logicalType": "decimal", "precision": 4}}]}) is None


def reference_varint(value: int) -> bytes:
    """The Avro spec's long encoding, byte by byte."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


@settings(max_examples=500, deadline=None)
@given(longs)
def test_longs_are_zigzag_varints(value: int) -> None:
    assert _zigzag_varint(value) == reference_varint(value)


# Around 2**55 a zig-zagged long takes 9 bytes, from 2**62 on 10: the table path for those begins at 2**55.
@pytest.mark.parametrize("value", [0, -1, 1, 63, -64, 64, 2**31 - 1, -(2**31), 2**55 - 1, -(2**55), 2**55,
                                   -(2**55) - 1, 2**56, 2**62 - 1, -(2**62), 2**62, -(2**62) - 1, 2**63 - 1,
                                   -(2**63)])
def test_long_boundaries_are_zigzag_varints(value: int) -> None:
    assert _zigzag_varint(value) == reference_varint(value)


@pytest.mark.parametrize("name", sorted(name for name, record in sample_records().items() if record.AVRO_ATTRIBUTES))
def test_a_record_is_encoded_from_its_attributes_to_the_same_bytes(name: str) -> None:
    # Not a silent fallback: the attribute encoder itself writes what fastavro writes for to_avro().
    record = sample_records()[name]
    encoder = compile_encoder(CODEC.catalog.schema_for(type(record)).parsed, attributes=True)
    assert encoder is not None
    assert encoder(record) == compiled_body(record)


def test_the_attribute_encoder_takes_only_records_that_say_their_attributes_are_their_datum() -> None:
    schema = CODEC.catalog.schema_for(type(minimal_pending_delete())).parsed
    encoder = compile_encoder(schema, attributes=True)
    assert encoder is not None
    with pytest.raises(AttributeError):
        encoder(minimal_pending_delete().to_avro())
    with pytest.raises(_NotFast):
        encoder(dataclasses.replace(minimal_pending_delete(), location=TopologySegment(5, 0.0, 1.0)))  # type: ignore[arg-type]


def test_values_kept_from_the_record_before_are_used_only_for_the_very_same_object() -> None:
    # Each string and long field keeps its last value's bytes: records sharing some field objects, then
    # records with equal values in new objects, then other values, all encode as fastavro does.
    codec = SingleObjectCodec()
    first = full_pending_delete()
    shared = dataclasses.replace(first, chunk_name="other", ledger_id=7)
    copied = dataclasses.replace(first, topic_name="".join(["scope/", "stream"]), created_at=first.created_at + 0)
    different = dataclasses.replace(first, topic_name="scope/other", segment_name="s", created_at=5, mark_id="m2")
    for record in (first, shared, copied, different, first, minimal_pending_delete(), first):
        assert codec.encode(record) == fastavro_encoding(record)


def test_encode_all_is_encode_of_each_record_in_order() -> None:
    mixed = [full_pending_delete(), minimal_pending_delete(), *sample_records().values(), full_pending_delete()]
    codec = SingleObjectCodec()
    assert codec.encode_all(mixed) == [fastavro_encoding(record) for record in mixed]
    # One the attribute encoder does not take (an int in a float field) goes through encode.
    segment = TopologySegment(5, 0.0, 1.0)
    object.__setattr__(segment, "key_end", 1)
    assert codec.encode_all([segment]) == [fastavro_encoding(TopologySegment(5, 0.0, 1.0))]


def test_encode_all_names_an_invalid_field_as_encode_does() -> None:
    record = dataclasses.replace(minimal_pending_delete(), ledger_id=-(2**63) - 1)
    with pytest.raises(RecordEncodeError) as caught:
        SingleObjectCodec().encode_all([minimal_pending_delete(), record])
    assert "reclaim.PendingDeleteLedgerInfo.ledger_id" in str(caught.value)
