"""Decoding ``__consumer_offsets`` records as Kafka writes them (its OffsetCommitKey/Value and GroupMetadataKey
schemas), and the topic poller's check that the Admin API has caught up with a commit it read there."""

from __future__ import annotations

import struct

import pytest

from reclaim.retention.topic_decision import PartitionView
from reclaim.services.topic_poller import PollReport, _behind
from reclaim.tools.group_commits import Commit, CommitWatch, decode_commit
from reclaim.tools.topic_retention import TopicView


def string(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">h", len(data)) + data


def commit_key(version: int, group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", version) + string(group) + string(topic) + struct.pack(">i", partition)


def commit_value(version: int, offset: int) -> bytes:
    """OffsetCommitValue: v0 (offset, metadata, timestamp), v1 (+ expire timestamp), v2, v3 (+ leader epoch
    after the offset), v4 (flexible: tagged fields at the end)."""
    epoch = struct.pack(">i", 7) if version >= 3 else b""
    tail = struct.pack(">q", 1_700_000_000_000) * (2 if version == 1 else 1)
    tagged = b"\x00" if version >= 4 else b""
    return struct.pack(">hq", version, offset) + epoch + string("meta") + tail + tagged


@pytest.mark.parametrize("key_version", [0, 1])
@pytest.mark.parametrize("value_version", [0, 1, 2, 3, 4])
def test_an_offset_commit_of_every_version_is_read(key_version: int, value_version: int) -> None:
    key = commit_key(key_version, "etl", "orders", 3)
    assert decode_commit(key, commit_value(value_version, 4242)) == Commit("etl", "orders", 3, 4242)


def test_a_tombstone_is_a_deleted_commit() -> None:
    assert decode_commit(commit_key(1, "etl", "orders", 0), None) == Commit("etl", "orders", 0, None)


@pytest.mark.parametrize("key", [
    struct.pack(">h", 2) + string("etl"),  # GroupMetadataKey
    struct.pack(">h", 3) + string("etl"),  # KIP-848's ConsumerGroupMetadataKey and later
    None, b"", b"\x00",
    commit_key(1, "etl", "orders", 0)[:-2],  # cut short in its partition
    struct.pack(">h", 1) + struct.pack(">h", 40) + b"etl",  # a string longer than the record
])
def test_anything_else_is_no_commit(key: bytes | None) -> None:
    assert decode_commit(key, commit_value(3, 1)) is None


def test_a_value_too_short_to_hold_an_offset_is_no_commit() -> None:
    assert decode_commit(commit_key(1, "etl", "orders", 0), b"\x00\x03\x00") is None


def view(committed: dict[int, dict[str, int | None]], required: tuple[str, ...] = ("fast", "slow")) -> TopicView:
    return TopicView("orders", "id", 0, tuple(PartitionView(p, 0, 100, c) for p, c in committed.items()), required)


def test_an_observation_that_shows_the_commits_leaves_nothing_behind() -> None:
    report = PollReport(seen={"orders": view({0: {"fast": 10, "slow": 5}, 1: {"fast": 9, "slow": None}})})
    assert _behind({"orders": {("fast", 0): 10, ("slow", 1): None}}, report) == {}


def test_an_observation_older_than_a_commit_is_behind_it() -> None:
    report = PollReport(seen={"orders": view({0: {"fast": 8, "slow": 5}})})
    moves = {"orders": {("fast", 0): 10, ("slow", 0): 5}}
    assert _behind(moves, report) == {"orders": {("fast", 0): 10}}


def test_groups_not_required_and_topics_not_observed_are_not_waited_for() -> None:
    report = PollReport(seen={"orders": view({0: {"fast": 8, "slow": 5}})})
    moves = {"orders": {("other", 0): 10, ("fast", 7): 3}, "gone": {("fast", 0): 1}}
    assert _behind(moves, report) == {}


def test_a_watch_whose_brokers_do_not_answer_is_not_following_and_says_why() -> None:
    watch = CommitWatch("127.0.0.1:1", "reclaim-topic-poller", lambda topic: True)  # a closed port: no broker there
    try:
        assert not watch.start(timeout_s=1.0)
        assert not watch.following and watch.refused is not None
        assert watch.refused.startswith("__consumer_offsets not readable: ")
        assert watch.moves(0.1) == {}
    finally:
        watch.close()
