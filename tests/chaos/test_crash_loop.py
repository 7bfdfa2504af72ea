"""A real ``reclaim worker`` SIGKILLed at random 100 times while it drains 20,000 marked chunks: each life
is killed after a random share of the backlog (or a random while after it starts), so every kill falls
mid-drain — between a delete and its commit, mid-batch, during a rebalance or start-up — whatever the
machine's speed. The last life drains the rest; the audit proves nothing live was deleted, nothing
was leaked and nothing dead-lettered."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port
from reclaim.producers.topics import TopicNames
from tests.support.chaos import Backlog, filesystem_pipeline, spawn_worker, stopped
from tests.support.pipeline import scrape

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KILLS = 100
CHUNKS = 20_000


def test_worker_killed_100_times_during_a_20000_chunk_drain(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = filesystem_pipeline(kafka_bootstrap, kafka_topics(partitions=4), tmp_path, unique_name("group"))
    try:
        backlog = Backlog.marked(pipe, live=50, segments=20, per_segment=CHUNKS // 20)
        rng = random.Random(20261123)
        # One static member (its instance id) comes back in the dead one's place at once, without waiting
        # for the session to time out: the kills, not the group's timeouts, set the pace.
        env = {"RECLAIM_INSTANCE_ID": "crash-loop-worker", "RECLAIM_BATCH_SIZE": "20"}
        # A life is killed once it has deleted a random number of chunks (read off its own metrics), or
        # a random while after it was started; the numbers are small enough for the backlog to outlive
        # the kills, so every kill falls mid-drain.
        working = 0  # kills of a life that had deleted something (the others fell in its start-up)
        for _ in range(KILLS):
            port = free_port()
            worker = spawn_worker(pipe, fs_root, log, RECLAIM_METRICS_PORT=str(port), **env)
            started, target, patience = time.monotonic(), rng.randint(1, CHUNKS // (2 * KILLS)), rng.uniform(0.3, 4)
            while deleted_by(port) < target and time.monotonic() - started < patience:
                assert worker.poll() is None, f"the worker died by itself: {log.read_text()[-3000:]}"
                time.sleep(0.02)
            working += deleted_by(port) > 0
            worker.kill()
            worker.wait(timeout=30)
        assert backlog.left() > 0, "the backlog ran out before the last kill"
        worker = spawn_worker(pipe, fs_root, log, **env)
        try:
            faults = f"{KILLS} × SIGKILL of the worker at random ({working} mid-drain, the rest in start-up)"
            backlog.assert_clean(f"worker crash loop ({CHUNKS:,} chunks)", faults, fs_root, worker, log,
                                 timeout_s=300)
        finally:
            stopped(worker, log)
    finally:
        pipe.close()


def deleted_by(port: int) -> float:
    """How many chunks the worker serving metrics on ``port`` has deleted (0 before it serves them)."""
    try:
        metrics = scrape(port)
    except OSError:
        return 0
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("reclaim_ledgers_deleted_total{"))
