"""The job's stateful step: one stream's records applied in order to its retention state, then a decision."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from retention.spark_compat import StateOffsetsFix
from retention.spark_io import (
    RetentionTopics,
    cached_codec,
    decided_row,
    decode_input,
    output_frame,
    reject_row,
    truncation_row,
    undecodable,
)
from retention.stream_state import Rejection, StreamRetentionState
from schemas.codec import RecordCodec
from schemas.rejects import RetentionReject

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState

log = logging.getLogger(__name__)

#: Within a stream, rows apply in the order of Kafka time, then topic rank (topology first), then partition and
#: offset: the first four fields of a row.

StatefulFunction = Callable[[tuple[Any, ...], Iterable[pd.DataFrame], "GroupState"], Iterator[pd.DataFrame]]


def stream_retention_step(topics: RetentionTopics, registry_url: str | None, reevaluate_ms: int) -> StatefulFunction:
    """The function ``applyInPandasWithState`` calls per stream (the key) and per timed-out stream.

    Undecodable rows arrive under the null key; they become rejects and no state is kept for them.
    A stream whose decision time alone can change (an entry's age crossing a TIME limit) gets a
    processing-time timeout at that instant, at most ``reevaluate_ms`` away, so its time limits are
    decided again when nothing arrives; a timeout decides again and keeps the state. Other streams
    get no timer: re-deciding them without input could not change anything.
    """
    if reevaluate_ms <= 0:
        raise ValueError(f"reevaluate_ms must be positive, got {reevaluate_ms}")

    # Unpickled with the function on each worker, before the first group is read (see spark_compat).
    fix = StateOffsetsFix()

    def step(key: tuple[Any, ...], frames: Iterable[pd.DataFrame], state: GroupState,
             _fix: StateOffsetsFix = fix) -> Iterator[pd.DataFrame]:
        codec = cached_codec(registry_url)
        now_ms = int(state.getCurrentProcessingTimeMs())
        stream = key[0]
        if stream is None:
            rows = [reject_row(codec, topics, undecodable(row, now_ms)) for row in _rows(frames)]
            yield output_frame(rows)
            return
        retention = StreamRetentionState.from_bytes(state.get[0]) if state.exists else StreamRetentionState(stream)
        rows = [] if state.hasTimedOut else _apply_all(codec, topics, retention, _rows(frames), now_ms)
        event = retention.decide(now_ms)
        if event is not None:
            rows.append(truncation_row(codec, topics, event))
            log.info("stream %s: truncate at %s (%s)", stream, event.cut.as_dict(), event.reason.name)
        rows.append(decided_row())
        state.update((retention.to_bytes(),))
        change = retention.next_change_ms(now_ms)
        if change is not None:
            state.setTimeoutDuration(max(1, min(reevaluate_ms, change - now_ms)))
        yield output_frame(rows)

    return step


class _Row(NamedTuple):
    kafka_ts: int
    rank: int
    partition: int
    offset: int
    topic: str
    value: Any
    error: Any


def _rows(frames: Iterable[pd.DataFrame]) -> Iterator[_Row]:
    """The group's rows in apply order (a group has a few rows: plain tuples sort faster than a frame)."""
    rows: list[_Row] = []
    for frame in frames:
        if not frame.empty:
            rows.extend(_Row._make(columns) for columns in zip(*(frame[name].tolist() for name in _Row._fields),
                                                                strict=True))
    rows.sort(key=lambda row: (row.kafka_ts, row.rank, row.partition, row.offset))
    yield from rows


def _apply_all(codec: RecordCodec, topics: RetentionTopics, retention: StreamRetentionState, rows: Iterator[Any],
               now_ms: int) -> list[dict[str, Any]]:
    """Apply each row's record to ``retention``; the reject rows of the records it refused."""
    types = topics.input_types()
    out: list[dict[str, Any]] = []
    for row in rows:
        topic = str(row.topic)
        record = decode_input(codec, types[topic], topic, bytes(row.value))
        rejection = retention.apply(record, now_ms)
        if rejection is not None:
            out.append(reject_row(codec, topics, _reject(rejection, row, now_ms)))
    return out


def _reject(rejection: Rejection, row: Any, now_ms: int) -> RetentionReject:
    log.info("stream %s: rejected %s@%s:%s (%s): %s", rejection.stream, row.topic, row.partition, row.offset,
             rejection.kind.name, rejection.reason)
    return RetentionReject(rejection.stream, rejection.subscriber, rejection.kind, rejection.reason, str(row.topic),
                           int(row.partition), int(row.offset), now_ms)
