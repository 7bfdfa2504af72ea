"""``reclaim completion``: the bash script is loaded into a real bash and asked to complete lines as the shell
would (its completion function called with ``COMP_WORDS`` set); the other shells' scripts are generated and
name every command (no zsh, fish, tcsh or PowerShell here to run them)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from reclaim.cli.completion import script
from reclaim.cli.main import COMMANDS, build_parser
from reclaim.exits import ExitCode
from tests.support.cli import run_reclaim

_ASK = r"""
source "$1"; cd "$2"
COMP_LINE="$3"; read -ra COMP_WORDS <<< "$3"
[[ "$3" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_POINT=${#COMP_LINE}; COMPREPLY=()
_shtab_reclaim reclaim "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"
"""


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # A configuration that cannot be read does not stop it: it reads no settings.
    env = {**os.environ, "RECLAIM_PARTITIONS": "not-a-number", "RECLAIM_CONFIG": "/no/such/reclaim.toml"}
    script = run_reclaim("completion", "bash", env=env, timeout=60, check=True).stdout
    path = tmp_path_factory.mktemp("completion") / "reclaim.bash"
    path.write_text(script)
    return path


def completions(script: Path, where: Path, line: str) -> list[str]:
    bash = shutil.which("bash")
    assert bash is not None, "bash is needed to run the completion script"
    done = subprocess.run([bash, "-c", _ASK, "ask", str(script), str(where), line], capture_output=True, text=True,
                          timeout=30, check=True)
    return done.stdout.split()


@pytest.mark.parametrize(("line", "expected"), [
    ("reclaim dl", ["dlq"]),
    ("reclaim dlq re", ["replay"]),
    ("reclaim truncation", ["truncation-applier"]),
    ("reclaim worker --proc", ["--processes"]),
    ("reclaim dlq purge --up", ["--up-to"]),
    ("reclaim --log-format ", ["text", "json"]),
    ("reclaim local ", ["up", "down", "status"]),
    ("reclaim keys new --algorithm ", ["hmac-sha256", "ed25519"]),
    ("reclaim streams ", ["create", "set-policy", "cut", "record", "truncate", "history", "write"]),
    ("reclaim streams write --ev", ["--event-size"]),
    ("reclaim streams create --c", ["--chunk-size", "--cache-dir", "--config"]),
])
def test_bash_completes_commands_flags_and_choices(bash_script: Path, tmp_path: Path, line: str,
                                                   expected: list[str]) -> None:
    assert completions(bash_script, tmp_path, line) == expected


def test_bash_completes_paths_where_a_flag_takes_one(bash_script: Path, tmp_path: Path) -> None:
    (tmp_path / "tier2-volume").mkdir()
    (tmp_path / "tier2.toml").write_text("")
    assert completions(bash_script, tmp_path, "reclaim worker --fs-root tier") == ["tier2-volume"]
    assert sorted(completions(bash_script, tmp_path, "reclaim --config tier")) == ["tier2-volume", "tier2.toml"]
    assert completions(bash_script, tmp_path, "reclaim worker --bootstrap tier") == []


@pytest.mark.parametrize("shell", ["zsh", "fish", "tcsh", "powershell"])
def test_every_shell_gets_a_script_naming_every_command(shell: str) -> None:
    text = script(build_parser(), shell)
    assert [command for command in COMMANDS if command.replace("_", "-") not in text] == []


def test_an_unknown_shell_is_a_usage_error() -> None:
    result = run_reclaim("completion", "cmd.exe", env=os.environ, timeout=60)
    assert result.returncode == ExitCode.USAGE and "invalid choice: 'cmd.exe'" in result.stderr
