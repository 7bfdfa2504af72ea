"""Stream incarnations on the bus (pure): every record about a stream carries its incarnation, and a record
written before the field existed (the earlier schema, kept under schemas/avro/previous) still decodes, with
no incarnation."""

from __future__ import annotations

import dataclasses

import pytest

from reclaim.schemas import build_codec
from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.base import AvroRecord, new_incarnation
from reclaim.schemas.catalog import PREVIOUS_DIR, SchemaCatalog
from reclaim.schemas.codec import SingleObjectCodec
from reclaim.schemas.streams import (
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    TruncationEvent,
    TruncationReason,
)
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import StreamTopology, TopologyEpoch, TopologySegment, TopologyState

NOW = 1_700_000_000_000
CUT = StreamCut.from_mapping({0: 10})
RECORDS: list[AvroRecord] = [
    StreamTopology("s/t", (TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 1.0),)),), (), TopologyState.ACTIVE, NOW),
    StreamConfig("s/t", RetentionPolicy(RetentionType.CONSUMPTION), NOW),
    SubscriberChange("s/t", "billing", 1, SubscriberChangeType.ADD, NOW),
    SubscriberCut("s/t", "billing", 1, CUT, NOW),
    StreamCutRecord("s/t", CUT, NOW, 10),
    TruncationEvent("s/t", CUT, TruncationReason.MANUAL, NOW, RetentionPolicy(RetentionType.NONE)),
]


def test_an_incarnation_is_128_random_bits_in_hex() -> None:
    made = {new_incarnation() for _ in range(100)}
    assert len(made) == 100 and all(len(i) == 32 and int(i, 16) >= 0 for i in made)


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_every_record_about_a_stream_carries_its_incarnation(record: AvroRecord) -> None:
    incarnation = new_incarnation()
    stamped = dataclasses.replace(record, incarnation=incarnation)  # type: ignore[type-var]
    assert build_codec().decode(build_codec().encode(stamped, "t"), "t") == stamped


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_a_record_written_before_incarnations_decodes_with_none(record: AvroRecord) -> None:
    name = type(record).SCHEMA.name
    earlier = RecordSchema.from_json((PREVIOUS_DIR / f"{name}.1.avsc").read_text())
    assert "incarnation" not in [field["name"] for field in earlier.to_dict()["fields"]]
    old_writer = SingleObjectCodec(SchemaCatalog(overrides={type(record): earlier}))
    data = old_writer.encode(record, "t")
    assert data[2:10] == earlier.fingerprint != type(record).SCHEMA.fingerprint
    decoded = build_codec().decode(data, "t")
    assert decoded == record and decoded.incarnation is None  # type: ignore[attr-defined]
