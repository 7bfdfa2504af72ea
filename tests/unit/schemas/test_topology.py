"""StreamTopology and RetentionReject: what they accept, what they refuse, and how they decode."""

from __future__ import annotations

import dataclasses
import doctest
import math
from typing import Any

import pytest

import reclaim.schemas.topology
from reclaim.schemas import (
    DecodeReason,
    RecordDecodeError,
    RecordEncodeError,
    RejectKind,
    RetentionReject,
    SealedSegment,
    StreamTopology,
    TopologyEpoch,
    TopologySegment,
    TopologyState,
    build_codec,
)
from reclaim.schemas.avro_schema import RecordSchema
from reclaim.schemas.catalog import PREVIOUS_DIR, SchemaCatalog
from reclaim.schemas.codec import SingleObjectCodec
from reclaim.schemas.samples import NOW, TOPOLOGY, sample_records

HALVES = (TopologySegment(0, 0.0, 0.5), TopologySegment(1, 0.5, 1.0))


def topology(**changes: Any) -> StreamTopology:
    return dataclasses.replace(TOPOLOGY, **changes)


def test_the_sample_topology_round_trips_through_the_codec_with_its_first_field_the_stream() -> None:
    codec = build_codec()
    assert codec.decode(codec.encode(TOPOLOGY, "t"), "t", StreamTopology) == TOPOLOGY
    assert StreamTopology.SCHEMA.to_dict()["fields"][0]["name"] == "stream"
    assert RetentionReject.SCHEMA.to_dict()["fields"][0]["name"] == "stream"


def test_segments_and_sealed_lengths_are_kept_sorted_so_equal_topologies_compare_equal() -> None:
    shuffled = StreamTopology("s/t", (TopologyEpoch(0, 0, HALVES[::-1]),),
                              (SealedSegment(1, 5), SealedSegment(0, 9)), TopologyState.SEALED, NOW)
    assert shuffled.epochs[0].segments == HALVES
    assert [s.segment_id for s in shuffled.sealed_lengths] == [0, 1]
    assert shuffled.sealed_length_map() == {0: 9, 1: 5}
    assert shuffled == StreamTopology("s/t", (TopologyEpoch(0, 0, HALVES),),
                                      (SealedSegment(0, 9), SealedSegment(1, 5)), TopologyState.SEALED, NOW)
    assert shuffled.active_epoch.epoch == 0


def test_integer_key_bounds_are_stored_as_floats() -> None:
    segment = TopologySegment(0, 0, 1)
    assert (segment.key_start, segment.key_end) == (0.0, 1.0)
    assert isinstance(segment.key_start, float) and segment == TopologySegment(0, 0.0, 1.0)


@pytest.mark.parametrize(
    ("start", "end"),
    [(0.5, 0.5), (0.6, 0.5), (-0.1, 0.5), (0.5, 1.5), (1.0, 1.0), (math.nan, 1.0), (0.0, math.nan)],
)
def test_a_key_range_must_be_non_empty_and_inside_the_key_space(start: float, end: float) -> None:
    with pytest.raises(ValueError, match="key range"):
        TopologySegment(3, start, end)


@pytest.mark.parametrize(
    ("segments", "words"),
    [
        ((), "has no segments"),
        ((TopologySegment(0, 0.0, 0.5),), "end at 0.5, not at 1"),
        ((TopologySegment(0, 0.25, 1.0),), "do not tile .* at 0.0"),
        ((TopologySegment(0, 0.0, 0.5), TopologySegment(1, 0.6, 1.0)), "do not tile .* at 0.5"),
        ((TopologySegment(0, 0.0, 0.6), TopologySegment(1, 0.5, 1.0)), "do not tile .* at 0.6"),
        ((TopologySegment(0, 0.0, 0.5), TopologySegment(0, 0.5, 1.0)), "names a segment twice"),
    ],
)
def test_an_epochs_segments_must_exactly_tile_the_key_space(segments: tuple[TopologySegment, ...],
                                                             words: str) -> None:
    with pytest.raises(ValueError, match=words):
        TopologyEpoch(0, 0, segments)


@pytest.mark.parametrize(("epoch", "reference"), [(0, 1), (2, 3), (1, -1)])
def test_a_reference_epoch_is_the_epoch_itself_or_an_earlier_one(epoch: int, reference: int) -> None:
    with pytest.raises(ValueError, match="reference"):
        TopologyEpoch(epoch, reference, HALVES)


@pytest.mark.parametrize("numbers", [[1], [0, 2], [1, 0], [0, 0]])
def test_epochs_run_from_zero_without_gaps(numbers: list[int]) -> None:
    with pytest.raises(ValueError, match="0..n without gaps"):
        topology(epochs=tuple(TopologyEpoch(n, 0, HALVES) for n in numbers), sealed_lengths=())


@pytest.mark.parametrize("state", [TopologyState.ACTIVE, TopologyState.SEALED])
def test_only_a_deleted_stream_may_have_no_epochs(state: TopologyState) -> None:
    with pytest.raises(ValueError, match="at least one epoch"):
        topology(epochs=(), sealed_lengths=(), state=state)
    assert topology(epochs=(), sealed_lengths=(), state=TopologyState.DELETED).epochs == ()


def test_sealed_lengths_name_known_segments_once_with_a_non_negative_length() -> None:
    with pytest.raises(ValueError, match="in no epoch"):
        topology(sealed_lengths=(SealedSegment(99, 1),))
    with pytest.raises(ValueError, match="named twice"):
        topology(sealed_lengths=(SealedSegment(1, 1), SealedSegment(1, 2)))
    with pytest.raises(ValueError, match="must not be negative"):
        SealedSegment(1, -1)
    with pytest.raises(ValueError, match="in no epoch"):
        topology(epochs=(), sealed_lengths=(SealedSegment(1, 1),), state=TopologyState.DELETED)


def test_a_bad_topology_on_the_wire_is_the_typed_invalid_record_error() -> None:
    datum = TOPOLOGY.to_avro()
    datum["epochs"][1]["segments"][1]["key_end"] = 0.9  # overlaps the next segment, which starts at 0.75
    with pytest.raises(RecordDecodeError) as caught:
        StreamTopology.from_avro(datum)
    assert caught.value.reason is DecodeReason.INVALID_RECORD
    assert "reclaim.TopologyEpoch: epoch 1: segments do not tile [0, 1) at 0.9" in str(caught.value)


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("state",), "MERGED", "not a TopologyState symbol"),
        (("published_at",), -1, "epoch millis"),
        (("epochs", 0, "segments", 0, "key_start"), "0", "must be a number"),
        (("epochs", 0, "segments", 0, "key_start"), True, "must be a number"),
        (("sealed_lengths", 0, "length"), 2**63, "does not fit a long"),
    ],
)
def test_from_avro_names_the_bad_field(path: tuple[Any, ...], value: object, words: str) -> None:
    datum = TOPOLOGY.to_avro()
    target = datum
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    with pytest.raises(RecordDecodeError, match=words):
        StreamTopology.from_avro(datum)


def test_reject_keeps_an_unknown_stream_as_empty_and_a_null_subscriber() -> None:
    reject = sample_records()["retention_reject_unknown_stream"]
    assert isinstance(reject, RetentionReject)
    codec = build_codec()
    decoded = codec.decode(codec.encode(reject, "t"), "t", RetentionReject)
    assert (decoded.stream, decoded.subscriber, decoded.kind) == ("", None, RejectKind.UNDECODABLE)


@pytest.mark.parametrize("partition", [2**31, -(2**31) - 1])
def test_reject_partition_must_fit_an_avro_int(partition: int) -> None:
    with pytest.raises(ValueError, match="source_partition"):
        RetentionReject("s/t", None, RejectKind.INVALID_CUT, "r", "topic", partition, 0, NOW)
    datum = sample_records()["retention_reject"].to_avro()
    datum["source_partition"] = partition
    with pytest.raises(RecordDecodeError, match="source_partition"):
        RetentionReject.from_avro(datum)


def test_reject_partition_is_an_avro_int_on_the_wire() -> None:
    [field] = [f for f in RetentionReject.SCHEMA.to_dict()["fields"] if f["name"] == "source_partition"]
    assert field["type"] == "int"
    reject = RetentionReject("s/t", "g", RejectKind.INVALID_POLICY, "r", "topic", -1, 7, NOW)
    assert build_codec().decode(build_codec().encode(reject, "t"), "t") == reject


def test_a_topology_that_skips_validation_still_cannot_be_encoded_with_a_bad_type() -> None:
    bad = object.__new__(SealedSegment)
    object.__setattr__(bad, "segment_id", 1)
    object.__setattr__(bad, "length", "long")
    with pytest.raises(RecordEncodeError, match="reclaim.SealedSegment"):
        build_codec().encode(bad, "t")


def test_docstring_examples_hold() -> None:
    failures, _ = doctest.testmod(reclaim.schemas.topology)
    assert failures == 0


@pytest.mark.parametrize(("version", "added"), [
    (1, ["UNAUTHENTICATED", "UNKNOWN_STREAM", "GENERATION_AHEAD", "WRONG_INCARNATION"]),
    (2, ["UNKNOWN_STREAM", "GENERATION_AHEAD", "WRONG_INCARNATION"]),
    (3, ["WRONG_INCARNATION"]),
])
def test_rejects_written_before_newer_kinds_still_decode_and_new_kinds_come_last(version: int,
                                                                                 added: list[str]) -> None:
    earlier = RecordSchema.from_json((PREVIOUS_DIR / f"reclaim.RetentionReject.{version}.avsc").read_text())
    earlier_kinds = earlier.to_dict()["fields"][2]["type"]["symbols"]
    kinds = RetentionReject.SCHEMA.to_dict()["fields"][2]["type"]["symbols"]
    assert kinds == [*earlier_kinds, *added] == list(RejectKind.__members__)
    reject = RetentionReject("s/t", "g", RejectKind.CUT_BEHIND, "r", "topic", 0, 7, NOW)
    old_writer = SingleObjectCodec(SchemaCatalog(overrides={RetentionReject: earlier}))
    data = old_writer.encode(reject, "t")
    assert data[2:10] == earlier.fingerprint != RetentionReject.SCHEMA.fingerprint
    assert build_codec().decode(data, "t", RetentionReject) == reject
    for kind in added:
        new = dataclasses.replace(reject, kind=RejectKind[kind], reason="why")
        assert build_codec().decode(build_codec().encode(new, "t"), "t") == new
