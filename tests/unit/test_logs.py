"""Unit tests of a command's log levels: quiet by default, ``-v`` info, ``-vv`` debug, a service's info lines."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from reclaim import logs
from reclaim.logs import asked_verbosity, configure_logging, level_of, log_as_service, log_to_file


@pytest.fixture(autouse=True)
def root_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level, asked = root.handlers[:], root.level, logs._asked
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logs._asked = asked


@pytest.mark.parametrize(("verbose", "quiet", "level"), [
    (0, False, logging.WARNING),   # the default: warnings and the command's own output
    (0, True, logging.WARNING),    # -q: warnings and errors, the same as the default for a one-shot command
    (1, False, logging.INFO),      # -v
    (2, False, logging.DEBUG),     # -vv
    (5, False, logging.DEBUG),
    (True, False, logging.INFO),   # a store_true -v counts as one
    (False, False, logging.WARNING),
    (1, True, logging.INFO),       # -v wins over -q
])
def test_the_root_level_of_a_command(verbose: int | bool, quiet: bool, level: int) -> None:
    configure_logging(verbose=verbose, quiet=quiet)
    assert logging.getLogger().level == level
    assert level_of(verbose) == level


@pytest.mark.parametrize(("verbose", "quiet", "level", "asked"), [
    (0, False, logging.INFO, 0),      # a service's log is its output: info lines by default
    (0, True, logging.WARNING, -1),   # -q keeps it to warnings
    (1, False, logging.INFO, 1),
    (2, False, logging.DEBUG, 2),     # -vv is not lowered to info
])
def test_a_service_logs_info_unless_told_otherwise(verbose: int, quiet: bool, level: int, asked: int) -> None:
    configure_logging(verbose=verbose, quiet=quiet)
    log_as_service()
    assert logging.getLogger().level == level
    assert asked_verbosity() == asked


def test_a_process_that_never_configured_logging_keeps_its_own() -> None:
    logs._asked = None
    logging.getLogger().setLevel(logging.ERROR)
    log_as_service()
    assert logging.getLogger().level == logging.ERROR
    assert asked_verbosity() == 0


def test_info_lines_reach_stderr_with_v_only(capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    logging.getLogger("reclaim.test").info("created the stream")
    logging.getLogger("reclaim.test").warning("record authentication is off")
    err = capsys.readouterr().err
    assert "created the stream" not in err
    assert err.rstrip().endswith("WARNING reclaim.test record authentication is off")
    configure_logging(verbose=1)
    logging.getLogger("reclaim.test").info("created the stream")
    assert capsys.readouterr().err.rstrip().endswith("INFO reclaim.test created the stream")


def test_a_story_told_on_stdout_sends_its_log_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging()
    log_file = log_to_file(tmp_path / "demo.log", terminal=logging.ERROR)
    logging.getLogger("reclaim.test").info("segment created")
    logging.getLogger("reclaim.test").warning("record refused: unauthenticated")
    logging.getLogger("reclaim.test").error("the demo failed")
    err = capsys.readouterr().err
    assert "segment created" not in err and "record refused" not in err and "the demo failed" in err
    written = log_file.read_text()
    assert "INFO reclaim.test segment created" in written and "WARNING reclaim.test record refused" in written
    for handler in logging.getLogger().handlers:
        handler.close()
