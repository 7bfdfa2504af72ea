"""Unit tests of where Spark's output goes: a child process started while Spark starts writes to the log file,
and this process's stdout and stderr are back afterwards."""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from reclaim import logs
from reclaim.retention.spark_output import (
    LOG4J_ENV,
    PY4J_LOGGERS,
    log4j2_config,
    spark_level,
    spark_log_path,
    spark_output_to,
)


@pytest.fixture(autouse=True)
def py4j_restored() -> Iterator[None]:
    saved = {name: (logging.getLogger(name).level, logging.getLogger(name).handlers[:],
                    logging.getLogger(name).propagate) for name in PY4J_LOGGERS}
    yield
    for name, (level, handlers, propagate) in saved.items():
        logger = logging.getLogger(name)
        for handler in logger.handlers:
            if handler not in handlers:
                handler.close()
        logger.setLevel(level)
        logger.handlers[:] = handlers
        logger.propagate = propagate


def test_the_log_file_is_named_by_time_under_the_state_dir(tmp_path: Path) -> None:
    path = spark_log_path(tmp_path, datetime(2026, 12, 6, 10, 58, 41, tzinfo=UTC))
    assert path.parent == tmp_path / "logs"
    assert path.name == f"spark-20261206T105841Z-{os.getpid()}.log"


@pytest.mark.parametrize(("verbosity", "level"), [(-1, "WARN"), (0, "WARN"), (1, "INFO"), (2, "DEBUG"), (3, "DEBUG")])
def test_spark_logs_at_the_level_reclaim_was_asked_for(verbosity: int, level: str) -> None:
    assert spark_level(verbosity) == level


def test_the_log4j2_configuration_writes_to_the_file_at_the_level(tmp_path: Path) -> None:
    config = log4j2_config(tmp_path / "spark.log", "WARN").read_text()
    assert f"appender.file.fileName = {tmp_path / 'spark.log'}" in config
    assert "rootLogger.level = WARN" in config and "rootLogger.appenderRef.file.ref = file" in config


def test_a_child_started_in_the_block_writes_to_the_file_and_the_terminal_is_back_after(
        tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(logs, "_asked", 1)
    log_file = tmp_path / "logs" / "spark.log"
    with spark_output_to(log_file):
        assert os.environ[LOG4J_ENV].endswith(".log4j2.properties")
        subprocess.run(["sh", "-c", "echo ':: loading settings ::'; echo 'WARN NativeCodeLoader' >&2"], check=True)
        logging.getLogger("py4j.clientserver").info("Error while sending or receiving.")
        logging.getLogger("py4j.java_gateway").warning("the JVM went away")
    print("the story")
    assert LOG4J_ENV not in os.environ
    terminal = capfd.readouterr()
    assert (terminal.out, terminal.err) == ("the story\n", "")
    written = log_file.read_text()
    assert ":: loading settings ::" in written and "WARN NativeCodeLoader" in written
    assert "the JVM went away" in written and "Error while sending" not in written  # py4j: warnings only
    assert "rootLogger.level = INFO" in log_file.with_suffix(".log4j2.properties").read_text()  # -v
