"""``reclaim local up | topics create | topics describe | local down`` as a user runs them."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tomllib
from pathlib import Path

import pytest

from reclaim.localstack.procs import pid_alive
from reclaim.settings import Settings
from reclaim.tools.topics import topic_specs
from tests.support.cli import run_reclaim

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def reclaim(*args: str, state_dir: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECLAIM_STATE_DIR": str(state_dir)}
    env.pop("RECLAIM_BOOTSTRAP", None)
    return run_reclaim(*args, env=env, check=check)


def test_up_topics_down_leaves_nothing_behind(tmp_path: Path) -> None:
    state = tmp_path / "state"
    up = reclaim("local", "up", state_dir=state)
    status = json.loads(reclaim("local", "status", "--json", state_dir=state).stdout)
    assert status["kafka"]["healthy"] and status["s3"]["healthy"]
    # The stack brings its own settings, a config file; nothing finds the stack without it.
    config = state / "local.toml"
    assert f"reclaim --config {config} <command>" in up.stdout
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    settings = tomllib.loads(config.read_text())
    assert settings["bootstrap"] == status["kafka"]["bootstrap"] and settings["s3_endpoint"] == status["s3"]["endpoint"]
    unconfigured = reclaim("topics", "create", state_dir=state, check=False)
    assert unconfigured.returncode == 2 and "no Kafka broker configured" in unconfigured.stderr
    pids = [status["kafka"]["pid"], status["s3"]["pid"]]

    # up is idempotent: the same processes keep running.
    reclaim("local", "up", state_dir=state)
    again = json.loads(reclaim("local", "status", "--json", state_dir=state).stdout)
    assert [again["kafka"]["pid"], again["s3"]["pid"]] == pids

    created = reclaim("--config", str(config), "topics", "create", state_dir=state).stdout
    expected = [spec.name for spec in topic_specs(Settings())]
    assert all(f"created  {name}" in created for name in expected)
    assert all(f"exists   {name}" in reclaim("--config", str(config), "topics", "create", state_dir=state).stdout
               for name in expected)
    described = reclaim("--config", str(config), "topics", "describe", state_dir=state).stdout
    assert "reclaim.ledger-deletion.dlq" in described and "compact" in described
    assert "(missing)" not in described

    reclaim("local", "down", state_dir=state)
    assert not any(pid_alive(pid) for pid in pids)
    down = reclaim("local", "status", "--json", state_dir=state, check=False)
    assert down.returncode == 3
    assert not json.loads(down.stdout)["kafka"]["healthy"]
    assert {facts["state"] for facts in json.loads(down.stdout).values()} == {"stopped"}
    assert "local stack stopped" in reclaim("local", "status", state_dir=state, check=False).stdout


def test_missing_java_is_one_clear_message(tmp_path: Path) -> None:
    env = {**os.environ, "RECLAIM_STATE_DIR": str(tmp_path / "state"), "PATH": str(tmp_path / "empty-bin"),
           "XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = run_reclaim("local", "up", env=env, timeout=60)
    assert result.returncode == 2
    assert "`java` not found on PATH: install a Java 17+ runtime" in result.stderr
    assert "Traceback" not in result.stderr


def test_topics_without_a_broker_says_what_to_do(tmp_path: Path) -> None:
    result = reclaim("topics", "create", state_dir=tmp_path / "empty", check=False)
    assert result.returncode == 2
    assert "reclaim local up" in result.stderr
