"""Record signatures, pure: what verifies, and every way a record is refused before anything else."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from reclaim.security.keyring import Algorithm, Key, Keyring, KeyStatus, new_key
from reclaim.security.signing import (
    H_KEY_ID,
    H_SIGNATURE,
    REJECTED,
    AuthMode,
    RecordSigner,
    RecordVerifier,
    Rejection,
    Unauthenticated,
    _hmac,
    signature_headers,
)

CONTROLLER = frozenset({"controller"})
TOPIC, KEY, VALUE = "reclaim.ledger-deletion", b"s/x/segment-0/chunk-1", b"\x01avro-bytes"


@pytest.fixture(params=list(Algorithm), ids=lambda a: a.value)
def keyring(request: pytest.FixtureRequest) -> Keyring:
    return Keyring([new_key("ctl-1", "controller", request.param), new_key("job-1", "retention-job", request.param)])


def _rejection(outcome: object) -> Rejection:
    assert isinstance(outcome, Unauthenticated), outcome
    return outcome.reason


def test_a_signed_record_verifies_and_names_its_signer(keyring: Keyring) -> None:
    headers = RecordSigner(keyring, "controller").headers(TOPIC, KEY, VALUE)
    signer = RecordVerifier(keyring).verify(TOPIC, KEY, VALUE, headers, CONTROLLER)
    assert not isinstance(signer, Unauthenticated)
    assert (signer.key_id, signer.role) == ("ctl-1", "controller")


@pytest.mark.parametrize("change", ["topic", "key", "value", "no-key"])
def test_a_genuine_signature_does_not_cover_another_topic_key_or_value(keyring: Keyring, change: str) -> None:
    headers = RecordSigner(keyring, "controller").headers(TOPIC, KEY, VALUE)
    topic, key, value = TOPIC, KEY, VALUE
    if change == "topic":
        topic = "reclaim.truncation"
    elif change == "key":
        key = b"s/y/segment-0/chunk-1"
    elif change == "value":
        value = VALUE + b"\x00"
    else:
        key = None  # type: ignore[assignment]
    outcome = RecordVerifier(keyring).verify(topic, key, value, headers, CONTROLLER)
    assert _rejection(outcome) is Rejection.BAD_SIGNATURE


def test_a_retry_tier_record_verifies_against_the_topic_it_was_signed_for(keyring: Keyring) -> None:
    headers = RecordSigner(keyring, "controller").headers(TOPIC, KEY, VALUE)
    verifier = RecordVerifier(keyring)
    retry = f"{TOPIC}.retry-10s"
    assert _rejection(verifier.verify(retry, KEY, VALUE, headers, CONTROLLER)) is Rejection.BAD_SIGNATURE
    assert not isinstance(verifier.verify(retry, KEY, VALUE, headers, CONTROLLER, signed_topic=TOPIC),
                          Unauthenticated)


def test_unsigned_is_refused_when_enforced_and_accepted_in_rollout(keyring: Keyring) -> None:
    assert _rejection(RecordVerifier(keyring).verify(TOPIC, KEY, VALUE, None, CONTROLLER)) is Rejection.UNSIGNED
    accepted = RecordVerifier(keyring, AuthMode.ROLLOUT).verify(TOPIC, KEY, VALUE, [("other", b"1")], CONTROLLER)
    assert not isinstance(accepted, Unauthenticated) and accepted.unsigned


def test_rollout_still_refuses_a_bad_signature(keyring: Keyring) -> None:
    headers = [(H_KEY_ID, b"ctl-1"), (H_SIGNATURE, b"\x00" * 64)]
    outcome = RecordVerifier(keyring, AuthMode.ROLLOUT).verify(TOPIC, KEY, VALUE, headers, CONTROLLER)
    assert _rejection(outcome) is Rejection.BAD_SIGNATURE


def test_a_key_of_another_role_is_refused_even_with_a_valid_signature(keyring: Keyring) -> None:
    headers = RecordSigner(keyring, "retention-job").headers(TOPIC, KEY, VALUE)
    assert _rejection(RecordVerifier(keyring).verify(TOPIC, KEY, VALUE, headers, CONTROLLER)) is Rejection.WRONG_ROLE


def test_an_unknown_key_and_a_retired_key_are_refused(keyring: Keyring) -> None:
    other = Keyring([new_key("ctl-1", "controller", Algorithm.HMAC_SHA256)])  # same id, another secret
    forged = RecordSigner(other, "controller").headers(TOPIC, KEY, VALUE)
    assert _rejection(RecordVerifier(keyring).verify(TOPIC, KEY, VALUE, forged, CONTROLLER)) is \
        Rejection.BAD_SIGNATURE
    stranger = Keyring([new_key("ctl-9", "controller", Algorithm.HMAC_SHA256)])
    headers = RecordSigner(stranger, "controller").headers(TOPIC, KEY, VALUE)
    assert _rejection(RecordVerifier(keyring).verify(TOPIC, KEY, VALUE, headers, CONTROLLER)) is \
        Rejection.UNKNOWN_KEY
    genuine = RecordSigner(keyring, "controller").headers(TOPIC, KEY, VALUE)
    key = keyring.get("ctl-1")
    assert key is not None
    retired = Keyring([Key(key.id, key.role, key.algorithm, KeyStatus.RETIRED, secret=key.secret,
                           private=key.private, public=None if key.private else key.public)])
    assert _rejection(RecordVerifier(retired).verify(TOPIC, KEY, VALUE, genuine, CONTROLLER)) is \
        Rejection.RETIRED_KEY


@pytest.mark.parametrize("headers", [
    [(H_KEY_ID, b"ctl-1")],
    [(H_SIGNATURE, b"x")],
    [(H_KEY_ID, b"ctl-1"), (H_KEY_ID, b"ctl-1"), (H_SIGNATURE, b"x")],
    [(H_KEY_ID, b"\xff\xfe"), (H_SIGNATURE, b"x")],
])
def test_malformed_signature_headers_are_refused(keyring: Keyring, headers: list[tuple[str, bytes]]) -> None:
    assert _rejection(RecordVerifier(keyring, AuthMode.ROLLOUT).verify(TOPIC, KEY, VALUE, headers, CONTROLLER)) \
        is Rejection.MALFORMED


def test_a_verifier_holding_only_public_keys_cannot_sign() -> None:
    signing = Keyring([new_key("job-1", "retention-job", Algorithm.ED25519)])
    public = Keyring(k.public_only() for k in signing)
    assert public.signing_key("retention-job") is None
    headers = RecordSigner(signing, "retention-job").headers(TOPIC, KEY, VALUE)
    assert not isinstance(RecordVerifier(public).verify(TOPIC, KEY, VALUE, headers, frozenset({"retention-job"})),
                          Unauthenticated)


def test_subscriber_keys_sign_for_their_own_subscriber_only() -> None:
    keyring = Keyring([new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice")])
    verifier = RecordVerifier(keyring)
    headers = RecordSigner(keyring, "subscriber", "alice").headers("cuts", b"s/x", b"v")
    signer = verifier.verify("cuts", b"s/x", b"v", headers, frozenset({"subscriber"}))
    assert not isinstance(signer, Unauthenticated)
    assert verifier.check_subject("cuts", signer, "alice") is None
    refusal = verifier.check_subject("cuts", signer, "bob")
    assert refusal is not None and refusal.reason is Rejection.WRONG_SUBJECT


def test_rotation_signs_with_the_last_active_key_and_verifies_both() -> None:
    old, new = new_key("ctl-1", "controller", Algorithm.HMAC_SHA256), new_key("ctl-2", "controller",
                                                                            Algorithm.HMAC_SHA256)
    keyring = Keyring([old, new])
    signer = RecordSigner(keyring, "controller")
    assert signer.key.id == "ctl-2"
    verifier = RecordVerifier(keyring)
    for key in (old, new):
        headers = RecordSigner(Keyring([key]), "controller").headers(TOPIC, KEY, VALUE)
        assert not isinstance(verifier.verify(TOPIC, KEY, VALUE, headers, CONTROLLER), Unauthenticated)


def test_refusals_are_counted_by_topic_and_reason(keyring: Keyring) -> None:
    before = REJECTED.labels("counted-topic", "unsigned")._value.get()
    RecordVerifier(keyring).verify("counted-topic", KEY, VALUE, None, CONTROLLER)
    assert REJECTED.labels("counted-topic", "unsigned")._value.get() == before + 1


def test_signature_headers_are_picked_from_the_others() -> None:
    headers = [("reclaim.attempt", b"2"), (H_KEY_ID, b"k"), (H_SIGNATURE, b"s"), ("x", None)]
    assert signature_headers(headers) == [(H_KEY_ID, b"k"), (H_SIGNATURE, b"s")]


@pytest.mark.parametrize("headers", [
    [(H_KEY_ID, b"k"), (H_SIGNATURE, b"s")],  # as a signer writes them: the quick path
    [(H_SIGNATURE, b"s"), (H_KEY_ID, b"k")],
    [(H_KEY_ID, "k"), (H_SIGNATURE, b"s")],
    [(H_KEY_ID, b"k"), (H_SIGNATURE, None)],
    [(H_KEY_ID, b"k"), ("other", b"s")],
    [(H_KEY_ID, b"k"), (H_KEY_ID, b"k")],
])
def test_the_quick_path_for_a_pair_of_signature_headers_picks_what_the_general_one_does(
        headers: list[tuple[str, bytes | str | None]]) -> None:
    general = [(name, value if isinstance(value, bytes) else value.encode())
               for name, value in headers if name in (H_KEY_ID, H_SIGNATURE) and value is not None]
    assert signature_headers(headers) == general == signature_headers(tuple(headers))


@pytest.mark.parametrize("length", [32, 63, 64, 65, 200])
def test_the_keyed_once_hmac_is_hmac_sha256(length: int) -> None:
    secret = bytes(range(7, 7 + length))  # longer than SHA-256's 64-byte block: hashed first
    digest = _hmac(secret)
    for message in (b"", b"a", bytes(range(256)) * 5):
        assert digest(message) == hmac.new(secret, message, hashlib.sha256).digest()
