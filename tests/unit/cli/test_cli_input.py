"""What a user types, through the real ``reclaim`` entry point: one duration type for every flag, variable and
config key; one line for every input that does not parse, naming the flag; exit 141 when the reader goes away."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from reclaim.exits import ExitCode
from reclaim.storage.sql_store import SQLiteMetadataStore
from tests.support.cli import clean_env, one_line_error, run_reclaim


@pytest.fixture
def empty_state(tmp_path: Path) -> Path:
    """A state dir with an empty metadata store and filesystem binding, so the readers run."""
    state = tmp_path / "state"
    for part in ("chunks", "tags", "tmp"):
        (state / "tier2" / part).mkdir(parents=True)
    SQLiteMetadataStore(state / "metadata.db").close()
    return state


@pytest.mark.parametrize(("args", "field", "seconds"), [
    (["audit", "--grace", "1w"], "grace_s", 604800),
    (["audit", "--grace", "3600"], "grace_s", 3600),
    (["deletions", "stalled", "--older-than", "1w"], "older_than_s", 604800),
    (["deletions", "stalled", "--older-than", "90"], "older_than_s", 90),
])
def test_one_duration_type_for_every_flag(tmp_path: Path, empty_state: Path, args: list[str], field: str,
                                          seconds: float) -> None:
    result = run_reclaim(*args, "--json", env=clean_env(tmp_path))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)[field] == seconds


def test_a_duration_setting_takes_a_unit_from_a_variable_or_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text('mark_timeout_s = "2m"\nrecord_every_s = 0\n')
    env = clean_env(tmp_path, RECLAIM_STALL_AFTER_S="15m", RECLAIM_POLL_TIMEOUT_S="2.5")
    result = run_reclaim("--config", str(config), "config", "show", "--json", env=env)
    assert result.returncode == 0, result.stderr
    shown = json.loads(result.stdout)
    assert (shown["stall_after_s"], shown["poll_timeout_s"], shown["mark_timeout_s"], shown["record_every_s"]) == (
        900, 2.5, 120, 0)


@pytest.mark.parametrize(("args", "message"), [
    # argparse read "-5" or "-1h" as a flag ("expected one argument"): the flag's own check now names it.
    (["audit", "--grace", "-5"], "audit: argument --grace: must be at least 0s, got '-5'"),
    (["audit", "--grace", "-1h"], "audit: argument --grace: must be at least 0s, got '-1h'"),
    (["audit", "--grace", "banana"], "audit: argument --grace: cannot read 'banana' as a duration, e.g. 90, 90s"),
    (["audit", "--limit", "-5"], "audit: argument --limit: must not be negative, got -5"),
    (["deletions", "stalled", "--older-than", "2y"], "deletions stalled: argument --older-than: cannot read '2y'"),
    (["dlq", "list", "--older-than", "-1h"], "--older-than: must be a duration above 0"),
    (["dlq", "list", "--newer-than", "soon"], "--newer-than: cannot read 'soon' as a duration"),
    (["worker", "--stall-after-s", "0"], "worker: argument --stall-after-s: must be a duration above 0, got '0'"),
    (["worker", "--mark-timeout-s", "-5m"], "worker: argument --mark-timeout-s: must be a duration above 0"),
    (["truncation-applier", "--record-every-s", "-1"], "argument --record-every-s: must be at least 0s"),
    (["retention-job", "--reevaluate-s", "0"], "argument --reevaluate-s: must be a duration above 0"),
    # The command's parser tells an unknown flag, not the top level's.
    (["audit", "--frob"], "audit: unrecognized arguments: --frob (see reclaim audit --help)"),
    (["topics", "descrbe"], "topics: argument VERB: invalid choice: 'descrbe'"),
    (["topics", "describe", "--frob"], "topics describe: unrecognized arguments: --frob (see reclaim topics describe"),
])
def test_input_that_does_not_parse_is_one_line_naming_the_flag(tmp_path: Path, args: list[str],
                                                               message: str) -> None:
    result = run_reclaim(*args, env=clean_env(tmp_path, RECLAIM_BOOTSTRAP="127.0.0.1:1"))
    line = one_line_error(result, ExitCode.USAGE)
    assert message in line
    assert "usage:" not in result.stderr + result.stdout


@pytest.mark.parametrize(("variable", "raw"), [("RECLAIM_STALL_AFTER_S", "1x"), ("RECLAIM_MARK_TIMEOUT_S", "soon")])
def test_a_duration_variable_that_does_not_parse_is_named(tmp_path: Path, variable: str, raw: str) -> None:
    line = one_line_error(run_reclaim("config", "show", env=clean_env(tmp_path, **{variable: raw})), ExitCode.USAGE)
    assert f"{variable}: cannot read {raw!r} as a duration, e.g. 90, 90s, 15m, 1h, 7d or 1w" in line


def test_help_still_shows_the_usage(tmp_path: Path) -> None:
    result = run_reclaim("audit", "--help", env=clean_env(tmp_path))
    assert result.returncode == 0 and result.stdout.startswith("usage: reclaim audit")


@pytest.mark.parametrize("args", [["completion", "bash"], ["completion", "fish"], ["config", "show"]])
def test_a_reader_gone_away_is_exit_141_for_every_command(tmp_path: Path, args: list[str]) -> None:
    proc = subprocess.Popen([sys.executable, "-m", "reclaim", *args], env=clean_env(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader went away before anything was written (`| head` that is done)
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == ExitCode.BROKEN_PIPE, stderr
    assert stderr == ""
