"""Publish reclaim records one by one and return only once the broker confirmed each."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from reclaim.errors import ReclaimError
from reclaim.producers.producer import DeliveryTracker, RecordProducer
from reclaim.schemas.base import AvroRecord
from reclaim.schemas.codec import RecordCodec
from reclaim.security.signing import RecordSigner

log = logging.getLogger(__name__)


class PublishError(ReclaimError):
    """The broker refused a record or did not confirm it in time; sending it again is safe.

    Retryable: every record reclaim publishes this way is idempotent to apply twice.
    """

    retryable = True

    def __init__(self, what: str, topic: str, detail: str) -> None:
        super().__init__(f"{what} not confirmed on {topic}: {detail}")
        self.topic = topic
        self.detail = detail


class ConfirmedPublisher:
    """Encodes records with reclaim's codec, sends each keyed (and signed by ``signer``, when there is one),
    and waits for its delivery report."""

    def __init__(self, producer: RecordProducer, codec: RecordCodec, timeout_s: float = 30.0,
                 signer: RecordSigner | None = None) -> None:
        self.producer = producer
        self.codec = codec
        self.timeout_s = timeout_s
        self.signer = signer

    def signed_by(self, signer: RecordSigner | None) -> ConfirmedPublisher:
        """A publisher on the same producer that signs with ``signer`` (another role's key)."""
        return ConfirmedPublisher(self.producer, self.codec, self.timeout_s, signer)

    def publish(self, topic: str, record: AvroRecord, key: str) -> None:
        """Send ``record`` to ``topic`` under ``key``; raise :class:`PublishError` unless confirmed."""
        failed = self.publish_each(topic, [(record, key)])
        if failed:
            raise PublishError(f"{type(record).__name__} {key!r}", topic, failed[0])

    def publish_each(self, topic: str, records: Sequence[tuple[AvroRecord, str]]) -> dict[int, str]:
        """Send every ``(record, key)`` to ``topic`` at once and wait for their delivery reports: why each
        one not confirmed was not, by its index (empty when every one was). The broker refuses a whole batch for
        one record in it too large, so a record refused beside others is sent again alone: one refused record
        stops none of the others (one left unanswered is not: the broker is not answering). A fatal error of the
        producer is raised (:class:`~reclaim.producers.producer.FatalKafkaError`)."""
        failed, refused = self._send(topic, records, range(len(records)))
        if len(records) > 1:
            for index in sorted(refused):
                again, _ = self._send(topic, records, [index])
                failed.pop(index)
                failed.update(again)
        for index, (record, key) in enumerate(records):
            if index not in failed:
                log.debug("published topic=%s key=%s type=%s", topic, key, type(record).__name__)
        return failed

    def _send(self, topic: str, records: Sequence[tuple[AvroRecord, str]], indexes: Iterable[int]
              ) -> tuple[dict[int, str], set[int]]:
        """Send the records at ``indexes``: why each unconfirmed one was not, and those the broker refused."""
        tracker, sent = DeliveryTracker(), list[int]()
        for index in indexes:
            record, key = records[index]
            value, raw_key = self.codec.encode(record, topic), key.encode()
            headers = None if self.signer is None else self.signer.headers(topic, raw_key, value)
            self.producer.send(topic, value, key=raw_key, headers=headers, on_delivery=tracker.callback(len(sent)))
            sent.append(index)
        unconfirmed = self.producer.wait(tracker, self.timeout_s) if sent else set()
        failed = {sent[at]: str(tracker.failed[at]) if at in tracker.failed
                  else f"no delivery report within {self.timeout_s}s" for at in sorted(unconfirmed)}
        return failed, {sent[at] for at in unconfirmed if at in tracker.failed}

    def close(self) -> None:
        self.producer.close()
