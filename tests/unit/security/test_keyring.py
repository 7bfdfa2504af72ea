"""Keyring files: what loads, and one clear line for each thing wrong with one."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from reclaim.security.errors import KeyringError
from reclaim.security.keyring import MAX_GRANTS, Algorithm, Keyring, load_keyring, new_key, parse_keyring

_PUBLIC = new_key("p", "admin", Algorithm.ED25519).public
assert _PUBLIC is not None
PUB = base64.b64encode(_PUBLIC).decode()
ADMIN = f'[[key]]\nid = "k"\nrole = "admin"\nalgorithm = "ed25519"\npublic = "{PUB}"\n'
SUBSCRIBER = ADMIN.replace('"admin"', '"subscriber"\nsubject = "alice"')


def _granted(count: int) -> str:
    """A subscriber key granted ``count`` streams."""
    return SUBSCRIBER + "streams = [" + ", ".join(['"s/x"'] * count) + "]\n"



def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "keyring.toml"
    path.write_text(text)
    path.chmod(0o600)
    return path


def test_a_keyring_round_trips_through_its_file(tmp_path: Path) -> None:
    keys = Keyring([new_key("ctl-1", "controller", Algorithm.HMAC_SHA256),
                    new_key("alice-1", "subscriber", Algorithm.ED25519, subject='al"ice')])
    loaded = load_keyring(_write(tmp_path, keys.to_toml()))
    assert [(k.id, k.role, k.subject, k.can_sign) for k in loaded] == \
        [("ctl-1", "controller", None, True), ("alice-1", "subscriber", 'al"ice', True)]
    public = load_keyring(_write(tmp_path, keys.to_toml(public_only=True)))
    assert public.signing_key("subscriber", 'al"ice') is None
    assert public.signing_key("controller") is not None  # an HMAC verifier holds the secret itself


@pytest.mark.parametrize(("text", "message"), [
    ("nonsense = 1\n", "unknown table or setting 'nonsense'"),
    (ADMIN.replace('"k"', '"a b"'), "key id 'a b'"),
    (ADMIN.replace('"admin"', '"root"'), "unknown role 'root'"),
    ('[[key]]\nid = "k"\nrole = "admin"\nalgorithm = "rsa"\n', "'rsa' is not a valid Algorithm"),
    ('[[key]]\nid = "k"\nrole = "admin"\nalgorithm = "hmac-sha256"\nsecret = "c2hvcnQ="\n', "at least 32 bytes"),
    ('[[key]]\nid = "k"\nrole = "admin"\nalgorithm = "ed25519"\npublic = "%%%"\n', "public is not valid base64"),
    (ADMIN.replace('"admin"', '"subscriber"'), "names its subscriber"),
    (ADMIN + "colour = 1\n", "unknown field 'colour'"),
    (ADMIN * 2, "listed twice"),
    (ADMIN.replace(PUB, "A" * 44), "32-byte public half"),
    (ADMIN + 'streams = ["scope/orders"]\n', "key k: only a subscriber key is granted streams"),
    (SUBSCRIBER + 'streams = "scope/orders"\n', "key k: streams is a list of stream names or patterns"),
    (SUBSCRIBER + 'streams = ["scope/orders", ""]\n', "key k: each of streams is a stream name or pattern of 1 "
                                                      "to 255 characters, got ''"),
    (SUBSCRIBER + 'streams = [1]\n', "each of streams is a stream name or pattern"),
    (SUBSCRIBER + f'streams = ["{"x" * 256}"]\n', "of 1 to 255 characters"),
    (_granted(MAX_GRANTS + 1), "at most 1000 streams may be granted, got 1001"),
    ("[[key\n", "keyring"),
])
def test_a_bad_keyring_is_one_line_naming_the_problem(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(KeyringError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
        load_keyring(_write(tmp_path, text))
    assert "\n" not in str(caught.value)


def test_a_keyring_parses_from_its_text_as_from_its_file() -> None:
    keys = Keyring([new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice")])
    parsed = parse_keyring(keys.to_toml(public_only=True))
    assert [(k.id, k.public, k.private) for k in parsed] == [("alice-1", next(iter(keys)).public, None)]
    with pytest.raises(KeyringError, match="^the job's keys: key k: unknown field 'colour'$"):
        parse_keyring(ADMIN + "colour = 1\n", "the job's keys")


def test_a_missing_keyring_says_so(tmp_path: Path) -> None:
    with pytest.raises(KeyringError, match="does not exist"):
        load_keyring(tmp_path / "absent.toml")


def test_a_keyring_path_naming_a_fifo_or_a_device_is_refused_not_waited_on_or_read_whole(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path in (tmp_path / "fifo", Path("/dev/zero")):
        with pytest.raises(KeyringError, match=f"^keyring {path}: not a regular file$"):
            load_keyring(path)


def test_a_public_half_that_is_not_the_private_ones_is_refused(tmp_path: Path) -> None:
    key = new_key("k", "admin", Algorithm.ED25519)
    other = new_key("o", "admin", Algorithm.ED25519)
    assert key.private is not None and other.public is not None
    private, public = base64.b64encode(key.private).decode(), base64.b64encode(other.public).decode()
    text = f'[[key]]\nid = "k"\nrole = "admin"\nalgorithm = "ed25519"\nprivate = "{private}"\npublic = "{public}"\n'
    with pytest.raises(KeyringError, match="not the private half's"):
        load_keyring(_write(tmp_path, text))


def test_a_keyring_readable_by_others_is_loaded_with_a_warning(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    path = _write(tmp_path, Keyring([new_key("ctl-1", "controller", Algorithm.HMAC_SHA256)]).to_toml())
    path.chmod(0o644)
    assert len(load_keyring(path)) == 1
    assert "chmod 600" in caplog.text


def test_a_subscriber_key_s_grants_round_trip_and_travel_with_its_public_half(tmp_path: Path) -> None:
    granted = new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice",
                      streams=["scope/orders", "billing/*", 'we"ird\\x\n'])
    keys = Keyring([granted, new_key("bob-1", "subscriber", Algorithm.ED25519, subject="bob"),
                    new_key("carol-1", "subscriber", Algorithm.ED25519, subject="carol", streams=[])])
    for text in (keys.to_toml(), keys.to_toml(public_only=True)):
        loaded = load_keyring(_write(tmp_path, text))
        assert [k.streams for k in loaded] == [("scope/orders", "billing/*", 'we"ird\\x\n'), None, ()]
    assert granted.public_only().streams == granted.streams
    assert parse_keyring(keys.to_toml(public_only=True)).get("alice-1") == granted.public_only()
    assert parse_keyring(_granted(MAX_GRANTS)).get("k") is not None


def test_a_key_acts_for_the_streams_it_names_or_whose_pattern_matches_and_for_no_other() -> None:
    key = new_key("alice-1", "subscriber", Algorithm.ED25519, subject="alice", streams=["scope/orders", "billing/*"])
    assert key.grants("scope/orders") and key.grants("billing/invoices") and key.grants("billing/a/b")
    assert not key.grants("scope/orders2") and not key.grants("Billing/invoices") and not key.grants("scope/other")
    assert not new_key("bob-1", "subscriber", Algorithm.ED25519, subject="bob").grants("scope/orders")
    assert not new_key("carol-1", "subscriber", Algorithm.ED25519, subject="carol", streams=[]).grants("x")
