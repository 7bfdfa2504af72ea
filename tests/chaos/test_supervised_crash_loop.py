"""A supervised ``reclaim worker --processes 2`` in a kill loop while it drains a marked backlog: its children
are SIGKILLed at random (the supervisor restarts them), and the supervisor itself is SIGKILLed now and then
(its children must stop by themselves, none left consuming) and started again. Each kill falls once the
host has deleted a random number more chunks (or a random while has passed) and its victim has lived a
random while, so kills land mid-drain, mid-batch, in a rebalance or in a start-up. The last life drains
the rest; the audit proves nothing live was deleted, nothing was leaked and nothing dead-lettered."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from reclaim.localstack.procs import free_port, pid_alive
from reclaim.producers.topics import TopicNames
from reclaim.storage.bindings import StorageBindings
from reclaim.storage.filesystem import FileSystemChunkStorage
from reclaim.storage.sql_store import open_metadata_store
from tests.support.chaos import Backlog, spawn_worker, stopped
from tests.support.pipeline import Pipeline
from tests.support.supervised import children, counted, starts, wait_children, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHUNKS = 10_000
SUPERVISOR_LIVES = 3
CHILD_KILLS_A_LIFE = 3


def test_supervised_worker_children_and_supervisor_killed_during_a_drain(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = Pipeline(kafka_bootstrap, kafka_topics(partitions=4), open_metadata_store(str(tmp_path / "meta.db")),
                    StorageBindings([FileSystemChunkStorage(fs_root, name="fs-tier2", create=True)]),
                    unique_name("group"))
    try:
        backlog = Backlog.marked(pipe, live=50, segments=20, per_segment=CHUNKS // 20)
        rng = random.Random(20261126)
        # Static members (chaos-0, chaos-1): a restarted child takes its place back without a rebalance wait.
        env = {"RECLAIM_PROCESSES": "2", "RECLAIM_INSTANCE_ID": "chaos", "RECLAIM_BATCH_SIZE": "10"}
        child_kills = 0
        for _ in range(SUPERVISOR_LIVES):
            port = free_port()
            supervisor = spawn_worker(pipe, fs_root, log, RECLAIM_METRICS_PORT=str(port), **env)
            seen = len(starts(log))
            wait_children(log, seen + 2)
            born = dict.fromkeys(children(log), time.monotonic())
            for _ in range(CHILD_KILLS_A_LIFE):
                wait_for_work(rng, port, supervisor, log)
                index, pid = rng.choice(sorted(children(log).items()))
                # A child lives a random while first: some kills fall in its start-up, most mid-drain.
                time.sleep(max(0.0, born[index] + rng.uniform(0.5, 6) - time.monotonic()))
                if pid_alive(pid):
                    before = len(starts(log))
                    os.kill(pid, signal.SIGKILL)
                    child_kills += 1
                    wait_children(log, before + 1)  # the supervisor started it again
                    born[index] = time.monotonic()
            wait_for_work(rng, port, supervisor, log)
            orphans = list(children(log).values())
            supervisor.kill()
            supervisor.wait(timeout=30)
            wait_gone(orphans, timeout_s=60)  # each read the end of its lifeline and stopped
        left = backlog.left()
        assert left > 0, "the backlog ran out before the last kill"
        supervisor = spawn_worker(pipe, fs_root, log, **env)
        try:
            faults = (f"{child_kills} × SIGKILL of a child, {SUPERVISOR_LIVES} × SIGKILL of the supervisor "
                      f"(worker --processes 2; {left:,} chunks left to the last life)")
            backlog.assert_clean(f"supervised worker crash loop ({CHUNKS:,} chunks)", faults, fs_root, supervisor,
                                 log, timeout_s=240)
        finally:
            last = list(children(log).values())
            stopped(supervisor, log)
            wait_gone(last, timeout_s=5)
    finally:
        pipe.close()


def wait_for_work(rng: random.Random, port: int, supervisor: subprocess.Popen[bytes], log: Path) -> None:
    """Until the host has deleted a random few more chunks, or a random while has passed."""
    start, target = counted(port, "reclaim_ledgers_deleted_total"), rng.randint(1, CHUNKS // 100)
    began, patience = time.monotonic(), rng.uniform(0.3, 2)
    while counted(port, "reclaim_ledgers_deleted_total") - start < target and time.monotonic() - began < patience:
        assert supervisor.poll() is None, f"the supervisor died by itself: {log.read_text()[-3000:]}"
        time.sleep(0.05)
