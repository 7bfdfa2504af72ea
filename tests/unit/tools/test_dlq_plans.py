"""Purge plans, replay memos and pacing, and the dead-letter headers, as values; no server."""

from __future__ import annotations

import io
import json

import pytest

from reclaim.cli.dlq import confirmed
from reclaim.consumers import retry
from reclaim.consumers.retry import Delivery, RetryTiers
from reclaim.consumers.routing import route
from reclaim.deletion.outcomes import Outcome, Verdict, stack_summary
from reclaim.schemas.codec import build_codec
from reclaim.schemas.ledger import PendingDeleteLedgerInfo
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.rules import signers_of
from reclaim.security.signing import RecordSigner, RecordVerifier, Rejection, Signer, Unauthenticated
from reclaim.tools.dlq.purge import plan_filtered, plan_up_to
from reclaim.tools.dlq.records import DeadLetter, dead_letter
from reclaim.tools.dlq.replay import (
    H_REPLAYED_FROM,
    H_REPLAYED_ORIGIN,
    Pacer,
    Replayed,
    dlq_coordinates,
    memo,
    replay_headers,
)
from reclaim.tools.dlq.selection import Filters, Sendable, dedupe, pick
from tests.support.dead_letters import NOW, letter

TIERS = RetryTiers(((10, "t.retry-10s"), (60, "t.retry-60s")), max_attempts=3)


def outcomes(*kinds: str) -> list[DeadLetter]:
    """Dead letters at offsets 0.. of partition 0, fatal ("f") or retryable ("r")."""
    verdicts = {"f": Verdict(Outcome.FATAL, "denied", "StorageAccessDeniedError"),
                "r": Verdict(Outcome.RETRYABLE, "slow", "StorageUnavailableError")}
    return [letter(i, verdict=verdicts[kind]) for i, kind in enumerate(kinds)]


def test_a_filtered_purge_drops_the_longest_matching_prefix_and_says_why_the_rest_stays() -> None:
    letters = outcomes("f", "f", "r", "f", "r")
    [plan] = plan_filtered(letters, {0: (0, 5)}, Filters(reason="fatal"), NOW)
    assert (plan.drop_to, plan.dropped, plan.kept, plan.matching_kept) == (2, 2, 3, 1)
    assert plan.kept_because.startswith("offset 2 does not match (outcome 'retryable-error'")
    assert plan.describe() == (
        "partition 0: drop offsets 0..1 (2 record(s)); keep offsets 2..4 (3 record(s)): offset 2 does not match "
        "(outcome 'retryable-error' and its error do not contain 'fatal'); 1 matching record(s) after it stay too, "
        "since delete-records can only drop a partition's oldest records")


def test_a_purge_plan_per_partition_from_its_low_watermark() -> None:
    letters = [letter(o, partition=0) for o in (3, 4)] + [letter(o, partition=1, stream="scope/x") for o in (0, 1)]
    plans = plan_filtered(letters, {0: (3, 5), 1: (0, 2), 2: (7, 7)}, Filters(stream="scope/stream"), NOW)
    assert [(p.partition, p.low, p.drop_to, p.dropped, p.kept) for p in plans] == [
        (0, 3, 5, 2, 0), (1, 0, 0, 0, 2), (2, 7, 7, 0, 0)]
    assert plans[0].describe() == "partition 0: drop offsets 3..4 (2 record(s)); nothing stays"
    assert plans[1].describe().startswith("partition 1: drop nothing; keep offsets 0..1 (2 record(s)): offset 0")


def test_purge_up_to_an_offset_includes_it() -> None:
    letters = outcomes("f", "r", "f", "r")
    [plan] = plan_up_to(letters, {0: (0, 4)}, 0, 1)
    assert (plan.drop_to, plan.dropped, plan.kept) == (2, 2, 2)
    assert plan_up_to(letters, {0: (0, 4)}, 0, 3)[0].kept == 0
    with pytest.raises(ValueError, match="holds offsets 0 to 3"):
        plan_up_to(letters, {0: (0, 4)}, 0, 4)
    with pytest.raises(ValueError, match="no partition 1"):
        plan_up_to(letters, {0: (0, 4)}, 1, 0)


def test_the_pacer_spaces_sends_by_the_rate() -> None:
    clock = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock[0] += seconds

    pacer = Pacer(4, clock=lambda: clock[0], sleep=sleep)
    for _ in range(5):
        pacer.wait()
    assert slept == [0.25, 0.25, 0.25, 0.25] and clock[0] == 101.0
    clock[0] += 10  # idle time is not made up for with a burst
    pacer.wait()
    pacer.wait()
    assert slept[-1] == 0.25
    with pytest.raises(ValueError, match="positive"):
        Pacer(0)


def test_a_replayed_record_names_its_dlq_coordinates_and_carries_no_retry_history() -> None:
    dead = letter(4, origin_offset=9, attempt=3)
    headers = dict(replay_headers(dead))
    assert headers == {H_REPLAYED_FROM: b"t.ledger-deletion.dlq/0/4", H_REPLAYED_ORIGIN: b"t.ledger-deletion/0/9"}
    fresh = Delivery.of("t.ledger-deletion", 1, 50, replay_headers(dead), 123)
    assert (fresh.attempt, fresh.offset, fresh.first_failure_ms, fresh.timestamp_ms) == (1, 50, None, 123)


def test_a_replayed_record_keeps_its_signature_so_only_a_genuine_one_verifies() -> None:
    keyring = Keyring([new_key("controller-1", "controller", Algorithm.HMAC_SHA256)])
    signer, verifier = RecordSigner(keyring, "controller"), RecordVerifier(keyring)
    roles = signers_of(PendingDeleteLedgerInfo)

    def signed(plain: DeadLetter, signature: list[tuple[str, bytes]]) -> DeadLetter:
        return dead_letter(plain.topic, 0, plain.offset, NOW, plain.key, plain.value, [*plain.headers, *signature],
                           build_codec())

    genuine = letter(4, origin_offset=9)
    signature = signer.headers("t.ledger-deletion", genuine.key, genuine.value or b"")
    replayed = replay_headers(signed(genuine, signature))
    assert replayed[:2] == replay_headers(genuine) and replayed[2:] == signature  # and still no retry history
    assert isinstance(verifier.verify("t.ledger-deletion", genuine.key, genuine.value, replayed, roles), Signer)

    other = letter(5, origin_offset=10)  # another record carrying the genuine one's signature
    refused = verifier.verify("t.ledger-deletion", other.key, other.value, replay_headers(signed(other, signature)),
                              roles)
    assert isinstance(refused, Unauthenticated) and refused.reason is Rejection.BAD_SIGNATURE
    unsigned = verifier.verify("t.ledger-deletion", other.key, other.value, replay_headers(other), roles)
    assert isinstance(unsigned, Unauthenticated) and unsigned.reason is Rejection.UNSIGNED


def test_replay_memos_remember_by_coordinates_and_by_origin() -> None:
    sent = letter(4, origin_offset=9)
    key, value = memo(sent, NOW)
    assert key == b"t.ledger-deletion.dlq/0/4" and json.loads(value)["origin"] == "t.ledger-deletion/0/9"
    replayed = Replayed.of([(key, value), (b"junk", b"not json"), (None, b"{}")])
    assert sent in replayed
    assert letter(7, origin_offset=9) in replayed  # another copy of the same original record
    assert letter(5, origin_offset=10) not in replayed
    recreated = dead_letter(sent.topic, 0, 4, 5, sent.key, sent.value, [], build_codec())
    assert recreated not in replayed  # same coordinates in a DLQ created again: another record



def test_what_a_replay_holds_between_its_reads_is_told_apart_as_the_record_is() -> None:
    # The choosing read keeps a Sendable of each record: its identity, copies and memos must read the same.
    sent, copy, other = letter(4, origin_offset=9), letter(7, origin_offset=9), letter(5, origin_offset=10)
    plain = dead_letter(sent.topic, 0, 6, NOW, sent.key, sent.value, [], build_codec())  # no origin headers
    for whole in (sent, copy, other, plain):
        brief = Sendable.of(whole)
        assert (brief.identity, brief.partition, brief.offset, brief.timestamp_ms) == \
               (whole.identity, whole.partition, whole.offset, whole.timestamp_ms)
        assert dlq_coordinates(brief) == dlq_coordinates(whole)
    replayed = Replayed.of([memo(sent, NOW), memo(plain, NOW)])
    assert [Sendable.of(d) in replayed for d in (sent, copy, other, plain)] == [True, True, False, True]
    chosen = pick([Sendable.of(d) for d in (copy, other, sent)], newest_first=False, total=5)
    assert [s.offset for s in chosen.records] == [4, 5] and (chosen.duplicates, chosen.total) == (1, 5)


def test_the_same_coordinates_of_a_deletion_topic_created_again_are_another_record() -> None:
    def dead(dlq_offset: int, original_ms: int) -> DeadLetter:
        delivery = Delivery(3, NOW, None, "t.ledger-deletion", 0, 9, original_ms)
        routing = route(Verdict(Outcome.FATAL, "denied", "X"), delivery, TIERS, "t.dlq", NOW, "g")
        return dead_letter("t.dlq", 0, dlq_offset, NOW, b"k", b"v", routing.headers, build_codec())

    before, copy, after = dead(0, 1_000), dead(1, 1_000), dead(2, 5_000)  # `after`: the topic was recreated
    unique, copies = dedupe([before, copy, after])
    assert [d.offset for d in unique] == [0, 2] and copies == 1  # was one record, `after` a "duplicate"
    replayed = Replayed.of([memo(before, NOW)])
    assert before in replayed and copy in replayed
    assert after not in replayed  # was skipped as already replayed, so never replayed at all
    key, value = memo(before, NOW)
    older = {k: v for k, v in json.loads(value).items() if k != "original_timestamp_ms"}
    assert after in Replayed.of([(key, json.dumps(older).encode())])  # a memo that does not say still holds


def test_a_dead_letter_names_its_group_the_original_timestamp_and_where_the_error_was_raised() -> None:
    empty: dict[str, int] = {}
    try:
        empty["missing"]  # noqa: B018 - raise a real error to summarise
    except KeyError as exc:
        summary = stack_summary(exc)
    assert summary.startswith("KeyError at tools/test_dlq_plans.py:") and "test_a_dead_letter_names" in summary
    verdict = Verdict(Outcome.FATAL, "boom", "KeyError", summary)
    assert verdict == Verdict(Outcome.FATAL, "boom", "KeyError")  # verdicts compare without their stack
    first = Delivery.of("t", 0, 8, None, 1_700_000_000_000)
    retried = route(Verdict(Outcome.RETRYABLE, "slow", "X", summary), first, TIERS, "t.dlq", NOW, "g")
    sent = dict(retried.headers or [])
    assert sent[retry.H_TIMESTAMP] == b"1700000000000"
    assert retry.H_GROUP not in sent and retry.H_STACK not in sent  # retry tiers stay lean
    again = Delivery.of("t.retry-10s", 0, 3, retried.headers, NOW)
    assert again.timestamp_ms == 1_700_000_000_000  # the original's, not the retry record's
    dead = dict(route(verdict, again, TIERS, "t.dlq", NOW, "g").headers or [])
    assert dead[retry.H_GROUP] == b"g" and dead[retry.H_STACK] == summary.encode()
    assert dead[retry.H_TIMESTAMP] == b"1700000000000"


def test_a_stack_summary_is_bounded_and_empty_for_an_error_never_raised() -> None:
    def deep(n: int) -> None:
        if n:
            deep(n - 1)
        raise RuntimeError("x")

    try:
        deep(50)
    except RuntimeError as exc:
        summary = stack_summary(exc, frames=3)
        assert summary.count(" < ") == 2
        assert len(stack_summary(exc, frames=50, limit=120)) == 120
    assert stack_summary(ValueError("never raised")) == ""
    assert Delivery.of("t", 0, 1, None, -1).timestamp_ms is None  # librdkafka's "no timestamp"


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(("typed", "answer"), [("y\n", True), ("yes\n", True), ("n\n", False), ("", False)])
def test_the_purge_question_is_asked_on_stderr_and_end_of_input_is_no(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], typed: str, answer: bool) -> None:
    monkeypatch.setattr("sys.stdin", Terminal(typed))
    assert confirmed(3, "t.dlq") is answer  # Ctrl-D ("") was an EOFError traceback
    out, err = capsys.readouterr()
    assert out == ""  # `purge --json > plan.json` at a terminal: the question went into the file, unseen
    assert err.startswith("drop 3 record(s) from t.dlq for good? [y/N] ")
