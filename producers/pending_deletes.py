"""Phase 1's Kafka side: publish ``PendingDeleteLedgerInfo`` records with an idempotent producer."""

from __future__ import annotations

from collections.abc import Sequence

from producers.producer import DeliveryTracker, RecordProducer
from schemas.codec import RecordCodec
from schemas.ledger import PendingDeleteLedgerInfo


class KafkaPendingDeletePublisher:
    """Sends pending deletes keyed by chunk name, so every record of one chunk lands on one partition."""

    def __init__(self, producer: RecordProducer, codec: RecordCodec, topic: str, timeout_s: float = 30.0) -> None:
        self._producer = producer
        self._codec = codec
        self._topic = topic
        self._timeout_s = timeout_s

    def publish(self, records: Sequence[PendingDeleteLedgerInfo]) -> list[PendingDeleteLedgerInfo]:
        """Send ``records`` and wait for their delivery reports; return the unconfirmed ones."""
        tracker = DeliveryTracker()
        for index, record in enumerate(records):
            self._producer.send(self._topic, self._codec.encode(record, self._topic),
                                key=record.chunk_name.encode(), on_delivery=tracker.callback(index))
        unconfirmed = self._producer.wait(tracker, self._timeout_s)
        return [records[i] for i in sorted(unconfirmed)]
