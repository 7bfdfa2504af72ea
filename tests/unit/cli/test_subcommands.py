"""Every verb of a command is a sub-command of its own: its help lists its own flags and examples, the global
and connection options go before or after the command and its verb, and a command line without a command
prints the help of where it stopped."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from reclaim.cli.main import build_parser, main
from reclaim.exits import ExitCode
from tests.support.cli import clean_env, one_line_error, run_reclaim

GROUPS = {
    "local": ["up", "down", "status"],
    "topics": ["create", "describe", "retain", "retention"],
    "topics retention": ["list", "show", "plan", "release", "history"],
    "deletions": ["inflight", "stalled"],
    "dlq": ["list", "show", "stats", "replay", "purge"],
    "streams": ["create", "set-policy", "cut", "record", "truncate", "history", "write"],
    "acls": ["plan", "apply"],
    "keys": ["new", "list", "public", "retire", "grant", "ungrant"],
    "config": ["show"],
}


def help_of(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*args, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def flags_in(text: str) -> set[str]:
    """The flags a help lists, each line of its options ``-v, --verbose  help`` giving ``-v`` and ``--verbose``."""
    listed = re.findall(r"(?m)^  (-[^ ].*?)(?:  |$)", text)
    return {spelling.split()[0] for line in listed for spelling in line.split(", ")}


@pytest.mark.parametrize(("group", "verbs"), GROUPS.items())
def test_a_groups_help_lists_its_verbs_and_no_verbs_flags(capsys: pytest.CaptureFixture[str], group: str,
                                                          verbs: list[str]) -> None:
    text = help_of(capsys, *group.split())
    listed = [line.split()[0] for line in text.split("verbs:")[1].splitlines()[2:] if line.startswith("    ")
              and not line.startswith("     ")]
    assert listed == verbs
    assert flags_in(text) == {"-h", "--help"}, text


@pytest.mark.parametrize(("group", "verb"), [(g, v) for g, verbs in GROUPS.items() for v in verbs
                                             if (g, v) != ("topics", "retention")])  # a group of its own
def test_every_verb_has_a_description_and_an_example(capsys: pytest.CaptureFixture[str], group: str,
                                                     verb: str) -> None:
    text = help_of(capsys, *group.split(), verb)
    assert text.startswith(f"usage: reclaim {group} {verb} ")
    assert f"reclaim {group} {verb}" in text.split("\nexamples:\n")[1]


@pytest.mark.parametrize(("args", "absent", "present"), [
    (["streams", "create"], {"--cut", "--publish", "--type", "--json", "--file"}, {"--segments", "--chunk-size"}),
    (["streams", "truncate"], {"--segments", "--type", "--min"}, {"--cut", "--publish"}),
    (["streams", "write"], {"--cut", "--segments"}, {"--file", "--event-size", "--bootstrap"}),
    (["keys", "new"], {"--bootstrap", "--s3-bucket", "--state-dir", "--with-secrets", "--json"},
     {"--role", "--id", "--keyring", "--config", "-v"}),
    (["keys", "list"], {"--bootstrap", "--stream", "--role"}, {"--json", "--keyring"}),
    (["deletions", "inflight"], {"--resend", "--older-than", "--metadata-path"}, {"--group-id", "--json"}),
    (["local", "down"], {"--secure", "--json"}, {"--state-dir"}),
])
def test_a_verbs_help_lists_only_its_own_flags(capsys: pytest.CaptureFixture[str], args: list[str],
                                               absent: set[str], present: set[str]) -> None:
    flags = flags_in(help_of(capsys, *args))
    assert not flags & absent
    assert present <= flags


@pytest.mark.parametrize("args", [
    ["--bootstrap", "flag:1", "config", "show", "--json"],
    ["config", "--bootstrap", "flag:1", "show", "--json"],
    ["config", "show", "--json", "--bootstrap", "flag:1"],
    ["--bootstrap", "other:1", "config", "show", "--bootstrap", "flag:1", "--json"],  # the later one
    ["config", "--json", "show", "--bootstrap", "flag:1"],
])
def test_global_options_go_before_or_after_the_command_and_its_verb(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str]) -> None:
    for name in [name for name in os.environ if name.startswith("RECLAIM_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("RECLAIM_STATE_DIR", str(tmp_path / "state"))
    assert main(args) == ExitCode.OK
    assert json.loads(capsys.readouterr().out)["bootstrap"] == "flag:1"


@pytest.mark.parametrize(("args", "verbose", "bootstrap"), [
    (["-v", "topics", "describe"], 1, None),
    (["topics", "-v", "describe", "-v"], 2, None),
    (["-vv", "--bootstrap", "h:1", "topics", "-v", "describe"], 3, "h:1"),
    (["topics", "describe", "--bootstrap", "h:1"], 0, "h:1"),
    (["worker", "-vv"], 2, None),
])
def test_verbose_counts_wherever_it_is_given(args: list[str], verbose: int, bootstrap: str | None) -> None:
    parsed = build_parser().parse_args(args)
    assert (parsed.verbose, parsed.bootstrap) == (verbose, bootstrap)


@pytest.mark.parametrize("args", [["dlq", "--json", "list"], ["dlq", "list", "--json"],
                                  ["topics", "--json", "describe"], ["keys", "--keyring", "k.toml", "list"]])
def test_a_groups_shared_flag_goes_before_the_verb_too(args: list[str]) -> None:
    parsed = build_parser().parse_args(args)
    assert parsed.keyring == Path("k.toml") if args[0] == "keys" else parsed.json is True


@pytest.mark.parametrize(("args", "starts"), [
    ([], "usage: reclaim [-h]"),
    (["streams"], "usage: reclaim streams [-h] VERB"),
    (["-v", "dlq"], "usage: reclaim dlq [-h] VERB"),
])
def test_no_command_prints_the_help_of_where_it_stopped_and_exits_0(
        capsys: pytest.CaptureFixture[str], args: list[str], starts: str) -> None:
    assert main(args) == ExitCode.OK
    out = capsys.readouterr()
    assert out.out.startswith(starts) and out.err == ""


@pytest.mark.parametrize(("args", "message"), [
    (["streams", "creat", "scope/x"], "streams: argument VERB: invalid choice: 'creat'"),
    (["keys", "list", "--stream", "s/x"], "keys list: unrecognized arguments: --stream s/x (see reclaim keys list"),
    (["streams", "record", "scope/x"], "streams record: unrecognized arguments: scope/x"),
    (["streams", "write", "scope/x", "--event-size", "0"], "--event-size must be between 1 and 67108864 bytes, got 0"),
    (["streams", "create", "scope/x", "--chunk-size", "10"], "--chunk-size must be between 1024 and 1073741824"),
    (["nope"], "argument COMMAND: invalid choice: 'nope'"),
])
def test_a_wrong_verb_or_flag_is_one_line_and_exit_64(tmp_path: Path, args: list[str], message: str) -> None:
    result = run_reclaim(*args, "--bootstrap", "127.0.0.1:1", env=clean_env(tmp_path), timeout=60)
    assert message in one_line_error(result, ExitCode.USAGE)
    assert not (tmp_path / "state").exists()


def test_the_command_functions_still_read_the_verb() -> None:
    parsed = build_parser().parse_args(["streams", "cut", "scope/x"])
    assert (parsed.command, parsed.action, parsed.stream) == ("streams", "cut", "scope/x")
    assert isinstance(parsed.reached, argparse.ArgumentParser) and parsed.reached.prog == "reclaim streams cut"
