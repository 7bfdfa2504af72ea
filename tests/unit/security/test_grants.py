"""Stream grants (pure): a subscriber key acts only for the streams its keyring entry grants, exactly or by
pattern; a record about any other stream is refused as not-granted and counted, and a grant taken from a
keyring file reaches a running verifier within one check period."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from reclaim.security.keyring import Algorithm, Key, Keyring, new_key
from reclaim.security.live import KeyringFile
from reclaim.security.signing import (
    UNSIGNED,
    AuthMode,
    RecordSigner,
    RecordVerifier,
    Rejection,
    Signer,
    Unauthenticated,
)

CUTS, CHANGES = "reclaim.subscriber-cuts", "reclaim.subscribers"
SUBSCRIBER_OR_ADMIN = frozenset({"subscriber", "admin"})
ALICE = new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice", streams=["scope/orders", "billing/*"])
KEYS = Keyring([ALICE, new_key("bob-1", "subscriber", Algorithm.ED25519, subject="bob"),
                new_key("admin-1", "admin", Algorithm.ED25519)])


def _refused(topic: str) -> float:
    return REGISTRY.get_sample_value("reclaim_unauthenticated_records_total",
                                     {"topic": topic, "reason": "not_granted"}) or 0.0


def _signer(verifier: RecordVerifier, keyring: Keyring, role: str, subject: str | None = None,
            topic: str = CUTS) -> Signer:
    """Who ``verifier`` says signed a record ``role`` (``subject``) signed with ``keyring``'s key."""
    key, value = b"scope/orders#alice", b"\x01cut"
    headers = RecordSigner(keyring, role, subject).headers(topic, key, value)
    signer = verifier.verify(topic, key, value, headers, SUBSCRIBER_OR_ADMIN)
    assert isinstance(signer, Signer), signer
    return signer


@pytest.mark.parametrize("stream", ["scope/orders", "billing/invoices", "billing/eu/invoices"])
def test_a_subscriber_key_acts_for_a_stream_it_is_granted_by_name_or_pattern(stream: str) -> None:
    verifier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    signer = _signer(verifier, KEYS, "subscriber", "alice")
    assert verifier.check_subject(CUTS, signer, "alice", stream) is None


@pytest.mark.parametrize(("subject", "stream"), [
    ("alice", "scope/other"), ("alice", "scope/orders-2"), ("alice", "Billing/invoices"),
    ("bob", "scope/orders"),  # bob's key was granted nothing: it acts for no stream
])
@pytest.mark.parametrize("topic", [CUTS, CHANGES])
def test_a_cut_or_a_change_about_a_stream_outside_the_key_s_grants_is_refused_and_counted(
        subject: str, stream: str, topic: str, caplog: pytest.LogCaptureFixture) -> None:
    verifier = RecordVerifier(Keyring(key.public_only() for key in KEYS))
    signer = _signer(verifier, KEYS, "subscriber", subject, topic)
    before = _refused(topic)
    refusal = verifier.check_subject(topic, signer, subject, stream)
    assert isinstance(refusal, Unauthenticated) and refusal.reason is Rejection.NOT_GRANTED
    assert f"not granted stream {stream!r}" in refusal.detail
    assert _refused(topic) == before + 1
    assert f"record refused on {topic}: unauthenticated (not-granted)" in caplog.text


def test_another_subscriber_s_record_is_wrong_subject_before_any_grant_is_looked_at() -> None:
    verifier = RecordVerifier(KEYS)
    signer = _signer(verifier, KEYS, "subscriber", "alice")
    refusal = verifier.check_subject(CUTS, signer, "bob", "scope/orders")
    assert refusal is not None and refusal.reason is Rejection.WRONG_SUBJECT


def test_an_admin_s_change_and_an_unsigned_one_in_rollout_are_not_held_to_grants() -> None:
    verifier = RecordVerifier(KEYS, AuthMode.ROLLOUT)
    admin = _signer(verifier, KEYS, "admin", topic=CHANGES)
    assert verifier.check_subject(CHANGES, admin, "alice", "scope/other") is None
    assert verifier.check_subject(CHANGES, UNSIGNED, "alice", "scope/other") is None


def _write(path: Path, keyring: Keyring) -> None:
    """As ``reclaim keys grant`` writes a keyring: a new file put in place whole."""
    temporary = path.with_suffix(".new")
    temporary.write_text(keyring.to_toml(public_only=True))
    temporary.chmod(0o600)
    os.replace(temporary, path)


def _granted(key: Key, *streams: str) -> Keyring:
    return Keyring(replace(k, streams=streams) if k.id == key.id else k for k in KEYS)


def test_a_grant_taken_from_the_file_reaches_a_running_verifier_within_one_period(tmp_path: Path) -> None:
    path, now = tmp_path / "keyring.toml", [0.0]
    _write(path, KEYS)
    verifier = RecordVerifier(KeyringFile(path, check_every_s=2.0, clock=lambda: now[0]))
    assert verifier.check_subject(CUTS, _signer(verifier, KEYS, "subscriber", "alice"), "alice", "billing/x") is None

    _write(path, _granted(ALICE, "scope/orders"))  # billing/* taken away
    now[0] = 1.0  # within the period: not looked at yet
    assert verifier.check_subject(CUTS, _signer(verifier, KEYS, "subscriber", "alice"), "alice", "billing/x") is None
    now[0] = 2.0
    refusal = verifier.check_subject(CUTS, _signer(verifier, KEYS, "subscriber", "alice"), "alice", "billing/x")
    assert refusal is not None and refusal.reason is Rejection.NOT_GRANTED
    assert verifier.check_subject(CUTS, _signer(verifier, KEYS, "subscriber", "alice"), "alice",
                                  "scope/orders") is None

    _write(path, _granted(ALICE, "scope/orders", "billing/x"))  # and given back, by name
    now[0] = 4.0
    assert verifier.check_subject(CUTS, _signer(verifier, KEYS, "subscriber", "alice"), "alice", "billing/x") is None
