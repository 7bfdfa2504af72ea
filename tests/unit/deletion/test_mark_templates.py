"""A mark's records written from templates of their shapes: the codec's own bytes, record for record."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reclaim.deletion.records import mark_records, pending_deletes_for
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.codec import RecordCodec, SingleObjectCodec
from reclaim.schemas.confluent import ConfluentCodec
from reclaim.storage.chunks import ChunkLocation, ChunkTags, Tier
from reclaim.storage.metadata import ChunkRecord

TOPIC = "reclaim.ledger-deletion"
CREATED = 1_700_000_000_123

#: Name parts: plain, multi-byte UTF-8, and long enough for a two-byte length.
_PARTS = st.sampled_from(["a", "ü", "€", "chunk", "x" * 70, "日本"])
_NAMES = st.lists(_PARTS, min_size=1, max_size=4).map("".join)


def _locations(name: str, shape: int) -> tuple[ChunkLocation, ...]:
    s3 = ChunkLocation("s3-tier2", Tier.TIER2, "bucket", f"prefix/{name}")
    fs2 = ChunkLocation("fs-tier2", Tier.TIER2, None, name)
    hot = ChunkLocation("fs-tier1", Tier.TIER1, None, f"hot/{name}")
    return [(s3,), (fs2,), (hot, s3), (hot,)][shape]


@st.composite
def _chunks(draw: st.DrawFn) -> list[ChunkRecord]:
    """Chunks of a few segments (their copies interleaved or not), each in one of four copy layouts."""
    segments = draw(st.lists(st.tuples(_NAMES, st.sampled_from(["segment", "cursor", "schema"]),
                                       st.sampled_from([0, 1, 2**40, 2**62])), min_size=1, max_size=3))
    chunks = []
    for i, (segment_name, shape) in enumerate(draw(st.lists(
            st.tuples(st.integers(0, len(segments) - 1), st.integers(0, 3)), min_size=1, max_size=12))):
        suffix, component, epoch = segments[segment_name]
        segment = f"scope/stream-{suffix}/{segment_name}.#epoch.0"
        tags = ChunkTags(component=component, stream=f"scope/stream-{suffix}", segment=segment, writer_epoch=epoch)
        name = f"{segment}.E-1-O-{i}.{draw(_NAMES)}"
        chunks.append(ChunkRecord(name=name, segment=segment, start_offset=i, length=1, tags=tags,
                                  locations=_locations(name, shape), active=False))
    return chunks


def _codecs() -> list[RecordCodec]:
    return [SingleObjectCodec(), ConfluentCodec(SchemaRegistryClient.new_client({"url": "mock://templates"}))]


@pytest.mark.parametrize("codec", _codecs(), ids=["single-object", "confluent"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chunks=_chunks(), mark=st.sampled_from(["mark-0001", "ü-mark", "m" * 90]))
def test_the_templates_write_the_codecs_bytes(codec: RecordCodec, chunks: list[ChunkRecord], mark: str) -> None:
    built = pending_deletes_for(chunks, mark, CREATED)
    assert mark_records(chunks, mark, CREATED).encoded(codec, TOPIC) == codec.encode_all(built, TOPIC)


def test_the_records_read_back_as_phase_1_builds_them() -> None:
    tags = ChunkTags(component="segment", stream="s/t", segment="s/t/0.#epoch.0", writer_epoch=1)
    chunks = [ChunkRecord(name=f"s/t/0.#epoch.0.E-1-O-{i}", segment="s/t/0.#epoch.0", start_offset=i, length=1,
                          tags=tags, locations=_locations(f"s/t/0.#epoch.0.E-1-O-{i}", i % 4)) for i in range(6)]
    built = pending_deletes_for(chunks, "mark", CREATED)
    records = mark_records(chunks, "mark", CREATED)
    assert len(records) == len(built) == 7
    assert list(records) == built and records[3] == built[3] and records[-1] == built[-1] and records[2:5] == built[2:5]
    assert records.chunk_names() == [r.chunk_name for r in built]
    assert records.ledger_types() == [r.ledger_type for r in built]
    assert not mark_records([], "mark", CREATED)


class Numbering:
    """A codec whose bytes no template can write: each record's carries how many it has encoded before."""

    def __init__(self) -> None:
        self.inner = SingleObjectCodec()
        self.count = 0

    def encode_all(self, records: Sequence[AvroRecord], topic: str) -> list[bytes]:
        values = []
        for value in self.inner.encode_all(records, topic):
            values.append(value + self.count.to_bytes(4, "big"))
            self.count += 1
        return values


def test_a_codec_whose_bytes_no_template_writes_encodes_every_record_itself() -> None:
    tags = ChunkTags(component="segment", stream="s/t", segment="s/t/0.#epoch.0", writer_epoch=1)
    chunks = [ChunkRecord(name=f"s/t/0.#epoch.0.E-1-O-{i}", segment="s/t/0.#epoch.0", start_offset=i, length=1,
                          tags=tags, locations=_locations(f"s/t/0.#epoch.0.E-1-O-{i}", 0)) for i in range(5)]
    codec = Numbering()
    values = mark_records(chunks, "mark", CREATED).encoded(codec, TOPIC)  # type: ignore[arg-type]
    expected = SingleObjectCodec().encode_all(pending_deletes_for(chunks, "mark", CREATED))
    assert [value[:-4] for value in values] == expected
    # The probe and the first record went through it, then every record again, each on its own.
    assert [int.from_bytes(value[-4:], "big") for value in values] == [2, 3, 4, 5, 6]


class Counting:
    """The single-object codec, counting the records it encodes."""

    def __init__(self) -> None:
        self.inner = SingleObjectCodec()
        self.encoded = 0

    def encode_all(self, records: Sequence[AvroRecord], topic: str) -> list[bytes]:
        self.encoded += len(records)
        return self.inner.encode_all(records, topic)


@pytest.mark.parametrize("layout", range(4))
def test_the_codec_encodes_two_records_a_shape_not_one_a_copy(layout: int) -> None:
    tags = ChunkTags(component="segment", stream="s/t", segment="s/t/0.#epoch.0", writer_epoch=1)
    chunks = [ChunkRecord(name=f"s/t/0.#epoch.0.E-1-O-{i}", segment="s/t/0.#epoch.0", start_offset=i, length=1,
                          tags=tags, locations=_locations(f"s/t/0.#epoch.0.E-1-O-{i}", layout)) for i in range(50)]
    codec = Counting()
    values = mark_records(chunks, "mark", CREATED).encoded(codec, TOPIC)  # type: ignore[arg-type]
    assert values == SingleObjectCodec().encode_all(pending_deletes_for(chunks, "mark", CREATED))
    copies_a_chunk = len(chunks[0].locations)
    assert codec.encoded == 2 * copies_a_chunk  # per shape (a binding's copies): its probe and its first record
