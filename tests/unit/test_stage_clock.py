"""The benchmarks' stage clocks: off, one shared do-nothing context; on, each stage's CPU seconds and runs
written when the process exits."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reclaim import stage_clock

PROGRAM = """
from reclaim.stage_clock import stage
for _ in range(3):
    with stage("decode"):
        sum(range(20000))
with stage("delete"):
    pass
"""


def test_on_it_writes_each_stages_seconds_and_runs(tmp_path: Path) -> None:
    out = tmp_path / "stages.json"
    subprocess.run([sys.executable, "-c", PROGRAM], env={"RECLAIM_STAGE_CPU": str(out), "PATH": ""}, check=True,
                   timeout=60)
    written = json.loads(out.read_text())
    assert written["calls.decode"] == 3 and written["calls.delete"] == 1
    assert written["decode"] > 0 and written["delete"] >= 0
    assert set(written) == {"decode", "delete", "calls.decode", "calls.delete"}


def test_off_it_is_one_shared_context_that_counts_nothing() -> None:
    assert not stage_clock.enabled()
    assert stage_clock.stage("decode") is stage_clock.stage("delete")
    with stage_clock.stage("decode"):
        pass
    assert stage_clock.totals() == {} and stage_clock.calls() == {}
