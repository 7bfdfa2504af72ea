"""In-memory frames and group state for the retention job's pandas steps, without a Spark session."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from reclaim.producers.topics import TopicNames
from reclaim.retention.buckets import bucket_of
from reclaim.retention.spark_io import DEFAULT_BUCKETS, INPUT_COLUMNS, UNDECODABLE_BUCKET, RetentionTopics
from reclaim.schemas import TruncationEvent, build_codec, millis_now
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.rejects import RetentionReject

TOPICS = RetentionTopics.from_names(TopicNames.for_prefix("unit."))


REEVALUATE_MS = 30_000


def key_of(record: AvroRecord) -> str:
    """How reclaim's producers key an input record: by stream, subscriber records by ``stream#subscriber``."""
    subscriber = getattr(record, "subscriber", None)
    stream = str(getattr(record, "stream", None) or getattr(record, "topic"))  # noqa: B009 - a topic's records
    return stream if subscriber is None else f"{stream}#{subscriber}"


def group_state(now_ms: int, previous: GroupState | None = None, timed_out: bool = False) -> GroupState:
    """The state Spark hands the step: fresh, or carrying what ``previous`` stored."""
    value = None if previous is None or not previous.exists else Row(*previous.get)
    return GroupState(optionalValue=value, batchProcessingTimeMs=now_ms, eventTimeWatermarkMs=-1,  # type: ignore[arg-type]
                      timeoutConf=GroupStateTimeout.ProcessingTimeTimeout, hasTimedOut=timed_out,
                      watermarkPresent=False, defined=value is not None, updated=False, removed=False,
                      timeoutTimestamp=-1, keyAsUnsafe=b"", valueSchema=STATE_SCHEMA)


def events(out: pd.DataFrame) -> list[TruncationEvent]:
    codec = build_codec()
    return [codec.decode(v, TOPICS.truncation, TruncationEvent) for v in out[out.outcome == "truncation"].value]


def rejects(out: pd.DataFrame) -> list[RetentionReject]:
    codec = build_codec()
    return [codec.decode(v, TOPICS.rejects, RetentionReject) for v in out[out.outcome == "reject"].value]


STATE_SCHEMA = StructType([StructField("state", BinaryType())])
NOW_MS = millis_now()


Raw = tuple[str, bytes, "str | None"]
"""A message given by hand: topic, value, key."""


def decoded(items: Sequence[AvroRecord | Raw], kafka_ts: int = NOW_MS) -> pd.DataFrame:
    """The rows the stateful step gets, as ``input_columns`` computes them in the JVM from each message's key."""
    codec = build_codec()
    rows = []
    for offset, item in enumerate(items):
        if isinstance(item, tuple):
            topic, value, key = item
        else:
            topic = next(t for t, kind in TOPICS.input_types().items() if isinstance(item, kind))
            value, key = codec.encode(item, topic), key_of(item)
        stream = None if key is None else key.split("#", 1)[0]
        bucket = UNDECODABLE_BUCKET if stream is None else bucket_of(stream, DEFAULT_BUCKETS)
        rows.append({"bucket": bucket, "stream": stream, "rank": TOPICS.rank(topic), "kafka_ts": kafka_ts,
                     "topic": topic, "partition": 0, "offset": offset, "key": None if key is None else key.encode(),
                     "value": value, "key_id": None, "signature": None})
    return pd.DataFrame(rows, columns=list(INPUT_COLUMNS))



