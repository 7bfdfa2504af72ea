"""Retry tiers and the dead-letter topic: headers carried by re-routed records and the choice of tier."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from reclaim.deletion.outcomes import Outcome, Verdict
from reclaim.quick_init import quick_init

H_ATTEMPT = "reclaim.attempt"
H_FIRST_FAILURE = "reclaim.first-failure-ms"
H_NOT_BEFORE = "reclaim.not-before-ms"
H_TOPIC = "reclaim.original-topic"
H_PARTITION = "reclaim.original-partition"
H_OFFSET = "reclaim.original-offset"
H_ERROR_CLASS = "reclaim.error-class"
H_ERROR = "reclaim.error-message"
H_OUTCOME = "reclaim.outcome"
H_TIMESTAMP = "reclaim.original-timestamp-ms"
"""The original record's timestamp (epoch millis), carried from the deletion topic through every tier."""
H_GROUP = "reclaim.group"
"""DLQ only: the consumer group whose worker dead-lettered the record."""
H_STACK = "reclaim.error-stack"
"""DLQ only, when an exception caused the verdict: where it was raised (a few frames, bounded)."""

Headers = list[tuple[str, bytes]]
MAX_ERROR_BYTES = 2000
MAX_STACK_BYTES = 1000


RawHeaders = Sequence[tuple[str, bytes | str | None]] | Mapping[str, bytes | str | None] | None


def _header_map(headers: RawHeaders) -> dict[str, str]:
    pairs = headers.items() if isinstance(headers, Mapping) else headers or ()
    found: dict[str, str] = {}
    for key, value in pairs:
        if isinstance(value, bytes):
            found[key] = value.decode("utf-8", errors="replace")
        elif value is not None:
            found[key] = value
    return found


def _int(values: dict[str, str], key: str) -> int | None:
    try:
        return int(values[key])
    except (KeyError, ValueError):
        return None


@quick_init
@dataclass(frozen=True)
class Delivery:
    """Where a record came from and its retry history, read from its headers.

    A record straight from the deletion topic is on attempt 1 and its origin is where it was read;
    ``timestamp_ms`` is the origin record's timestamp, when known.
    """

    attempt: int
    first_failure_ms: int | None
    not_before_ms: int | None
    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None

    @classmethod
    def of(cls, topic: str, partition: int, offset: int,
           headers: RawHeaders, timestamp_ms: int | None = None) -> Delivery:
        """The delivery of a record read at ``topic[partition]@offset`` with ``headers`` and its own
        ``timestamp_ms`` (a negative one, librdkafka's "not available", counts as unknown)."""
        own_timestamp = timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else None
        if not headers:
            return cls(1, None, None, topic, partition, offset, own_timestamp)
        values = _header_map(headers)
        origin_partition = _int(values, H_PARTITION)
        origin_offset = _int(values, H_OFFSET)
        retried = H_TOPIC in values and origin_partition is not None and origin_offset is not None
        return cls(
            attempt=max(1, _int(values, H_ATTEMPT) or 1),
            first_failure_ms=_int(values, H_FIRST_FAILURE),
            not_before_ms=_int(values, H_NOT_BEFORE),
            topic=values[H_TOPIC] if retried else topic,
            partition=origin_partition if retried and origin_partition is not None else partition,
            offset=origin_offset if retried and origin_offset is not None else offset,
            timestamp_ms=_int(values, H_TIMESTAMP) if retried else own_timestamp,
        )


def due_ms(not_before_ms: int | None, delay_s: int, timestamp_ms: int | None, first_read_ms: float) -> float:
    """When a record of a retry tier whose delay is ``delay_s`` falls due (epoch millis): its not-before
    header, clamped to ``delay_s`` past the earlier of its own Kafka timestamp and ``first_read_ms``,
    when this worker first read it.

    Retry headers are not signed, and a producer sets its records' timestamps: the clamp bounds how long
    any record can hold its partition, whatever either says. A record with no timestamp (None, or
    negative: librdkafka's "not available") counts from its first read. A not-before that is missing
    or not a number (None) waits the tier's whole delay; one in the past, negative included, is due now.

    Examples
    --------
    >>> due_ms(None, 10, 1_000, 5_000)
    11000
    >>> due_ms(10**15, 10, 1_000, 5_000)
    11000
    >>> due_ms(2_000, 10, 1_000, 5_000)
    2000
    """
    start = first_read_ms if timestamp_ms is None or timestamp_ms < 0 else min(timestamp_ms, first_read_ms)
    latest = start + delay_s * 1000
    return latest if not_before_ms is None else min(not_before_ms, latest)


@dataclass(frozen=True)
class RetryTiers:
    """Fixed-delay retry topics, shortest first; a record moves to a longer delay on each failure."""

    tiers: tuple[tuple[int, str], ...]
    max_attempts: int = 10

    def __post_init__(self) -> None:
        if not self.tiers:
            raise ValueError("at least one retry tier is needed")
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {self.max_attempts}")

    def tier_after(self, attempt: int, outcome: Outcome) -> tuple[int, str]:
        """The tier for a record that failed its ``attempt``-th try.

        A record waiting for its mark stays on the shortest tier: the mark commits within moments
        or the mark timeout turns it into IN_USE.
        """
        if outcome is Outcome.MARK_PENDING:
            return self.tiers[0]
        return self.tiers[min(attempt - 1, len(self.tiers) - 1)]

    def next_attempt(self, delivery: Delivery, outcome: Outcome) -> int:
        """Waiting for a mark is not a failed attempt; the mark timeout bounds those waits."""
        return delivery.attempt if outcome is Outcome.MARK_PENDING else delivery.attempt + 1

    def exhausted(self, delivery: Delivery, outcome: Outcome) -> bool:
        return outcome is not Outcome.MARK_PENDING and delivery.attempt >= self.max_attempts


def reroute_headers(delivery: Delivery, verdict: Verdict, now_ms: int, attempt: int,
                    delay_s: int | None, group_id: str = "") -> Headers:
    """Headers of a record sent to a retry tier (``delay_s`` set) or to the DLQ (``delay_s`` None).

    A dead letter also names ``group_id``, the group that dead-lettered it, and the verdict's stack
    summary when there is one.
    """
    headers: Headers = [
        (H_ATTEMPT, str(attempt).encode()),
        (H_FIRST_FAILURE, str(delivery.first_failure_ms or now_ms).encode()),
        (H_TOPIC, delivery.topic.encode()),
        (H_PARTITION, str(delivery.partition).encode()),
        (H_OFFSET, str(delivery.offset).encode()),
        (H_OUTCOME, verdict.outcome.value.encode()),
        (H_ERROR_CLASS, (verdict.error_class or verdict.outcome.name).encode()),
        (H_ERROR, verdict.reason.encode()[:MAX_ERROR_BYTES]),
    ]
    if delivery.timestamp_ms is not None:
        headers.append((H_TIMESTAMP, str(delivery.timestamp_ms).encode()))
    if delay_s is not None:
        headers.append((H_NOT_BEFORE, str(now_ms + delay_s * 1000).encode()))
        return headers
    if group_id:
        headers.append((H_GROUP, group_id.encode()))
    if verdict.stack:
        headers.append((H_STACK, verdict.stack.encode()[:MAX_STACK_BYTES]))
    return headers
