"""The controller's incarnations, without a broker: every stream gets its own when it is created, the applier
refuses a truncation of another incarnation (counted), and the journal and `streams history` are per
incarnation (finding 7 of issue #39: a deleted stream's journal was shown as the new one's history)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.consumers.truncation_applier import Applied, apply_event
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now, new_incarnation
from reclaim.schemas.streams import RetentionPolicy, RetentionType, StreamCut, TruncationEvent, TruncationReason
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import REJECTED, RecordSigner, RecordVerifier
from reclaim.segments.streams import StreamController
from tests.support.orders import SEGMENTS, STREAM, orders_stream

TOPIC = "reclaim.truncation"
KEYS = Keyring([new_key("admin-1", "admin", Algorithm.ED25519)])
AT = StreamCut.from_mapping({0: 8, 1: 8})


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        yield controller


def _apply(controller: StreamController, incarnation: str | None, offset: int = 0) -> Applied:
    event = TruncationEvent(STREAM, AT, TruncationReason.MANUAL, millis_now(), RetentionPolicy(RetentionType.NONE),
                            incarnation)
    value = build_codec().encode(event, TOPIC)
    headers = RecordSigner(KEYS, "admin").headers(TOPIC, STREAM.encode(), value)
    return apply_event(controller, build_codec(), value, TOPIC, f"{TOPIC}[0]@{offset}", key=STREAM.encode(),
                       headers=headers, verifier=RecordVerifier(KEYS))


def _recreate(controller: StreamController) -> None:
    controller.seal_stream(STREAM)
    controller.delete_stream(STREAM)
    controller.create_stream("scope", "orders", 2)
    for segment in SEGMENTS:
        controller.append(segment, b"y" * 40)


def test_every_stream_gets_an_incarnation_of_its_own_when_created(controller: StreamController) -> None:
    first = controller.incarnation(STREAM)
    assert first is not None and len(first) == 32
    assert controller.create_stream("scope", "orders", 2).incarnation == first  # a retry keeps it
    assert controller.topology(STREAM).incarnation == first
    _recreate(controller)
    assert controller.incarnation(STREAM) not in (None, first)


def test_a_truncation_of_another_incarnation_is_refused_and_counted(controller: StreamController) -> None:
    before = REJECTED.labels(TOPIC, "wrong_incarnation")._value.get()
    assert _apply(controller, new_incarnation()) is Applied.UNAUTHENTICATED
    assert REJECTED.labels(TOPIC, "wrong_incarnation")._value.get() == before + 1
    assert controller.head(STREAM) == StreamCut() and controller.journal(STREAM) == []
    assert _apply(controller, controller.incarnation(STREAM), 1) is Applied.TRUNCATED


def test_a_genuine_truncation_of_the_deleted_stream_does_nothing_to_the_one_created_again(
        controller: StreamController) -> None:
    old = controller.incarnation(STREAM)
    _recreate(controller)
    assert _apply(controller, old) is Applied.UNAUTHENTICATED
    assert controller.head(STREAM) == StreamCut() and controller.read_all(SEGMENTS[0]) == b"y" * 40


def test_the_journal_is_per_incarnation(controller: StreamController) -> None:
    old = controller.incarnation(STREAM)
    assert _apply(controller, old) is Applied.TRUNCATED
    _recreate(controller)
    assert controller.journal(STREAM) == []  # the deleted stream's truncation is not the new one's history
    [entry] = controller.journal(STREAM, every_incarnation=True)
    assert entry.incarnation == old and entry.cut == tuple(AT.as_dict().items())
    assert _apply(controller, controller.incarnation(STREAM), 1) is Applied.TRUNCATED
    assert [e.incarnation for e in controller.journal(STREAM)] == [controller.incarnation(STREAM)]


def test_the_journal_names_the_subscribers_behind_a_consumption_truncation(controller: StreamController) -> None:
    job = Keyring([new_key("job-1", "retention-job", Algorithm.ED25519)])
    policy = RetentionPolicy(RetentionType.CONSUMPTION)
    controller.set_policy(STREAM, policy)
    event = TruncationEvent(STREAM, AT, TruncationReason.CONSUMPTION, millis_now(), policy,
                            controller.incarnation(STREAM), ("billing (subscriber:billing/billing-1)",))
    value = build_codec().encode(event, TOPIC)
    headers = RecordSigner(job, "retention-job").headers(TOPIC, STREAM.encode(), value)
    assert apply_event(controller, build_codec(), value, TOPIC, f"{TOPIC}[0]@0", key=STREAM.encode(),
                       headers=headers, verifier=RecordVerifier(job)) is Applied.TRUNCATED
    [entry] = controller.journal(STREAM)
    assert entry.signer == "retention-job/job-1; bound by billing (subscriber:billing/billing-1)"
