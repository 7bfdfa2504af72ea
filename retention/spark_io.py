"""The retention job's topics and row shapes, and the executor-side step that decodes Kafka values."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_auth import signature_columns, signed
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.codec import RecordCodec, build_codec
from reclaim.schemas.rejects import RejectKind, RetentionReject
from reclaim.schemas.streams import StreamConfig, StreamCutRecord, TruncationEvent
from reclaim.schemas.subscribers import SubscriberChange, SubscriberCut
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy, TopicTruncation
from reclaim.schemas.topology import StreamTopology
from reclaim.security.signing import RecordSigner

INPUT_COLUMNS = ("bucket", "stream", "rank", "kafka_ts", "topic", "partition", "offset", "key", "value", "key_id",
                 "signature")
"""One Kafka message as the stateful step gets it: its state bucket and stream (from its key), topic rank, origin,
key and value, and its signature headers (``reclaim.retention.spark_auth.signature_columns``)."""

OUTPUT_COLUMNS = ("topic", "key", "value", "outcome", "reject_kind", "key_id", "signature")
OUTPUT_ROWS = ("topic STRING, key BINARY, value BINARY, outcome STRING, reject_kind STRING, key_id BINARY, "
               "signature BINARY")
"""What the stateful step emits: a record for a topic (a truncation event with the job's signature when it
signs), or a ``decided`` marker that is only counted."""

STATE_ROWS = "state BINARY"
"""The state kept per bucket: its streams' ``StreamRetentionState.to_bytes()`` (see ``reclaim.retention.buckets``)."""

UNDECODABLE_BUCKET = -1
"""The group of rows that are no record (never null: a column of ints with nulls turns to floats in pandas)."""

WAKE_BUCKET = -2
"""The group of the wake-up rows: read only to make a batch run; no state, no output."""

DEFAULT_BUCKETS = 64
"""State buckets: enough to spread over a cluster's shuffle partitions, few enough to share Spark's per-group cost."""

TRUNCATION = "truncation"
REJECT = "reject"
DECIDED = "decided"

DataFrames = Iterable[pd.DataFrame]
StreamRecord = StreamTopology | StreamConfig | SubscriberChange | SubscriberCut | StreamCutRecord
STREAM_RECORDS = (StreamTopology, StreamConfig, SubscriberChange, SubscriberCut, StreamCutRecord)
TopicRecord = TopicRetentionPolicy | TopicCut
TOPIC_RECORDS = (TopicRetentionPolicy, TopicCut)
"""A plain Kafka topic's inputs (consumption retention of topics): its policy, then what the poller saw of it."""

TOPIC_ENTRY = "#"
"""What a Kafka topic's entry in a bucket is named by before its topic name: a stream's name is its key up to the
first '#', so no stream's entry can be named so."""


@dataclass(frozen=True)
class RetentionTopics:
    """The five topics the job reads, in the order a stream's records are applied, and the two it writes.

    Records of one stream with the same Kafka timestamp are applied topology first, then config,
    subscribers, subscriber cuts and recorded cuts, so a cut never arrives before what defines it.
    """

    stream_topology: str
    stream_config: str
    subscribers: str
    subscriber_cuts: str
    stream_cuts: str
    truncation: str
    rejects: str
    wakeups: str | None = None
    """Where the job writes a record when it starts and reads it back (``WAKE_BUCKET``): Spark runs no batch after
    a restart until some input arrives, so without one a stream's time limit waits for the next input."""
    topic_policies: str | None = None
    topic_cuts: str | None = None
    topic_truncation: str | None = None
    """Consumption retention of plain Kafka topics: the policies and the poller's cuts the job reads, and where it
    writes its DeleteRecords decisions (None: the job decides for streams only)."""

    @classmethod
    def from_names(cls, names: TopicNames) -> RetentionTopics:
        return cls(names.stream_topology, names.stream_config, names.subscribers, names.subscriber_cuts,
                   names.stream_cuts, names.truncation, names.retention_rejects, names.retention_wakeups,
                   names.topic_retention, names.topic_cuts, names.topic_truncation)

    @property
    def for_topics(self) -> bool:
        """Whether the job decides for plain Kafka topics too."""
        return self.topic_policies is not None and self.topic_cuts is not None and self.topic_truncation is not None

    @property
    def subscribed(self) -> tuple[str, ...]:
        """The topics the job's Kafka source reads: the inputs and the wake-ups."""
        return self.inputs if self.wakeups is None else (*self.inputs, self.wakeups)

    @property
    def stream_inputs(self) -> tuple[str, ...]:
        return (self.stream_topology, self.stream_config, self.subscribers, self.subscriber_cuts, self.stream_cuts)

    @property
    def topic_inputs(self) -> tuple[str, ...]:
        return (str(self.topic_policies), str(self.topic_cuts)) if self.for_topics else ()

    @property
    def inputs(self) -> tuple[str, ...]:
        """The input topics, in rank order: the streams', then the plain Kafka topics'."""
        return (*self.stream_inputs, *self.topic_inputs)

    def input_types(self) -> dict[str, type[AvroRecord]]:
        """The record type each input topic carries."""
        return dict(zip(self.inputs, (*STREAM_RECORDS, *TOPIC_RECORDS)[:len(self.inputs)], strict=True))

    def rank(self, topic: str) -> int:
        """The position of ``topic`` in the apply order."""
        return self.inputs.index(topic)


@functools.lru_cache(maxsize=4)
def cached_codec(registry_url: str | None, registry_config: tuple[tuple[str, str], ...] = ()) -> RecordCodec:
    """One codec per executor process and registry: building one parses every schema."""
    return build_codec(registry_url, registry_config=dict(registry_config) if registry_url else None)


def input_columns(topics: RetentionTopics, buckets: int) -> list[str]:
    """SQL over the Kafka source's rows giving ``INPUT_COLUMNS``, computed in the JVM: no Python stage.

    A record's stream is its key up to the first ``#`` (subscriber records are keyed
    ``stream#subscriber``, the others by stream); its bucket is :func:`reclaim.retention.buckets.bucket_of` of
    that stream (Spark's ``crc32`` is zlib's). A record without a key goes to ``UNDECODABLE_BUCKET``, a wake-up
    to ``WAKE_BUCKET``.
    The stateful step verifies each record's signature, then decodes its value and refuses one that is no
    record or names another stream.
    """
    ranks = " ".join(f"WHEN '{topic}' THEN {rank}" for rank, topic in enumerate(topics.subscribed))
    stream = "substring_index(CAST(key AS STRING), '#', 1)"
    bucket = f"coalesce(pmod(crc32(CAST({stream} AS BINARY)), {buckets}), {UNDECODABLE_BUCKET})"
    if topics.wakeups is not None:
        bucket = f"CASE topic WHEN '{topics.wakeups}' THEN {WAKE_BUCKET} ELSE {bucket} END"
    return [f"CAST({bucket} AS INT) AS bucket",
            f"{stream} AS stream", f"CAST(CASE topic {ranks} END AS INT) AS rank", "unix_millis(timestamp) AS kafka_ts",
            "topic", "partition", "offset", "key", "value", *signature_columns()]


def decode_input(codec: RecordCodec, expected: type[AvroRecord], topic: str, value: bytes
                 ) -> StreamRecord | TopicRecord:
    """Decode one input value as the record type of its topic; raises ``RecordDecodeError``."""
    record = codec.decode(value, topic, expected)
    assert isinstance(record, (*STREAM_RECORDS, *TOPIC_RECORDS)), f"{topic} carries {type(record).__name__}"
    return record


def reject_row(codec: RecordCodec, topics: RetentionTopics, reject: RetentionReject) -> dict[str, Any]:
    """An output row carrying ``reject`` to the rejects topic, keyed by its stream (no key when unknown)."""
    return {"topic": topics.rejects, "key": reject.stream.encode() or None,
            "value": codec.encode(reject, topics.rejects), "outcome": REJECT, "reject_kind": reject.kind.name,
            "key_id": None, "signature": None}


def truncation_row(codec: RecordCodec, topics: RetentionTopics, event: TruncationEvent,
                   signer: RecordSigner | None = None) -> dict[str, Any]:
    """An output row carrying ``event`` to the truncation topic, keyed by its stream, signed by ``signer``."""
    key, value = event.stream.encode(), codec.encode(event, topics.truncation)
    key_id, signature = signed(signer, topics.truncation, key, value)
    return {"topic": topics.truncation, "key": key, "value": value, "outcome": TRUNCATION, "reject_kind": None,
            "key_id": key_id, "signature": signature}


def topic_truncation_row(codec: RecordCodec, topics: RetentionTopics, decision: TopicTruncation,
                         signer: RecordSigner | None = None) -> dict[str, Any]:
    """An output row carrying ``decision`` to the topic-truncation topic, keyed by its topic, signed by ``signer``."""
    target = str(topics.topic_truncation)
    key, value = decision.topic.encode(), codec.encode(decision, target)
    key_id, signature = signed(signer, target, key, value)
    return {"topic": target, "key": key, "value": value, "outcome": TRUNCATION, "reject_kind": None,
            "key_id": key_id, "signature": signature}


def decided_row() -> dict[str, Any]:
    """The marker row of one stream decided in this batch; counted, never written."""
    return {"topic": None, "key": None, "value": None, "outcome": DECIDED, "reject_kind": None, "key_id": None,
            "signature": None}


def output_frame(rows: list[dict[str, Any]]) -> pd.DataFrame:
    # One object array builds a small frame about twice as fast as a list of dicts (and five times as fast as
    # a dict of column lists): this runs once per stream per batch.
    cells = np.empty((len(rows), len(OUTPUT_COLUMNS)), dtype=object)
    for i, row in enumerate(rows):
        cells[i] = [row[name] for name in OUTPUT_COLUMNS]
    return pd.DataFrame(cells, columns=list(OUTPUT_COLUMNS), copy=False)


def undecodable(row: Any, why: str, now_ms: int, stream: str = "") -> RetentionReject:
    """The reject of one row that is no input record of ``stream`` (empty when its stream is unknown)."""
    return RetentionReject(stream, None, RejectKind.UNDECODABLE, why, str(row.topic), int(row.partition),
                           int(row.offset), now_ms)
