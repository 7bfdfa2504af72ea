"""The Kafka-topic applier: the retention job's DeleteRecords decisions for plain Kafka topics
(:class:`~reclaim.schemas.topic_retention.TopicTruncation`), checked and applied, each partition's move journaled.

A decision is obeyed only when every one of these holds, else it is refused and changes nothing:

- it is signed by the retention job's key (with record authentication on);
- the topic is under an active consumption retention policy now, an admin's (``policies``), the one the decision
  was made under: a decision made before the policy changed (a group added, the minimum raised) is skipped, and
  the job decides again under the new one;
- the topic now has the id the decision names: a topic deleted and created again under its name is not touched.

Then, for each partition whose start is behind the decided one, ``DeleteRecords`` in one request; the low
watermarks returned must reach the decided starts. Already there is success (a replay, a duplicate from the job's
at-least-once sink). A retriable broker error (leader moving, timeout) is retried in place with backoff, blocking
its partition of the decision topic; one that keeps failing, or one that cannot succeed (authorization, a policy
violation), goes to the decision topic's dead-letter topic with its reason, and the job emits the decision again
while the poller still sees the partition behind it.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import Consumer, Message, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from prometheus_client import Counter

from reclaim.exits import Unavailable
from reclaim.producers.config import kafka_config
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.schemas.codec import RecordCodec
from reclaim.schemas.errors import RecordDecodeError
from reclaim.schemas.topic_retention import TopicRetentionPolicy, TopicTruncation
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordVerifier, Signer, Unauthenticated
from reclaim.storage.metadata import MetadataStore, TopicTruncationEntry
from reclaim.tools.topic_retention import (
    ADMIN_TIMEOUT_S,
    DeleteFailed,
    TopicRetentionError,
    delete_records,
    describe_topic,
    result_of,
)

log = logging.getLogger(__name__)

APPLIED = Counter("reclaim_topic_truncations_total", "DeleteRecords decisions the Kafka-topic applier read, by "
                  "outcome", ["outcome"])
RECORDS_DELETED = Counter("reclaim_topic_records_deleted_total", "Records the Kafka-topic applier deleted "
                          "(DeleteRecords), by topic", ["topic"])


class TopicOutcome(enum.Enum):
    """What became of one decision."""

    DELETED = "deleted"
    NO_OP = "no-op"  # every partition at or past its decided start already
    REFUSED = "refused"  # unsigned or forged, no active policy, another policy version, another topic id
    INVALID = "invalid"  # undecodable
    DEAD_LETTERED = "dead-lettered"  # DeleteRecords failed for good, or too often
    RETRY = "retry"  # the brokers did not answer: read again later

    @property
    def final(self) -> bool:
        return self is not TopicOutcome.RETRY


for _outcome in TopicOutcome:
    APPLIED.labels(_outcome.name.lower())


@dataclass(frozen=True)
class TopicApplierConfig:
    bootstrap: str
    topic: str
    dlq: str
    group_id: str = "reclaim-topic-truncation"
    poll_timeout_s: float = 1.0
    retry_backoff_s: float = 1.0
    max_attempts: int = 10


class TopicApplier:
    """A consumer-group member on the decision topic that applies each decision in partition order."""

    def __init__(self, config: TopicApplierConfig, admin: AdminClient, store: MetadataStore, codec: RecordCodec,
                 policies: Callable[[], dict[str, TopicRetentionPolicy]], verifier: RecordVerifier | None = None,
                 sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.time) -> None:
        self.config, self.admin, self.store, self.codec = config, admin, store, codec
        self.policies, self.verifier, self.sleep, self.clock = policies, verifier, sleep, clock
        self.attempts: dict[tuple[int, int], int] = {}
        self.consumer = Consumer(kafka_config(config.bootstrap, "consumer", {"group.id": config.group_id}))
        self.consumer.subscribe([config.topic])
        self.producer = RecordProducer(config.bootstrap, "idempotent-producer")

    def apply(self, message: Message) -> TopicOutcome:
        """One decision record, checked, applied and journaled; every outcome but RETRY is final for its offset."""
        topic, partition, offset = message.topic() or "", message.partition() or 0, message.offset() or 0
        where = f"{topic}[{partition}]@{offset}"
        signer: Signer | None = None
        if self.verifier is not None:
            verified = self.verifier.verify(topic, message.key(), message.value(), message.headers() or [],
                                            signers_of(TopicTruncation))
            if isinstance(verified, Unauthenticated):
                return TopicOutcome.REFUSED
            signer = verified
        try:
            decision = self.codec.decode(message.value() or b"", topic, TopicTruncation)
        except RecordDecodeError as exc:
            if exc.retryable:
                return TopicOutcome.RETRY
            log.error("topic truncation undecodable at %s: %s", where, exc)
            return TopicOutcome.INVALID
        try:
            refusal = self._refusal(decision)
        except Unavailable as exc:
            log.warning("topic truncation at %s must wait: %s", where, exc)
            return TopicOutcome.RETRY
        if refusal is not None:
            log.warning("topic truncation of %s at %s refused: %s", decision.topic, where, refusal)
            return TopicOutcome.REFUSED
        try:
            moved = delete_records(self.admin, decision.topic, decision.starts.as_dict())
        except DeleteFailed as exc:
            attempts = self.attempts[(partition, offset)] = self.attempts.get((partition, offset), 0) + 1
            if exc.retriable and attempts < self.config.max_attempts:
                log.warning("DeleteRecords for %s at %s failed (attempt %d): %s", decision.topic, where, attempts, exc)
                return TopicOutcome.RETRY
            self._dead_letter(message, str(exc))
            return TopicOutcome.DEAD_LETTERED
        self.attempts.pop((partition, offset), None)
        self._journal(decision, moved, signer, where)
        return TopicOutcome.DELETED if moved else TopicOutcome.NO_OP

    def _refusal(self, decision: TopicTruncation) -> str | None:
        policy = self.policies().get(decision.topic)
        if policy is None or not policy.active:
            return "the topic is not under consumption retention now"
        if policy.topic_id != decision.topic_id:
            return f"decided for topic id {decision.topic_id}, the policy is for topic id {policy.topic_id}"
        if decision.policy_updated_at != policy.updated_at:
            return (f"decided under the policy of {decision.policy_updated_at}, the policy in force is of "
                    f"{policy.updated_at}: the job decides again under it")
        try:
            topic_id, _ = describe_topic(self.admin, decision.topic)
        except TopicRetentionError as exc:
            return str(exc)
        if topic_id != decision.topic_id:
            return f"decided for topic id {decision.topic_id}, the topic now has id {topic_id}"
        return None

    def _journal(self, decision: TopicTruncation, moved: dict[int, tuple[int, int]], signer: Signer | None,
                 where: str) -> None:
        why = dict(decision.why)
        signed = "record authentication off" if signer is None else str(signer)
        now = self.clock()
        with self.store.transaction() as txn:
            for partition, (before, after) in sorted(moved.items()):
                txn.journal_topic_truncation(TopicTruncationEntry(
                    decision.topic, decision.topic_id, partition, before, after, decision.decided_at, now,
                    why.get(str(partition), ""), signed, where))
        for partition, (before, after) in sorted(moved.items()):
            RECORDS_DELETED.labels(decision.topic).inc(after - before)
            log.info("records deleted topic=%s partition=%d start %d -> %d (%s) signer=%s", decision.topic,
                     partition, before, after, why.get(str(partition), ""), signed)

    def _dead_letter(self, message: Message, reason: str) -> None:
        tracker = DeliveryTracker()
        headers = [*(message.headers() or []), ("reclaim.dlq.reason", reason.encode()),
                   ("reclaim.dlq.origin", f"{message.topic()}[{message.partition()}]@{message.offset()}".encode())]
        self.producer.send(self.config.dlq, message.value() or b"", key=message.key(), headers=headers,
                           on_delivery=tracker.callback(0))
        if self.producer.wait(tracker, 30.0):
            raise Unavailable(f"dead letter not confirmed on {self.config.dlq}")
        log.error("topic truncation at %s[%s]@%s dead-lettered to %s: %s", message.topic(), message.partition(),
                  message.offset(), self.config.dlq, reason)

    def run_once(self) -> list[TopicOutcome]:
        """Poll one batch and apply it; a decision to retry rewinds its partition and ends the batch there."""
        outcomes: list[TopicOutcome] = []
        blocked: set[int] = set()
        for message in self.consumer.consume(100, self.config.poll_timeout_s):
            if message.error() is not None:
                log.warning("consumer error: %s", message.error())
                continue
            partition = message.partition() or 0
            if partition in blocked:
                continue
            outcome = self.apply(message)
            APPLIED.labels(outcome.name.lower()).inc()
            outcomes.append(outcome)
            if outcome.final:
                self.consumer.store_offsets(message)
            else:
                blocked.add(partition)
                self.consumer.seek(TopicPartition(message.topic() or "", partition, message.offset() or 0))
        if blocked:
            self.sleep(self.config.retry_backoff_s)
        return outcomes

    def catch_up(self, timeout_s: float = 120.0) -> list[TopicOutcome]:
        """Apply every decision on the topic now (its offsets are read first), then return their outcomes: what
        ``--once`` does. Raises :class:`~reclaim.exits.Unavailable` when they are not all final within
        ``timeout_s`` (the brokers not answering, or another applier of the group holding partitions)."""
        topic = self.config.topic
        found = self.consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if found is None or found.error is not None:
            raise Unavailable(f"reading the partitions of {topic}: {found.error if found else 'no answer'}")
        partitions = sorted(found.partitions)
        wanted = [TopicPartition(topic, p) for p in partitions]
        lows, ends = ({tp.partition: int(result_of(future, f"reading the offsets of {topic}").offset)
                       for tp, future in self.admin.list_offsets({tp: spec for tp in wanted}).items()}
                      for spec in (OffsetSpec.earliest(), OffsetSpec.latest()))  # type: ignore[no-untyped-call]
        behind = {p for p in partitions if ends[p] > lows[p]}
        done = self.consumer.committed([TopicPartition(topic, p) for p in behind], timeout=ADMIN_TIMEOUT_S)
        outcomes: list[TopicOutcome] = []
        deadline = time.monotonic() + timeout_s
        while behind := behind - {tp.partition for tp in done if tp.offset >= ends[tp.partition]}:
            if time.monotonic() > deadline:
                raise Unavailable(f"decisions on {topic} partitions {sorted(behind)} not all applied within "
                                  f"{timeout_s:g} s (another applier of the group holds them, or the brokers did "
                                  "not answer)")
            outcomes += self.run_once()
            done = self.consumer.position([TopicPartition(topic, p) for p in behind])
        return outcomes

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.run_once()
        finally:
            self.close()

    def close(self) -> None:
        try:
            self.consumer.commit(asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - nothing stored yet is not a failure
            log.debug("final commit: %s", exc)
        self.consumer.close()
        self.producer.close()
