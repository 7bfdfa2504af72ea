"""``reclaim local status`` of a stack that is not running: "stopped" (exit 3), never a pid of None."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reclaim.exits import ExitCode
from reclaim.localstack.stack import StackState
from tests.support.cli import clean_env, run_reclaim


def status(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_reclaim("local", "status", *args, env=clean_env(tmp_path), timeout=60)


def test_a_stack_never_started_is_stopped(tmp_path: Path) -> None:
    result = status(tmp_path)
    assert result.returncode == ExitCode.UNHEALTHY, result.stderr
    assert result.stdout == f"local stack stopped ({tmp_path / 'state'}): `reclaim local up` starts it\n"
    assert not (tmp_path / "state").exists(), "status created the state directory"


def test_after_down_the_stack_is_stopped_in_text_and_json(tmp_path: Path) -> None:
    # What `local down` leaves: the ports kept for the next `up`, no pid, no endpoint.
    StackState(kafka_client_port=9092, kafka_controller_port=9093, s3_bucket="reclaim-tier2").save(tmp_path / "state")
    result = status(tmp_path)
    assert result.returncode == ExitCode.UNHEALTHY, result.stderr
    assert "stopped" in result.stdout and "pid=None" not in result.stdout and "NOT HEALTHY" not in result.stdout
    shown = status(tmp_path, "--json")
    assert shown.returncode == ExitCode.UNHEALTHY
    document = json.loads(shown.stdout)
    assert {part: (facts["state"], facts["healthy"]) for part, facts in document.items()} == {
        "kafka": ("stopped", False), "s3": ("stopped", False)}


def test_a_server_gone_without_down_is_not_healthy_and_named_by_its_pid(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(gone.stdout)
    StackState(kafka_pid=pid, kafka_client_port=9092, kafka_controller_port=9093).save(tmp_path / "state")
    result = status(tmp_path)
    assert result.returncode == ExitCode.UNHEALTHY
    lines = result.stdout.splitlines()
    assert lines[0].startswith("kafka  NOT HEALTHY") and f"pid={pid}" in lines[0]
    assert lines[1] == "s3     stopped"


def test_an_emulator_is_reported_while_on_record_and_its_state_file_fields_are_checked(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    pid = int(gone.stdout)
    StackState(azure_pid=pid, azure_url="http://127.0.0.1:1/devstoreaccount1",
               azure_container="reclaim-tier2").save(tmp_path / "state")
    lines = status(tmp_path).stdout.splitlines()
    assert lines[1:] == ["s3     stopped", f"azure  NOT HEALTHY  endpoint=http://127.0.0.1:1/devstoreaccount1 "
                                           f"pid={pid} container=reclaim-tier2"]
    (tmp_path / "state" / "stack.json").write_text(json.dumps({"gcs_url": 9000}))
    refused = status(tmp_path)
    assert refused.returncode == ExitCode.UNAVAILABLE and "gcs_url is 9000" in refused.stderr
