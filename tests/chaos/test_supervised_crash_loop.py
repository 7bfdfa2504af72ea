"""A supervised ``reclaim worker --processes 2`` in a kill loop while it drains a marked backlog: its children
are SIGKILLed at random (the supervisor restarts them), and the supervisor itself is SIGKILLed now and then
(its children must stop by themselves, none left consuming) and started again. The kills fall at random
shares of the backlog deleted (5 to 75 %), so they land mid-drain, mid-batch, in a rebalance or in a
start-up, and the last life drains the rest; the audit proves nothing live was deleted, nothing was leaked
and nothing dead-lettered."""

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
from tests.support.chaos import Backlog, filesystem_pipeline, spawn_worker, stopped
from tests.support.supervised import children, counted, starts, wait_children, wait_gone

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CHUNKS = 20_000
SUPERVISOR_LIVES = 3
CHILD_KILLS_A_LIFE = 3


def test_supervised_worker_children_and_supervisor_killed_during_a_drain(
        kafka_bootstrap: str, kafka_topics: Callable[..., TopicNames], tmp_path: Path,
        unique_name: Callable[[str], str]) -> None:
    fs_root, log = tmp_path / "tier2", tmp_path / "worker.log"
    pipe = filesystem_pipeline(kafka_bootstrap, kafka_topics(partitions=4), tmp_path, unique_name("group"))
    supervisor: subprocess.Popen[bytes] | None = None
    try:
        backlog = Backlog.marked(pipe, live=50, segments=20, per_segment=CHUNKS // 20)
        rng = random.Random(20261126)
        # Static members (chaos-0, chaos-1): a restarted child takes its place back without a rebalance wait.
        env = {"RECLAIM_PROCESSES": "2", "RECLAIM_INSTANCE_ID": "chaos", "RECLAIM_BATCH_SIZE": "10"}
        # Where the kills fall, as shares of the backlog deleted: drawn up front, so that every kill falls
        # mid-drain and the last life has a good share to drain, whatever the machine's speed.
        kill_at = iter(sorted(rng.uniform(0.05, 0.75) * CHUNKS
                              for _ in range(SUPERVISOR_LIVES * (CHILD_KILLS_A_LIFE + 1))))
        child_kills = 0
        for _ in range(SUPERVISOR_LIVES):
            carried = len(backlog.doomed) - backlog.left()  # this life's counters start at 0
            port = free_port()
            supervisor = spawn_worker(pipe, fs_root, log, RECLAIM_METRICS_PORT=str(port), **env)
            first = len(starts(log))
            wait_children(log, first + 2)
            for _ in range(CHILD_KILLS_A_LIFE):
                wait_deleted(next(kill_at) - carried, port, supervisor, log)
                # A child running now (a killed one may still wait out its backoff), without waiting for
                # restarts: the drain goes on meanwhile and the kills keep to their shares.
                victim = rng.choice(running(log))
                os.kill(victim, signal.SIGKILL)
                wait_gone([victim], timeout_s=10)  # dead, so never picked twice
                child_kills += 1
            # Every killed child was started again before the supervisor goes.
            wait_children(log, first + 2 + CHILD_KILLS_A_LIFE, timeout_s=90)
            wait_deleted(next(kill_at) - carried, port, supervisor, log)
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
        if supervisor is not None and supervisor.poll() is None:  # a failure mid-loop: its children follow it
            supervisor.kill()
            supervisor.wait(timeout=30)
        pipe.close()


def running(log: Path, timeout_s: float = 30) -> list[int]:
    """The children running now; once one is, when all wait out their backoff."""
    deadline = time.monotonic() + timeout_s
    while not (alive := [pid for pid in children(log).values() if pid_alive(pid)]):
        assert time.monotonic() < deadline, f"no child running: {log.read_text()[-3000:]}"
        time.sleep(0.05)
    return alive


def wait_deleted(target: float, port: int, supervisor: subprocess.Popen[bytes], log: Path,
                 timeout_s: float = 120) -> None:
    """Until the supervisor's endpoint counts ``target`` chunks deleted in this life."""
    deadline = time.monotonic() + timeout_s
    while counted(port, "reclaim_ledgers_deleted_total") < target:
        assert supervisor.poll() is None, f"the supervisor died by itself: {log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"the drain stalled: {log.read_text()[-3000:]}"
        time.sleep(0.05)
