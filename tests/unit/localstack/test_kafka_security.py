"""The secured broker's settings and files, without starting it."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from reclaim.localstack.kafka_broker import BrokerPorts, _server_properties
from reclaim.localstack.kafka_security import BROKER_PRINCIPAL, prepare, read_properties


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
