"""The retention benchmark's inputs as plain values: streams set up for consumption retention, and their cuts."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from reclaim.producers.subscribers import subscriber_key
from reclaim.retention.spark_io import RetentionTopics, StreamRecord
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamConfig, StreamCut, StreamCutRecord
from reclaim.schemas.subscribers import SubscriberChange, SubscriberChangeType, SubscriberCut
from reclaim.schemas.topology import StreamTopology, TopologyEpoch, TopologySegment, TopologyState

CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION)
"""Truncate at the subscribers' lower bound; no limit type means TIME rules with min 0 and no max."""

HALVES = TopologyEpoch(0, 0, (TopologySegment(0, 0.0, 0.5), TopologySegment(1, 0.5, 1.0)))
TAIL = 1000
"""Both segments' offset at the recorded cut; every subscriber cut stays before it."""

RECORDED_AGE_MS = 60_000
ROUND_STEP = 20
"""How far a latency round moves every subscriber's cut, in bytes per segment."""

CutOf = Callable[[int, int], StreamCut]
"""A subscriber's cut from its index and the number of subscribers."""


@dataclass(frozen=True)
class Input:
    """One record for one input topic, with its key."""

    topic: str
    key: str
    record: StreamRecord


def stream_name(index: int) -> str:
    return f"bench/stream-{index:05d}"


def subscriber_name(index: int) -> str:
    return f"reader-{index:02d}"


def cut_at(first: int, second: int) -> StreamCut:
    """A cut of the two-segment stream: ``first`` bytes into segment 0, ``second`` into segment 1."""
    return StreamCut.from_mapping({0: first, 1: second})


def spread_cut(index: int, subscribers: int) -> StreamCut:
    """Subscriber 0 is the slowest on segment 0, the last one on segment 1: the bound is (100, 200)."""
    return cut_at(100 + index, 200 + subscribers - 1 - index)


def laggard_cut(index: int, subscribers: int, round_: int = 0) -> StreamCut:
    """The last subscriber is the slowest on both segments, so its cut alone moves the bound of a round."""
    ahead = subscribers - 1 - index
    if not 0 <= ahead < ROUND_STEP:
        raise ValueError(f"laggard cuts need 1 to {ROUND_STEP} subscribers, got {subscribers}")
    first, second = 100 + ROUND_STEP * round_ + ahead, 200 + ROUND_STEP * round_ + ahead
    if second >= TAIL:
        raise ValueError(f"round {round_} passes the recorded cut at {TAIL}")
    return cut_at(first, second)


def common_cut(cuts: Iterable[StreamCut]) -> StreamCut:
    """The subscribers' lower bound of cuts over the same segments: per segment the smallest offset."""
    lowest: dict[int, int] = {}
    for cut in cuts:
        for segment, offset in cut.as_dict().items():
            lowest[segment] = min(offset, lowest.get(segment, offset))
    return StreamCut.from_mapping(lowest)


def stream_setup(topics: RetentionTopics, stream: str, subscribers: int, cut_of: CutOf, now_ms: int) -> list[Input]:
    """A stream's records in apply order: topology, config, subscribers added, their cuts, one recorded cut."""
    names = [subscriber_name(i) for i in range(subscribers)]
    return [
        Input(topics.stream_topology, stream,
              StreamTopology(stream, (HALVES,), (), TopologyState.ACTIVE, now_ms)),
        Input(topics.stream_config, stream, StreamConfig(stream, CONSUMPTION, now_ms)),
        *(Input(topics.subscribers, subscriber_key(stream, name),
                SubscriberChange(stream, name, 1, SubscriberChangeType.ADD, now_ms)) for name in names),
        *(subscriber_cut(topics, stream, i, cut_of(i, subscribers), now_ms) for i in range(subscribers)),
        Input(topics.stream_cuts, stream,
              StreamCutRecord(stream, cut_at(TAIL, TAIL), now_ms - RECORDED_AGE_MS, 2 * TAIL)),
    ]


def subscriber_cut(topics: RetentionTopics, stream: str, index: int, cut: StreamCut, now_ms: int) -> Input:
    """Subscriber ``index`` (generation 1) has consumed ``stream`` up to ``cut``."""
    name = subscriber_name(index)
    return Input(topics.subscriber_cuts, subscriber_key(stream, name), SubscriberCut(stream, name, 1, cut, now_ms))
