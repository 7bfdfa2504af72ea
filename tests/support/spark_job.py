"""Records and policies for the retention job tests: cuts, topologies, subscriptions and stream configs."""

from __future__ import annotations

from collections.abc import Sequence

from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_io import RetentionTopics, StreamRecord
from reclaim.schemas import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamConfig,
    StreamCut,
    StreamCutRecord,
    SubscriberChange,
    SubscriberChangeType,
    SubscriberCut,
    build_codec,
    millis_now,
)
from reclaim.schemas.topology import StreamTopology, TopologyEpoch, TopologySegment, TopologyState
from reclaim.security.signing import RecordSigner
from tests.support.kafka_io import Outgoing, produce_confirmed

STREAM = "scope/orders"


MINUTE_MS = 60_000


CONSUMPTION = RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME)


def at(first: int, second: int) -> StreamCut:
    """A cut of the two-segment stream: ``first`` bytes into segment 0, ``second`` into segment 1."""
    return StreamCut.from_mapping({0: first, 1: second})


def config(policy: RetentionPolicy, stream: str = STREAM) -> StreamConfig:
    return StreamConfig(stream, policy, millis_now())


def subscribe(subscriber: str, generation: int = 1, stream: str = STREAM) -> SubscriberChange:
    return SubscriberChange(stream, subscriber, generation, SubscriberChangeType.ADD, millis_now())


def unsubscribe(subscriber: str, generation: int, stream: str = STREAM) -> SubscriberChange:
    return SubscriberChange(stream, subscriber, generation, SubscriberChangeType.REMOVE, millis_now())


def consumed(subscriber: str, cut: StreamCut, generation: int = 1, stream: str = STREAM) -> SubscriberCut:
    return SubscriberCut(stream, subscriber, generation, cut, millis_now())


def recorded(cut: StreamCut, age_ms: int = MINUTE_MS, stream: str = STREAM, now_ms: int | None = None
             ) -> StreamCutRecord:
    """An entry recorded ``age_ms`` before ``now_ms`` (default: now); its size is the bytes before the cut."""
    return StreamCutRecord(stream, cut, (millis_now() if now_ms is None else now_ms) - age_ms,
                           sum(cut.as_dict().values()))


def produce_records(bootstrap: str, names: TopicNames, records: Sequence[StreamRecord],
                    signers: Sequence[RecordSigner | None] = ()) -> None:
    """Each record on its input topic, keyed by its stream (signed by its signer, if any), every one confirmed."""
    codec = build_codec()
    topic_of = {kind: topic for topic, kind in RetentionTopics.from_names(names).input_types().items()}
    messages = []
    for record, signer in zip(records, [*signers, *[None] * (len(records) - len(signers))], strict=True):
        topic = topic_of[type(record)]
        value, key = codec.encode(record, topic), record.stream.encode()
        messages.append(Outgoing(topic, value, key, () if signer is None else signer.headers(topic, key, value)))
    produce_confirmed(bootstrap, messages)


def stream_with(policy: RetentionPolicy, *subscribers: str, stream: str = STREAM) -> list[StreamRecord]:
    """The records that set a stream up: its topology, its policy and its subscribers (generation 1)."""
    return [topology(stream), config(policy, stream), *(subscribe(name, stream=stream) for name in subscribers)]


def topology(stream: str = STREAM) -> StreamTopology:
    """One epoch of two segments splitting the key space in halves."""
    halves = (TopologySegment(0, 0.0, 0.5), TopologySegment(1, 0.5, 1.0))
    return StreamTopology(stream, (TopologyEpoch(0, 0, halves),), (), TopologyState.ACTIVE, millis_now())
