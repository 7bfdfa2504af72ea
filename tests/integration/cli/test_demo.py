"""``reclaim demo`` — the README's first command — runs end to end and cleans up after itself."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from reclaim.localstack.stack import StackState
from reclaim.settings import Settings
from tests.support.cli import run_reclaim

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: A log line: Python's (2026-12-06 10:58:43,662) or Spark's (26/12/06 10:58:43).
TIMESTAMPED = re.compile(r"\s*\d{2,4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}")


def test_demo_runs_end_to_end(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RECLAIM_")}
    env["RECLAIM_STATE_DIR"] = str(tmp_path / "state")
    result = run_reclaim("demo", env=env, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "subscriber_cut" in out and "round trip ok" in out
    assert "estimated in-flight deletions: 0" in out
    # Per binding: 3 segments of 4 chunks, 2 truncated away and 4 deleted leave 6 live chunks; the
    # filesystem also keeps the stream's committed data (4 chunks) after the aborted txn's 2 go.
    assert "s3-tier2: 6 chunks left" in out and "fs-tier2: 10 chunks left" in out
    assert "aborted transaction: 2 of 2 chunks deleted from tier-2" in out
    # Offload: a stream truncated while a chunk's upload was in flight; both tiers clean after phase 2.
    assert "offloads now: {'cancelled': 1, 'switched': 4}" in out
    assert "next pass: 4 hot copies released, 1 cancelled copy reaped: both to phase 1" in out
    assert "bytes 3072..7992 read back: ok" in out
    assert "audit fs-tier1: 1 live chunks, 0 pending, 0 orphans, 0 missing" in out
    assert "audit s3-tier2: 4 live chunks, 0 pending, 0 orphans, 0 missing" in out
    # Every record is signed with the demo's keyring: a forged (unsigned) pending delete for a live chunk is
    # dead-lettered before any check, and the retention job refuses none of the genuine inputs.
    assert "finished: {'unauthenticated': 1}" in out and "the chunk is still on tier-2" in out
    assert "reclaim_unauthenticated_records_total               1" in out
    assert "0 reject(s)" in out and "1 reject(s)" not in out
    assert "reclaim_ledgers_deleted_total                      14" in out
    # Retention: truncated first at the slow subscriber's cut (a quarter of 1280 bytes per segment), then
    # at the tail both reached, then past the stalled one by the 512-byte maximum (256 left per segment).
    assert "applier: truncated, head now {'0': 320, '1': 320}" in out
    assert "readable now: {'0.#epoch.0': 960, '1.#epoch.0': 960} bytes (what slow has not read yet)" in out
    assert "readable now: {'0.#epoch.0': 256, '1.#epoch.0': 256} bytes: slow's unread data" in out
    assert "audit: 2 live chunks, 0 pending, 0 orphans, 0 missing" in out
    # A Kafka topic: deleted behind the slow group, then a maximum age overrides it.
    assert "partition starts now {0: 8, 1: 5}: deleted behind the slow group, not before" in out
    assert "partition starts now {0: 20, 1: 20}: every record older than two hours deleted" in out
    assert out.count("topic applier: deleted") == 2
    assert "(FORCED_BY_MAX_AGE), signed by retention-job/demo-retention-job" in out
    # The story on stdout, the full log in a file named first; the terminal gets no info lines.
    log_file = tmp_path / "state" / "demo.log"
    assert f"the full log of every part: {log_file}" in out.splitlines()[1]
    logged = log_file.read_text(errors="replace")
    assert " INFO reclaim." in logged
    assert " INFO " not in result.stderr
    # Spark's, Ivy's and py4j's output is in the same file, none of it between the demo's steps: no WARN line, no
    # timestamped line, no Ivy table.
    assert ":: loading settings ::" in logged
    for line in (result.stdout + result.stderr).splitlines():
        assert "WARN" not in line and not TIMESTAMPED.match(line) and not line.startswith(":: "), line
    state = StackState.load(Settings(state_dir=tmp_path / "state").state_dir)
    assert state.kafka_pid is None and state.s3_pid is None  # the demo stopped what it started
