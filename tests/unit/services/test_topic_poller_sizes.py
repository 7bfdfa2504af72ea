"""The topic poller's partition sizes (without a broker: the sizes are given by a function): bytes reckoned for the
topics under a size limit, bytes per record learned for every topic, and a failure that stops the asking for the
topics that do not need sizes."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from reclaim.exits import Unavailable
from reclaim.retention.topic_decision import PartitionView
from reclaim.schemas.topic_retention import TopicRetentionPolicy
from reclaim.services.topic_poller import TopicPoller
from reclaim.tools.topic_retention import TopicView


def policy(topic: str, max_bytes: int | None = None) -> TopicRetentionPolicy:
    return TopicRetentionPolicy(topic, "id", ("g",), 0, 1, max_bytes=max_bytes)


def view(topic: str, high: int) -> TopicView:
    return TopicView(topic, "id", 0, (PartitionView(0, 0, high, {"g": 0}),), ("g",))


class Sizes:
    """Answers 100 bytes a record up to each partition's end, or raises; records which topics it was asked."""

    def __init__(self, highs: dict[str, int], fail: bool = False) -> None:
        self.highs, self.fail = highs, fail
        self.asked: list[set[str]] = []

    def __call__(self, wanted: Mapping[str, Iterable[int]]) -> dict[tuple[str, int], int]:
        self.asked.append(set(wanted))
        if self.fail:
            raise Unavailable("reading partition sizes (DescribeLogDirs): NoBrokersAvailable")
        return {(t, p): 100 * self.highs[t] for t, partitions in wanted.items() for p in partitions}


def poller(sizes: Any) -> TopicPoller:
    return TopicPoller(None, dict, None, "cuts", sizes=sizes)  # type: ignore[arg-type]


def test_bytes_are_reckoned_for_the_limited_topics_and_learned_for_every_one() -> None:
    active = {"sized": policy("sized", 5_000), "plain": policy("plain")}
    sizes = Sizes({"sized": 10, "plain": 10})
    p = poller(sizes)
    p._sized(active, {"sized": view("sized", 10), "plain": view("plain", 10)})
    sizes.highs = {"sized": 20, "plain": 30}
    seen = p._sized(active, {"sized": view("sized", 20), "plain": view("plain", 30)})
    assert sizes.asked == [{"sized", "plain"}] * 2
    assert isinstance(seen["sized"], TopicView) and seen["sized"].partitions[0].size_bytes == 20 * 100
    assert isinstance(seen["plain"], TopicView) and seen["plain"].partitions[0].size_bytes is None  # no limit
    assert p.reckoner.per_record == {("sized", 0): 100.0, ("plain", 0): 100.0}


def test_sizes_that_fail_are_asked_next_only_where_a_limit_needs_them_and_told_once(
        caplog: pytest.LogCaptureFixture) -> None:
    active = {"sized": policy("sized", 5_000), "plain": policy("plain")}
    sizes = Sizes({}, fail=True)
    p = poller(sizes)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            seen = p._sized(active, {"sized": view("sized", 10), "plain": view("plain", 10)})
    assert sizes.asked == [{"sized", "plain"}, {"sized"}, {"sized"}]
    assert isinstance(seen["sized"], TopicView) and seen["sized"].partitions[0].size_bytes is None
    told = [r.getMessage() for r in caplog.records if "forces nothing" in r.getMessage()]
    assert told == ["--max-bytes forces nothing on sized for now: reading partition sizes (DescribeLogDirs): "
                    "NoBrokersAvailable"]


def test_a_poller_without_sizes_asks_nothing_for_topics_without_a_limit() -> None:
    p = poller(None)
    seen = {"plain": view("plain", 10)}
    assert p._sized({"plain": policy("plain")}, dict(seen)) == seen
