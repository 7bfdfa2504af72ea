"""Sends records to retry tiers and the dead-letter topic and says which sends the broker confirmed."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from reclaim.consumers.batches import Polled
from reclaim.consumers.routing import Routing
from reclaim.deletion import metrics
from reclaim.deletion.outcomes import Route, Verdict
from reclaim.producers.producer import DeliveryTracker, RecordProducer

log = logging.getLogger(__name__)


class Rerouter:
    """Produces reroutes with the worker's idempotent producer and waits for their delivery reports."""

    def __init__(self, producer: RecordProducer, delivery_timeout_s: float) -> None:
        self._producer = producer
        self._timeout_s = delivery_timeout_s

    def send(self, sends: Sequence[tuple[Polled, Verdict, Routing]]) -> set[int]:
        """Send each record to its routing's topic, same key, value and signature; the indexes not confirmed."""
        if not sends:
            return set()
        tracker = DeliveryTracker()
        for index, (polled, verdict, routing) in enumerate(sends):
            _count(polled, verdict, routing)
            headers = [*(routing.headers or ()), *polled.signature]
            self._producer.send(routing.topic, polled.value, key=polled.key, headers=headers,
                                on_delivery=tracker.callback(index))
        return self._producer.wait(tracker, self._timeout_s)

    def close(self) -> None:
        self._producer.close()


def _count(polled: Polled, verdict: Verdict, routing: Routing) -> None:
    if routing.route is Route.RETRY:
        metrics.RETRIES_SENT.labels(routing.topic).inc()
        return
    if routing.exhausted:
        metrics.MAX_RETRIES_REACHED.inc()
    metrics.DLQ_SENT.labels(metrics.snake(verdict.outcome.value)).inc()
    origin = polled.delivery
    log.warning("to DLQ: topic=%s partition=%s offset=%s outcome=%s reason=%s", origin.topic,
                origin.partition, origin.offset, verdict.outcome.value, verdict.reason)
