"""What an offload policy makes due (Pulsar's byte and age thresholds), how rendezvous hashing shares streams
among the offloader's processes, and the policy's own checks. Pure logic: no store, no binding."""

from __future__ import annotations

import pytest

from reclaim.segments.offload_policy import HotChunk, due, owner_of
from reclaim.storage.metadata import OffloadPolicy

NOW = 1_000_000.0


def chunks(*specs: tuple[str, int, float, bool]) -> list[HotChunk]:
    return [HotChunk(name, length, NOW - age, sealed) for name, length, age, sealed in specs]


# oldest first: a, b, c sealed, d the growing tail
STREAM = chunks(("a", 100, 400, True), ("b", 100, 300, True), ("c", 100, 200, True), ("d", 50, 0, False))


def test_bytes_walked_from_the_newest_make_a_chunk_and_every_older_one_due() -> None:
    policy = OffloadPolicy("s/t", "s3-tier2", after_bytes=200)
    # from the newest: d 50, c 150, b 250 > 200: b and a are due, oldest first
    assert due(policy, STREAM, NOW) == ["a", "b"]
    assert due(OffloadPolicy("s/t", "s3-tier2", after_bytes=250), STREAM, NOW) == ["a"]
    assert due(OffloadPolicy("s/t", "s3-tier2", after_bytes=350), STREAM, NOW) == []


def test_zero_bytes_offloads_every_sealed_chunk_and_never_the_growing_tail() -> None:
    assert due(OffloadPolicy("s/t", "s3-tier2", after_bytes=0), STREAM, NOW) == ["a", "b", "c"]


def test_age_counts_from_the_last_write_and_either_threshold_suffices() -> None:
    assert due(OffloadPolicy("s/t", "s3-tier2", after_s=300), STREAM, NOW) == ["a", "b"]
    assert due(OffloadPolicy("s/t", "s3-tier2", after_s=1000), STREAM, NOW) == []
    both = OffloadPolicy("s/t", "s3-tier2", after_bytes=250, after_s=250)
    assert due(both, STREAM, NOW) == ["a", "b"]  # a by size and age, b by age


def test_chunks_of_several_segments_are_ordered_by_when_they_were_written() -> None:
    mixed = chunks(("s1/x", 100, 10, True), ("s0/y", 100, 500, True), ("s2/z", 100, 50, True))
    assert due(OffloadPolicy("s/t", "b", after_bytes=150), mixed, NOW) == ["s0/y", "s2/z"]


def test_a_policy_refuses_no_threshold_and_negative_or_endless_values() -> None:
    with pytest.raises(ValueError, match="threshold"):
        OffloadPolicy("s/t", "s3-tier2")
    with pytest.raises(ValueError, match="after_bytes"):
        OffloadPolicy("s/t", "s3-tier2", after_bytes=-1)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="after_s"):
            OffloadPolicy("s/t", "s3-tier2", after_s=bad)
        with pytest.raises(ValueError, match="release_after_s"):
            OffloadPolicy("s/t", "s3-tier2", after_s=1, release_after_s=bad)
    assert "10 hot bytes or 5 s old" in OffloadPolicy("s/t", "b", after_bytes=10, after_s=5).describe()


def test_rendezvous_hashing_shares_streams_evenly_and_a_joiner_moves_only_its_share() -> None:
    streams = [f"scope/s{i}" for i in range(600)]
    three = ["h1:1:a", "h2:1:b", "h3:1:c"]
    before = {stream: owner_of(stream, three) for stream in streams}
    shares = [sum(1 for owner in before.values() if owner == member) for member in three]
    assert min(shares) > 150  # 200 each on average
    after = {stream: owner_of(stream, [*three, "h4:1:d"]) for stream in streams}
    moved = [stream for stream in streams if after[stream] != before[stream]]
    assert all(after[stream] == "h4:1:d" for stream in moved)  # only to the joiner
    assert 100 < len(moved) < 200  # about a quarter
    gone = {stream: owner_of(stream, three[:2]) for stream in streams}
    assert all(gone[s] == before[s] for s in streams if before[s] != "h3:1:c")  # a death moves only its own
