"""``reclaim local up --secure``: the local stack's broker secured, its CA and admin credentials in files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from reclaim.localstack.kafka_security import read_properties
from reclaim.producers.config import quiet_logger
from tests.support.cli import run_reclaim

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def reclaim(*args: str, state_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RECLAIM_STATE_DIR": str(state_dir)}
    env.pop("RECLAIM_BOOTSTRAP", None)
    return run_reclaim(*args, env=env)


def test_local_up_secure_prints_where_the_credentials_are_never_the_password(tmp_path: Path) -> None:
    state = tmp_path / "state"
    try:
        up = reclaim("local", "up", "--secure", state_dir=state)
        assert up.returncode == 0, up.stderr
        admin_file = state / "kafka-secure" / "admin.properties"
        ca = state / "kafka-secure" / "tls" / "ca.crt"
        assert "SASL_SSL" in up.stdout and str(admin_file) in up.stdout and str(ca) in up.stdout
        assert stat.S_IMODE(admin_file.stat().st_mode) == 0o600
        properties = read_properties(admin_file)
        password = properties["sasl.password"]
        assert password not in up.stdout + up.stderr
        assert properties["ssl.ca.location"] == str(ca)

        status = reclaim("local", "status", "--json", state_dir=state)
        kafka = json.loads(status.stdout)["kafka"]
        assert status.returncode == 0 and kafka["healthy"] and kafka["security"] == "SASL_SSL"
        assert password not in status.stdout
        # the file is all a client needs; without it the broker takes no one
        config = {**properties, "logger": quiet_logger("tests.security")}
        assert AdminClient(config).list_topics(timeout=10).brokers
        assert reclaim("local", "up", "--secure", state_dir=state).returncode == 0  # idempotent

        # the config file is all reclaim needs: topics and ACLs as the admin, over SASL_SSL
        admin_config = state / "kafka-secure" / "admin.toml"
        assert str(admin_config) in up.stdout and stat.S_IMODE(admin_config.stat().st_mode) == 0o600
        topics = reclaim("--config", str(admin_config), "topics", "create", "--partitions", "1", state_dir=state)
        assert topics.returncode == 0 and "created  reclaim.truncation" in topics.stdout, topics.stderr
        granted = reclaim("--config", str(admin_config), "acls", "apply", "--role", "worker", "--principal",
                          "User:worker", state_dir=state)
        assert granted.returncode == 0 and "created" in granted.stdout, granted.stderr
        shown = reclaim("--config", str(admin_config), "config", "show", state_dir=state)
        assert "kafka.sasl.username = admin" in shown.stdout and password not in shown.stdout
        # the stack's settings file, which `up` tells every command to use, reaches the secured broker too
        local_config = state / "local.toml"
        assert str(local_config) in up.stdout
        described = reclaim("--config", str(local_config), "topics", "describe", "--partitions", "1",
                            state_dir=state)
        assert described.returncode == 0 and "reclaim.truncation" in described.stdout, described.stderr

        plain = reclaim("local", "up", state_dir=state)
        assert plain.returncode == 2 and "runs secured, not PLAINTEXT" in plain.stderr
        assert plain.stderr.count("\n") == 1
    finally:
        reclaim("local", "down", state_dir=state)
    assert not json.loads(reclaim("local", "status", "--json", state_dir=state).stdout)["kafka"]["healthy"]
