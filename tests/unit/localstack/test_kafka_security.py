"""The secured broker's settings and files, without starting it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from reclaim import config_file
from reclaim.localstack.kafka_broker import BrokerPorts, _server_properties
from reclaim.localstack.kafka_security import BROKER_PRINCIPAL, prepare, read_properties, reclaim_config
from reclaim.localstack.stack import SECURE_DIR, StackState, local_config, local_config_text, secure_files
from reclaim.settings import Settings
from tests.support.cli import clean_env, run_reclaim


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_prepare_keeps_the_admin_password_and_writes_secrets_0600(tmp_path: Path) -> None:
    first = prepare(tmp_path, "127.0.0.1:9093")
    properties = read_properties(tmp_path / "admin.properties")
    assert properties == {"bootstrap.servers": "127.0.0.1:9093", **first.admin_properties()}
    assert properties["security.protocol"] == "SASL_SSL" and properties["sasl.mechanism"] == "SCRAM-SHA-512"
    assert _mode(tmp_path / "admin.properties") == 0o600 and _mode(first.keystore_path) == 0o600
    keystore = first.keystore_path.read_text()
    assert keystore.index("BEGIN PRIVATE KEY") < keystore.index("BEGIN CERTIFICATE")
    assert first.admin_password not in repr(first)
    again = prepare(tmp_path, "127.0.0.1:9094")  # a restart on other ports: same password and CA
    assert again.admin_password == first.admin_password and again.ca_path == first.ca_path
    assert read_properties(tmp_path / "admin.properties")["bootstrap.servers"] == "127.0.0.1:9094"


def test_the_secured_broker_has_no_plaintext_listener_and_enforces_acls(tmp_path: Path) -> None:
    security = prepare(tmp_path, "127.0.0.1:9093")
    text = _server_properties(tmp_path, BrokerPorts(client=9093, controller=9094), security)
    config = dict(line.split("=", 1) for line in text.splitlines() if line)
    assert config["listeners"] == "SASL_SSL://127.0.0.1:9093,CONTROLLER://127.0.0.1:9094"
    assert config["listener.security.protocol.map"] == "CONTROLLER:SSL,SASL_SSL:SASL_SSL"
    assert config["listener.name.controller.ssl.client.auth"] == "required"
    assert config["allow.everyone.if.no.acl.found"] == "false"
    assert config["authorizer.class.name"].endswith("StandardAuthorizer")
    assert config["super.users"] == f"User:admin;{BROKER_PRINCIPAL}"  # never User:ANONYMOUS
    assert config["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "PLAINTEXT" not in text
    with pytest.raises(ValueError, match="one client listener"):
        _server_properties(tmp_path, BrokerPorts(client=1, controller=2, direct=3), security)


def test_the_admin_config_file_is_a_reclaim_config_with_a_kafka_table(tmp_path: Path) -> None:
    import tomllib

    security = prepare(tmp_path, "127.0.0.1:9093")
    config = tmp_path / "admin.toml"
    assert _mode(config) == 0o600
    data = tomllib.loads(config.read_text())
    assert data == {"bootstrap": "127.0.0.1:9093", "kafka": security.admin_properties()}


def test_every_config_file_local_up_secure_writes_is_accepted_by_every_command(tmp_path: Path) -> None:
    # What `local up --secure` writes, without the servers: the admin's files, then the stack's settings file.
    state_dir = tmp_path / "state"
    prepare(state_dir / SECURE_DIR, "127.0.0.1:9093")
    state = StackState(kafka_client_port=9093, kafka_controller_port=9094, s3_url="http://127.0.0.1:9000",
                       s3_bucket="tier2", kafka_secure=True)
    local_config(state_dir).write_text(local_config_text(Settings(state_dir=state_dir, s3_bucket="tier2"), state))
    admin_config = secure_files(state_dir)[2]
    for config in (admin_config, local_config(state_dir)):
        env = config_file.load(config)
        assert env["RECLAIM_BOOTSTRAP"] == "127.0.0.1:9093" and env["RECLAIM_KAFKA_SASL_USERNAME"] == "admin"
        assert not any("BOOTSTRAP_SERVERS" in name for name in env)
        shown = run_reclaim("--config", str(config), "config", "show", env=clean_env(tmp_path), timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "bootstrap = 127.0.0.1:9093" in shown.stdout and "kafka.security.protocol = SASL_SSL" in shown.stdout


def test_a_config_file_is_never_written_with_a_property_its_kafka_table_refuses() -> None:
    with pytest.raises(ValueError, match="bootstrap.servers cannot be set"):
        reclaim_config("127.0.0.1:9093", {"bootstrap.servers": "127.0.0.1:9093", "security.protocol": "SASL_SSL"})
