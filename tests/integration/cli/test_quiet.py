"""Commands are quiet by default: a one-shot command's terminal holds its own output and warnings, ``-v`` adds
info lines; a service (the worker) logs info lines by default."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import clean_env, run_reclaim

pytestmark = pytest.mark.integration

#: A log line of reclaim's text format: ``2026-12-06 10:58:43,662 INFO reclaim.segments.streams ...``.
LOG_LINE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2},\d{3} (DEBUG|INFO|WARNING|ERROR) ", re.MULTILINE)


def test_streams_create_prints_its_own_line_only_and_info_lines_with_v(
        kafka_bootstrap: str, tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    env = clean_env(tmp_path, RECLAIM_BOOTSTRAP=kafka_bootstrap, RECLAIM_TOPIC_PREFIX=unique_name("quiet") + ".",
                    RECLAIM_PARTITIONS="1", RECLAIM_RECORD_AUTH="off")
    run_reclaim("topics", "create", env=env, check=True)
    # Every segment created used to be an info line (2,002 lines for --segments 2000), and the idempotent
    # producer's first PID request, retried while the broker's coordinator loads, a librdkafka warning.
    created = run_reclaim("streams", "create", "quiet/plain", "--segments", "200", env=env, check=True)
    assert created.stdout == "stream quiet/plain created with 200 segment(s)\n"
    assert created.stderr == ""

    told = run_reclaim("streams", "create", "quiet/told", "--segments", "2", "-v", env=env, check=True)
    assert told.stdout == "stream quiet/told created with 2 segment(s)\n"
    levels = {match.group(1) for match in LOG_LINE.finditer(told.stderr)}
    assert "INFO" in levels and "DEBUG" not in levels, told.stderr

    quiet = run_reclaim("streams", "create", "quiet/q", "--segments", "2", "-q", env=env, check=True)
    assert (quiet.stdout, quiet.stderr) == ("stream quiet/q created with 2 segment(s)\n", "")
