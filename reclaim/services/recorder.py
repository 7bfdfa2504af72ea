"""The retention recorder (PDP-19, controller side): every retention period, each stream's tail cut and size."""

from __future__ import annotations

import logging
from collections.abc import Callable

from reclaim.errors import ReclaimError
from reclaim.producers.publisher import ConfirmedPublisher
from reclaim.retention.errors import InvalidPolicyError
from reclaim.retention.policy import limits_of
from reclaim.retention.retention_set import recording_due
from reclaim.schemas.base import millis_now
from reclaim.schemas.streams import LimitType, RetentionPolicy, RetentionType, StreamCutRecord
from reclaim.segments.stream_model import StreamState
from reclaim.segments.streams import StreamController

log = logging.getLogger(__name__)


def _time_minimum(policy: RetentionPolicy) -> int:
    """The millis a policy's minimum keeps (0 unless its limits are times)."""
    try:
        limits = limits_of(policy)
    except InvalidPolicyError:
        return 0
    return limits.min_keep if limits is not None and limits.kind is LimitType.TIME else 0


class RetentionRecorder:
    """Records a :class:`StreamCutRecord` per stream with a retention policy whenever one is due.

    A stream's newest entry is remembered in memory: a restarted recorder records at once (one
    extra entry, harmless: the job keeps only entries newer than the last).
    """

    def __init__(self, controller: StreamController, publisher: ConfirmedPublisher, topic: str, period_ms: int,
                 clock: Callable[[], int] = millis_now) -> None:
        self.controller = controller
        self.publisher = publisher
        self.topic = topic
        self.period_ms = period_ms
        self.clock = clock
        self.latest: dict[str, StreamCutRecord] = {}
        self.skipped: dict[str, str] = {}  # the last tick's streams whose cut could not be read, with why

    def tick(self, force: bool = False) -> list[StreamCutRecord]:
        """Record every stream that is due (all of them with ``force``); returns what was recorded."""
        recorded: list[StreamCutRecord] = []
        self.skipped = {}
        now = self.clock()
        for stream in self.controller.store.list_streams():
            if stream.state is StreamState.DELETED or stream.policy.retention_type is RetentionType.NONE:
                continue
            if not force and not recording_due(self.latest.get(stream.qualified), now, self.period_ms):
                continue
            try:
                cut, size = self.controller.tail_cut(stream.qualified)
                record = StreamCutRecord(stream.qualified, cut, now, size, stream.incarnation or None)
                # Kept first: the applier checks a truncation against the time minimum by the cuts kept here.
                with self.controller.store.transaction() as txn:
                    txn.put_recorded(record, keep_from_ms=now - _time_minimum(stream.policy))
                self.publisher.publish(self.topic, record, stream.qualified)
            except ReclaimError as exc:
                # e.g. a segment of the stream missing, or its record refused by the broker: the other streams
                # are still recorded, and this one is tried again at the next tick
                log.warning("no cut recorded for %s: %s", stream.qualified, exc)
                self.skipped[stream.qualified] = str(exc)
                continue
            self.latest[stream.qualified] = record
            recorded.append(record)
            log.info("stream cut recorded stream=%s size=%d segments=%d", stream.qualified, size, len(cut))
        return recorded
