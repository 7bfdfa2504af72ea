"""The README's five-minute tour, run as a newcomer runs it: its shell block as it stands, in a fresh
directory, with nothing of reclaim on the PATH until the block's first line puts it there. It must show a
deletion: four chunks written, three truncated away and deleted by phase 2, the audit clean before and
after."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[3]
#: The tour's metrics port; the test gives the worker a free one instead, the only change made to the block.
TOUR_METRICS_PORT = "9108"


def tour_block(readme: str, heading: str = "## A five-minute tour") -> str:
    """The first ``sh`` block under the README's ``heading``."""
    section = readme.split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```sh\n(.*?)```", section, re.DOTALL)
    assert found, f"the README's {heading!r} has no sh block"
    return found.group(1)


def run_block(block: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``block`` run by ``bash -e`` in ``tmp_path`` as a newcomer runs it: the checkout's `make venv` as .venv,
    nothing of reclaim on the PATH nor in the environment; the local stack stopped afterwards."""
    script = tmp_path / "tour.sh"
    script.write_text(block)
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))  # the checkout's `make venv`
    path = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep)
                           if Path(p).resolve() != (Path(sys.prefix) / "bin").resolve())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RECLAIM_", "VIRTUAL_ENV"))}
    env["PATH"] = path
    try:
        return subprocess.run(["bash", "-e", str(script)], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=600, check=False)
    finally:  # a failed line leaves the stack up: stop it
        subprocess.run([str(Path(sys.prefix) / "bin" / "reclaim"), "local", "down"], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120, check=False)


def test_readme_tour_shows_a_deletion(tmp_path: Path) -> None:
    block = tour_block((ROOT / "README.md").read_text())
    assert block.startswith("source .venv/bin/activate"), "the tour first puts reclaim on the PATH"
    assert block.count(TOUR_METRICS_PORT) == 2, block
    result = run_block(block.replace(TOUR_METRICS_PORT, str(free_port())), tmp_path)
    out = result.stdout
    assert result.returncode == 0, f"the tour stopped (exit {result.returncode}):\n{out}\n{result.stderr}"
    assert "4000000 bytes written in 4 event(s); 4 chunk(s)" in out, out
    audits = re.findall(r"^total: (\d+) live, (\d+) pending, \d+ recent, \d+ cleaning, (\d+) orphans, (\d+) missing",
                        out, re.MULTILINE)
    assert audits == [("4", "0", "0", "0"), ("1", "0", "0", "0")], out
    assert "stream scope/orders: truncated" in out
    inflight = [line for line in out.splitlines() if line.isdigit()]
    assert inflight == ["3", "0"], out  # published, then deleted
    assert 'reclaim_deletion_outcomes_total{outcome="deleted"} 3.0' in out, out
    assert re.search(r"MANUAL +signer=admin/\S+ +cut=\{\"0\": 3000000\}", out), out
    assert "local stack stopped" in out
    # The tour's stream is on the filesystem binding, its three truncated chunks gone from the disk.
    chunks = [p.name for p in (tmp_path / ".reclaim" / "tier2" / "chunks").rglob("*") if p.is_file()]
    assert len(chunks) == 1 and chunks[0].startswith("0.#epoch.0.E-0-O-3000000."), chunks


def test_readme_topic_tour_deletes_behind_the_slow_group_and_the_maximum_overrides_it(tmp_path: Path) -> None:
    block = tour_block((ROOT / "README.md").read_text(), "### Retention for a Kafka topic you already have")
    assert block.startswith("source .venv/bin/activate"), "the tour first puts reclaim on the PATH"
    result = run_block(block, tmp_path)
    out = result.stdout
    assert result.returncode == 0, f"the tour stopped (exit {result.returncode}):\n{out}\n{result.stderr}"
    plans = re.findall(r"^  partition 0: (.*)$", out, re.MULTILINE)
    assert plans == ["0 -> 30: 30 record(s), at the slowest required group's committed offset (held by slow)",
                     "30 -> 100: 70 record(s), the maximum age overrides the groups: at the first record younger "
                     "than it"], out
    assert re.search(r"^orders: cut published \(fast \{0: 100\}, slow \{0: 30\}\)$", out, re.MULTILINE), out
    assert "1 decision(s) applied, 1 deleted" in out, out
    assert re.search(r"orders\[0\] 0 -> 30 \(30 records\): AT_BOUND held by slow; signed by retention-job/", out), out
    assert "local stack stopped" in out
