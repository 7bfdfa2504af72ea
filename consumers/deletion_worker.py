"""Phase 2 as a Kafka consumer group (``reclaim worker``): poll, judge and delete, route, store offsets.

Batches overlap: while the worker polls, decodes and checks one batch, a delete thread runs the
storage deletes of the batch before, and a cleanup thread the row cleanup of the one before that.
The worker routes batches and stores their offsets one by one, in poll order; when a partition is
sought back to a record whose reroute was not confirmed, the later records of it in batches already
in flight are not acked (their deletes are harmless: the re-read records find the copies gone).
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from consumers.retry import Delivery, RetryTiers, reroute_headers
from deletion import metrics
from deletion.executor import BatchPlan, DeleteResults, DeletionExecutor
from deletion.outcomes import Outcome, Route, Verdict
from producers.config import kafka_config
from producers.producer import DeliveryTracker, RecordProducer
from producers.topics import TopicNames
from schemas.codec import RecordCodec
from schemas.errors import RecordDecodeError
from schemas.ledger import PendingDeleteLedgerInfo

log = logging.getLogger(__name__)

Partition = tuple[str, int]

MAX_IN_FLIGHT = 2
"""Batches a worker keeps going behind the one it is checking: one deleting, one cleaning up rows."""

SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval in a worker process (Python's default is 5 ms)."""


def tune_interpreter() -> None:
    """Shorten the interpreter's thread switch interval for a worker process.

    The delete thread needs the GIL again at every reply chunk the object store sends, while the
    main thread holds it checking the next batch; with the default 5 ms interval each such wake-up
    can wait that long, several times a request, which stretches every batched delete.
    """
    sys.setswitchinterval(SWITCH_INTERVAL_S)


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
    delivery_timeout_s: float = 30.0
    consumer_overrides: Mapping[str, Any] = field(default_factory=dict)

    def consumer_config(self) -> dict[str, Any]:
        overrides: dict[str, Any] = {"group.id": self.group_id, "session.timeout.ms": 10000,
                                     "max.poll.interval.ms": 300000}
        if self.instance_id:
            # Static membership: a restarted worker takes its partitions back without a rebalance.
            overrides["group.instance.id"] = self.instance_id
        overrides.update(self.consumer_overrides)
        return kafka_config(self.bootstrap, "consumer", overrides)


@dataclass
class BatchReport:
    """What one batch did: records seen, outcomes, records re-routed, offsets stored."""

    received: int = 0
    held: int = 0
    outcomes: dict[Outcome, int] = field(default_factory=dict)
    retried: int = 0
    dead_lettered: int = 0
    stored: int = 0
    unconfirmed: int = 0


@dataclass
class _Item:
    msg: Message
    partition: Partition
    delivery: Delivery
    verdict: Verdict | None = None
    info: PendingDeleteLedgerInfo | None = None
    final: bool = False


@dataclass
class _Batch:
    """A polled batch after its checks; its storage deletes and row cleanup may be in flight."""

    items: list[_Item]
    decoded: list[_Item]
    plan: BatchPlan | None
    verdicts: Future[list[Verdict]] | None = None
    dropped: set[Partition] = field(default_factory=set)
    """Partitions sought back, after this batch was polled, to an earlier record that is not final."""


class DeletionWorker:
    """Consumes the deletion topic and its retry tiers; offsets are stored only for final records."""

    def __init__(self, config: WorkerConfig, executor: DeletionExecutor, codec: RecordCodec,
                 producer: RecordProducer | None = None) -> None:
        self._config = config
        self._executor = executor
        self._codec = codec
        self._tiers = RetryTiers(config.topics.retries, config.max_attempts)
        self._retry_topics = set(config.topics.retry_topics)
        self._producer = producer or RecordProducer(config.bootstrap, "idempotent-producer")
        self._consumer = Consumer(config.consumer_config())
        self._held: dict[Partition, float] = {}
        self._assigned: set[Partition] = set()
        self._in_flight: deque[_Batch] = deque()
        self._report = BatchReport()
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="reclaim-delete")
        self._cleaner = ThreadPoolExecutor(1, thread_name_prefix="reclaim-cleanup")
        self._consumer.subscribe(list(config.topics.deletion_inputs), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The batches in flight end, and their offsets are stored, while the partitions are still ours.
        self._complete_in_flight(self._report)
        for tp in partitions:
            self._held.pop((tp.topic, tp.partition), None)
            self._assigned.discard((tp.topic, tp.partition))

    @property
    def assigned(self) -> int:
        """How many partitions the group has given this worker, as its rebalance callbacks last said.

        Safe to read from any thread, unlike ``Consumer.assignment()``, which can block behind a
        ``consume`` running on the consumer's own thread.
        """
        return len(self._assigned)

    def wait_for_assignment(self, timeout_s: float = 30.0) -> bool:
        """Poll (handling whatever arrives) until the group has given this worker partitions."""
        deadline = time.monotonic() + timeout_s
        while not self.assigned:
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
        self._resume_due()
        timeout = 0.0 if self._in_flight else self._config.poll_timeout_s
        messages = self._consumer.consume(self._config.batch_size, timeout)
        report = self._report
        items = self._ready_items(messages, report)
        if items:
            self._start(self._check(items))
            while len(self._in_flight) > MAX_IN_FLIGHT:
                self._complete_oldest(report)
        elif self._in_flight:
            self._complete_oldest(report)
        self._report = BatchReport()
        return report

    def flush(self) -> BatchReport:
        """Complete every batch in flight; the report of what completed since the last call."""
        self._complete_in_flight(self._report)
        report, self._report = self._report, BatchReport()
        return report

    def _ready_items(self, messages: Sequence[Message], report: BatchReport) -> list[_Item]:
        now = time.time()
        items: list[_Item] = []
        held_now: set[Partition] = set()
        received: dict[str, int] = {}
        for msg in messages:
            error = msg.error()
            if error is not None:
                self._on_consume_error(error)
                continue
            topic, partition = msg.topic() or "", msg.partition() or 0
            key = (topic, partition)
            report.received += 1
            received[topic] = received.get(topic, 0) + 1
            if key in held_now:
                report.held += 1
                continue
            delivery = Delivery.of(topic, partition, msg.offset() or 0, msg.headers())
            if topic in self._retry_topics and delivery.not_before_ms and delivery.not_before_ms > now * 1000:
                self._hold(key, msg, delivery.not_before_ms / 1000)
                held_now.add(key)
                report.held += 1
                continue
            items.append(_Item(msg, key, delivery))
        for topic, count in received.items():
            metrics.MESSAGES_RECEIVED.labels(topic).inc(count)
        return items

    def _on_consume_error(self, error: KafkaError) -> None:
        if error.fatal():
            raise KafkaException(error)
        log.warning("consume error (librdkafka retries it): %s", error)

    def _hold(self, key: Partition, msg: Message, due: float) -> None:
        """A tier is FIFO in due time: pause the partition at its first record that is not due yet."""
        tp = TopicPartition(key[0], key[1], msg.offset() or 0)
        self._consumer.pause([tp])
        self._consumer.seek(tp)
        self._held[key] = due

    def _resume_due(self) -> None:
        now = time.time()
        due = [key for key, when in self._held.items() if when <= now]
        if due:
            self._consumer.resume([TopicPartition(topic, partition) for topic, partition in due])
            for key in due:
                del self._held[key]

    def _check(self, items: list[_Item]) -> _Batch:
        """Decode (undecodable records get their verdict here) and run the checks before any delete."""
        decoded: list[_Item] = []
        for item in items:
            try:
                item.info = self._codec.decode(item.msg.value() or b"", item.partition[0], PendingDeleteLedgerInfo)
                decoded.append(item)
            except RecordDecodeError as exc:
                item.verdict = Verdict(Outcome.UNDECODABLE, str(exc), type(exc).__name__)
        infos = [item.info for item in decoded if item.info is not None]
        return _Batch(items, decoded, self._executor.prepare(infos) if infos else None)

    def _start(self, batch: _Batch) -> None:
        """Queue the batch's storage deletes, and its row cleanup after them (each stage in order)."""
        plan = batch.plan
        if plan is not None:
            deleted = self._deleter.submit(self._executor.delete, plan)
            batch.verdicts = self._cleaner.submit(self._cleanup, plan, deleted)
        self._in_flight.append(batch)

    def _cleanup(self, plan: BatchPlan, deleted: Future[DeleteResults]) -> list[Verdict]:
        return self._executor.finish(plan, deleted.result())

    def _complete_in_flight(self, report: BatchReport) -> None:
        while self._in_flight:
            self._complete_oldest(report)

    def _complete_oldest(self, report: BatchReport) -> None:
        """Wait for the oldest batch's deletes and row cleanup, then route it and store its offsets."""
        batch = self._in_flight.popleft()
        try:
            if batch.verdicts is not None:
                for item, verdict in zip(batch.decoded, batch.verdicts.result(), strict=True):
                    item.verdict = verdict
            items = batch.items
            if batch.dropped:
                # Those partitions re-read from an earlier record: these records come again, unacked.
                log.debug("not acking this batch's records of %s: re-read from earlier", sorted(batch.dropped))
                items = [item for item in items if item.partition not in batch.dropped]
            self._reroute(items, report)
            sought = self._store_offsets(items, report)
        except BaseException:
            # This batch's offsets are not stored, so no later batch's may be: they would pass it.
            self._in_flight.clear()
            raise
        for later in self._in_flight:
            later.dropped |= sought

    def _reroute(self, items: list[_Item], report: BatchReport) -> None:
        self._reroute_items(items, report)
        for outcome, count in report.outcomes.items():
            metrics.OUTCOMES.labels(outcome.value).inc(count)

    def _reroute_items(self, items: list[_Item], report: BatchReport) -> None:
        tracker = DeliveryTracker()
        sent: dict[int, _Item] = {}
        now_ms = int(time.time() * 1000)
        for item in items:
            verdict = item.verdict
            assert verdict is not None
            report.outcomes[verdict.outcome] = report.outcomes.get(verdict.outcome, 0) + 1
            self._count(verdict)
            route = self._route(item)
            if route is Route.ACK:
                item.final = True
                continue
            topic, headers = self._destination(item, route, now_ms, report)
            index = len(sent)
            sent[index] = item
            self._producer.send(topic, item.msg.value(), key=item.msg.key(), headers=headers,
                                on_delivery=tracker.callback(index))
        if sent:
            unconfirmed = self._producer.wait(tracker, self._config.delivery_timeout_s)
            for index, item in sent.items():
                item.final = index not in unconfirmed
            report.unconfirmed += len(unconfirmed)

    def _route(self, item: _Item) -> Route:
        verdict = item.verdict
        assert verdict is not None
        if verdict.route is Route.RETRY and self._tiers.exhausted(item.delivery, verdict.outcome):
            metrics.MAX_RETRIES_REACHED.inc()
            return Route.DLQ
        return verdict.route

    def _destination(self, item: _Item, route: Route, now_ms: int,
                     report: BatchReport) -> tuple[str, list[tuple[str, bytes]]]:
        verdict = item.verdict
        assert verdict is not None
        if route is Route.DLQ:
            report.dead_lettered += 1
            metrics.DLQ_SENT.labels(verdict.outcome.value).inc()
            log.warning("to DLQ: topic=%s partition=%s offset=%s outcome=%s reason=%s", item.delivery.topic,
                        item.delivery.partition, item.delivery.offset, verdict.outcome.value, verdict.reason)
            return self._config.topics.dlq, reroute_headers(item.delivery, verdict, now_ms,
                                                            item.delivery.attempt, None)
        delay, topic = self._tiers.tier_after(item.delivery.attempt, verdict.outcome)
        report.retried += 1
        metrics.RETRIES_SENT.labels(topic).inc()
        attempt = self._tiers.next_attempt(item.delivery, verdict.outcome)
        return topic, reroute_headers(item.delivery, verdict, now_ms, attempt, delay)

    @staticmethod
    def _count(verdict: Verdict) -> None:
        if verdict.outcome is Outcome.IN_USE:
            metrics.IN_USE_SKIPS.inc()
        elif verdict.outcome is Outcome.OWNERSHIP_MISMATCH:
            metrics.OWNERSHIP_MISMATCHES.inc()
            log.warning("ownership mismatch, not deleted: %s", verdict.reason)
        elif verdict.outcome is Outcome.MARK_PENDING:
            metrics.MARK_PENDING_RETRIES.inc()

    def _store_offsets(self, items: list[_Item], report: BatchReport) -> set[Partition]:
        """Store each partition's offset past its last final record before the first one that is not;
        re-read the partition from that one. Returns the partitions so sought."""
        by_partition: dict[Partition, list[_Item]] = {}
        for item in items:
            by_partition.setdefault(item.partition, []).append(item)
        stored = 0
        offsets: list[TopicPartition] = []
        sought: set[Partition] = set()
        for (topic, partition), group in by_partition.items():
            group.sort(key=lambda it: it.msg.offset() or 0)
            final = 0
            while final < len(group) and group[final].final:
                final += 1
            if final:
                offsets.append(TopicPartition(topic, partition, (group[final - 1].msg.offset() or 0) + 1))
            if final < len(group):
                self._consumer.seek(TopicPartition(topic, partition, group[final].msg.offset() or 0))
                sought.add((topic, partition))
            stored += final
        if offsets:
            self._consumer.store_offsets(offsets=offsets)
            metrics.ACKED.inc(stored)
        report.stored += stored
        return sought

    def commit(self) -> None:
        """Complete the batches in flight, then commit the stored (final) offsets synchronously; nothing
        stored is not an error. What the completed batches did goes into the next report."""
        self._complete_in_flight(self._report)
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def close(self) -> None:
        """Complete the batches in flight, commit the stored (final) offsets synchronously, leave the group."""
        try:
            self.commit()
        except KafkaException as exc:
            log.warning("final commit failed: %s", exc)
        finally:
            self._deleter.shutdown()
            self._cleaner.shutdown()
        self._consumer.close()
        self._producer.close()
