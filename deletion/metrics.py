"""Prometheus metrics of the two-phase deletion protocol: PIP-186's Monitor section and reclaim's own.

Label values are lower-case snake (:func:`reclaim.storage.metrics.snake`); every series whose label values are
known is created at 0 — the enums' at import, the topics' and bindings' by :func:`initialise` — so
``rate()`` and ``increase()`` see a counter's first increase.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram

from reclaim.deletion.outcomes import ROUTES, Outcome, Route
from reclaim.schemas.ledger import LedgerType
from reclaim.storage.metrics import ERROR_OUTCOMES
from reclaim.storage.metrics import snake as snake  # the call sites' label values

PENDING_DELETES_SENT = Counter(
    "reclaim_pending_deletes_sent", "PendingDeleteLedgerInfo records confirmed on the deletion topic",
    ["ledger_type"])
MARK_BATCHES = Counter("reclaim_mark_batches", "Phase-1 mark batches, by result", ["result"])
MESSAGES_RECEIVED = Counter("reclaim_deletion_messages_received", "Records the phase-2 consumer received",
                            ["topic"])
DELETED = Counter("reclaim_ledgers_deleted", "Chunk copies deleted from storage", ["ledger_type"])
DELETE_FAILURES = Counter("reclaim_ledger_delete_failures", "Chunk copies whose delete failed",
                          ["ledger_type", "reason"])
OUTCOMES = Counter("reclaim_deletion_outcomes", "Phase-2 outcomes of pending deletes", ["outcome"])
ACKED = Counter("reclaim_deletion_messages_acked", "Records whose offset was stored as final")
MAX_RETRIES_REACHED = Counter("reclaim_deletion_max_retries_reached",
                              "Records that reached max_attempts and went to the DLQ")
IN_USE_SKIPS = Counter("reclaim_deletion_in_use_skips", "Records acked because the chunk is still live")
OWNERSHIP_MISMATCHES = Counter("reclaim_deletion_ownership_mismatches",
                               "Records acked without deleting because ownership did not match")
MARK_PENDING_RETRIES = Counter("reclaim_deletion_mark_pending_retries",
                               "Records retried because their mark was not committed yet")
RETRIES_SENT = Counter("reclaim_deletion_retries_sent", "Records sent to a retry tier", ["tier"])
DLQ_SENT = Counter("reclaim_deletion_dlq_sent", "Records sent to the dead-letter topic", ["reason"])
DELETE_LATENCY = Histogram("reclaim_deletion_batch_delete_seconds",
                           "Time of one batched storage delete", ["binding"],
                           buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10))
RETRY_HELD = Gauge("reclaim_deletion_retry_held_partitions",
                   "Retry-tier partitions this worker holds paused until their first record is due",
                   multiprocess_mode="livesum")
LAST_PROGRESS = Gauge("reclaim_deletion_last_progress_timestamp_seconds",
                      "When this worker last stored an offset as final (its start, before the first)",
                      multiprocess_mode="livemax")
STALL_AFTER = Gauge("reclaim_deletion_stall_after_seconds",
                    "The worker's stall_after_s: how long its group may go without progress before "
                    "ReclaimDeletionNoProgress fires", multiprocess_mode="livemax")
INFLIGHT = Gauge("reclaim_estimated_inflight_deletions",
                 "Consumer-group lag over the deletion topic and its retry tiers")

#: The label values of the enums, as the call sites write them.
LEDGER_TYPES = tuple(snake(t.name) for t in LedgerType)
MARK_RESULTS = ("complete", "partial", "failed", "expired")
OUTCOME_LABELS = tuple(snake(o.value) for o in Outcome)
#: A record reaches the DLQ with an outcome routed there, or with a retried one whose attempts ran out.
DLQ_REASONS = tuple(snake(o.value) for o, route in ROUTES.items() if route is not Route.ACK)


def _zero_known() -> None:
    for ledger_type in LEDGER_TYPES:
        PENDING_DELETES_SENT.labels(ledger_type)
        DELETED.labels(ledger_type)
        for reason in ERROR_OUTCOMES:
            DELETE_FAILURES.labels(ledger_type, reason)
    for result in MARK_RESULTS:
        MARK_BATCHES.labels(result)
    for outcome in OUTCOME_LABELS:
        OUTCOMES.labels(outcome)
    for reason in DLQ_REASONS:
        DLQ_SENT.labels(reason)


_zero_known()


def initialise(input_topics: Iterable[str], retry_topics: Iterable[str], bindings: Iterable[str] = ()) -> None:
    """Create the zero series a worker's configuration names: the topics it reads, its retry tiers and
    the bindings it deletes from. The worker calls this at start, before its metrics are served."""
    for topic in input_topics:
        MESSAGES_RECEIVED.labels(topic)
    for tier in retry_topics:
        RETRIES_SENT.labels(tier)
    for binding in bindings:
        DELETE_LATENCY.labels(binding)
