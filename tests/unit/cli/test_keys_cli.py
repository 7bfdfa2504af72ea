"""``reclaim keys`` grants: a subscriber key made with its streams, streams granted and taken away in the file
(replaced whole, mode 0600), shown by ``list`` and kept by ``public``; bad input is one line, exit 64."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from reclaim.cli.main import main
from reclaim.exits import ExitCode
from reclaim.security.keyring import load_keyring, parse_keyring


@pytest.fixture
def keyring(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("RECLAIM_KEYRING", "RECLAIM_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    path = tmp_path / "job.toml"
    assert main(["keys", "new", "--role", "subscriber", "--subject", "billing", "--id", "billing-1",
                 "--stream", "scope/orders", "--stream", "billing/*", "--stream", "scope/orders",
                 "--keyring", str(path)]) == 0
    assert main(["keys", "new", "--role", "admin", "--id", "admin-1", "--keyring", str(path)]) == 0
    return path


def _streams(path: Path, key_id: str = "billing-1") -> tuple[str, ...] | None:
    key = load_keyring(path).get(key_id)
    assert key is not None
    return key.streams


def test_a_subscriber_key_is_made_with_its_streams_once_each(keyring: Path, capsys: pytest.CaptureFixture[str]
                                                             ) -> None:
    assert _streams(keyring) == ("scope/orders", "billing/*")
    assert _streams(keyring, "admin-1") is None
    assert main(["keys", "new", "--role", "subscriber", "--subject", "audit", "--id", "audit-1", "--stream", "a/*",
                 "--keyring", str(keyring)]) == 0
    assert capsys.readouterr().out.startswith("key audit-1 (subscriber audit, ed25519, streams a/*) added to ")
    assert main(["keys", "new", "--role", "subscriber", "--subject", "ops", "--id", "ops-1",
                 "--keyring", str(keyring)]) == 0
    assert _streams(keyring, "ops-1") == ()  # granted nothing, said in the file: it acts for no stream


def test_grant_and_ungrant_change_one_key_s_streams_in_a_file_replaced_whole(keyring: Path,
                                                                            capsys: pytest.CaptureFixture[str]) -> None:
    before = keyring.stat().st_ino
    assert main(["keys", "grant", "--id", "billing-1", "--stream", "audit/*", "--stream", "billing/*",
                 "--keyring", str(keyring)]) == 0
    assert _streams(keyring) == ("scope/orders", "billing/*", "audit/*")
    assert keyring.stat().st_ino != before and stat.S_IMODE(keyring.stat().st_mode) == 0o600
    assert main(["keys", "ungrant", "--id", "billing-1", "--stream", "scope/orders", "--stream", "audit/*",
                 "--keyring", str(keyring)]) == 0
    assert _streams(keyring) == ("billing/*",)
    assert main(["keys", "ungrant", "--id", "billing-1", "--stream", "billing/*", "--keyring", str(keyring)]) == 0
    assert _streams(keyring) == ()
    assert capsys.readouterr().out.splitlines()[-1] == f"key billing-1 in {keyring}: streams (none)"
    assert load_keyring(keyring).get("admin-1") is not None  # the other keys are kept as they were


def test_list_shows_a_subscriber_key_s_grants_and_public_keeps_them(keyring: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["keys", "list", "--keyring", str(keyring)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("(signs)  streams=scope/orders,billing/*") and "streams" not in lines[1]
    assert main(["keys", "list", "--json", "--keyring", str(keyring)]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert rows[0]["streams"] == ["scope/orders", "billing/*"] and "streams" not in rows[1]
    assert main(["keys", "public", "--role", "subscriber", "--keyring", str(keyring)]) == 0
    public = parse_keyring(capsys.readouterr().out).get("billing-1")
    assert public is not None and public.private is None and public.streams == ("scope/orders", "billing/*")


@pytest.mark.parametrize(("args", "message"), [
    (["new", "--role", "admin", "--id", "admin-2", "--stream", "s/x"], "--stream grants a subscriber key a stream"),
    (["new", "--role", "subscriber", "--subject", "a", "--id", "a-1", "--stream", ""],
     "key a-1: each of streams is a stream name or pattern of 1 to 255 characters"),
    (["new", "--role", "subscriber", "--subject", "a", "--id", "a-1", "--stream", "x" * 256], "1 to 255 characters"),
    (["grant", "--id", "billing-1"], "keys grant needs --id KEY and --stream NAME_OR_PATTERN"),
    (["grant", "--stream", "s/x"], "keys grant needs --id KEY and --stream"),
    (["grant", "--id", "nobody-1", "--stream", "s/x"], "has no key 'nobody-1'"),
    (["grant", "--id", "admin-1", "--stream", "s/x"], "key admin-1 is the admin role's: only a subscriber key"),
    (["ungrant", "--id", "billing-1", "--stream", "scope/*"],
     "key billing-1 has no grant 'scope/*' (its grants: scope/orders,billing/*); ungrant removes a grant as listed"),
])
def test_bad_grants_are_one_line_and_exit_64_and_leave_the_file_alone(
        keyring: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    before = keyring.read_bytes()
    capsys.readouterr()
    assert main(["keys", *args, "--keyring", str(keyring)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert keyring.read_bytes() == before


def test_a_flag_of_another_verb_is_refused(keyring: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["keys", "list", "--stream", "s/x", "--keyring", str(keyring)])
    assert exited.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err == ("reclaim: error: keys list: unrecognized arguments: --stream s/x (see reclaim keys list --help)\n")


def test_a_grant_past_the_limit_is_refused(keyring: Path, capsys: pytest.CaptureFixture[str]) -> None:
    many = [arg for number in range(999) for arg in ("--stream", f"s/{number}")]
    assert main(["keys", "grant", "--id", "billing-1", *many, "--keyring", str(keyring)]) == ExitCode.USAGE
    assert "at most 1000 streams may be granted, got 1001" in capsys.readouterr().err
    assert _streams(keyring) == ("scope/orders", "billing/*")
