"""Where a judged record goes, pure: acked, to a retry tier, or to the dead-letter topic."""

from __future__ import annotations

from dataclasses import dataclass

from reclaim.consumers.retry import Delivery, Headers, RetryTiers, reroute_headers
from reclaim.deletion.outcomes import Route, Verdict


@dataclass(frozen=True)
class Routing:
    """A record's route; for a reroute, the topic and headers it is sent with.

    ``exhausted``: a retry turned into a dead letter because the record used its last attempt.
    """

    route: Route
    topic: str = ""
    headers: Headers | None = None
    exhausted: bool = False


ACK = Routing(Route.ACK)


def route(verdict: Verdict, delivery: Delivery, tiers: RetryTiers, dlq_topic: str, now_ms: int,
          group_id: str = "") -> Routing:
    """The routing of a record that got ``verdict`` on the attempt ``delivery`` describes; a dead letter
    names ``group_id``, the consumer group routing it."""
    chosen = verdict.route
    if chosen is Route.ACK:
        return ACK
    exhausted = chosen is Route.RETRY and tiers.exhausted(delivery, verdict.outcome)
    if chosen is Route.DLQ or exhausted:
        headers = reroute_headers(delivery, verdict, now_ms, delivery.attempt, None, group_id)
        return Routing(Route.DLQ, dlq_topic, headers, exhausted)
    delay, topic = tiers.tier_after(delivery.attempt, verdict.outcome)
    attempt = tiers.next_attempt(delivery, verdict.outcome)
    return Routing(Route.RETRY, topic, reroute_headers(delivery, verdict, now_ms, attempt, delay))
