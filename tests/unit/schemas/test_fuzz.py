"""Property tests: any bytes either decode to a valid record or raise RecordDecodeError, nothing else."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reclaim.schemas import RECORD_TYPES, AvroRecord, RecordDecodeError, SingleObjectCodec
from reclaim.schemas.samples import sample_records
from tests.support.strategies import mutated, records

CODEC = SingleObjectCodec()
TOPIC = "reclaim.fuzz"
HEADERS = [b"\xc3\x01" + record_type.SCHEMA.fingerprint for record_type in RECORD_TYPES]
VALID = [CODEC.encode(record, TOPIC) for record in sample_records().values()]

fuzz_settings = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decodes_or_raises_typed(data: bytes) -> None:
    """The property: a valid record that re-encodes, or the one typed error."""
    try:
        record = CODEC.decode(data, TOPIC)
    except RecordDecodeError as exc:
        assert str(exc).startswith(exc.reason.value)
        assert not exc.retryable
        return
    assert isinstance(record, AvroRecord)
    assert CODEC.decode(CODEC.encode(record, TOPIC), TOPIC) == record


@fuzz_settings
@given(st.binary(max_size=300))
@example(b"")
@example(b"\xc3\x01")
def test_random_bytes_never_escape_the_typed_error(data: bytes) -> None:
    decodes_or_raises_typed(data)


@fuzz_settings
@given(st.sampled_from(HEADERS), st.binary(max_size=300))
def test_random_bodies_behind_a_known_header_never_escape(header: bytes, body: bytes) -> None:
    decodes_or_raises_typed(header + body)


def mutations() -> st.SearchStrategy[bytes]:
    """A valid encoding with bytes flipped, inserted, appended, deleted, or cut off."""
    return st.sampled_from(VALID).flatmap(mutated)


@fuzz_settings
@given(mutations())
def test_mutated_encodings_never_escape_the_typed_error(data: bytes) -> None:
    decodes_or_raises_typed(data)


@settings(max_examples=200, deadline=None)
@given(records)
def test_any_valid_record_round_trips(record: AvroRecord) -> None:
    assert CODEC.decode(CODEC.encode(record, TOPIC), TOPIC) == record
