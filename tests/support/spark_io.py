"""In-memory frames and group state for the retention job's pandas steps, without a Spark session."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import Row
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import BinaryType, StructField, StructType

from reclaim.producers.topics import TopicNames
from reclaim.retention.spark_io import (
    RetentionTopics,
)
from reclaim.schemas import TruncationEvent, build_codec
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.rejects import RetentionReject

TOPICS = RetentionTopics.from_names(TopicNames.for_prefix("unit."))


REEVALUATE_MS = 30_000


def key_of(record: AvroRecord) -> str:
    """How reclaim's producers key an input record: by stream, subscriber records by ``stream#subscriber``."""
    subscriber = getattr(record, "subscriber", None)
    stream = str(getattr(record, "stream"))  # noqa: B009 - every input record has one
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
