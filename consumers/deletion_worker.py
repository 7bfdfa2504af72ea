"""Phase 2 as a Kafka consumer group (``reclaim worker``): poll, judge and delete, route, store offsets.

A worker keeps at most one batch's storage deletes in flight on a thread of its own while it polls,
decodes and checks the next batch; it completes that batch (row cleanup, routing, offsets) before
the next one's deletes start, so offsets are stored batch by batch, in order.
"""

from __future__ import annotations

import logging
import threading
import time
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
    """A polled batch after its checks; its storage deletes may be in flight."""

    items: list[_Item]
    decoded: list[_Item]
    plan: BatchPlan | None
    deleting: Future[DeleteResults] | None = None


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
        self._in_flight: _Batch | None = None
        self._report = BatchReport()
        self._deleter = ThreadPoolExecutor(1, thread_name_prefix="reclaim-delete")
        self._consumer.subscribe(list(config.topics.deletion_inputs), on_assign=self._on_assign,
                                 on_revoke=self._on_revoke, on_lost=self._on_revoke)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._assigned.update((tp.topic, tp.partition) for tp in partitions)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        # The batch in flight ends, and its offsets are stored, while the partitions are still ours.
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
        """Poll one batch, check it, complete the batch in flight, start the new batch's deletes.

        The report counts the records this call polled and the outcomes of the batches it completed.
        With a batch in flight the poll does not wait: whatever is already fetched overlaps its deletes.
        """
        self._resume_due()
        timeout = 0.0 if self._in_flight else self._config.poll_timeout_s
        messages = self._consumer.consume(self._config.batch_size, timeout)
        report = self._report
        items = self._ready_items(messages, report)
        batch = self._check(items) if items else None
        sought = self._complete_in_flight(report)
        if batch is not None and sought:
            # Those partitions re-read from an earlier record; this batch's later ones come again.
            log.debug("dropping this batch's records of %s: their partitions re-read from earlier", sorted(sought))
            batch = self._check([item for item in batch.items if item.partition not in sought])
        if batch is not None and batch.items:
            self._start(batch)
        self._report = BatchReport()
        return report

    def flush(self) -> BatchReport:
        """Complete the batch in flight, if any; the report of what completed since the last call."""
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
            if item.info is None and item.verdict is None:
                try:
                    item.info = self._codec.decode(item.msg.value() or b"", item.partition[0],
                                                   PendingDeleteLedgerInfo)
                except RecordDecodeError as exc:
                    item.verdict = Verdict(Outcome.UNDECODABLE, str(exc), type(exc).__name__)
            if item.info is not None:
                decoded.append(item)
        infos = [item.info for item in decoded if item.info is not None]
        return _Batch(items, decoded, self._executor.prepare(infos) if infos else None)

    def _start(self, batch: _Batch) -> None:
        if batch.plan is not None and batch.plan.deletable:
            batch.deleting = self._deleter.submit(self._executor.delete, batch.plan)
        self._in_flight = batch

    def _complete_in_flight(self, report: BatchReport) -> set[Partition]:
        """Wait for the batch in flight's deletes, then clean rows, route and store offsets.

        Returns the partitions sought back to a record that is not final.
        """
        batch, self._in_flight = self._in_flight, None
        if batch is None:
            return set()
        if batch.plan is not None:
            results = batch.deleting.result() if batch.deleting is not None else {}
            for item, verdict in zip(batch.decoded, self._executor.finish(batch.plan, results), strict=True):
                item.verdict = verdict
        self._reroute(batch.items, report)
        return self._store_offsets(batch.items, report)

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
        """Complete the batch in flight, then commit the stored (final) offsets synchronously; nothing
        stored is not an error. What the completed batch did goes into the next report."""
        self._complete_in_flight(self._report)
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def close(self) -> None:
        """Complete the batch in flight, commit the stored (final) offsets synchronously, leave the group."""
        try:
            self.commit()
        except KafkaException as exc:
            log.warning("final commit failed: %s", exc)
        finally:
            self._deleter.shutdown()
        self._consumer.close()
        self._producer.close()
