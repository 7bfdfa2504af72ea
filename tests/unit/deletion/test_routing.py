"""Routes, retry tiers, attempts and the headers of a reroute, as values; no server."""

from __future__ import annotations

import pytest

from reclaim.consumers.batches import BatchReport
from reclaim.consumers.retry import (
    H_ATTEMPT,
    H_ERROR,
    H_FIRST_FAILURE,
    H_NOT_BEFORE,
    H_OFFSET,
    H_OUTCOME,
    H_PARTITION,
    H_TOPIC,
    MAX_ERROR_BYTES,
    Delivery,
    RetryTiers,
)
from reclaim.consumers.routing import ACK, route
from reclaim.deletion.outcomes import ROUTES, Outcome, Route, Verdict

TIERS = RetryTiers(((10, "t.retry-10s"), (60, "t.retry-60s"), (600, "t.retry-600s")), max_attempts=4)
NOW = 1_700_000_000_000
FRESH = Delivery.of("t", 3, 42, None)


def headers(routing_headers: list[tuple[str, bytes]] | None) -> dict[str, str]:
    return {k: v.decode() for k, v in routing_headers or []}


@pytest.mark.parametrize("outcome", [o for o, r in ROUTES.items() if r is Route.ACK])
def test_final_outcomes_are_acked(outcome: Outcome) -> None:
    assert route(Verdict(outcome), FRESH, TIERS, "t.dlq", NOW) is ACK


def test_a_fresh_record_starts_on_attempt_one_at_its_read_position() -> None:
    assert (FRESH.attempt, FRESH.topic, FRESH.partition, FRESH.offset) == (1, "t", 3, 42)
    assert FRESH.first_failure_ms is None and FRESH.not_before_ms is None


def test_a_retry_moves_one_tier_on_and_carries_its_origin() -> None:
    routing = route(Verdict(Outcome.RETRYABLE, "slow", "StorageUnavailableError"), FRESH, TIERS, "t.dlq", NOW)
    assert (routing.route, routing.topic) == (Route.RETRY, "t.retry-10s")
    sent = headers(routing.headers)
    assert sent[H_ATTEMPT] == "2" and sent[H_FIRST_FAILURE] == str(NOW)
    assert sent[H_NOT_BEFORE] == str(NOW + 10_000)
    assert (sent[H_TOPIC], sent[H_PARTITION], sent[H_OFFSET]) == ("t", "3", "42")
    assert sent[H_OUTCOME] == "retryable-error"

    again = Delivery.of("t.retry-10s", 0, 7, routing.headers)
    assert (again.attempt, again.topic, again.partition, again.offset) == (2, "t", 3, 42)
    later = route(Verdict(Outcome.RETRYABLE, "slow"), again, TIERS, "t.dlq", NOW + 20_000)
    assert later.topic == "t.retry-60s"
    assert headers(later.headers)[H_FIRST_FAILURE] == str(NOW)  # the first failure is kept


def test_the_longest_tier_repeats_until_the_attempts_run_out() -> None:
    assert TIERS.tier_after(3, Outcome.RETRYABLE) == (600, "t.retry-600s")
    assert TIERS.tier_after(9, Outcome.RETRYABLE) == (600, "t.retry-600s")
    last = Delivery(4, NOW, None, "t", 3, 42)
    routing = route(Verdict(Outcome.RETRYABLE, "still slow"), last, TIERS, "t.dlq", NOW)
    assert (routing.route, routing.topic, routing.exhausted) == (Route.DLQ, "t.dlq", True)
    sent = headers(routing.headers)
    assert sent[H_ATTEMPT] == "4" and H_NOT_BEFORE not in sent


def test_waiting_for_a_mark_stays_on_the_shortest_tier_and_is_not_an_attempt() -> None:
    waiting = Delivery(4, NOW, None, "t", 3, 42)
    routing = route(Verdict(Outcome.MARK_PENDING), waiting, TIERS, "t.dlq", NOW)
    assert (routing.route, routing.topic) == (Route.RETRY, "t.retry-10s")
    assert headers(routing.headers)[H_ATTEMPT] == "4"


def test_fatal_and_undecodable_go_straight_to_the_dlq() -> None:
    for outcome in (Outcome.FATAL, Outcome.UNDECODABLE):
        routing = route(Verdict(outcome, "no"), FRESH, TIERS, "t.dlq", NOW)
        assert (routing.route, routing.exhausted) == (Route.DLQ, False)
        assert headers(routing.headers)[H_ATTEMPT] == "1"


def test_a_long_reason_is_cut_to_the_header_limit() -> None:
    routing = route(Verdict(Outcome.FATAL, "x" * 10_000), FRESH, TIERS, "t.dlq", NOW)
    assert len(headers(routing.headers)[H_ERROR]) == MAX_ERROR_BYTES


@pytest.mark.parametrize("raw", [
    [(H_ATTEMPT, b"zero"), (H_TOPIC, b"t")],  # origin incomplete: the read position stands
    {H_ATTEMPT: "-5"},
    [(H_ATTEMPT, None)],
])
def test_garbled_headers_fall_back_to_a_first_attempt_here(raw: object) -> None:
    delivery = Delivery.of("t.retry-10s", 1, 9, raw)  # type: ignore[arg-type]
    assert (delivery.attempt, delivery.topic, delivery.partition, delivery.offset) == (1, "t.retry-10s", 1, 9)


def test_tiers_refuse_nonsense() -> None:
    with pytest.raises(ValueError, match="at least one retry tier"):
        RetryTiers(())
    with pytest.raises(ValueError, match="max_attempts"):
        RetryTiers(((10, "x"),), max_attempts=0)


def test_reports_add_up() -> None:
    one = BatchReport(received=3, outcomes={Outcome.DELETED: 2}, stored=2)
    two = BatchReport(received=1, outcomes={Outcome.DELETED: 1, Outcome.IN_USE: 1}, retried=1)
    total = one + two
    assert (total.received, total.stored, total.retried) == (4, 2, 1)
    assert dict(total.outcomes) == {Outcome.DELETED: 3, Outcome.IN_USE: 1}
    assert dict(one.outcomes) == {Outcome.DELETED: 2}
