"""The retention job's progress: one log line and Prometheus metrics per micro-batch, from a query listener."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from pyspark.sql.streaming.listener import StreamingQueryListener

from reclaim.schemas.rejects import RejectKind

if TYPE_CHECKING:
    from pyspark.sql.column import Column
    from pyspark.sql.streaming.listener import (
        QueryIdleEvent,
        QueryProgressEvent,
        QueryStartedEvent,
        QueryTerminatedEvent,
        SourceProgress,
        StreamingQueryProgress,
    )

log = logging.getLogger(__name__)

OBSERVATION = "retention"
"""The name of the ``DataFrame.observe`` metrics on the stateful step's output."""

disable_created_metrics()  # type: ignore[no-untyped-call]  # no process of reclaim exports _created series
INPUT_ROWS = Counter("reclaim_retention_input_rows", "Kafka messages the retention job read (its wake-ups included)")
STREAMS_DECIDED = Counter("reclaim_retention_streams_decided", "Streams whose truncation was decided, per batch")
EVENTS_EMITTED = Counter("reclaim_retention_truncations_emitted", "TruncationEvents written to the truncation topic")
REJECTS = Counter("reclaim_retention_rejects", "Inputs written to the rejects topic, by kind (lower-case snake)",
                  ["kind"])
for _kind in RejectKind:
    REJECTS.labels(kind=_kind.name.lower())  # every kind's series from 0
BATCH_DURATION = Histogram("reclaim_retention_batch_duration_seconds", "Duration of one retention micro-batch",
                           buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120))
STATE_ROWS = Gauge("reclaim_retention_state_rows",
                   "Rows in the job's state store after the last batch (one per state bucket that holds streams)")
STATE_MEMORY = Gauge("reclaim_retention_state_memory_bytes",
                     "Memory the job's state store used after the last batch, as Spark reports it")
OFFSETS_BEHIND = Gauge("reclaim_retention_input_offsets_behind_latest",
                       "Input messages the last batch left unread on its busiest partition "
                       "(the Kafka source's maxOffsetsBehindLatest)")
LAST_PROGRESS = Gauge("reclaim_retention_last_progress_timestamp_seconds",
                      "When the retention query last showed progress (a batch, or an idle report; before the "
                      "first, when the query or the process started), Unix time")
# A job that never gets to its first batch is stalled too: the clock starts with the process.
LAST_PROGRESS.set_to_current_time()


def observed_columns() -> list[Column]:
    """The aggregates observed on every batch's output: streams decided, events, rejects by kind."""
    from pyspark.sql import functions as F

    def count(condition: Column, name: str) -> Column:
        return F.count(F.when(condition, True)).alias(name)

    outcome, kind = F.col("outcome"), F.col("reject_kind")
    return [
        count(outcome == "decided", "streams_decided"),
        count(outcome == "truncation", "events"),
        *(count(kind == k.name, f"rejects_{k.name}") for k in RejectKind),
    ]


@dataclass(frozen=True)
class BatchSummary:
    """What one micro-batch did: rows in, streams decided, events out, rejects by kind, and how long it took;
    and what it left: the state store's rows and memory, and the input it left unread (None when the
    source did not say)."""

    batch_id: int
    input_rows: int
    streams_decided: int
    events: int
    rejects: Mapping[str, int] = field(default_factory=dict)
    duration_ms: int = 0
    state_rows: int = 0
    state_memory_bytes: int = 0
    offsets_behind_latest: int | None = None

    @property
    def reject_count(self) -> int:
        return sum(self.rejects.values())

    @classmethod
    def of(cls, progress: StreamingQueryProgress) -> BatchSummary:
        """Read a query progress; a batch without output (no rows, no timeouts) observes nothing: zeros."""
        row = progress.observedMetrics.get(OBSERVATION)
        observed: dict[str, Any] = row.asDict() if row is not None else {}
        rejects = {k.name: int(observed.get(f"rejects_{k.name}") or 0) for k in RejectKind}
        operators = list(progress.stateOperators or ())
        return cls(batch_id=int(progress.batchId), input_rows=int(progress.numInputRows),
                   streams_decided=int(observed.get("streams_decided") or 0),
                   events=int(observed.get("events") or 0),
                   rejects={kind: n for kind, n in rejects.items() if n},
                   duration_ms=int(progress.durationMs.get("triggerExecution", 0)),
                   state_rows=sum(int(op.numRowsTotal) for op in operators),
                   state_memory_bytes=sum(int(op.memoryUsedBytes) for op in operators),
                   offsets_behind_latest=offsets_behind_latest(progress.sources))

    def log_line(self) -> str:
        kinds = ",".join(f"{kind}={n}" for kind, n in sorted(self.rejects.items())) or "-"
        return (f"retention batch {self.batch_id}: input_rows={self.input_rows} streams_decided={self.streams_decided} "
                f"events={self.events} rejects={self.reject_count} ({kinds}) duration_ms={self.duration_ms}")


def offsets_behind_latest(sources: Iterable[SourceProgress] | None) -> int | None:
    """The most messages any source left unread on one partition (Spark's Kafka source reports
    ``maxOffsetsBehindLatest``); None when no source reported it."""
    reported = []
    for source in sources or ():
        value = (source.metrics or {}).get("maxOffsetsBehindLatest")
        if value is None:  # not a Kafka source, or one that has not planned a batch yet
            continue
        try:
            reported.append(int(float(value)))
        except ValueError:  # not a number: the source did not say
            continue
    return max(reported, default=None)


class RetentionProgressListener(StreamingQueryListener):
    """Logs one line per batch of the query named ``query_name`` and counts it in Prometheus.

    Spark delivers listener events asynchronously; :meth:`wait_for_batch` lets a caller that is
    about to stop know the last batch has been counted. Every batch, idle report and the query's start
    set the last-progress gauge to ``clock()``.
    """

    def __init__(self, query_name: str, clock: Callable[[], float] = time.time) -> None:
        self.query_name = query_name
        self.clock = clock
        self.recent: deque[BatchSummary] = deque(maxlen=100)
        self._last_batch = -1
        self._seen = threading.Condition()
        self._runs: set[str] = set()  # this query's run ids: an idle event carries no name
        LAST_PROGRESS.set(clock())  # the query is about to start: its first batch is due from now

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        if event.name == self.query_name:
            self._runs.add(str(event.runId))
            LAST_PROGRESS.set(self.clock())
            log.info("retention query %s started (run %s)", event.id, event.runId)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        if event.progress.name != self.query_name:
            return
        summary = BatchSummary.of(event.progress)
        log.info(summary.log_line())
        record(summary)
        LAST_PROGRESS.set(self.clock())
        with self._seen:
            self.recent.append(summary)
            self._last_batch = max(self._last_batch, summary.batch_id)
            self._seen.notify_all()

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        # Spark reports an idle query (no batch: nothing new, no timeouts due) every 10 s: alive, not stalled.
        if str(event.runId) in self._runs:
            LAST_PROGRESS.set(self.clock())

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        if event.exception:
            log.error("retention query %s failed: %s", event.id, event.exception.splitlines()[0])

    def wait_for_batch(self, batch_id: int, timeout_s: float) -> bool:
        """Wait until the progress of ``batch_id`` (or a later batch) has been counted."""
        with self._seen:
            return self._seen.wait_for(lambda: self._last_batch >= batch_id, timeout_s)


def record(summary: BatchSummary) -> None:
    """Add one batch to the Prometheus counters and set the gauges to what it left."""
    INPUT_ROWS.inc(summary.input_rows)
    STREAMS_DECIDED.inc(summary.streams_decided)
    EVENTS_EMITTED.inc(summary.events)
    for kind, count in summary.rejects.items():
        REJECTS.labels(kind=kind.lower()).inc(count)
    BATCH_DURATION.observe(summary.duration_ms / 1000)
    STATE_ROWS.set(summary.state_rows)
    STATE_MEMORY.set(summary.state_memory_bytes)
    if summary.offsets_behind_latest is not None:
        OFFSETS_BEHIND.set(summary.offsets_behind_latest)
