"""The library's settings: a config file by ``str`` path, under the environment and the overrides, nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest

import reclaim
from reclaim.errors import ReclaimError


def test_load_settings_reads_a_file_by_str_path_under_the_environment_and_the_overrides(tmp_path: Path) -> None:
    config = tmp_path / "reclaim.toml"
    config.write_text('bootstrap = "file:9092"\ntopic_prefix = "file."\ngroup_id = "file-group"\n')
    env = {"RECLAIM_TOPIC_PREFIX": "env."}
    settings = reclaim.load_settings(str(config), env=env, group_id="flag-group")
    assert (settings.bootstrap, settings.topic_prefix, settings.group_id) == ("file:9092", "env.", "flag-group")
    assert env == {"RECLAIM_TOPIC_PREFIX": "env."}


def test_load_settings_from_the_environment_alone() -> None:
    settings = reclaim.load_settings(env={"RECLAIM_BOOTSTRAP": "env:9092", "RECLAIM_PARTITIONS": "8"})
    assert (settings.bootstrap, settings.partitions) == ("env:9092", 8)
    assert reclaim.load_settings(env={}) == reclaim.Settings.from_env({})


def test_a_missing_config_file_is_one_reclaim_error(tmp_path: Path) -> None:
    with pytest.raises(ReclaimError, match="does not exist"):
        reclaim.load_settings(str(tmp_path / "absent.toml"), env={})
