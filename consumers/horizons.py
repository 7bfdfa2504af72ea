"""Which polled records may have been handled before, so that phase 2 checks whether their objects
still exist before it counts a delete.

An S3 ``DeleteObjects`` reports a missing key as deleted; only a listing before the delete tells
``already-gone`` from ``deleted``, and a listing costs about as much as the delete. Reclaim pays it only
for records whose copy an earlier attempt may have deleted: records of a retry tier, and records of
the deletion topic below the partition's *horizon* — the end of the partition when this worker was
given it (an earlier owner may have deleted those and died before committing), raised to the last
record read whenever the worker seeks back (it reads its own records again). A record past the
horizon was produced after this worker owned the partition and is read for the first time.
"""

from __future__ import annotations

import logging
import sys
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_exponential

from reclaim.producers.kafka_errors import ErrorKind, classify, kafka_error_of

log = logging.getLogger(__name__)

Partition = tuple[str, int]

UNKNOWN = sys.maxsize
"""The horizon of a partition whose end could not be read at assignment: every record is doubtful."""

END_OFFSET_TIMEOUT_S = 5.0
"""How long an assignment waits for a partition's end offset."""


class Horizons:
    """Per partition, the offset from which records are read for the first time."""

    def __init__(self) -> None:
        self._fresh_from: dict[Partition, int] = {}
        self._read_to: dict[Partition, int] = {}

    def assigned(self, source: Partition, end_offset: int | None) -> None:
        """The partition is this worker's; ``end_offset`` is its end then (None: it could not be read)."""
        self._fresh_from[source] = UNKNOWN if end_offset is None else end_offset
        self._read_to.pop(source, None)

    def revoked(self, source: Partition) -> None:
        self._fresh_from.pop(source, None)
        self._read_to.pop(source, None)

    def read(self, source: Partition, offset: int) -> bool:
        """Note a record read; whether it may have been handled before (below the horizon)."""
        if offset >= self._read_to.get(source, -1):
            self._read_to[source] = offset + 1
        return offset < self._fresh_from.get(source, UNKNOWN)

    def sought_back(self, source: Partition) -> None:
        """The partition re-reads records this worker has read: they are below the horizon now."""
        read_to = self._read_to.get(source)
        if read_to is not None:
            self._fresh_from[source] = max(self._fresh_from.get(source, read_to), read_to)


def end_offset(consumer: Consumer, tp: TopicPartition) -> int | None:
    """The partition's end offset now, or None when the broker does not say in time.

    An error the broker says will pass is asked again within the same time: a topic created moments ago
    answers "not leader for partition" until its leader is known, and an unknown end would make every
    record of the partition doubtful (each listed before its delete).
    """
    deadline = time.monotonic() + END_OFFSET_TIMEOUT_S
    retrying = Retrying(stop=stop_after_delay(END_OFFSET_TIMEOUT_S), wait=wait_exponential(multiplier=0.05, max=0.5),
                        retry=retry_if_exception(_transient), reraise=True)
    try:
        for attempt in retrying:
            with attempt:
                left = max(deadline - time.monotonic(), 0.1)
                _, high = consumer.get_watermark_offsets(tp, timeout=left, cached=False)
    except KafkaException as exc:
        log.info("end of %s[%d] unknown at assignment (%s): every record of it is checked as redelivered",
                 tp.topic, tp.partition, exc)
        return None
    return int(high)


def _transient(exc: BaseException) -> bool:
    error = kafka_error_of(exc) if isinstance(exc, KafkaException) else None
    return error is not None and classify(error) is ErrorKind.RETRIABLE
