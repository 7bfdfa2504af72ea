"""The applier obeys a truncation only from a key that may decide it, under the stream's own policy, and
journals each one it applies with its signer and source; without a broker."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim.consumers.truncation_applier import Applied, apply_event
from reclaim.schemas import build_codec
from reclaim.schemas.base import millis_now
from reclaim.schemas.streams import (
    LimitType,
    RetentionPolicy,
    RetentionType,
    StreamCut,
    TruncationEvent,
    TruncationReason,
)
from reclaim.security.keyring import Algorithm, Keyring, new_key
from reclaim.security.signing import REJECTED, AuthMode, RecordSigner, RecordVerifier
from reclaim.segments.stream_model import JournalState
from reclaim.segments.streams import StreamController
from tests.support.orders import SEGMENTS, STREAM, orders_stream

TOPIC = "reclaim.truncation"
KEYS = Keyring([new_key("admin-1", "admin", Algorithm.ED25519), new_key("job-1", "retention-job", Algorithm.ED25519),
                new_key("ctl-1", "controller", Algorithm.HMAC_SHA256),
                new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice")])
PUBLIC = Keyring(key.public_only() for key in KEYS)
AT = StreamCut.from_mapping({0: 10, 1: 12})


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[StreamController]:
    with orders_stream(tmp_path) as controller:
        yield controller


def signed(reason: TruncationReason, role: str | None, cut: StreamCut = AT, topic: str = TOPIC,
           stream: str = STREAM, subject: str | None = None) -> tuple[bytes, list[tuple[str, bytes]] | None]:
    event = TruncationEvent(stream, cut, reason, millis_now(), RetentionPolicy(RetentionType.CONSUMPTION))
    value = build_codec().encode(event, TOPIC)
    headers = None if role is None else RecordSigner(KEYS, role, subject).headers(topic, stream.encode(), value)
    return value, headers


def apply(controller: StreamController, value: bytes, headers: list[tuple[str, bytes]] | None, offset: int = 0,
          mode: AuthMode = AuthMode.ENFORCE, verifier: bool = True) -> Applied:
    return apply_event(controller, build_codec(), value, TOPIC, f"{TOPIC}[0]@{offset}", key=STREAM.encode(),
                       headers=headers, verifier=RecordVerifier(PUBLIC, mode) if verifier else None)


def untouched(controller: StreamController) -> bool:
    return controller.head(STREAM) == StreamCut() and controller.read_all(SEGMENTS[0]) == b"x" * 40 \
        and controller.journal(STREAM) == []


@pytest.mark.parametrize(("reason", "role"), [
    (TruncationReason.MANUAL, None),  # unsigned
    (TruncationReason.MANUAL, "retention-job"),  # the job may not truncate by hand
    (TruncationReason.MANUAL, "controller"),
    (TruncationReason.MANUAL, "subscriber"),
    (TruncationReason.CONSUMPTION, "retention-job"),  # the stream has no retention policy
    (TruncationReason.CONSUMPTION, "admin"),  # an admin truncates by hand, not in the job's name
])
def test_a_truncation_not_signed_by_its_reasons_role_or_against_the_policy_is_refused(
        controller: StreamController, reason: TruncationReason, role: str | None) -> None:
    value, headers = signed(reason, role, subject="alice" if role == "subscriber" else None)
    assert apply(controller, value, headers) is Applied.UNAUTHENTICATED
    assert untouched(controller)


def test_a_genuine_signature_replayed_to_another_topic_or_stream_is_refused(controller: StreamController) -> None:
    value, headers = signed(TruncationReason.MANUAL, "admin", topic="reclaim.stream-config")
    assert apply(controller, value, headers) is Applied.UNAUTHENTICATED
    other, other_headers = signed(TruncationReason.MANUAL, "admin", stream="scope/other")
    assert apply(controller, value, other_headers) is Applied.UNAUTHENTICATED  # another stream's signature
    assert untouched(controller)


def test_an_admin_signed_manual_truncation_is_applied_and_journaled_once(controller: StreamController) -> None:
    value, headers = signed(TruncationReason.MANUAL, "admin")
    assert apply(controller, value, headers, offset=7) is Applied.TRUNCATED
    assert apply(controller, value, headers, offset=7) is Applied.NO_OP  # the same record again
    assert controller.head(STREAM) == AT
    [entry] = controller.journal(STREAM)
    assert (entry.source, entry.cut, entry.reason, entry.signer, entry.state) == \
        (f"{TOPIC}[0]@7", tuple(AT.as_dict().items()), "MANUAL", "admin/admin-1", JournalState.APPLIED)


@pytest.mark.parametrize(("policy", "reason"), [
    (RetentionPolicy(RetentionType.CONSUMPTION), TruncationReason.CONSUMPTION),
    (RetentionPolicy(RetentionType.CONSUMPTION, LimitType.SIZE, 0, 10), TruncationReason.SIZE),  # PDP-47's max
    (RetentionPolicy(RetentionType.TIME, LimitType.TIME, 0, 1000), TruncationReason.TIME),
])
def test_the_jobs_truncation_under_the_streams_own_policy_is_applied(
        controller: StreamController, policy: RetentionPolicy, reason: TruncationReason) -> None:
    controller.set_policy(STREAM, policy)
    value, headers = signed(reason, "retention-job")
    assert apply(controller, value, headers) is Applied.TRUNCATED
    assert [e.signer for e in controller.journal(STREAM)] == ["retention-job/job-1"]


def test_a_reason_the_policy_does_not_give_is_refused_even_from_the_job(controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION, LimitType.TIME, 0, 1000))
    value, headers = signed(TruncationReason.SIZE, "retention-job")
    before = REJECTED.labels(TOPIC, "against_policy")._value.get()
    assert apply(controller, value, headers) is Applied.UNAUTHENTICATED
    assert REJECTED.labels(TOPIC, "against_policy")._value.get() == before + 1
    assert untouched(controller)


def test_without_record_authentication_the_policy_still_decides(controller: StreamController) -> None:
    value, _ = signed(TruncationReason.CONSUMPTION, None)
    assert apply(controller, value, None, verifier=False) is Applied.UNAUTHENTICATED
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION))
    assert apply(controller, value, None, verifier=False) is Applied.TRUNCATED
    assert [e.signer for e in controller.journal(STREAM)] == ["record authentication off"]


def test_rollout_accepts_an_unsigned_event_under_the_policy_and_journals_it_unsigned(
        controller: StreamController) -> None:
    controller.set_policy(STREAM, RetentionPolicy(RetentionType.CONSUMPTION))
    value, _ = signed(TruncationReason.CONSUMPTION, None)
    assert apply(controller, value, None, mode=AuthMode.ROLLOUT) is Applied.TRUNCATED
    assert [e.signer for e in controller.journal(STREAM)] == ["unsigned"]


def test_a_truncation_cut_short_by_a_crash_is_journaled_as_applied_when_read_again(
        controller: StreamController) -> None:
    # The entry is written before the truncation; a crash after it leaves the entry "applying".
    controller.truncate_journaled(STREAM, AT, source="s", reason="MANUAL", signer="admin/admin-1")
    with controller.store.transaction() as txn:
        [entry] = txn.get_journal(STREAM)
        txn.put_journal(entry.__class__(**{**entry.__dict__, "state": JournalState.APPLYING}))
    assert controller.truncate_journaled(STREAM, AT, source="s", reason="MANUAL", signer="admin/admin-1") is False
    assert [e.state for e in controller.journal(STREAM)] == [JournalState.APPLIED]


def test_a_no_op_or_an_invalid_cut_leaves_no_journal_entry(controller: StreamController) -> None:
    controller.truncate_journaled(STREAM, AT, source="a", reason="MANUAL", signer="admin/admin-1")
    assert controller.truncate_journaled(STREAM, StreamCut.from_mapping({0: 1, 1: 1}), source="b", reason="MANUAL",
                                         signer="admin/admin-1") is False
    with pytest.raises(ValueError):
        controller.truncate_journaled(STREAM, StreamCut.from_mapping({0: 99, 1: 1}), source="c", reason="MANUAL",
                                      signer="admin/admin-1")
    assert [e.source for e in controller.journal(STREAM)] == ["a"]
