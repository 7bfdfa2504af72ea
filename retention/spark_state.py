"""The job's stateful step: one stream's records applied in order to its retention state, then a decision."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple

import pandas as pd

from reclaim.retention.buckets import BucketEntry, decode_bucket, encode_bucket
from reclaim.retention.errors import InvalidPolicyError
from reclaim.retention.policy import check_policy
from reclaim.retention.spark_auth import JobKeys, check_subject, job_auth, unauthenticated, verify_input
from reclaim.retention.spark_compat import StateOffsetsFix
from reclaim.retention.spark_io import (
    TOPIC_ENTRY,
    UNDECODABLE_BUCKET,
    WAKE_BUCKET,
    RetentionTopics,
    StreamRecord,
    TopicRecord,
    cached_codec,
    decided_row,
    decode_input,
    output_frame,
    reject_row,
    topic_truncation_row,
    truncation_row,
    undecodable,
)
from reclaim.retention.stream_state import Rejection, StreamRetentionState
from reclaim.retention.topic_state import TopicRetentionState
from reclaim.schemas.base import LONG_MAX, AvroRecord
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.rejects import RetentionReject
from reclaim.schemas.topic_retention import TopicCut, TopicRetentionPolicy
from reclaim.security.signing import AuthMode, RecordSigner, RecordVerifier, Signer, Unauthenticated

if TYPE_CHECKING:
    from pyspark.sql.streaming.state import GroupState

log = logging.getLogger(__name__)


StatefulFunction = Callable[[tuple[Any, ...], Iterable[pd.DataFrame], "GroupState"], Iterator[pd.DataFrame]]


def stream_retention_step(topics: RetentionTopics, registry_url: str | None, reevaluate_ms: int,
                          registry_config: tuple[tuple[str, str], ...] = (),
                          keys: JobKeys | None = None) -> StatefulFunction:
    """The function ``applyInPandasWithState`` calls per state bucket (the key) with its streams' rows.

    With ``keys`` whose mode is set, every row's signature is verified first (``reclaim.retention.spark_auth``):
    a record not signed by a role allowed to write it, or a subscriber's record signed by another
    subscriber's key or by one not granted its stream, is rejected as UNAUTHENTICATED and changes nothing.
    With ``keys`` that sign, every truncation event carries the job's signature.
    Wake-up rows (``WAKE_BUCKET``) are dropped unread: they only make Spark run a batch.
    Rows without a key arrive under ``UNDECODABLE_BUCKET``; they become rejects and no state is kept
    for them. A value that is no record, or a record of another stream than its key names, is
    rejected as UNDECODABLE within its bucket.
    Each stream of the bucket with rows is applied and decided on its own, and so is each stream
    whose decision time alone may have changed by now (an entry's age crossing a TIME limit). The
    bucket's processing-time timeout is set at the earliest such instant of its streams, at most
    ``reevaluate_ms`` away, so time limits are decided again when nothing arrives; a bucket whose
    streams cannot change without input gets no timer.
    """
    if reevaluate_ms <= 0:
        raise ValueError(f"reevaluate_ms must be positive, got {reevaluate_ms}")

    # Unpickled with the function on each worker, before the first group is read (see spark_compat).
    fix = StateOffsetsFix()

    def step(key: tuple[Any, ...], frames: Iterable[pd.DataFrame], state: GroupState,
             _fix: StateOffsetsFix = fix) -> Iterator[pd.DataFrame]:
        codec = cached_codec(registry_url, registry_config)
        auth = None if keys is None else job_auth(keys)
        verifier, signer = (None, None) if auth is None else (auth.verifier, auth.signer)
        if key[0] == WAKE_BUCKET:
            for _ in frames:
                pass  # read and dropped: it made the batch run, and every bucket's due timer fires in it
            return
        now_ms = int(state.getCurrentProcessingTimeMs())
        if key[0] is None or key[0] == UNDECODABLE_BUCKET:
            rows, types = [], topics.input_types()
            for row in _rows(frames):
                verified = _verify(verifier, types, row)
                reject = unauthenticated(verified, row, now_ms, "") if isinstance(verified, Unauthenticated) \
                    else undecodable(row, _no_key(codec, topics, row), now_ms)
                rows.append(reject_row(codec, topics, reject))
            yield output_frame(rows)
            return
        entries = decode_bucket(state.get[0]) if state.exists else {}
        by_stream: dict[str, list[_Row]] = {}
        topic_inputs = set(topics.topic_inputs)
        for row in [] if state.hasTimedOut else _rows(frames):
            name = TOPIC_ENTRY + str(row.stream) if str(row.topic) in topic_inputs else row.stream
            by_stream.setdefault(name, []).append(row)
        due = {name for name, entry in entries.items()
               if entry.next_change_ms is not None and entry.next_change_ms <= now_ms}
        out: list[dict[str, Any]] = []
        for stream in sorted(by_stream.keys() | due):
            if stream.startswith(TOPIC_ENTRY):
                kept = entries.get(stream)
                topic_state = TopicRetentionState.from_bytes(kept.state) if kept is not None \
                    else TopicRetentionState(stream.removeprefix(TOPIC_ENTRY))
                out += _apply_topic(codec, topics, topic_state, by_stream.get(stream, []), now_ms, verifier)
                out += _decide_topic(codec, topics, topic_state, now_ms, signer)
                entries[stream] = BucketEntry(None, topic_state.to_bytes())
                continue
            retention = _kept_state(stream, entries.get(stream))
            out += _apply_all(codec, topics, retention, by_stream.get(stream, []), now_ms, verifier)
            out += _decide(codec, topics, retention, now_ms, signer)
            entries[stream] = _entry(retention, now_ms)
        state.update((encode_bucket(entries),))
        changes = [e.next_change_ms for e in entries.values() if e.next_change_ms is not None]
        if changes:
            state.setTimeoutDuration(max(1, min(reevaluate_ms, min(changes) - now_ms)))
        yield output_frame(out)

    return step


def _kept_state(stream: str, entry: BucketEntry | None) -> StreamRetentionState:
    """The stream's state as the bucket kept it (a fresh one if none).

    A policy kept that :func:`check_policy` refuses now is dropped, as it would be rejected if it arrived
    now: an earlier version accepted limits up to the largest long, and deciding on one would fail the
    bucket. The stream is truncated by no policy until a valid one arrives.
    """
    if entry is None:
        return StreamRetentionState(stream)
    retention = StreamRetentionState.from_bytes(entry.state)
    if retention.config is not None:
        try:
            check_policy(retention.config.policy)
        except InvalidPolicyError as exc:
            log.warning("stream %s: kept policy dropped, it is refused now (%s): set a valid one", stream, exc)
            retention.config = None
    return retention


def _entry(retention: StreamRetentionState, now_ms: int) -> BucketEntry:
    """The stream's bucket entry: its state, and when time alone may next change its decision. An instant past
    the largest long never comes: it sets no timer (and the bucket keeps a next change as a long)."""
    change = retention.next_change_ms(now_ms)
    return BucketEntry(None if change is None or change > LONG_MAX else change, retention.to_bytes())


def _decide(codec: RecordCodec, topics: RetentionTopics, retention: StreamRetentionState, now_ms: int,
            signer: RecordSigner | None = None) -> list[dict[str, Any]]:
    """The stream's decision now: its truncation row (signed by ``signer``) if the cut advanced, and the
    marker that it was decided."""
    event = retention.decide(now_ms)
    if event is None:
        return [decided_row()]
    log.info("stream %s: truncate at %s (%s)", event.stream, event.cut.as_dict(), event.reason.name)
    return [truncation_row(codec, topics, event, signer), decided_row()]


def _apply_topic(codec: RecordCodec, topics: RetentionTopics, retention: TopicRetentionState, rows: Iterable[Any],
                 now_ms: int, verifier: RecordVerifier | None = None) -> list[dict[str, Any]]:
    """Apply each row's record (a policy, or the poller's cut) to a Kafka topic's state; the reject rows of the
    records it refused: not signed by the admin (a policy) or the topic-retention key (a cut), no record, a
    record of another topic than its key names, or a cut of another life of the topic."""
    out: list[dict[str, Any]] = []
    for row in rows:
        read = _read_row(codec, topics, verifier, row, now_ms, retention.topic)
        if isinstance(read, dict):
            out.append(read)
            continue
        _, record = read
        if not isinstance(record, TopicRetentionPolicy | TopicCut) or record.topic != retention.topic:
            why = f"keyed as topic {retention.topic!r} but names {getattr(record, 'topic', None)!r}"
            out.append(reject_row(codec, topics, undecodable(row, why, now_ms, retention.topic)))
            continue
        refused = retention.apply(record, now_ms)
        if refused is not None:
            log.info("topic %s: rejected %s@%s:%s (%s): %s", refused.topic, row.topic, row.partition, row.offset,
                     refused.kind.name, refused.reason)
            reject = RetentionReject(refused.topic, None, refused.kind, refused.reason, str(row.topic),
                                     int(row.partition), int(row.offset), now_ms)
            out.append(reject_row(codec, topics, reject))
    return out


def _decide_topic(codec: RecordCodec, topics: RetentionTopics, retention: TopicRetentionState, now_ms: int,
                  signer: RecordSigner | None = None) -> list[dict[str, Any]]:
    """The topic's decision now: its DeleteRecords row (signed by ``signer``) if a partition's start moves on, and
    the marker that it was decided."""
    decision = retention.decide(now_ms)
    if decision is None:
        return [decided_row()]
    log.info("topic %s: delete records below %s", decision.topic, decision.starts.as_dict())
    return [topic_truncation_row(codec, topics, decision, signer), decided_row()]


class _Row(NamedTuple):
    kafka_ts: int
    rank: int
    partition: int
    offset: int
    stream: Any
    topic: str
    key: Any
    value: Any
    key_id: Any
    signature: Any


def _rows(frames: Iterable[pd.DataFrame]) -> Iterator[_Row]:
    """The group's rows in apply order (Kafka time, topic rank, partition, offset): plain tuples sort fast."""
    rows: list[_Row] = []
    for frame in frames:
        if not frame.empty:
            rows.extend(_Row._make(columns) for columns in zip(*(frame[name].tolist() for name in _Row._fields),
                                                                strict=True))
    rows.sort(key=lambda row: (row.kafka_ts, row.rank, row.partition, row.offset))
    yield from rows


def _apply_all(codec: RecordCodec, topics: RetentionTopics, retention: StreamRetentionState, rows: Iterable[Any],
               now_ms: int, verifier: RecordVerifier | None = None) -> list[dict[str, Any]]:
    """Apply each row's record to ``retention``; the reject rows of the records it refused.

    With a ``verifier`` a row's signature is checked before anything else, and a subscriber's record
    must be signed with that subscriber's own key, granted the stream (or an admin's, for a change).
    """
    out: list[dict[str, Any]] = []
    for row in rows:
        topic = str(row.topic)
        read = _read_row(codec, topics, verifier, row, now_ms, retention.stream)
        if isinstance(read, dict):
            out.append(read)
            continue
        signer, record = read
        if isinstance(record, TopicRetentionPolicy | TopicCut) or record.stream != retention.stream:
            why = f"keyed as stream {retention.stream!r} but names stream {getattr(record, 'stream', None)!r}"
            out.append(reject_row(codec, topics, undecodable(row, why, now_ms, retention.stream)))
            continue
        refusal = None if verifier is None or signer is None else check_subject(verifier, topic, signer, record)
        if refusal is not None:
            reject = unauthenticated(refusal, row, now_ms, retention.stream, getattr(record, "subscriber", None))
            out.append(reject_row(codec, topics, reject))
            continue
        # Enforced authentication also requires the stream's incarnation (a record written before it has none).
        strict = verifier is not None and verifier.mode is AuthMode.ENFORCE
        rejection = retention.apply(record, now_ms, require_incarnation=strict,
                                    signed_by=None if signer is None or signer.unsigned else str(signer))
        if rejection is not None:
            out.append(reject_row(codec, topics, _reject(rejection, row, now_ms)))
    return out


def _read_row(codec: RecordCodec, topics: RetentionTopics, verifier: RecordVerifier | None, row: Any, now_ms: int,
              name: str) -> tuple[Signer | None, StreamRecord | TopicRecord] | dict[str, Any]:
    """Who signed ``row`` and its record (of its topic's type); or the reject row (about ``name``, its stream or
    topic) of a record not signed by a role allowed to write it, or that is no record of that type."""
    types = topics.input_types()
    signer = _verify(verifier, types, row)
    if isinstance(signer, Unauthenticated):
        return reject_row(codec, topics, unauthenticated(signer, row, now_ms, name))
    topic = str(row.topic)
    try:
        return signer, decode_input(codec, types[topic], topic, bytes(row.value or b""))
    except RecordDecodeError as exc:
        return reject_row(codec, topics, undecodable(row, str(exc), now_ms, name))


def _verify(verifier: RecordVerifier | None, types: dict[str, type[AvroRecord]], row: Any
            ) -> Signer | Unauthenticated | None:
    """Who signed ``row``'s record (of its topic's type), if a role allowed to write it did; None when inputs
    are not verified."""
    if verifier is None:
        return None
    topic = str(row.topic)
    return verify_input(verifier, types[topic], topic, None if row.key is None else bytes(row.key),
                        bytes(row.value or b""), row.key_id, row.signature)


def _no_key(codec: RecordCodec, topics: RetentionTopics, row: Any) -> str:
    """Why a row without a key is refused: it is no record, or a record not keyed by its stream."""
    topic = str(row.topic)
    try:
        decode_input(codec, topics.input_types()[topic], topic, bytes(row.value or b""))
    except RecordDecodeError as exc:
        return str(exc)
    return "a record without a key: reclaim's input records are keyed by their stream ('stream#subscriber' for " \
           "subscriber records)"


def _reject(rejection: Rejection, row: Any, now_ms: int) -> RetentionReject:
    log.info("stream %s: rejected %s@%s:%s (%s): %s", rejection.stream, row.topic, row.partition, row.offset,
             rejection.kind.name, rejection.reason)
    return RetentionReject(rejection.stream, rejection.subscriber, rejection.kind, rejection.reason, str(row.topic),
                           int(row.partition), int(row.offset), now_ms)
