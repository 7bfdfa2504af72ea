"""State buckets: a stable stream-to-bucket mapping and a lossless, strict byte form."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.retention.buckets import BucketEntry, bucket_of, decode_bucket, encode_bucket
from reclaim.schemas.base import LONG_MAX, LONG_MIN

longs = st.integers(LONG_MIN, LONG_MAX)
entries = st.dictionaries(st.text(min_size=1, max_size=40),
                          st.builds(BucketEntry, st.none() | longs | st.sampled_from([LONG_MIN, -1, 0, LONG_MAX]),
                                    st.binary(max_size=200)),
                          max_size=20)


@given(entries)
def test_a_bucket_round_trips_every_long_and_none_apart(found: dict[str, BucketEntry]) -> None:
    assert decode_bucket(encode_bucket(found)) == found


def test_a_stream_name_longer_than_16_bits_of_bytes_round_trips() -> None:
    found = {"s/" + "x" * 70_000: BucketEntry(None, b"{}")}
    assert decode_bucket(encode_bucket(found)) == found


@pytest.mark.parametrize("change", [LONG_MAX + 1, LONG_MIN - 1])
def test_a_next_change_beyond_a_long_is_a_value_error_not_a_struct_error(change: int) -> None:
    with pytest.raises(ValueError, match="does not fit a long"):
        encode_bucket({"s/a": BucketEntry(change, b"")})


def test_a_bucket_written_before_rcb2_is_still_read() -> None:
    # RCB1: per stream a 16-bit name length, the next change (-1: none) and the state's length.
    rcb1 = (struct.pack(">4sI", b"RCB1", 2) + struct.pack(">HqI", 3, -1, 2) + b"s/a{}"
            + struct.pack(">HqI", 3, 1234, 1) + b"s/bx")
    assert decode_bucket(rcb1) == {"s/a": BucketEntry(None, b"{}"), "s/b": BucketEntry(1234, b"x")}


def test_bucket_of_is_stable_and_in_range() -> None:
    assert bucket_of("scope/orders", 64) == bucket_of("scope/orders", 64) == 3295363741 % 64
    assert {bucket_of(f"scope/s{i}", 8) for i in range(200)} == set(range(8))


def _flag_set_to(value: int, change: int | None) -> bytes:
    """A one-entry bucket whose has-next-change byte (after the header and the name length) is ``value``."""
    blob = bytearray(encode_bucket({"a": BucketEntry(change, b"xyz")}))
    blob[12] = value
    return bytes(blob)


@pytest.mark.parametrize("blob", [b"", b"XXXX\x00\x00\x00\x00", encode_bucket({"a": BucketEntry(1, b"xyz")})[:-1],
                                  encode_bucket({"a": BucketEntry(1, b"xyz")}) + b"!",
                                  _flag_set_to(2, 1), _flag_set_to(0, 5)])
def test_a_damaged_bucket_is_refused(blob: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        decode_bucket(blob)
