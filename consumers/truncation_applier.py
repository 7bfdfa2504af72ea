"""``reclaim truncation-applier``: truncation events off the bus, applied to streams through their controller.

The Kafka sink of the retention job is at-least-once, so an event may arrive twice or after a later
one: truncation is idempotent and a cut at or behind the stream's head is a no-op. An offset is
stored only once its event's truncation is durable (or the event is judged never applicable).
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from confluent_kafka import (
    OFFSET_INVALID,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaException,
    Message,
    TopicPartition,
)
from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

from reclaim.errors import ReclaimError
from reclaim.producers.config import kafka_config
from reclaim.retention.errors import RetentionError
from reclaim.retention.minimums import inside_minimum
from reclaim.retention.stream_state import topology_of
from reclaim.schemas.base import millis_now
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.streams import StreamCut, StreamCutRecord, TruncationEvent, TruncationReason
from reclaim.schemas.topology import StreamTopology
from reclaim.security.rules import authorize_truncation, signers_of
from reclaim.security.signing import RawHeaders, RecordVerifier, Rejection, Signer, Unauthenticated
from reclaim.segments.stream_errors import StreamNotFoundError
from reclaim.segments.stream_model import StreamRecord

log = logging.getLogger(__name__)

disable_created_metrics()  # type: ignore[no-untyped-call]
APPLIED = Counter("reclaim_truncations", "Truncation events by outcome (lower-case snake)", ["outcome"])
# Every reclaim command imports this module (the CLI registers them all): the series below, by topic, appear only
# in a process that runs an applier, so that no other process looks like an applier that never polls.
CONSUMER_LAG = Gauge("reclaim_truncation_consumer_lag",
                     "Truncation events on this applier's partitions not yet applied, as of its last poll "
                     "(high watermark less position, summed over the partitions it has read from)", ["topic"])
APPLY_DELAY = Histogram("reclaim_truncation_apply_delay_seconds",
                        "From a truncation event's write to the topic (its Kafka timestamp) to its final outcome",
                        ["topic"], buckets=(0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600))
LAST_POLL = Gauge("reclaim_truncation_applier_last_poll_timestamp_seconds",
                  "When the applier last finished a poll and what it got (before the first, when it started), "
                  "Unix time", ["topic"])


class Truncator(Protocol):
    """What the applier needs of a stream controller."""

    def get_stream(self, stream: str) -> StreamRecord:
        """The stream's row; :class:`StreamNotFoundError` when there is none."""
        ...

    def truncate_journaled(self, stream: str, cut: StreamCut, *, source: str, reason: str, signer: str,
                           incarnation: str | None = None) -> bool:
        """Truncate ``stream`` (that ``incarnation`` of it, when given) at ``cut`` and keep it in the journal;
        False when the stream's head is at or past it already."""
        ...

    def topology(self, stream: str) -> StreamTopology:
        """The stream's epochs and sealed lengths as the store holds them."""
        ...

    def tail_cut(self, stream: str) -> tuple[StreamCut, int]:
        """The cut at the stream's tail and its size (bytes written since it began)."""
        ...

    def recorded_cut(self, stream: str, at_ms: int) -> StreamCutRecord | None:
        """The newest cut the retention recorder took of ``stream`` at or before ``at_ms``."""
        ...


class Applied(enum.Enum):
    """What became of one truncation event."""

    TRUNCATED = "truncated"
    NO_OP = "no-op"  # a duplicate, or a cut at or behind the stream's head
    UNKNOWN_STREAM = "unknown-stream"
    INVALID = "invalid"  # undecodable, or a cut that does not fit the stream: never applicable
    UNAUTHENTICATED = "unauthenticated"  # not signed by a key that may truncate this stream for this reason
    RETRY = "retry"  # the controller was busy, or it or the schema registry unavailable: read again later

    @property
    def final(self) -> bool:
        return self is not Applied.RETRY


for _applied in Applied:
    APPLIED.labels(_applied.name.lower())  # every outcome's series from 0


def apply_event(truncator: Truncator, codec: RecordCodec, value: bytes | None, topic: str, where: str, *,
                key: bytes | None = None, headers: RawHeaders = None,
                verifier: RecordVerifier | None = None, now_ms: int | None = None) -> Applied:
    """Verify one record, decode it, check it against the stream's policy and apply it; every outcome but
    RETRY is final for its offset.

    With a ``verifier``, only an event signed by a key that may write truncation events is read at all;
    then a MANUAL one needs an admin's key and any other the retention job's, with a reason the stream's
    stored policy gives. Without one (record authentication off), the reason must still fit the policy.
    Either way a TIME, SIZE or CONSUMPTION truncation must keep the policy's minimum, as this controller
    knows it (``now_ms``: its clock, by default the system's): see :mod:`reclaim.retention.minimums`.
    """
    signer = None
    if verifier is not None:
        verified = verifier.verify(topic, key, value, headers, signers_of(TruncationEvent))
        if isinstance(verified, Unauthenticated):
            return Applied.UNAUTHENTICATED
        signer = verified
    try:
        event = codec.decode(value or b"", topic, TruncationEvent)
    except RecordDecodeError as exc:
        if exc.retryable:  # the schema registry is down: the bytes may be fine, so they are read again
            log.warning("truncation event at %s cannot be decoded yet: %s", where, exc)
            return Applied.RETRY
        log.error("truncation event undecodable at %s: %s", where, exc)
        return Applied.INVALID
    try:
        stream = truncator.get_stream(event.stream)
        if event.computed_at < stream.created_at * 1000:
            # Decided for a deleted stream of the same name: its cut would cut the new stream's bytes.
            log.warning("truncation event for %s at %s predates the stream's creation: skipped", event.stream, where)
            return Applied.UNKNOWN_STREAM
        refusal = (_incarnation_refusal(event, stream) or _refusal(event, signer, stream)
                   or _inside_minimum(truncator, event, stream, now_ms or millis_now()))
        if refusal is not None:
            if verifier is not None:
                verifier.refused(topic, refusal)
            log.error("truncation of %s at %s refused: %s", event.stream, where, refusal)
            return Applied.UNAUTHENTICATED
        done = truncator.truncate_journaled(event.stream, event.cut, source=where, reason=event.reason.name,
                                            signer=_journal_signer(signer, event), incarnation=event.incarnation)
    except StreamNotFoundError:
        log.warning("truncation event for unknown stream %s at %s: skipped", event.stream, where)
        return Applied.UNKNOWN_STREAM
    except ReclaimError as exc:
        if exc.retryable:
            log.warning("truncation of %s at %s must wait: %s", event.stream, where, exc)
            return Applied.RETRY
        log.error("truncation of %s at %s refused: %s", event.stream, where, exc)
        return Applied.INVALID
    outcome = Applied.TRUNCATED if done else Applied.NO_OP
    log.info("truncation %s stream=%s reason=%s signer=%s segments=%d at %s", outcome.value, event.stream,
             event.reason.name, _signed_by(signer), len(event.cut), where)
    return outcome


def _incarnation_refusal(event: TruncationEvent, stream: StreamRecord) -> Unauthenticated | None:
    """WRONG_INCARNATION for an event of another incarnation of the stream: decided for one deleted, its name
    used again. An event that names none (written before incarnations) is the incarnation's that existed when
    it was decided: one decided before this one was created was skipped already."""
    if event.incarnation is None or event.incarnation == stream.incarnation:
        return None
    return Unauthenticated(Rejection.WRONG_INCARNATION, f"the event is for incarnation {event.incarnation} of "
                           f"{event.stream}, which is incarnation {stream.incarnation or '(none)'} now: the one it "
                           f"was decided for was deleted")


def _refusal(event: TruncationEvent, signer: Signer | None, stream: StreamRecord) -> Unauthenticated | None:
    """Why the stream's policy, or the signer, does not allow ``event``: a signed event must be signed by its
    reason's role; an unsigned one (authentication off, or rollout) is judged by the policy alone."""
    if signer is not None and not signer.unsigned:
        return authorize_truncation(event, signer, stream.policy)
    for role in ("admin", "retention-job"):  # as if signed by the role its reason needs
        refusal = authorize_truncation(event, Signer("-", role), stream.policy)
        if refusal is None:
            return None
    return refusal


def _inside_minimum(truncator: Truncator, event: TruncationEvent, stream: StreamRecord,
                    now_ms: int) -> Unauthenticated | None:
    """AGAINST_POLICY when a policy truncation would remove what the stored policy's minimum keeps."""
    if event.reason is TruncationReason.MANUAL:
        return None
    policy = stream.policy
    try:
        topology = topology_of(truncator.topology(event.stream))
        _, size_now = truncator.tail_cut(event.stream)
        floor_ms = now_ms - policy.min_limit
        why = inside_minimum(policy, event.cut, topology, size_now, truncator.recorded_cut(event.stream, floor_ms),
                             floor_ms)
    except RetentionError as exc:  # a cut that does not fit the stream: refused whole (a valid one always fits)
        why = f"it cannot be checked against the policy's minimum: {exc}"
    if why is None:
        return None
    return Unauthenticated(Rejection.AGAINST_POLICY, f"a {event.reason.name} truncation of {event.stream} is inside "
                           f"its policy's minimum: {why}")


def _journal_signer(signer: Signer | None, event: TruncationEvent) -> str:
    """Who the journal names: the event's signer and, for a truncation at the subscribers' bound, the subscribers
    whose cuts made it with the keys that signed them (as the job says: it verified them)."""
    if not event.bound_by:
        return _signed_by(signer)
    return f"{_signed_by(signer)}; bound by {', '.join(event.bound_by)}"[:MAX_JOURNAL_SIGNER]


MAX_JOURNAL_SIGNER = 4096
"""The most of a journal entry's signer text kept: a bound made by thousands of subscribers is cut short."""


def _signed_by(signer: Signer | None) -> str:
    return "record authentication off" if signer is None else str(signer)


@dataclass(frozen=True)
class ApplierConfig:
    bootstrap: str
    topic: str
    group_id: str = "reclaim-truncation"
    poll_timeout_s: float = 1.0
    retry_backoff_s: float = 1.0


class TruncationApplier:
    """A consumer-group member that applies truncation events in partition order."""

    def __init__(self, config: ApplierConfig, truncator: Truncator, codec: RecordCodec,
                 sleep: Callable[[float], None] = time.sleep, verifier: RecordVerifier | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.verifier = verifier
        self.truncator = truncator
        self.codec = codec
        self.sleep = sleep
        self.clock = clock
        # Its series from now: lag 0 and no delay yet, and an applier that hangs before its first poll is stuck too.
        self._lag, self._delay = CONSUMER_LAG.labels(config.topic), APPLY_DELAY.labels(config.topic)
        self._last_poll = LAST_POLL.labels(config.topic)
        self._last_poll.set(clock())
        self.consumer = Consumer(kafka_config(config.bootstrap, "consumer", {"group.id": config.group_id}))
        self.consumer.subscribe([config.topic])

    def run_once(self) -> list[Applied]:
        """Poll one batch and apply it; a record to retry rewinds its partition and ends the batch there."""
        outcomes: list[Applied] = []
        blocked: set[int] = set()
        for message in self.consumer.consume(100, self.config.poll_timeout_s):
            if message.error() is not None:
                log.warning("consumer error: %s", message.error())
                continue
            topic, partition, offset = _coordinates(message)
            if partition in blocked:
                continue
            outcome = apply_event(self.truncator, self.codec, message.value(), topic, f"{topic}[{partition}]@{offset}",
                                  key=message.key(), headers=message.headers(), verifier=self.verifier)
            APPLIED.labels(outcome.name.lower()).inc()
            outcomes.append(outcome)
            if outcome.final:
                self.consumer.store_offsets(message)
                delay = apply_delay_s(message.timestamp(), self.clock())
                if delay is not None:
                    self._delay.observe(delay)
            else:
                blocked.add(partition)
                self.consumer.seek(TopicPartition(topic, partition, offset))
        try:
            self._lag.set(partition_lag(self.consumer))
        except KafkaException as exc:  # a gauge is not worth stopping the applier for: it keeps its last value
            log.debug("consumer lag not read: %s", exc)
        self._last_poll.set(self.clock())
        if blocked:
            self.sleep(self.config.retry_backoff_s)
        return outcomes

    def run(self, stop: threading.Event, on_idle: Callable[[], object] | None = None) -> None:
        """Apply events until ``stop`` is set; ``on_idle`` runs after every poll (the recorder's tick)."""
        try:
            while not stop.is_set():
                self.run_once()
                if on_idle is not None:
                    on_idle()
        finally:
            self.close()

    def close(self) -> None:
        """Commit the stored offsets and leave the group."""
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - nothing stored yet is not a failure
            log.debug("final commit: %s", exc)
        self.consumer.close()


class Watermarks(Protocol):
    """What the lag needs of a consumer (:class:`confluent_kafka.Consumer`'s methods)."""

    def assignment(self) -> list[TopicPartition]: ...

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]: ...

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = ...,
                              cached: bool = ...) -> tuple[int, int] | None: ...


def partition_lag(consumer: Watermarks) -> int:
    """The events on the consumer's assigned partitions past its position, from what it knows locally (the
    high watermark of its last fetch): no request to the broker, whatever the number of polls."""
    assigned = consumer.assignment()
    if not assigned:
        return 0
    positions = {(tp.topic, tp.partition): tp.offset for tp in consumer.position(assigned)}
    highs: dict[tuple[str, int], int] = {}
    for tp in assigned:
        marks = consumer.get_watermark_offsets(tp, cached=True)
        if marks is not None:
            highs[(tp.topic, tp.partition)] = marks[1]
    return lag(positions, highs)


def lag(positions: Mapping[tuple[str, int], int], highs: Mapping[tuple[str, int], int]) -> int:
    """The sum over partitions of high watermark less position; a partition whose position or high
    watermark is not known yet (nothing read from it since it was assigned) counts 0."""
    return sum(max(0, highs[tp] - offset) for tp, offset in positions.items()
               if offset >= 0 and highs.get(tp, OFFSET_INVALID) >= 0)


def apply_delay_s(timestamp: tuple[int, int], now_s: float) -> float | None:
    """Seconds from a record's Kafka timestamp (type, milliseconds) to ``now_s``; None when it has none. A
    producer's clock ahead of ours gives 0, not a negative delay."""
    kind, millis = timestamp
    if kind == TIMESTAMP_NOT_AVAILABLE or millis < 0:
        return None
    return max(0.0, now_s - millis / 1000)


def _coordinates(message: Message) -> tuple[str, int, int]:
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise ValueError("a consumed record without topic, partition or offset")
    return topic, partition, offset
