"""Settings read from RECLAIM_* variables: booleans, and one-line errors for what cannot be read."""

from __future__ import annotations

from pathlib import Path

import pytest

from reclaim.cli.main import build_parser, settings_from
from reclaim.settings import Settings, redact_password


@pytest.mark.parametrize(("raw", "expected"), [("true", True), ("1", True), ("ON", True), ("false", False),
                                               ("0", False), (" no ", False)])
def test_booleans_read_the_usual_words(raw: str, expected: bool) -> None:
    assert Settings.from_env({"RECLAIM_FS_CREATE_ROOT": raw}).fs_create_root is expected


def test_a_word_that_is_no_boolean_is_a_one_line_error() -> None:
    with pytest.raises(ValueError, match=r"RECLAIM_FS_CREATE_ROOT: cannot read 'maybe' as true or false \(1/on/"):
        Settings.from_env({"RECLAIM_FS_CREATE_ROOT": "maybe"})


@pytest.mark.parametrize(("variable", "raw", "expected"), [
    ("RECLAIM_PROCESSES", "abc", "a whole number"),
    ("RECLAIM_BATCH_SIZE", "1.5", "a whole number"),
    ("RECLAIM_POLL_TIMEOUT_S", "soon", "a duration, e.g. 90, 90s, 15m, 1h, 7d or 1w"),
    ("RECLAIM_RETRY_DELAYS", "10,a minute", "a comma list of whole numbers"),
])
def test_a_value_of_the_wrong_kind_says_what_the_variable_takes_in_words(variable: str, raw: str,
                                                                           expected: str) -> None:
    with pytest.raises(ValueError) as raised:
        Settings.from_env({variable: raw})
    assert str(raised.value) == f"{variable}: cannot read {raw!r} as {expected}"


def test_the_metadata_location_is_a_url_or_the_sqlite_file() -> None:
    assert Settings.from_env({}, state_dir=Path("/s")).metadata_location == "/s/metadata.db"
    url = "postgresql://reclaim:pw@db-1:5432/reclaim"
    pg = Settings.from_env({"RECLAIM_METADATA_URL": url, "RECLAIM_METADATA_PATH": "/elsewhere.db"})
    assert pg.metadata_location == url, "the URL wins over the path"
    assert pg.metadata_shown == "PostgreSQL db-1:5432/reclaim", "no password in what logs show"
    assert Settings.from_env({"RECLAIM_METADATA_URL": "sqlite:///var/m.db"}).metadata_location == "/var/m.db"
    with pytest.raises(ValueError, match="must be a postgresql://"):
        Settings.from_env({"RECLAIM_METADATA_URL": "mysql://db/reclaim"})
    with pytest.raises(ValueError, match="RECLAIM_METADATA_POOL_SIZE must be at least 1"):
        Settings.from_env({"RECLAIM_METADATA_POOL_SIZE": "0"})


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://u:pw@h:5432/db", "postgresql://u:********@h:5432/db"),
    ("postgresql://u@h/db?sslmode=verify-full&password=pw&sslpassword=kp",
     "postgresql://u@h/db?sslmode=verify-full&password=********&sslpassword=********"),
    ("http://a:b@r1:8081,http://c:d@r2:8081", "http://a:********@r1:8081,http://c:********@r2:8081"),
])
def test_redact_password_masks_user_part_and_query_passwords(url: str, shown: str) -> None:
    assert redact_password(url) == shown


def test_stall_after_is_ten_minutes_unless_a_flag_or_the_environment_says_otherwise(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.from_env({}).stall_after_s == 600
    assert Settings.from_env({"RECLAIM_STALL_AFTER_S": "120"}).stall_after_s == 120
    monkeypatch.setenv("RECLAIM_STALL_AFTER_S", "120")
    assert settings_from(build_parser().parse_args(["worker", "--stall-after-s", "90"])).stall_after_s == 90


@pytest.mark.parametrize("raw", ["0", "-60", "nan", "inf"])
def test_stall_after_must_be_a_positive_number_of_seconds(raw: str) -> None:
    with pytest.raises(ValueError, match=f"^RECLAIM_STALL_AFTER_S must be a positive number of seconds, got {raw}"):
        Settings.from_env({"RECLAIM_STALL_AFTER_S": raw})


@pytest.mark.parametrize(("raw", "strategy"), [("eager", "range,roundrobin"),
                                               ("cooperative-sticky", "cooperative-sticky")])
def test_the_assignment_sets_the_workers_strategy(raw: str, strategy: str) -> None:
    from reclaim.consumers.deletion_worker import WorkerConfig
    from reclaim.services.runtime import topic_names

    settings = Settings.from_env({"RECLAIM_ASSIGNMENT": raw})
    config = WorkerConfig(bootstrap="b:9092", topics=topic_names(settings), assignment=settings.assignment)
    assert config.consumer_config()["partition.assignment.strategy"] == strategy


def test_an_unknown_assignment_is_a_one_line_error() -> None:
    with pytest.raises(ValueError,
                       match=r"^RECLAIM_ASSIGNMENT must be one of eager, cooperative-sticky, got 'sticky'$"):
        Settings.from_env({"RECLAIM_ASSIGNMENT": "sticky"})


@pytest.mark.parametrize(("variable", "limit"), [("RECLAIM_PARTITIONS", 10_000), ("RECLAIM_PROCESSES", 1024),
                                                 ("RECLAIM_CONSUMERS", 256), ("RECLAIM_MAX_ATTEMPTS", 1000),
                                                 ("RECLAIM_DELETE_PARALLELISM", 1024)])
def test_a_count_past_its_limit_is_refused_naming_the_variable(variable: str, limit: int) -> None:
    assert getattr(Settings.from_env({variable: str(limit)}), variable.removeprefix("RECLAIM_").lower()) == limit
    with pytest.raises(ValueError, match=f"{variable} must be at most {limit}, got {limit * 100}"):
        Settings.from_env({variable: str(limit * 100)})
