"""Processes that die: SIGKILL between delete and commit, a crash loop while a backlog drains, SIGTERM."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port
from tests.support.cli import run_reclaim
from tests.support.pipeline import Pipeline, inflight, outcomes, read_all, scrape, wait_drained

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def spawn_worker(pipe: Pipeline, fs_root: Path, module: str = "reclaim", **env: str) -> subprocess.Popen[bytes]:
    args = [sys.executable, "-m", module] + (["worker"] if module == "reclaim" else [])
    return subprocess.Popen(args, env={**os.environ, **pipe.worker_env(fs_root, **env)},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def test_sigkill_after_delete_before_commit_then_restart(engine_pipeline: Pipeline, tmp_path: Path) -> None:
    fs_root = tmp_path / "tier2"
    binding = engine_pipeline.bindings.get("fs-tier2")
    chunks = engine_pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 10)
    engine_pipeline.service.mark(chunks)

    dying = spawn_worker(engine_pipeline, fs_root, module="tests.support.crash_after_delete")
    assert dying.wait(timeout=60) == -signal.SIGKILL
    assert not any(binding.exists(c.name) for c in chunks)  # deleted ...
    assert inflight(engine_pipeline) == 10  # ... but nothing committed

    worker = engine_pipeline.worker()
    reports = engine_pipeline.drain(worker, lambda rs: sum(r.stored for r in rs) >= 10)
    assert set(outcomes(reports)) <= {"already-gone", "deleted"}
    worker.close()
    engine_pipeline.workers.remove(worker)
    assert inflight(engine_pipeline) == 0
    assert engine_pipeline.store.get_chunks(c.name for c in chunks) == {}


def test_sigterm_finishes_the_batch_and_commits_and_metrics_are_served(engine_pipeline: Pipeline,
                                                                       tmp_path: Path) -> None:
    binding = engine_pipeline.bindings.get("fs-tier2")
    chunks = engine_pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 20)
    engine_pipeline.service.mark(chunks)
    port = free_port()
    proc = spawn_worker(engine_pipeline, tmp_path / "tier2", RECLAIM_METRICS_PORT=str(port))
    deadline = time.monotonic() + 60
    while any(binding.exists(c.name) for c in chunks):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.2)
    # The counters follow once the batch is final: the deletions when its row cleanup is done, the outcomes
    # when the main thread settles it a moment later, so a scrape may fall between the two.
    expected = ('reclaim_ledgers_deleted_total{ledger_type="offload_ledger"} 20.0',
                'reclaim_deletion_outcomes_total{outcome="deleted"} 20.0')
    while not all(line in (metrics := scrape(port)) for line in expected):
        assert time.monotonic() < deadline, metrics
        time.sleep(0.2)
    assert "reclaim_deletion_batch_delete_seconds_bucket" in metrics
    assert "reclaim_estimated_inflight_deletions" in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, proc.stderr.read().decode() if proc.stderr else ""
    assert inflight(engine_pipeline) == 0


def test_crash_loop_leaves_exactly_the_live_chunks(engine_pipeline: Pipeline, tmp_path: Path) -> None:
    """Kill the worker at random moments 20 times while a backlog drains; then check the invariants."""
    fs_root = tmp_path / "tier2"
    binding = engine_pipeline.bindings.get("fs-tier2")
    live = engine_pipeline.write_chunks(binding, "scope/stream/0.#epoch.0", 30)
    doomed = []
    for segment in range(8):
        batch = engine_pipeline.write_chunks(binding, f"scope/stream/{segment + 1}.#epoch.0", 50)
        engine_pipeline.service.mark(batch)
        doomed += batch
    rng = random.Random(20261122)
    env = {"RECLAIM_INSTANCE_ID": "crash-loop-worker", "RECLAIM_BATCH_SIZE": "10"}
    for _ in range(20):
        proc = spawn_worker(engine_pipeline, fs_root, **env)
        time.sleep(rng.uniform(0.3, 1.5))
        proc.kill()
        proc.wait(timeout=30)
    final = spawn_worker(engine_pipeline, fs_root, **env)
    try:
        wait_drained(engine_pipeline)
    finally:
        final.send_signal(signal.SIGTERM)
        final.wait(timeout=30)

    on_tier2 = set(binding.iter_names())
    assert on_tier2 == {c.name for c in live}, "orphans or deleted live chunks"
    assert set(engine_pipeline.store.get_chunks(c.name for c in live + doomed)) == {c.name for c in live}
    assert inflight(engine_pipeline) == 0
    assert read_all(engine_pipeline, engine_pipeline.topics.dlq, 1, timeout_s=2) == []
    audit = run_reclaim("audit", env={**os.environ, **engine_pipeline.worker_env(fs_root)}, timeout=60)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert "fs-tier2: 30 live, 0 pending deletion, 0 orphans, 0 missing" in audit.stdout
