"""Record authentication fails closed: the applier and the retention job do not start without a keyring unless
it was turned off explicitly, rollout says so at start and in a gauge, and `reclaim local up` makes a keyring
for the local stack, so that its tour runs signed. No server is needed: each refusal comes before any."""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

import pytest

from reclaim.localstack.kafka_security import write_private
from reclaim.localstack.stack import LOCAL_ROLES, StackState, local_config_text, local_keyring
from reclaim.security.keyring import Keyring, load_keyring
from reclaim.services import runtime
from reclaim.services.runtime import AUTH_MODE
from reclaim.settings import Settings
from tests.support.cli import clean_env, one_line_error, run_reclaim


@pytest.mark.parametrize("command", [["truncation-applier"], ["retention-job", "--once"]])
def test_the_applier_and_the_job_refuse_to_start_without_a_keyring(tmp_path: Path, command: list[str]) -> None:
    # The broker named does not exist: the refusal comes before anything tries to reach it.
    result = run_reclaim(*command, env=clean_env(tmp_path, RECLAIM_BOOTSTRAP="127.0.0.1:1"), timeout=120)
    line = one_line_error(result, 64)
    assert "no keyring" in line and "RECLAIM_KEYRING" in line and 'record_auth = "off"' in line


def test_record_auth_off_is_an_explicit_choice_and_shown_in_the_gauge(caplog: pytest.LogCaptureFixture) -> None:
    runtime.require_record_auth(Settings(record_auth="off"), "the truncation applier")
    assert AUTH_MODE.labels("off")._value.get() == 1 and AUTH_MODE.labels("enforce")._value.get() == 0


def test_rollout_warns_at_start_and_sets_the_gauge(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    keyring = local_keyring(tmp_path)
    with caplog.at_level(logging.WARNING):
        runtime.require_record_auth(Settings(keyring=keyring, record_auth="rollout"), "the retention job")
    assert any("rollout" in record.getMessage() and "unsigned" in record.getMessage() for record in caplog.records)
    assert AUTH_MODE.labels("rollout")._value.get() == 1
    runtime.require_record_auth(Settings(keyring=keyring), "the retention job")
    assert AUTH_MODE.labels("enforce")._value.get() == 1 and AUTH_MODE.labels("rollout")._value.get() == 0


def test_the_local_stack_gets_a_keyring_of_its_own_once_and_its_config_names_it(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    path = local_keyring(state_dir)
    assert path.stat().st_mode & 0o777 == 0o600
    keys = load_keyring(path)
    assert {key.role for key in keys if key.can_sign} == set(LOCAL_ROLES)
    assert local_keyring(state_dir) == path and load_keyring(path).to_toml() == keys.to_toml()  # kept on `up` again
    state = StackState(kafka_client_port=9092, kafka_controller_port=9093, s3_url="http://127.0.0.1:9000",
                       s3_bucket="tier2")
    config = tomllib.loads(local_config_text(Settings(state_dir=state_dir, s3_bucket="tier2"), state))
    assert config["keyring"] == str(path)


def test_a_local_keyring_made_before_a_role_existed_gets_a_key_for_it_and_keeps_its_own(tmp_path: Path) -> None:
    path = local_keyring(tmp_path)
    older = Keyring(key for key in load_keyring(path) if key.role != "topic-retention")
    write_private(path, older.to_toml())
    local_keyring(tmp_path)
    keys = load_keyring(path)
    assert {key.role for key in keys if key.can_sign} == set(LOCAL_ROLES)
    assert all(keys.get(key.id) == key for key in older)  # every key it had, unchanged
    assert path.stat().st_mode & 0o777 == 0o600
