"""Pending deletes read through a template of their shape: the codec's own reading, for any bytes."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reclaim.deletion import shapes
from reclaim.deletion.shapes import PendingReader
from reclaim.schemas import DecodeReason, PendingDeleteLedgerInfo, RecordDecodeError, SingleObjectCodec
from reclaim.schemas.confluent import ConfluentCodec
from reclaim.schemas.ledger import ChunkLocation
from reclaim.schemas.samples import full_pending_delete, minimal_pending_delete
from tests.support.strategies import longs, mutated, pending_deletes, texts

TOPIC = "reclaim.ledger-deletion"
CODEC = SingleObjectCodec()


class Counting(SingleObjectCodec):
    """The single-object codec, counting the records it decodes itself."""

    decoded = 0

    def decode(self, data: bytes, topic: str = "", expected_type: Any = None) -> Any:
        self.decoded += 1
        return super().decode(data, topic, expected_type)


def sibling(record: PendingDeleteLedgerInfo, name: str, key: str, context_key: str, ledger_id: int, msb: int,
            lsb: int) -> PendingDeleteLedgerInfo:
    """A record of the same shape: only the template's holes differ."""
    context = record.offload_context
    if context is not None:
        metadata = tuple((k, context_key if k == "key" else v) for k, v in context.metadata)
        context = dataclasses.replace(context, uuid_msb=msb, uuid_lsb=lsb, metadata=metadata)
    return dataclasses.replace(record, chunk_name=name, ledger_id=ledger_id, offload_context=context,
                               location=ChunkLocation(key, record.location.bucket))


def outcome(decode: Any, data: bytes) -> tuple[str, object]:
    try:
        return "record", decode(data)
    except RecordDecodeError as exc:
        return "refused", exc.reason


@settings(max_examples=150, deadline=None)
@given(first=pending_deletes, name=texts, key=texts, context_key=texts,
       ledger_id=st.integers(min_value=0, max_value=2**63 - 1), msb=longs, lsb=longs)
def test_a_record_of_a_shape_read_before_is_read_through_its_template_as_the_codec_reads_it(
        first: PendingDeleteLedgerInfo, name: str, key: str, context_key: str, ledger_id: int, msb: int,
        lsb: int) -> None:
    codec = Counting()
    reader = PendingReader(codec)
    assert reader.decode(CODEC.encode(first), TOPIC) == first
    second = sibling(first, name, key, context_key, ledger_id, msb, lsb)
    data = CODEC.encode(second)
    assert reader.decode(data, TOPIC) == CODEC.decode(data, TOPIC, PendingDeleteLedgerInfo) == second
    assert codec.decoded == 1, "the second record was decoded by the codec, not read through the template"


def _uuid_lsb_at_top(top: int) -> bytes:
    """A record whose uuid's low half is written in ten bytes, the last one ``top`` (above 1: beyond 64 bits)."""
    record = full_pending_delete()
    data = CODEC.encode(dataclasses.replace(record, offload_context=dataclasses.replace(
        record.offload_context, uuid_lsb=2**62)))  # type: ignore[arg-type]
    at = data.index(bytes.fromhex("80808080808080808001"))
    return data[:at + 9] + bytes([top]) + data[at + 10:]


def _chunk_name_bytes(raw: bytes) -> bytes:
    """A record whose chunk name is ``raw`` (UTF-8 or not), its length as the codec writes it."""
    name = "scope/stream/0.#epoch.3$offset.0"
    data = CODEC.encode(full_pending_delete())
    return data.replace(bytes([2 * len(name)]) + name.encode(), bytes([2 * len(raw)]) + raw, 1)


@pytest.mark.parametrize("data", [
    CODEC.encode(full_pending_delete()) + b"\x00",  # a byte after the record
    _uuid_lsb_at_top(1), _uuid_lsb_at_top(2), _uuid_lsb_at_top(3), _uuid_lsb_at_top(0x7F),  # beyond 64 bits
    _chunk_name_bytes(b"scope/\xff\xfe"), _chunk_name_bytes("scope/ü".encode()),  # not UTF-8, and UTF-8
    CODEC.encode(full_pending_delete())[:-1],
], ids=["trailing", "top-1", "top-2", "top-3", "top-127", "not-utf8", "utf8", "cut"])
def test_edge_bytes_in_a_hole_or_after_it_read_as_the_codec_reads_them(data: bytes) -> None:
    reader = PendingReader(SingleObjectCodec())
    reader.decode(CODEC.encode(dataclasses.replace(full_pending_delete(), chunk_name="other")), TOPIC)
    assert len(reader._templates) == 1
    assert outcome(lambda b: reader.decode(b, TOPIC), data) == outcome(
        lambda b: CODEC.decode(b, TOPIC, PendingDeleteLedgerInfo), data)


SHAPES = [full_pending_delete(), minimal_pending_delete()]


@pytest.mark.parametrize("first", SHAPES, ids=["full", "minimal"])
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_bytes_near_a_shape_read_before_decode_or_are_refused_as_the_codec_does(
        first: PendingDeleteLedgerInfo, data: st.DataObject) -> None:
    reader = PendingReader(SingleObjectCodec())
    reader.decode(CODEC.encode(first), TOPIC)
    second = sibling(first, "scope/stream/0.#epoch.3$offset.9", "k/9", "k/9", 7, -1, 2**62)
    forged = data.draw(mutated(CODEC.encode(second), most=3))
    assert outcome(lambda b: reader.decode(b, TOPIC), forged) == outcome(
        lambda b: CODEC.decode(b, TOPIC, PendingDeleteLedgerInfo), forged)


def test_a_batch_learns_a_few_shapes_and_the_reader_keeps_a_bounded_number() -> None:
    reader = PendingReader(SingleObjectCodec())
    shaped = [dataclasses.replace(full_pending_delete(), segment_name=f"scope/stream/{i}.#epoch.0") for i in range(200)]
    for record in shaped[:10]:
        reader.decode(CODEC.encode(record), TOPIC)
    assert len(reader._templates) == shapes.LEARN_PER_BATCH
    for start in range(10, 200, 4):
        reader.new_batch()
        for record in shaped[start:start + 4]:
            assert reader.decode(CODEC.encode(record), TOPIC) == record
    assert len(reader._templates) == shapes.MAX_TEMPLATES


def test_a_tombstone_is_refused_as_the_codec_refuses_it() -> None:
    reader = PendingReader(SingleObjectCodec())
    with pytest.raises(RecordDecodeError) as refused:
        reader.decode(None, TOPIC)
    assert refused.value.reason is DecodeReason.TRUNCATED


def test_only_the_single_object_codec_gets_a_reader() -> None:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    assert PendingReader.for_codec(SingleObjectCodec()) is not None
    assert PendingReader.for_codec(ConfluentCodec(SchemaRegistryClient.new_client({"url": "mock://shapes"}))) is None
