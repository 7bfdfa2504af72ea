"""``reclaim config show --sources``: where each value came from, a flag, a RECLAIM_* variable, the config
file and its key, or the default; secrets stay masked and plain ``config show`` is unchanged."""

from __future__ import annotations

import json
from pathlib import Path

from reclaim.cli.config import DEFAULT, Source, kafka_sources, setting_sources
from tests.support.cli import clean_env, run_reclaim

FILE = Path("reclaim.toml")


def test_the_precedence_decides_each_source() -> None:
    environ = {"RECLAIM_TOPIC_PREFIX": "env.", "RECLAIM_BATCH_SIZE": "9", "RECLAIM_BOOTSTRAP": "file:1",
               "RECLAIM_GROUP_ID": ""}
    from_file = {"RECLAIM_BOOTSTRAP": "file:1"}
    sources = setting_sources(["bootstrap", "topic_prefix", "batch_size", "partitions", "group_id"],
                              {"topic_prefix": "flag.", "bootstrap": None}, environ, from_file, FILE)
    assert sources == {"bootstrap": Source("config file", "bootstrap", "reclaim.toml"),
                       "topic_prefix": Source("flag", "--topic-prefix"),
                       "batch_size": Source("environment", "RECLAIM_BATCH_SIZE"),
                       "partitions": DEFAULT, "group_id": DEFAULT}  # an empty variable sets nothing
    assert [str(s) for s in sources.values()] == ["config file reclaim.toml: bootstrap", "flag --topic-prefix",
                                                 "environment RECLAIM_BATCH_SIZE", "default", "default"]


def test_a_secret_read_from_a_file_comes_from_where_the_file_was_named() -> None:
    environ = {"RECLAIM_S3_SECRET_KEY_FILE": "/run/secrets/s3"}
    sources = setting_sources(["s3_secret_key", "s3_secret_key_file"], {}, environ, {}, None)
    assert sources["s3_secret_key"] == Source("environment", "RECLAIM_S3_SECRET_KEY_FILE",
                                              via="the text of the file s3_secret_key_file names")
    assert sources["s3_secret_key"].to_dict() == {"from": "environment", "name": "RECLAIM_S3_SECRET_KEY_FILE",
                                                  "via": "the text of the file s3_secret_key_file names"}


def test_kafka_properties_name_the_table_key_or_the_variable() -> None:
    environ = {"RECLAIM_KAFKA_SASL_USERNAME": "u", "RECLAIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}
    sources = kafka_sources(["sasl.username", "security.protocol"], environ,
                            {"RECLAIM_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, FILE)
    assert sources == {"sasl.username": Source("environment", "RECLAIM_KAFKA_SASL_USERNAME"),
                       "security.protocol": Source("config file", "[kafka] security.protocol", "reclaim.toml")}


def write_config(tmp_path: Path) -> Path:
    config = tmp_path / "reclaim.toml"
    config.write_text('bootstrap = "file:1"\ntopic_prefix = "file."\nbatch_size = 7\ns3_endpoint = "http://s3:9000"\n'
                      's3_access_key = "ak"\ns3_secret_key = "file-secret"\n'
                      '[kafka]\n"security.protocol" = "SASL_SSL"\n"sasl.password" = "file-pw"\n')
    return config


def test_the_command_says_where_each_value_came_from(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = clean_env(tmp_path, RECLAIM_BATCH_SIZE="9", RECLAIM_KAFKA_SASL_USERNAME="worker")
    result = run_reclaim("--config", str(config), "config", "show", "--sources", "--topic-prefix", "flag.",
                         env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"# config file: {config} (flag --config)"
    for line in ("bootstrap = file:1  # config file " + f"{config}: bootstrap",
                 "topic_prefix = flag.  # flag --topic-prefix",
                 "batch_size = 9  # environment RECLAIM_BATCH_SIZE",
                 "partitions = 4  # default",
                 f"state_dir = {tmp_path / 'state'}  # environment RECLAIM_STATE_DIR",
                 f"s3_secret_key = ********  # config file {config}: s3_secret_key",
                 f"kafka.sasl.password = ********  # config file {config}: [kafka] sasl.password",
                 "kafka.sasl.username = worker  # environment RECLAIM_KAFKA_SASL_USERNAME"):
        assert line in lines, result.stdout
    assert "file-secret" not in result.stdout and "file-pw" not in result.stdout


def test_json_sources_beside_the_settings_and_plain_show_unchanged(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    env = clean_env(tmp_path, RECLAIM_CONFIG=str(config))
    shown = json.loads(run_reclaim("config", "show", "--json", "--sources", env=env, timeout=60).stdout)
    assert shown["bootstrap"] == "file:1" and shown["s3_secret_key"] == "********"
    assert shown["config_file"] == {"path": str(config), "from": "environment", "name": "RECLAIM_CONFIG"}
    assert shown["sources"]["batch_size"] == {"from": "config file", "name": "batch_size", "file": str(config)}
    assert shown["sources"]["partitions"] == {"from": "default"}
    assert shown["sources"]["kafka"]["security.protocol"] == {"from": "config file", "file": str(config),
                                                              "name": "[kafka] security.protocol"}
    plain = json.loads(run_reclaim("config", "show", "--json", env=env, timeout=60).stdout)
    assert "sources" not in plain and "config_file" not in plain
    assert {key: value for key, value in shown.items() if key not in ("sources", "config_file")} == plain
    text = run_reclaim("config", "show", env=env, timeout=60).stdout.splitlines()
    assert "bootstrap = file:1" in text and not any("#" in line for line in text)
