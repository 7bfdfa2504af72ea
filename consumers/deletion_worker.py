"""Phase 2 as a Kafka consumer group (``reclaim worker``): the consumer loop.

Each ``run_once`` polls a batch, verifies it and holds retry tiers not due yet
(:mod:`reclaim.consumers.intake`), decodes it (:mod:`reclaim.consumers.batches` values), checks it
(:meth:`~reclaim.deletion.executor.DeletionExecutor.prepare`) and hands it to the in-flight pipeline
(:mod:`reclaim.consumers.pipeline`); completed batches are routed (:mod:`reclaim.consumers.routing`), re-routed
(:mod:`reclaim.consumers.rerouter`) and their offsets stored (:mod:`reclaim.consumers.offsets`), in poll order. When a
partition is sought back to a record whose reroute was not confirmed, the later records of it in
batches already in flight are not acked (their deletes are harmless: the re-read records find the
copies gone).
"""

from __future__ import annotations

import gc
import logging
import operator
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from reclaim.consumers.batches import BatchReport, Checked, Completed, Partition, Polled, Undecodable
from reclaim.consumers.intake import Intake
from reclaim.consumers.offsets import OffsetPlan, Position, all_final, plan_offsets
from reclaim.consumers.pipeline import MAX_IN_FLIGHT, BatchPipeline
from reclaim.consumers.rerouter import Rerouter
from reclaim.consumers.retry import RetryTiers
from reclaim.consumers.routing import ACK, route
from reclaim.deletion import metrics
from reclaim.deletion.executor import DeletionExecutor
from reclaim.deletion.facts import Pending
from reclaim.deletion.outcomes import ROUTES, Outcome, Route, Verdict, stack_summary
from reclaim.deletion.shapes import PendingReader
from reclaim.producers.config import kafka_config
from reclaim.producers.kafka_errors import check_committed, is_no_offset
from reclaim.producers.producer import RecordProducer
from reclaim.producers.topics import TopicNames
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.security.signing import RecordVerifier
from reclaim.stage_clock import stage

__all__ = ["MAX_IN_FLIGHT", "BatchReport", "DeletionWorker", "WorkerConfig", "tune_interpreter"]

log = logging.getLogger(__name__)

_OUTCOME = operator.attrgetter("outcome")
_SOURCE = operator.attrgetter("topic", "partition")
_OFFSET = operator.attrgetter("offset")

PREFETCH_KBYTES = 4 * 1024
"""librdkafka's local queue of pre-fetched records (its default is 64 MiB): a few batches' worth is
all a worker needs (4 MiB is about nine batches of 1000 pending deletes), and the queue is most of what
a draining worker's memory grows by: librdkafka keeps about as much again per message beside its bytes."""

SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval in a worker process (Python's default is 5 ms)."""

STRATEGIES = {"eager": "range,roundrobin", "cooperative-sticky": "cooperative-sticky"}
"""librdkafka's ``partition.assignment.strategy`` for each of the worker's assignments."""

METADATA_REFRESH_MS = 30_000
"""How often the worker's consumer refreshes topic metadata, so that it sees added partitions."""

GC_THRESHOLDS = (50_000, 20, 20)
"""The cycle collector's thresholds in a worker process (Python's default is 700, 10, 10)."""


def tune_interpreter() -> None:
    """Shorten the interpreter's thread switch interval and space out the cycle collector's passes for
    a worker process.

    The delete thread needs the GIL again at every reply chunk the object store sends, while the
    main thread holds it checking the next batch; with the default 5 ms interval each such wake-up
    can wait that long, several times a request, which stretches every batched delete.

    A batch allocates tens of thousands of objects (records, rows, verdicts) that reference counting
    frees, nearly none in cycles; at the default thresholds the collector ran a young-generation pass
    every 700 of them and, every hundred, a full pass over everything the process holds (boto3's
    service model among it): a fifth of the CPU of checking a batch. At 50,000 a young pass comes about
    once a batch, and the garbage that does form cycles still goes within a few batches.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)


@dataclass(frozen=True)
class WorkerConfig:
    """Settings of one phase-2 worker process."""

    bootstrap: str
    topics: TopicNames
    group_id: str = "reclaim-deletion"
    batch_size: int = 1000
    poll_timeout_s: float = 1.0
    max_attempts: int = 10
    instance_id: str | None = None
    assignment: str = "eager"
    """``eager`` (every rebalance revokes every partition) or ``cooperative-sticky`` (only those that move)."""
    delivery_timeout_s: float = 30.0
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)

    def consumer_config(self) -> dict[str, Any]:
        overrides: dict[str, Any] = {"group.id": self.group_id, "session.timeout.ms": 10000,
                                     "max.poll.interval.ms": 300000, "queued.max.messages.kbytes": PREFETCH_KBYTES,
                                     "partition.assignment.strategy": STRATEGIES[self.assignment],
                                     # Partitions added to the deletion topic are read within half a minute,
                                     # not librdkafka's default five.
                                     "topic.metadata.refresh.interval.ms": METADATA_REFRESH_MS}
        if self.instance_id:
            # Static membership: a restarted worker takes its partitions back without a rebalance.
            overrides["group.instance.id"] = self.instance_id
        overrides.update(self.consumer_overrides)
        return kafka_config(self.bootstrap, "consumer", overrides)


class DeletionWorker:
    """Consumes the deletion topic and its retry tiers; offsets are stored only for final records."""

    def __init__(self, config: WorkerConfig, executor: DeletionExecutor, codec: RecordCodec,
                 producer: RecordProducer | None = None, verifier: RecordVerifier | None = None) -> None:
        self._config = config
        self._executor = executor
        self._codec = codec
        # Pending deletes of a shape already read are matched against its template, not decoded again.
        self._reader = PendingReader.for_codec(codec)
        self._tiers = RetryTiers(config.topics.retries, config.max_attempts)
        self._rerouter = Rerouter(producer or RecordProducer(config.bootstrap, "idempotent-producer"),
                                  config.delivery_timeout_s)
        self._pipeline = BatchPipeline(executor)
        self._consumer = Consumer(config.consumer_config())
        self._assigned: set[Partition] = set()
        self._intake = Intake(self._consumer, config.topics, verifier)
        self._report = BatchReport()
        metrics.LAST_PROGRESS.set_to_current_time()  # a worker that never stores an offset shows since when
        self._consumer.subscribe(list(config.topics.deletion_inputs), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_lost)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Assigned here rather than by the client after this callback, so that each partition's pause can be
        # set from this worker's holds before anything is fetched (Intake.assigned).
        if self._config.assignment == "cooperative-sticky":
            consumer.incremental_assign(partitions)
        else:
            consumer.assign(partitions)
        sources = [(tp.topic, tp.partition) for tp in partitions]
        self._assigned.update(sources)
        self._intake.assigned(sources)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The batches in flight end, and their offsets are stored, while the partitions are still ours.
        self._complete_all()
        self._forget(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # Already another worker's: no offset of ours can be stored, and finishing the batches in
        # flight would only send their deletes a second time.
        cancelled = self._pipeline.abandon()
        log.warning("lost %d partition(s) (the group's session expired): batches in flight abandoned, %d queued "
                    "delete(s) cancelled; their records are read again by the partitions' new owner",
                    len(partitions), cancelled)
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        sources = [(tp.topic, tp.partition) for tp in partitions]
        self._intake.revoked(sources)
        self._assigned.difference_update(sources)

    @property
    def assigned(self) -> int:
        """How many partitions the group has given this worker, as its rebalance callbacks last said.

        Safe to read from any thread, unlike ``Consumer.assignment()``, which can block behind a
        ``consume`` running on the consumer's own thread.
        """
        return len(self._assigned)

    @property
    def held(self) -> int:
        """How many retry-tier partitions this worker holds paused until their first record is due."""
        return self._intake.held

    def wait_for_assignment(self, timeout_s: float = 30.0, partitions: int = 1) -> bool:
        """Poll (handling whatever arrives) until the group has given this worker at least ``partitions``
        partitions. A group whose topics are new may first assign only those it has metadata for."""
        deadline = time.monotonic() + timeout_s
        while self.assigned < partitions:
            if time.monotonic() >= deadline:
                return False
            self.run_once()
        return True

    def run(self, stop: threading.Event) -> None:
        """Poll and handle batches until ``stop`` is set; the batch in flight always finishes."""
        log.info("deletion worker started: group=%s topics=%s", self._config.group_id,
                 ",".join(self._config.topics.deletion_inputs))
        try:
            while not stop.is_set():
                self.run_once()
        finally:
            self.close()

    def run_once(self) -> BatchReport:
        """Poll and check one batch and start its deletes; complete the batches in flight beyond
        ``MAX_IN_FLIGHT`` (or the oldest one, when the poll brought nothing).

        The report counts the records this call polled and the outcomes of the batches it completed.
        With batches in flight the poll does not wait: whatever is already fetched overlaps them.
        """
        self._intake.resume_due()
        timeout = 0.0 if len(self._pipeline) else self._config.poll_timeout_s
        messages = self._consumer.consume(self._config.batch_size, timeout)
        with stage("poll"):
            taken = self._intake.take(messages)
        self._report += taken.report
        if taken.ready or taken.refused:
            self._pipeline.start(self._check(taken.ready, taken.refused))
            while self._pipeline.over_depth:
                self._complete_oldest()
        elif len(self._pipeline):
            self._complete_oldest()
        return self._take_report()

    def flush(self) -> BatchReport:
        """Complete every batch in flight; the report of what completed since the last call."""
        self._complete_all()
        return self._take_report()

    def _take_report(self) -> BatchReport:
        report, self._report = self._report, BatchReport()
        return report

    def _check(self, polled: list[Polled], refused: list[Undecodable]) -> Checked:
        """Decode the verified records (undecodable ones get their verdict here, beside the ``refused``
        ones), then run the checks before any delete."""
        with stage("decode"):
            decoded, pending, undecodable = self._decode(polled, refused)
        plan = None
        if pending:
            # "prepare" is facts + judge: the facts are timed on their own inside it.
            with stage("prepare"):
                plan = self._executor.prepare(pending)
        return Checked(tuple(decoded), tuple(undecodable), plan)

    def _decode(self, polled: list[Polled], refused: list[Undecodable]
                ) -> tuple[list[Polled], list[Pending], list[Undecodable]]:
        """The records that decoded and their pending deletes (side by side), and those refused or
        undecodable."""
        decoded: list[Polled] = []
        pending: list[Pending] = []
        undecodable: list[Undecodable] = list(refused)
        reader = self._reader
        if reader is not None:
            reader.new_batch()
        for record in polled:
            try:
                info = (reader.decode(record.value or b"", record.topic) if reader is not None else
                        self._codec.decode(record.value or b"", record.topic, PendingDeleteLedgerInfo))
            except RecordDecodeError as exc:
                undecodable.append(Undecodable(record, Verdict(Outcome.UNDECODABLE, str(exc), type(exc).__name__,
                                                               stack_summary(exc))))
            else:
                decoded.append(record)
                pending.append(Pending(info, record.delivery.first_failure_ms))
        return decoded, pending, undecodable

    def _complete_all(self) -> None:
        while len(self._pipeline):
            self._complete_oldest()

    def _complete_oldest(self) -> None:
        """Wait for the oldest batch's deletes and row cleanup, then route it and store its offsets."""
        completed = self._pipeline.complete_oldest()
        try:
            with stage("route"):
                report = self._settle(completed)
        except BaseException:
            # This batch's offsets are not stored, so no later batch's may be: they would pass it.
            self._pipeline.clear()
            raise
        self._report += report

    def _settle(self, completed: Completed) -> BatchReport:
        """Route a completed batch, send its reroutes, store the offsets of its final records."""
        polled, verdicts = completed.polled, completed.verdicts
        if completed.dropped:
            kept = [i for i, p in enumerate(polled) if (p.topic, p.partition) not in completed.dropped]
            if len(kept) < len(polled):
                # Those partitions re-read from an earlier record: these records come again, unacked.
                log.debug("not acking this batch's records of %s: re-read from earlier", sorted(completed.dropped))
                polled, verdicts = tuple(polled[i] for i in kept), tuple(verdicts[i] for i in kept)
        outcomes = Counter(map(_OUTCOME, verdicts))
        _count_outcomes(outcomes, verdicts)
        if all(ROUTES[outcome] is Route.ACK for outcome in outcomes):
            # Nearly every batch: every record acked, so nothing to send or seek back to, and no routing
            # or Position a record to build.
            return self._store(all_final(zip(map(_SOURCE, polled), map(_OFFSET, polled), strict=True)), outcomes)
        now_ms = int(time.time() * 1000)
        routings = [route(v, p.delivery, self._tiers, self._config.topics.dlq, now_ms, self._config.group_id)
                    for p, v in zip(polled, verdicts, strict=True)]
        sends = [(i, (p, v, r)) for i, (p, v, r) in enumerate(zip(polled, verdicts, routings, strict=True))
                 if r is not ACK]
        unconfirmed = {sends[i][0] for i in self._rerouter.send([send for _, send in sends])}
        plan = plan_offsets(Position((p.topic, p.partition), p.offset, i not in unconfirmed)
                            for i, p in enumerate(polled))
        dead = sum(1 for r in routings if r.route is Route.DLQ)
        return self._store(plan, outcomes, retried=len(sends) - dead, dead_lettered=dead, unconfirmed=len(unconfirmed))

    def _store(self, plan: OffsetPlan, outcomes: Counter[Outcome], retried: int = 0, dead_lettered: int = 0,
               unconfirmed: int = 0) -> BatchReport:
        """Store a settled batch's offsets and seek its partitions back where the plan says; its report."""
        if plan.store:
            self._consumer.store_offsets(offsets=[TopicPartition(t, p, o) for (t, p), o in plan.store.items()])
            metrics.ACKED.inc(plan.acked)
            metrics.LAST_PROGRESS.set_to_current_time()
        for (topic, partition), offset in plan.seek.items():
            self._consumer.seek(TopicPartition(topic, partition, offset))
        self._pipeline.drop(plan.seek)
        return BatchReport(outcomes=dict(outcomes), retried=retried, dead_lettered=dead_lettered,
                           stored=plan.acked, unconfirmed=unconfirmed)

    def commit(self) -> None:
        """Complete the batches in flight, then commit the stored (final) offsets synchronously; nothing
        stored is not an error. What the completed batches did goes into the next report."""
        self._complete_all()
        try:
            check_committed(self._consumer.commit(asynchronous=False))
        except KafkaException as exc:
            if not is_no_offset(exc):
                raise

    def close(self) -> None:
        """Complete the batches in flight, commit the stored (final) offsets synchronously, leave the group."""
        try:
            self.commit()
        except KafkaException as exc:
            log.warning("final commit failed: %s", exc)
        finally:
            self._pipeline.shutdown()
            self._executor.close()
        self._consumer.close()
        self._rerouter.close()


def _count_outcomes(outcomes: Counter[Outcome], verdicts: Sequence[Verdict]) -> None:
    """The outcome counters of one completed batch (each record counted once, by the batch it ended in)."""
    for outcome, count in outcomes.items():
        metrics.OUTCOMES.labels(metrics.snake(outcome.value)).inc(count)
    metrics.IN_USE_SKIPS.inc(outcomes[Outcome.IN_USE])
    metrics.MARK_PENDING_RETRIES.inc(outcomes[Outcome.MARK_PENDING])
    metrics.OWNERSHIP_MISMATCHES.inc(outcomes[Outcome.OWNERSHIP_MISMATCH])
    if outcomes[Outcome.OWNERSHIP_MISMATCH]:
        for verdict in verdicts:
            if verdict.outcome is Outcome.OWNERSHIP_MISMATCH:
                log.warning("ownership mismatch, not deleted: %s", verdict.reason)
