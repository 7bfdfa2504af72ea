"""A keyring file followed while a process runs (pure, on a temporary file and a fake clock): a key retired,
removed or added there reaches a running verifier and signer within one check period."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from reclaim.security.errors import SigningError
from reclaim.security.keyring import Algorithm, Keyring, KeyStatus, new_key
from reclaim.security.live import RELOADS, KeyringFile
from reclaim.security.signing import RecordSigner, RecordVerifier, Rejection, Signer, Unauthenticated

ADMIN = frozenset({"admin"})
TOPIC, KEY, VALUE = "reclaim.truncation", b"scope/orders", b"\x01event"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _write(path: Path, keyring: Keyring) -> None:
    """As ``reclaim keys`` writes a keyring: a new file put in place whole."""
    temporary = path.with_suffix(".new")
    temporary.write_text(keyring.to_toml())
    temporary.chmod(0o600)
    os.replace(temporary, path)


@pytest.fixture
def keys() -> Keyring:
    return Keyring([new_key("admin-1", "admin", Algorithm.ED25519), new_key("admin-2", "admin", Algorithm.ED25519)])


def _retired(keyring: Keyring, key_id: str) -> Keyring:
    return Keyring(replace(key, status=KeyStatus.RETIRED) if key.id == key_id else key for key in keyring)


def test_a_key_retired_in_the_file_is_refused_by_a_running_verifier_within_one_period(tmp_path: Path,
                                                                                      keys: Keyring) -> None:
    path, clock = tmp_path / "keyring.toml", Clock()
    _write(path, keys)
    verifier = RecordVerifier(KeyringFile(path, check_every_s=2.0, clock=clock))
    old = RecordSigner(Keyring([keys.get("admin-1")]), "admin")  # type: ignore[list-item]
    headers = old.headers(TOPIC, KEY, VALUE)
    assert isinstance(verifier.verify(TOPIC, KEY, VALUE, headers, ADMIN), Signer)

    _write(path, _retired(keys, "admin-1"))
    clock.now = 1.0  # within the period: not looked at yet
    assert isinstance(verifier.verify(TOPIC, KEY, VALUE, headers, ADMIN), Signer)
    clock.now = 2.0
    refused = verifier.verify(TOPIC, KEY, VALUE, headers, ADMIN)
    assert isinstance(refused, Unauthenticated) and refused.reason is Rejection.RETIRED_KEY

    _write(path, Keyring([keys.get("admin-2")]))  # type: ignore[list-item]
    clock.now = 4.0
    removed = verifier.verify(TOPIC, KEY, VALUE, headers, ADMIN)
    assert isinstance(removed, Unauthenticated) and removed.reason is Rejection.UNKNOWN_KEY


def test_a_running_signer_follows_the_file_and_fails_when_no_key_is_left_to_sign_with(tmp_path: Path,
                                                                                     keys: Keyring) -> None:
    path, clock = tmp_path / "keyring.toml", Clock()
    _write(path, Keyring([keys.get("admin-1")]))  # type: ignore[list-item]
    signer = RecordSigner(KeyringFile(path, clock=clock), "admin")
    assert dict(signer.headers(TOPIC, KEY, VALUE))["reclaim.key-id"] == b"admin-1"

    _write(path, keys)  # a new key listed after the old one: signed with from the next check on
    clock.now = 2.0
    assert dict(signer.headers(TOPIC, KEY, VALUE))["reclaim.key-id"] == b"admin-2"

    _write(path, _retired(_retired(keys, "admin-1"), "admin-2"))
    clock.now = 4.0
    with pytest.raises(SigningError, match="no active key"):
        signer.headers(TOPIC, KEY, VALUE)


def test_a_file_that_cannot_be_read_keeps_the_keys_read_before_and_is_counted(tmp_path: Path, keys: Keyring) -> None:
    path, clock = tmp_path / "keyring.toml", Clock()
    _write(path, keys)
    watched = KeyringFile(path, clock=clock)
    before = RELOADS.labels("failed")._value.get()
    path.write_text("[[key]]\nid = ")  # an edit half written
    clock.now = 2.0
    assert watched.current() is not None and len(watched.current()) == 2
    assert RELOADS.labels("failed")._value.get() == before + 1

    _write(path, _retired(keys, "admin-2"))  # the edit finished: read at the next check
    clock.now = 4.0
    assert watched.current().get("admin-2").status is KeyStatus.RETIRED  # type: ignore[union-attr]


def test_an_unchanged_file_is_not_read_again(tmp_path: Path, keys: Keyring) -> None:
    path, clock = tmp_path / "keyring.toml", Clock()
    _write(path, keys)
    watched = KeyringFile(path, clock=clock)
    first = watched.current()
    for second in range(1, 20):
        clock.now = float(second)
        assert watched.current() is first
