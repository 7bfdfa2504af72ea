"""State buckets: a stable stream-to-bucket mapping and a lossless, strict byte form."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reclaim.retention.buckets import BucketEntry, bucket_of, decode_bucket, encode_bucket

entries = st.dictionaries(st.text(min_size=1, max_size=40),
                          st.builds(BucketEntry, st.one_of(st.none(), st.integers(0, 2**62)), st.binary(max_size=200)),
                          max_size=20)


@given(entries)
def test_a_bucket_round_trips(found: dict[str, BucketEntry]) -> None:
    assert decode_bucket(encode_bucket(found)) == found


def test_bucket_of_is_stable_and_in_range() -> None:
    assert bucket_of("scope/orders", 64) == bucket_of("scope/orders", 64) == 3295363741 % 64
    assert {bucket_of(f"scope/s{i}", 8) for i in range(200)} == set(range(8))


@pytest.mark.parametrize("blob", [b"", b"XXXX\x00\x00\x00\x00", encode_bucket({"a": BucketEntry(1, b"xyz")})[:-1],
                                  encode_bucket({"a": BucketEntry(1, b"xyz")}) + b"!"])
def test_a_damaged_bucket_is_refused(blob: bytes) -> None:
    with pytest.raises((ValueError, struct.error)):
        decode_bucket(blob)
